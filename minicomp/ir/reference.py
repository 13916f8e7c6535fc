"""A ComputeDAG evaluated with numpy, tensor by tensor: the reference for programs of a task that has no
hand-written one (a model's layers, for ``minicomp collect --model``).

No schedule, no lowering and no emitted code: each computed tensor's body is evaluated once over its whole
index space with numpy arrays (``ir.evaluate``'s table: C's casts, floor ``//`` and ``%``), its axes as
broadcast ``arange`` s. So it shares nothing with what it checks but the tensor expressions themselves.

- A reduction runs over its reduce axes flattened, a chunk of them at a time (at most :data:`CHUNK_ELEMENTS`
  values of the body at once), and accumulates floats in float64 and integers in int64 before the cast to the
  tensor's type: closer to the exact result than any order a GPU sums in. ``init`` is combined last, as the IR
  combines it (``combiner(init, total)``).
- A read is a gather; indices are clipped into the tensor's shape first, since ``select`` evaluates both of its
  branches here (a padded convolution reads row -1 in the branch its guard discards).
- Floating-point errors (a division by zero in a discarded branch, an overflow) are not raised.

    outs = evaluate_dag(dag, [x, w])      # one array per dag.outputs, in order
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from minicomp.errors import ExprError, TEError
from minicomp.ir.dag import ComputeDAG
from minicomp.ir.evaluate import evaluate
from minicomp.ir.expr import walk
from minicomp.ir.ops import FLOAT_DTYPES, NP_DTYPE, Op
from minicomp.ir.te import Tensor, reduce_identity

CHUNK_ELEMENTS = 1 << 22       # body values evaluated at once in a reduction (~32 MB per float64 temporary)

_COMBINE = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}


def evaluate_dag(dag: ComputeDAG, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
  """The values of ``dag.outputs`` for ``inputs`` (one array per ``dag.placeholders``, in order, each of the
  placeholder's shape; cast to its dtype). A TEError for inputs that do not fit."""
  phs = dag.placeholders
  if len(inputs) != len(phs):
    names = ", ".join(p.name for p in phs)
    raise TEError(f"evaluate_dag: the DAG has {len(phs)} inputs ({names}), given {len(inputs)}")
  values: dict[int, np.ndarray] = {}
  for p, a in zip(phs, inputs):
    a = np.asarray(a)
    if a.shape != p.shape:
      raise TEError(f"evaluate_dag: input {p.name!r} has shape {p.shape}, given an array of shape {a.shape}")
    values[id(p)] = a.astype(NP_DTYPE[p.dtype], copy=False)

  def loads(node, idx):
    arr = values[id(node.arg)]
    at = tuple(np.clip(np.asarray(i, np.int64), 0, n - 1) for i, n in zip(idx, arr.shape))
    return arr[at]

  with np.errstate(all="ignore"):
    for t in dag.tensors:
      if not t.is_placeholder: values[id(t)] = _tensor(t, loads)
  return [values[id(t)] for t in dag.outputs]


def _axes(t: Tensor, lead: int) -> dict[str, np.ndarray]:
  """Each spatial axis of ``t`` as an arange broadcast along its own dimension (after ``lead`` leading ones)."""
  nd = lead + len(t.shape)
  return {a.name: np.arange(n).reshape([n if j == lead + i else 1 for j in range(nd)])
          for i, (a, n) in enumerate(zip(t.axes, t.shape))}


def _eval(e, env, loads):
  try:
    return evaluate(e, env, np, loads)
  except ExprError as err:
    raise TEError(f"evaluate_dag: cannot evaluate {str(e)[:200]}: {err}") from None


def _tensor(t: Tensor, loads) -> np.ndarray:
  dt = NP_DTYPE[t.dtype]
  red = t.reduce
  if red is None:
    if any(n.op is Op.REDUCE for n in walk(t.body)):
      raise TEError(f"evaluate_dag: tensor {t.name!r} has a reduction inside its body, not at its top")
    return np.broadcast_to(np.asarray(_eval(t.body, _axes(t, 0), loads)), t.shape).astype(dt)
  body = t.body.src[0]
  acc_dt = np.float64 if t.dtype in FLOAT_DTYPES else np.int64 if t.dtype != "bool" else np.bool_
  ext = [int(a.extent.arg) for a in red.axes]
  total_r = math.prod(ext)
  chunk = max(1, CHUNK_ELEMENTS // max(1, math.prod(t.shape)))
  combine = _COMBINE[red.combiner]
  acc = np.full(t.shape, _eval(reduce_identity(red.combiner, t.dtype), {}, loads), acc_dt)
  spatial = _axes(t, 1)
  for r0 in range(0, total_r, chunk):
    flat = np.arange(r0, min(total_r, r0 + chunk))
    env = dict(spatial)
    for a, idx in zip(red.axes, np.unravel_index(flat, ext)):
      env[a.name] = idx.reshape((-1,) + (1,) * len(t.shape))
    v = np.broadcast_to(np.asarray(_eval(body, env, loads)), (len(flat),) + t.shape).astype(acc_dt)
    acc = combine(acc, combine.reduce(v, axis=0))
  if red.init is not None:
    acc = combine(np.asarray(_eval(red.init, _axes(t, 0), loads)).astype(acc_dt), acc)
  return np.broadcast_to(acc, t.shape).astype(dt)
