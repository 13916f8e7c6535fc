"""Simplifier and interval bounds for expressions.

Integer sums are normalised to a linear form (terms with integer coefficients plus a
constant), which makes the rules that clean up lowered index math short and exact:

- constant folding, ``x*1``, ``x+0``, ``x*0``, ``x-x``;
- ``(a*d + r) // d -> a + r // d`` and ``(a*d + r) % d -> r % d``, then ``r // d -> 0`` and
  ``r % d -> r`` when the bounds prove ``0 <= r < d`` (the split-loop pattern);
- ``(x // a) // b -> x // (a*b)``, ``(x % (a*b)) % a -> x % a``, ``(x//d)*d + x%d -> x``;
- min / max / comparisons / select decided by bounds.

``ranges`` maps variable names to inclusive integer bounds ``(lo, hi)`` (either may be None).

Every function here is pure in (expression, ranges), so results are remembered across calls (see
"memo tables" below): a symbolic program repeats the same large subexpressions in thousands of
indices, and feature extraction simplifies each of them many times.
"""
from __future__ import annotations

from minicomp.ir.expr import Expr, Op, binary, const
from minicomp.ir.ops import FLOAT_DTYPES, INT_DTYPES
from minicomp.ir.rewrite import Rules, rewrite

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


def _merge_divmod(terms: dict[Expr, int], cx: _Ctx) -> dict[Expr, int]:
  """``c*(y % b) + c*b*(x // (a*b)) -> c*y`` where ``y == x // a`` (``a`` may be 1: ``y == x``).

  This undoes the index arithmetic of fused loops: ``(f // 32 % 16) * 32 + f // 512 * 512 + f % 32 -> f``.
  ``terms`` is not changed (a new dict is returned when anything merges).
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
        if (_simplify(x, cx) if a == 1 else _simplify(Expr.make(Op.FLOORDIV, x.dtype, (x, const(a, x.dtype))), cx)) != y:
          continue
        terms = dict(terms)
        del terms[t]; del terms[q]
        ty, cy = _linear(y)
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
  return _simplify(e, _ctx(ranges))


def _simplify(e: Expr, cx: _Ctx) -> Expr:
  memo = cx.simplified
  before = len(memo)
  r = rewrite(e, SIMPLIFY, cx, memo)
  _size[0] += len(memo) - before
  if _size[0] >= _MEMO_MAX: clear_memo()
  return r


# -- the rules, in named groups; each rule returns a normal form, so one application per node suffices.
# Every rule sees the node rebuilt on its simplified children and ``cx`` (the ranges and what is known
# under them).

_INT_FOLD = {Op.ADD: lambda a, b: a + b, Op.SUB: lambda a, b: a - b, Op.MUL: lambda a, b: a * b,
             Op.FLOORDIV: lambda a, b: a // b, Op.FLOORMOD: lambda a, b: a % b, Op.MIN: min, Op.MAX: max}
_INT_CMP = {Op.LT: lambda a, b: a < b, Op.LE: lambda a, b: a <= b, Op.GT: lambda a, b: a > b,
            Op.GE: lambda a, b: a >= b, Op.EQ: lambda a, b: a == b, Op.NE: lambda a, b: a != b}
_INT32 = (-(1 << 31), (1 << 31) - 1)
_INT = set(INT_DTYPES)
_FLOAT = set(FLOAT_DTYPES)

FOLD = Rules("fold")


@FOLD.rule(Op.FLOORDIV, Op.FLOORMOD, when=lambda n: n.src[1].is_const and n.src[1].arg == 0)
def _by_zero(n: Expr, cx: _Ctx) -> Expr:
  return n                       # x // 0 stays as written (no rule may touch it)


@FOLD.rule(*(set(Op) - {Op.CONST, Op.VAR, Op.CALL, Op.LOAD, Op.REDUCE}), when=lambda n: all(s.is_const for s in n.src))
def _fold(n: Expr, cx: _Ctx) -> Expr | None:
  """Constant operands: the value."""
  if len(n.src) == 2 and n.src[0].dtype in _INT and n.src[1].dtype in _INT:
    # integer index math, folded with Python ints (floor semantics, like numpy's); numpy below for the
    # rest, and for int32 results that would wrap
    a, b = int(n.src[0].arg), int(n.src[1].arg)
    if n.op in _INT_FOLD and n.dtype in _INT and not (n.op in (Op.FLOORDIV, Op.FLOORMOD) and b == 0):
      v = _INT_FOLD[n.op](a, b)
      if n.dtype != "int32" or _INT32[0] <= v <= _INT32[1]: return const(v, n.dtype)
    elif n.op in _INT_CMP and n.dtype == "bool":
      return const(_INT_CMP[n.op](a, b))
  from minicomp.ir.evaluate import evaluate
  v = evaluate(n)
  if n.dtype in _FLOAT and n.op is Op.DIV and n.src[1].arg == 0: return None
  return const(v.item() if hasattr(v, "item") else v, n.dtype)


@FOLD.rule(Op.MUL, Op.DIV, Op.ADD, Op.SUB, when=lambda n: n.dtype in _FLOAT)
def _float_identity(n: Expr, cx: _Ctx) -> Expr | None:
  """x*1, 1*x, x/1, x+0, x-0, 0+x (floats: nothing that changes rounding or signed zeros' meaning)."""
  a, b = n.src
  op = n.op
  if op is Op.MUL and b.is_const and b.arg == 1.0: return a
  if op is Op.MUL and a.is_const and a.arg == 1.0: return b
  if op is Op.DIV and b.is_const and b.arg == 1.0: return a
  if op in (Op.ADD, Op.SUB) and b.is_const and b.arg == 0.0: return a
  if op is Op.ADD and a.is_const and a.arg == 0.0: return b
  return None


@FOLD.rule(Op.CAST, when=lambda n: n.src[0].dtype == n.dtype)
def _same_cast(n: Expr, cx: _Ctx) -> Expr: return n.src[0]


LINEAR = Rules("linear")


@LINEAR.rule(Op.ADD, Op.SUB, Op.MUL, Op.NEG, when=lambda n: n.dtype in _INT)
def _linear_form(n: Expr, cx: _Ctx) -> Expr:
  """Integer sums in the canonical linear form, fused-loop index arithmetic merged (``_merge_divmod``)."""
  terms, c = _linear(n)
  terms = _merge_divmod(terms, cx)
  if _CONST_KEY in terms:
    terms = dict(terms)
    c += terms.pop(_CONST_KEY)
  return build_linear(terms, c, n.dtype)


DIVMOD = Rules("divmod")


@DIVMOD.rule(Op.FLOORDIV, Op.FLOORMOD, when=lambda n: n.dtype in _INT and n.src[1].is_const and n.src[1].arg > 0)
def _divmod_const(n: Expr, cx: _Ctx) -> Expr:
  return _divmod(n, n.src[0], n.src[1].arg, cx)


BOUNDS = Rules("bounds")


@BOUNDS.rule(Op.MIN, Op.MAX, when=lambda n: n.dtype in _INT)
def _minmax_by_bounds(n: Expr, cx: _Ctx) -> Expr | None:
  """min/max of integers decided when the bounds of the difference have one sign."""
  lo, hi = _bounds(_simplify(binary(Op.SUB, n.src[0], n.src[1]), _ctx(None)), cx)
  if hi is not None and hi <= 0: return n.src[0] if n.op is Op.MIN else n.src[1]
  if lo is not None and lo >= 0: return n.src[1] if n.op is Op.MIN else n.src[0]
  return None


@BOUNDS.rule(Op.LT, Op.LE, Op.GT, Op.GE, Op.EQ, Op.NE, when=lambda n: n.src[0].dtype in _INT)
def _compare_by_bounds(n: Expr, cx: _Ctx) -> Expr | None:
  """Integer comparisons decided by the bounds of the difference."""
  d = _simplify(binary(Op.SUB, n.src[0], n.src[1]), cx)
  lo, hi = _bounds(d, cx)
  yes, no = {Op.LT: (hi is not None and hi < 0, lo is not None and lo >= 0),
             Op.LE: (hi is not None and hi <= 0, lo is not None and lo > 0),
             Op.GT: (lo is not None and lo > 0, hi is not None and hi <= 0),
             Op.GE: (lo is not None and lo >= 0, hi is not None and hi < 0),
             Op.EQ: (lo == hi == 0, (lo is not None and lo > 0) or (hi is not None and hi < 0)),
             Op.NE: ((lo is not None and lo > 0) or (hi is not None and hi < 0), lo == hi == 0)}[n.op]
  if yes: return const(True)
  if no: return const(False)
  return None


LOGIC = Rules("logic")


@LOGIC.rule(Op.SELECT)
def _select(n: Expr, cx: _Ctx) -> Expr | None:
  c = n.src[0]
  if c.is_const: return n.src[1] if c.arg else n.src[2]
  if n.src[1] == n.src[2]: return n.src[1]
  return None


@LOGIC.rule(Op.AND)
def _and(n: Expr, cx: _Ctx) -> Expr | None:
  a, b = n.src
  if a.is_const: return b if a.arg else a
  if b.is_const: return a if b.arg else b
  if a == b: return a
  return None


@LOGIC.rule(Op.OR)
def _or(n: Expr, cx: _Ctx) -> Expr | None:
  a, b = n.src
  if a.is_const: return a if a.arg else b
  if b.is_const: return b if b.arg else a
  return None


@LOGIC.rule(Op.NOT, when=lambda n: n.src[0].op is Op.NOT)
def _not_not(n: Expr, cx: _Ctx) -> Expr: return n.src[0].src[0]


SIMPLIFY = FOLD + LINEAR + DIVMOD + BOUNDS + LOGIC


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


def _split_small(r_terms: dict[Expr, int], rc: int, d: int, cx: _Ctx):
  """Split ``sum(r_terms) + rc`` into ``big + small`` with ``g | big``, ``g | d`` and ``0 <= small < g`` (g > 1)."""
  cands = sorted({abs(k) * multiple_of(t) for t, k in r_terms.items()}, reverse=True)
  for g in cands:
    if g <= 1 or d % g: continue
    big = {t: k for t, k in r_terms.items() if (k * multiple_of(t)) % g == 0}
    small = {t: k for t, k in r_terms.items() if t not in big}
    if not big or not small and rc == 0: continue
    se = build_linear(small, rc)
    lo, hi = _bounds(se, cx)
    if lo is not None and hi is not None and lo >= 0 and hi < g: return build_linear(big, 0), se
  return None


def _divmod(n: Expr, x: Expr, d: int, cx: _Ctx) -> Expr:
  dt = n.dtype
  if d == 1: return x if n.op is Op.FLOORDIV else const(0, dt)
  terms, c = _linear(x)
  q_terms = {t: k // d for t, k in terms.items() if k % d == 0}
  r_terms = {t: k for t, k in terms.items() if k % d != 0}
  qc, rc = divmod(c, d)
  rest = build_linear(r_terms, rc, dt)
  lo, hi = _bounds(rest, cx)
  m = None
  if lo is not None and hi is not None and lo // d == hi // d: m = lo // d
  if n.op is Op.FLOORDIV and m is not None: return build_linear(q_terms, qc + m, dt)
  if n.op is Op.FLOORMOD and m is not None: return build_linear(r_terms, rc - m * d, dt)
  # (x + r) with x a multiple of g, g | d and 0 <= r < g: r cannot carry into the quotient
  split = _split_small(r_terms, rc, d, cx)
  if split is not None:
    big, small = split
    if n.op is Op.FLOORDIV:
      q_terms[Expr.make(Op.FLOORDIV, dt, (big, const(d, dt)))] = q_terms.get(Expr.make(Op.FLOORDIV, dt, (big, const(d, dt))), 0) + 1
      return build_linear(q_terms, qc, dt)
    return _simplify(Expr.make(Op.ADD, dt, (Expr.make(Op.FLOORMOD, dt, (big, const(d, dt))), small)), cx)
  if n.op is Op.FLOORDIV:
    if rest.op is Op.FLOORDIV and rest.src[1].is_const and rest.src[1].arg > 0 and not q_terms and qc == 0:
      return _divmod(n, rest.src[0], rest.src[1].arg * d, cx)
    inner = Expr.make(Op.FLOORDIV, dt, (rest, const(d, dt)))
    if not q_terms and qc == 0: return inner
    q_terms[inner] = q_terms.get(inner, 0) + 1
    return build_linear(q_terms, qc, dt)
  if rest.op is Op.FLOORMOD and rest.src[1].is_const and rest.src[1].arg % d == 0:
    return _divmod(n, rest.src[0], d, cx)
  return Expr.make(Op.FLOORMOD, dt, (rest, const(d, dt)))
