"""Access relations of a lowered kernel, as isl maps (the input of Tuna's data-movement analysis).

:func:`collect_accesses` walks one concrete :class:`~minicomp.ir.loop.LoopKernel` and lists every
memory access (the Store targets and the LOAD nodes of values, indices and conditions) with the
loops and conditions around it. Bound C variables are renamed to the hardware index they are
bound to (``blockIdx.x`` ...), so every access speaks of the same six hardware dimensions.

:func:`access_map` turns one :class:`Access` into an isl map from the statement instances to
the touched element, keeping the hardware indices in the range::

    { [bz, by, bx, tz, ty, tx, l0, l1, ...] -> [bz, by, bx, tz, ty, tx, addr] : 0 <= bz < grid.z and ... }

so one relation answers grid, per-block (project out the thread dimensions) and per-thread
questions. Indices and conditions are converted when they are quasi-affine (+, -, * by a
constant, floordiv / floormod by a positive constant, min, max, select, comparisons and
logic; the renderers are the fold tables of ``isl_text.py``); a condition that is not is dropped
(an over-approximation), and an index that is not (a gather: a LOAD inside an index) maps to the
whole buffer. ``AccessMap.exact`` says whether either happened. Integer divisions of fused / split
loop indices are rewritten into digit variables first (:class:`~minicomp.search.static.footprint.isl_text.Digits`):
the same sets, which isl counts far faster (its injectivity test, though, is fast only with them
projected out: :meth:`AccessMap.injective`).
"""
from __future__ import annotations

import functools
import math
import threading
from dataclasses import dataclass, field

import islpy as isl
import numpy as np

from minicomp.errors import FootprintError
from minicomp.ir.evaluate import evaluate_again
from minicomp.ir.expr import Expr, free_vars, var, walk
from minicomp.ir.rewrite import substitute
from minicomp.ir.loop import AsyncCommit, AsyncWait, Buffer, Comment, CrossThreadReduce, For, FragmentLoad, If, LoopKernel, Mma, Seq, Store, Sync, walk_scoped
from minicomp.ir.ops import INT_DTYPES, Op
from minicomp.ir.linear import linear
from minicomp.search.static.footprint.isl_text import Digits, aff_text, cond_text, pieces_text


HW_TAGS = ("blockIdx.z", "blockIdx.y", "blockIdx.x", "threadIdx.z", "threadIdx.y", "threadIdx.x")
HW_DIMS = ("bz", "by", "bx", "tz", "ty", "tx")       # the names of those dimensions in isl strings
N_HW = len(HW_TAGS)
ENUM_PART_LIMIT = 1 << 22                             # instance-count parts up to this many points are counted with numpy
COUNT_BUDGET = 100_000                                # isl operations for a larger part; then it is sampled
SAMPLE_POINTS = 1 << 20                               # random points a sampled instance count evaluates


@dataclass(frozen=True)
class LoopNode:
  """One ``For`` of the kernel body; ``node`` is its pre-order number, ``parent`` the enclosing one."""
  node: int
  var: str
  extent: int
  kind: str
  parent: int | None
  depth: int


@dataclass(frozen=True)
class Access:
  """One read or write in the kernel body, in hardware-index variables.

  ``loops`` are the enclosing loops, outermost first; ``conds`` the enclosing If conditions and
  select branch conditions; ``synthetic`` marks the modelled scratch traffic of a
  cross-thread reduction (not an IR node).
  """
  buffer: Buffer
  kind: str                      # "read" | "write"
  index: Expr
  loops: tuple[LoopNode, ...]
  conds: tuple[Expr, ...]
  synthetic: bool = False


@dataclass(frozen=True)
class AccessMap:
  """An access and its isl relation. ``extents`` bound the input dimensions; ``groups`` are the
  input dimensions that conditions tie together (the others range over their whole extent)."""
  access: Access
  texts: tuple[str, str, str]   # the relations with ranges [addr], [bz, by, bx, addr], [bz, ..., tx, addr]
  exact: bool           # False when a condition was dropped or the index was over-approximated
  affine_index: bool
  extents: tuple[int, ...]
  groups: tuple[frozenset[int], ...]
  used: frozenset[str] = frozenset()        # variables the index and the conditions read
  box: tuple[tuple[int, int], ...] = ()     # per input dimension: [lo, hi] the conditions allow
  domain_conds: tuple[Expr, ...] = ()       # the conditions the isl domain holds (the others were dropped)
  _maps: dict = field(default_factory=dict, compare=False, repr=False)   # isl.Map by keep, parsed when asked

  def isl_map(self, keep: int = 6) -> isl.Map:
    """The access relation keeping the first ``keep`` (0, 3 or 6) hardware indices in its range
    (parsed on first use: many counts never reach isl)."""
    m = self._maps.get(keep)
    if m is None: m = self._maps[keep] = isl.Map(self.texts[(0, 3, 6).index(keep)], context=isl_context())
    return m

  @functools.cached_property
  def names(self) -> tuple[str, ...]:
    """The variable of each input dimension: the hardware indices, then the loops outermost first
    (an inner loop may shadow an outer one of the same name)."""
    return HW_TAGS + tuple(lp.var for lp in self.access.loops)

  def span(self, p: int) -> range:
    """The values input dimension ``p`` can take (its extent, narrowed by single-variable bounds)."""
    lo, hi = self.box[p] if self.box else (0, self.extents[p] - 1)
    return range(lo, hi + 1)

  @property
  def map(self) -> isl.Map: return self.isl_map(6)

  def image(self, keep: int = 0, fixed: tuple[int, ...] = (), at: tuple[tuple[int, int], ...] = ()) -> isl.Set:
    """Touched elements with the first ``keep`` (0, 3 or 6) hardware indices kept, the input
    dimensions ``fixed`` set to 0 and those of ``at`` (position, value) to a value. isl counts
    an image far faster when it comes from a map with that range than when the hardware
    indices are projected out afterwards."""
    m = self.isl_map(keep)
    for p in fixed: m = m.fix_input_si(p, 0)
    for p, v in at: m = m.fix_input_si(p, v)
    return m.range()

  def translation(self, tag: str) -> int | None:
    """``c`` when the element index is ``c * tag + (terms free of tag)`` and no condition
    mentions ``tag`` (0: the access does not depend on it); else None."""
    a = self.access
    if not self.affine_index or any(tag in free_vars(c) for c in a.conds): return None
    terms, _ = linear(a.index)
    coef = 0
    for t, k in terms.items():
      if t.op is Op.VAR and t.arg == tag: coef = k
      elif tag in free_vars(t): return None
    return coef

  def instance_count(self, fix: dict[int, int] | None = None, drop: frozenset[int] = frozenset()) -> int:
    """Number of statement instances (dynamic executions) of the access, with the input
    dimensions ``fix`` fixed and those of ``drop`` (which nothing reads) projected out.

    Counting the domain directly costs isl a scan of all but its last dimensions, so the
    domain is factored: dimensions no condition mentions contribute their extent, and each
    group of dimensions tied by conditions is counted on its own projection.
    """
    fix = fix or {}
    parts: list[set[int]] = []
    for g in self.groups:
      hit = [p for p in parts if p & g]
      parts = [p for p in parts if not p & g] + [set(g).union(*hit)]
    total = 1
    for k, e in enumerate(self.extents):
      if not any(k in p for p in parts) and k not in fix and k not in drop: total *= e
    if not parts: return total                   # no condition ties dimensions: isl is not needed
    rest = []
    for p in parts:                              # small parts: count their points with numpy
      c = self._enumerated_count(p, fix)
      if c is None: rest.append(p)
      else: total *= c
    if not rest: return total
    dom = self.map.domain()
    n = len(self.extents)
    dom = dom.project_out(isl.dim_type.set, n, dom.dim(isl.dim_type.set) - n)   # digits: functions of the rest
    for p, v in fix.items(): dom = dom.fix_val(isl.dim_type.set, p, v)
    for p in rest:
      d = dom
      for k in reversed(range(n)):
        if k not in p: d = d.project_out(isl.dim_type.set, k, 1)
      c = isl_budgeted(lambda d=d: int(d.count_val().to_python()), COUNT_BUDGET)
      if c is None: c = self._enumerated_count(p, fix, sample=True)
      if c is None: c = int(d.count_val().to_python())     # (shadowed names: isl without a budget)
      total *= c
    return total

  def _enumerated_count(self, part: set[int], fix: dict[int, int], sample: bool = False) -> int | None:
    """Points of the domain projected on the dimensions ``part`` (``fix`` fixed), by evaluating
    the conditions that tie them over their grid with numpy; None when the grid is larger than
    :data:`ENUM_PART_LIMIT` or two of its dimensions share a name (an inner loop shadowing).

    ``sample``: a larger grid is estimated from :data:`SAMPLE_POINTS` uniformly random points
    (fixed seed): the fraction inside times the grid, with a standard error of
    ``grid * sqrt(f (1 - f) / SAMPLE_POINTS)`` (under 0.05 % of the grid). For counts isl cannot
    finish within its budget."""
    names = self.names
    free = sorted(k for k in part if k not in fix)
    if len({names[k] for k in part}) != len(part): return None
    grid = math.prod(self.extents[k] for k in free)
    env = {names[k]: v for k, v in fix.items()}
    if grid <= ENUM_PART_LIMIT:
      shape = tuple(self.extents[k] for k in free)
      for i, k in enumerate(free):
        env[names[k]] = np.arange(self.extents[k]).reshape(tuple(-1 if j == i else 1 for j in range(len(free))))
    elif sample:
      rng = np.random.default_rng(0)
      shape = (SAMPLE_POINTS,)
      for k in free: env[names[k]] = rng.integers(0, self.extents[k], SAMPLE_POINTS)
    else: return None
    mask = np.ones(shape, bool)
    for c in self.domain_conds:
      vs = free_vars(c)
      if vs and all(v in env for v in vs) and any(names[k] in vs for k in part):
        mask &= np.broadcast_to(np.asarray(evaluate_again(c, env), bool), shape)
    inside = int(mask.sum())
    return inside if grid <= ENUM_PART_LIMIT else int(round(inside / SAMPLE_POINTS * grid))

  def injective(self, keep: int, fix: dict[int, int], drop: frozenset[int], budget: int) -> bool | None:
    """Whether distinct instances (``drop`` projected out) touch distinct (kept indices, element)
    pairs; None when isl cannot tell within ``budget`` operations.

    The digit variables are projected out first: they are functions of the instance indices, so
    the question is the same, with them as isl's existential variables. Asked with them as inputs,
    isl first compresses the lattice of their equalities, and on padded Conv3d inputs one such
    operation took seconds (2-128 s past a budget of 300); projected out, the test answered 63 of
    the 354 questions the strategies benchmark's programs pose (the other form 2), none slower than
    0.3 s (``research/isl_injective.py``)."""
    m = self.isl_map(keep)
    for p, v in fix.items(): m = m.fix_input_si(p, v)
    n = len(self.extents)

    def test() -> bool:
      r = m.project_out(isl.dim_type.in_, n, m.dim(isl.dim_type.in_) - n)
      for p in sorted(drop, reverse=True): r = r.project_out(isl.dim_type.in_, p, 1)
      return r.is_injective()
    return isl_budgeted(test, budget)


_thread = threading.local()


def isl_context() -> isl.Context:
  """This thread's isl context. Every relation of an analysis lives in the context of the thread
  that runs it: isl contexts are not thread-safe, and the operation budget of
  :func:`isl_budgeted` is per context (a shared one let one thread's budget fail another's
  unbudgeted operations, and a thread ending its budget lift another's)."""
  ctx = getattr(_thread, "ctx", None)
  if ctx is None: ctx = _thread.ctx = isl.Context()
  return ctx


def isl_budgeted(fn, budget: int):
  """``fn()`` within ``budget`` isl operations (0: no limit) of this thread's context; None when
  isl ran out."""
  ctx = isl_context()
  ctx.set_max_operations(budget)
  ctx.reset_operations()
  try: return fn()
  except (isl.Error, TypeError): return None     # (an exhausted count_val prints as None)
  finally: ctx.set_max_operations(0)


def hw_extent(kernel: LoopKernel, k: int) -> int:
  """Extent of hardware dimension ``k`` (order of :data:`HW_TAGS`)."""
  dims = kernel.grid if k < 3 else kernel.block
  return _int(dims["xyz".index(HW_TAGS[k][-1])])


def _int(e) -> int:
  if isinstance(e, int): return e
  if isinstance(e, Expr) and e.is_const: return int(e.arg)
  raise FootprintError(f"the data-movement analysis needs a concrete kernel; got extent {e}")


# ---------------------------------------------------------------------------------------------
# collecting accesses

@functools.lru_cache(maxsize=4096)
def reads_memory(e: Expr) -> bool:
  """Whether ``e`` loads from a buffer (its value depends on data)."""
  return any(n.op is Op.LOAD for n in walk(e))


def collect_accesses(kernel: LoopKernel) -> tuple[list[Access], list[LoopNode]]:
  """Every access of ``kernel`` (in program order) and every loop (pre-order)."""
  for d in tuple(kernel.grid) + tuple(kernel.block): _int(d)
  sub = {v: var(tag) for v, tag in kernel.bindings}
  accesses: list[Access] = []
  loops: list[LoopNode] = []

  def loads(e: Expr, lp: tuple, conds: tuple) -> None:
    seen: set[tuple[Expr, tuple]] = set()

    def go(n: Expr, cs: tuple) -> None:
      key = (n, cs)
      if key in seen: return
      seen.add(key)
      if n.op is Op.SELECT:
        c = n.src[0]
        go(c, cs)
        if reads_memory(c):   # a data-dependent condition bounds nothing (both branches may run): one access each
          go(n.src[1], cs); go(n.src[2], cs)
        else:
          go(n.src[1], cs + (c,)); go(n.src[2], cs + (~c,))
        return
      if n.op is Op.LOAD:
        accesses.append(Access(n.arg, "read", n.src[0], lp, cs))
      for s in n.src: go(s, cs)
    go(e, conds)

  def into(s, ctx: tuple) -> tuple:
    lp, conds = ctx
    if isinstance(s, For):
      node = LoopNode(len(loops), s.var, _int(s.extent), s.kind, lp[-1].node if lp else None, len(lp))
      loops.append(node)
      return lp + (node,), conds
    if isinstance(s, If): return lp, conds + (substitute(s.cond, sub),)
    return ctx

  for s, (lp, conds) in walk_scoped(kernel.body, ((), ()), into):
    if isinstance(s, If):
      loads(substitute(s.cond, sub), lp, conds)
    elif isinstance(s, Store):
      idx, val = substitute(s.index, sub), substitute(s.value, sub)
      loads(val, lp, conds)
      loads(idx, lp, conds)
      accesses.append(Access(s.buffer, "write", idx, lp, conds))
    elif isinstance(s, CrossThreadReduce):
      _cross_thread(kernel, s, sub, lp, conds, loads, accesses)
    elif not isinstance(s, (Seq, For, Sync, AsyncCommit, AsyncWait, Comment, Mma, FragmentLoad)):
      # (a tensorized nest: its scalar loops are its accesses, and those of the fragments it reads ahead)
      raise FootprintError(f"unknown statement {type(s).__name__}")
  return accesses, loops


def _cross_thread(kernel, s: CrossThreadReduce, sub, lp, conds, loads, accesses) -> None:
  """A cross-thread reduction: every thread reads its value, the guarded thread stores the total.

  The scratch traffic is modelled coarsely: one scratch write per participant (per warp for
  shuffles), one scratch read per participant (tree) and one read by the storing thread.
  """
  val, idx, cond = substitute(s.value, sub), substitute(s.index, sub), substitute(s.cond, sub)
  loads(val, lp, conds)
  bx, by = _int(kernel.block[0]), _int(kernel.block[1])
  tx, ty, tz = var("threadIdx.x"), var("threadIdx.y"), var("threadIdx.z")
  row = tz * by + ty
  if s.method == "shuffle" and bx % 32 == 0:
    nw = bx // 32
    accesses.append(Access(s.scratch, "write", row * nw + tx // 32, lp, conds + (tx % 32 < 1,), True))
    accesses.append(Access(s.scratch, "read", row * nw, lp, conds + (cond,), True))
  else:
    accesses.append(Access(s.scratch, "write", row * bx + tx, lp, conds, True))
    accesses.append(Access(s.scratch, "read", row * bx + tx, lp, conds, True))
    accesses.append(Access(s.scratch, "read", row * bx, lp, conds + (cond,), True))
  if s.init is not None: loads(substitute(s.init, sub), lp, conds + (cond,))
  loads(idx, lp, conds + (cond,))
  accesses.append(Access(s.dst, "write", idx, lp, conds + (cond,)))


def _box(a: Access, loop_vars: list[str], extents) -> tuple[tuple[int, int], ...]:
  """Per input dimension, the range left by the conditions that bound one variable alone
  (``tx < 1``, ``k * 8 + 3 < 20``: cooperative-fetch and bound guards), conjunctions only."""
  names = list(HW_TAGS) + loop_vars
  pos = {n: p for p, n in enumerate(names)}          # an inner loop shadows an outer one
  box = [[0, e - 1] for e in extents]
  stack = list(a.conds)
  while stack:
    c = stack.pop()
    if c.op is Op.AND: stack.extend(c.src); continue
    if c.op not in (Op.LT, Op.LE, Op.GT, Op.GE, Op.EQ) or c.src[0].dtype not in INT_DTYPES: continue
    terms, k = linear(c.src[0] - c.src[1])
    if len(terms) != 1: continue
    (t, coef), = terms.items()
    if t.op is not Op.VAR or t.arg not in pos: continue
    if coef < 0: coef, k, c = -coef, -k, c.replace(op={Op.LT: Op.GT, Op.LE: Op.GE, Op.GT: Op.LT, Op.GE: Op.LE}.get(c.op, c.op))
    b = box[pos[t.arg]]                           # coef * v + k <op> 0
    if c.op in (Op.LT, Op.LE, Op.EQ): b[1] = min(b[1], (-k - (c.op is Op.LT)) // coef)
    if c.op in (Op.GT, Op.GE, Op.EQ): b[0] = max(b[0], -((k - (c.op is Op.GT)) // coef))
  return tuple((lo, max(lo - 1, hi)) for lo, hi in box)


# ---------------------------------------------------------------------------------------------
# Access -> isl map

def access_map(kernel: LoopKernel, a: Access) -> AccessMap:
  """The isl relation of one access: instance -> (hardware indices, element index)."""
  names = {tag: d for tag, d in zip(HW_TAGS, HW_DIMS)}
  dims = list(HW_DIMS)
  bounds = [f"0 <= {d} < {hw_extent(kernel, k)}" for k, d in enumerate(HW_DIMS)]
  for k, lp in enumerate(a.loops):
    names[lp.var] = f"l{k}"          # an inner loop of the same name shadows the outer one
    dims.append(f"l{k}")
    bounds.append(f"0 <= l{k} < {lp.extent}")
  exact = True
  pos = {n: dims.index(d) for n, d in names.items()}
  dg = Digits()
  index, conds = dg.rewrite(a.index), [dg.rewrite(c) for c in a.conds]
  values, digits, cons = dg.finish()
  index, conds = substitute(index, values), [substitute(c, values) for c in conds]
  names.update({t: t for t in digits})
  dims += digits
  for c in cons:
    if isinstance(c, str): bounds.append(c); continue
    lhs = aff_text(substitute(c[0], values), names)
    if lhs is None: raise FootprintError(f"internal: digit form {c[0]} is not affine")
    bounds.append(f"{lhs} = {c[1]}")
  groups, kept = [], []
  for c, c0 in zip(conds, a.conds):
    t = cond_text(c, names)
    if t is None: exact = False
    else:
      bounds.append(t)
      kept.append(c0)
      groups.append(frozenset(pos[v] for v in free_vars(c0) if v in pos))
  dom = " and ".join(bounds)
  pieces = pieces_text(index, names)

  def text(keep: int) -> str:
    head = f"[{', '.join(dims)}] -> [{''.join(d + ', ' for d in HW_DIMS[:keep])}"
    if pieces is None: return "{ " + head + f"addr] : {dom} and 0 <= addr < {_int(a.buffer.size)}" + " }"
    return "{ " + "; ".join(head + f"{v}] : {dom}" + (f" and {c}" if c else "") for c, v in pieces) + " }"
  if pieces is not None and len(pieces) > 1: groups.append(frozenset(pos[v] for v in free_vars(a.index) if v in pos))
  extents = tuple(hw_extent(kernel, k) for k in range(N_HW)) + tuple(lp.extent for lp in a.loops)
  return AccessMap(a, tuple(text(k) for k in (0, 3, 6)), exact and pieces is not None, pieces is not None,
                   extents, tuple(g for g in groups if g),
                   frozenset(free_vars(a.index).union(*(free_vars(c) for c in a.conds))),
                   _box(a, [lp.var for lp in a.loops], extents), tuple(kept))

