"""Felix's differentiable feature formulas: the smoothing rules
(``docs/search.md``, "Smoothing (Felix)").

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

Rules (``RULES``, one function per Op, a fold table of ``minicomp.ir.rewrite``: each sees the input node
and its smoothed children; ``register_smoothing_rule`` replaces or adds one):
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

The exact rewrites' polynomial algebra is :mod:`minicomp.ir.poly`. Felix's change of variables ``x = exp(y)``
and the compiled feature function of a sketch are :mod:`minicomp.search.strategies.felix.log_space`.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from functools import partial

from minicomp.errors import ExprError
from minicomp.ir import arith
from minicomp.ir.arith import call as fcall
from minicomp.ir.arith import exp, neg, sqrt
from minicomp.ir.arith import fl as c
from minicomp.ir.arith import is_const as _k
from minicomp.ir.expr import Expr, var, walk
from minicomp.ir.ops import INT_DTYPES, Op
from minicomp.ir.poly import Polys
from minicomp.ir.rewrite import fold

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
# float64 Expr kit: minicomp.ir.arith's builders with ``finite=True`` (they also fold x+0, x*0, x-x and
# divide by a constant as a multiplication by its reciprocal, so rule output stays small)

add, sub, mul, div = (partial(f, finite=True) for f in (arith.add, arith.sub, arith.mul, arith.div))


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


def register_smoothing_rule(op: Op, fn: Rule) -> None:
  """Make ``fn(smoother, node, smoothed_children) -> Expr`` the rule for ``op`` (new Smoothers see it)."""
  RULES[op] = fn


def rule(*ops: Op):
  def deco(fn: Rule) -> Rule:
    for op in ops: register_smoothing_rule(op, fn)
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
    self._table = {op: Smoother._visit for op in self.rules}   # fold: ctx = this smoother
    self.memo: dict[Expr, Expr] = {}
    self.integral: dict[Expr, bool] = {}    # of the input nodes: integer-valued at every integer point
    self.sentinel: dict[Expr, bool] = {}    # of the input nodes: may evaluate to a sentinel constant
    self._hard: Smoother | None = None
    self.polys = Polys(enabled=assume_sizes)

  def __call__(self, e: Expr) -> Expr:
    return fold(e, self._table, self, self.memo, what="smoothing")

  def _visit(self, n: Expr, kids: tuple) -> Expr:
    """Record what the rules ask of input node ``n`` (integral, may be a sentinel), then apply its rule."""
    self.integral[n] = _integral(n, self.integral)
    self.sentinel[n] = (abs(float(n.arg)) >= SENTINEL if n.op is Op.CONST and n.dtype != "bool"
                        else n.dtype != "bool" and any(self.sentinel[s] for s in n.src))
    return self.rules[n.op](self, n, kids)

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


__all__ = ["CALL_RULES", "RULES", "SENTINEL", "Smoother", "abs_tie", "hump_s", "is_smooth", "max_s", "min_s", "pos",
           "register_smoothing_rule", "safe_div", "smooth", "step_compact", "step_s"]
