"""The simplifier: rewrite rules in named groups (fold, linear, divmod, bounds, logic) over minicomp.ir.rewrite.

Integer sums are normalised to a linear form (:mod:`minicomp.ir.linear`) (terms with integer coefficients plus a
constant), which makes the rules that clean up lowered index math short and exact:

- constant folding, ``x*1``, ``x+0``, ``x*0``, ``x-x``;
- ``(a*d + r) // d -> a + r // d`` and ``(a*d + r) % d -> r % d``, then ``r // d -> 0`` and
  ``r % d -> r`` when the bounds prove ``0 <= r < d`` (the split-loop pattern);
- ``(x // a) // b -> x // (a*b)``, ``(x % (a*b)) % a -> x % a``, ``(x//d)*d + x%d -> x``;
- min / max / comparisons / select decided by bounds.

``ranges`` maps variable names to inclusive integer bounds ``(lo, hi)`` (either may be None). Results
are remembered per ranges (``minicomp.ir.linear``'s memo tables; ``clear_memo`` forgets them).
"""
from __future__ import annotations

from minicomp.ir.expr import Expr, Op, binary, const
from minicomp.ir.ops import FLOAT_DTYPES, INT_DTYPES
from minicomp.ir.linear import (_MEMO_MAX, Ranges, _bounds, _ctx, _Ctx, _linear, _size, build_linear, clear_memo,
                                multiple_of)
from minicomp.ir.rewrite import Rules, rewrite

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

# -- the cheap part, for formulas evaluated many times on arrays (the analytic model's, at every point of a walk):
# integer constants folded and the integer identities dropped, no linear forms (on a convolution's ~1,000-node
# program of index steps and strides, 1079 -> 458 nodes in 2 ms, where SIMPLIFY takes 20 ms for 705)

IDENTITY = Rules("identity")


@IDENTITY.rule(Op.ADD, Op.SUB, Op.MUL, Op.FLOORDIV, Op.FLOORMOD, when=lambda n: n.dtype in ("int32", "int64"))
def _int_identity(n: Expr, cx) -> Expr | None:
  """Signed integer constants folded (an int32 result only where it fits: wrapping is C's, not numpy's int64);
  x+0, 0+x, x-0, x*1, 1*x, x//1 -> x; x*0, 0*x, 0//d, 0%d, x%1 -> 0 (d not 0: x // 0 stays as written)."""
  a, b = n.src
  if a.is_const and b.is_const:
    if n.op in (Op.FLOORDIV, Op.FLOORMOD) and b.arg == 0: return None
    v = _INT_FOLD[n.op](int(a.arg), int(b.arg))
    return const(v, n.dtype) if n.dtype != "int32" or _INT32[0] <= v <= _INT32[1] else None
  zero = const(0, n.dtype)
  if n.op is Op.ADD: return b if a.is_const and a.arg == 0 else a if b.is_const and b.arg == 0 else None
  if n.op is Op.SUB: return a if b.is_const and b.arg == 0 else None
  if n.op is Op.MUL:
    if (a.is_const and a.arg == 0) or (b.is_const and b.arg == 0): return zero
    return b if a.is_const and a.arg == 1 else a if b.is_const and b.arg == 1 else None
  if b.is_const and b.arg == 0: return None
  if a.is_const and a.arg == 0: return zero
  if b.is_const and b.arg == 1: return a if n.op is Op.FLOORDIV else zero
  return None


def fold_identities(e: Expr, memo: dict | None = None) -> Expr:
  """``e`` with integer constants folded and the integer identities dropped (the ``IDENTITY`` rules: the same
  values, fewer nodes); ``memo`` (node -> result) may be shared between calls."""
  return rewrite(e, IDENTITY, None, memo)


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


__all__ = ["BOUNDS", "DIVMOD", "FOLD", "IDENTITY", "LINEAR", "LOGIC", "SIMPLIFY", "simplify", "fold_identities",
           "clear_memo"]
