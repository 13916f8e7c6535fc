"""Gather and GatherElements: reads at data-dependent (or constant) indices along one axis.

Constant indices are wrapped (negative -> +dim) and range-checked at compile time and become
an int32 weight (a single index becomes a literal). Runtime int64 / int32 indices are cast to
int32 index math, negatives wrap, and out-of-range values are clamped into the axis: ONNX
leaves them an error, and a GPU kernel cannot raise one, so they must not read out of bounds.
"""
from __future__ import annotations

import numpy as np

from minicomp.errors import ShapeError
from minicomp.graph.ops._util import norm_axis
from minicomp.graph.ops.shape import check_positive, where
from minicomp.graph.registry import op
from minicomp.ir.expr import cast, max_, min_, select
from minicomp.ir.te import Tensor


def const_indices(ctx, idx, n: int) -> np.ndarray:
  """Constant indices wrapped into [0, n) as int32; out-of-range ones are a model error."""
  a = np.asarray(idx).astype(np.int64)
  a = np.where(a < 0, a + n, a)
  if a.size and (a.min() < 0 or a.max() >= n):
    raise ShapeError(f"{where(ctx)}: indices {np.asarray(idx).reshape(-1)[:8].tolist()} out of range for a dim of {n}")
  return a.astype(np.int32)


def runtime_index(e, n: int):
  """A loaded runtime index as int32: negatives wrap, then clamped into [0, n - 1], in the index's own
  type (an int64 index of 2**32 + 5 must clamp, not wrap to 5). ``CompiledModel.run`` raises on
  out-of-range indices fed as graph inputs; the clamp keeps computed ones in bounds."""
  w = select(e < 0, e + n, e)
  return cast(min_(max_(w, 0), n - 1), "int32") if e.dtype == "int64" else min_(max_(w, 0), n - 1)


def index_reader(ctx, indices, n: int):
  """``get(j)``: the (wrapped) index at position ``j`` of ``indices``."""
  if isinstance(indices, Tensor):
    if indices.dtype not in ("int32", "int64"): raise ShapeError(f"{where(ctx)}: indices must be int32 or int64")
    return lambda j: runtime_index(indices[tuple(j)], n)
  idx = const_indices(ctx, indices, n)
  if idx.size == 1:
    v = int(idx.reshape(-1)[0])
    return lambda j: v
  t = ctx.const(idx, "indices")
  return lambda j: t[tuple(j)]


@op("Gather", kind="injective", since=13)
def gather(ctx, data, indices):
  """Gather along ``axis`` (negative allowed): output shape data[:axis] + indices + data[axis+1:],
  so scalar (0-d) indices drop the axis; data may be a constant (embedding tables)."""
  r = len(data.shape)
  axis = norm_axis(int(ctx.attr("axis", 0)), r, where(ctx))
  n, q = data.shape[axis], len(indices.shape)
  shape = tuple(data.shape[:axis]) + tuple(indices.shape) + tuple(data.shape[axis + 1:])
  if not isinstance(data, Tensor) and not isinstance(indices, Tensor):
    return [np.take(np.asarray(data), const_indices(ctx, indices, n), axis=axis)]
  check_positive(ctx, shape)
  get = index_reader(ctx, indices, n)
  d = ctx.tensor(data)
  return [ctx.compute(shape, lambda *i: d[tuple(i[:axis]) + (get(i[axis:axis + q]),) + tuple(i[axis + q:])])]


@op("GatherElements", kind="injective", since=13)
def gather_elements(ctx, data, indices):
  """GatherElements: out[i] = data[i with axis replaced by indices[i]]; output shape = indices'."""
  r = len(data.shape)
  axis = norm_axis(int(ctx.attr("axis", 0)), r, where(ctx))
  if len(indices.shape) != r or any(indices.shape[d] > data.shape[d] for d in range(r) if d != axis):
    raise ShapeError(f"{where(ctx)}: indices shape {list(indices.shape)} does not fit data {list(data.shape)}")
  n = data.shape[axis]
  if not isinstance(data, Tensor) and not isinstance(indices, Tensor):
    return [np.take_along_axis(np.asarray(data), const_indices(ctx, indices, n).astype(np.int64), axis=axis)]
  shape = check_positive(ctx, indices.shape)
  get = index_reader(ctx, indices, n)
  d = ctx.tensor(data)
  return [ctx.compute(shape, lambda *i: d[tuple(i[:axis]) + (get(i),) + tuple(i[axis + 1:])])]
