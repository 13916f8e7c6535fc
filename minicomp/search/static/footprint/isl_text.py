"""Integer expressions as isl text: the renderers the access relations of ``isl_build.py`` are written with.

Three folds over the expression IR (:func:`~minicomp.ir.rewrite.fold`), each a table keyed by ``Op``
whose ``ctx`` is ``names``, the isl name of every variable (``{"threadIdx.x": "tx", "k": "l0"}``):

- ``AFF``: an integer expression without selects -> quasi-affine isl text, or None when it is not
  quasi-affine (+, -, * by a constant, floordiv / floormod by a positive constant, min, max and
  integer casts are)::

      (i * 4 + tx) // 8     ->   floor((((4*(l0)) + tx))/8)

- ``COND``: a condition -> (its constraint text, its negation's); None where it is not affine
  (comparisons of affine pieces, ``and``, ``or``, ``not``; a conjunction keeps the affine part);
- ``PIECES``: an integer expression -> ``[(condition, affine value), ...]``, each select split into
  its two branches (at most :data:`MAX_PIECES`), or None.

Loads are not looked into (an index that reads memory is not affine). One rewrite,
:class:`Digits`, first turns the integer divisions of fused / split loop indices into digit
variables, which isl counts far faster.
"""
from __future__ import annotations

import itertools

from minicomp.ir.expr import Expr, var
from minicomp.ir.ops import INT_DTYPES, Op
from minicomp.ir.rewrite import Rules, fold, rewrite, substitute
from minicomp.ir.linear import linear

MAX_PIECES = 16                                       # select pieces kept before giving up on an index


def _not_load(n: Expr) -> bool: return n.op is not Op.LOAD


def _none(names, n, k): return None


# ---------------------------------------------------------------------------------------------
# AFF: quasi-affine integer expressions (child values: the children's texts)

def _int_only(rule):
  """``rule`` for integer-typed nodes; any other type is not affine."""
  return lambda names, n, k: rule(names, n, k) if n.dtype in INT_DTYPES else None


def _binary(fmt):
  return _int_only(lambda names, n, k: None if k[0] is None or k[1] is None else fmt(*k))


def _mul(names, n, k):
  """A product with a constant on either side (a product of two variables is not affine)."""
  c, a = (n.src[0], k[1]) if n.src[0].is_const else (n.src[1], k[0])
  return None if not c.is_const or a is None else f"({int(c.arg)}*({a}))"


def _div(fmt):
  """floordiv / floormod by a positive constant."""
  def rule(names, n, k):
    d = n.src[1]
    return None if not d.is_const or int(d.arg) <= 0 or k[0] is None else fmt(k[0], int(d.arg))
  return _int_only(rule)


AFF = {op: _none for op in Op} | {
  Op.CONST: lambda names, n, k: str(int(n.arg)) if isinstance(n.arg, (int, bool)) else None,
  Op.VAR: lambda names, n, k: names.get(n.arg),
  Op.CAST: _int_only(lambda names, n, k: k[0] if n.src[0].dtype in INT_DTYPES else None),
  Op.NEG: _int_only(lambda names, n, k: None if k[0] is None else f"(-({k[0]}))"),
  Op.ADD: _binary(lambda a, b: f"({a} + {b})"),
  Op.SUB: _binary(lambda a, b: f"({a} - ({b}))"),
  Op.MIN: _binary(lambda a, b: f"min({a}, {b})"),
  Op.MAX: _binary(lambda a, b: f"max({a}, {b})"),
  Op.MUL: _int_only(_mul),
  Op.FLOORDIV: _div(lambda a, d: f"floor(({a})/{d})"),
  Op.FLOORMOD: _div(lambda a, d: f"(({a}) mod {d})"),
}


def aff_text(e: Expr, names: dict[str, str]) -> str | None:
  """A quasi-affine isl expression for the integer ``e`` (no select), or None."""
  return fold(e, AFF, names, what="isl affine text", enter=_not_load)


# ---------------------------------------------------------------------------------------------
# COND: constraints (child values: (text, negated text) of the children)

_NEGATE = {Op.LT: Op.GE, Op.LE: Op.GT, Op.GT: Op.LE, Op.GE: Op.LT, Op.EQ: Op.NE, Op.NE: Op.EQ}
_CMP_TEXT = {Op.LT: "<", Op.LE: "<=", Op.GT: ">", Op.GE: ">=", Op.EQ: "=", Op.NE: "!="}
_LOGIC = (Op.AND, Op.OR, Op.NOT)


def _compare(names, n, k):
  """``a cmp b`` over every pair of the operands' pieces (both polarities)."""
  if n.src[0].dtype not in INT_DTYPES: return None, None
  pa, pb = pieces_text(n.src[0], names), pieces_text(n.src[1], names)
  if pa is None or pb is None or len(pa) * len(pb) > MAX_PIECES: return None, None

  def text(cmp: str) -> str:
    alts = [" and ".join(x for x in (ca, cb, f"{a} {cmp} {b}") if x) for ca, a in pa for cb, b in pb]
    return "(" + " or ".join(f"({x})" for x in alts) + ")"
  return text(_CMP_TEXT[n.op]), text(_CMP_TEXT[_NEGATE[n.op]])


def _and_or(names, n, k):
  """A conjunction keeps its affine parts (dropping one over-approximates); a disjunction needs both.
  The negation is the other connective on the negated parts."""
  out = []
  for neg in (0, 1):
    a, b = k[0][neg], k[1][neg]
    if (n.op is Op.AND) != bool(neg):
      parts = [x for x in (a, b) if x is not None]
      out.append(f"({' and '.join(parts)})" if parts else None)
    else:
      out.append(None if a is None or b is None else f"({a} or {b})")
  return tuple(out)


COND = {op: lambda names, n, k: (None, None) for op in Op} | {op: _compare for op in _CMP_TEXT} | {
  Op.CONST: lambda names, n, k: ("1 = 1", "1 = 0") if bool(n.arg) else ("1 = 0", "1 = 1"),
  Op.NOT: lambda names, n, k: (k[0][1], k[0][0]),
  Op.AND: _and_or,
  Op.OR: _and_or,
}


def cond_pair(e: Expr, names: dict[str, str]) -> tuple[str | None, str | None]:
  """isl constraint texts for ``e`` and ``not e``; None where not affine (read it as "true")."""
  return fold(e, COND, names, what="isl condition text", enter=lambda n: n.op in _LOGIC)


def cond_text(e: Expr, names: dict[str, str], negate: bool = False) -> str | None:
  """isl constraint text for ``e`` (or ``not e``); None when not affine (read it as "true")."""
  return cond_pair(e, names)[negate]


# ---------------------------------------------------------------------------------------------
# PIECES: selects split into pieces (child values: (pieces, a select lies below) of the children)

def _select(names, n, k):
  ct, cf = cond_pair(n.src[0], names)
  if ct is None or cf is None: return None, True
  out = []
  for cc, (p, _) in ((ct, k[1]), (cf, k[2])):
    if p is None: return None, True
    out += [(f"{cc} and {pc}" if pc else cc, v) for pc, v in p]
  return (out if len(out) <= MAX_PIECES else None), True


def _piecewise(names, n, k):
  """With no select below, one piece: the node's affine text. Otherwise every combination of the
  operands' pieces, the node re-assembled on placeholder variables ``__p0, __p1, ...`` (so a
  constant operand is a placeholder too, and ``select(..) * 4`` is not affine)."""
  if not any(hs for _, hs in k):
    a = AFF[n.op](names, n, tuple(None if p is None else p[0][1] for p, _ in k))
    return (None if a is None else [("", a)]), False
  subs = [p for p, _ in k]
  if any(p is None for p in subs): return None, True
  shell = n.replace(src=tuple(var(f"__p{i}", s.dtype) for i, s in enumerate(n.src)))
  combos = []
  for choice in itertools.product(*subs):
    ph = {f"__p{i}": t for i, (_, t) in enumerate(choice)}
    combos.append((" and ".join(c for c, _ in choice if c), AFF[n.op]({**names, **ph}, shell, tuple(ph.values()))))
  if len(combos) > MAX_PIECES or any(v is None for _, v in combos): return None, True
  return combos, True


PIECES = {op: _piecewise for op in Op} | {Op.SELECT: _select}


def pieces_text(e: Expr, names: dict[str, str]) -> list[tuple[str, str]] | None:
  """``e`` as (condition, quasi-affine value) pieces (selects split into pieces); None if not affine."""
  return fold(e, PIECES, names, what="isl pieces", enter=_not_load)[0]


# ---------------------------------------------------------------------------------------------
# digits: floordiv / floormod rewritten as affine sums of digit variables

SLICES = Rules("digit_slices")
SLICES.add(lambda n, digits: digits.slice(n), Op.FLOORDIV, Op.FLOORMOD,
           when=lambda n: n.src[1].is_const and int(n.src[1].arg) > 0)


class Digits:
  """Rewrite the floordiv / floormod nodes of some expressions into digit variables.

  Every such node is a *slice* ``floor((L mod M) / D)`` of a linear form ``L`` (``M`` may be
  infinite). When the boundaries of all slices of one ``L`` form a divisor chain
  ``1 = B0 | B1 | ... | Bk``, ``L`` is written ``sum(Bi * ti)`` with digits ``0 <= ti < B(i+1)/Bi``
  (the last unbounded) and every slice becomes an affine sum of digits. isl represents the
  same sets either way, but counts images with digit variables far faster than images with
  nested integer divisions (fused and split loops index like ``(f*32 + tx) // 58 % 4``).

  Slices are named ``sl_0, sl_1, ...`` in the order :meth:`rewrite` meets them: children first,
  left to right, across calls.
  """

  def __init__(self):
    self.slices: dict[tuple, str] = {}      # (L key, M, D) -> placeholder name
    self.forms: dict[tuple, Expr] = {}      # L key -> L
    self.memo: dict[Expr, Expr] = {}

  def rewrite(self, e: Expr) -> Expr:
    """``e`` with its slices replaced by placeholders ``sl_k`` (loads left as they are)."""
    return rewrite(e, SLICES, self, self.memo, enter=_not_load)

  def slice(self, n: Expr) -> Expr:
    """The placeholder of ``n`` (a division by a positive constant of an already rewritten operand),
    or ``n`` when its operand is not a linear form of variables."""
    x, d = n.src[0], int(n.src[1].arg)
    div = n.op is Op.FLOORDIV
    if x.op is Op.VAR and x.arg.startswith("sl_"):
      key, m, dd = next(k for k, v in self.slices.items() if v == x.arg)
      if div: sl = (key, m, dd * d)
      elif m is None or m % (dd * d) == 0: sl = (key, dd * d, dd)
      else: return n
    else:
      terms, c = linear(x)
      if any(t.op is not Op.VAR for t in terms): return n
      key = (tuple(sorted((t.arg, k) for t, k in terms.items())), c)
      self.forms[key] = x
      sl = (key, None, d) if div else (key, d, 1)
    if sl not in self.slices: self.slices[sl] = f"sl_{len(self.slices)}"
    return var(self.slices[sl])

  def finish(self) -> tuple[dict[str, Expr], list[str], list]:
    """Values of the placeholders, the digit variables and their constraints: ``(L, "b0*t0 + b1*t1")``
    pairs (L still an Expr) and bound texts."""
    values: dict[str, Expr] = {}
    digits: list[str] = []
    cons: list[tuple[Expr, list[tuple[int, str]]]] = []
    for k, (key, L) in enumerate(self.forms.items()):
      mine = [(sl, n) for sl, n in self.slices.items() if sl[0] == key]
      bs = sorted({1} | {sl[2] for sl, _ in mine} | {sl[1] for sl, _ in mine if sl[1] is not None})
      L = substitute(L, values)
      if any(b % a for a, b in itertools.pairwise(bs)) or any(m is not None and m % dd for (_, m, dd), _ in mine):
        for (_, m, dd), n in mine:      # not a divisor chain: keep the integer divisions
          values[n] = (L if m is None else L % m) // dd
        continue
      ts = [f"dg{k}_{i}" for i in range(len(bs))]
      digits += ts
      cons.append((L, list(zip(bs, ts))))
      for (_, m, dd), n in mine:
        parts = [var(t) * (b // dd) for b, t in zip(bs, ts) if b >= dd and (m is None or b < m)]
        v = parts[0] if parts else None
        for q in parts[1:]: v = v + q
        values[n] = v if v is not None else L * 0
    text = []
    bounds = dict(zip([t for _, bt in cons for _, t in bt], [None] * len(digits)))
    for L, bt in cons:
      for (b, t), (b2, _) in itertools.pairwise(bt): bounds[t] = b2 // b
      text.append((L, " + ".join(f"{b}*{t}" for b, t in bt)))
    extra = [f"0 <= {t} < {n}" for t, n in bounds.items() if n is not None]
    return values, digits, [(L, rhs) for L, rhs in text] + extra
