"""Interval relaxation for bound inference.

``relax(e, ranges)`` gives symbolic ``(lo, hi)`` bounds of an integer expression when the
variables in ``ranges`` sweep their (inclusive, possibly symbolic) ranges and every other
variable stays fixed. It is exact for expressions that are monotone in each relaxed
variable (sums, products by non-negative factors, floor division by positive divisors,
min / max), which covers the index math of affine tensor programs; for the rest it falls
back to the safe ``[0, d-1]`` of a floormod or to ``None`` (the caller then uses the whole
tensor extent).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from minicomp.ir.expr import Expr, free_vars, max_, min_, Op
from minicomp.ir.linear import bounds, build_linear, linear
from minicomp.ir.rewrite import fold
from minicomp.ir.simplify import simplify

SymRange = tuple[Expr, Expr]


def relax(e: Expr, ranges: dict[str, SymRange]) -> Optional[SymRange]:
  """Symbolic inclusive bounds of ``e`` over the relaxed variables, or None when unknown. One fold
  (``ir/rewrite.py``) over ``RELAX``; a subtree free of the relaxed variables is not entered: it is
  its own bound."""
  ctx = (ranges, {})
  return fold(e, RELAX, ctx, what="relax", enter=lambda n: _relaxed(ctx, n))


def _relaxed(ctx, n: Expr) -> bool:
  """``n`` depends on a relaxed variable (memoised per call: ``free_vars`` walks the subtree)."""
  ranges, seen = ctx
  v = seen.get(n)
  if v is None: v = seen[n] = bool(free_vars(n) & ranges.keys())
  return v


def _fixed(rule):
  """``rule``, except on a node free of the relaxed variables (not entered: ``kids`` is empty), whose
  bounds are the node itself, and where a child's bounds are unknown."""
  def r(ctx, n: Expr, kids: tuple):
    if not _relaxed(ctx, n): return (n, n)
    if any(k is None for k in kids): return None
    return rule(ctx, n, kids)
  return r


def _mul(ctx, n: Expr, kids: tuple) -> Optional[SymRange]:
  (x, k), (a, b) = n.src, kids
  if _relaxed(ctx, x) and _relaxed(ctx, k): return None
  if _relaxed(ctx, k): x, k, a = k, x, b
  if k.is_const: return (a[0] * k, a[1] * k) if k.arg >= 0 else (a[1] * k, a[0] * k)
  return (a[0] * k, a[1] * k)      # symbolic factors are schedule parameters, always positive


def _floordiv(ctx, n: Expr, kids: tuple) -> Optional[SymRange]:
  if _relaxed(ctx, n.src[1]): return None
  a, d = kids[0], n.src[1]
  return (a[0] // d, a[1] // d)


def _floormod(ctx, n: Expr, kids: tuple) -> Optional[SymRange]:
  if _relaxed(ctx, n.src[1]): return None
  a, d = kids[0], n.src[1]
  if d.is_const:                   # the sweep stays inside one period: the mod is monotone there
    span = simplify(a[1] - a[0])
    lo_q, hi_q = simplify(a[0] // d), simplify(a[1] // d)
    if span.is_const and span.arg < d.arg and simplify(hi_q - lo_q).is_const and simplify(hi_q - lo_q).arg == 0:
      return (a[0] % d, a[1] % d)
  return (n.src[0] * 0, d - 1)


def _select(ctx, n: Expr, kids: tuple) -> Optional[SymRange]:
  """Either branch's bounds, whatever the condition (whose own bounds are not needed)."""
  if not _relaxed(ctx, n): return (n, n)
  a, b = kids[1], kids[2]
  return None if a is None or b is None else (min_(a[0], b[0]), max_(a[1], b[1]))


RELAX = {op: _fixed(lambda ctx, n, kids: None) for op in Op}     # an op not below: bounds unknown
RELAX.update({
  Op.VAR: lambda ctx, n, kids: ctx[0][n.arg] if n.arg in ctx[0] else (n, n),
  Op.ADD: _fixed(lambda ctx, n, k: (k[0][0] + k[1][0], k[0][1] + k[1][1])),
  Op.SUB: _fixed(lambda ctx, n, k: (k[0][0] - k[1][1], k[0][1] - k[1][0])),
  Op.NEG: _fixed(lambda ctx, n, k: (-k[0][1], -k[0][0])),
  Op.MUL: _fixed(_mul),
  Op.FLOORDIV: _fixed(_floordiv),
  Op.FLOORMOD: _fixed(_floormod),
  Op.MIN: _fixed(lambda ctx, n, k: (min_(k[0][0], k[1][0]), min_(k[0][1], k[1][1]))),
  Op.MAX: _fixed(lambda ctx, n, k: (max_(k[0][0], k[1][0]), max_(k[0][1], k[1][1]))),
  Op.SELECT: _select,
  Op.CAST: _fixed(lambda ctx, n, k: k[0]),
})


def max_over(e: Expr, ranges: dict[str, tuple[int, int]], limit: int = 1 << 20) -> Optional[int]:
  """Largest value of ``e`` over concrete inclusive variable ranges (interval bound, refined by enumeration)."""
  from minicomp.ir.evaluate import evaluate
  lo, hi = bounds(e, ranges)
  fv = sorted(free_vars(e))
  if not fv: return int(lo) if lo is not None else None
  if any(v not in ranges or None in ranges[v] for v in fv): return hi
  sizes = [ranges[v][1] - ranges[v][0] + 1 for v in fv]
  if int(np.prod(sizes, dtype=np.float64)) > limit: return hi
  grids = np.meshgrid(*[np.arange(ranges[v][0], ranges[v][1] + 1, dtype=np.int64) for v in fv], indexing="ij")
  vals = evaluate(e, dict(zip(fv, grids)))
  return int(np.max(vals))


def shift_free_extent(e: Expr, shifting: set[str], ranges=None) -> Optional[Expr]:
  """An upper bound of the extent ``e`` (a region's ``hi - lo + 1``) free of the variables
  ``shifting`` (outer loops that move the region), or None.

  A region read through ``x // c`` moves with ``x``: ``(A + T) // c - A // c`` depends on where
  ``A`` is (a tile of 6 output channels covers 2 or 3 groups of 4), though never by more than
  ``ceil(T / c)``. Each pair of terms ``+k * (P // c)`` and ``-k * (Q // c)`` (``k > 0``) whose
  difference ``P - Q`` is free of ``shifting`` is replaced by that bound
  (``floor(p / c) - floor(q / c) <= ceil((p - q) / c)``), repeatedly, until nothing shifts."""
  terms, k0 = linear(e)
  terms = dict(terms)
  changed = True
  while changed and any(free_vars(t) & shifting for t in terms):
    changed = False
    divs = [(t, k) for t, k in terms.items() if t.op is Op.FLOORDIV and t.src[1].is_const and free_vars(t) & shifting]
    for (p, kp), (q, _) in ((a, b) for a in divs for b in divs if a[1] > 0 and b[1] == -a[1]):
      if p.src[1].arg != q.src[1].arg or p not in terms or q not in terms: continue
      d = simplify(p.src[0] - q.src[0], ranges)
      if free_vars(d) & shifting: continue
      c = p.src[1].arg
      del terms[p], terms[q]
      bound = simplify((d + (c - 1)) // c, ranges)
      terms[bound] = terms.get(bound, 0) + kp
      changed = True
      break
  if any(free_vars(t) & shifting for t in terms): return None
  return simplify(build_linear(terms, k0, e.dtype), ranges)
