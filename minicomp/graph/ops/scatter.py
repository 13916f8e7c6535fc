"""Scatter ops: ScatterElements and ScatterND, and their gather counterpart GatherND.

A scatter writes ``updates`` at positions its indices name; a tensor expression computes each output element
instead, so each output element searches the indices for the updates aimed at it (a reduction over the
updates): ``reduction="none"`` takes the last one aimed at it (ONNX leaves duplicates undefined; onnxruntime
and the reference write in order, so the last wins), "add" / "mul" / "max" / "min" combine them all with the
data. That costs output size x updates, fine for the index updates of KV caches and detection heads, slow for a
scatter of a whole tensor. Indices are runtime values, wrapped when negative and clamped into range (an index
past the end is undefined in ONNX; here it never writes out of bounds).
"""
from __future__ import annotations

import math

import minicomp.ir.te as te
from minicomp.errors import ShapeError
from minicomp.graph.ops._util import norm_axis
from minicomp.graph.ops.reduce import _prod
from minicomp.graph.ops.shape import check_positive, where
from minicomp.graph.ops.shape_gather import runtime_index
from minicomp.graph.registry import op
from minicomp.ir.expr import const, eq, max_, min_, select
from minicomp.ir.te import reduce_identity

REDUCTIONS = ("none", "add", "mul", "max", "min")


def _indices(ctx, v):
  t = ctx.tensor(v)
  if t.dtype not in ("int32", "int64"): raise ctx.error(f"indices must be int32 or int64, not {t.dtype}")
  return t


def _scatter(ctx, data, n_updates: int, hit, value, reduction: str):
  """``out[i] = data[i]`` combined with every update k in [0, n_updates) for which ``hit(i, k)``, of ``value(i, k)``."""
  d = ctx.tensor(data)
  if reduction not in REDUCTIONS: raise ctx.error(f"reduction={reduction!r} is not one of {', '.join(REDUCTIONS)}")
  if reduction in ("mul", "max", "min") and d.dtype == "bool": raise ctx.error(f"reduction={reduction} of bool data")
  if reduction == "none":
    last = ctx.compute(d.shape, lambda *i: _last(ctx, n_updates, lambda k: hit(i, k)), "last")
    return ctx.compute(d.shape, lambda *i: select(last[i] >= 0, value(i, max_(last[i], 0)), d[i]))
  comb = {"add": "sum", "mul": "prod", "max": "max", "min": "min"}[reduction]

  def acc(*i):
    k = ctx.reduce_axis(n_updates, "u")
    ident = reduce_identity(comb, d.dtype)
    e = select(hit(i, k), value(i, k), ident)
    return {"sum": lambda: te.sum(e, axis=k), "max": lambda: te.max(e, axis=k), "min": lambda: te.min(e, axis=k),
            "prod": lambda: _prod(e, [k])}[comb]()
  a = ctx.compute(d.shape, acc, "acc")
  f = {"add": lambda x, y: x + y, "mul": lambda x, y: x * y, "max": max_, "min": min_}[reduction]
  return ctx.compute(d.shape, lambda *i: f(d[i], a[i]))


def _last(ctx, n: int, hit):
  k = ctx.reduce_axis(n, "u")
  return te.max(select(hit(k), k, const(-1, "int32")), axis=k)


@op("ScatterElements", kind="reduction", since=11)
def scatter_elements(ctx, data, indices, updates):
  """ONNX ScatterElements: ``out[i with axis = indices[p]] = updates[p]`` for every position p of indices
  (module docstring for duplicates and ``reduction``)."""
  d, ix, up = ctx.tensor(data), _indices(ctx, indices), ctx.tensor(updates)
  r = len(d.shape)
  ax = norm_axis(int(ctx.attr("axis", 0)), r, where(ctx))
  if tuple(ix.shape) != tuple(up.shape) or len(ix.shape) != r:
    raise ShapeError(f"{where(ctx)}: indices {list(ix.shape)} and updates {list(up.shape)} must have one shape of "
                     f"data's rank {r}")
  if any(ix.shape[k] > d.shape[k] for k in range(r) if k != ax):
    raise ShapeError(f"{where(ctx)}: indices shape {list(ix.shape)} is larger than data {list(d.shape)}")
  check_positive(ctx, d.shape)
  n, m = d.shape[ax], ix.shape[ax]
  inside = lambda i: [i[k] < ix.shape[k] for k in range(r) if k != ax and ix.shape[k] < d.shape[k]]
  at = lambda i, k: tuple(min_(i[q], ix.shape[q] - 1) if q != ax else k for q in range(r))

  def hit(i, k):
    h = eq(runtime_index(ix[at(i, k)], n), i[ax])
    for c in inside(i): h = h & c
    return h
  return [_scatter(ctx, d, m, hit, lambda i, k: up[at(i, k)], ctx.attr("reduction", "none"))]


@op("ScatterND", kind="reduction", since=11)
def scatter_nd(ctx, data, indices, updates):
  """ONNX ScatterND: indices (..., k) name, for each of their leading positions, the first k coordinates of a
  slice of data that the update of the same leading position replaces (module docstring)."""
  d, ix, up = ctx.tensor(data), _indices(ctx, indices), ctx.tensor(updates)
  r = len(d.shape)
  k = ix.shape[-1]
  lead = tuple(ix.shape[:-1])
  if not 1 <= k <= r or tuple(up.shape) != lead + tuple(d.shape[k:]):
    raise ShapeError(f"{where(ctx)}: updates shape {list(up.shape)} is not indices' leading {list(lead)} + data's "
                     f"trailing {list(d.shape[k:])}")
  check_positive(ctx, d.shape)
  n_up = math.prod(lead)

  def unflat(u):                 # the leading position of flat update number u
    out, rest = [], u
    for s in reversed(lead):
      out.append(rest % s); rest = rest // s
    return tuple(reversed(out))

  def hit(i, u):
    p = unflat(u)
    h = None
    for c in range(k):
      e = eq(runtime_index(ix[p + (c,)], d.shape[c]), i[c])
      h = e if h is None else h & e
    return h
  return [_scatter(ctx, d, n_up, hit, lambda i, u: up[unflat(u) + tuple(i[k:])], ctx.attr("reduction", "none"))]


@op("GatherND", kind="injective", since=12)
def gather_nd(ctx, data, indices):
  """ONNX GatherND: ``out[b..., i..., j...] = data[b..., indices[b..., i..., :], j...]`` with ``batch_dims`` b."""
  d, ix = ctx.tensor(data), _indices(ctx, indices)
  b = int(ctx.attr("batch_dims", 0))
  r, q = len(d.shape), len(ix.shape)
  k = ix.shape[-1]
  if not 0 <= b < min(r, q) or b + k > r or tuple(ix.shape[:b]) != tuple(d.shape[:b]):
    raise ShapeError(f"{where(ctx)}: indices {list(ix.shape)} with batch_dims={b} do not fit data {list(d.shape)}")
  shape = check_positive(ctx, tuple(ix.shape[:-1]) + tuple(d.shape[b + k:]))

  def body(*o):
    lead = o[:q - 1]
    coords = tuple(runtime_index(ix[tuple(lead) + (c,)], d.shape[b + c]) for c in range(k))
    return d[tuple(lead[:b]) + coords + tuple(o[q - 1:])]
  return [ctx.compute(shape, body)]
