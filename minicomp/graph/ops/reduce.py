"""Reductions and normalisations: Reduce*, ArgMax / ArgMin, Softmax / LogSoftmax, Hardmax,
LayerNormalization, RMSNormalization, LpNormalization, MeanVarianceNormalization, CumSum, CumProd.

A TE reduction must be the top-level expression of its compute, so every op here is a chain of
stages: one reduction stage per statistic (max, sum of exp, mean, variance, ...) and elementwise
stages that combine them. Reduction stages take the keepdims-shaped index space of the
output; reduced dims of extent 1 are read at 0 instead of reduced (minicomp forbids reductions
over zero axes, so a reduction over nothing is an elementwise stage).
"""
from __future__ import annotations

import math

import numpy as np

import minicomp.ir.te as te
from minicomp.errors import ShapeError
from minicomp.graph.ops._util import as_stat, back_to, broadcast_shape, load, norm_axis, operand, stat_type
from minicomp.graph.registry import op
from minicomp.ir.expr import Expr, ReduceArg, abs_, cast, const, eq, exp, log, ne, rsqrt, select, sqrt
from minicomp.ir.ops import FLOAT_DTYPES, INTEGER_DTYPES, Op
from minicomp.ir.te import Tensor

_FLOATS = FLOAT_DTYPES


def _where(ctx) -> str:
  return f"{ctx.node.op_type} node {ctx.node.name!r}"


def _prod(e, axes) -> Expr:
  """A product reduction (te exposes sum / max / min only; the lowering knows ``prod``)."""
  return Expr.make(Op.REDUCE, e.dtype, (e,), ReduceArg("prod", tuple(axes)))


_REDUCERS = {"sum": lambda e, a: te.sum(e, axis=a), "max": lambda e, a: te.max(e, axis=a),
             "min": lambda e, a: te.min(e, axis=a), "prod": _prod}


def _stage(ctx, x: Tensor, ax, keep: bool, combiner: str, elem, suffix: str = "") -> Tensor:
  """``out[o] = combiner over the dims ax of elem(input index, o)``: o runs over the reduced shape
  (reduced dims kept as 1 when ``keep``)."""
  raxes = {d: ctx.reduce_axis(x.shape[d], f"r{d}") for d in ax if x.shape[d] > 1}
  shape = tuple(1 if d in ax else s for d, s in enumerate(x.shape) if keep or d not in ax)

  def body(*o):
    idx, p = [], 0
    for d in range(x.ndim):
      if d in ax:
        idx.append(raxes.get(d, 0)); p += keep
      else:
        idx.append(o[p]); p += 1
    e = elem(tuple(idx), o)
    return _REDUCERS[combiner](e, list(raxes.values())) if raxes else e
  return ctx.compute(shape, body, suffix)


def _axes_input(ctx, axes):
  if axes is None: return None
  if isinstance(axes, Tensor): raise ctx.error("axes must be a constant initializer")
  return [int(a) for a in np.asarray(axes).reshape(-1)]


def _plan(ctx, x, axes):
  """The normalised, sorted reduced dims; none for noop_with_empty_axes with no axes."""
  if not axes: return [] if int(ctx.flag("noop_with_empty_axes", 0)) else list(range(x.ndim))
  ax = [norm_axis(int(a), x.ndim, _where(ctx)) for a in axes]
  if len(set(ax)) != len(ax): raise ShapeError(f"{_where(ctx)}: repeated axes {list(axes)}")
  return sorted(ax)


def _map(ctx, t: Tensor, fn, suffix: str = "") -> Tensor:
  return ctx.compute(t.shape, lambda *i: fn(t[i]), suffix)


def _reduce(ctx, x, axes, kind: str):
  """Every ReduceXxx op: ``kind`` names the math. noop_with_empty_axes reduces over no dims:
  the elementwise part still applies (x*x, |x|, ...), as in onnxruntime and the ONNX reference."""
  x = ctx.tensor(x)
  ax = _plan(ctx, x, axes)
  keep, dt = ctx.flag("keepdims", 1), x.dtype
  n = math.prod(x.shape[d] for d in ax)
  X = lambda i, o: x[i]
  if dt == "bool" and kind in ("max", "min"):   # opset 20: bool max = any, min = all
    r = _stage(ctx, x, ax, keep, kind, lambda i, o: cast(x[i], "int32"), "i32")
    return [_map(ctx, r, lambda v: cast(v, "bool"))]
  if dt not in _FLOATS + ("int32", "int64"): raise ctx.error(f"input dtype {dt} is not supported")
  if kind in ("max", "min") and dt in _FLOATS:
    # a NaN anywhere in the reduced dims makes the result NaN, as in ONNX's reference and numpy (a max
    # reduction's combiner, fmaxf, skips NaN; onnxruntime returns an arbitrary element)
    m = _stage(ctx, x, ax, keep, kind, X, kind)
    nan = _stage(ctx, x, ax, keep, "max", lambda i, o: cast(ne(x[i], x[i]), "int32"), "nan")
    return [ctx.compute(m.shape, lambda *o: select(nan[o] > 0, const(math.nan, dt), m[o]))]
  if kind in ("sum", "max", "min", "prod"): return [_stage(ctx, x, ax, keep, kind, X)]
  if kind == "sumsquare": return [_stage(ctx, x, ax, keep, "sum", lambda i, o: x[i] * x[i])]
  if kind == "l1": return [_stage(ctx, x, ax, keep, "sum", lambda i, o: abs_(x[i]))]
  if kind == "l2":
    s = _stage(ctx, x, ax, keep, "sum", lambda i, o: x[i] * x[i], "sumsq")
    # integers: sqrt in double, truncated back (what onnxruntime does: sqrt(89) -> 9)
    return [_map(ctx, s, (lambda v: sqrt(v)) if dt in _FLOATS else (lambda v: cast(sqrt(cast(v, "float64")), dt)))]
  if kind == "mean":
    if dt in _FLOATS: return [_stage(ctx, x, ax, keep, "sum", lambda i, o: x[i] * (1.0 / n))]
    s = _stage(ctx, x, ax, keep, "sum", X, "sum")   # integer mean truncates toward zero (C division)
    return [_map(ctx, s, lambda v: select(v >= 0, v // n, -((-v) // n)))]
  if kind == "logsumexp":
    if dt not in _FLOATS:
      raise ctx.error(f"integer ReduceLogSumExp ({dt}) is not supported: its rounding is runtime-specific")
    m = _stage(ctx, x, ax, keep, "max", X, "max")
    # shifting by an infinite maximum would compute inf - inf = NaN: shift by 0 there instead, so the
    # sum is inf (a +inf element) or 0 (all -inf) and its log the right +-inf
    shift = lambda o: select(abs_(m[o]) < const(math.inf, dt), m[o], const(0.0, dt))
    s = _stage(ctx, x, ax, keep, "sum", lambda i, o: exp(x[i] - shift(o)), "sumexp")
    return [ctx.compute(s.shape, lambda *o: log(s[o]) + shift(o))]
  raise AssertionError(kind)


def _register(name: str, kind: str, doc: str) -> None:
  """The opset-13 form (axes attribute; ReduceSum: input already) and the opset-18 form (axes input)."""
  def attr_form(ctx, x): return _reduce(ctx, x, ctx.attr("axes", None), kind)
  def input_form(ctx, x, axes=None): return _reduce(ctx, x, _axes_input(ctx, axes), kind)
  attr_form.__doc__ = input_form.__doc__ = doc
  if name != "ReduceSum": op(name, kind="reduction", since=13)(attr_form)
  op(name, kind="reduction", since=13 if name == "ReduceSum" else 18)(input_form)


_DOC = (" over ``axes`` (negative ok; empty / absent = all dims unless noop_with_empty_axes), "
        "``keepdims``; opset 13 axes attribute, opset 18 axes input (ReduceSum: input since 13).")
for _name, _kind, _what in [("ReduceSum", "sum", "Sum"), ("ReduceMean", "mean", "Mean (ints truncate)"),
                            ("ReduceMax", "max", "Max (bool: any)"), ("ReduceMin", "min", "Min (bool: all)"),
                            ("ReduceProd", "prod", "Product"), ("ReduceSumSquare", "sumsquare", "Sum of squares"),
                            ("ReduceL1", "l1", "Sum of |x|"), ("ReduceL2", "l2", "sqrt of the sum of squares"),
                            ("ReduceLogSumExp", "logsumexp", "log sum exp, max-shifted")]:
  _register(_name, _kind, _what + _DOC)


def _arg(ctx, x, combiner: str):
  x = ctx.tensor(x)
  ax = norm_axis(int(ctx.attr("axis", 0)), x.ndim, _where(ctx))
  keep, last = ctx.flag("keepdims", 1), ctx.flag("select_last_index", 0)
  if x.dtype not in _FLOATS + ("int32", "int64"): raise ctx.error(f"input dtype {x.dtype} is not supported")
  K = x.shape[ax]
  if K == 1:
    return [ctx.compute(tuple(s for d, s in enumerate(x.shape) if keep or d != ax), lambda *o: const(0, "int64"))]
  m = _stage(ctx, x, [ax], keep, combiner, lambda i, o: x[i], combiner)
  # the first (or last) index holding the extreme value: min (max) of k over the matches
  miss = const(-1 if last else K, "int64")
  pick = "max" if last else "min"
  found = _stage(ctx, x, [ax], keep, pick, lambda i, o: select(eq(x[i], m[o]), cast(i[ax], "int64"), miss))
  if x.dtype not in _FLOATS: return [found]
  # a NaN is the extreme value, as in ONNX's reference (numpy): the first (last) NaN's index where there is one
  nan = _stage(ctx, x, [ax], keep, pick, lambda i, o: select(ne(x[i], x[i]), cast(i[ax], "int64"), miss), "nan")
  return [ctx.compute(found.shape, lambda *o: select(eq(nan[o], miss), found[o], nan[o]))]


@op("ArgMax", kind="reduction", since=13)
def argmax(ctx, x):
  """Index (int64) of the maximum along ``axis``; keepdims; select_last_index picks the last tie."""
  return _arg(ctx, x, "max")


@op("ArgMin", kind="reduction", since=13)
def argmin(ctx, x):
  """Index (int64) of the minimum along ``axis``; keepdims; select_last_index picks the last tie."""
  return _arg(ctx, x, "min")


def _softmax(ctx, x, logsm: bool, ax: int | None = None, keep_stat: bool = False):
  """Softmax / LogSoftmax along ``ax`` (default: the node's ``axis`` attribute); ``keep_stat``: the result in
  the statistics' type (float32 for a half x) instead of x's, for an op that goes on computing with it."""
  x = ctx.tensor(x)
  if x.dtype not in _FLOATS: raise ctx.error(f"input dtype {x.dtype} is not supported")
  if ax is None: ax = norm_axis(int(ctx.attr("axis", -1)), x.ndim, _where(ctx))
  X = lambda i: as_stat(x[i])                   # a half x: max and sum kept in float32
  done = (lambda e: e) if keep_stat else (lambda e: back_to(e, x.dtype))
  m = _stage(ctx, x, [ax], True, "max", lambda i, o: X(i), "max")
  s = _stage(ctx, x, [ax], True, "sum", lambda i, o: exp(X(i) - m[o]), "sumexp")
  red = lambda i: tuple(0 if d == ax else v for d, v in enumerate(i))
  if logsm: return [ctx.compute(x.shape, lambda *i: done(X(i) - m[red(i)] - log(s[red(i)])))]
  return [ctx.compute(x.shape, lambda *i: done(exp(X(i) - m[red(i)]) / s[red(i)]))]


@op("Softmax", kind="reduction", since=13)
def softmax(ctx, x):
  """Opset-13 Softmax along one ``axis`` (default -1, negative ok): max, sum of exp(x - max),
  divide — three stages, numerically stable."""
  return _softmax(ctx, x, False)


@op("LogSoftmax", kind="reduction", since=13)
def log_softmax(ctx, x):
  """Opset-13 LogSoftmax along ``axis``: x - max - log(sum(exp(x - max)))."""
  return _softmax(ctx, x, True)


@op("LayerNormalization", kind="reduction", since=17)
def layer_norm(ctx, x, scale, bias=None):
  """Normalise over dims axis..last (``axis`` negative ok): two-pass mean and variance,
  InvStdDev = rsqrt(var + epsilon), Y = (x - mean) * InvStdDev * Scale + B (Scale / B broadcast
  to x's trailing dims). Outputs Mean / InvStdDev (keepdims shape) in the stash type;
  stash_type must be 1 (float32); a float64 X is computed in float64, its stats cast to float32; a float16 /
  bfloat16 X has its statistics computed and kept in float32."""
  x = ctx.tensor(x)
  if x.dtype not in _FLOATS: raise ctx.error(f"input dtype {x.dtype} is not supported")
  if int(ctx.attr("stash_type", 1)) != 1: raise ctx.error("only stash_type=1 (float32 statistics) is supported")
  eps = float(ctx.attr("epsilon", 1e-5))
  a0 = norm_axis(int(ctx.attr("axis", -1)), x.ndim, _where(ctx))
  ax = list(range(a0, x.ndim))
  n = math.prod(x.shape[a0:])
  S, B = operand(ctx, scale), (operand(ctx, bias) if bias is not None else None)
  for v, nm in ((scale, "Scale"), (bias, "B")):
    if v is not None and broadcast_shape(v.shape, x.shape, where=_where(ctx)) != x.shape:
      raise ShapeError(f"{_where(ctx)}: {nm} of shape {tuple(v.shape)} does not broadcast to X {x.shape}")
  X, st = (lambda i: as_stat(x[i])), stat_type(x.dtype)     # a half x: statistics in float32
  mean = _stage(ctx, x, ax, True, "sum", lambda i, o: X(i) * (1.0 / n), "mean")

  def sq(i, o):
    d = X(i) - mean[o]
    return d * d * (1.0 / n)
  var = _stage(ctx, x, ax, True, "sum", sq, "var")
  # a variance past the type's range (deviations past 1.8e19 in float32) gives rsqrt(inf) = 0: the outputs are B
  # where the deviation is finite and NaN where it overflows (inf * 0), as onnxruntime and ONNX's reference compute
  # it (their float math overflows the same way; until 2026-11-30 every output was NaN, a wrong answer the fuzzer
  # found: a MatMul of a -1e38 weight before a LayerNormalization)
  inv = ctx.compute(var.shape, lambda *o: rsqrt(var[o] + eps), "invstd")
  red = lambda i: tuple(0 if d >= a0 else v for d, v in enumerate(i))

  def y(*i):
    v = (X(i) - mean[red(i)]) * inv[red(i)] * load(S, x.shape, i)
    return back_to(v + load(B, x.shape, i) if B is not None else v, x.dtype)
  out = ctx.compute(x.shape, y)
  if st != "float32":
    to32 = lambda v: cast(v, "float32")
    mean, inv = _map(ctx, mean, to32, "mean32"), _map(ctx, inv, to32, "inv32")
  return [out, mean, inv]


@op("GroupNormalization", kind="reduction", since=18)
def group_norm(ctx, x, scale, bias):
  """ONNX GroupNormalization: X (N, C, ...) in ``num_groups`` groups of C / num_groups channels, each
  normalised over its channels and spatial dims (two-pass mean and variance, ``epsilon`` 1e-5); scale and bias
  per channel (opset 21) or per group (opset 18); statistics in float32 for a half X (stash_type 1)."""
  x = ctx.tensor(x)
  if x.dtype not in _FLOATS: raise ctx.error(f"input dtype {x.dtype} is not supported")
  if int(ctx.attr("stash_type", 1)) != 1: raise ctx.error("only stash_type=1 (float32 statistics) is supported")
  if x.ndim < 3: raise ShapeError(f"{_where(ctx)}: X must be (N, C, D1, ...), got {list(x.shape)}")
  G, eps = int(ctx.attr("num_groups")), float(ctx.attr("epsilon", 1e-5))
  N, C, S = x.shape[0], x.shape[1], tuple(x.shape[2:])
  if G < 1 or C % G: raise ShapeError(f"{_where(ctx)}: num_groups={G} does not divide the {C} channels")
  per = C if ctx.opset >= 21 else G
  for v, nm in ((scale, "scale"), (bias, "bias")):
    if tuple(v.shape) != (per,): raise ShapeError(f"{_where(ctx)}: {nm} shape {list(v.shape)} is not [{per}]")
  Cg, n = C // G, (C // G) * math.prod(S)
  X = lambda i: as_stat(x[i])

  def group_sum(fn, suffix):
    def body(b, g):
      c = ctx.reduce_axis(Cg, "c")
      sp = [ctx.reduce_axis(d, f"s{k}") for k, d in enumerate(S)]
      return te.sum(fn((b, g * Cg + c) + tuple(sp), (b, g)), axis=[c] + sp)
    return ctx.compute((N, G), body, suffix)
  mean = group_sum(lambda i, o: X(i) * (1.0 / n), "mean")
  var = group_sum(lambda i, o: (X(i) - mean[o]) * (X(i) - mean[o]) * (1.0 / n), "var")
  inv = ctx.compute((N, G), lambda b, g: rsqrt(var[b, g] + eps), "invstd")
  Sc, B = ctx.tensor(scale), ctx.tensor(bias)

  def y(*i):
    b, c = i[0], i[1]
    g = c // Cg
    k = c if per == C else g
    return back_to((X(i) - mean[b, g]) * inv[b, g] * as_stat(Sc[(k,)]) + as_stat(B[(k,)]), x.dtype)
  return [ctx.compute(x.shape, y)]


@op("RMSNormalization", kind="reduction", since=23)
def rms_norm(ctx, x, scale):
  """ONNX RMSNormalization (opset 23): ``Y = X / sqrt(mean(X^2 over dims axis..last) + epsilon) * Scale``
  (axis default -1, epsilon 1e-5); the statistic in float32 for a half X (stash_type 1, the only one
  supported)."""
  x = ctx.tensor(x)
  if x.dtype not in _FLOATS: raise ctx.error(f"input dtype {x.dtype} is not supported")
  if int(ctx.attr("stash_type", 1)) != 1: raise ctx.error("only stash_type=1 (float32 statistics) is supported")
  eps = float(ctx.attr("epsilon", 1e-5))
  a0 = norm_axis(int(ctx.attr("axis", -1)), x.ndim, _where(ctx))
  n = math.prod(x.shape[a0:])
  if broadcast_shape(scale.shape, x.shape, where=_where(ctx)) != x.shape:
    raise ShapeError(f"{_where(ctx)}: scale of shape {tuple(scale.shape)} does not broadcast to X {x.shape}")
  S, X = operand(ctx, scale), (lambda i: as_stat(x[i]))
  ms = _stage(ctx, x, list(range(a0, x.ndim)), True, "sum", lambda i, o: X(i) * X(i) * (1.0 / n), "meansq")
  inv = _map(ctx, ms, lambda v: rsqrt(v + eps), "invrms")
  red = lambda i: tuple(0 if d >= a0 else v for d, v in enumerate(i))
  return [ctx.compute(x.shape, lambda *i: back_to(X(i) * inv[red(i)] * load(S, x.shape, i), x.dtype))]


@op("LpNormalization", kind="reduction", since=1)
def lp_norm(ctx, x):
  """ONNX LpNormalization: ``x / ||x||_p`` along ``axis`` (default -1), p = 1 or 2 (default 2); where the norm
  is 0 the output is 0 (ONNX's reference divides by 1 there)."""
  x = ctx.tensor(x)
  if x.dtype not in _FLOATS: raise ctx.error(f"input dtype {x.dtype} is not supported")
  p = int(ctx.attr("p", 2))
  if p not in (1, 2): raise ctx.error(f"p={p} is not one of 1, 2")
  ax = norm_axis(int(ctx.attr("axis", -1)), x.ndim, _where(ctx))
  X = lambda i: as_stat(x[i])
  acc = _stage(ctx, x, [ax], True, "sum", (lambda i, o: abs_(X(i))) if p == 1 else (lambda i, o: X(i) * X(i)), "norm")
  acc = _map(ctx, acc, (lambda v: select(eq(v, 0.0), 1.0, sqrt(v))) if p == 2 else
             (lambda v: select(eq(v, 0.0), 1.0, v)), "norm1")
  red = lambda i: tuple(0 if d == ax else v for d, v in enumerate(i))
  return [ctx.compute(x.shape, lambda *i: back_to(X(i) / acc[red(i)], x.dtype))]


@op("MeanVarianceNormalization", kind="reduction", since=9)
def mean_variance_norm(ctx, x):
  """ONNX MeanVarianceNormalization over ``axes`` (default [0, 2, 3]): ``(x - E[x]) / (sqrt(E[x^2] - E[x]^2)
  + 1e-9)``, ONNX's function body (its epsilon added to the standard deviation)."""
  x = ctx.tensor(x)
  if x.dtype not in _FLOATS: raise ctx.error(f"input dtype {x.dtype} is not supported")
  ax = _plan(ctx, x, list(ctx.attr("axes", [0, 2, 3])))
  n = math.prod(x.shape[d] for d in ax)
  X = lambda i: as_stat(x[i])
  mean = _stage(ctx, x, ax, True, "sum", lambda i, o: X(i) * (1.0 / n), "mean")
  msq = _stage(ctx, x, ax, True, "sum", lambda i, o: X(i) * X(i) * (1.0 / n), "meansq")
  red = lambda i: tuple(0 if d in ax else v for d, v in enumerate(i))
  std = ctx.compute(mean.shape, lambda *o: sqrt(msq[o] - mean[o] * mean[o]) + 1e-9, "std")
  return [ctx.compute(x.shape, lambda *i: back_to((X(i) - mean[red(i)]) / std[red(i)], x.dtype))]


@op("Hardmax", kind="reduction", since=13)
def hardmax(ctx, x):
  """ONNX Hardmax (opset 13): 1 at the first maximum along ``axis`` (default -1), 0 elsewhere."""
  x = ctx.tensor(x)
  if x.dtype not in _FLOATS: raise ctx.error(f"input dtype {x.dtype} is not supported")
  ax = norm_axis(int(ctx.attr("axis", -1)), x.ndim, _where(ctx))
  n = x.shape[ax]
  m = _stage(ctx, x, [ax], True, "max", lambda i, o: as_stat(x[i]), "max")
  red = lambda i: tuple(0 if d == ax else v for d, v in enumerate(i))
  # the first index holding the maximum: the smallest index j with x[j] == max
  first = _stage(ctx, x, [ax], True, "min", lambda i, o: select(eq(as_stat(x[i]), m[o]), i[ax], n), "first")
  return [ctx.compute(x.shape, lambda *i: select(eq(i[ax], first[red(i)]), const(1, x.dtype), const(0, x.dtype)))]


def _const_scalar(ctx, v, what: str) -> int:
  """The one integer a constant input holds (CumSum's axis, TopK's K)."""
  if isinstance(v, Tensor): raise ctx.error(f"{what} must be a constant initializer")
  a = np.asarray(v).reshape(-1)
  if a.size != 1: raise ShapeError(f"{_where(ctx)}: {what} must hold one value, got {a.tolist()}")
  return int(a[0])


def _cumulative(ctx, x, axis, combiner: str):
  """Cumulative ``combiner`` (sum / prod) along ``axis`` (a constant 0-d / 1-element input, negative ok):
  ``exclusive`` leaves out the element itself, ``reverse`` runs from the end."""
  a = _const_scalar(ctx, axis, "axis")
  x = ctx.tensor(x)
  if x.dtype not in _FLOATS + ("int32", "int64"): raise ctx.error(f"input dtype {x.dtype} is not supported")
  ax = norm_axis(a, x.ndim, _where(ctx))
  excl, rev = ctx.flag("exclusive", 0), ctx.flag("reverse", 0)
  n, unit = x.shape[ax], const(0 if combiner == "sum" else 1, x.dtype)
  if n == 1: return [_map(ctx, x, (lambda v: unit) if excl else (lambda v: v))]
  k = ctx.reduce_axis(n, "k")

  def body(*i):
    j = i[ax]
    keep = (k > j if excl else k >= j) if rev else (k < j if excl else k <= j)
    src = tuple(k if d == ax else v for d, v in enumerate(i))
    return _REDUCERS[combiner](select(keep, x[src], unit), [k])
  return [ctx.compute(x.shape, body)]


@op("CumProd", kind="reduction", since=26)
def cumprod(ctx, x, axis):
  """ONNX CumProd (opset 26): as CumSum with products (the empty product, for ``exclusive``, is 1)."""
  return _cumulative(ctx, x, axis, "prod")


@op("CumSum", kind="reduction", since=11)
def cumsum(ctx, x, axis):
  """Cumulative sum along ``axis`` (a constant 0-d / 1-element input, negative ok): ``exclusive``
  leaves out the element itself, ``reverse`` sums from the end."""
  return _cumulative(ctx, x, axis, "sum")


TOPK_MAX = 4096      # TopK computes each element's rank against every other: quadratic in the axis' length


@op("TopK", kind="reduction", since=11)
def top_k(ctx, x, k):
  """ONNX TopK (opset 11+): the ``K`` largest (``largest=1``) or smallest values along ``axis`` (default -1) and
  their int64 indices, in order, equal values by lower index first (ONNX's rule; ``sorted=0`` gives the same
  order). Computed by rank: each element's rank is the number of elements that precede it in that order (a
  reduction over the axis), and output j is the element of rank j: quadratic in the axis' length, so an axis
  longer than :data:`TOPK_MAX` is refused. K must be a constant."""
  K = _const_scalar(ctx, k, "K")
  x = ctx.tensor(x)
  if x.dtype not in _FLOATS + INTEGER_DTYPES: raise ctx.error(f"input dtype {x.dtype} is not supported")
  ax = norm_axis(int(ctx.attr("axis", -1)), x.ndim, _where(ctx))
  n = x.shape[ax]
  if not 1 <= K <= n: raise ShapeError(f"{_where(ctx)}: K={K} is not in [1, {n}] (the axis' length)")
  if n > TOPK_MAX: raise ctx.error(f"an axis of {n} elements is not supported (at most {TOPK_MAX}: the kernel is quadratic)")
  before = (lambda a, b: a > b) if ctx.flag("largest", 1) else (lambda a, b: a < b)
  at = lambda i, r: tuple(r if d == ax else v for d, v in enumerate(i))

  def rank(*i):
    r = ctx.reduce_axis(n, "r")
    xr, xi = x[at(i, r)], x[i]
    return te.sum(select(before(xr, xi) | (eq(xr, xi) & (r < i[ax])), const(1, "int32"), const(0, "int32")), axis=r)
  rk = ctx.compute(x.shape, rank, "rank")
  shape = tuple(K if d == ax else s for d, s in enumerate(x.shape))
  low = const(-math.inf, x.dtype) if x.dtype in _FLOATS else const(np.iinfo(np.dtype(x.dtype)).min, x.dtype)

  def value(*j):
    r = ctx.reduce_axis(n, "r")
    return te.max(select(eq(rk[at(j, r)], j[ax]), x[at(j, r)], low), axis=r)

  def index(*j):
    r = ctx.reduce_axis(n, "r")
    return te.max(select(eq(rk[at(j, r)], j[ax]), cast(r, "int64"), const(-1, "int64")), axis=r)
  return [ctx.compute(shape, value, "values"), ctx.compute(shape, index, "indices")]
