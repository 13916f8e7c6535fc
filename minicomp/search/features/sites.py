"""The store sites the features describe: each store's loops (launch dimensions first), its accesses, and
the index questions asked of them (see ``docs/features.md``, "Rows and loops").

A site is one Store (or a cross-thread reduction's final store) with the loops around it, outer to inner:
one *launch loop* per bound launch dimension (its extent narrowed by guards on it, read by their meaning
through ``_linear_in``), then the enclosing For loops. Indices are asked only semantic questions, answered
with int Exprs (constants on a concrete program): the value at the origin, at a unit step of one loop,
and at the corner where loops l.. are at their maximum. Concrete lowering simplifies indices further
than symbolic lowering, so the form of an index is never looked at, only its values.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from minicomp.ir.arith import add, fl, fmax, fmin, gt, imin, make, num, sub
from minicomp.ir.evaluate import evaluate
from minicomp.ir.expr import Expr, cast, const, free_vars, var, walk
from minicomp.ir.loop import Buffer, CrossThreadReduce, For, If, LoopKernel, Mma, Store, walk_scoped
from minicomp.ir.ops import INT_DTYPES, Op
from minicomp.ir.rewrite import fold, map_loads, substitute
from minicomp.ir.simplify import simplify
from minicomp.ir.state import BLOCK_TAGS, THREAD_TAGS

_FAKE_ORDER = ("blockIdx.z", "blockIdx.y", "blockIdx.x", "threadIdx.z", "threadIdx.y", "threadIdx.x")
_COMBINE = {"sum": Op.ADD, "prod": Op.MUL, "max": Op.MAX, "min": Op.MIN}


@dataclass
class SiteLoop:
  """A loop enclosing a store site, or a launch dimension (``kind == "launch"``)."""
  key: object        # identity shared by every store under the loop
  var: str           # loop variable ("threadIdx.x" for a launch dimension)
  ext: Expr          # int extent
  kind: str          # serial | unroll | vectorize | vthread | launch


@dataclass
class Site:
  """One Store (or a cross-thread reduction's final store) and what the features need of it."""
  kernel: LoopKernel
  loops: list[SiteLoop]
  buffer: Buffer
  value: Expr
  acc: dict[str, tuple[Buffer, str, list[Expr]]] = field(default_factory=dict)   # name -> (buffer, type, indices)
  regions: dict[str, list[Expr]] = field(default_factory=dict)   # name -> elements touched as loops l.. sweep
  origin: dict[str, list[Expr]] = field(default_factory=dict)    # name -> each index at all loops 0
  fvs: dict[str, list[set[str]]] = field(default_factory=dict)   # name -> free variables of each index
  mma_loops: int | None = None     # inside a tensor-core Mma: how many of ``loops`` enclose the Mma (its issues)


def nontrivial(lp: SiteLoop) -> Expr:
  """``extent > 1``: loops of extent 1 vanish from concrete programs, so every loop-level rule skips them."""
  return gt(lp.ext, 1.0)


def _conjuncts(c: Expr) -> list[Expr]:
  return _conjuncts(c.src[0]) + _conjuncts(c.src[1]) if c.op is Op.AND else [c]


def _positions(e: Expr) -> Expr:
  """``e`` with every loaded value replaced by the position it is loaded from (``idx[k]`` -> ``k``).

  A gather's index reads a tensor (``table[idx[i] * 32 + c]``); its steps and regions depend on data
  the program does not hold, and ``evaluate`` cannot read it. Features read every index tensor as if
  it held its own positions (distinct, in order: each token its own row), a fixed rule that keeps
  every index question a function of the loop variables, so concrete and symbolic programs give the
  same numbers. The static model instead lets a gather cover its whole buffer (an upper bound)."""
  if not any(n.op is Op.LOAD for n in walk(e)): return e
  return map_loads(e, lambda n: cast(n.src[0], n.dtype))


def _thread_ranges(k: LoopKernel) -> dict[str, Expr]:
  """Extent of each bound loop variable: the launch dimension, or X where a guard ``tag < X`` runs
  the stores that use the variable on fewer threads. Threads past a stage's own extent may still run
  its statements (redundantly) with the variable out of range, where symbolic and concrete indices
  disagree; evaluating the variable as ``min(tag, X - 1)`` keeps both on the range they agree on."""
  tag_of = dict(k.bindings)
  out: dict[str, Expr] = {}

  guards = lambda st, conds: conds + _conjuncts(st.cond) if isinstance(st, If) else conds
  for st, conds in walk_scoped(k.body, [], guards):
    if isinstance(st, (Store, CrossThreadReduce)):
      used = free_vars(st.index) | free_vars(st.value)
      for g in conds:
        if g.op is Op.LT and g.src[0].op is Op.VAR:
          x = _positions(g.src[1])
          for c in used:
            if tag_of.get(c) == g.src[0].arg: out[c] = x if c not in out else imin(out[c], x)
  return out


# ---------------------------------------------------------------------------------------------
# affine forms in a launch variable t: a fold (ctx: t) whose value at each node is a _Lin

_ONE = const(1)


class _Lin(NamedTuple):
  has_t: bool                 # t occurs in the node
  digit: tuple | None         # the node is (t // d) % m, as (d, m); m None: no modulo
  terms: tuple | None         # ((digit | None for the t-free part, coef), ...) summing to the node; None: not affine


_NOT_AFFINE = _Lin(True, None, None)


def _t_free(n: Expr) -> _Lin: return _Lin(False, None, ((None, n),))
def _t_digit(d: tuple) -> _Lin: return _Lin(True, d, ((d, _ONE),))


def _holding_t(rule):
  """``rule`` for the nodes in which t occurs; any other node is a t-free term."""
  return lambda t, n, k: rule(t, n, k) if any(x.has_t for x in k) else _t_free(n)


def _times(terms: tuple, by: Expr) -> tuple: return tuple((d, make(Op.MUL, "int32", c, by)) for d, c in terms)
def _negated(terms: tuple) -> tuple: return tuple((d, make(Op.NEG, "int32", c)) for d, c in terms)


def _lin_var(t, n, k): return _t_digit((_ONE, None)) if n.arg == t else _t_free(n)


def _lin_min(t, n, k):   # min(t, B), the clamp of _thread_ranges, counts as t
  if n.src[0].op is Op.VAR and n.src[0].arg == t and not k[1].has_t: return _t_digit((_ONE, None))
  return _NOT_AFFINE


def _lin_floordiv(t, n, k):   # (t // d) // q = t // (d q)
  d = k[0].digit
  if d is None or d[1] is not None or k[1].has_t: return _NOT_AFFINE
  return _t_digit((make(Op.MUL, "int32", d[0], n.src[1]), None))


def _lin_floormod(t, n, k):
  d = k[0].digit
  if d is None or d[1] is not None or k[1].has_t: return _NOT_AFFINE
  return _t_digit((d[0], n.src[1]))


def _lin_sum(t, n, k):
  a, b = k[0].terms, k[1].terms
  if a is None or b is None: return _NOT_AFFINE
  return _Lin(True, None, a + (_negated(b) if n.op is Op.SUB else b))


def _lin_neg(t, n, k):
  return _NOT_AFFINE if k[0].terms is None else _Lin(True, None, _negated(k[0].terms))


def _lin_mul(t, n, k):
  for i in (0, 1):
    if not k[1 - i].has_t:
      a = k[i].terms
      return _NOT_AFFINE if a is None else _Lin(True, None, _times(a, n.src[1 - i]))
  return _NOT_AFFINE


_AFFINE = {op: _holding_t(lambda t, n, k: _NOT_AFFINE) for op in Op} | {
  Op.VAR: _lin_var, Op.MIN: _holding_t(_lin_min), Op.FLOORDIV: _holding_t(_lin_floordiv),
  Op.FLOORMOD: _holding_t(_lin_floormod), Op.ADD: _holding_t(_lin_sum), Op.SUB: _holding_t(_lin_sum),
  Op.NEG: _holding_t(_lin_neg), Op.MUL: _holding_t(_lin_mul)}


def _linear_in(e: Expr, t: str) -> dict | None:
  """``e`` as ``{"t": coef, "1": rest}`` when it is affine in the launch variable ``t`` (coef and rest
  free of t), else None. ``min(t, B)`` (the clamp of ``_thread_ranges``) counts as t. Symbolic lowering
  leaves a split-then-fused thread loop as mixed-radix digits, ``t % x * k + t // x % y * (x k) + ...
  + t // (x y ..) * (x y .. k)``, which concrete lowering folds to ``t * k``; the digits are merged
  back exactly (``t // d % m * K + t // (d m) * (m K) = t // d * K``, compared as polynomials)."""
  terms = fold(e, _AFFINE, t, what="affine form").terms
  if terms is None: return None
  from minicomp.ir.poly import Polys
  polys = Polys(enabled=False)

  def eq(a: Expr, b: Expr) -> bool:
    return a.arg == b.arg if a.op is Op.CONST and b.op is Op.CONST else polys.equal(a, b)

  rest = [c for d, c in terms if d is None]
  digits = [(d[0], d[1], c) for d, c in terms if d is not None]
  merged = True
  while merged:
    merged = False
    for i, (d, m, k) in enumerate(digits):
      if m is None: continue
      for j, (d2, m2, k2) in enumerate(digits):
        if m2 is None and eq(d2, make(Op.MUL, "int32", d, m)) and eq(k2, make(Op.MUL, "int32", k, m)):
          digits = [x for n, x in enumerate(digits) if n not in (i, j)] + [(d, None, k)]
          merged = True
          break
      if merged: break
  if any(m is not None or not eq(d, _ONE) for d, m, _ in digits): return None
  coef, r = const(0), const(0)
  for _, _, k in digits: coef = make(Op.ADD, "int32", coef, k)
  for c in rest: r = make(Op.ADD, "int32", r, c)
  return {"t": coef, "1": r}


def _narrow(ext: Expr, g: Expr, t: str, loop_vars: set[str]) -> Expr:
  """``ext`` narrowed by the guard ``g`` on the launch variable ``t``: a guard ``lhs < X`` with ``lhs``
  affine in ``t`` with step ``s >= 1`` holds (other loop variables at 0) on the first
  ``(X - 1 - lhs(t=0)) // s + 1`` threads. Concrete lowering hoists and simplifies such guards
  (``t * 2 + v < 128`` becomes ``t < 64`` once the fetch loop around it has extent 1), so the count
  is taken from the guard's meaning, not its form: the same number for the symbolic and the
  concrete program. Guards not affine in ``t`` do not narrow (on a concrete program they are the
  always-true spatial guards of divisible tilings, which concrete lowering drops)."""
  if g.op is not Op.LT or g.src[0].dtype not in INT_DTYPES or t in free_vars(g.src[1]) or t not in free_vars(g.src[0]):
    return ext
  lin = _linear_in(g.src[0], t)
  if lin is None: return ext
  step = _at(lin["t"], {}, loop_vars)
  l0 = _at(lin["1"], {}, loop_vars)
  room = make(Op.SUB, "int32", make(Op.SUB, "int32", g.src[1], const(1)), l0)
  lim = make(Op.ADD, "int32", make(Op.FLOORDIV, "int32", room, make(Op.MAX, "int32", step, const(1))), const(1))
  lim = imin(ext, make(Op.MAX, "int32", lim, const(1)))
  if step.op is Op.CONST: return lim if step.arg >= 1 else ext
  return Expr.make(Op.SELECT, "int32", (Expr.make(Op.GE, "bool", (step, const(1))), lim, ext))


# ---------------------------------------------------------------------------------------------
# collecting the stores

def store_sites(k: LoopKernel) -> list[Site]:
  """The sites of kernel ``k`` in program order, with their loops and accesses (indices in terms of the
  launch tags, loaded values read as positions)."""
  rng = _thread_ranges(k)
  rename = {c: (Expr.make(Op.MIN, "int32", (var(t), make(Op.SUB, "int32", num(rng[c], "int32"), const(1))))
                if c in rng else var(t)) for c, t in k.bindings}
  launch = dict(zip(BLOCK_TAGS, k.grid)) | dict(zip(THREAD_TAGS, k.block))
  tags = [t for t in _FAKE_ORDER if any(t == b for _, b in k.bindings)]
  out: list[Site] = []

  def site(loops, conds, buf, index, value, mma):
    ext = {t: num(launch[t], "int32") for t in tags}
    loop_vars = {lp.var for lp in loops} | set(tags)
    for c in conds:   # a guard `threadIdx.x * 2 + v < X` runs the store on fewer threads of the launch dimension
      for g in _conjuncts(c):
        for t in tags:
          ext[t] = _narrow(ext[t], g, t, loop_vars)
    fake = [SiteLoop(("launch", t), t, ext[t], "launch") for t in tags]
    s = Site(k, fake + loops, buf, value, mma_loops=None if mma is None else len(fake) + mma)
    s.acc[buf.name] = (buf, "W", [_positions(substitute(index, rename))])
    for n in walk(value):   # the index tensors of a gather are read accesses too (walk yields inner LOADs)
      if n.op is Op.LOAD:
        b, kind, idx = s.acc.get(n.arg.name, (n.arg, "R", []))
        s.acc[n.arg.name] = (b, "RW" if kind != "R" else "R", idx + [_positions(substitute(n.src[0], rename))])
    out.append(s)

  def into(st, ctx):
    loops, conds, mma = ctx
    if isinstance(st, For):   # the pragma's unrolling is a later pass in TVM: features see it in one column only
      return loops + [SiteLoop(id(st), st.var, st.extent, "serial" if st.pragma_unroll else st.kind)], conds, mma
    if isinstance(st, If): return loops, conds + [_positions(substitute(st.cond, rename))], mma
    if isinstance(st, Mma): return loops, conds, len(loops)   # (its body: the scalar loops of one mma.sync)
    return ctx

  for st, (loops, conds, mma) in walk_scoped(k.body, ([], [], None), into):
    if isinstance(st, Store): site(loops, conds, st.buffer, st.index, st.value, mma)
    elif isinstance(st, CrossThreadReduce):
      # every thread of the reduction combines once (the shuffle / tree steps), then the total is stored
      v = Expr.make(_COMBINE[st.combiner], st.value.dtype, (st.value, st.value))
      if st.init is not None: v = Expr.make(_COMBINE[st.combiner], v.dtype, (st.init, v))
      site(loops, conds, st.dst, st.index, v, mma)
  return out


def kernel_loop_vars(k: LoopKernel, sites: list[Site]) -> set[str]:
  """Every loop variable of ``k``: launch tags, bound variables and the loops around its sites."""
  out = {c for c, _ in k.bindings} | set(BLOCK_TAGS) | set(THREAD_TAGS)
  for s in sites: out |= {lp.var for lp in s.loops}
  return out


# ---------------------------------------------------------------------------------------------
# index analysis: corners and unit steps of an access (int Exprs; constants on a concrete program)

def _at(idx: Expr, env: dict[str, Expr], loop_vars: set[str]) -> Expr:
  """``idx`` with loop variables set by ``env`` (the others 0)."""
  full = {v: env.get(v, const(0)) for v in free_vars(idx) if v in loop_vars}
  e = substitute(idx, full)
  if e.op is Op.CONST: return e
  if not free_vars(e): return const(int(evaluate(e)), e.dtype)   # concrete program: exact integer arithmetic
  return simplify(e)


def add_regions(s: Site, loop_vars: set[str]) -> None:
  """Elements of each buffer touched while loops l..n-1 sweep (outer loops at 0): hi - lo + 1 of the
  box spanned by the origin and the all-maximum corner of every access (exact for monotone indices)."""
  n = len(s.loops)
  for name, (_, _, idxs) in s.acc.items():
    c0 = s.origin[name] = [_at(i, {}, loop_vars) for i in idxs]
    s.fvs[name] = [free_vars(i) for i in idxs]
    regs = []
    for lv in range(n):
      env = {lp.var: make(Op.SUB, "int32", lp.ext, const(1)) for lp in s.loops[lv:]}
      lo = hi = None
      for i, a in zip(idxs, c0):
        b = _at(i, env, loop_vars)
        l_, h_ = fmin(a, b), fmax(a, b)
        lo, hi = (l_, h_) if lo is None else (fmin(lo, l_), fmax(hi, h_))
      regs.append(add(sub(hi, lo), 1.0))
    s.regions[name] = regs


def unit_steps(s: Site, name: str, lp: SiteLoop, loop_vars: set[str]) -> list[Expr]:
  """``idx(v=1) - idx(0)`` for each access of buffer ``name`` (0 when v is not in it)."""
  out = []
  for i, fv, c0 in zip(s.acc[name][2], s.fvs[name], s.origin[name]):
    out.append(sub(_at(i, {lp.var: const(1)}, loop_vars), c0) if lp.var in fv else fl(0.0))
  return out

