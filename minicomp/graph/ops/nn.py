"""Neural-network ops with weights: Conv, ConvTranspose, BatchNormalization, InstanceNormalization; and LRN.

Also the window arithmetic (``window``) and the padded-input stage (``pad_stage``) that the
pooling ops of ``nn_pool`` share. Layout is always channels-first (N, C, D1, ..., Dk).
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

import minicomp.ir.te as te
from minicomp.errors import ModelError, ShapeError
from minicomp.frontend.dtypes import DTYPE_TO_NP
from minicomp.graph.ops._util import as_stat, back_to, stat_type
from minicomp.graph.registry import op
from minicomp.ir.expr import all_of, as_expr, dot4, eq, power, rsqrt, select
from minicomp.ir.ops import FLOAT_DTYPES
from minicomp.ir.te import Tensor


def _where(ctx) -> str: return f"{ctx.node.op_type} node {ctx.node.name!r}"


def ints_attr(ctx, name: str, n: int, default: int) -> list[int]:
  """An int-list attribute of length ``n`` (``default`` repeated when absent)."""
  v = ctx.attr(name, None)
  if v is None: return [default] * n
  v = [int(x) for x in v]
  if len(v) != n: raise ModelError(f"{_where(ctx)}: attribute {name!r} has {len(v)} entries, expected {n}")
  return v


def window(ctx, in_sz: Sequence[int], kernel: Sequence[int], ceil_mode: bool = False):
  """Output sizes and (begin, end) pads of a sliding window, from strides / dilations / pads / auto_pad.

  NOTSET: ``out = floor_or_ceil((in + pb + pe - ((k-1)*d + 1)) / s) + 1``; with ``ceil_mode`` a
  last window that would start in the end padding is dropped (as onnxruntime and PyTorch do).
  SAME_UPPER / SAME_LOWER: ``out = ceil(in / s)``, the total pad split with the odd element at the
  end (UPPER) or the beginning (LOWER). VALID: no pads.
  Returns ``(out, pb, pe, strides, dilations)``.
  """
  nsp = len(in_sz)
  strides = ints_attr(ctx, "strides", nsp, 1)
  dil = ints_attr(ctx, "dilations", nsp, 1)
  if any(s <= 0 for s in strides) or any(d <= 0 for d in dil):
    raise ModelError(f"{_where(ctx)}: strides and dilations must be positive, got {strides}, {dil}")
  auto_pad = ctx.attr("auto_pad", "NOTSET")
  eff = [(k - 1) * d + 1 for k, d in zip(kernel, dil)]
  if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
    out = [-(-i // s) for i, s in zip(in_sz, strides)]
    tot = [max(0, (o - 1) * s + e - i) for o, s, e, i in zip(out, strides, eff, in_sz)]
    pb = [t // 2 if auto_pad == "SAME_UPPER" else t - t // 2 for t in tot]
    pe = [t - b for t, b in zip(tot, pb)]
    return out, pb, pe, strides, dil
  if auto_pad == "VALID":
    pb, pe = [0] * nsp, [0] * nsp
  elif auto_pad == "NOTSET":
    pads = ints_attr(ctx, "pads", 2 * nsp, 0)
    pb, pe = pads[:nsp], pads[nsp:]
    if any(p < 0 for p in pads): raise ModelError(f"{_where(ctx)}: negative pads {pads}")
  else:
    raise ctx.error(f"auto_pad={auto_pad!r} is not an ONNX value (NOTSET, SAME_UPPER, SAME_LOWER, VALID)")
  out = []
  for i, b, e_, k, s in zip(in_sz, pb, pe, eff, strides):
    span = i + b + e_ - k
    if span < 0: raise ShapeError(f"{_where(ctx)}: window of extent {k} larger than the padded input {i + b + e_}")
    o = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (o - 1) * s >= i + b: o -= 1
    out.append(o)
  return out, pb, pe, strides, dil


def pad_stage(ctx, x: Tensor, pb: Sequence[int], ext: Sequence[int], fill, first: int = 2) -> Tensor:
  """``x`` with dims ``first..`` (``len(pb)`` of them; any after are kept) padded to extents ``ext``, ``pb`` of them
  before the data, filled with ``fill``.

  ``x`` itself when nothing is padded. An injective stage the default schedule inlines into its reader."""
  last = first + len(pb)
  sp = x.shape[first:last]
  if all(b == 0 and e == n for b, e, n in zip(pb, ext, sp)): return x
  shape = tuple(x.shape[:first]) + tuple(ext) + tuple(x.shape[last:])

  def body(*i):
    conds, src = [], list(i[:first])
    for d, (b, n, e) in enumerate(zip(pb, sp, ext)):
      j = i[first + d]
      if b > 0: conds.append(j >= b)
      if e > b + n: conds.append(j < b + n)
      src.append(j - b if b else j)
    src += i[last:]
    v = x[tuple(src)]
    return select(all_of(*conds), v, as_expr(fill, x.dtype)) if conds else v
  return ctx.compute(shape, body, "pad")


def _raxes(ctx, extents: Sequence[int], prefix: str):
  """Reduce axes for the extents > 1 (None stands for an extent-1 axis, indexed by 0)."""
  return [ctx.reduce_axis(e, f"{prefix}{d}") if e > 1 else None for d, e in enumerate(extents)]


def _ix(a): return 0 if a is None else a


def _dilate_pad(ctx, x: Tensor, strides: Sequence[int], pb: Sequence[int], ext: Sequence[int]) -> Tensor:
  """``x`` with ``s - 1`` zeros between the elements of each spatial dim and ``pb`` zeros before
  them (``pb < 0`` crops), cut or zero-filled to extents ``ext``: ``out[j] = x[(j - pb) / s]`` where
  ``j - pb`` is a multiple of ``s`` inside ``x``, else 0. ``x`` itself when that is the identity."""
  sp = x.shape[2:]
  if all(s == 1 and b == 0 and e == n for s, b, e, n in zip(strides, pb, ext, sp)): return x

  def body(n, c, *j):
    conds, src = _dilated_source(j, strides, pb, ext, sp)
    v = x[(n, c, *src)]
    return select(all_of(*conds), v, as_expr(0.0, x.dtype)) if conds else v
  return ctx.compute((*x.shape[:2], *ext), body, "dilate")


def _dilated_source(j, strides, pb, ext, sp) -> tuple[list, list]:
  """For positions ``j`` of :func:`_dilate_pad`'s output: the conditions under which they hold an element of the
  input (none: always) and that element's index."""
  conds, src = [], []
  for jd, s, b, e, n_in in zip(j, strides, pb, ext, sp):
    t = jd - b if b else jd
    if b > 0: conds.append(t >= 0)                     # j >= 0 makes t >= 0 when b <= 0
    if s > 1: conds.append(eq(t % s, 0))
    q = t // s if s > 1 else t
    if (e - 1 - b) // s >= n_in: conds.append(q < n_in)    # only when the extent reaches past the input
    src.append(q)
  return conds, src


def _bias(ctx, y: Tensor, b) -> Tensor:
  if b is None: return y
  B = ctx.tensor(b)
  if tuple(B.shape) != (y.shape[1],):
    raise ShapeError(f"{_where(ctx)}: bias has shape {tuple(B.shape)}, expected ({y.shape[1]},)")
  return ctx.compute(y.shape, lambda *i: y[i] + B[i[1]], "bias")


def _check_kernel(ctx, ks: Sequence[int]) -> None:
  k = ctx.attr("kernel_shape", None)
  if k is not None and [int(v) for v in k] != list(ks):
    raise ShapeError(f"{_where(ctx)}: kernel_shape {list(k)} does not match the weight's {list(ks)}")


@op("Conv", kind="data_reuse", since=11)
def conv(ctx, x, w, b=None):
  """N-d convolution (1D/2D/3D): groups (depthwise and general), strides, dilations, pads, auto_pad,
  optional bias. A pad stage (inlined) plus a sum over (input channel in group, kernel dims);
  the bias is an elementwise epilogue."""
  return [_bias(ctx, conv_sum(ctx, ctx.tensor(x), ctx.tensor(w)), b)]


def conv_sum(ctx, X: Tensor, W: Tensor, fill=0, packed: bool = False) -> Tensor:
  """The convolution of ``X`` and ``W`` under the node's attributes, in their element type, padding with ``fill``
  (ConvInteger's operands arrive with their zero points subtracted, so 0). ``packed``: ``W`` is stored channels-last
  (``[M, *kernel, channels per group]``, a multiple of 4 channels), ``X`` is read blocked by four channels, and each
  four channels are one ``dot4`` of 8-bit operands (qlinear.py)."""
  if X.ndim < 3 or W.ndim != X.ndim:
    raise ShapeError(f"{_where(ctx)}: input rank {X.ndim} and weight rank {W.ndim} must be equal and >= 3")
  N, C, sp = X.shape[0], X.shape[1], X.shape[2:]
  M, cpg, ks = (W.shape[0], W.shape[-1], W.shape[1:-1]) if packed else (W.shape[0], W.shape[1], W.shape[2:])
  _check_kernel(ctx, ks)
  group = int(ctx.attr("group", 1))
  if group <= 0 or C != cpg * group or M % group:
    raise ShapeError(f"{_where(ctx)}: {C} input channels, weight {tuple(W.shape)} and group={group} do not agree")
  out, pb, pe, st, dl = window(ctx, sp, ks)
  ext = [max(n + b + e, (o - 1) * s + (k - 1) * d + 1) for n, b, e, o, s, k, d in zip(sp, pb, pe, out, st, ks, dl)]
  if packed:   # x blocked by four channels, [N, C / 4, *spatial, 4]: a shared-memory tile of it holds a tap's four
    # channels as one word (staged from NCHW bytes; the tile's reads are then words, not four bytes packed)
    X = ctx.compute((N, C // 4, *sp, 4), lambda n, c, *i: X[(n, 4 * c + i[-1], *i[:-1])], "blocked")
  P = pad_stage(ctx, X, pb, ext, 0.0 if X.dtype in FLOAT_DTYPES else fill)
  mpg = M // group
  steps = cpg // 4 if packed else cpg
  rc = ctx.reduce_axis(steps, "rc") if steps > 1 else None
  rk = _raxes(ctx, ks, "rk")
  axes = [a for a in [rc, *rk] if a is not None]

  def channel(m, c):   # input channel c of output channel m's group
    if group == 1: return c
    if cpg == 1: return m // mpg if mpg > 1 else m
    return (m // mpg) * cpg + c

  def body(n, m, *o):
    pos = [oi * s + _ix(r) * d for oi, s, r, d in zip(o, st, rk, dl)]
    taps = [_ix(r) for r in rk]
    if packed:   # (P's channel blocks: a group's cpg / 4 of them)
      block = _ix(rc) if group == 1 else (m // mpg) * (cpg // 4) + _ix(rc)
      e = dot4([P[(n, block, *pos, t)] for t in range(4)],
               [W[(m, *taps, 4 * _ix(rc) + t)] for t in range(4)])
    else:
      e = P[(n, channel(m, _ix(rc)), *pos)] * W[(m, _ix(rc), *taps)]
    return te.sum(e, axis=axes) if axes else e
  return ctx.compute((N, M, *out), lambda *i: body(*i), "conv")


@op("ConvTranspose", kind="data_reuse", since=11)
def conv_transpose(ctx, x, w, b=None):
  """Transposed convolution (1D/2D/3D): strides, pads, dilations, output_padding, group, auto_pad and
  output_shape (pads derived from it as the spec says).

  Written as TVM writes it: an injective *dilated and padded* input stage (``s - 1`` zeros
  between the elements, ``(k-1)*d - pb`` zeros before them; inlined by every schedule)
  ``xd[n, c, j] = x[n, c, (j - p) / s]`` where ``j - p`` is a multiple of ``s`` inside the
  input (else 0), then a stride-1 convolution with the flipped kernel
  ``out[n, m, o] = sum_{c, k} xd[n, c, o + k*d] * w[c, m, K-1-k]``. Every index of the
  reduction is affine in the loops, so a tiled schedule's shared-memory tile of ``xd`` has
  bounds bound inference can give symbolically (a sketch lowers once; with the division by
  the stride in the reduction's index it could not, and every candidate had to be lowered). Like
  that gather form, it visits every tap: with stride ``s`` all but ``1/s`` of them per dim read a zero."""
  X, W = ctx.tensor(x), ctx.tensor(w)
  if X.ndim < 3 or W.ndim != X.ndim:
    raise ShapeError(f"{_where(ctx)}: input rank {X.ndim} and weight rank {W.ndim} must be equal and >= 3")
  N, C, sp = X.shape[0], X.shape[1], X.shape[2:]
  mpg, ks = W.shape[1], W.shape[2:]
  nsp = len(sp)
  _check_kernel(ctx, ks)
  group = int(ctx.attr("group", 1))
  if group <= 0 or W.shape[0] != C or C % group:
    raise ShapeError(f"{_where(ctx)}: {C} input channels, weight {tuple(W.shape)} and group={group} do not agree")
  cpg, M = C // group, mpg * group
  st, dl = ints_attr(ctx, "strides", nsp, 1), ints_attr(ctx, "dilations", nsp, 1)
  if any(s <= 0 for s in st) or any(d <= 0 for d in dl):
    raise ModelError(f"{_where(ctx)}: strides and dilations must be positive, got {st}, {dl}")
  adj = ints_attr(ctx, "output_padding", nsp, 0)
  if any(a < 0 or a >= max(s, d) for a, s, d in zip(adj, st, dl)):   # onnxruntime and PyTorch refuse it too; the
    raise ModelError(f"{_where(ctx)}: output_padding {adj} must be in [0, max(stride, dilation))")  # ONNX ref differs
  full = [s * (i - 1) + a + (k - 1) * d + 1 for s, i, a, k, d in zip(st, sp, adj, ks, dl)]
  auto_pad = ctx.attr("auto_pad", "NOTSET")
  oshape = ctx.attr("output_shape", None)
  if auto_pad not in ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"):
    raise ctx.error(f"auto_pad={auto_pad!r} is not an ONNX value")
  if oshape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
    out = [int(v) for v in oshape][-nsp:] if oshape is not None else [i * s for i, s in zip(sp, st)]
    tot = [f - o for f, o in zip(full, out)]
    # an output_shape past the full output by less than a stride (NOTSET) gets zeros (plus bias) at the
    # end, as in onnxruntime and the ONNX reference; they disagree on anything else past it
    if any(t < 0 and (auto_pad != "NOTSET" or -t >= s) for t, s in zip(tot, st)):
      how = "by a stride or more" if auto_pad == "NOTSET" else f"with auto_pad={auto_pad}"
      raise ctx.error(f"output_shape {out} larger than the full output {full} {how} (would need negative pads)")
    # the ONNX spec's split: the odd element goes last for SAME_UPPER, first otherwise
    pb = [0 if t < 0 else t // 2 if auto_pad == "SAME_UPPER" else t - t // 2 for t in tot]
  else:
    pads = [0] * 2 * nsp if auto_pad == "VALID" else ints_attr(ctx, "pads", 2 * nsp, 0)
    pb = pads[:nsp]
    out = [f - pads[d] - pads[nsp + d] for d, f in enumerate(full)]
    if any(o <= 0 for o in out): raise ShapeError(f"{_where(ctx)}: pads {pads} leave an empty output")
  lead, ext = [(k - 1) * d - b for k, d, b in zip(ks, dl, pb)], [o + (k - 1) * d for o, k, d in zip(out, ks, dl)]
  xd = _dilate_pad(ctx, X, st, lead, ext)
  # a tap that reads a zero of the dilation multiplies it by its weight: 0 x inf = NaN where the op's sum has no
  # such term. Weights that are constants and finite (a model's) skip the guard; others (inputs) take it
  guarded = xd is not X and not (isinstance(w, np.ndarray) and np.isfinite(w).all())
  rc = ctx.reduce_axis(cpg, "rc") if cpg > 1 else None
  rk = _raxes(ctx, ks, "rk")
  axes = [a for a in [rc, *rk] if a is not None]

  def body(n, m, *o):
    c = (m // mpg) * cpg + _ix(rc) if group > 1 else _ix(rc)
    wm = m % mpg if group > 1 else m
    pos = [oi + _ix(r) * d for oi, r, d in zip(o, rk, dl)]
    e = xd[(n, c, *pos)] * W[(c, wm, *[k - 1 - _ix(r) for k, r in zip(ks, rk)])]
    conds = _dilated_source(pos, st, lead, ext, sp)[0] if guarded else []
    if conds: e = select(all_of(*conds), e, as_expr(0.0, e.dtype))
    return te.sum(e, axis=axes) if axes else e
  y = ctx.compute((N, M, *out), lambda *i: body(*i), "convT")
  return [_bias(ctx, y, b)]


def _chan(ctx, v, C: int, what: str):
  if tuple(v.shape) != (C,): raise ShapeError(f"{_where(ctx)}: {what} has shape {tuple(v.shape)}, expected ({C},)")
  return v


@op("BatchNormalization", kind="broadcast", since=9)
def batch_norm(ctx, x, scale, bias, mean, var):
  """Inference BatchNormalization on (N, C, ...): ``y = x * a[c] + b[c]`` with ``a = scale / sqrt(var + eps)``,
  ``b = B - mean * a`` (folded at compile time when the four are constants). ``training_mode=1`` and the
  running-statistics outputs are not supported."""
  if int(ctx.attr("training_mode", 0)) or len([o for o in ctx.node.outputs if o]) > 1:
    raise ctx.error("training mode (training_mode=1 / running mean and variance outputs) is not supported")
  eps = float(ctx.attr("epsilon", 1e-5))
  X = ctx.tensor(x)
  if X.ndim < 2: raise ShapeError(f"{_where(ctx)}: input rank {X.ndim} < 2")
  C = X.shape[1]
  for v, what in ((scale, "scale"), (bias, "B"), (mean, "input_mean"), (var, "input_var")): _chan(ctx, v, C, what)
  if all(isinstance(v, np.ndarray) for v in (scale, bias, mean, var)):
    a = scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + eps)
    bb = bias.astype(np.float64) - mean.astype(np.float64) * a
    dt = DTYPE_TO_NP[X.dtype] if X.dtype in FLOAT_DTYPES else np.float32   # (coefficients in X's type)
    A, Bt = ctx.const(a.astype(dt), "scale"), ctx.const(bb.astype(dt), "shift")
    return [ctx.compute(X.shape, lambda *i: X[i] * A[i[1]] + Bt[i[1]])]
  S, B, Mn, V = (ctx.tensor(v) for v in (scale, bias, mean, var))

  def body(*i):
    c = i[1]
    a = rsqrt(V[c] + as_expr(eps, V.dtype)) * S[c]
    return (X[i] - Mn[c]) * a + B[c]
  return [ctx.compute(X.shape, body)]


@op("InstanceNormalization", kind="reduction", since=6)
def instance_norm(ctx, x, scale, bias):
  """``y = scale[c] * (x - mean) / sqrt(var + eps) + B[c]``, mean and (biased) variance over the spatial
  dims of each (n, c): a sum stage, a centred sum of squares stage, and the pointwise normalisation."""
  eps = float(ctx.attr("epsilon", 1e-5))
  X = ctx.tensor(x)
  if X.ndim < 3: raise ShapeError(f"{_where(ctx)}: input rank {X.ndim} < 3")
  C, sp = X.shape[1], X.shape[2:]
  S, B = (ctx.tensor(_chan(ctx, v, C, w)) for v, w in ((scale, "scale"), (bias, "B")))
  st = stat_type(X.dtype)                       # a half X: statistics in float32
  cnt = as_expr(1.0 / math.prod(sp), st)
  r1 = [ctx.reduce_axis(n, f"r{d}") for d, n in enumerate(sp)]
  tot = ctx.compute(X.shape[:2], lambda n, c: te.sum(as_stat(X[(n, c, *r1)]), axis=r1), "sum")
  r2 = [ctx.reduce_axis(n, f"r{d}") for d, n in enumerate(sp)]

  def sq(n, c):
    dv = as_stat(X[(n, c, *r2)]) - tot[n, c] * cnt
    return te.sum(dv * dv, axis=r2)
  var = ctx.compute(X.shape[:2], sq, "var")
  e = as_expr(eps, st)
  return [ctx.compute(X.shape, lambda *i: back_to((as_stat(X[i]) - tot[i[0], i[1]] * cnt)
                                                  * rsqrt(var[i[0], i[1]] * cnt + e) * S[i[1]] + B[i[1]], X.dtype))]


@op("LRN", kind="reduction", since=1)
def lrn(ctx, x):
  """Local response normalization across channels (AlexNet, GoogLeNet): ``y = x / (bias + alpha / size *
  s) ** beta`` with ``s`` the sum of ``x**2`` over channels ``c - (size-1)//2 .. c + size//2`` clipped to
  the tensor: a zero-padded channel stage (inlined) and a sum over a window of ``size``."""
  size = int(ctx.attr("size"))
  alpha, beta, bias = float(ctx.attr("alpha", 1e-4)), float(ctx.attr("beta", 0.75)), float(ctx.attr("bias", 1.0))
  X = ctx.tensor(x)
  if X.ndim < 3: raise ShapeError(f"{_where(ctx)}: input rank {X.ndim} < 3")
  if X.dtype not in FLOAT_DTYPES: raise ctx.error(f"dtype {X.dtype} is not supported ({', '.join(FLOAT_DTYPES)})")
  if size <= 0: raise ModelError(f"{_where(ctx)}: size must be positive, got {size}")
  C, sp = X.shape[1], X.shape[2:]
  P = pad_stage(ctx, X, [(size - 1) // 2] + [0] * len(sp), [C + size - 1, *sp], 0.0, first=1)
  r = ctx.reduce_axis(size, "rc") if size > 1 else None

  def sq(n, c, *s):                            # (a half X: the sum of squares in float32)
    if r is None: return as_stat(X[(n, c, *s)]) * as_stat(X[(n, c, *s)])
    v = as_stat(P[(n, c + r, *s)])
    return te.sum(v * v, axis=r)
  ss = ctx.compute(X.shape, sq, "sqsum")
  k, b, e = (as_expr(v, ss.dtype) for v in (alpha / size, bias, beta))
  return [ctx.compute(X.shape, lambda *i: back_to(as_stat(X[i]) / power(ss[i] * k + b, e), X.dtype))]
