"""Ansor's per-store feature vector, written once over Expr arithmetic (see ``docs/features.md``).

Every feature is built with the small constant-folding kit below, so the same code gives numbers on a
concrete program (every node folds as it is built: the fast path) and Exprs of the schedule variables
on a symbolic one (Felix's requirement). Nothing compares symbolic values in Python: choices Ansor
makes by looking at values ("the first loop whose variable is in the index") are nested selects, and
choices made by looking at the program are made on what survives substitution unchanged (statement
structure, buffer names, loop kinds). "Does loop v move this access" is the *semantic* unit step
``idx(v=1) - idx(0)``, not "v occurs in idx": concrete lowering simplifies indices further than
symbolic lowering, so occurrence differs while the step does not. Loops of extent 1 vanish from
concrete programs but not from symbolic ones, so every loop-level rule skips them by ``extent > 1``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from minicomp.ir.evaluate import _intrinsics, _table, evaluate
from minicomp.ir.expr import Expr, cast, const, free_vars, var, walk
from minicomp.ir.rewrite import map_loads, substitute
from minicomp.ir.loop import Buffer, CrossThreadReduce, For, If, LoopKernel, Program, Seq, Store
from minicomp.ir.ops import DTYPE_BYTES, FLOAT_DTYPES, INT_DTYPES, Op
from minicomp.ir.simplify import simplify
from minicomp.ir.state import BLOCK_TAGS, THREAD_TAGS

MAX_N_BUFS = 5
N_BUF_FEATURES = 18
N_CURVE = 10
N_FEATURES = 57 + N_BUF_FEATURES * MAX_N_BUFS + N_CURVE + 4 + 3   # 164, as Ansor with 5 buffers
CACHE_LINE = 64
F64 = "float64"
_BIG = float(2 ** 40)   # "no stride found" sentinel inside a min
_FAKE_ORDER = ("blockIdx.z", "blockIdx.y", "blockIdx.x", "threadIdx.z", "threadIdx.y", "threadIdx.x")
_POS = ("kPosNone", "kPosInnerSpatial", "kPosMiddleSpatial", "kPosOuterSpatial", "kPosInnerReduce", "kPosMiddleReduce",
        "kPosOuterReduce", "kPosMixed")
_OP_KINDS = ("mad", "addsub", "mul", "divmod", "cmp", "math_func", "other_func")
_BUF = ("acc_type.kRead", "acc_type.kWrite", "acc_type.kReadWrite", "bytes", "unique_bytes", "lines", "unique_lines",
        "reuse_type.kLoopMultipleRead", "reuse_type.kSerialMultipleReadWrite", "reuse_type.kNoReuse", "reuse_dis_iter",
        "reuse_dis_bytes", "reuse_ct", "bytes_d_reuse_ct", "unique_bytes_d_reuse_ct", "lines_d_reuse_ct",
        "unique_lines_d_reuse_ct", "stride")
_RAW_BUF = {0, 1, 2, 7, 8, 9}   # one-hots: not passed through slog


def feature_names() -> list[str]:
  """Names of the N_FEATURES columns, in Ansor's order (``B{i}.`` prefixes the buffer slots)."""
  out = [f"float_{o}" for o in _OP_KINDS] + [f"int_{o}" for o in _OP_KINDS] + ["bool_op", "select_op"]
  for k in ("vec", "unroll", "parallel"): out += [f"{k}_num", f"{k}_prod", f"{k}_len"] + [f"{k}_type.{p}" for p in _POS]
  out += ["is_gpu", "blockIdx_x_len", "blockIdx_y_len", "blockIdx_z_len", "threadIdx_x_len", "threadIdx_y_len",
          "threadIdx_z_len", "vthread_len"]
  out += [f"B{b}.{n}" for b in range(MAX_N_BUFS) for n in _BUF]
  out += [f"arith_intensity_curve_{i}" for i in range(N_CURVE)]
  return out + ["alloc_size", "alloc_prod", "alloc_outer_prod", "alloc_inner_prod", "outer_prod", "num_loops",
                "auto_unroll_max_step"]


# ---------------------------------------------------------------------------------------------
# the arithmetic kit: builds Exprs, folding constants with evaluate's own numpy table (so folding
# here and evaluating a symbolic feature later run the same float operations, bit for bit)

_NP, _NP_CALL = _table(np), _intrinsics(np)
Num = Expr | int | float | bool


def _e(x: Num, dtype: str = F64) -> Expr:
  if isinstance(x, Expr): return x
  return const(x, "bool" if isinstance(x, bool) else dtype)


def _mk(op: Op, dtype: str, *src: Expr) -> Expr:
  if all(s.op is Op.CONST for s in src):
    v = _NP[op](*[s.arg for s in src])
    return const(v.item() if hasattr(v, "item") else v, dtype)
  return Expr.make(op, dtype, tuple(src))


def fl(x: Num) -> Expr:
  """As float64 (extents and indices are int32 Exprs)."""
  e = _e(x)
  if e.dtype == F64: return e
  if e.op is Op.CONST: return const(float(e.arg), F64)
  return Expr.make(Op.CAST, F64, (e,))


def add(a: Num, b: Num) -> Expr: return _mk(Op.ADD, F64, fl(a), fl(b))
def sub(a: Num, b: Num) -> Expr: return _mk(Op.SUB, F64, fl(a), fl(b))
def mul(a: Num, b: Num) -> Expr:
  a, b = fl(a), fl(b)
  if a.op is Op.CONST and a.arg == 1.0: return b   # exact: x * 1.0 == x
  if b.op is Op.CONST and b.arg == 1.0: return a
  return _mk(Op.MUL, F64, a, b)
def div(a: Num, b: Num) -> Expr: return _mk(Op.DIV, F64, fl(a), fl(b))
def fmin(a: Num, b: Num) -> Expr: return _mk(Op.MIN, F64, fl(a), fl(b))
def fmax(a: Num, b: Num) -> Expr: return _mk(Op.MAX, F64, fl(a), fl(b))
def gt(a: Num, b: Num) -> Expr: return _mk(Op.GT, "bool", fl(a), fl(b))
def ge(a: Num, b: Num) -> Expr: return _mk(Op.GE, "bool", fl(a), fl(b))
def ne(a: Num, b: Num) -> Expr: return _mk(Op.NE, "bool", fl(a), fl(b))
def eq(a: Num, b: Num) -> Expr: return _mk(Op.EQ, "bool", fl(a), fl(b))
def ifl(c: Num, t: Num, f: Num) -> Expr:
  c = _e(c)
  if c.op is Op.CONST: return fl(t) if c.arg else fl(f)
  t, f = fl(t), fl(f)
  return t if t == f else Expr.make(Op.SELECT, F64, (c, t, f))
def onehot(c: Num) -> Expr: return ifl(c, 1.0, 0.0)


def land(*cs: Num) -> Expr:
  out = _e(True)
  for c in cs:
    c = _e(c)
    if c.op is Op.CONST: out = out if c.arg else c
    elif out.op is Op.CONST: out = c if out.arg else out
    else: out = Expr.make(Op.AND, "bool", (out, c))
  return out


def lor(a: Num, b: Num) -> Expr:
  a, b = _e(a), _e(b)
  if a.op is Op.CONST: return b if not a.arg else a
  if b.op is Op.CONST: return a if not b.arg else b
  return Expr.make(Op.OR, "bool", (a, b))


def lnot(a: Num) -> Expr: return _mk(Op.NOT, "bool", _e(a))


def log2(x: Num) -> Expr:
  x = fl(x)
  if x.op is Op.CONST: return const(float(_NP_CALL["log2"](x.arg)), F64)
  return Expr.make(Op.CALL, F64, (x,), "log2")


def slog(x: Num) -> Expr:
  """Ansor's sign(x) * log2(|x| + 1)."""
  x = fl(x)
  return mul(ifl(ge(x, 0.0), 1.0, -1.0), log2(add(fmax(x, sub(0.0, x)), 1.0)))


def imin(a: Expr, b: Expr) -> Expr: return _mk(Op.MIN, a.dtype, a, b)


# ---------------------------------------------------------------------------------------------
# collecting the stores

@dataclass
class _SiteLoop:
  """A loop enclosing a store site, or a launch dimension (``kind == "launch"``)."""
  key: object        # identity shared by every store under the loop
  var: str           # loop variable ("threadIdx.x" for a launch dimension)
  ext: Expr          # int extent
  kind: str          # serial | unroll | vectorize | vthread | launch


@dataclass
class _Site:
  """One Store (or a cross-thread reduction's final store) and what the features need of it."""
  kernel: LoopKernel
  loops: list[_SiteLoop]
  buffer: Buffer
  value: Expr
  acc: dict[str, tuple[Buffer, str, list[Expr]]] = field(default_factory=dict)   # name -> (buffer, type, indices)
  regions: dict[str, list[Expr]] = field(default_factory=dict)   # name -> elements touched as loops l.. sweep
  origin: dict[str, list[Expr]] = field(default_factory=dict)    # name -> each index at all loops 0
  fvs: dict[str, list[set[str]]] = field(default_factory=dict)   # name -> free variables of each index


_COMBINE = {"sum": Op.ADD, "prod": Op.MUL, "max": Op.MAX, "min": Op.MIN}


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

  def go(st, conds):
    if isinstance(st, For): go(st.body, conds)
    elif isinstance(st, Seq):
      for x in st.stmts: go(x, conds)
    elif isinstance(st, If): go(st.then, conds + _conjuncts(st.cond))
    elif isinstance(st, (Store, CrossThreadReduce)):
      used = free_vars(st.index) | free_vars(st.value)
      for g in conds:
        if g.op is Op.LT and g.src[0].op is Op.VAR:
          x = _positions(g.src[1])
          for c in used:
            if tag_of.get(c) == g.src[0].arg: out[c] = x if c not in out else imin(out[c], x)
  go(k.body, [])
  return out


def _linear_in(e: Expr, t: str) -> dict | None:
  """``e`` as ``{"t": coef, "1": rest}`` when it is affine in the launch variable ``t`` (coef and rest
  free of t), else None. ``min(t, B)`` (the clamp of ``_thread_ranges``) counts as t. Symbolic lowering
  leaves a split-then-fused thread loop as mixed-radix digits, ``t % x * k + t // x % y * (x k) + ...
  + t // (x y ..) * (x y .. k)``, which concrete lowering folds to ``t * k``; the digits are merged
  back exactly (``t // d % m * K + t // (d m) * (m K) = t // d * K``, compared as polynomials)."""
  def is_t(x: Expr) -> bool:
    return (x.op is Op.VAR and x.arg == t) or (x.op is Op.MIN and x.src[0].op is Op.VAR and x.src[0].arg == t
                                               and t not in free_vars(x.src[1]))

  one = const(1)

  def digit(x: Expr):                    # (t // d) % m as (d, m); m None: no modulo
    if is_t(x): return one, None
    if x.op is Op.FLOORDIV and t not in free_vars(x.src[1]):
      inner = digit(x.src[0])
      if inner is not None and inner[1] is None: return _mk(Op.MUL, "int32", inner[0], x.src[1]), None
    if x.op is Op.FLOORMOD and t not in free_vars(x.src[1]):
      inner = digit(x.src[0])
      if inner is not None and inner[1] is None: return inner[0], x.src[1]
    return None

  def go(x: Expr) -> list | None:       # list of (digit | None for the t-free part, coef)
    if t not in free_vars(x): return [(None, x)]
    dg = digit(x)
    if dg is not None: return [(dg, one)]
    if x.op in (Op.ADD, Op.SUB):
      a, b = go(x.src[0]), go(x.src[1])
      if a is None or b is None: return None
      if x.op is Op.SUB: b = [(d, _mk(Op.NEG, "int32", c)) for d, c in b]
      return a + b
    if x.op is Op.NEG:
      a = go(x.src[0])
      return None if a is None else [(d, _mk(Op.NEG, "int32", c)) for d, c in a]
    if x.op is Op.MUL:
      for i in (0, 1):
        if t not in free_vars(x.src[1 - i]):
          a = go(x.src[i])
          return None if a is None else [(d, _mk(Op.MUL, "int32", c, x.src[1 - i])) for d, c in a]
    return None

  terms = go(e)
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
        if m2 is None and eq(d2, _mk(Op.MUL, "int32", d, m)) and eq(k2, _mk(Op.MUL, "int32", k, m)):
          digits = [x for n, x in enumerate(digits) if n not in (i, j)] + [(d, None, k)]
          merged = True
          break
      if merged: break
  if any(m is not None or not eq(d, one) for d, m, _ in digits): return None
  coef, r = const(0), const(0)
  for _, _, k in digits: coef = _mk(Op.ADD, "int32", coef, k)
  for c in rest: r = _mk(Op.ADD, "int32", r, c)
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
  room = _mk(Op.SUB, "int32", _mk(Op.SUB, "int32", g.src[1], const(1)), l0)
  lim = _mk(Op.ADD, "int32", _mk(Op.FLOORDIV, "int32", room, _mk(Op.MAX, "int32", step, const(1))), const(1))
  lim = imin(ext, _mk(Op.MAX, "int32", lim, const(1)))
  if step.op is Op.CONST: return lim if step.arg >= 1 else ext
  return Expr.make(Op.SELECT, "int32", (Expr.make(Op.GE, "bool", (step, const(1))), lim, ext))


def _sites(k: LoopKernel) -> list[_Site]:
  rng = _thread_ranges(k)
  rename = {c: (Expr.make(Op.MIN, "int32", (var(t), _mk(Op.SUB, "int32", _e(rng[c], "int32"), const(1))))
                if c in rng else var(t)) for c, t in k.bindings}
  launch = dict(zip(BLOCK_TAGS, k.grid)) | dict(zip(THREAD_TAGS, k.block))
  tags = [t for t in _FAKE_ORDER if any(t == b for _, b in k.bindings)]
  out: list[_Site] = []

  def site(loops, conds, buf, index, value):
    ext = {t: _e(launch[t], "int32") for t in tags}
    loop_vars = {lp.var for lp in loops} | set(tags)
    for c in conds:   # a guard `threadIdx.x * 2 + v < X` runs the store on fewer threads of the launch dimension
      for g in _conjuncts(c):
        for t in tags:
          ext[t] = _narrow(ext[t], g, t, loop_vars)
    fake = [_SiteLoop(("launch", t), t, ext[t], "launch") for t in tags]
    s = _Site(k, fake + loops, buf, value)
    s.acc[buf.name] = (buf, "W", [_positions(substitute(index, rename))])
    for n in walk(value):   # the index tensors of a gather are read accesses too (walk yields inner LOADs)
      if n.op is Op.LOAD:
        b, kind, idx = s.acc.get(n.arg.name, (n.arg, "R", []))
        s.acc[n.arg.name] = (b, "RW" if kind != "R" else "R", idx + [_positions(substitute(n.src[0], rename))])
    out.append(s)

  def go(st, loops, conds):
    if isinstance(st, For):   # the pragma's unrolling is a later pass in TVM: features see it in one column only
      go(st.body, loops + [_SiteLoop(id(st), st.var, st.extent, "serial" if st.pragma_unroll else st.kind)], conds)
    elif isinstance(st, Seq):
      for x in st.stmts: go(x, loops, conds)
    elif isinstance(st, If): go(st.then, loops, conds + [_positions(substitute(st.cond, rename))])
    elif isinstance(st, Store): site(loops, conds, st.buffer, st.index, st.value)
    elif isinstance(st, CrossThreadReduce):
      # every thread of the reduction combines once (the shuffle / tree steps), then the total is stored
      v = Expr.make(_COMBINE[st.combiner], st.value.dtype, (st.value, st.value))
      if st.init is not None: v = Expr.make(_COMBINE[st.combiner], v.dtype, (st.init, v))
      site(loops, conds, st.dst, st.index, v)
  go(k.body, [], [])
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


def _regions(s: _Site, loop_vars: set[str]) -> None:
  """Elements of each buffer touched while loops l..n-1 sweep (outer loops at 0): hi - lo + 1 of the
  box spanned by the origin and the all-maximum corner of every access (exact for monotone indices)."""
  n = len(s.loops)
  for name, (_, _, idxs) in s.acc.items():
    c0 = s.origin[name] = [_at(i, {}, loop_vars) for i in idxs]
    s.fvs[name] = [free_vars(i) for i in idxs]
    regs = []
    for lv in range(n):
      env = {lp.var: _mk(Op.SUB, "int32", lp.ext, const(1)) for lp in s.loops[lv:]}
      lo = hi = None
      for i, a in zip(idxs, c0):
        b = _at(i, env, loop_vars)
        l_, h_ = fmin(a, b), fmax(a, b)
        lo, hi = (l_, h_) if lo is None else (fmin(lo, l_), fmax(hi, h_))
      regs.append(add(sub(hi, lo), 1.0))
    s.regions[name] = regs


def _steps(s: _Site, name: str, lp: _SiteLoop, loop_vars: set[str]) -> list[Expr]:
  """``idx(v=1) - idx(0)`` for each access of buffer ``name`` (0 when v is not in it)."""
  out = []
  for i, fv, c0 in zip(s.acc[name][2], s.fvs[name], s.origin[name]):
    out.append(sub(_at(i, {lp.var: const(1)}, loop_vars), c0) if lp.var in fv else const(0.0, F64))
  return out


# ---------------------------------------------------------------------------------------------
# per-store features

_OP_SLOT = {Op.ADD: 1, Op.SUB: 1, Op.NEG: 1, Op.MUL: 2, Op.DIV: 3, Op.FLOORDIV: 3, Op.FLOORMOD: 3, Op.MIN: 4, Op.MAX: 4,
            Op.LT: 4, Op.LE: 4, Op.GT: 4, Op.GE: 4, Op.EQ: 4, Op.NE: 4, Op.CALL: 5}


def _count_ops(e: Expr) -> list[int]:
  """Ansor's MathOpCounter on a store's value, as a tree (shared subtrees count each time they are
  used), without index arithmetic: integer subtrees that read no memory (load indices, the operands of
  padding predicates) are simplified differently by concrete and symbolic lowering."""
  memo: dict[Expr, list[int]] = {}

  def go(n: Expr) -> list[int]:
    r = memo.get(n)
    if r is not None: return r
    r = [0] * 16
    index_math = n.dtype in INT_DTYPES and not any(x.op is Op.LOAD for x in walk(n))
    if n.op is not Op.LOAD and not index_math:
      for s in n.src: r = [a + b for a, b in zip(r, go(s))]
      if n.op in (Op.AND, Op.OR, Op.NOT): r[14] += 1
      elif n.op is Op.SELECT: r[15] += 1
      elif n.op in _OP_SLOT:
        dt = n.src[0].dtype if n.src else n.dtype
        r[_OP_SLOT[n.op] + (0 if dt in FLOAT_DTYPES else 7)] += 1
    memo[n] = r
    return r
  return go(e)


def _nt(lp: _SiteLoop) -> Expr: return gt(lp.ext, 1.0)


def _loop_group(loops: list[_SiteLoop], kind: str) -> list[Expr]:
  """num, prod, len and the 8-way position one-hot (kPosMixed when any) of the loops of ``kind``."""
  ls = [lp for lp in loops if lp.kind == kind]
  num, prod, ln = fl(0.0), fl(1.0), fl(0.0)
  for lp in ls:
    num = add(num, onehot(_nt(lp)))
    prod = mul(prod, lp.ext)
    ln = ifl(_nt(lp), lp.ext, ln)
  prod = ifl(gt(num, 0.0), prod, 0.0)
  some = gt(num, 0.0)
  return [slog(num), slog(prod), slog(ln), onehot(lnot(some))] + [fl(0.0)] * 6 + [onehot(some)]


def _entries(sites: list[_Site], j: int, lv: int) -> list[tuple[_Site, str]]:
  """(store, buffer) pairs touched under loop ``lv`` of store ``j``, by that store and the ones before it."""
  key = sites[j].loops[lv].key
  return [(s, b) for s in sites[:j + 1] if len(s.loops) > lv and s.loops[lv].key == key for b in s.acc]


def _bytes(s: _Site, b: str) -> int: return DTYPE_BYTES[s.acc[b][0].dtype]


def _buffer_features(sites: list[_Site], j: int, name: str, outer_prod: Expr, loop_vars: set[str]) -> list[Expr]:
  s = sites[j]
  buf, kind, _ = s.acc[name]
  eb = DTYPE_BYTES[buf.dtype]
  n = len(s.loops)
  bytes_ = mul(outer_prod, eb)
  unique_bytes = mul(s.regions[name][0], eb)
  # stride, lines: scan loops inner -> outer for the first non-trivial one that moves the access
  in_loop, first = _e(True), _e(True)
  stride_found, innermost, run, rr, inner_prod = fl(0.0), fl(0.0), fl(1.0), fl(1.0), fl(1.0)
  # reuse (ComputeReuse with Felix's selects; extent-1 loops skipped)
  r_in = _e(True)
  mr_any, sr_any = _e(False), _e(False)
  dis_iter, dis_bytes, ct = fl(0.0), fl(0.0), fl(0.0)
  read_iter, prev_bytes, seen = fl(1.0), fl(0.0), _e(False)
  for lv in range(n - 1, -1, -1):
    lp = s.loops[lv]
    nt = _nt(lp)
    steps = _steps(s, name, lp, loop_vars)
    moves = _e(False)
    smin = fl(_BIG)
    for d in steps:
      moves = lor(moves, ne(d, 0.0))
      smin = fmin(smin, ifl(ne(d, 0.0), fmax(d, sub(0.0, d)), _BIG))
    take = land(in_loop, nt, moves)
    stride_found = ifl(take, smin, stride_found)
    innermost = ifl(land(take, first), smin, innermost)
    run = ifl(land(take, first, eq(smin, 1.0)), lp.ext, run)
    rr = ifl(take, inner_prod, rr)
    in_loop = land(in_loop, lnot(take))
    first = land(first, lnot(nt))
    # reuse at this loop
    ent = _entries(sites, j, lv)
    serial = sum(1 for _, b in ent if b == name) - 1
    touched = fl(0.0)
    for s2, b2 in ent: touched = add(touched, mul(s2.regions[b2][lv], _bytes(s2, b2)))
    mr = land(r_in, nt, lnot(moves))
    sr = land(r_in, nt, moves) if serial > 0 else _e(False)
    if serial > 0:
      least = None
      for s2, b2 in ent:
        if b2 == name: least = s2.regions[b2][lv] if least is None else fmin(least, s2.regions[b2][lv])
      dis_iter = ifl(sr, div(least, lp.ext), dis_iter)
      dis_bytes = ifl(sr, div(touched, lp.ext), dis_bytes)
      ct = ifl(sr, serial, ct)
    elem_only = fl(0.0)
    for s2, b2 in ent: elem_only = add(elem_only, _bytes(s2, b2))
    dis_iter = ifl(mr, read_iter, dis_iter)
    dis_bytes = ifl(mr, ifl(seen, prev_bytes, elem_only), dis_bytes)
    ct = ifl(mr, lp.ext, ct)
    mr_any, sr_any = lor(mr_any, mr), lor(sr_any, sr)
    r_in = land(r_in, lor(lnot(nt), land(moves, _e(serial <= 0))))
    read_iter = mul(read_iter, lp.ext)
    prev_bytes = ifl(nt, touched, prev_bytes)
    seen = lor(seen, nt)
    inner_prod = mul(inner_prod, lp.ext)
  rr = ifl(in_loop, inner_prod, rr)
  lines = fmax(mul(div(outer_prod, rr), fmin(1.0, div(mul(stride_found, eb), CACHE_LINE))), 1.0)
  unique_lines = fmax(div(unique_bytes, fmin(mul(run, eb), CACHE_LINE)), 1.0)
  coef = ifl(ne(ct, 0.0), ct, 0.5)
  acc = [onehot(kind == "R"), onehot(kind == "W"), onehot(kind == "RW")]
  reuse = [onehot(mr_any), onehot(sr_any), onehot(lnot(lor(mr_any, sr_any)))]
  scal = [bytes_, unique_bytes, lines, unique_lines]
  return (acc + [slog(x) for x in scal] + reuse + [slog(dis_iter), slog(dis_bytes), slog(ct)]
          + [slog(div(x, coef)) for x in scal] + [slog(innermost)])


def _curve(s: _Site, float_ops: int) -> list[Expr]:
  """Ansor's arithmetic-intensity curve: log2(ops) vs log2(bytes) per loop level (inner -> outer),
  sampled at 10 evenly spaced log-ops and linearly interpolated; the ``while`` search is a select chain."""
  n = len(s.loops)
  if float_ops <= 0 or n == 0: return [fl(0.0)] * N_CURVE
  ops, mem, cur = [], [], fl(float(float_ops))
  for lv in range(n - 1, -1, -1):
    cur = mul(cur, s.loops[lv].ext)
    ops.append(log2(cur))
    m = fl(0.0)
    for b in s.acc: m = add(m, mul(s.regions[b][lv], _bytes(s, b)))
    mem.append(log2(m))
  # a loop of extent 1 (there in a symbolic program, gone from the concrete one) takes the point of the
  # next outer non-trivial loop: a duplicate point, which the interpolation below does not see
  nts = [_nt(s.loops[lv]) for lv in range(n - 1, -1, -1)]
  co, cm = ops[-1], mem[-1]
  for p in range(n - 1, -1, -1):
    co, cm = ifl(nts[p], ops[p], co), ifl(nts[p], mem[p], cm)
    ops[p], mem[p] = co, cm
  ai = [div(o, m) for o, m in zip(ops, mem)]
  out = []
  for i in range(N_CURVE):
    x = div(mul(ops[-1], float(i + 1)), float(N_CURVE))
    v = None
    for pt in range(n - 1, -1, -1):
      if pt == 0: val = ai[0]
      else:
        dx = sub(ops[pt], ops[pt - 1])
        val = add(ai[pt - 1], mul(div(sub(ai[pt], ai[pt - 1]), ifl(gt(dx, 0.0), dx, 1.0)), sub(x, ops[pt - 1])))
      v = val if v is None else ifl(ge(ops[pt], sub(x, 1e-4)), val, v)
    out.append(v)
  return out


def _row(sites: list[_Site], j: int, loop_vars: set[str], alloc_at: dict[str, int], unroll_max: int = 0) -> list[Expr]:
  s = sites[j]
  k = s.kernel
  outer_prod = fl(1.0)
  for lp in s.loops: outer_prod = mul(outer_prod, lp.ext)
  counts = _count_ops(s.value)
  row = [slog(mul(outer_prod, float(c))) if c else fl(0.0) for c in counts]
  row += _loop_group(s.loops, "vectorize") + _loop_group(s.loops, "unroll")
  row += [fl(0.0)] * 3 + [fl(1.0)] + [fl(0.0)] * 7    # parallel: no CPU-style parallel loops on a GPU
  vthread = fl(1.0)
  for lp in s.loops:
    if lp.kind == "vthread": vthread = mul(vthread, lp.ext)
  dims = [k.grid[0], k.grid[1], k.grid[2], k.block[0], k.block[1], k.block[2]]
  row += [fl(1.0)] + [slog(_e(d, "int32")) for d in dims] + [slog(vthread)]
  # buffers: the stored one first, then the others by name (structural, so symbolic == concrete)
  names = [s.buffer.name] + sorted(b for b in s.acc if b != s.buffer.name)
  for b in names[:MAX_N_BUFS]: row += _buffer_features(sites, j, b, outer_prod, loop_vars)
  row += [fl(0.0)] * (N_BUF_FEATURES * (MAX_N_BUFS - min(len(names), MAX_N_BUFS)))
  row += _curve(s, sum(counts[:7]))
  if s.buffer.scope != "global":   # allocated at the loops common to every store into it
    depth = alloc_at[s.buffer.name]
    aop = fl(1.0)
    for lp in s.loops[:depth]: aop = mul(aop, lp.ext)
    size = mul(s.buffer.size, DTYPE_BYTES[s.buffer.dtype])
    row += [slog(size), slog(mul(s.buffer.size, aop)), slog(aop), slog(div(outer_prod, aop))]
  else:
    row += [fl(0.0)] * 4
  num_loops = fl(0.0)
  for lp in s.loops:
    num_loops = add(num_loops, 1.0 if lp.kind == "launch" else onehot(_nt(lp)))
  row += [slog(outer_prod), slog(num_loops), slog(fl(float(unroll_max)))]
  assert len(row) == N_FEATURES, len(row)
  return row


def _kernel_loop_vars(k: LoopKernel, sites: list[_Site]) -> set[str]:
  out = {c for c, _ in k.bindings} | set(BLOCK_TAGS) | set(THREAD_TAGS)
  for s in sites: out |= {lp.var for lp in s.loops}
  return out


def extract_program_exprs(program: Program) -> list[list[Expr]]:
  """One row of N_FEATURES float64 Exprs per Store (and per cross-thread reduction) of every kernel, in
  program order. Constants on a concrete program; Exprs of the schedule variables on a symbolic one."""
  rows: list[list[Expr]] = []
  unroll_max = max((getattr(k, "auto_unroll_max_step", 0) for k in program.kernels), default=0)
  for k in program.kernels:
    sites = _sites(k)
    loop_vars = _kernel_loop_vars(k, sites)
    alloc_at: dict[str, int] = {}
    keys: dict[str, list] = {}
    for s in sites:
      ks = [lp.key for lp in s.loops]
      prev = keys.get(s.buffer.name)
      if prev is None: keys[s.buffer.name] = ks
      else:
        d = 0
        while d < min(len(prev), len(ks)) and prev[d] == ks[d]: d += 1
        keys[s.buffer.name] = prev[:d]
    alloc_at = {b: len(ks) for b, ks in keys.items()}
    for s in sites: _regions(s, loop_vars)
    rows += [_row(sites, j, loop_vars, alloc_at, unroll_max) for j in range(len(sites))]
  return rows


def evaluate_features(rows: list[list[Expr]], values: dict[str, int] | None = None) -> np.ndarray:
  """Evaluate feature Exprs at schedule-variable ``values`` -> float32 (n_rows, N_FEATURES)."""
  out = np.zeros((len(rows), N_FEATURES), np.float64)
  for r, row in enumerate(rows):
    for c, e in enumerate(row): out[r, c] = e.arg if e.op is Op.CONST else float(evaluate(e, values or {}))
  return out.astype(np.float32)


def extract_features(program: Program, values: dict[str, int] | None = None) -> np.ndarray:
  """The feature matrix (n_rows, N_FEATURES) float32 of a program (``values`` for a symbolic one)."""
  return evaluate_features(extract_program_exprs(program), values)
