"""ONNX GridSample (opset 16: 2-D, modes bilinear / nearest / bicubic; opset 20: N-D, modes linear / nearest /
cubic): each output element samples the input at the point the grid names, in [-1, 1] per spatial dim.

As ONNX defines it (its reference implementation, step for step, coordinates in float32): a grid value ``g`` of a
dim of length ``L`` is the source coordinate ``(g + 1) / 2 * (L - 1)`` with ``align_corners``, else
``((g + 1) * L - 1) / 2``; ``nearest`` rounds it half to even. A coordinate outside the borders (``[0, L - 1]``
with ``align_corners``, else ``[-0.5, L - 0.5]``) is clamped into ``[0, L - 1]`` (``padding_mode="border"``) or
reflected at the borders until inside (``"reflection"``). Then the taps: the nearest index, or ``floor(x)`` and
the next (linear, weights ``1 - t`` and ``t``), or ``floor(x) - 1 .. floor(x) + 2`` (cubic: Keys' kernel with
``a = -0.75``), their product over the dims; a tap outside the input reads 0 (``"zeros"``), the edge
(``"border"``) or its reflection (``"reflection"``). Cubic takes at most two spatial dims.

Past the grid's range (ONNX's reference fails on them; onnxruntime converts them to int64 as C leaves undefined):
a coordinate of 1e30 or +-inf is out of bounds, so ``"zeros"`` gives 0 and ``"border"`` the edge; a NaN coordinate
gives NaN in linear and cubic modes (its weights) and, in nearest mode, the padding's value (0 under ``"zeros"``).
"""
from __future__ import annotations

import itertools

from minicomp.errors import ModelError
from minicomp.graph.ops._util import stat_type
from minicomp.graph.ops.elementwise import _round_half_even
from minicomp.graph.registry import op
from minicomp.ir.expr import Expr, all_of, call, cast, const, eq, max_, min_, select

MODES = {"bilinear": "linear", "linear": "linear", "nearest": "nearest", "bicubic": "cubic", "cubic": "cubic"}
PADDINGS = ("zeros", "border", "reflection")
A = -0.75            # Keys' cubic coefficient, as ONNX's reference


def _f(v: float) -> Expr: return const(float(v), "float32")


def _reflect(x: Expr, lo: float, hi: float) -> Expr:
  """``x`` reflected at ``lo`` and ``hi`` until inside (ONNX's _gs_reflect: each whole span flips the side)."""
  span = _f(hi - lo)

  def parts(dx: Expr) -> tuple[Expr, Expr]:        # (even number of whole spans?, the remainder); dx >= 0
    flips = call("floor", dx / span)
    return eq(call("fmod", flips, _f(2.0)), _f(0.0)), dx - flips * span
  even_lo, r_lo = parts(_f(lo) - x)
  even_hi, r_hi = parts(x - _f(hi))
  below = select(even_lo, _f(lo) + r_lo, _f(hi) - r_lo)
  above = select(even_hi, _f(hi) - r_hi, _f(lo) + r_hi)
  return select(x < _f(lo), below, select(x > _f(hi), above, x))


def _index(v: Expr, L: int) -> Expr:
  """A whole-valued coordinate ``v`` of a dim of length ``L`` as an int32 index, clamped first to ``[-3, L + 2]``
  (outside the input either way, cubic's taps included): a coordinate past int32's range (1e30, +-inf; NaN goes to
  ``L + 2``) would otherwise convert as C leaves undefined (the GPU saturates, the simulator's x86 gives INT_MIN)."""
  return cast(max_(min_(v, _f(L + 2.0)), _f(-3.0)), "int32")


def _cubic(t: Expr) -> list[Expr]:
  """Keys' weights of the taps floor(x) - 1 .. floor(x) + 2 at fraction t."""
  far = lambda d: ((_f(A) * d - _f(5 * A)) * d + _f(8 * A)) * d - _f(4 * A)
  near = lambda d: ((_f(A + 2) * d - _f(A + 3)) * d) * d + _f(1.0)
  return [far(t + _f(1.0)), near(t), near(_f(1.0) - t), far(_f(2.0) - t)]


@op("GridSample", kind="injective", since=16)
def grid_sample(ctx, x, grid):
  X, G = ctx.tensor(x), ctx.tensor(grid)
  mode = MODES.get(ctx.attr("mode", "linear" if ctx.opset >= 20 else "bilinear"))
  padding = ctx.attr("padding_mode", "zeros")
  align = ctx.flag("align_corners", 0)
  if mode is None: raise ctx.error(f"mode {ctx.attr('mode')!r} is not an ONNX value ({', '.join(MODES)})")
  if padding not in PADDINGS: raise ctx.error(f"padding_mode {padding!r} is not an ONNX value ({', '.join(PADDINGS)})")
  dims = X.shape[2:]
  D = len(dims)
  if D < 1 or G.ndim != D + 2 or G.shape[0] != X.shape[0] or G.shape[-1] != D:
    raise ModelError(f"GridSample node {ctx.node.name!r}: input {list(X.shape)} needs a grid of shape "
                     f"[{X.shape[0]}, ..., {D}], got {list(G.shape)}")
  if mode == "cubic" and D > 2: raise ctx.error(f"cubic sampling of {D} spatial dims (at most 2)")
  acc = stat_type(X.dtype)
  borders = [(0.0, L - 1.0) if align else (-0.5, L - 0.5) for L in dims]

  def pixel(n, c, idx: list[Expr]) -> Expr:
    """The input at integer ``idx`` (one per spatial dim) under the padding mode."""
    if padding == "reflection":
      idx = [cast(_reflect(cast(i, "float32"), lo, hi), "int32") for i, (lo, hi) in zip(idx, borders)]
    inside = all_of(*[(i >= 0) & (i < L) for i, L in zip(idx, dims)])
    safe = [max_(min_(i, L - 1), 0) for i, L in zip(idx, dims)]
    v = cast(X[(n, c, *safe)], acc)
    return select(inside, v, const(0.0, acc)) if padding == "zeros" else v

  def body(n, c, *o):
    out = []
    for d, (L, (lo, hi)) in enumerate(zip(dims, borders)):
      g = cast(G[(n, *o, D - 1 - d)], "float32")                # grid[..., 0] is the last dim's coordinate
      v = (g + _f(1.0)) / _f(2.0) * _f(L - 1) if align else ((g + _f(1.0)) * _f(L) - _f(1.0)) / _f(2.0)
      if mode == "nearest": v = _round_half_even(v)
      if padding == "border": v = select((v < _f(lo)) | (v > _f(hi)), max_(min_(v, _f(L - 1)), _f(0.0)), v)
      if padding == "reflection": v = _reflect(v, lo, hi)
      out.append(v)
    if mode == "nearest":
      return cast(pixel(n, c, [_index(v, L) for v, L in zip(out, dims)]), X.dtype)
    taps = []
    for v, L in zip(out, dims):
      fl = call("floor", v)
      # (t = 0 where v is whole, +-inf among them: the taps of an infinite coordinate are all outside, and their
      # weights stay finite, so "zeros" gives 0 there, not inf - inf = NaN; a NaN coordinate keeps NaN weights)
      i0, t = _index(fl, L), select(eq(v, fl), _f(0.0), v - fl)
      w = [_f(1.0) - t, t] if mode == "linear" else _cubic(t)
      first = i0 if mode == "linear" else i0 - 1
      taps.append([(first + k, wk if acc == "float32" else cast(wk, acc)) for k, wk in enumerate(w)])
    total = None
    for pick in itertools.product(*taps):
      w = pick[0][1]
      for _, wk in pick[1:]: w = w * wk
      term = w * pixel(n, c, [i for i, _ in pick])
      total = term if total is None else total + term
    return cast(total, X.dtype)

  return [ctx.compute((*X.shape[:2], *G.shape[1:-1]), body, "grid")]
