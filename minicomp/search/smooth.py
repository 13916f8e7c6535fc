"""Felix's differentiable feature formulas: smoothing rewrite rules, the exp change of variables, and a
JAX evaluator (``docs/search.md``, "Smoothing (Felix)").

A sketch's features are Exprs of its integer variables made of selects, comparisons, min/max and floor
division: piecewise constant or kinked, so gradient descent cannot move through them. Felix replaces
each such operator by its convolution with a kernel. The paper's ``phi(t) = 1/sqrt(1+t^2)`` normalized
is ``k(t) = phi(t)^3 / 2`` (integral 1); at width h, ``k_h(t) = k(t/h)/h``, with closed forms

    step(x) * k_h   = x / (2 sqrt(x^2 + h^2)) + 1/2          |err| <= h^2 / (4 x^2), and <= 1/2
    max(x, 0) * k_h = (x + sqrt(x^2 + h^2)) / 2               |err| <= h^2 / (4 |x|), and <= h/2
    max(a, b)       -> (a + b + sqrt((a-b)^2 + h^2)) / 2      (min: -sqrt)
    hump(x)         = h / sqrt(x^2 + h^2)  (= phi(x/h))       smoothed "x == 0" for reals

Most comparisons in features are between integer-valued quantities (extents, index steps, counts; a
dataflow pass finds them, float casts of integers included), and an integer question has slack:
``a < b`` iff ``b - a - 1/2 > 0``. The step is centred on that half-integer, so integer points sit 1/2
from its jump. With phi's heavy tails a condition is still off by up to ``h^2`` there, and a select
``c*t + (1-c)*f`` passes that error times its branches (features have branches of 1e3 and a 2^40
"no stride" sentinel), so the default kernel is a *compact* C^2 step (quintic smoothstep on
[-0.45, 0.45] around the half-integer): exactly 0/1 at every integer point, smooth in between.
``Smoother(kernel="phi")`` gives the paper's kernel (integers at width ``int_width``, floats Felix's
plain difference), with sentinel-gated conditions made compact so they stay finite.

Rules (``RULES``, one function per Op; ``register_rule`` replaces or adds one):
  lt/le/gt/ge  step of the (half-integer shifted) difference; floats: shifted by float_width/2 so ties
               keep their exact answer (compact), plain (phi)
  eq / ne      integers: the box |a - b| < 1/2, a difference of two steps; floats: le*ge / Felix's hump
  and/or/not   a*b, a + b - a*b, 1 - a;  select(c, t, f) -> c*t + (1-c)*f
  min/max      decided exactly when one side provably dominates (polynomial bounds, variables >= 1);
               compact: the blend s*b + (1-s)*a with s the smoothed comparison (exact at integers);
               phi: (a + b -+ |a-b|)/2 with |d| ~ d^2/sqrt(d^2+h^2) (exact at ties) / the convolution
  floordiv     exact rewrites first (``Polys``): min/max/select pushed out, multiples of the divisor
               taken out by polynomial division (``(x*y - 1) // y = x - 1``); the rest a/b becomes a
               staircase [a >= b] + [a >= 2b] + [a >= 3b] (exact for a < 4b) then (a+1)/b - 1 (exact
               when b | a+1; else off by < 1). Felix uses a/b (off by up to 1 - 1/b).
  floormod     a - b * floordiv(a, b), same exact rewrites first (Felix drops it to 0)
  div          a*b / (b^2 + eps^2): finite for every b, relative error eps^2/b^2
  cast         identity (float -> int truncation dropped: off by < 1)
  log/sqrt     of pos(x) = max(x, eps) with a C^2 corner; log2, pow, exp2, ... through exp/log

``compile_formulas`` turns many Exprs into one jit/vmap/grad-able JAX function: an interpreter of the
DAG run by ``lax.scan`` over chunks of equal depth, so trace and compile time do not grow with the node
count.
"""
from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable

import numpy as np

from minicomp.errors import ExprError
from minicomp.ir.expr import Expr, binary, const, select, var, walk
from minicomp.ir.ops import FLOAT_DTYPES, INT_DTYPES, Op

F64 = "float64"
SENTINEL = 2.0 ** 30            # constants at least this large mean "absent" (features use 2^40)
LN2 = math.log(2.0)
# support of the compact step on integers: [-0.45, 0.45] around the half-integer, so integer points
# computed with rounding error (float32 exp(log 8) = 7.9999995) still sit on its flat parts
INT_STEP_WIDTH = 0.9

# output op set: differentiable everywhere (MIN/MAX only inside the compact step's clamp)
SMOOTH_OPS = {Op.CONST, Op.VAR, Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.NEG, Op.CALL}
SMOOTH_CALLS = {"exp", "log", "sqrt"}


# ---------------------------------------------------------------------------------------------
# float64 Expr kit: folds constants and the identities x+0, x*1, x*0 (so rule output stays small)

def c(v: float) -> Expr:
  return const(float(v), F64)


def _k(e: Expr, v: float) -> bool: return e.op is Op.CONST and e.arg == v


def add(a: Expr, b: Expr) -> Expr:
  if a.op is Op.CONST and b.op is Op.CONST: return c(a.arg + b.arg)
  if _k(a, 0.0): return b
  if _k(b, 0.0): return a
  return Expr.make(Op.ADD, F64, (a, b))


def sub(a: Expr, b: Expr) -> Expr:
  if a.op is Op.CONST and b.op is Op.CONST: return c(a.arg - b.arg)
  if _k(b, 0.0): return a
  if a is b: return c(0.0)
  return Expr.make(Op.SUB, F64, (a, b))


def mul(a: Expr, b: Expr) -> Expr:
  if a.op is Op.CONST and b.op is Op.CONST: return c(a.arg * b.arg)
  if _k(a, 1.0): return b
  if _k(b, 1.0): return a
  if _k(a, 0.0) or _k(b, 0.0): return c(0.0)     # the operands are finite by construction
  return Expr.make(Op.MUL, F64, (a, b))


def div(a: Expr, b: Expr) -> Expr:
  """Plain a / b: only for denominators that are positive by construction (sqrt(x^2 + h^2), constants)."""
  if b.op is Op.CONST:
    if b.arg == 0.0: raise ExprError(f"division by the constant 0 in {a} / {b}")
    return mul(a, c(1.0 / b.arg))
  if a.op is Op.CONST and a.arg == 0.0: return a
  return Expr.make(Op.DIV, F64, (a, b))


def neg(a: Expr) -> Expr:
  if a.op is Op.CONST: return c(-a.arg)
  if a.op is Op.NEG: return a.src[0]
  return Expr.make(Op.NEG, F64, (a,))


_CALL_FOLD = {"exp": math.exp, "log": math.log, "sqrt": math.sqrt}


def fcall(name: str, a: Expr) -> Expr:
  if a.op is Op.CONST: return c(_CALL_FOLD[name](a.arg))
  return Expr.make(Op.CALL, F64, (a,), name)


def sqrt(a: Expr) -> Expr: return fcall("sqrt", a)
def exp(a: Expr) -> Expr: return fcall("exp", a)


def _hard_clamp01(x: Expr) -> Expr:
  if x.op is Op.CONST: return c(min(max(x.arg, 0.0), 1.0))
  return Expr.make(Op.MIN, F64, (Expr.make(Op.MAX, F64, (x, c(0.0))), c(1.0)))


# ---------------------------------------------------------------------------------------------
# the smooth primitives (closed forms of the kernel convolutions; module docstring)

def step_s(x: Expr, h: float = 1.0) -> Expr:
  """step(x) convolved with k_h: ``x / (2 sqrt(x^2 + h^2)) + 1/2`` (Felix's algebraic "sigmoid")."""
  return add(div(x, mul(c(2.0), sqrt(add(mul(x, x), c(h * h))))), c(0.5))


def step_compact(x: Expr, w: float = 1.0) -> Expr:
  """A C^2 step that is exactly 0 for x <= -w/2 and 1 for x >= w/2 (quintic smoothstep)."""
  u = _hard_clamp01(add(mul(x, c(1.0 / w)), c(0.5)))
  # 6u^5 - 15u^4 + 10u^3 = u^3 (u (6u - 15) + 10)
  return mul(mul(mul(u, u), u), add(mul(u, sub(mul(c(6.0), u), c(15.0))), c(10.0)))


def hump_s(x: Expr, h: float = 1.0) -> Expr:
  """Felix's ``hump``: ``h / sqrt(x^2 + h^2)``, 1 at 0, the smoothed indicator of ``x == 0`` for reals."""
  return div(c(h), sqrt(add(mul(x, x), c(h * h))))


def max_s(a: Expr, b: Expr, h: float = 1.0) -> Expr:
  """max(a, b) convolved with k_h (in a - b): ``(a + b + sqrt((a-b)^2 + h^2)) / 2``."""
  d = sub(a, b)
  return mul(add(add(a, b), sqrt(add(mul(d, d), c(h * h)))), c(0.5))


def min_s(a: Expr, b: Expr, h: float = 1.0) -> Expr:
  d = sub(a, b)
  return mul(sub(add(a, b), sqrt(add(mul(d, d), c(h * h)))), c(0.5))


def abs_tie(d: Expr, h: float) -> Expr:
  """``d^2 / sqrt(d^2 + h^2)``: |d| smoothed, exact at 0, within ``h^2 / (2|d|)`` elsewhere."""
  dd = mul(d, d)
  return div(dd, sqrt(add(dd, c(h * h))))


def pos(x: Expr, eps: float) -> Expr:
  """max(x, eps) with a C^2 corner over [eps/2, 3 eps/2] (a compact-step blend, exact outside it and
  stable in float32): the guard of log and sqrt, whose arguments in features are >= 1."""
  if x.op is Op.CONST: return c(max(x.arg, eps))
  s = step_compact(sub(c(eps), x), eps)
  return add(mul(s, c(eps)), mul(sub(c(1.0), s), x))


def safe_div(a: Expr, b: Expr, eps: float) -> Expr:
  """``a * b / (b^2 + eps^2)``: a / b within relative ``eps^2 / b^2``, finite (and sign-true) for every b."""
  if b.op is Op.CONST: return div(a, b)
  return div(mul(a, b), add(mul(b, b), c(eps * eps)))


# ---------------------------------------------------------------------------------------------
# the rule engine

Rule = Callable[["Smoother", Expr, tuple], Expr]
RULES: dict[Op, Rule] = {}
CALL_RULES: dict[str, Callable[[Smoother, Expr], Expr]] = {}


def register_rule(op: Op, fn: Rule) -> None:
  """Make ``fn(smoother, node, smoothed_children) -> Expr`` the rule for ``op`` (new Smoothers see it)."""
  RULES[op] = fn


def rule(*ops: Op):
  def deco(fn: Rule) -> Rule:
    for op in ops: register_rule(op, fn)
    return fn
  return deco


class Smoother:
  """Rewrite Exprs into smooth float64 Exprs, one memo keyed by input node for all of them (feature rows
  share sub-DAGs).

  ``kernel="compact"`` (default) smooths comparisons with the C^2 step of compact support: on integer
  operands over [-0.45, 0.45] around the half-integer, so exact at every integer point; on other floats
  over ``[0, float_width]`` on the side that keeps ties exact (wrong only when ``0 < |a-b| < float_width``).
  ``kernel="phi"`` uses the paper's kernel: integer operands at width ``int_width`` around the
  half-integer (within ``int_width^2`` of 0/1 at integer points), floats Felix's plain difference at
  width ``float_width``. ``eps`` guards division, log and sqrt. ``assume_sizes`` lets the exact
  min/max and floor-division rewrites assume every variable and divisor is >= 1 (tile sizes, thread
  counts, vector widths: true of sketch variables); turn it off for other formulas."""

  def __init__(self, kernel: str = "compact", int_width: float = 0.1, float_width: float | None = None,
               eps: float = 1e-6, rules: dict[Op, Rule] | None = None, assume_sizes: bool = True):
    if kernel not in ("compact", "phi"): raise ExprError(f"kernel must be 'compact' or 'phi', got {kernel!r}")
    float_width = (0.01 if kernel == "compact" else 1.0) if float_width is None else float_width
    self.kernel, self.int_width, self.float_width, self.eps = kernel, int_width, float_width, eps
    self.compact = kernel == "compact"
    self.rules = dict(RULES) | dict(rules or {})
    self.memo: dict[Expr, Expr] = {}
    self.integral: dict[Expr, bool] = {}    # of the input nodes: integer-valued at every integer point
    self.sentinel: dict[Expr, bool] = {}    # of the input nodes: may evaluate to a sentinel constant
    self._hard: Smoother | None = None
    self.polys = Polys(enabled=assume_sizes)

  def __call__(self, e: Expr) -> Expr:
    memo = self.memo
    for n in walk(e, memo):
      self.integral[n] = _integral(n, self.integral)
      self.sentinel[n] = (abs(float(n.arg)) >= SENTINEL if n.op is Op.CONST and n.dtype != "bool"
                          else n.dtype != "bool" and any(self.sentinel[s] for s in n.src))
      fn = self.rules.get(n.op)
      if fn is None: raise ExprError(f"no smoothing rule for {n.op.name} (in {n})")
      memo[n] = fn(self, n, tuple(memo[s] for s in n.src))
    return memo[e]

  def many(self, exprs: Iterable[Expr]) -> list[Expr]:
    return [self(e) for e in exprs]

  def is_int(self, n: Expr) -> bool:
    """Whether input node ``n`` (already visited) is integer-valued."""
    return self.integral[n]

  def hard_condition(self, cond: Expr) -> Expr:
    """``cond`` smoothed with compact steps (exactly 0/1 wherever integer operands are integers)."""
    if self.compact: return self(cond)
    if self._hard is None:
      self._hard = Smoother("compact", self.int_width, self.float_width, self.eps, self.rules, self.polys.enabled)
    return self._hard(cond)

  def step(self, x: Expr, integral: bool) -> Expr:
    """Smoothed ``x > 0`` (integer callers have shifted x to the half-integer; compact float callers by
    ``float_width / 2`` to the side that keeps ties exact)."""
    w = INT_STEP_WIDTH if integral else self.float_width
    if self.compact: return step_compact(x, w)
    return step_s(x, self.int_width if integral else self.float_width)


def _integral(n: Expr, integral: dict[Expr, bool]) -> bool:
  if n.dtype in INT_DTYPES or n.dtype == "bool": return True
  op = n.op
  if op is Op.CONST: return float(n.arg).is_integer()
  if op in (Op.ADD, Op.SUB, Op.MUL, Op.NEG, Op.MIN, Op.MAX, Op.CAST): return all(integral[s] for s in n.src)
  if op is Op.SELECT: return integral[n.src[1]] and integral[n.src[2]]
  if op is Op.CALL: return n.arg in ("floor", "ceil", "round") or (n.arg == "abs" and integral[n.src[0]])
  return False


@rule(Op.CONST)
def _const(sm: Smoother, n: Expr, kids: tuple) -> Expr:
  return c(float(n.arg))


@rule(Op.VAR)
def _var(sm: Smoother, n: Expr, kids: tuple) -> Expr:
  return var(n.arg, F64)


@rule(Op.ADD)
def _add(sm, n, k): return add(*k)
@rule(Op.SUB)
def _sub(sm, n, k): return sub(*k)
@rule(Op.MUL)
def _mul(sm, n, k): return mul(*k)
@rule(Op.NEG)
def _neg(sm, n, k): return neg(k[0])
@rule(Op.DIV)
def _div(sm, n, k): return safe_div(k[0], k[1], sm.eps)


@rule(Op.CAST)
def _cast(sm: Smoother, n: Expr, kids: tuple) -> Expr:
  """int/bool -> float: identity (bools are already 0..1). float -> int truncates: dropped (error < 1)."""
  return kids[0]


@rule(Op.MIN, Op.MAX)
def _minmax(sm: Smoother, n: Expr, kids: tuple) -> Expr:
  """Decided exactly when one side provably dominates. Compact kernel (and any sentinel operand): the
  blend ``s*b + (1-s)*a`` with s the smoothed ``a > b`` (min; max: ``b > a``): exact at integer points
  and stable next to a 2^40 sentinel in float32. Phi: ``(a + b -+ |a - b|)/2`` with the tie-exact |.|
  on integers, the convolution ``max_s`` on floats."""
  a, b = kids
  if a.op is Op.CONST and b.op is Op.CONST: return c(min(a.arg, b.arg) if n.op is Op.MIN else max(a.arg, b.arg))
  if a is b: return a
  integral = all(sm.is_int(s) for s in n.src)
  if integral:
    pa, pb = sm.polys.poly(n.src[0]), sm.polys.poly(n.src[1])
    if sm.polys.dominates(pa, pb): return a if n.op is Op.MAX else b
    if sm.polys.dominates(pb, pa): return b if n.op is Op.MAX else a
  if sm.compact or sm.sentinel[n.src[0]] or sm.sentinel[n.src[1]]:
    d = sub(a, b) if n.op is Op.MIN else sub(b, a)
    s = step_compact(add(d, c(-0.5)), INT_STEP_WIDTH) if integral else step_compact(d, sm.float_width)
    return add(mul(s, b), mul(sub(c(1.0), s), a))
  if not integral: return (min_s if n.op is Op.MIN else max_s)(a, b, sm.float_width)
  m, half = mul(abs_tie(sub(a, b), sm.int_width), c(0.5)), mul(add(a, b), c(0.5))
  return sub(half, m) if n.op is Op.MIN else add(half, m)


@rule(Op.LT, Op.LE, Op.GT, Op.GE)
def _order(sm: Smoother, n: Expr, kids: tuple) -> Expr:
  """a < b is b - a > 0: on integers b - a - 1/2 > 0 (a <= b: b - a + 1/2 > 0), so integer points sit
  1/2 away from the jump; compact floats shift by float_width / 2 the same way (ties exact)."""
  a, b = kids
  d = sub(b, a) if n.op in (Op.LT, Op.LE) else sub(a, b)
  strict = n.op in (Op.LT, Op.GT)
  if d.op is Op.CONST: return c(float(d.arg > 0 if strict else d.arg >= 0))
  integral = all(sm.is_int(s) for s in n.src)
  shift = 0.5 if integral else sm.float_width / 2 if sm.compact else 0.0
  return sm.step(add(d, c(-shift if strict else shift)), integral)


@rule(Op.EQ, Op.NE)
def _equal(sm: Smoother, n: Expr, kids: tuple) -> Expr:
  """Integers: the box |a - b| < 1/2 smoothed (a difference of steps); floats: ``le * ge`` (compact),
  Felix's hump (phi)."""
  a, b = kids
  d = sub(a, b)
  if d.op is Op.CONST: r = c(float(d.arg == 0))
  elif all(sm.is_int(s) for s in n.src): r = sub(sm.step(add(d, c(0.5)), True), sm.step(sub(d, c(0.5)), True))
  elif sm.compact:
    h = sm.float_width / 2
    r = mul(sm.step(add(d, c(h)), False), sm.step(sub(c(h), d), False))
  else: r = hump_s(d, sm.float_width)
  return sub(c(1.0), r) if n.op is Op.NE else r


@rule(Op.AND)
def _and(sm, n, k): return mul(*k)
@rule(Op.OR)
def _or(sm, n, k): return sub(add(k[0], k[1]), mul(k[0], k[1]))
@rule(Op.NOT)
def _not(sm, n, k): return sub(c(1.0), k[0])


@rule(Op.SELECT)
def _select(sm: Smoother, n: Expr, kids: tuple) -> Expr:
  """``c*t + (1-c)*f`` (Felix's ``c*(t - f) + f``, written so that c in {0, 1} gives t or f exactly even
  next to a 2^40 sentinel); a condition that gates a sentinel gets compact steps (exactly 0/1)."""
  cond, t, f = kids
  if t is f: return t
  if not sm.compact and (sm.sentinel[n.src[1]] or sm.sentinel[n.src[2]]): cond = sm.hard_condition(n.src[0])
  if cond.op is Op.CONST: return t if cond.arg >= 0.5 else f
  return add(mul(cond, t), mul(sub(c(1.0), cond), f))


@rule(Op.FLOORDIV)
def _floordiv(sm: Smoother, n: Expr, kids: tuple) -> Expr:
  """Normalized exactly first (``Polys.floordiv``), else ``_floor_quotient``."""
  e = sm.polys.floordiv(n)
  return sm(e) if e is not None else _floor_quotient(sm, kids[0], kids[1])


@rule(Op.FLOORMOD)
def _floormod(sm: Smoother, n: Expr, kids: tuple) -> Expr:
  """``a - b * floor(a / b)`` after exact normalization (Felix drops it to 0: wrong whenever 0 < a < b)."""
  e = sm.polys.floormod(n)
  if e is not None: return sm(e)
  return sub(kids[0], mul(kids[1], _floor_quotient(sm, kids[0], kids[1])))


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


FLOOR_STEPS = 3    # floor(a / b) is a staircase of compact steps up to a < (FLOOR_STEPS + 1) b


def _floor_quotient(sm: Smoother, a: Expr, b: Expr) -> Expr:
  """floor(a / b) for b >= 1 that no exact rewrite reached. For 0 <= a < 4b the sum of steps
  ``[a >= k b]``, k = 1..3 (exact at integers under the compact kernel); above, ``(a + 1)/b - 1``: exact
  when b | a + 1, the most frequent remainder in these formulas (ceil divisions ``(S + t - 1) // t``
  with t | S), else off by less than 1. For -b <= a < 0: -1."""
  if a.op is Op.CONST and b.op is Op.CONST and b.arg != 0: return c(float(a.arg // b.arg))
  if _k(a, 0.0) or _k(b, 1.0): return a
  stair = c(0.0)
  for k in range(1, FLOOR_STEPS + 1): stair = add(stair, sm.step(add(sub(a, mul(b, c(k))), c(0.5)), True))
  tail = sub(safe_div(add(a, c(1.0)), b, sm.eps), c(float(FLOOR_STEPS + 1)))
  up = add(stair, mul(sm.step(add(sub(a, mul(b, c(FLOOR_STEPS + 1))), c(0.5)), True), tail))
  if a.op is Op.CONST and a.arg >= 0: return up
  far = sm.step(sub(c(-0.5), add(a, b)), True)                 # a < -b: a / b
  return add(up, mul(sm.step(sub(c(-0.5), a), True), sub(mul(far, add(safe_div(a, b, sm.eps), c(1.0))), c(1.0))))


@rule(Op.CALL)
def _call(sm: Smoother, n: Expr, kids: tuple) -> Expr:
  fn = CALL_RULES.get(n.arg)
  if fn is None: raise ExprError(f"no smoothing rule for intrinsic {n.arg!r} (in {n})")
  return fn(sm, *kids)


def _log(sm: Smoother, x: Expr) -> Expr: return fcall("log", pos(x, sm.eps))


CALL_RULES.update({
  "exp": lambda sm, x: exp(x),
  "log": _log,
  "log2": lambda sm, x: mul(_log(sm, x), c(1.0 / LN2)),
  "exp2": lambda sm, x: exp(mul(x, c(LN2))),
  "sqrt": lambda sm, x: sqrt(pos(x, sm.eps)),
  "rsqrt": lambda sm, x: div(c(1.0), sqrt(pos(x, sm.eps))),
  "pow": lambda sm, x, y: exp(mul(y, _log(sm, x))),
  "abs": lambda sm, x: abs_tie(x, sm.float_width),
  "sigmoid": lambda sm, x: div(c(1.0), add(c(1.0), exp(neg(x)))),
  "tanh": lambda sm, x: sub(div(c(2.0), add(c(1.0), exp(mul(c(-2.0), x)))), c(1.0)),
})


def smooth(e: Expr, **kw) -> Expr:
  """``e`` rewritten into a smooth float64 Expr (one expression; use a ``Smoother`` for many)."""
  return Smoother(**kw)(e)


def is_smooth(e: Expr) -> bool:
  """Whether ``e`` is float64 and uses only differentiable ops (MIN/MAX only as the compact step's clamp)."""
  for n in walk(e):
    if n.dtype != F64: return False
    if n.op is Op.CALL and n.arg not in SMOOTH_CALLS: return False
    if n.op in (Op.MIN, Op.MAX):
      if not (n.src[1].op is Op.CONST and n.src[1].arg == (1.0 if n.op is Op.MIN else 0.0)): return False
    elif n.op not in SMOOTH_OPS: return False
  return True


# ---------------------------------------------------------------------------------------------
# Felix's change of variables and feature transform

class _NotSmooth(Exception):
  pass


def exp_substitute(e: Expr, names: Iterable[str], memo: dict[Expr, Expr] | None = None) -> Expr:
  """``e`` with each size variable x in ``names`` replaced by ``exp(y_x)`` (Felix's x = e^y; the new
  variables keep the names, float64). ``e`` is smoothed first unless it already is. Pass one ``memo``
  dict for many expressions that share sub-DAGs (else each gets its own copy of the shared parts)."""
  names = set(names)
  memo = {} if memo is None else memo
  try: return _exp_sub(e, names, memo)
  except _NotSmooth: return _exp_sub(smooth(e), names, memo)


def _exp_sub(e: Expr, names: set[str], memo: dict[Expr, Expr]) -> Expr:
  for n in walk(e, memo):
    if n.dtype != F64 or (n.op not in SMOOTH_OPS and n.op not in (Op.MIN, Op.MAX)) or \
       (n.op is Op.CALL and n.arg not in SMOOTH_CALLS):
      raise _NotSmooth
    if n.op is Op.VAR: memo[n] = exp(var(n.arg, F64)) if n.arg in names else n
    elif n.src: memo[n] = n.replace(src=tuple(memo[s] for s in n.src))
    else: memo[n] = n
  return memo[e]


def log_feature(e: Expr, h: float = 0.1) -> Expr:
  """Ansor's ``slog(x) = sign(x) log2(|x| + 1)``, smooth: ``x/sqrt(x^2+h^2) * log2(x^2/sqrt(x^2+h^2) + 1)``.

  Felix logs its features so products of variables become sums (linear in y). minicomp's rows are
  already slog-ed where that matters (counts, bytes, extents, reuse); one-hots and the curve are not
  and should not be. Use this on raw quantities (a formula of your own); exact at 0, within
  ``h^2 / min(|x|, x^2)`` of slog elsewhere."""
  if not is_smooth(e): e = smooth(e)
  r = sqrt(add(mul(e, e), c(h * h)))
  return mul(div(e, r), mul(fcall("log", add(div(mul(e, e), r), c(1.0))), c(1.0 / LN2)))


# ---------------------------------------------------------------------------------------------
# the JAX evaluator: an interpreter of the DAG, one lax.scan step per chunk of a depth level

# opcode -> (numpy/jax function of (xp, a, b, c, mask)); inputs of the partial ops are masked so that
# lanes running another op stay finite (a NaN there would leak into the gradient through `where`)
def _safe(xp, x, m, fill): return xp.where(m, x, fill)


_OPS: dict[tuple, Callable] = {
  ("CAST", None): lambda xp, a, b, c, m: a,
  ("CAST", "int"): lambda xp, a, b, c, m: xp.trunc(a),
  ("CAST", "bool"): lambda xp, a, b, c, m: (a != 0).astype(a.dtype),
  ("ADD", None): lambda xp, a, b, c, m: a + b,
  ("SUB", None): lambda xp, a, b, c, m: a - b,
  ("MUL", None): lambda xp, a, b, c, m: a * b,
  ("DIV", None): lambda xp, a, b, c, m: a / _safe(xp, b, m, 1.0),
  ("NEG", None): lambda xp, a, b, c, m: -a,
  ("MIN", None): lambda xp, a, b, c, m: xp.minimum(a, b),
  ("MAX", None): lambda xp, a, b, c, m: xp.maximum(a, b),
  ("FLOORDIV", None): lambda xp, a, b, c, m: xp.floor_divide(a, _safe(xp, b, m, 1.0)),
  ("FLOORMOD", None): lambda xp, a, b, c, m: xp.mod(a, _safe(xp, b, m, 1.0)),
  ("LT", None): lambda xp, a, b, c, m: (a < b).astype(a.dtype),
  ("LE", None): lambda xp, a, b, c, m: (a <= b).astype(a.dtype),
  ("GT", None): lambda xp, a, b, c, m: (a > b).astype(a.dtype),
  ("GE", None): lambda xp, a, b, c, m: (a >= b).astype(a.dtype),
  ("EQ", None): lambda xp, a, b, c, m: (a == b).astype(a.dtype),
  ("NE", None): lambda xp, a, b, c, m: (a != b).astype(a.dtype),
  ("AND", None): lambda xp, a, b, c, m: ((a != 0) & (b != 0)).astype(a.dtype),
  ("OR", None): lambda xp, a, b, c, m: ((a != 0) | (b != 0)).astype(a.dtype),
  ("NOT", None): lambda xp, a, b, c, m: (a == 0).astype(a.dtype),
  ("SELECT", None): lambda xp, a, b, c, m: xp.where(a != 0, b, c),
  ("CALL", "exp"): lambda xp, a, b, c, m: xp.exp(_safe(xp, a, m, 0.0)),
  ("CALL", "exp2"): lambda xp, a, b, c, m: xp.exp2(_safe(xp, a, m, 0.0)),
  ("CALL", "log"): lambda xp, a, b, c, m: xp.log(_safe(xp, a, m, 1.0)),
  ("CALL", "log2"): lambda xp, a, b, c, m: xp.log2(_safe(xp, a, m, 1.0)),
  ("CALL", "sqrt"): lambda xp, a, b, c, m: xp.sqrt(_safe(xp, a, m, 1.0)),
  ("CALL", "rsqrt"): lambda xp, a, b, c, m: 1.0 / xp.sqrt(_safe(xp, a, m, 1.0)),
  ("CALL", "pow"): lambda xp, a, b, c, m: xp.power(_safe(xp, a, m, 1.0), _safe(xp, b, m, 1.0)),
  ("CALL", "abs"): lambda xp, a, b, c, m: xp.abs(a),
  ("CALL", "floor"): lambda xp, a, b, c, m: xp.floor(a),
  ("CALL", "ceil"): lambda xp, a, b, c, m: xp.ceil(a),
  ("CALL", "round"): lambda xp, a, b, c, m: xp.round(a),
  ("CALL", "tanh"): lambda xp, a, b, c, m: xp.tanh(a),
  ("CALL", "sigmoid"): lambda xp, a, b, c, m: 1.0 / (1.0 + xp.exp(-a)),
}


def _opkey(n: Expr) -> tuple:
  if n.op is Op.CALL: key = ("CALL", n.arg)
  elif n.op is Op.CAST: key = ("CAST", "int" if n.dtype in INT_DTYPES and n.src[0].dtype in FLOAT_DTYPES else
                               "bool" if n.dtype == "bool" else None)
  else: key = (n.op.name, None)
  if key not in _OPS: raise ExprError(f"compile_formulas cannot evaluate {n.op.name} {n.arg or ''} (in {n})")
  return key


class Tape:
  """The DAG of many Exprs as an interpreter program. Value slots: constants, variables, then chunks of
  ``width`` nodes of one depth level each (nodes of a level depend only on shallower ones, so a chunk
  reads the buffer and writes its own slice). Each chunk is one step of a ``lax.scan`` whose body
  runs every op kind present on all lanes and keeps each lane's own: tracing and compiling cost the
  same for ten nodes or a million; a step costs O(width x kinds)."""

  def __init__(self, exprs: list[Expr], names: list[str], width: int = 256):
    pos = {n: i for i, n in enumerate(names)}
    order: list[Expr] = []
    depth: dict[Expr, int] = {}
    for e in exprs:
      for n in walk(e, depth):
        if n.op is Op.VAR and n.arg not in pos: raise ExprError(f"variable {n.arg!r} is not in names")
        depth[n] = 0 if not n.src else 1 + max(depth[s] for s in n.src)
        order.append(n)
    index: dict[Expr, int] = {}
    consts = [n for n in order if n.op is Op.CONST]
    vars_ = [n for n in order if n.op is Op.VAR]
    for n in consts + vars_: index[n] = len(index)
    self.consts = np.array([float(n.arg) for n in consts], np.float64)
    self.var_pos = np.array([pos[n.arg] for n in vars_], np.int32)
    self.n_fixed = len(index)
    levels: dict[int, list[Expr]] = defaultdict(list)
    for n in order:
      if n.src: levels[depth[n]].append(n)
    self.kinds = sorted({_opkey(n) for n in order if n.src}, key=str)
    code = {k: i for i, k in enumerate(self.kinds)}
    chunks = [lv[i:i + width] for d in sorted(levels) for lv in [levels[d]] for i in range(0, len(lv), width)]
    self.width = width = min(width, max((len(ch) for ch in chunks), default=1))
    K = len(chunks)
    self.op = np.zeros((K, width), np.int32)
    self.args = np.zeros((K, 3, width), np.int32)
    self.start = (self.n_fixed + width * np.arange(K)).astype(np.int32)
    for k, ch in enumerate(chunks):
      for j, n in enumerate(ch): index[n] = int(self.start[k]) + j
    for k, ch in enumerate(chunks):
      for j, n in enumerate(ch):
        self.op[k, j] = code[_opkey(n)]
        for i, s in enumerate(n.src): self.args[k, i, j] = index[s]
    self.size = self.n_fixed + width * K
    self.out = np.array([index[e] for e in exprs], np.int32)
    self.n_nodes, self.depth, self.n_steps = len(order), max(depth.values(), default=0), K

  def run(self, xp, y):
    """The values of the Exprs at ``y`` (xp: numpy in float64, or jax.numpy in its default float type)."""
    dt = np.float64 if xp is np else xp.result_type(float)
    y = xp.asarray(y, dt)
    buf = xp.concatenate([xp.asarray(self.consts, dt), y[self.var_pos], xp.zeros(self.size - self.n_fixed, dt)])

    def step(buf, xs):
      op, args, start = xs
      return self._chunk(xp, op, buf[args[0]], buf[args[1]], buf[args[2]]), start

    if xp is np:
      with np.errstate(all="ignore"):
        for k in range(self.n_steps):
          r, s = step(buf, (self.op[k], self.args[k], self.start[k]))
          buf[s:s + self.width] = r
      return buf[self.out]
    import jax

    def body(buf, xs):
      r, s = step(buf, xs)
      return jax.lax.dynamic_update_slice(buf, r, (s,)), None
    buf, _ = jax.lax.scan(body, buf, (self.op, self.args, self.start))
    return buf[self.out]

  def _chunk(self, xp, op, a, b, c):
    """One chunk's results: every op kind present on all lanes, each lane keeping its own op's. ``op``
    is ``[width]``; operands are ``[width]`` or ``[width, batch]`` (``run_lanes``)."""
    r = xp.zeros_like(a)
    for i, k in enumerate(self.kinds):
      m = op == i
      if a.ndim == 2: m = m[:, None]
      r = xp.where(m, _OPS[k](xp, a, b, c, m), r)
    return r

  def run_lanes(self, Y):
    """``run`` for a batch in jax: ``Y[B, n_vars] -> [B, n_out]``, with the value buffer ``[slots, B]``
    so every gather reads whole rows (``jax.vmap`` of ``run`` gathers across the batch: ~3x slower)."""
    import jax
    import jax.numpy as jnp
    B, dt = Y.shape[0], Y.dtype
    consts = jnp.broadcast_to(jnp.asarray(self.consts, dt)[:, None], (len(self.consts), B))
    buf = jnp.concatenate([consts, Y.T[self.var_pos], jnp.zeros((self.size - self.n_fixed, B), dt)])

    def body(buf, xs):
      op, args, start = xs
      r = self._chunk(jnp, op, buf[args[0]], buf[args[1]], buf[args[2]])
      return jax.lax.dynamic_update_slice(buf, r, (start, 0)), None
    buf, _ = jax.lax.scan(body, buf, (self.op, self.args, self.start))
    return buf[self.out].T


def compile_formulas(exprs: list[Expr], names: list[str], width: int = 256) -> Callable:
  """A pure JAX function ``f(y[len(names)]) -> values[len(exprs)]`` of the Exprs (smooth or not; the
  variables take the values of ``y`` by position), for ``jax.jit``, ``jax.vmap`` and ``jax.grad``.

  It computes in jax's default float type: float32, or float64 under ``jax_enable_x64``. The smooth
  rules keep float32 usable (selects and compact min/max are blends that give either side exactly, so
  2^40 sentinels do not swamp their neighbours). Integer ops use floor semantics on the float values,
  so exact (unsmoothed) formulas evaluate too, without useful gradients. ``f.tape.run(np, y)`` is the
  float64 numpy twin."""
  tape = Tape(list(exprs), list(names), width)

  def f(y):
    import jax.numpy as jnp
    return tape.run(jnp, y)
  f.tape = tape
  return f


def compile_features(rows: list[list[Expr]], names: list[str], **smoother_kw) -> Callable:
  """Felix's feature function of a sketch: ``f(y[len(names)]) -> (len(rows), len(rows[0]))`` with the
  rows smoothed (``Smoother(**smoother_kw)``, one memo), x = exp(y) substituted, and compiled."""
  sm = Smoother(**smoother_kw)
  memo: dict[Expr, Expr] = {}
  flat = [exp_substitute(sm(e), names, memo) for row in rows for e in row]
  g = compile_formulas(flat, names)
  shape = (len(rows), len(rows[0]) if rows else 0)

  def f(y):
    return g(y).reshape(shape)
  f.tape, f.smoother = g.tape, sm
  return f


__all__ = ["CALL_RULES", "RULES", "SENTINEL", "Polys", "Smoother", "Tape", "abs_tie", "compile_features",
           "compile_formulas", "exp_substitute", "hump_s", "is_smooth", "log_feature", "max_s", "min_s", "pos",
           "register_rule", "safe_div", "smooth", "step_compact", "step_s"]
