"""Helpers shared by op lowerings: numpy broadcasting, scalar constants, axis normalisation."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from minicomp.errors import ShapeError
from minicomp.frontend.dtypes import np_to_dtype
from minicomp.ir.expr import Expr, as_expr, cast, const
from minicomp.ir.ops import HALF_DTYPES
from minicomp.ir.te import Tensor


def shape_of(v) -> tuple[int, ...]:
  return tuple(v.shape)


def dtype_of(v) -> str:
  return v.dtype if isinstance(v, Tensor) else np_to_dtype(np.asarray(v).dtype)


def broadcast_shape(*shapes: Sequence[int], where: str = "") -> tuple[int, ...]:
  """Numpy / ONNX multidirectional broadcasting of ``shapes``."""
  try:
    return tuple(int(d) for d in np.broadcast_shapes(*[tuple(s) for s in shapes]))
  except ValueError:
    raise ShapeError(f"{where}: shapes {[tuple(s) for s in shapes]} do not broadcast") from None


def operand(ctx, v):
  """A node input ready for ``load``: a Tensor, or a scalar Expr for a constant with one element."""
  if isinstance(v, Tensor): return v
  arr = np.asarray(v)
  if arr.size == 1: return const(arr.reshape(()).item(), np_to_dtype(arr.dtype, ctx.node))
  return ctx.const(arr)


def load(v, out_shape: Sequence[int], idx: Sequence) -> Expr:
  """``v`` read at output index ``idx`` under broadcasting (a scalar Expr is returned as is)."""
  if isinstance(v, Expr): return v
  r, n = len(v.shape), len(out_shape)
  sub = []
  for d in range(r):
    i = idx[n - r + d]
    sub.append(0 if v.shape[d] == 1 and out_shape[n - r + d] != 1 else i)
  return v[tuple(sub)]


def norm_axis(axis: int, rank: int, where: str = "") -> int:
  if not -rank <= axis < max(rank, 1): raise ShapeError(f"{where}: axis {axis} out of range for rank {rank}")
  return axis + rank if axis < 0 else axis


def scalar_expr(x, dtype: str) -> Expr:
  return as_expr(x, dtype)


def stat_type(dtype: str) -> str:
  """The type an op keeps its statistics in (a norm's mean and variance, softmax's max and sum): float32 for a half
  input, which would lose them to rounding (a mean of 100 rounds by 0.03 in float16), else the input's own."""
  return "float32" if dtype in HALF_DTYPES else dtype


def as_stat(e: Expr) -> Expr:
  """``e`` in :func:`stat_type` of its dtype."""
  t = stat_type(e.dtype)
  return e if t == e.dtype else cast(e, t)


def back_to(e: Expr, dtype: str) -> Expr:
  """``e`` in ``dtype`` (an op's output in its input's type after computing in :func:`stat_type`)."""
  return e if e.dtype == dtype else cast(e, dtype)
