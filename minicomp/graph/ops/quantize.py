"""Linear quantization: QuantizeLinear and DequantizeLinear (per tensor and per axis), into and out of the
integer types int8 / uint8 / int16 / uint16 (and int32 for DequantizeLinear's input).

QuantizeLinear: ``y = saturate(round_half_even(x / y_scale) + y_zero_point)``, the division in the precision
of ``y_scale``'s type (a float16 scale: the quotient rounded to float16 first; ``precision`` names another),
saturated to the output type's range. The output type is the zero point's, else ``output_dtype``, else uint8.
DequantizeLinear: ``y = (x - x_zero_point) * x_scale`` computed in float32 and given the scale's type (or
``output_dtype``). Blocked quantization (``block_size``) and the float8 / 4-bit / 2-bit types are refused
naming the form. Both are elementwise, so a DequantizeLinear fuses into the kernel that reads its output and
a QuantizeLinear into the one that produces its input (the QDQ form computes in float between them).
"""
from __future__ import annotations

import math

from minicomp.frontend.dtypes import ONNX_TO_DTYPE
from minicomp.graph.ops._util import dtype_of, load, norm_axis, operand
from minicomp.graph.ops.elementwise import _round_half_even
from minicomp.graph.registry import op
from minicomp.ir.expr import cast, const, max_, min_
from minicomp.ir.ops import FLOAT_DTYPES, HALF_DTYPES, int_range

QUANTIZED = {t: int_range(t) for t in ("int8", "uint8", "int16", "uint16")}    # the quantized types: their ranges


def _where(ctx) -> str: return f"{ctx.node.op_type} node {ctx.node.name!r}"


def _per(ctx, x, scale, zp):
  """``(scale, zero point)`` readers at an index of x, both in float32 (a missing zero point reads 0): per tensor
  (one element each) or per axis (1-D of the axis' length); blocked quantization is refused."""
  if int(ctx.attr("block_size", 0)): raise ctx.error("blocked quantization (block_size > 0) is not supported")
  if zp is not None and tuple(zp.shape) != tuple(scale.shape):
    raise ctx.error(f"the zero point's shape {list(zp.shape)} is not the scale's {list(scale.shape)}")
  if math.prod(scale.shape) == 1 and len(scale.shape) <= 1:
    shape, at = tuple(scale.shape), lambda i: (0,) * len(scale.shape)
  elif len(scale.shape) != 1:
    raise ctx.error(f"a scale of shape {list(scale.shape)} (blocked quantization) is not supported")
  else:
    ax = norm_axis(int(ctx.attr("axis", 1)), len(x.shape), _where(ctx))
    if scale.shape[0] != x.shape[ax]:
      raise ctx.error(f"a per-axis scale of length {scale.shape[0]} does not match axis {ax} of length {x.shape[ax]}")
    shape, at = tuple(scale.shape), lambda i: (i[ax],)
  S, Z = operand(ctx, scale), (operand(ctx, zp) if zp is not None else None)
  return (lambda i: cast(load(S, shape, at(i)), "float32")), \
         (lambda i: cast(load(Z, shape, at(i)), "float32") if Z is not None else const(0.0, "float32"))


@op("QuantizeLinear", kind="elementwise", since=10)
def quantize_linear(ctx, x, scale, zp=None):
  """ONNX QuantizeLinear (module docstring)."""
  xt, st = dtype_of(x), dtype_of(scale)
  if xt not in ("float32", "float16", "bfloat16", "int32") or st not in ("float32", "float16", "bfloat16", "int32"):
    raise ctx.error(f"element types x {xt}, scale {st} are not supported (float32, float16, bfloat16, int32)")
  code = int(ctx.attr("output_dtype", 0))
  to = dtype_of(zp) if zp is not None else ONNX_TO_DTYPE.get(code, f"ONNX type {code}") if code else "uint8"
  if to not in QUANTIZED:
    raise ctx.error(f"element type {to} is not supported as the quantized type ({', '.join(QUANTIZED)})")
  pcode = int(ctx.attr("precision", 0))
  prec = ONNX_TO_DTYPE.get(pcode, st) if pcode else st
  lo, hi = QUANTIZED[to]
  s_at, z_at = _per(ctx, x, scale, zp)
  xs = ctx.tensor(x)

  def body(*i):
    q = cast(xs[i], "float32") / s_at(i)
    if prec in HALF_DTYPES: q = cast(cast(q, prec), "float32")        # the division in the scale's precision
    return cast(min_(max_(_round_half_even(q) + z_at(i), float(lo)), float(hi)), to)
  return [ctx.compute(xs.shape, body)]


@op("DequantizeLinear", kind="elementwise", since=10)
def dequantize_linear(ctx, x, scale, zp=None):
  """ONNX DequantizeLinear (module docstring)."""
  xt, st = dtype_of(x), dtype_of(scale)
  if xt not in tuple(QUANTIZED) + ("int32",):
    raise ctx.error(f"element type {xt} is not supported (int8, uint8, int16, uint16, int32)")
  if st not in FLOAT_DTYPES: raise ctx.error(f"scale element type {st} is not supported")
  if zp is not None and dtype_of(zp) != xt:
    raise ctx.error(f"the zero point's type {dtype_of(zp)} is not x's {xt}")
  code = int(ctx.attr("output_dtype", 0))
  out = ONNX_TO_DTYPE.get(code, f"ONNX type {code}") if code else st
  if out not in FLOAT_DTYPES: raise ctx.error(f"output element type {out} is not supported")
  s_at, z_at = _per(ctx, x, scale, zp)
  xs = ctx.tensor(x)
  return [ctx.compute(xs.shape, lambda *i: cast((cast(xs[i], "float32") - z_at(i)) * s_at(i), out))]
