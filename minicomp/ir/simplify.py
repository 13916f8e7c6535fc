"""Simplifier and interval bounds for expressions.

Integer sums are normalised to a linear form (terms with integer coefficients plus a
constant), which makes the rules that clean up lowered index math short and exact:

- constant folding, ``x*1``, ``x+0``, ``x*0``, ``x-x``;
- ``(a*d + r) // d -> a + r // d`` and ``(a*d + r) % d -> r % d``, then ``r // d -> 0`` and
  ``r % d -> r`` when the bounds prove ``0 <= r < d`` (the split-loop pattern);
- ``(x // a) // b -> x // (a*b)``, ``(x % (a*b)) % a -> x % a``, ``(x//d)*d + x%d -> x``;
- min / max / comparisons / select decided by bounds.

``ranges`` maps variable names to inclusive integer bounds ``(lo, hi)`` (either may be None).
"""
from __future__ import annotations

from typing import Optional

from minicomp.ir.expr import Expr, binary, const, Op
from minicomp.ir.ops import FLOAT_DTYPES, INT_DTYPES

Ranges = dict[str, tuple[Optional[int], Optional[int]]]
Bound = tuple[Optional[int], Optional[int]]


# ---------------------------------------------------------------------------------------------
# interval bounds

def _add(a: Bound, b: Bound) -> Bound:
  return (None if a[0] is None or b[0] is None else a[0] + b[0], None if a[1] is None or b[1] is None else a[1] + b[1])


def _scale(a: Bound, k: int) -> Bound:
  lo = None if a[0] is None else a[0] * k
  hi = None if a[1] is None else a[1] * k
  return (lo, hi) if k >= 0 else (hi, lo)


def bounds(e: Expr, ranges: Ranges | None = None) -> Bound:
  """Inclusive integer bounds of ``e`` given variable ranges; None where unknown."""
  ranges = ranges or {}
  op = e.op
  if op is Op.CONST:
    v = e.arg
    return (int(v), int(v)) if isinstance(v, (int, bool)) else (None, None)
  if op is Op.VAR: return ranges.get(e.arg, (None, None))
  if e.dtype not in INT_DTYPES and e.dtype != "bool": return (None, None)
  if op in (Op.ADD, Op.SUB, Op.MUL, Op.NEG):
    terms, c = linear(e)
    out: Bound = (c, c)
    for t, k in terms.items():
      out = _add(out, _scale(bounds(t, ranges), k) if t.op is not Op.MUL else _scale(_mul_bounds(t, ranges), k))
    return out
  a = bounds(e.src[0], ranges) if e.src else (None, None)
  if op in (Op.FLOORDIV, Op.FLOORMOD) and e.src[1].is_const and e.src[1].arg > 0:
    d = e.src[1].arg
    if op is Op.FLOORDIV:
      return (None if a[0] is None else a[0] // d, None if a[1] is None else a[1] // d)
    if a[0] is not None and a[1] is not None and a[0] >= 0 and a[1] < d: return a
    import math
    return (0, d - math.gcd(multiple_of(e.src[0]), d))   # x % d of a multiple of g is at most d - g
  if op in (Op.MIN, Op.MAX):
    b = bounds(e.src[1], ranges)
    f = min if op is Op.MIN else max
    lo = f(a[0], b[0]) if a[0] is not None and b[0] is not None else (
      None if op is Op.MIN else (a[0] if a[0] is not None else b[0]))
    hi = f(a[1], b[1]) if a[1] is not None and b[1] is not None else (
      None if op is Op.MAX else (a[1] if a[1] is not None else b[1]))
    return (lo, hi)
  if op is Op.SELECT:
    b, c = bounds(e.src[1], ranges), bounds(e.src[2], ranges)
    return (None if b[0] is None or c[0] is None else min(b[0], c[0]),
            None if b[1] is None or c[1] is None else max(b[1], c[1]))
  if op is Op.CAST: return a
  if e.dtype == "bool": return (0, 1)
  return (None, None)


def _mul_bounds(e: Expr, ranges: Ranges) -> Bound:
  a, b = bounds(e.src[0], ranges), bounds(e.src[1], ranges)
  if None in a or None in b:
    if a[0] is not None and b[0] is not None and a[0] >= 0 and b[0] >= 0:   # both non-negative
      return (a[0] * b[0], None if a[1] is None or b[1] is None else a[1] * b[1])
    return (None, None)
  ps = [a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1]]
  return (min(ps), max(ps))


# ---------------------------------------------------------------------------------------------
# linear forms

def linear(e: Expr) -> tuple[dict[Expr, int], int]:
  """``e`` as ``sum(k * term) + c`` over integer coefficients (non-linear parts are terms)."""
  if e.dtype not in INT_DTYPES: return ({e: 1}, 0)
  op = e.op
  if op is Op.CONST: return ({}, int(e.arg))
  if op in (Op.ADD, Op.SUB):
    ta, ca = linear(e.src[0]); tb, cb = linear(e.src[1])
    s = 1 if op is Op.ADD else -1
    out = dict(ta)
    for t, k in tb.items(): out[t] = out.get(t, 0) + s * k
    return ({t: k for t, k in out.items() if k != 0}, ca + s * cb)
  if op is Op.NEG:
    ta, ca = linear(e.src[0])
    return ({t: -k for t, k in ta.items()}, -ca)
  if op is Op.MUL:
    a, b = e.src
    if b.is_const: a, b = b, a
    if a.is_const:
      tb, cb = linear(b); k = int(a.arg)
      return ({t: k * v for t, v in tb.items() if k * v != 0}, k * cb)
    # distribute a product of sums of symbolic terms (small ones only): (x - 1) * f -> x*f - f
    ta, ca = linear(a); tb, cb = linear(b)
    parts_a = list(ta.items()) + ([(None, ca)] if ca else [])
    parts_b = list(tb.items()) + ([(None, cb)] if cb else [])
    if len(parts_a) * len(parts_b) > 1 and len(parts_a) * len(parts_b) <= 16:
      out: dict[Expr, int] = {}
      c = 0
      for x, kx in parts_a:
        for y, ky in parts_b:
          if x is None and y is None: c += kx * ky; continue
          t = x if y is None else y if x is None else _product(x, y)
          out[t] = out.get(t, 0) + kx * ky
      return ({t: k for t, k in out.items() if k != 0}, c)
    if len(parts_a) == 1 and len(parts_b) == 1 and parts_a[0][0] is not None and parts_b[0][0] is not None:
      return ({_product(parts_a[0][0], parts_b[0][0]): parts_a[0][1] * parts_b[0][1]}, 0)
  return ({e: 1}, 0)


def _product(x: Expr, y: Expr) -> Expr:
  """A canonical product atom (factors ordered, so x*y and y*x are one term)."""
  if repr(y) < repr(x): x, y = y, x
  return Expr.make(Op.MUL, x.dtype, (x, y))


def _term_key(item):
  t, k = item
  return (-abs(k), repr(t))


def build_linear(terms: dict[Expr, int], c: int, dtype: str = "int32") -> Expr:
  """Rebuild a canonical expression from a linear form (big coefficients first, constant last)."""
  items = sorted(((t, k) for t, k in terms.items() if k != 0), key=_term_key)
  pos = [i for i, (_, k) in enumerate(items) if k > 0]
  if pos: items.insert(0, items.pop(pos[0]))
  out: Expr | None = None
  for t, k in items:
    mag = t if abs(k) == 1 else Expr.make(Op.MUL, dtype, (t, const(abs(k), dtype)))
    if out is None: out = mag if k > 0 else Expr.make(Op.NEG, dtype, (mag,))
    else: out = Expr.make(Op.ADD if k > 0 else Op.SUB, dtype, (out, mag))
  if out is None: return const(c, dtype)
  if c > 0: out = Expr.make(Op.ADD, dtype, (out, const(c, dtype)))
  elif c < 0: out = Expr.make(Op.SUB, dtype, (out, const(-c, dtype)))
  return out


def _merge_divmod(terms: dict[Expr, int], ranges: Ranges | None = None) -> dict[Expr, int]:
  """``c*(y % b) + c*b*(x // (a*b)) -> c*y`` where ``y == x // a`` (``a`` may be 1: ``y == x``).

  This undoes the index arithmetic of fused loops: ``(f // 32 % 16) * 32 + f // 512 * 512 + f % 32 -> f``.
  """
  changed = True
  while changed:
    changed = False
    for t, k in list(terms.items()):
      if t.op is not Op.FLOORMOD or not t.src[1].is_const: continue
      y, b = t.src[0], t.src[1].arg
      for q, kq in list(terms.items()):
        if q.op is not Op.FLOORDIV or not q.src[1].is_const or kq != k * b or q.src[1].arg % b: continue
        a = q.src[1].arg // b
        x = q.src[0]
        if (simplify(x, ranges) if a == 1 else simplify(Expr.make(Op.FLOORDIV, x.dtype, (x, const(a, x.dtype))), ranges)) != y:
          continue
        del terms[t]; del terms[q]
        ty, cy = linear(y)
        for tt, kk in ty.items(): terms[tt] = terms.get(tt, 0) + kk * k
        terms[_CONST_KEY] = terms.get(_CONST_KEY, 0) + cy * k
        terms = {a_: b_ for a_, b_ in terms.items() if b_ != 0}
        changed = True
        break
      if changed: break
  return terms


_CONST_KEY = const(0)   # carries a constant picked up while merging (folded by the caller)


# ---------------------------------------------------------------------------------------------
# the simplifier

def simplify(e: Expr, ranges: Ranges | None = None) -> Expr:
  """Simplify ``e`` bottom-up (see module docstring for the rules)."""
  ranges = ranges or {}
  memo: dict[int, Expr] = {}

  def go(n: Expr) -> Expr:
    r = memo.get(id(n))
    if r is None:
      m = n.replace(src=tuple(go(s) for s in n.src)) if n.src else n
      r = _rewrite(m, ranges)
      memo[id(n)] = r
    return r
  return go(e)


_INT_FOLD = {Op.ADD: lambda a, b: a + b, Op.SUB: lambda a, b: a - b, Op.MUL: lambda a, b: a * b,
             Op.FLOORDIV: lambda a, b: a // b, Op.FLOORMOD: lambda a, b: a % b, Op.MIN: min, Op.MAX: max}
_INT_CMP = {Op.LT: lambda a, b: a < b, Op.LE: lambda a, b: a <= b, Op.GT: lambda a, b: a > b,
            Op.GE: lambda a, b: a >= b, Op.EQ: lambda a, b: a == b, Op.NE: lambda a, b: a != b}
_INT32 = (-(1 << 31), (1 << 31) - 1)


def _fold(n: Expr) -> Expr | None:
  if not n.src or not all(s.is_const for s in n.src) or n.op in (Op.CALL, Op.LOAD, Op.REDUCE): return None
  if len(n.src) == 2 and n.src[0].dtype in INT_DTYPES and n.src[1].dtype in INT_DTYPES:
    # integer index math, folded with Python ints (floor semantics, like numpy's); numpy below for the
    # rest, and for int32 results that would wrap
    a, b = int(n.src[0].arg), int(n.src[1].arg)
    if n.op in _INT_FOLD and n.dtype in INT_DTYPES and not (n.op in (Op.FLOORDIV, Op.FLOORMOD) and b == 0):
      v = _INT_FOLD[n.op](a, b)
      if n.dtype != "int32" or _INT32[0] <= v <= _INT32[1]: return const(v, n.dtype)
    elif n.op in _INT_CMP and n.dtype == "bool":
      return const(_INT_CMP[n.op](a, b))
  from minicomp.ir.evaluate import evaluate
  v = evaluate(n)
  if n.dtype in FLOAT_DTYPES and n.op is Op.DIV and n.src[1].arg == 0: return None
  return const(v.item() if hasattr(v, "item") else v, n.dtype)


def _rewrite(n: Expr, ranges: Ranges) -> Expr:
  op = n.op
  if op in (Op.FLOORDIV, Op.FLOORMOD) and n.src[1].is_const and n.src[1].arg == 0: return n
  f = _fold(n)
  if f is not None: return f
  if n.dtype in INT_DTYPES:
    if op in (Op.ADD, Op.SUB, Op.MUL, Op.NEG):
      terms, c = linear(n)
      terms = _merge_divmod(terms, ranges)
      c += terms.pop(_CONST_KEY, 0)
      return build_linear(terms, c, n.dtype)
    if op in (Op.FLOORDIV, Op.FLOORMOD) and n.src[1].is_const and n.src[1].arg > 0:
      return _divmod(n, n.src[0], n.src[1].arg, ranges)
  if op in (Op.MIN, Op.MAX) and n.dtype in INT_DTYPES:
    lo, hi = bounds(simplify(binary(Op.SUB, n.src[0], n.src[1])), ranges)
    if hi is not None and hi <= 0: return n.src[0] if op is Op.MIN else n.src[1]
    if lo is not None and lo >= 0: return n.src[1] if op is Op.MIN else n.src[0]
  if op in (Op.LT, Op.LE, Op.GT, Op.GE, Op.EQ, Op.NE) and n.src[0].dtype in INT_DTYPES:
    d = simplify(binary(Op.SUB, n.src[0], n.src[1]), ranges)
    lo, hi = bounds(d, ranges)
    decide = {Op.LT: (hi is not None and hi < 0, lo is not None and lo >= 0),
              Op.LE: (hi is not None and hi <= 0, lo is not None and lo > 0),
              Op.GT: (lo is not None and lo > 0, hi is not None and hi <= 0),
              Op.GE: (lo is not None and lo >= 0, hi is not None and hi < 0),
              Op.EQ: (lo == hi == 0, (lo is not None and lo > 0) or (hi is not None and hi < 0)),
              Op.NE: ((lo is not None and lo > 0) or (hi is not None and hi < 0), lo == hi == 0)}[op]
    if decide[0]: return const(True)
    if decide[1]: return const(False)
  if op is Op.SELECT:
    c = n.src[0]
    if c.is_const: return n.src[1] if c.arg else n.src[2]
    if n.src[1] == n.src[2]: return n.src[1]
  if op is Op.AND:
    a, b = n.src
    if a.is_const: return b if a.arg else a
    if b.is_const: return a if b.arg else b
    if a == b: return a
  if op is Op.OR:
    a, b = n.src
    if a.is_const: return a if a.arg else b
    if b.is_const: return b if b.arg else a
  if op is Op.NOT and n.src[0].op is Op.NOT: return n.src[0].src[0]
  if n.dtype in FLOAT_DTYPES and op in (Op.ADD, Op.SUB, Op.MUL, Op.DIV):
    a, b = n.src
    if op is Op.MUL and b.is_const and b.arg == 1.0: return a
    if op is Op.MUL and a.is_const and a.arg == 1.0: return b
    if op is Op.DIV and b.is_const and b.arg == 1.0: return a
    if op in (Op.ADD, Op.SUB) and b.is_const and b.arg == 0.0: return a
    if op is Op.ADD and a.is_const and a.arg == 0.0: return b
  if op is Op.CAST and n.src[0].dtype == n.dtype: return n.src[0]
  return n


def multiple_of(e: Expr) -> int:
  """A positive integer that provably divides ``e`` (1 when nothing better is known)."""
  import math
  if e.op is Op.CONST and isinstance(e.arg, int): return abs(e.arg) or 1 << 30
  terms, c = linear(e)
  if len(terms) == 1 and c == 0:
    (t, k), = terms.items()
    if t.op is Op.FLOORMOD and t.src[1].is_const: return abs(k) * math.gcd(multiple_of(t.src[0]), t.src[1].arg)
    if t.op is Op.MUL and t != e: return abs(k) * multiple_of(t)
    if t.op is Op.MUL: return multiple_of(t.src[0]) * multiple_of(t.src[1])
    return abs(k) if t != e else 1
  g = abs(c) if c else 0
  for t, k in terms.items(): g = math.gcd(g, abs(k) * multiple_of(t))
  return g or 1


def _split_small(r_terms: dict[Expr, int], rc: int, d: int, ranges: Ranges):
  """Split ``sum(r_terms) + rc`` into ``big + small`` with ``g | big``, ``g | d`` and ``0 <= small < g`` (g > 1)."""
  cands = sorted({abs(k) * multiple_of(t) for t, k in r_terms.items()}, reverse=True)
  for g in cands:
    if g <= 1 or d % g: continue
    big = {t: k for t, k in r_terms.items() if (k * multiple_of(t)) % g == 0}
    small = {t: k for t, k in r_terms.items() if t not in big}
    if not big or not small and rc == 0: continue
    se = build_linear(small, rc)
    lo, hi = bounds(se, ranges)
    if lo is not None and hi is not None and lo >= 0 and hi < g: return build_linear(big, 0), se
  return None


def _divmod(n: Expr, x: Expr, d: int, ranges: Ranges) -> Expr:
  dt = n.dtype
  if d == 1: return x if n.op is Op.FLOORDIV else const(0, dt)
  terms, c = linear(x)
  q_terms = {t: k // d for t, k in terms.items() if k % d == 0}
  r_terms = {t: k for t, k in terms.items() if k % d != 0}
  qc, rc = divmod(c, d)
  rest = build_linear(r_terms, rc, dt)
  lo, hi = bounds(rest, ranges)
  m = None
  if lo is not None and hi is not None and lo // d == hi // d: m = lo // d
  if n.op is Op.FLOORDIV and m is not None: return build_linear(q_terms, qc + m, dt)
  if n.op is Op.FLOORMOD and m is not None: return build_linear(r_terms, rc - m * d, dt)
  # (x + r) with x a multiple of g, g | d and 0 <= r < g: r cannot carry into the quotient
  split = _split_small(r_terms, rc, d, ranges)
  if split is not None:
    big, small = split
    if n.op is Op.FLOORDIV:
      q_terms[Expr.make(Op.FLOORDIV, dt, (big, const(d, dt)))] = q_terms.get(Expr.make(Op.FLOORDIV, dt, (big, const(d, dt))), 0) + 1
      return build_linear(q_terms, qc, dt)
    return simplify(Expr.make(Op.ADD, dt, (Expr.make(Op.FLOORMOD, dt, (big, const(d, dt))), small)), ranges)
  if n.op is Op.FLOORDIV:
    if rest.op is Op.FLOORDIV and rest.src[1].is_const and rest.src[1].arg > 0 and not q_terms and qc == 0:
      return _divmod(n, rest.src[0], rest.src[1].arg * d, ranges)
    inner = Expr.make(Op.FLOORDIV, dt, (rest, const(d, dt)))
    if not q_terms and qc == 0: return inner
    q_terms[inner] = q_terms.get(inner, 0) + 1
    return build_linear(q_terms, qc, dt)
  if rest.op is Op.FLOORMOD and rest.src[1].is_const and rest.src[1].arg % d == 0:
    return _divmod(n, rest.src[0], d, ranges)
  return Expr.make(Op.FLOORMOD, dt, (rest, const(d, dt)))
