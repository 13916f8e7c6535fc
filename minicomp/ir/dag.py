"""ComputeDAG: the tensors of a computation in topological order, plus access analysis.

The analysis answers what the sketch rules ask (Ansor's ``AccessAnalyzer``):

- ``is_injective``: a compute without reduction;
- ``is_elementwise``: injective and every read uses exactly the output axes in order;
- ``is_strict_inlinable``: elementwise with no expensive intrinsic and no branch;
- ``has_data_reuse`` (Ansor's NeedsMultiLevelTiling): >= 2 inputs miss an output axis of
  extent > 1, or >= 1 does and the op reduces;
- ``has_fusible_consumer``: exactly one consumer, which reads this stage elementwise;
- ``has_more_reduction_parallel``: the product of reduce extents exceeds the product of
  spatial extents (cross-thread reduction / rfactor pays off).
"""
from __future__ import annotations

import math
from collections import Counter
from typing import Sequence

from minicomp.errors import TEError
from minicomp.ir.expr import Expr, walk
from minicomp.ir.ops import EXPENSIVE_INTRINSICS, FLOAT_DTYPES, Op
from minicomp.ir.te import Tensor


class ComputeDAG:
  """The tensors reachable from ``outputs``, inputs first (a topological order, deterministic)."""

  def __init__(self, outputs: Sequence[Tensor]):
    if isinstance(outputs, Tensor): outputs = [outputs]
    self.outputs = list(outputs)
    for t in self.outputs:
      if not isinstance(t, Tensor): raise TEError(f"ComputeDAG outputs must be Tensors, got {t!r}")
    order: list[Tensor] = []
    state: dict[int, int] = {}        # id -> 1 while its inputs are visited (on the path), 2 when placed
    for root in self.outputs:         # depth-first, inputs in order, iteratively (chains may be thousands deep)
      stack = [(root, False)]
      while stack:
        t, placed = stack.pop()
        if placed:
          state[id(t)] = 2; order.append(t)
          continue
        if state.get(id(t)) == 2: continue
        if state.get(id(t)) == 1: raise TEError(f"cycle through tensor {t.name!r}")
        state[id(t)] = 1
        stack.append((t, True))
        for i in reversed(t.inputs):
          if state.get(id(i)) == 1: raise TEError(f"cycle through tensor {i.name!r}")
          if state.get(id(i)) != 2: stack.append((i, False))
    dup = {n for n, c in Counter(t.name for t in order).items() if c > 1}
    if dup: raise TEError(f"tensor names must be unique in a DAG; repeated: {sorted(dup)}")
    self.tensors = order

  @property
  def placeholders(self) -> list[Tensor]: return [t for t in self.tensors if t.is_placeholder]

  def consumers(self, t: Tensor) -> list[Tensor]:
    return [c for c in self.tensors if any(i is t for i in c.inputs)]

  def flop_count(self) -> int:
    """Floating-point operations of one evaluation (multiply-add counts 2)."""
    total = 0
    for t in self.tensors:
      if t.is_placeholder: continue
      body = t.body.src[0] if t.body.op is Op.REDUCE else t.body
      n_ops = sum(1 for n in walk(body) if n.op not in (Op.CONST, Op.VAR, Op.LOAD) and n.dtype in FLOAT_DTYPES)
      n_ops += 1 if t.body.op is Op.REDUCE else 0
      total += max(n_ops, 1) * math.prod(t.shape) * math.prod(int(a.extent.arg) for a in t.reduce_axes)
    return total

  def __repr__(self) -> str:
    lines = []
    for t in self.tensors:
      if t.is_placeholder: lines.append(f"{t.name} = placeholder({list(t.shape)}, {t.dtype})")
      else: lines.append(f"{t.name}[{', '.join(a.name for a in t.axes)}] = {t.body}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# access analysis

def reads(t: Tensor) -> dict[Tensor, list[tuple[Expr, ...]]]:
  """For each tensor ``t`` reads: the list of index tuples it is read with."""
  out: dict[Tensor, list[tuple[Expr, ...]]] = {}
  if t.body is None: return out
  for n in walk(t.body):
    if n.op is Op.LOAD: out.setdefault(n.arg, []).append(n.src)
  return out


def _axis_vars(t: Tensor) -> list[str]: return [a.name for a in t.axes]


def is_injective(t: Tensor) -> bool:
  return not t.is_placeholder and t.body.op is not Op.REDUCE


def is_elementwise(t: Tensor) -> bool:
  """Every read is ``X[i, j, ...]`` with exactly the output axes in order."""
  if not is_injective(t): return False
  names = _axis_vars(t)
  for src, idxs in reads(t).items():
    for idx in idxs:
      if [e.arg if e.op is Op.VAR else None for e in idx] != names: return False
  return True


def has_branch(t: Tensor) -> bool:
  return t.body is not None and any(n.op is Op.SELECT for n in walk(t.body))


def has_expensive_op(t: Tensor) -> bool:
  return t.body is not None and any(n.op is Op.CALL and n.arg in EXPENSIVE_INTRINSICS for n in walk(t.body))


def is_strict_inlinable(t: Tensor) -> bool:
  """Ansor's IsStrictlyInlineable: simple elementwise reads, no expensive op, no branch."""
  return is_elementwise(t) and not has_expensive_op(t) and not has_branch(t)


def kept_axes(shape) -> int:
  """How many leading axes of a reduction's shape, kept with its reduced axes as 1s (keepdims), are not reduced:
  all but the trailing 1s (a leading 1, a batch of one, is an axis like any other)."""
  k = len(shape)
  while k > 0 and shape[k - 1] == 1: k -= 1
  return k


def has_data_reuse(t: Tensor) -> bool:
  """Ansor's NeedsMultiLevelTiling: some inputs are reused across an output axis."""
  if t.is_placeholder: return False
  missing = 0
  for src, idxs in reads(t).items():
    used = set()
    for idx in idxs:
      for e in idx: used |= {n.arg for n in walk(e) if n.op is Op.VAR}
    if any(a.name not in used and int(a.extent.arg) > 1 for a in t.axes): missing += 1
  return missing >= 2 or (missing >= 1 and bool(t.reduce_axes))


def has_fusible_consumer(dag: ComputeDAG, t: Tensor) -> bool:
  """Exactly one consumer, which is elementwise in ``t`` and has the same shape."""
  cons = dag.consumers(t)
  if len(cons) != 1: return False
  c = cons[0]
  if c.shape != t.shape or not is_injective(c): return False
  names = _axis_vars(c)
  return all([e.arg if e.op is Op.VAR else None for e in idx] == names for idx in reads(c).get(t, []))


def has_more_reduction_parallel(t: Tensor) -> bool:
  """Product of reduce extents > product of spatial extents."""
  if not t.reduce_axes: return False
  return math.prod(int(a.extent.arg) for a in t.reduce_axes) > math.prod(t.shape)


def classify(t: Tensor) -> str:
  """One word for a stage: placeholder | elementwise | injective | reduction | data_reuse."""
  if t.is_placeholder: return "placeholder"
  if has_data_reuse(t): return "data_reuse"
  if t.reduce_axes: return "reduction"
  return "elementwise" if is_elementwise(t) else "injective"
