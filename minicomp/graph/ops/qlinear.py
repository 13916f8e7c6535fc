"""Integer convolutions and matmuls: ConvInteger, MatMulInteger, QLinearConv, QLinearMatMul.

Each is one int32 sum over int8 / uint8 operands with their zero points subtracted in the reads
(``(x - x_zero_point) * (w - w_zero_point)``, exact: no float rounding in the accumulation), the sum of
``nn.conv_sum`` / ``linalg.matmul_sum``. ConvInteger and MatMulInteger return that int32 sum. The QLinear ops
requantize it in the same kernel, as onnxruntime does: ``y = saturate(round_half_even(float(acc + bias) *
(x_scale * w_scale / y_scale)) + y_zero_point)``, the multiplier in float32, per tensor or per output channel
(QLinearConv's ``w_scale``; QLinearMatMul's ``b_scale`` per column, ``a_scale`` per row). The kernel reads the
8-bit operands from memory and widens them in registers, except where the weights are constant with no zero point
(what a QDQ model's weights are) and four steps of the sum can go together: a matmul whose B is 2-D and whose K is a
multiple of 4 sums one ``dot4`` per four steps of k (``dp4a``: four 8-bit products from two 32-bit words, B stored
transposed so that its four bytes are one word), A's zero point taken off after the sum as ``a_zero_point x`` B's
constant column sums; a convolution whose channels per group are a multiple of 4 and whose x zero point is one
constant sums one ``dot4`` per four channels of a tap (``_dot4_conv``). Either dot4 sum can also run on the int8 tensor
cores (``mma.sync`` m16n8k32: graph/tensor_core_schedules.py tensorizes the same sum), which compile does not offer
by default (``compiler.INT8_TENSOR_CORE_TEMPLATE``: slower than dp4a on an H200).
Zero points: per tensor, per output channel (a weight's), per row of A or per column of B (MatMulInteger's 1-D forms
and their N-D ``[..., M, 1]`` / ``[..., 1, N]`` forms).
"""
from __future__ import annotations

import math

import numpy as np

from minicomp.graph.ops._util import dtype_of, load, operand
from minicomp.graph.ops.elementwise import _round_half_even
from minicomp.graph.ops.linalg import matmul_sum
from minicomp.graph.ops.nn import conv_sum
from minicomp.graph.ops.quantize import QUANTIZED
from minicomp.graph.registry import op
from minicomp.ir import te
from minicomp.ir.expr import cast, const, dot4, max_, min_
from minicomp.ir.te import Tensor

EIGHT_BIT = ("int8", "uint8")


def _per(ctx, v, x_shape, what: str, axis: int | None):
  """A reader at an index of ``x_shape`` of the per-tensor value ``v``, or of its 1-D per-``axis`` form, or of a
  form that broadcasts to ``x_shape``; ``None`` reads nothing."""
  if v is None: return None
  shape = tuple(v.shape) if hasattr(v, "shape") else ()
  V = operand(ctx, v)
  if math.prod(shape) == 1: return lambda i: load(V, shape, (0,) * len(shape))
  if len(shape) == 1 and axis is not None:
    ax = axis % len(x_shape)
    if shape[0] != x_shape[ax]:
      raise ctx.error(f"{what} has {shape[0]} entries, axis {ax} of the operand has {x_shape[ax]}")
    return lambda i: load(V, shape, (i[ax],))
  if len(shape) == len(x_shape) and all(s in (1, n) for s, n in zip(shape, x_shape)):
    return lambda i: load(V, x_shape, i)
  raise ctx.error(f"{what} of shape {list(shape)} is neither per tensor nor per axis of {list(x_shape)}")


def _shifted(ctx, x, zp, what: str, axis: int | None):
  """``int32(x) - int32(zero point)``: an int8 / uint8 operand widened, its zero point taken off (inlined into the
  sum's reads)."""
  if dtype_of(x) not in EIGHT_BIT:
    raise ctx.error(f"{what} has element type {dtype_of(x)}; int8 or uint8 expected")
  if zp is not None and dtype_of(zp) != dtype_of(x):
    raise ctx.error(f"{what}'s zero point has type {dtype_of(zp)}, {what} {dtype_of(x)}")
  X = ctx.tensor(x)
  z = _per(ctx, zp, X.shape, f"{what}'s zero point", axis)
  if z is None: return ctx.compute(X.shape, lambda *i: cast(X[i], "int32"), "widen")
  return ctx.compute(X.shape, lambda *i: cast(X[i], "int32") - cast(z(i), "int32"), "widen")


def _requantize(ctx, acc, scales, y_scale, y_zp, bias=None):
  """``acc`` (int32, plus ``bias``) requantized (module docstring); ``scales``: readers at an output index whose
  product is the input scale."""
  if y_zp is None: raise ctx.error("y_zero_point is required")
  to = dtype_of(y_zp)
  if to not in EIGHT_BIT: raise ctx.error(f"y_zero_point has element type {to}; int8 or uint8 expected")
  lo, hi = QUANTIZED[to]
  ys, yz = _per(ctx, y_scale, acc.shape, "y_scale", None), _per(ctx, y_zp, acc.shape, "y_zero_point", None)
  f32 = lambda e: cast(e, "float32")

  def body(*i):
    a = acc[i] + bias(i) if bias is not None else acc[i]
    mult = f32(scales[0](i)) * f32(scales[1](i)) / f32(ys(i))
    q = _round_half_even(f32(a) * mult) + f32(yz(i))
    return cast(min_(max_(q, const(float(lo), "float32")), const(float(hi), "float32")), to)
  return ctx.compute(acc.shape, body, "requantize")


def _conv_operands(ctx, x, w, x_zp, w_zp):
  return _shifted(ctx, x, x_zp, "x", None), _shifted(ctx, w, w_zp, "w", 0)


def _dot4_applies(x, w, x_zp, w_zp) -> bool:
  """What dot4 needs of an integer convolution's or matmul's operands (the op adds its own shape conditions): constant
  weights with no zero point or an all-zero one, 8-bit operands, and x's zero point (if any) of x's type. Where not,
  the widening sum applies (and ``_shifted`` names what is wrong)."""
  return not isinstance(w, Tensor) and not isinstance(w_zp, Tensor) \
    and (w_zp is None or not np.any(np.asarray(w_zp) != 0)) \
    and dtype_of(x) in EIGHT_BIT and dtype_of(w) in EIGHT_BIT and (x_zp is None or dtype_of(x_zp) == dtype_of(x))


def _dot4_conv(ctx, x, w, x_zp, w_zp):
  """The convolution as one dot4 per four input channels of a tap (module docstring), or None where it does not apply:
  w a graph input or with a zero point that is not all zeros, x's zero point a graph input or not per tensor, or
  the channels per group not a multiple of 4. The weights are stored channels-last, so a tap's four channels are one
  word, and x is blocked by four channels (``nn.conv_sum``: its shared-memory tile holds them as one word); x is padded
  with its zero point, so that ``x_zero_point x`` the weights' sum per output channel is what the zero point adds to
  the sum, padding included, and is taken off after it."""
  if not _dot4_applies(x, w, x_zp, w_zp) or isinstance(x_zp, Tensor): return None
  W = np.asarray(w)
  if W.ndim < 3 or W.shape[1] % 4 or x_zp is not None and np.asarray(x_zp).size != 1: return None
  zx = int(np.asarray(x_zp).reshape(-1)[0]) if x_zp is not None else 0
  acc = conv_sum(ctx, ctx.tensor(x), ctx.const(np.ascontiguousarray(np.moveaxis(W, 1, -1)), "w4"), fill=zx,
                 packed=True)
  if zx == 0: return acc
  wsum = ctx.const(W.astype(np.int64).reshape(W.shape[0], -1).sum(axis=1).astype(np.int32), "wsum")
  return ctx.compute(acc.shape, lambda n, m, *o: acc[(n, m, *o)] - const(zx, "int32") * wsum[m], "zp")


def _conv_acc(ctx, x, w, x_zp, w_zp):
  acc = _dot4_conv(ctx, x, w, x_zp, w_zp)
  return acc if acc is not None else conv_sum(ctx, *_conv_operands(ctx, x, w, x_zp, w_zp))


@op("ConvInteger", kind="data_reuse", since=10)
def conv_integer(ctx, x, w, x_zp=None, w_zp=None):
  """ONNX ConvInteger (module docstring): the int32 convolution of the zero-point-shifted operands."""
  return [_conv_acc(ctx, x, w, x_zp, w_zp)]


@op("QLinearConv", kind="data_reuse", since=10)
def qlinear_conv(ctx, x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, b=None):
  """ONNX QLinearConv (module docstring): ConvInteger, the int32 bias added, requantized to y's type."""
  acc = _conv_acc(ctx, x, w, x_zp, w_zp)
  out = acc.shape
  scales = (_per(ctx, x_scale, out, "x_scale", None), _per(ctx, w_scale, out, "w_scale", 1))
  bias = None
  if b is not None:
    if dtype_of(b) != "int32": raise ctx.error(f"the bias has element type {dtype_of(b)}; int32 expected")
    bias = _per(ctx, b, out, "the bias", 1)
  return [_requantize(ctx, acc, scales, y_scale, y_zp, bias)]


def _dot4_matmul(ctx, a, b, a_zp, b_zp):
  """A @ B as one dot4 per four steps of k (module docstring), or None where it does not apply: B a graph input, not
  2-D, with a zero point that is not all zeros, K not a multiple of 4, or A a vector."""
  if not _dot4_applies(a, b, a_zp, b_zp) or isinstance(a_zp, Tensor) and a_zp.ndim > 1: return None
  B = np.asarray(b)
  if B.ndim != 2 or B.shape[0] % 4 or len(a.shape) < 2 or a.shape[-1] != B.shape[0]: return None
  A, BT = ctx.tensor(a), ctx.const(np.ascontiguousarray(B.T), "bt")
  (K, N), rest = B.shape, A.shape[:-1]
  k = ctx.reduce_axis(K // 4, "k")
  acc = ctx.compute(rest + (N,), lambda *i: te.sum(dot4([A[i[:-1] + (4 * k + t,)] for t in range(4)],
                                                        [BT[i[-1], 4 * k + t] for t in range(4)]), axis=k), "dot4")
  za = _per(ctx, a_zp, A.shape, "A's zero point", -2)
  if za is None: return acc
  colsum = ctx.const(B.astype(np.int64).sum(axis=0).astype(np.int32), "colsum")
  return ctx.compute(acc.shape, lambda *i: acc[i] - cast(za(i[:-1] + (0,)), "int32") * colsum[i[-1]], "zp")


def _matmul_operands(ctx, a, b, a_zp, b_zp):
  """A's zero point per row (a 1-D one of M entries), B's per column."""
  A = _shifted(ctx, a, a_zp, "A", -2 if len(a.shape) > 1 else None)
  return A, _shifted(ctx, b, b_zp, "B", -1)


@op("MatMulInteger", kind="data_reuse", since=10)
def matmul_integer(ctx, a, b, a_zp=None, b_zp=None):
  """ONNX MatMulInteger (module docstring): the int32 matmul of the zero-point-shifted operands."""
  acc = _dot4_matmul(ctx, a, b, a_zp, b_zp)
  return [acc if acc is not None else matmul_sum(ctx, *_matmul_operands(ctx, a, b, a_zp, b_zp))]


@op("QLinearMatMul", kind="data_reuse", since=10)
def qlinear_matmul(ctx, a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp):
  """ONNX QLinearMatMul (module docstring): MatMulInteger requantized to y's type; A's scale per tensor or per
  row, B's per tensor or per column."""
  acc = _dot4_matmul(ctx, a, b, a_zp, b_zp)
  if acc is None: acc = matmul_sum(ctx, *_matmul_operands(ctx, a, b, a_zp, b_zp))
  out = acc.shape
  rows = -2 if len(a.shape) > 1 and len(out) > 1 else None
  scales = (_per(ctx, a_scale, out, "a_scale", rows), _per(ctx, b_scale, out, "b_scale", -1))
  return [_requantize(ctx, acc, scales, y_scale, y_zp)]
