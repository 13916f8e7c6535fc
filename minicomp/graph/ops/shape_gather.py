"""Gather and GatherElements: reads at data-dependent (or constant) indices along one axis.

Constant indices are wrapped (negative -> +dim) and range-checked at compile time and become
an int32 weight (a single index becomes a literal). Runtime int64 / int32 indices are cast to
int32 index math, negatives wrap, and out-of-range values are clamped into the axis: ONNX
leaves them an error, and a GPU kernel cannot raise one, so they must not read out of bounds.
"""
from __future__ import annotations

import numpy as np

from minicomp.errors import ShapeError
from minicomp.frontend.dtypes import np_to_dtype
from minicomp.graph.ops._util import norm_axis
from minicomp.graph.ops.shape import check_positive, where
from minicomp.graph.registry import op
from minicomp.ir.expr import cast, const, eq, max_, min_, select
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


@op("OneHot", kind="injective", since=11)
def one_hot(ctx, indices, depth, values):
  """ONNX OneHot: ``out[..., d, ...] = values[1] if indices[...] == d else values[0]`` with the new dim of
  ``depth`` at ``axis`` (default -1); a negative index counts from the end (-1 is depth - 1), one outside
  [-depth, depth) gives a row of ``values[0]``. depth must be a constant; values may be a runtime tensor."""
  if isinstance(depth, Tensor): raise ctx.error("depth must be a constant initializer")
  dv = np.asarray(depth).reshape(-1)
  if isinstance(values, Tensor): nv = values.shape[0] if len(values.shape) == 1 else -1
  else: nv = np.asarray(values).size
  if dv.size != 1 or nv != 2:
    raise ShapeError(f"{where(ctx)}: depth must hold one value and values be two, got depth {dv.tolist()}, values "
                     f"of shape {list(values.shape)}")
  if not np.isfinite(dv[0]):     # (an inf or NaN depth: int() raised OverflowError / ValueError, found by the fuzzer)
    raise ShapeError(f"{where(ctx)}: depth {dv[0]} must be a finite positive number")
  D = int(dv[0])
  if D < 1: raise ShapeError(f"{where(ctx)}: depth {D} must be positive")
  if D > 2**31 - 1: raise ShapeError(f"{where(ctx)}: depth {D} is past the 2^31 - 1 elements a dimension may have")
  if isinstance(indices, Tensor) and indices.dtype in ("bool", "float16", "bfloat16"):
    raise ctx.error(f"indices element type {indices.dtype} is not supported")
  idx = indices if isinstance(indices, Tensor) else ctx.const(np.asarray(indices), "indices")
  r = len(idx.shape) + 1
  ax = norm_axis(int(ctx.attr("axis", -1)), r, where(ctx))
  shape = tuple(idx.shape[:ax]) + (D,) + tuple(idx.shape[ax:])
  check_positive(ctx, shape)
  if isinstance(values, Tensor): off, on = values[(0,)], values[(1,)]
  else:
    vv = np.asarray(values).reshape(-1)
    vt = np_to_dtype(vv.dtype, ctx.node)
    off, on = const(vv[0].item(), vt), const(vv[1].item(), vt)

  def body(*o):
    i = idx[tuple(o[:ax]) + tuple(o[ax + 1:])]
    if i.dtype not in ("int32", "int64"): i = cast(i, "int64")     # float (truncated) or narrow integer indices
    w = select(i < 0, i + D, i)
    return select(eq(w, cast(o[ax], w.dtype)), on, off)
  return [ctx.compute(shape, body)]
