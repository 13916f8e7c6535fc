"""What is known about an integer index expression: its linear form, its interval bounds, what divides it.

``linear(e)`` writes ``e`` as ``sum(k * term) + c`` over integer coefficients (non-linear parts are terms;
small products of sums are distributed); ``build_linear`` turns a linear form back into a canonical
expression (big coefficients first, constant last). ``bounds(e, ranges)`` gives inclusive integer bounds
from variable ranges (``ranges`` maps names to ``(lo, hi)``, either may be None); ``multiple_of(e)`` a
positive integer that provably divides ``e``. The simplifier (:mod:`minicomp.ir.simplify`) is built on these.

Every function here is pure in (expression, ranges), so results are remembered across calls (see
"memo tables" below): a symbolic program repeats the same large subexpressions in thousands of
indices, and feature extraction simplifies each of them many times.
"""
from __future__ import annotations

from minicomp.ir.expr import Expr, Op, const
from minicomp.ir.ops import INT_DTYPES

Ranges = dict[str, tuple[int | None, int | None]]
Bound = tuple[int | None, int | None]


# ---------------------------------------------------------------------------------------------
# memo tables, keyed by Expr (interned: identity equality, cached hash): one for linear forms and
# the order key, one pair (simplified, bounds) per distinct ranges. All are dropped whenever they hold more
# than _MEMO_MAX entries together, so memory stays bounded in long searches.

_MEMO_MAX = 1 << 19
_LINEAR: dict[Expr, tuple[dict[Expr, int], int]] = {}
_ORDER: dict[Expr, str] = {}
_CTXS: dict[object, _Ctx] = {}
_size = [0]


class _Ctx:
  """The ranges of one simplification and what is known under them."""
  __slots__ = ("bounds", "ranges", "simplified")

  def __init__(self, ranges: Ranges):
    self.ranges = ranges
    self.simplified: dict[Expr, Expr] = {}
    self.bounds: dict[Expr, Bound] = {}


def _remember(table: dict, key, value) -> None:
  if _size[0] >= _MEMO_MAX: clear_memo()
  table[key] = value
  _size[0] += 1


def clear_memo() -> None:
  """Forget every remembered result (they are only a speed-up: results do not change)."""
  _LINEAR.clear(); _ORDER.clear(); _CTXS.clear()
  _size[0] = 0


def _ctx(ranges: Ranges | None) -> _Ctx:
  if not ranges: key = None
  else:
    try: key = frozenset(ranges.items())
    except TypeError: return _Ctx(dict(ranges))   # unhashable bounds: remember nothing across calls
  c = _CTXS.get(key)
  if c is None:
    c = _CTXS[key] = _Ctx(dict(ranges) if ranges else {})
  return c


def _order(e: Expr) -> str:
  """The canonical order key of a term (its text), remembered."""
  k = _ORDER.get(e)
  if k is None:
    k = repr(e)
    _remember(_ORDER, e, k)
  return k


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
  return _bounds(e, _ctx(ranges))


def _bounds(e: Expr, cx: _Ctx) -> Bound:
  op = e.op
  if op is Op.CONST:
    v = e.arg
    return (int(v), int(v)) if isinstance(v, (int, bool)) else (None, None)
  if op is Op.VAR: return cx.ranges.get(e.arg, (None, None))
  r = cx.bounds.get(e)
  if r is None:
    r = _bounds_of(e, cx)
    _remember(cx.bounds, e, r)
  return r


def _bounds_of(e: Expr, cx: _Ctx) -> Bound:
  op = e.op
  if e.dtype not in INT_DTYPES and e.dtype != "bool": return (None, None)
  if op in (Op.ADD, Op.SUB, Op.MUL, Op.NEG):
    terms, c = _linear(e)
    out: Bound = (c, c)
    for t, k in terms.items():
      out = _add(out, _scale(_bounds(t, cx), k) if t.op is not Op.MUL else _scale(_mul_bounds(t, cx), k))
    return out
  a = _bounds(e.src[0], cx) if e.src else (None, None)
  if op in (Op.FLOORDIV, Op.FLOORMOD) and e.src[1].is_const and e.src[1].arg > 0:
    d = e.src[1].arg
    if op is Op.FLOORDIV:
      return (None if a[0] is None else a[0] // d, None if a[1] is None else a[1] // d)
    if a[0] is not None and a[1] is not None and a[0] >= 0 and a[1] < d: return a
    import math
    return (0, d - math.gcd(multiple_of(e.src[0]), d))   # x % d of a multiple of g is at most d - g
  if op in (Op.MIN, Op.MAX):
    b = _bounds(e.src[1], cx)
    f = min if op is Op.MIN else max
    lo = f(a[0], b[0]) if a[0] is not None and b[0] is not None else (
      None if op is Op.MIN else (a[0] if a[0] is not None else b[0]))
    hi = f(a[1], b[1]) if a[1] is not None and b[1] is not None else (
      None if op is Op.MAX else (a[1] if a[1] is not None else b[1]))
    return (lo, hi)
  if op is Op.SELECT:
    b, c = _bounds(e.src[1], cx), _bounds(e.src[2], cx)
    return (None if b[0] is None or c[0] is None else min(b[0], c[0]),
            None if b[1] is None or c[1] is None else max(b[1], c[1]))
  if op is Op.CAST: return a
  if e.dtype == "bool": return (0, 1)
  return (None, None)


def _mul_bounds(e: Expr, cx: _Ctx) -> Bound:
  a, b = _bounds(e.src[0], cx), _bounds(e.src[1], cx)
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
  terms, c = _linear(e)
  return dict(terms), c


def _linear(e: Expr) -> tuple[dict[Expr, int], int]:
  """:func:`linear`, remembered: the dict is shared, never change it."""
  r = _LINEAR.get(e)
  if r is None:
    r = _linear_of(e)
    _remember(_LINEAR, e, r)
  return r


def _linear_of(e: Expr) -> tuple[dict[Expr, int], int]:
  if e.dtype not in INT_DTYPES: return ({e: 1}, 0)
  op = e.op
  if op is Op.CONST: return ({}, int(e.arg))
  if op in (Op.ADD, Op.SUB):
    ta, ca = _linear(e.src[0]); tb, cb = _linear(e.src[1])
    s = 1 if op is Op.ADD else -1
    out = dict(ta)
    for t, k in tb.items(): out[t] = out.get(t, 0) + s * k
    return ({t: k for t, k in out.items() if k != 0}, ca + s * cb)
  if op is Op.NEG:
    ta, ca = _linear(e.src[0])
    return ({t: -k for t, k in ta.items()}, -ca)
  if op is Op.MUL:
    a, b = e.src
    if b.is_const: a, b = b, a
    if a.is_const:
      tb, cb = _linear(b); k = int(a.arg)
      return ({t: k * v for t, v in tb.items() if k * v != 0}, k * cb)
    # distribute a product of sums of symbolic terms (small ones only): (x - 1) * f -> x*f - f
    ta, ca = _linear(a); tb, cb = _linear(b)
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
  if _order(y) < _order(x): x, y = y, x
  return Expr.make(Op.MUL, x.dtype, (x, y))


def _term_key(item):
  t, k = item
  return (-abs(k), _order(t))


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


def multiple_of(e: Expr) -> int:
  """A positive integer that provably divides ``e`` (1 when nothing better is known)."""
  import math
  if e.op is Op.CONST and isinstance(e.arg, int): return abs(e.arg) or 1 << 30
  terms, c = _linear(e)
  if len(terms) == 1 and c == 0:
    (t, k), = terms.items()
    if t.op is Op.FLOORMOD and t.src[1].is_const: return abs(k) * math.gcd(multiple_of(t.src[0]), t.src[1].arg)
    if t.op is Op.MUL and t != e: return abs(k) * multiple_of(t)
    if t.op is Op.MUL: return multiple_of(t.src[0]) * multiple_of(t.src[1])
    return abs(k) if t != e else 1
  g = abs(c) if c else 0
  for t, k in terms.items(): g = math.gcd(g, abs(k) * multiple_of(t))
  return g or 1


def consecutive(indices) -> bool:
  """The indices are provably ``i, i + 1, i + 2, ...`` (their linear forms differ only in the constant, by one each)."""
  forms = [_linear(e) for e in indices]
  return all(t == forms[0][0] and c == forms[0][1] + k for k, (t, c) in enumerate(forms))
