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
from minicomp.ir.simplify import simplify

SymRange = tuple[Expr, Expr]


def relax(e: Expr, ranges: dict[str, SymRange]) -> Optional[SymRange]:
  """Symbolic inclusive bounds of ``e`` over the relaxed variables, or None when unknown."""
  if not (free_vars(e) & ranges.keys()): return (e, e)
  op = e.op
  if op is Op.VAR: return ranges[e.arg]
  if op in (Op.ADD, Op.SUB):
    a, b = relax(e.src[0], ranges), relax(e.src[1], ranges)
    if a is None or b is None: return None
    return (a[0] + b[0], a[1] + b[1]) if op is Op.ADD else (a[0] - b[1], a[1] - b[0])
  if op is Op.NEG:
    a = relax(e.src[0], ranges)
    return None if a is None else (-a[1], -a[0])
  if op is Op.MUL:
    x, k = e.src
    if free_vars(x) & ranges.keys() and free_vars(k) & ranges.keys(): return None
    if free_vars(k) & ranges.keys(): x, k = k, x
    a = relax(x, ranges)
    if a is None: return None
    if k.is_const: return (a[0] * k, a[1] * k) if k.arg >= 0 else (a[1] * k, a[0] * k)
    return (a[0] * k, a[1] * k)   # symbolic factors are schedule parameters, always positive
  if op is Op.FLOORDIV:
    a = relax(e.src[0], ranges)
    if a is None or free_vars(e.src[1]) & ranges.keys(): return None
    return (a[0] // e.src[1], a[1] // e.src[1])
  if op is Op.FLOORMOD:
    a = relax(e.src[0], ranges)
    if a is None or free_vars(e.src[1]) & ranges.keys(): return None
    d = e.src[1]
    # the sweep stays inside one period: the mod is monotone there
    if d.is_const:
      span = simplify(a[1] - a[0])
      lo_q, hi_q = simplify(a[0] // d), simplify(a[1] // d)
      if span.is_const and span.arg < d.arg and simplify(hi_q - lo_q).is_const and simplify(hi_q - lo_q).arg == 0:
        return (a[0] % d, a[1] % d)
    return (e.src[0] * 0, d - 1)
  if op in (Op.MIN, Op.MAX):
    a, b = relax(e.src[0], ranges), relax(e.src[1], ranges)
    if a is None or b is None: return None
    f = min_ if op is Op.MIN else max_
    return (f(a[0], b[0]), f(a[1], b[1]))
  if op is Op.SELECT:
    a, b = relax(e.src[1], ranges), relax(e.src[2], ranges)
    if a is None or b is None: return None
    return (min_(a[0], b[0]), max_(a[1], b[1]))
  if op is Op.CAST: return relax(e.src[0], ranges)
  return None


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
