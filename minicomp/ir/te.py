"""Tensor expressions: placeholders and computes, TVM-TE style.

::

    A = placeholder((M, K), "float32", name="A")
    B = placeholder((K, N), "float32", name="B")
    k = reduce_axis(K, name="k")
    C = compute((M, N), lambda i, j: sum(A[i, k] * B[k, j], axis=k), name="C")

A compute body is an :class:`~minicomp.ir.expr.Expr` over the tensor's spatial axes
(named after the lambda's parameters) and, for reductions, a single top-level REDUCE node.
"""
from __future__ import annotations

import builtins
import inspect
from typing import Callable, Sequence

from minicomp.errors import TEError
from minicomp.ir.expr import Expr, ExprLike, ExprOps, IterVar, ReduceArg, as_expr, binary, const, var, walk
from minicomp.ir.ops import DTYPES, FLOAT_DTYPES, Op, int_range


class Tensor:
  """A placeholder (input) or a computed tensor. Identity-hashed: each is one node of the DAG."""

  def __init__(self, name: str, shape: Sequence[int], dtype: str, axes: tuple[IterVar, ...] = (),
               body: Expr | None = None, tag: str = ""):
    if dtype not in DTYPES: raise TEError(f"tensor {name!r}: unknown dtype {dtype!r}; known: {DTYPES}")
    for d in shape:
      if not isinstance(d, int) or isinstance(d, bool) or d <= 0:
        raise TEError(f"tensor {name!r}: every dimension must be a positive int, got shape {tuple(shape)}")
    self.name, self.shape, self.dtype, self.axes, self.body, self.tag = name, tuple(shape), dtype, axes, body, tag

  @property
  def is_placeholder(self) -> bool: return self.body is None
  @property
  def ndim(self) -> int: return len(self.shape)

  @property
  def reduce(self) -> ReduceArg | None:
    """The ReduceArg when the body is a reduction."""
    return self.body.arg if self.body is not None and self.body.op is Op.REDUCE else None

  @property
  def reduce_axes(self) -> tuple[IterVar, ...]:
    r = self.reduce
    return r.axes if r is not None else ()

  @property
  def inputs(self) -> list["Tensor"]:
    """Tensors this one reads, in first-read order."""
    if self.body is None: return []
    out: list[Tensor] = []
    for n in walk(self.body):
      if n.op is Op.LOAD and all(t is not n.arg for t in out): out.append(n.arg)
    return out

  def __getitem__(self, idx) -> Expr:
    if not isinstance(idx, tuple): idx = (idx,)
    if len(idx) != len(self.shape):
      raise TEError(f"tensor {self.name!r} has {len(self.shape)} dims, indexed with {len(idx)}")
    es = tuple(as_expr(i) for i in idx)
    for e in es:
      if e.dtype not in ("int32", "int64"): raise TEError(f"index of {self.name!r} must be an integer, got {e} ({e.dtype})")
    return Expr.make(Op.LOAD, self.dtype, es, self)

  def __repr__(self) -> str:
    kind = "placeholder" if self.is_placeholder else "compute"
    return f"Tensor({self.name}, {self.shape}, {self.dtype}, {kind})"


def placeholder(shape: Sequence[int], dtype: str = "float32", name: str = "placeholder") -> Tensor:
  """An input tensor of the given shape and dtype."""
  return Tensor(name, tuple(shape), dtype)


def reduce_axis(extent: int, name: str = "k") -> IterVar:
  """A reduction axis ``0 <= name < extent``."""
  if not isinstance(extent, int) or extent <= 0: raise TEError(f"reduce_axis {name!r}: extent must be a positive int, got {extent!r}")
  return IterVar(var(name), const(extent), "reduce")


def compute(shape: Sequence[int], fcompute: Callable[..., ExprLike], name: str = "compute", tag: str = "") -> Tensor:
  """A tensor whose element at ``(i, j, ...)`` is ``fcompute(i, j, ...)``.

  The lambda's parameter names become the axis names (``lambda i, j: ...`` -> axes ``i``, ``j``).
  A reduction must be the top-level expression of the body.
  """
  shape = tuple(shape)
  try:
    sig = inspect.signature(fcompute).parameters.values()
    params = [p.name for p in sig if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if any(p.kind is p.VAR_POSITIONAL for p in sig): params = []
  except (TypeError, ValueError):
    params = []
  if len(params) != len(shape) or len(set(params)) != len(params):
    params = [f"ax{d}" for d in range(len(shape))]
  for d in shape:
    if not isinstance(d, int) or d <= 0: raise TEError(f"compute {name!r}: shape must be positive ints, got {shape}")
  axes = tuple(IterVar(var(p), const(d), "spatial") for p, d in zip(params, shape))
  body = as_expr(fcompute(*axes))
  for n in walk(body):
    if n.op is Op.REDUCE and n is not body:
      raise TEError(f"compute {name!r}: a reduction must be the top-level expression of the body (got {body})")
  dtype = body.dtype
  reduce_names = {a.name for a in (body.arg.axes if body.op is Op.REDUCE else ())}
  allowed = {a.name for a in axes} | reduce_names
  for n in walk(body):
    if n.op is Op.VAR and n.arg not in allowed:
      raise TEError(f"compute {name!r}: variable {n.arg!r} is neither an axis nor a reduce axis of this compute")
  if reduce_names & {a.name for a in axes}:
    raise TEError(f"compute {name!r}: a reduce axis has the same name as a spatial axis ({sorted(reduce_names)})")
  return Tensor(name, shape, dtype, axes, body, tag)


def _reducer(combiner: str):
  def red(expr: ExprLike, axis: IterVar | Sequence[IterVar], init: ExprLike | None = None) -> Expr:
    axes = (axis,) if isinstance(axis, IterVar) else tuple(axis)
    if not axes or any(not isinstance(a, IterVar) or a.kind != "reduce" for a in axes):
      raise TEError(f"{combiner}(): axis must be reduce_axis() objects, got {axis!r}")
    e = as_expr(expr)
    ini = None if init is None else as_expr(init, e.dtype)
    return Expr.make(Op.REDUCE, e.dtype, (e,), ReduceArg(combiner, axes, ini))
  red.__name__ = combiner
  red.__doc__ = f"Reduction by {combiner} over ``axis`` (an IterVar or a list of them), with optional ``init``."
  return red


sum = _reducer("sum")  # noqa: A001  (TVM-TE name)
_max_reduce, _min_reduce = _reducer("max"), _reducer("min")


def max(a, b=None, *, axis=None, init=None):  # noqa: A001
  """``max(a, b)``: elementwise maximum; ``max(x, axis=k)``: max-reduction over ``k``."""
  if axis is not None: return _max_reduce(a, axis, init)
  if b is None: raise TEError("max() needs two operands or axis=")
  if isinstance(a, ExprOps) or isinstance(b, ExprOps): return binary(Op.MAX, a, b)
  return builtins.max(a, b)


def min(a, b=None, *, axis=None, init=None):  # noqa: A001
  """``min(a, b)``: elementwise minimum; ``min(x, axis=k)``: min-reduction over ``k``."""
  if axis is not None: return _min_reduce(a, axis, init)
  if b is None: raise TEError("min() needs two operands or axis=")
  if isinstance(a, ExprOps) or isinstance(b, ExprOps): return binary(Op.MIN, a, b)
  return builtins.min(a, b)


def reduce_identity(combiner: str, dtype: str) -> Expr:
  """The identity element of a combiner (0 for sum, -inf / the type's lowest for max, ...)."""
  if dtype in FLOAT_DTYPES: lo, hi = -float("inf"), float("inf")
  elif dtype == "bool": lo, hi = False, True
  else: lo, hi = int_range(dtype)         # every integer type: its own range (uint64's lowest is 0, not -2**63)
  return {"sum": const(0, dtype), "prod": const(1, dtype), "max": const(lo, dtype), "min": const(hi, dtype)}[combiner]
