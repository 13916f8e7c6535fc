"""Elementwise ops: unary math, activations, binary arithmetic with broadcasting, comparisons, logic, casts.

Unary ops are ``elementwise``; ops with several tensor inputs broadcast numpy-style (``broadcast``).
A constant input with one element becomes an inline scalar (``_util.operand``), any other
constant a constant placeholder. Float-only ops reject integer inputs with an error naming the
node rather than computing in float and returning the wrong dtype.
"""
from __future__ import annotations

import math

import numpy as np

import minicomp.ir.te as te
from minicomp.errors import ModelError
from minicomp.frontend.dtypes import ONNX_TO_DTYPE
from minicomp.graph.ops._util import broadcast_shape, dtype_of, load, operand
from minicomp.graph.registry import op
from minicomp.ir.expr import (Expr, abs_, call, cast, const, eq, erf, exp, log, max_, min_, ne, power, select, sigmoid,
                              sqrt, tanh)
from minicomp.ir.ops import BITCAST, DTYPE_BYTES, FLOAT_DTYPES, INTEGER_DTYPES, UNSIGNED_DTYPES, bitcastable, finfo
from minicomp.ir.te import Tensor

FLOATS = FLOAT_DTYPES
# ONNX TensorProto element types minicomp can cast to
_ONNX_DTYPES = ONNX_TO_DTYPE


def _where(ctx) -> str: return f"{ctx.node.op_type} node {ctx.node.name!r}"


def _check(ctx, vals, allowed, what: str) -> str:
  """The common dtype of ``vals`` (None entries skipped); an error when it is not in ``allowed``."""
  ds = {dtype_of(v) for v in vals if v is not None}
  if len(ds) != 1: raise ctx.error(f"inputs have different element types {sorted(ds)}")
  d = ds.pop()
  if d not in allowed: raise ctx.error(f"element type {d} is not supported ({what}: {', '.join(allowed)})")
  return d


def _nary(ctx, vals, fn, shape=None) -> Tensor:
  """``fn`` of the broadcast reads of ``vals`` over ``shape`` (default: their broadcast shape)."""
  out = broadcast_shape(*[v.shape for v in vals], where=_where(ctx))
  if shape is not None:
    if broadcast_shape(out, shape, where=_where(ctx)) != tuple(shape):
      raise ctx.error(f"inputs of shapes {[tuple(v.shape) for v in vals]} do not broadcast to {tuple(shape)}")
    out = tuple(shape)
  ops = [operand(ctx, v) for v in vals]
  return ctx.compute(out, lambda *i: fn(*[load(o, out, i) for o in ops]))


def _unary(ctx, x, fn, allowed=FLOATS) -> list[Tensor]:
  _check(ctx, [x], allowed, "supported")
  return [_nary(ctx, [x], fn)]


def _binary(ctx, a, b, fn, allowed=FLOATS + INTEGER_DTYPES) -> list[Tensor]:
  _check(ctx, [a, b], allowed, "supported")
  return [_nary(ctx, [a, b], fn)]


def _unary_op(name: str, fn, since: int, allowed=FLOATS, doc: str = ""):
  def lower(ctx, x): return _unary(ctx, x, fn, allowed)
  lower.__name__ = name.lower()
  lower.__doc__ = doc or f"ONNX {name}."
  op(name, kind="elementwise", since=since)(lower)


def _binary_op(name: str, fn, since: int, allowed=FLOATS + INTEGER_DTYPES, doc: str = ""):
  def lower(ctx, a, b): return _binary(ctx, a, b, fn, allowed)
  lower.__name__ = name.lower()
  lower.__doc__ = doc or f"ONNX {name} with multidirectional broadcasting."
  op(name, kind="broadcast", since=since)(lower)


def _zero(e: Expr): return 0.0 if e.dtype in FLOAT_DTYPES else 0


def _max(x: Expr, y: Expr) -> Expr:
  """max that propagates NaN from either side, like onnxruntime (CUDA fmaxf drops a NaN)."""
  if x.dtype not in FLOAT_DTYPES: return max_(x, y)
  return select((x > y) | ne(x, x), x, y)


def _min(x: Expr, y: Expr) -> Expr:
  if x.dtype not in FLOAT_DTYPES: return min_(x, y)
  return select((x < y) | ne(x, x), x, y)


# ---------------------------------------------------------------------------------------------
# arithmetic

def _trunc_div(a: Expr, b: Expr) -> Expr:
  """Integer division truncating toward zero (ONNX / onnxruntime / C), not floor division.

  Divides magnitudes: ``max(|a|, 0) // max(|b|, 1)`` is provably non-negative, so the emitter
  prints C ``/`` in the operands' own type (int64 stays int64). A zero divisor divides by 1 here (no trap):
  callers say what it gives.
  """
  if a.dtype in UNSIGNED_DTYPES: return a // max_(b, 1)
  if a.dtype in ("int8", "int16"):        # in int32: the magnitude of -128 is 128, which int8 does not hold
    return cast(_trunc_div(cast(a, "int32"), cast(b, "int32")), a.dtype)
  q = max_(max_(a, -a), 0) // max_(max_(b, -b), 1)
  return select(ne(a < 0, b < 0), -q, q)


@op("Add", kind="broadcast", since=7)
def add(ctx, a, b): return _binary(ctx, a, b, lambda x, y: x + y)


_binary_op("Sub", lambda x, y: x - y, 7)
_binary_op("Mul", lambda x, y: x * y, 7)


@op("Div", kind="broadcast", since=7)
def div(ctx, a, b):
  """ONNX Div: true division for floats; integer division truncates toward zero (-7 / 2 = -3). An integer zero
  divisor gives 0, as for Mod (ONNX leaves it undefined; its reference evaluator, numpy, gives 0; C would trap)."""
  d = _check(ctx, [a, b], FLOATS + INTEGER_DTYPES, "supported")
  if d in FLOATS: return _binary(ctx, a, b, lambda x, y: x / y)
  return _binary(ctx, a, b, lambda x, y: select(eq(y, 0), const(0, x.dtype), _trunc_div(x, y)))


@op("Pow", kind="broadcast", since=12)
def pow_(ctx, a, b):
  """ONNX Pow: output has the base's type; the exponent may have another type. A constant exponent
  2 or 1 is a multiply / the base; an integer base is computed in float64 and truncated (as
  onnxruntime's ``static_cast<T>(std::pow(x, y))``)."""
  t = dtype_of(a)
  if t not in FLOATS + INTEGER_DTYPES or dtype_of(b) not in FLOATS + INTEGER_DTYPES:
    raise ctx.error(f"element types {t}, {dtype_of(b)} are not supported")
  if not isinstance(b, Tensor) and b.size == 1 and b.reshape(()).item() in (1, 2):
    k = b.reshape(()).item()
    return [_nary(ctx, [a, b], lambda x, _: x * x if k == 2 else x)]
  if t in FLOATS: return [_nary(ctx, [a, b], lambda x, y: power(x, cast(y, t)))]
  return [_nary(ctx, [a, b], lambda x, y: cast(power(cast(x, "float64"), cast(y, "float64")), t))]


def _variadic(ctx, vals, fn, allowed):
  if not vals: raise ctx.error("needs at least one input")
  _check(ctx, vals, allowed, "supported")

  def body(*xs):
    acc = xs[0]
    for x in xs[1:]: acc = fn(acc, x)
    return acc
  return body


@op("Sum", kind="broadcast", since=13)
def sum_(ctx, *xs):
  """ONNX Sum: variadic (one input or more), multidirectional broadcasting."""
  return [_nary(ctx, list(xs), _variadic(ctx, xs, lambda x, y: x + y, FLOATS))]


@op("Mean", kind="broadcast", since=13)
def mean(ctx, *xs):
  """ONNX Mean: the sum of the broadcast inputs divided by their count."""
  s = _variadic(ctx, xs, lambda x, y: x + y, FLOATS)
  return [_nary(ctx, list(xs), lambda *v: s(*v) / float(len(xs)))]


@op("Min", kind="broadcast", since=13)
def min_op(ctx, *xs):
  """ONNX Min: variadic, broadcasting; floats and ints; a NaN input gives NaN (as onnxruntime)."""
  return [_nary(ctx, list(xs), _variadic(ctx, xs, _min, FLOATS + INTEGER_DTYPES))]


@op("Max", kind="broadcast", since=13)
def max_op(ctx, *xs):
  """ONNX Max: variadic, broadcasting; floats and ints; a NaN input gives NaN (as onnxruntime)."""
  return [_nary(ctx, list(xs), _variadic(ctx, xs, _max, FLOATS + INTEGER_DTYPES))]


_unary_op("Neg", lambda x: -x, 13, FLOATS + INTEGER_DTYPES)
_unary_op("Abs", lambda x: x if x.dtype in UNSIGNED_DTYPES else abs_(x), 13, FLOATS + INTEGER_DTYPES)
_unary_op("Sqrt", sqrt, 13)
_unary_op("Exp", exp, 13)
_unary_op("Log", log, 13)
_unary_op("Reciprocal", lambda x: 1.0 / x, 13)
_unary_op("Floor", lambda x: call("floor", x), 13)
_unary_op("Ceil", lambda x: call("ceil", x), 13)
def _sign(x: Expr) -> Expr:
  zero = select(ne(x, x), x, 0.0) if x.dtype in FLOAT_DTYPES else const(0, x.dtype)   # Sign(NaN) = NaN
  return select(x > 0, const(1, x.dtype), select(x < 0, const(-1, x.dtype), zero))


_unary_op("Sign", _sign, 13, FLOATS + INTEGER_DTYPES)
_unary_op("Erf", erf, 13, doc="ONNX Erf (float inputs; integer Erf is not supported).")
_unary_op("Tanh", tanh, 13)
_unary_op("Sigmoid", sigmoid, 13)


def _round_half_even(x: Expr) -> Expr:
  r = call("floor", x)
  d = x - r                                    # exact for floats
  even = r + (r - call("floor", r * 0.5) * 2.0)  # r + 1 when r is odd, r when even
  return select(eq(d, 0.5), even, select(d > 0.5, r + 1.0, r))   # inf / nan: d is nan -> r


_unary_op("Round", _round_half_even, 11,
          doc="ONNX Round: halves round to even (2.5 -> 2, -1.5 -> -2), as onnxruntime's nearbyint; CUDA "
              "roundf rounds halves away from zero, so this is built from floor.")


for _name, _since in (("Sin", 7), ("Cos", 7), ("Tan", 7), ("Asin", 7), ("Acos", 7), ("Atan", 7), ("Sinh", 9),
                     ("Cosh", 9), ("Asinh", 9), ("Acosh", 9), ("Atanh", 9)):
  _unary_op(_name, lambda x, f=_name.lower(): call(f, x), _since,
            doc=f"ONNX {_name} (float inputs; CUDA's {_name.lower()}f / {_name.lower()}, numpy's on the CPU).")


@op("IsNaN", kind="elementwise", since=9)
def is_nan(ctx, x):
  """ONNX IsNaN: a bool tensor, true where x is NaN (x != x)."""
  return _unary(ctx, x, lambda v: ne(v, v))


@op("IsInf", kind="elementwise", since=10)
def is_inf(ctx, x):
  """ONNX IsInf: true where x is +inf (``detect_positive``, default 1) or -inf (``detect_negative``, default 1),
  tested as beyond the type's largest finite value (so a half input is tested after its exact widening)."""
  big = float(finfo(_check(ctx, [x], FLOATS, "supported")).max)
  pos, neg = ctx.flag("detect_positive", 1), ctx.flag("detect_negative", 1)

  def body(v):
    hits = [h for h, on in ((v > big, pos), (v < -big, neg)) if on]
    if not hits: return ne(v, v) & eq(v, v)     # neither detected: all false
    return hits[0] | hits[1] if len(hits) == 2 else hits[0]
  return [_nary(ctx, [x], body)]


@op("Mod", kind="broadcast", since=10)
def mod(ctx, a, b):
  """ONNX Mod. ``fmod=0``: the remainder takes the divisor's sign (``a - floor(a / b) * b``, Python's ``%``;
  for floats, as opset 28 defines it, fmod's remainder moved by one divisor where the signs differ);
  ``fmod=1``: C's fmod, the dividend's sign (floats: fmodf / fmod; integers: truncating division). An
  integer zero divisor gives 0 (ONNX leaves it undefined; C would trap); a float one NaN."""
  d = _check(ctx, [a, b], FLOATS + INTEGER_DTYPES, "supported")
  fmod = ctx.flag("fmod", 0)
  if d in FLOATS:
    def float_mod(x, y):
      r = call("fmod", x, y)
      return r if fmod else select(ne(r, _zero(r)) & ne(r < 0, y < 0), r + y, r)
    return _binary(ctx, a, b, float_mod)

  def int_mod(x, y):
    zero = eq(y, 0)
    safe = select(zero, const(1, y.dtype), y)
    r = x - _trunc_div(x, safe) * safe if fmod else x % safe
    return select(zero, const(0, x.dtype), r)
  return _binary(ctx, a, b, int_mod)


# bit operations (integer types): C's operators in the operands' type

_binary_op("BitwiseAnd", lambda x, y: call("bitand", x, y), 18, INTEGER_DTYPES)
_binary_op("BitwiseOr", lambda x, y: call("bitor", x, y), 18, INTEGER_DTYPES)
_binary_op("BitwiseXor", lambda x, y: call("bitxor", x, y), 18, INTEGER_DTYPES)
_unary_op("BitwiseNot", lambda x: call("bitnot", x), 18, INTEGER_DTYPES)


@op("BitShift", kind="broadcast", since=11)
def bit_shift(ctx, a, b):
  """ONNX BitShift: ``direction`` "LEFT" or "RIGHT"; unsigned types, and since opset 28 signed ones (an arithmetic
  right shift). A shift by a negative amount or by the type's width or more gives the sign fill: -1 for a right
  shift of a negative value, else 0 (as numpy; C leaves it undefined)."""
  direction = ctx.attr("direction")
  direction = direction.decode() if isinstance(direction, bytes) else direction
  if direction not in ("LEFT", "RIGHT"):
    raise ctx.error(f"direction must be 'LEFT' or 'RIGHT', got {direction!r}")
  return _binary(ctx, a, b, lambda x, y: call("shl" if direction == "LEFT" else "shr", x, y), INTEGER_DTYPES)


# ---------------------------------------------------------------------------------------------
# activations

@op("Relu", kind="elementwise", since=6)
def relu(ctx, x):
  """ONNX Relu (integer types since opset 14); Relu(NaN) = NaN as in onnxruntime."""
  return _unary(ctx, x, lambda v: select(v < 0, _zero(v), v) if v.dtype in FLOAT_DTYPES else te.max(v, 0),
                FLOATS + INTEGER_DTYPES)


@op("LeakyRelu", kind="elementwise", since=6)
def leaky_relu(ctx, x):
  """ONNX LeakyRelu: ``x < 0 ? alpha * x : x``, alpha default 0.01."""
  alpha = ctx.attr("alpha", 0.01)
  return _unary(ctx, x, lambda v: select(v < 0, v * alpha, v))


@op("PRelu", kind="broadcast", since=9)
def prelu(ctx, x, slope):
  """ONNX PRelu: ``x < 0 ? slope * x : x``; slope broadcasts unidirectionally to x's shape."""
  _check(ctx, [x, slope], FLOATS + INTEGER_DTYPES, "supported")
  return [_nary(ctx, [x, slope], lambda v, s: select(v < 0, v * s, v), shape=x.shape)]


@op("Elu", kind="elementwise", since=6)
def elu(ctx, x):
  """ONNX Elu: ``x < 0 ? alpha * (exp(x) - 1) : x``, alpha default 1."""
  alpha = ctx.attr("alpha", 1.0)
  return _unary(ctx, x, lambda v: select(v < 0, (exp(v) - 1.0) * alpha, v))


@op("Selu", kind="elementwise", since=6)
def selu(ctx, x):
  """ONNX Selu: ``gamma * (x > 0 ? x : alpha * exp(x) - alpha)`` with ONNX's float32 defaults."""
  alpha = ctx.attr("alpha", 1.67326319217681884765625)
  gamma = ctx.attr("gamma", 1.05070102214813232421875)
  return _unary(ctx, x, lambda v: select(v > 0, v * gamma, (exp(v) * alpha - alpha) * gamma))


@op("Softplus", kind="elementwise", since=1)
def softplus(ctx, x):
  """ONNX Softplus ``log(exp(x) + 1)``, computed as ``max(x, 0) + log(1 + exp(-|x|))`` (no overflow)."""
  return _unary(ctx, x, _softplus)


@op("Softsign", kind="elementwise", since=1)
def softsign(ctx, x):
  """ONNX Softsign ``x / (1 + |x|)``."""
  return _unary(ctx, x, lambda v: v / (abs_(v) + 1.0))


@op("Celu", kind="elementwise", since=12)
def celu(ctx, x):
  """ONNX Celu ``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``, alpha default 1."""
  alpha = float(ctx.attr("alpha", 1.0))
  return _unary(ctx, x, lambda v: select(v > 0, v, (exp(v * (1.0 / alpha)) - 1.0) * alpha))


@op("Shrink", kind="elementwise", since=9)
def shrink(ctx, x):
  """ONNX Shrink: ``x < -lambd ? x + bias : x > lambd ? x - bias : 0`` (lambd 0.5, bias 0 by default)."""
  lambd, bias = float(ctx.attr("lambd", 0.5)), float(ctx.attr("bias", 0.0))
  return _unary(ctx, x, lambda v: select(v < -lambd, v + bias, select(v > lambd, v - bias, _zero(v))))


@op("ThresholdedRelu", kind="elementwise", since=10)
def thresholded_relu(ctx, x):
  """ONNX ThresholdedRelu ``x > alpha ? x : 0``, alpha default 1."""
  alpha = float(ctx.attr("alpha", 1.0))
  return _unary(ctx, x, lambda v: select(v > alpha, v, _zero(v)))


def _softplus(v: Expr) -> Expr: return max_(v, 0.0) + log(exp(-abs_(v)) + 1.0)


@op("Mish", kind="elementwise", since=18)
def mish(ctx, x):
  """ONNX Mish ``x * tanh(softplus(x))`` (softplus computed without overflow)."""
  return _unary(ctx, x, lambda v: v * tanh(_softplus(v)))


@op("Swish", kind="elementwise", since=24)
def swish(ctx, x):
  """ONNX Swish (opset 24) ``x * sigmoid(alpha * x)``, alpha default 1."""
  alpha = float(ctx.attr("alpha", 1.0))
  return _unary(ctx, x, lambda v: v * sigmoid(v * alpha))


@op("HardSigmoid", kind="elementwise", since=6)
def hard_sigmoid(ctx, x):
  """ONNX HardSigmoid ``max(0, min(1, alpha * x + beta))``, alpha 0.2, beta 0.5 by default."""
  alpha, beta = ctx.attr("alpha", 0.2), ctx.attr("beta", 0.5)
  return _unary(ctx, x, lambda v: _max(_min(v * alpha + beta, 1.0), 0.0))   # NaN stays NaN


@op("HardSwish", kind="elementwise", since=14)
def hard_swish(ctx, x):
  """ONNX HardSwish ``x * max(0, min(1, x / 6 + 0.5))``."""
  return _unary(ctx, x, lambda v: v * max_(min_(v * (1.0 / 6.0) + 0.5, 1.0), 0.0))


@op("Gelu", kind="elementwise", since=20)
def gelu(ctx, x):
  """ONNX Gelu (opset 20): approximate="none" uses erf, "tanh" the tanh formula."""
  mode = ctx.attr("approximate", "none")
  if mode == "none": return _unary(ctx, x, lambda v: v * 0.5 * (erf(v * math.sqrt(0.5)) + 1.0))
  if mode == "tanh":
    return _unary(ctx, x, lambda v: v * 0.5 * (tanh((v + v * v * v * 0.044715) * math.sqrt(2.0 / math.pi)) + 1.0))
  raise ctx.error(f"approximate={mode!r} is not one of 'none', 'tanh'")


@op("Clip", kind="broadcast", since=11)
def clip(ctx, x, lo=None, hi=None):
  """ONNX Clip (opset 11+): min / max are optional inputs, constants inline, runtime tensors broadcast
  to x's shape. An omitted bound is numeric_limits lowest / max (so +-inf clip to +-FLT_MAX, as in
  onnxruntime); NaN stays NaN. ``min(max(x, lo), hi)``: when lo > hi every value is hi."""
  d = _check(ctx, [x, lo, hi], FLOATS + INTEGER_DTYPES, "supported")
  if d in FLOATS:
    fi = finfo(d)
    lo = np.array(fi.min, fi.dtype) if lo is None else lo
    hi = np.array(fi.max, fi.dtype) if hi is None else hi
  vals = [x] + [v for v in (lo, hi) if v is not None]

  def body(v, *b):
    b = list(b)
    if lo is not None: v = _max(v, b.pop(0))
    if hi is not None: v = _min(v, b.pop(0))
    return v
  return [_nary(ctx, vals, body, shape=x.shape)]


# ---------------------------------------------------------------------------------------------
# selection, comparison, logic

@op("Where", kind="broadcast", since=9)
def where(ctx, c, a, b):
  """ONNX Where: ``cond ? x : y`` with all three broadcasting."""
  _check(ctx, [c], ("bool",), "condition")
  _check(ctx, [a, b], FLOATS + INTEGER_DTYPES + ("bool",), "supported")
  return [_nary(ctx, [c, a, b], select)]


_NUM = FLOATS + INTEGER_DTYPES
_binary_op("Equal", eq, 11, _NUM + ("bool",))
_binary_op("Less", lambda x, y: x < y, 9, _NUM)
_binary_op("LessOrEqual", lambda x, y: x <= y, 12, _NUM)
_binary_op("Greater", lambda x, y: x > y, 9, _NUM)
_binary_op("GreaterOrEqual", lambda x, y: x >= y, 12, _NUM)
_binary_op("And", lambda x, y: x & y, 7, ("bool",))
_binary_op("Or", lambda x, y: x | y, 7, ("bool",))
_binary_op("Xor", ne, 7, ("bool",))
_unary_op("Not", lambda x: ~x, 1, ("bool",))


# ---------------------------------------------------------------------------------------------
# casts

def _cast_expr(v: Expr, to: str) -> Expr:
  """C conversion: float -> int truncates toward zero (like onnxruntime); to bool is ``x != 0``."""
  if to == "bool": return v if v.dtype == "bool" else ne(v, _zero(v))
  return cast(v, to)


def _cast(ctx, x, to: str):
  _check(ctx, [x], _NUM + ("bool",), "supported")
  return [_nary(ctx, [x], lambda v: _cast_expr(v, to))]


@op("Cast", kind="elementwise", since=13)
def cast_op(ctx, x):
  """ONNX Cast between float16 / bfloat16 / float32 / float64 / int32 / int64 / bool (``saturate``, opset 19,
  only concerns float8 types and is ignored)."""
  to = int(ctx.attr("to"))
  if to not in _ONNX_DTYPES:
    from onnx import TensorProto
    name = TensorProto.DataType.Name(to) if to in TensorProto.DataType.values() else str(to)
    raise ctx.error(f"cast to {name} is not supported (supported: {', '.join(_ONNX_DTYPES.values())})")
  return _cast(ctx, x, _ONNX_DTYPES[to])


@op("BitCast", kind="elementwise", since=26)
def bitcast(ctx, x):
  """ONNX BitCast: the same bits read as another type of the same width. Between integer types, and from bool to an
  8-bit one, that is C's conversion, which keeps the bits (two's complement; a bool is the byte 0 or 1); between a
  32- or 64-bit float and an integer type of its width, the IR's ``bitcast`` intrinsic. float16 / bfloat16 ones
  (held as float32 in a kernel) are refused, naming the types."""
  to = int(ctx.attr("to"))
  src = dtype_of(x)
  if to not in _ONNX_DTYPES:
    from onnx import TensorProto
    raise ctx.error(f"BitCast to {TensorProto.DataType.Name(to) if to in TensorProto.DataType.values() else to} "
                    "is not supported")
  dst = _ONNX_DTYPES[to]
  if src not in DTYPE_BYTES or DTYPE_BYTES[src] != DTYPE_BYTES[dst]:
    raise ModelError(f"{_where(ctx)}: BitCast needs types of one width; {src} to {dst} is not")
  if bitcastable(src, dst):
    X = ctx.tensor(x)
    return ctx.compute(X.shape, lambda *i: call(BITCAST, X[i], dtype=dst))
  if src not in INTEGER_DTYPES + ("bool",) or dst not in INTEGER_DTYPES:
    raise ctx.error(f"BitCast from {src} to {dst} is not supported (between integer types, from bool to int8 / "
                    "uint8, and between a 32- or 64-bit float and an integer of its width)")
  return _cast(ctx, x, dst)


@op("CastLike", kind="elementwise", since=15)
def cast_like(ctx, x, like):
  """ONNX CastLike: Cast to the element type of the second input (whose values are not read)."""
  to = dtype_of(like)
  if to not in _ONNX_DTYPES.values(): raise ctx.error(f"cast to {to} is not supported")
  return _cast(ctx, x, to)
