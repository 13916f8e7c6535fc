"""Integer expressions as polynomials over atoms, for the exact rewrites that floor division and min / max need.

Felix's smoother (:mod:`minicomp.search.strategies.felix.smooth`) rewrites ``floordiv``, ``floormod``, ``min`` and ``max`` of
a sketch's size variables exactly where it can before it smooths what is left: ``(q*b + r) // b = q + r // b``
with the multiples of ``b`` read off the expanded numerator, ``max(1, x*y) = x*y`` when one side provably
dominates, and floor division pushed under min / max / select. The feature extractor uses the same algebra
to compare extents (:mod:`minicomp.search.features`). A polynomial is a dict from monomial (a sorted tuple
of atom numbers) to integer coefficient; atoms are variables and the nodes :class:`Polys` does not expand.
"""
from __future__ import annotations

from minicomp.ir.expr import Expr, binary, const, select
from minicomp.ir.ops import INT_DTYPES, Op


Poly = dict   # monomial (sorted tuple of atom numbers) -> integer coefficient
_MAX_TERMS = 128


class Polys:
  """Integer Exprs as polynomials over atoms (variables, and the nodes it does not expand), for the exact
  rewrites floor division needs: ``(q*b + r) // b = q + r // b`` with the multiples of ``b`` read off the
  expanded numerator (``(P + 63) // P = 1 + 63 // P``, ``(x*y - 1) // y = x - 1``, ``(x*y - 1) % y = y - 1``),
  min/max decided when one side provably dominates (``max(1, x*y) = x*y``) and floor division pushed under
  min/max/select. It assumes every variable is >= 1 (tile sizes, thread counts, vector widths)."""

  def __init__(self, enabled: bool = True):
    self.enabled = enabled
    self.memo: dict[Expr, Poly] = {}
    self.atoms: dict[Expr, int] = {}          # atom -> its number (an index of atom_list)
    self.atom_list: list[Expr] = []

  def atom(self, e: Expr) -> Poly:
    i = self.atoms.get(e)
    if i is None:
      i = self.atoms[e] = len(self.atom_list)
      self.atom_list.append(e)
    return {(i,): 1}

  def poly(self, e: Expr) -> Poly:
    """``e`` as a polynomial. Its own walk, not ``rewrite.fold``: atoms are numbered in the order they
    are met, and that order (right operand first) fixes the term order of every expression built
    back from a polynomial, so Felix's smoothed formulas (and their rounding) depend on it. A fold
    visits the left operand first and changes them (``tests/test_source_corpus.py``, matmul/felix)."""
    stack = [e]
    while stack:
      n = stack[-1]
      if n in self.memo: stack.pop(); continue
      kids = n.src if n.op in (Op.ADD, Op.SUB, Op.MUL, Op.NEG, Op.CAST, Op.MIN, Op.MAX) else ()
      pending = [x for x in kids if x not in self.memo]
      if pending: stack.extend(pending); continue
      stack.pop()
      self.memo[n] = self._poly(n)
    return self.memo[e]

  def _poly(self, n: Expr) -> Poly:
    op, m = n.op, self.memo
    if op is Op.CONST:
      v = float(n.arg)
      return {(): int(v)} if v.is_integer() else self.atom(n)
    if op is Op.CAST and n.src[0].dtype in INT_DTYPES and n.dtype not in ("bool",): return m[n.src[0]]
    if op in (Op.ADD, Op.SUB, Op.NEG, Op.MUL):
      if op is Op.MUL: r = _pmul(m[n.src[0]], m[n.src[1]])
      elif op is Op.NEG: r = _padd({}, m[n.src[0]], -1)
      else: r = _padd(m[n.src[0]], m[n.src[1]], 1 if op is Op.ADD else -1)
      return self.atom(n) if r is None else r
    if op in (Op.MIN, Op.MAX):
      p, q = m[n.src[0]], m[n.src[1]]
      if self.dominates(p, q): return p if op is Op.MAX else q
      if self.dominates(q, p): return q if op is Op.MAX else p
      return self.atom(n)
    if op in (Op.FLOORDIV, Op.FLOORMOD) and n.dtype in INT_DTYPES:
      e = self.floordiv(n) if op is Op.FLOORDIV else self.floormod(n)
      if e is not None: return self.poly(e)
    return self.atom(n)

  def lower_bound(self, p: Poly) -> int | None:
    """A lower bound of ``p`` when its non-constant terms are positive products of variables (>= 1)."""
    lb = p.get((), 0)
    for mono, k in p.items():
      if not mono: continue
      if k < 0 or any(self.atom_list[i].op is not Op.VAR for i in mono): return None
      lb += k
    return lb

  def equal(self, a: Expr, b: Expr) -> bool:
    """Whether integer Exprs ``a`` and ``b`` are the same polynomial over their atoms (exact; False
    when the expansion is too large to tell)."""
    diff = _padd(self.poly(a), self.poly(b), -1)
    return diff is not None and not any(diff.values())

  def dominates(self, p: Poly, q: Poly) -> bool:
    if not self.enabled: return False
    d = _padd(p, q, -1)
    lb = self.lower_bound(d) if d is not None else None
    return lb is not None and lb >= 0

  def expr(self, p: Poly, dtype: str = "int32") -> Expr:
    out: Expr | None = None
    for mono, k in sorted(p.items()):
      if k == 0: continue
      t: Expr | None = None
      for i in mono: t = self.atom_list[i] if t is None else binary(Op.MUL, t, self.atom_list[i])
      if t is None: t = const(abs(k), dtype)
      elif abs(k) != 1: t = binary(Op.MUL, t, const(abs(k), dtype))
      out = (t if k > 0 else binary(Op.SUB, const(0, dtype), t)) if out is None else \
        binary(Op.ADD if k > 0 else Op.SUB, out, t)
    return const(0, dtype) if out is None else out

  def _split(self, n: Expr):
    """(Q, R, lower bound of B) with A = Q*B + R by polynomial division (graded order; exact integer
    coefficients), or None when nothing is gained. Divisors are assumed >= 1 (extents and strides)."""
    pa, pb = self.poly(n.src[0]), self.poly(n.src[1])
    if not pb or any(any(self.atom_list[i].op is not Op.VAR for i in m) for m in pb): return None
    lead = max(pb, key=lambda m: (len(m), m))
    kl = pb[lead]
    q: Poly = {}
    r: Poly = {}
    a = dict(pa)
    for _ in range(4 * _MAX_TERMS):
      if not a: break
      mono = max(a, key=lambda m: (len(m), m))
      k = a[mono]
      left = list(mono)
      ok = k % kl == 0
      for i in lead if ok else ():
        if i in left: left.remove(i)
        else: ok = False; break
      if not ok:
        r[mono] = k
        del a[mono]
        continue
      t = {tuple(left): k // kl}
      q = _padd(q, t, 1)
      a = _padd(a, _pmul(t, pb) or {}, -1)
      if q is None or a is None: return None
    else:
      return None
    lb = max(self.lower_bound(pb) or 1, 1)
    small = set(r) <= {()} and -1 <= r.get((), 0) < lb     # floor(r / B) is -1 or 0 for B >= max(lb, 1)
    if not q and not small: return None
    return q, r, lb

  def floordiv(self, n: Expr) -> Expr | None:
    """An exactly equal Expr for FLOORDIV node ``n`` that is simpler, or None."""
    if not self.enabled: return None
    a, b = n.src
    d = _distribute(a, b, 6, self)
    if d is not None: return d
    sp = self._split(n)
    if sp is None: return None
    q, r, lb = sp
    if set(r) <= {()} and -1 <= r.get((), 0) < lb:
      return self.expr(_padd(q, {(): -1 if r.get((), 0) < 0 else 0}, 1) or {}, n.dtype)
    return binary(Op.ADD, self.expr(q, n.dtype), binary(Op.FLOORDIV, self.expr(r, n.dtype), b))

  def floormod(self, n: Expr) -> Expr | None:
    if not self.enabled: return None
    a, b = n.src
    d = _distribute(a, b, 6, self)
    if d is not None: return binary(Op.SUB, a, binary(Op.MUL, b, d))
    sp = self._split(n)
    if sp is None: return None
    _, r, lb = sp
    if set(r) <= {()} and -1 <= r.get((), 0) < lb:
      rc = r.get((), 0)
      return const(rc, n.dtype) if rc >= 0 else binary(Op.ADD, b, const(rc, n.dtype))
    return binary(Op.FLOORMOD, self.expr(r, n.dtype), b)


def _padd(p: Poly, q: Poly, sign: int) -> Poly | None:
  out = dict(p)
  for mono, k in q.items():
    v = out.get(mono, 0) + sign * k
    if v: out[mono] = v
    else: out.pop(mono, None)
  return out if len(out) <= _MAX_TERMS else None


def _pmul(p: Poly, q: Poly) -> Poly | None:
  if len(p) * len(q) > 4 * _MAX_TERMS: return None
  out: Poly = {}
  for m1, k1 in p.items():
    for m2, k2 in q.items():
      mono = tuple(sorted(m1 + m2))
      v = out.get(mono, 0) + k1 * k2
      if v: out[mono] = v
      else: out.pop(mono, None)
  return out if len(out) <= _MAX_TERMS else None


def _mm(op: Op, a: Expr, b: Expr, polys: Polys) -> Expr:
  """min/max, decided when one side provably dominates (symbolic lowering repeats bounds)."""
  if a is b: return a
  pa, pb = polys.poly(a), polys.poly(b)
  if polys.dominates(pa, pb): return a if op is Op.MAX else b
  if polys.dominates(pb, pa): return b if op is Op.MAX else a
  return binary(op, a, b)


def _distribute(a: Expr, b: Expr, depth: int, polys: Polys) -> Expr | None:
  """``a // b`` with the floor division pushed under the min/max/select at the top of ``a`` (through
  ``+- const``), exact for b > 0; None when ``a`` has no such top, or when the nest is deeper than
  ``depth`` (a leaf that could be pushed further would be rewritten again: no fixed point)."""
  k, core = 0, a
  while core.op in (Op.ADD, Op.SUB) and core.src[1].op is Op.CONST:
    k += core.src[1].arg if core.op is Op.ADD else -core.src[1].arg
    core = core.src[0]
  if core.op not in (Op.MIN, Op.MAX, Op.SELECT) or depth <= 0: return None
  parts = []
  for x in core.src[1:] if core.op is Op.SELECT else core.src:
    x = binary(Op.ADD, x, k) if k else x
    xc = x
    while xc.op in (Op.ADD, Op.SUB) and xc.src[1].op is Op.CONST: xc = xc.src[0]
    if xc.op in (Op.MIN, Op.MAX, Op.SELECT):
      r = _distribute(x, b, depth - 1, polys)
      if r is None: return None
    else: r = binary(Op.FLOORDIV, x, b)
    parts.append(r)
  if core.op is Op.SELECT: return select(core.src[0], parts[0], parts[1])
  return _mm(core.op, parts[0], parts[1], polys)
