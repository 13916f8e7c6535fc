"""Pooling, Pad and Resize on channels-first tensors (N, C, D1, ..., Dk)."""
from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np

import minicomp.ir.te as te
from minicomp.errors import ModelError, ShapeError
from minicomp.graph.ops._util import as_stat, back_to, norm_axis, stat_type
from minicomp.graph.ops.nn import pad_stage, window
from minicomp.graph.registry import OpCtx, op
from minicomp.ir.expr import as_expr, call, cast, const, max_, min_, power, select
from minicomp.ir.ops import FLOAT_DTYPES
from minicomp.ir.te import Tensor


def _where(ctx) -> str: return f"{ctx.node.op_type} node {ctx.node.name!r}"


def _pool_setup(ctx, x):
  X = ctx.tensor(x)
  if X.ndim < 3: raise ShapeError(f"{_where(ctx)}: input rank {X.ndim} < 3")
  if X.dtype not in FLOAT_DTYPES: raise ctx.error(f"dtype {X.dtype} is not supported (float only)")
  sp = X.shape[2:]
  ks = ctx.attr("kernel_shape")
  ks = [int(k) for k in ks]
  if len(ks) != len(sp): raise ModelError(f"{_where(ctx)}: kernel_shape {ks} does not match input rank {X.ndim}")
  if any(k < 1 for k in ks): raise ModelError(f"{_where(ctx)}: kernel_shape {ks} must be positive")
  ceil_mode = ctx.flag("ceil_mode", 0)
  out, pb, pe, st, dl = window(ctx, sp, ks, ceil_mode)
  ext = [max(n + b + e, (o - 1) * s + (k - 1) * d + 1) for n, b, e, o, s, k, d in zip(sp, pb, pe, out, st, ks, dl)]
  return X, sp, ks, out, pb, pe, st, dl, ext


@op("MaxPool", kind="reduction", since=12)
def max_pool(ctx, x):
  """Max over windows (1D/2D/3D): kernel_shape, strides, pads, dilations, ceil_mode, auto_pad.
  Padding never wins (filled with -inf). The optional Indices output is not supported."""
  if len([o for o in ctx.node.outputs if o]) > 1: raise ctx.error("the Indices output is not supported")
  if int(ctx.attr("storage_order", 0)) not in (0, 1): raise ModelError(f"{_where(ctx)}: bad storage_order")
  X, sp, ks, out, pb, pe, st, dl, ext = _pool_setup(ctx, x)
  P = pad_stage(ctx, X, pb, ext, float("-inf"))
  rk = [ctx.reduce_axis(k, f"rk{d}") if k > 1 else None for d, k in enumerate(ks)]
  axes = [a for a in rk if a is not None]

  def body(n, c, *o):
    e = P[(n, c, *[oi * s + (0 if r is None else r * d) for oi, s, r, d in zip(o, st, rk, dl)])]
    return te.max(e, axis=axes) if axes else e
  return [ctx.compute((X.shape[0], X.shape[1], *out), lambda *i: body(*i), "maxpool")]


def _count(o, s: int, b: int, k: int, d: int, lo: int, hi: int):
  """How many of the taps ``o*s - b + j*d`` (0 <= j < k) fall in [lo, hi): an int for an int ``o``,
  else an int32 Expr of it."""
  start = o * s - b
  if isinstance(o, int): return max(0, min(k, -((start - hi) // d)) - max(0, -((start - lo) // d)))
  ceil_div = (lambda a: a) if d == 1 else (lambda a: (a + (d - 1)) // d)
  return max_(0, min_(k, ceil_div(hi - start)) - max_(0, ceil_div(lo - start)))


@op("AveragePool", kind="reduction", since=11)
def average_pool(ctx, x):
  """Mean over windows (1D/2D/3D): kernel_shape, strides, pads, dilations (opset 19), ceil_mode, auto_pad.
  ``count_include_pad=0`` divides by the taps inside the input, ``=1`` by the taps inside the padded
  input (a window reaching past the end pad under ``ceil_mode`` does not count the overhang)."""
  X, sp, ks, out, pb, pe, st, dl, ext = _pool_setup(ctx, x)
  include = ctx.flag("count_include_pad", 0)
  P = pad_stage(ctx, X, pb, ext, 0.0)
  rk = [ctx.reduce_axis(k, f"rk{d}") if k > 1 else None for d, k in enumerate(ks)]
  axes = [a for a in rk if a is not None]
  lims = [(-b, n + e) if include else (0, n) for n, b, e in zip(sp, pb, pe)]
  consts = []      # per dim: the count when it is the same for every output position, else None
  for d in range(len(sp)):
    cs = {int(_count(o, st[d], pb[d], ks[d], dl[d], *lims[d])) for o in range(out[d])}
    consts.append(cs.pop() if len(cs) == 1 else None)

  fixed = math.prod(c for c in consts if c is not None)

  def body(n, c, *o):
    inv = as_expr(1.0 / fixed, X.dtype)
    varying = [_count(oi, st[d], pb[d], ks[d], dl[d], *lims[d]) for d, oi in enumerate(o) if consts[d] is None]
    if varying: inv = as_expr(1.0, X.dtype) / cast(math.prod(varying[1:], start=varying[0]) * fixed, X.dtype)
    e = P[(n, c, *[oi * s + (0 if r is None else r * d) for oi, s, r, d in zip(o, st, rk, dl)])] * inv
    return te.sum(e, axis=axes) if axes else e
  return [ctx.compute((X.shape[0], X.shape[1], *out), lambda *i: body(*i), "avgpool")]


@op("LpPool", kind="reduction", since=11)
def lp_pool(ctx, x):
  """``(sum over the window of |x|^p)^(1/p)`` (1D/2D/3D): ``p`` (default 2), kernel_shape, strides, pads,
  dilations and ceil_mode (opset 18), auto_pad; padding adds nothing. A reduction stage of ``|x|^p`` (``|x|``,
  ``x * x`` for p 1 and 2), then the root, in float32 for a half input."""
  X, sp, ks, out, pb, pe, st, dl, ext = _pool_setup(ctx, x)
  p = ctx.attr("p", 2)
  if isinstance(p, bool) or not isinstance(p, (int, np.integer)) or p < 1:
    raise ModelError(f"{_where(ctx)}: p must be a positive integer, got {p!r}")
  p = int(p)
  acc = stat_type(X.dtype)
  P = pad_stage(ctx, X, pb, ext, 0.0)
  rk = [ctx.reduce_axis(k, f"rk{d}") if k > 1 else None for d, k in enumerate(ks)]
  axes = [a for a in rk if a is not None]

  def powered(v):
    v = as_stat(v)
    return call("abs", v) if p == 1 else v * v if p == 2 else power(call("abs", v), const(float(p), acc))

  def body(n, c, *o):
    e = powered(P[(n, c, *[oi * s + (0 if r is None else r * d) for oi, s, r, d in zip(o, st, rk, dl)])])
    return te.sum(e, axis=axes) if axes else e
  S = ctx.compute((X.shape[0], X.shape[1], *out), lambda *i: body(*i), "lpsum")
  root = (lambda v: v) if p == 1 else (lambda v: call("sqrt", v)) if p == 2 else \
    (lambda v: power(v, const(1.0 / p, acc)))
  return [ctx.compute(S.shape, lambda *i: back_to(root(S[i]), X.dtype), "lppool")]


@op("GlobalLpPool", kind="reduction", since=2)
def global_lp_pool(ctx, x):
  """LpPool with one window the size of the input's spatial dims (``p``, default 2); they stay as size-1 dims."""
  X = ctx.tensor(x)
  if X.ndim < 3: raise ShapeError(f"{_where(ctx)}: input rank {X.ndim} < 3")
  node = dataclasses.replace(ctx.node, attrs={"p": ctx.attr("p", 2), "kernel_shape": [int(n) for n in X.shape[2:]]})
  return lp_pool(OpCtx(node, ctx.opset, ctx.consts, ctx.names), X)


def _global(ctx, x, combiner: str):
  X = ctx.tensor(x)
  if X.ndim < 3: raise ShapeError(f"{_where(ctx)}: input rank {X.ndim} < 3")
  sp = X.shape[2:]
  rk = [ctx.reduce_axis(n, f"r{d}") for d, n in enumerate(sp)]
  inv = as_expr(1.0 / math.prod(sp), X.dtype)
  red = lambda n, c: te.sum(X[(n, c, *rk)] * inv, axis=rk) if combiner == "sum" else te.max(X[(n, c, *rk)], axis=rk)
  return [ctx.compute((X.shape[0], X.shape[1]) + (1,) * len(sp), lambda n, c, *_: red(n, c), combiner)]


@op("GlobalAveragePool", kind="reduction", since=1)
def global_average_pool(ctx, x):
  """Mean over every spatial dim; the output keeps them as size-1 dims."""
  return _global(ctx, x, "sum")


@op("GlobalMaxPool", kind="reduction", since=1)
def global_max_pool(ctx, x):
  """Max over every spatial dim; the output keeps them as size-1 dims."""
  return _global(ctx, x, "max")


def _const_input(ctx, v, what: str):
  if v is None: return None
  if isinstance(v, Tensor): raise ctx.error(f"{what} must be a constant initializer")
  return np.asarray(v)


@op("Pad", kind="injective", since=13)
def pad(ctx, data, pads, constant_value=None, axes=None):
  """Pad with pads / constant_value as inputs (opset 13) and the optional axes input (opset 18, negative
  axes allowed); modes constant, reflect, edge, wrap (opset 19). Negative pads crop."""
  mode = ctx.attr("mode", "constant")
  if mode not in ("constant", "reflect", "edge", "wrap"): raise ctx.error(f"mode {mode!r} is not supported")
  p = _const_input(ctx, pads, "pads").astype(np.int64).reshape(-1)
  r = len(data.shape)
  ax = list(range(r)) if axes is None else \
    [norm_axis(int(a), r, _where(ctx)) for a in _const_input(ctx, axes, "axes").reshape(-1)]
  if len(p) != 2 * len(ax) or len(set(ax)) != len(ax):
    raise ModelError(f"{_where(ctx)}: pads has {len(p)} entries for {len(ax)} axes")
  pb, pe = [0] * r, [0] * r
  for k, a in enumerate(ax): pb[a], pe[a] = int(p[k]), int(p[len(ax) + k])
  X = ctx.tensor(data)
  shape = [n + b + e for n, b, e in zip(X.shape, pb, pe)]
  if any(s <= 0 for s in shape): raise ShapeError(f"{_where(ctx)}: pads {p.tolist()} crop {tuple(X.shape)} to nothing")
  if mode == "constant":
    if constant_value is None or (isinstance(constant_value, np.ndarray) and constant_value.size == 0):
      cv = as_expr(0, X.dtype)
    elif isinstance(constant_value, Tensor): cv = constant_value[(0,) * constant_value.ndim]
    else: cv = const(np.asarray(constant_value).reshape(-1)[0].item(), X.dtype)
    if cv.dtype != X.dtype: cv = cast(cv, X.dtype)
    if all(b == 0 and e == 0 for b, e in zip(pb, pe)): return [ctx.compute(shape, lambda *i: X[i], "pad")]
    return [pad_stage(ctx, X, pb, shape, cv, first=0)]
  if any(n == 0 for n in X.shape): raise ShapeError(f"{_where(ctx)}: {mode} padding of an empty tensor")

  def src(j, n: int, b: int, e: int):
    if b <= 0 and e <= 0: return j - b if b else j
    t = j - b if b else j
    if n == 1: return 0
    if mode == "edge": return max_(min_(t, n - 1), 0)
    if mode == "wrap": return t % n
    per = 2 * (n - 1)                  # reflect: periodic with period 2(n-1), mirrored about n-1
    m = t % per
    return select(m < n, m, per - m)
  return [ctx.compute(shape, lambda *i: X[tuple(src(j, n, b, e) for j, n, b, e in zip(i, X.shape, pb, pe))], "pad")]


_CTM = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
        "tf_half_pixel_for_nn")


def _coord(ctm: str, x, scale: np.float32, n_in: int, n_out: int, length: np.float32):
  """The source coordinate (float32 Expr) of output index ``x``, written like onnxruntime's float math.
  ``length`` is ONNX's ``output_width``: the resized length before rounding (``n_in * scale`` when the
  scale is given, the size when a size is), which align_corners, pytorch_half_pixel and
  half_pixel_symmetric divide by or compare with; onnxruntime uses the rounded length there, and differs
  from ONNX's reference where the scale gives a fractional length (minicomp follows ONNX)."""
  f = lambda v: const(float(v), "float32")
  xf = cast(x, "float32")
  if ctm == "asymmetric": return xf / f(scale)
  if ctm == "tf_half_pixel_for_nn": return (xf + f(0.5)) / f(scale)
  if ctm == "align_corners": return f(0.0) if length == 1 else xf * f(n_in - 1) / f(length - np.float32(1))
  if ctm == "pytorch_half_pixel": return (xf + f(0.5)) / f(scale) - f(0.5) if length > 1 else f(0.0)
  if ctm == "half_pixel_symmetric":
    adj = np.float32(n_out) / length
    off = np.float32(n_in) / np.float32(2) * (np.float32(1) - adj)
    return f(off) + (xf + f(0.5)) / f(scale) - f(0.5)
  return (xf + f(0.5)) / f(scale) - f(0.5)


def _nearest(mode: str, c):
  fl = call("floor", c)
  if mode == "floor": r = fl
  elif mode == "ceil": r = call("ceil", c)
  elif mode == "round_prefer_ceil": r = select(c - fl >= const(0.5), fl + const(1.0), fl)
  else: r = select(c - fl > const(0.5), fl + const(1.0), fl)
  return cast(r, "int32")


@op("Resize", kind="injective", since=11)
def resize(ctx, x, roi=None, scales=None, sizes=None):
  """Resize with mode nearest (nearest_mode round_prefer_floor / round_prefer_ceil / floor / ceil) or linear
  (separable: bilinear on NCHW, up to 3 resized dims); coordinate_transformation_mode half_pixel,
  half_pixel_symmetric, pytorch_half_pixel, align_corners, asymmetric, tf_half_pixel_for_nn; scales or
  sizes (constants); opset 18 axes and keep_aspect_ratio_policy; cubic (up to 2 resized dims,
  cubic_coeff_a, exclude_outside). Linear source coordinates are clamped into the input, cubic taps at
  the edges repeat the edge. tf_crop_and_resize and antialias are not supported."""
  mode, ctm = ctx.attr("mode", "nearest"), ctx.attr("coordinate_transformation_mode", "half_pixel")
  nmode = ctx.attr("nearest_mode", "round_prefer_floor")
  if mode not in ("nearest", "linear", "cubic"): raise ctx.error(f"mode {mode!r} is not supported (nearest, linear, cubic)")
  if ctm not in _CTM: raise ctx.error(f"coordinate_transformation_mode {ctm!r} is not supported")
  if nmode not in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"):
    raise ctx.error(f"nearest_mode {nmode!r} is not an ONNX value")
  if int(ctx.attr("antialias", 0)): raise ctx.error("antialias=1 is not supported")
  X = ctx.tensor(x)
  r = X.ndim
  ax = [norm_axis(int(a), r, _where(ctx)) for a in ctx.attr("axes", list(range(r)))]
  sc, sz = _const_input(ctx, scales, "scales"), _const_input(ctx, sizes, "sizes")
  sc = None if sc is None or sc.size == 0 else sc.astype(np.float32).reshape(-1)
  sz = None if sz is None or sz.size == 0 else sz.astype(np.int64).reshape(-1)
  if (sc is None) == (sz is None): raise ModelError(f"{_where(ctx)}: exactly one of scales and sizes must be given")
  if len(sc if sc is not None else sz) != len(ax):
    raise ModelError(f"{_where(ctx)}: scales/sizes need {len(ax)} entries")
  scale = [np.float32(1.0)] * r
  out = list(X.shape)
  length = [np.float32(n) for n in X.shape]          # ONNX's output_width: the length before rounding
  if sz is not None:
    policy = ctx.attr("keep_aspect_ratio_policy", "stretch")
    if policy == "stretch":
      for a, s in zip(ax, sz): out[a], scale[a], length[a] = int(s), np.float32(s) / np.float32(X.shape[a]), np.float32(s)
    elif policy in ("not_larger", "not_smaller"):
      ratios = [np.float32(s) / np.float32(X.shape[a]) for a, s in zip(ax, sz)]
      k = min(ratios) if policy == "not_larger" else max(ratios)
      for a in ax:
        length[a] = np.float32(X.shape[a]) * k
        out[a], scale[a] = int(np.floor(length[a] + np.float32(0.5))), k
    else: raise ctx.error(f"keep_aspect_ratio_policy {policy!r}")
  else:
    for a, s in zip(ax, sc):
      if not np.isfinite(s) or s <= 0: raise ModelError(f"{_where(ctx)}: scales must be positive and finite, got {sc.tolist()}")
      length[a] = np.float32(X.shape[a]) * s
      out[a], scale[a] = int(np.floor(length[a])), np.float32(s)
  if any(o <= 0 for o in out): raise ShapeError(f"{_where(ctx)}: empty output shape {out}")
  moved = [d for d in range(r) if not (scale[d] == 1 and out[d] == X.shape[d])]
  if mode == "linear" and len(moved) > 3: raise ctx.error(f"linear resize of {len(moved)} dims (at most 3)")
  if mode == "cubic" and len(moved) > 2: raise ctx.error(f"cubic resize of {len(moved)} dims (at most 2)")
  A, exclude = float(ctx.attr("cubic_coeff_a", -0.75)), ctx.flag("exclude_outside", 0)

  def src(d: int, i):
    """The taps of dim d for output index i: [(input index, weight)] (nearest: the index alone)."""
    n = X.shape[d]
    c = _coord(ctm, i, scale[d], n, out[d], length[d])
    if mode == "nearest": return max_(min_(_nearest(nmode, c), n - 1), 0)
    if mode == "cubic": return _cubic_taps(c, n, A, exclude, X.dtype)
    c = max_(min_(c, const(float(n - 1))), const(0.0))
    lo = cast(call("floor", c), "int32")
    fr = cast(c - call("floor", c), X.dtype)
    return [(lo, as_expr(1.0, X.dtype) - fr), (min_(lo + 1, n - 1), fr)]

  def body(*i):
    idx = list(i)
    if mode == "nearest":
      for d in moved: idx[d] = src(d, i[d])
      return X[tuple(idx)]
    taps = [src(d, i[d]) for d in moved]
    total = None
    for pick in itertools.product(*[range(len(t)) for t in taps]):
      w, idx = None, list(i)
      for d, t, k in zip(moved, taps, pick):
        idx[d], wk = t[k]
        w = wk if w is None else w * wk
      term = X[tuple(idx)] * w if w is not None else X[tuple(idx)]
      total = term if total is None else total + term
    return total
  return [ctx.compute(out, body, "resize")]


def _cubic_taps(c, n: int, A: float, exclude: bool, dtype: str):
  """Keys' cubic convolution at source coordinate c (not clamped): taps floor(c) - 1 .. floor(c) + 2,
  indices clamped into the input (edge padding, as onnxruntime and the ONNX reference); with
  ``exclude_outside`` the taps outside get weight 0 and the rest are renormalised."""
  fl = call("floor", c)
  t, base = c - fl, cast(fl, "int32") - 1
  f = lambda v: const(float(v), "float32")
  far = lambda d: ((d * f(A) - f(5 * A)) * d + f(8 * A)) * d - f(4 * A)     # 1 < distance d < 2
  near = lambda d: (d * f(A + 2) - f(A + 3)) * d * d + f(1.0)               # distance d <= 1
  w = [far(t + f(1.0)), near(t), near(f(1.0) - t), far(f(2.0) - t)]
  j = [base + k for k in range(4)]
  if exclude:
    w = [select((jk >= 0) & (jk < n), wk, f(0.0)) for jk, wk in zip(j, w)]
    tot = w[0] + w[1] + w[2] + w[3]
    w = [wk / tot for wk in w]
  return [(max_(min_(jk, n - 1), 0), cast(wk, dtype) if dtype != "float32" else wk) for jk, wk in zip(j, w)]
