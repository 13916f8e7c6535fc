"""Loop-nest building: the second half of lowering (see ``minicomp.ir.lower``).

Given the inferred regions and buffers, :class:`NestBuilder` emits each kernel: its launch
dimensions, the loops of every stage in order (stages computed inside another in that stage's
loops), guards (hoisted to the innermost loop they depend on), reduction init / update,
cross-thread reductions and ``__syncthreads()`` around shared-memory stages.
"""
from __future__ import annotations

from dataclasses import replace

from minicomp.errors import ScheduleError
from minicomp.ir.expr import Expr, all_of, as_expr, cast, const, free_vars, max_, min_, select, var, walk
from minicomp.ir.rewrite import substitute
from minicomp.ir.loop import (AsyncCommit, AsyncWait, Buffer, Comment, CrossThreadReduce, For, FragmentLoad, If, LoopKernel, Mma,
                              Seq, Store, Sync, map_stmts, stmt_parts, walk_scoped, walk_stmts)
from minicomp.ir.mma import INTRINSICS, mma_statement
from minicomp.ir.ops import HALF_DTYPES, Op
from minicomp.ir.names import c_ident
from minicomp.ir.simplify import simplify
from minicomp.ir.state import BLOCK_TAGS, THREAD_TAGS, State
from minicomp.ir.te import reduce_identity

_COMBINE = {"sum": lambda a, b: a + b, "prod": lambda a, b: a * b, "max": max_, "min": min_}


def kernel_name(program: str, root: str, n_roots: int) -> str:
  """The ``__global__`` function's name of the kernel rooted at stage ``root`` in the program ``program`` of
  ``n_roots`` kernels."""
  return c_ident(f"{program}_{root}" if n_roots > 1 else f"{program}_kernel")


class NestBuilder:
  """Mixin of the lowerer that builds kernels (uses its ``info``, ``ranges``, ``s`` and ``_scratch``)."""

  def _kernel(self, root: str) -> LoopKernel:
    members = [n for n, i in self.info.items() if i.kernel == root]
    self._frag_count = 0        # FragmentLoads of this kernel (their arrays' names)
    block: list[Expr] = [const(1)] * 3
    grid: list[Expr] = [const(1)] * 3
    bindings: list[tuple[str, str]] = []
    for n in members:
      i = self.info[n]
      for it, a in i.st.annotations:
        if it not in i.st.leaves or a not in BLOCK_TAGS + THREAD_TAGS: continue
        e = i.leaf_ext[it]
        if a in BLOCK_TAGS:
          if n != root:
            raise ScheduleError(f"{_step_of(self.s, n, it)}: only the kernel's root stage may bind blockIdx ({n}.{it} -> {a})")
          grid[BLOCK_TAGS.index(a)] = e
        else:
          d = THREAD_TAGS.index(a)
          block[d] = simplify(max_(block[d], e))
        bindings.append((i.cvar[it], a))
    self.block = block
    self._lane_vars = [cv for cv, a in bindings if a == "threadIdx.x"]
    body = _tidy(self._stage_stmt(root))
    _check_mma_guards(body, {cv for cv, a in bindings if a in THREAD_TAGS})
    params_seen: dict[str, tuple[Buffer, bool]] = {}
    allocs = []
    for n in members:
      i = self.info[n]
      if i.buffer.scope == "global": params_seen[i.buffer.name] = (i.buffer, True)
      elif i.buffer not in allocs: allocs.append(i.buffer)
    allocs += self._scratch.pop(root, [])
    for b in _buffers_read(body):
      if b.scope == "global" and b.name not in params_seen: params_seen[b.name] = (b, False)
    order = [b for b in self.in_buffers.values()] + [i.buffer for i in self.info.values()]
    params = [b for b in order if b.name in params_seen]
    n_roots = len([x for x in self.info.values() if x.st.attach.kind == "root"])
    unroll = max((self.info[m].st.auto_unroll_max_step for m in members if m in self.info), default=0)
    return LoopKernel(kernel_name(self.name, root, n_roots), params, allocs, bindings, _dims(grid), _dims(block), body,
                      members, unroll, written={b.name for b, w in params_seen.values() if w}, root=root)

  def _stage_stmt(self, name: str):
    """The statements of stage ``name``: its loop nest around the store (or the reduction's init, update
    and cross-thread combine), the stages attached inside it, and its guards, each at the innermost loop
    it depends on."""
    i = self.info[name]
    st = i.st
    leaves = st.leaves
    anns = dict(st.annotations)
    guards = self._stage_guards(name, i)
    reduce_leaves = [x for x in leaves if st.kind(x) == "reduce"]
    red_names = {i.cvar[x] for x in reduce_leaves}
    sp_guards = [g for g in guards if not (free_vars(g) & red_names)]
    inner, init_stmt, ctr = self._stage_body(name, i, reduce_leaves, sp_guards)
    unroll_kind = self._auto_unroll(i)
    first_red = leaves.index(reduce_leaves[0]) if reduce_leaves else None
    at_level = self._guard_levels(name, i, guards, first_red)
    mma = dict(st.tensorize)
    pipelined = self._pipelined_loops(name, i)
    ahead: dict[int, list] = {}     # leaf index -> FragmentLoads placed just before its loop

    def loop(it, body):
      a = anns.get(it, "none")
      if a in BLOCK_TAGS or a in THREAD_TAGS or _is_one(i.leaf_ext[it]): return body
      kind = {"unroll": "unroll", "vectorize": "vectorize", "vthread": "vthread"}.get(a)
      if kind is None: return For(i.cvar[it], i.leaf_ext[it], body, unroll_kind.get(it, "serial"), it in unroll_kind)
      return For(i.cvar[it], i.leaf_ext[it], body, kind)

    def nest(j):
      if j == len(leaves): return self._guard(inner, at_level.get(j - 1, [])) if j else inner
      it = leaves[j]
      here = [o for o in self.info.values()
              if o.st.attach.kind == "at" and o.st.attach.stage == name and o.st.attach.iter == it]
      attached = [self._attached_stmt(o) for o in here if not (it in pipelined and o.slots)]
      body = nest(j + 1)
      if j + 1 < len(leaves): body = self._guard(body, at_level.get(j, []))
      body = Seq(tuple(attached) + (body,)) if attached else body
      if it in pipelined: stmt = self._pipelined(name, i, it, [o for o in here if o.slots], body, loop)
      else: stmt = loop(it, body)
      if it in mma: stmt = self._mma(name, i, j, stmt, mma[it], unroll_kind, at_level, ahead)
      if ahead.get(j): stmt = Seq((*ahead.pop(j), stmt))
      if first_red is not None and j == first_red:
        init_nest = init_stmt
        for x in reversed(leaves[j:]):
          if st.kind(x) == "spatial": init_nest = loop(x, init_nest)
        stmt = Seq((init_nest, stmt))
        if ctr is not None: stmt = Seq((stmt, ctr))
      return stmt
    return Seq((Comment(f"stage {name}" + (f" ({i.scope})" if st.attach.kind == "at" else "")),
                self._guard(nest(0), at_level.get(-1, []))))

  def _pipelined_loops(self, name: str, i) -> set[str]:
    """The loops of stage ``name`` whose shared fetches run ahead (``Schedule.pipeline``; one of extent 1 runs as
    it is); a ScheduleError where a later step moved the loop or its shared stages away, or annotated it."""
    out = set()
    for it, _ in i.st.pipeline:
      where = _step_of(self.s, name, it, "pipeline")
      if it not in i.st.leaves:
        raise ScheduleError(f"{where}: loop {it!r} of {name!r} no longer exists (a later split or fuse); apply "
                            "pipeline after the steps that restructure that loop")
      if i.st.annotation(it) != "none":
        raise ScheduleError(f"{where}: loop {it!r} is now annotated {i.st.annotation(it)!r}; a pipelined loop runs in order")
      if _is_one(i.leaf_ext[it]): continue
      if not any(o.slots and o.st.attach.stage == name and o.st.attach.iter == it for o in self.info.values()):
        raise ScheduleError(f"{where}: no shared-memory stage is computed at {name}.{it} any more")
      out.add(it)
    return out

  def _pipelined(self, name: str, i, it: str, fetched: list, body, loop):
    """Loop ``it`` of stage ``name`` with its shared ``fetched`` stages run ``stages - 1`` iterations ahead
    (``Schedule.pipeline``): each tile has ``stages`` slots, iteration ``k``'s at ``k % stages`` (lowering's
    ``_flat``). A prologue fetches the first ``stages - 1`` tiles, one commit group each; iteration ``k`` waits
    until its own group has landed (at most ``stages - 2`` younger ones in flight), synchronises the block (every
    thread's copies visible; every thread done with iteration ``k - 1``, whose slot the next fetch takes), fetches
    tile ``k + stages - 1`` and computes on tile ``k``. A barrier after the loop keeps a later fetch (an
    enclosing loop's next round) out of slots still being read."""
    stages = dict(i.st.pipeline)[it]
    ko, ext = i.cvar[it], i.leaf_ext[it]
    tiles = {o.buffer for o in fetched}
    fetch = Seq(tuple(map_stmts(self._stage_stmt(o.st.name),
                                lambda s: replace(s, async_copy=True) if isinstance(s, Store) and s.buffer in tiles else s)
                      for o in fetched))
    pre = f"{ko}_ahead"
    if isinstance(stages, int): self.ranges[pre] = (0, stages - 2)     # (a symbolic count: a sketch's, not emitted)

    def at(k: Expr):
      return self._guard(_substitute_stmt(fetch, {ko: k}, lambda e: simplify(e, self.ranges)), [k < ext])
    prologue = For(pre, simplify(as_expr(stages) - 1), Seq((at(var(pre)), AsyncCommit())), "unroll")
    steady = Seq((AsyncWait(stages - 2), Sync(), at(var(ko) + (stages - 1)), AsyncCommit(), body))
    note = Comment(f"{', '.join(o.st.name for o in fetched)}: {stages} stages, fetched {stages - 1} iterations of "
                   f"{it} ahead (cp.async)")
    return Seq((note, prologue, loop(it, steady), Sync()))

  def _mma(self, name: str, i, j: int, scalar, intrinsic: str, unroll_kind: dict, at_level: dict, ahead: dict):
    """The tensorized loops of stage ``name`` (from leaf ``j`` inward, lowered to ``scalar``) as a warp's mma.sync;
    its fragment reads hoisted out of the loops that would repeat them (:meth:`_read_ahead`, into ``ahead``)."""
    where = _step_of(self.s, name, None, "tensorize")
    b0 = self.block[0]
    if not (b0.is_const and int(b0.arg) % 32 == 0):
      raise ScheduleError(f"{where}: the block's x dimension ({b0!r} threads) must be a multiple of 32: each warp "
                          "computes its tiles together")
    leaves = i.st.leaves[j:]
    spatial = tuple(i.cvar[x] for x in leaves if i.st.kind(x) == "spatial")
    k_var = next(i.cvar[x] for x in leaves if i.st.kind(x) == "reduce")
    intr = INTRINSICS[intrinsic]
    m = mma_statement(scalar, intr, spatial, k_var, self._lane_vars, self.ranges, where)
    a = self._read_ahead(name, i, j, m.a_ld, m.a, intr.a_regs, intr.dtype, unroll_kind, at_level, ahead)
    b = self._read_ahead(name, i, j, m.b_ld, m.b, intr.b_regs, intr.b_dtype, unroll_kind, at_level, ahead)
    return replace(m, a_frag=a, b_frag=b)

  def _read_ahead(self, name: str, i, j: int, ld, elements, regs: int, dtype: str, unroll_kind: dict, at_level: dict,
                  ahead: dict):
    """Where the tensorized statement at leaf ``j`` of stage ``name`` takes an operand's fragment from (its
    ldmatrix ``ld`` or its ``elements``): None to read it in place, where no loop between the shared tile's fill
    and the statement repeats the read (or the operand is not one shared tile filled inside this stage, a loop it
    would need as an array index is not unrolled, or a guard inside the loops it would leave); else the (array,
    index variables) of a :class:`FragmentLoad` placed before the outermost loop that repeats it, an array over
    the loops inside that one which the operand varies with."""
    reads = {n.arg for e in elements for n in walk(e) if n.op is Op.LOAD}
    if len(reads) != 1: return None
    (buf,) = reads
    fill = next((o for o in self.info.values() if o.buffer is buf), None)
    leaves = i.st.leaves
    if fill is None or fill.st.attach.kind != "at" or fill.st.attach.stage != name: return None
    between = []
    for x in leaves[leaves.index(fill.st.attach.iter) + 1:j]:
      ann, ext = i.st.annotation(x), i.leaf_ext[x]
      if ann in BLOCK_TAGS or ann in THREAD_TAGS or _is_one(ext): continue
      if not ext.is_const or ann in ("vectorize", "vthread"): return None
      between.append((i.cvar[x], int(ext.arg), ann == "unroll" or unroll_kind.get(x) == "unroll", leaves.index(x)))
    used = set().union(*(free_vars(e) for e in elements), free_vars(ld.index) if ld else set())
    repeats = [k for k, (v, _, _, _) in enumerate(between) if v not in used]
    if not repeats: return None
    inside = between[repeats[0] + 1:]
    if not all(unrolled for v, _, unrolled, _ in inside if v in used): return None   # (constant array indices)
    if any(at_level.get(q) for q in range(between[repeats[0]][3], j)): return None
    dims = tuple((v, e) for v, e, _, _ in inside if v in used)
    frag = f"mc_frag_{buf.name}_{self._frag_count}"
    self._frag_count += 1
    ahead.setdefault(between[repeats[0]][3], []).append(FragmentLoad(frag, dims, regs, dtype, tuple(elements), ld))
    return frag, tuple(v for v, _ in dims)

  def _guard(self, stmt, gs: list[Expr]):
    """``stmt`` under the guards ``gs`` (simplified: none where the ranges prove them)."""
    return _if(simplify(all_of(*gs), self.ranges), stmt) if gs else stmt

  def _stage_guards(self, name: str, i) -> list[Expr]:
    """The stage's predicates, plus: one thread per block dimension the stage does not use, threads past a
    bound loop's extent, and the guards of the thread loops of the stages it is computed inside."""
    st = i.st
    guards = list(i.preds)
    if i.scope in ("global", "shared"):
      bound = {a for _, a in st.annotations}
      for d, tag in enumerate(THREAD_TAGS):
        # a shared-memory stage covers the whole block's region: one thread per unbound dim is enough
        if not _is_one(self.block[d]) and tag not in bound and (i.scope == "shared" or not self._under_tag(name, tag)):
          guards.append(var(f"threadIdx.{'xyz'[d]}") < 1)
    for it, a in st.annotations:
      if a in THREAD_TAGS and it in st.leaves and i.leaf_ext[it] != self.block[THREAD_TAGS.index(a)]:
        # written on the raw index: the C variable's range is the loop extent, which would prove it true
        guards.append(var(a) < i.leaf_ext[it])
    return guards + self._inherited_thread_guards(name)

  def _stage_body(self, name: str, i, reduce_leaves: list[str], sp_guards: list[Expr]):
    """``(innermost statement, the reduction's init statement or None, the statement after the reduction loops or
    None: the cross-thread combine, or a half reduction's rounding of its float accumulator)``."""
    st = i.st
    t = st.tensor
    red = t.reduce
    ct = dict(st.cross_thread)
    idx = self._flat(i, [i.root_val[a.name] for a in t.axes])
    value = self._rewrite_loads(substitute(i.body.src[0] if red else i.body, i.root_val))
    value = simplify(value, self.ranges)
    if red is None:      # (a tile that overhangs its tensor under a padding mma: zeros there, lower.py)
      if i.fill: value = select(all_of(*i.fill), value, const(0, value.dtype))
      return Store(i.buffer, idx, value), None, None
    if not ct:
      init_v = red.init if red.init is not None else reduce_identity(red.combiner, t.dtype)
      if i.buffer.stored_dtype in HALF_DTYPES:      # (a half tensor's shared tile and registers hold floats)
        return self._float_accumulator(name, i, idx, value, init_v, reduce_leaves, sp_guards)
      load_self = Expr.make(Op.LOAD, t.dtype, (idx,), i.buffer)
      return (Store(i.buffer, idx, _COMBINE[red.combiner](load_self, value)),
              self._guard(Store(i.buffer, idx, init_v), sp_guards), None)
    if _spatial_inside(st, reduce_leaves):
      raise ScheduleError(f"{_step_of(self.s, name, list(ct)[0])}: with a cross-thread reduction, every spatial loop of "
                          f"{name!r} must be outside its reduction loops; order is {list(st.leaves)}")
    acc = Buffer(c_ident(name + "_red"), t.dtype, "local", const(1))
    init_v = reduce_identity(red.combiner, t.dtype)
    inner = Store(acc, const(0), _COMBINE[red.combiner](Expr.make(Op.LOAD, t.dtype, (const(0),), acc), value))
    scratch = Buffer(c_ident(name + "_red_buf"), t.dtype, "shared", simplify(self.block[0] * self.block[1] * self.block[2]))
    self._scratch.setdefault(i.kernel, []).extend([acc, scratch])
    it_ct = list(ct)[0]
    tx_is = var(i.cvar[it_ct])
    ctr = CrossThreadReduce(red.combiner, Expr.make(Op.LOAD, t.dtype, (const(0),), acc), i.leaf_ext[it_ct], ct[it_ct],
                            i.buffer, idx, simplify(all_of(tx_is < 1, *sp_guards), self.ranges), scratch, red.init)
    return inner, Store(acc, const(0), init_v), ctr

  def _float_accumulator(self, name: str, i, idx: Expr, value: Expr, init_v: Expr, reduce_leaves: list[str],
                         sp_guards: list[Expr]):
    """A half reduction stored in global memory accumulates in a float register and is rounded to its
    type once, after its reduction loops (accumulating in the buffer would round at every step: 9% off over 4096
    products). That needs every spatial loop outside the reduction loops, as a cross-thread reduction does."""
    st, red = i.st, i.st.tensor.reduce
    if _spatial_inside(st, reduce_leaves):
      raise ScheduleError(f"stage {name!r} ({st.tensor.dtype}, in global memory) has spatial loops inside its "
                          f"reduction loops (order {list(st.leaves)}): it would accumulate in {st.tensor.dtype}; "
                          "cache_write it to local, or reorder its reduction loops innermost")
    acc = Buffer(c_ident(name + "_acc"), "float32", "local", const(1))
    self._scratch.setdefault(i.kernel, []).append(acc)
    load_acc = Expr.make(Op.LOAD, "float32", (const(0),), acc)
    write_back = self._guard(Store(i.buffer, idx, cast(load_acc, st.tensor.dtype)), sp_guards)
    return (Store(acc, const(0), _COMBINE[red.combiner](load_acc, cast(value, "float32"))),
            Store(acc, const(0), cast(init_v, "float32")), write_back)

  def _guard_levels(self, name: str, i, guards: list[Expr], first_red: int | None) -> dict[int, list[Expr]]:
    """Each guard at the innermost loop it depends on (hoisted out of the loops it does not depend on), but
    never above a point where another stage is attached or a reduction starts: those may hold barriers or
    cross-thread reductions that every thread must reach. Level -1: outside every loop."""
    leaves = i.st.leaves
    pos = {i.cvar[x]: p for p, x in enumerate(leaves)}
    floor = max([leaves.index(o.st.attach.iter) for o in self.info.values()
                 if o.st.attach.kind == "at" and o.st.attach.stage == name] + ([first_red] if first_red is not None else []) + [-1])
    at_level: dict[int, list[Expr]] = {}
    for g in guards:
      lv = max([pos[v] for v in free_vars(g) if v in pos] + [floor])
      at_level.setdefault(lv, []).append(g)
    return at_level

  def _attached_stmt(self, o) -> Seq:
    s = self._stage_stmt(o.st.name)
    return Seq((Sync(), s, Sync())) if o.scope == "shared" else s

  def _inherited_thread_guards(self, name: str) -> list[Expr]:
    """A stage computed inside an ancestor's loop bound to a thread index that covers fewer
    threads than the block runs only on those threads, unless it binds that index itself (a
    cooperative fetch uses the whole block). Without this, the extra threads would compute
    with out-of-range indices (reads past a shared tile) and only their final store be guarded."""
    own = {a for _, a in self.info[name].st.annotations if a in THREAD_TAGS}
    out = []
    for t, it in self._ancestors(name):
      anc = self.info[t]
      inside = anc.st.leaves[:anc.st.leaves.index(it) + 1]
      for x, a in anc.st.annotations:
        if a in THREAD_TAGS and a not in own and x in inside and anc.leaf_ext[x] != self.block[THREAD_TAGS.index(a)]:
          out.append(var(a) < anc.leaf_ext[x])
      own |= {a for x, a in anc.st.annotations if a in THREAD_TAGS and x in inside}
    return out

  def _under_tag(self, name: str, tag: str) -> bool:
    for t, it in self._ancestors(name):
      ts = self.s.stage(t)
      if tag in {ts.annotation(x) for x in ts.leaves[:ts.leaves.index(it) + 1]}: return True
    return False

  def _auto_unroll(self, i) -> dict[str, str]:
    """The loops an ``auto_unroll_max_step`` pragma unrolls: the innermost unannotated ones of constant extent whose
    product stays within it, up to the first that holds a block barrier (a shared stage computed inside it): such a
    loop's copies would each repeat the fetch and its two __syncthreads, which gains nothing (the barriers order the
    copies anyway) and can cost NVVM tens of seconds (a 256-step k-loop of a tuned matmul, 26 s); the analytic model
    counts them rolled too (search/static/analytic.py)."""
    m = i.st.auto_unroll_max_step
    out: dict[str, str] = {}
    if m <= 0: return out
    prod = 1
    for it in reversed(i.st.leaves):
      if i.st.annotation(it) != "none": continue
      e = i.leaf_ext[it]
      if not e.is_const or self._holds_barrier(i.st.name, it): break
      prod *= int(e.arg)
      if prod > m: break
      out[it] = "unroll"
    return out

  def _holds_barrier(self, name: str, it: str) -> bool:
    """Whether a stage computed at loop ``it`` of stage ``name`` is shared (fetched between barriers) or holds
    such a stage in one of its own loops."""
    return any(o.scope == "shared" or any(self._holds_barrier(o.st.name, x) for x in o.st.leaves)
               for o in self.info.values() if o.st.attach.kind == "at" and o.st.attach.stage == name
               and o.st.attach.iter == it)


def _substitute_stmt(s, mapping: dict[str, Expr], tidy):
  """A fetch's statements with loop variables replaced (``mapping``), each expression then passed to ``tidy``."""
  def f(x):
    if isinstance(x, For): return replace(x, extent=tidy(substitute(x.extent, mapping)))
    if isinstance(x, If): return _if(tidy(substitute(x.cond, mapping)), x.then)
    if isinstance(x, Store):
      return replace(x, index=tidy(substitute(x.index, mapping)), value=tidy(substitute(x.value, mapping)))
    if isinstance(x, (Seq, Sync, Comment)): return x
    raise ScheduleError(f"a pipelined fetch holds a {type(x).__name__}: only loops, guards and stores run ahead")
  return map_stmts(s, f)


def _if(cond: Expr, then):
  """``If(cond, then)``, or ``then`` / nothing where ``cond`` is a constant."""
  return (then if cond.arg else Seq(())) if cond.is_const else If(cond, then)


def _dims(es: list[Expr]) -> tuple:
  """Launch dimensions: ints when concrete, Exprs of the schedule parameters when symbolic."""
  return tuple(int(e.arg) if e.is_const else e for e in es)


def _is_one(e: Expr) -> bool:
  return e.is_const and e.arg == 1


def _tidy(s):
  """Flatten nested sequences, drop a barrier that directly follows another one, and one that orders nothing."""
  def flat(x):
    if not isinstance(x, Seq): return x
    out: list = []
    for y in x.stmts:
      for z in (y.stmts if isinstance(y, Seq) else (y,)):
        if isinstance(z, Sync) and out and isinstance(out[-1], Sync): continue
        out.append(z)
    out = _needed_barriers(out)
    return out[0] if len(out) == 1 else Seq(tuple(out))
  return map_stmts(s, flat)


def _needed_barriers(stmts: list) -> list:
  """``stmts`` without the barriers between two runs of plain statements (loops, guards, stores) that share no
  memory one of them writes: ``sync; fetch A; sync; fetch B; sync`` is ``sync; fetch A; fetch B; sync`` where B
  neither reads nor writes A's tile and A reads nothing B writes. A barrier whose runs reach past the sequence (no
  barrier before or after it here) stays: what it orders is not all in view. So does every barrier of a sequence
  that holds tensor-core statements: their fragments and accumulators leave few registers, and the loads of two
  fetches in flight at once made ptxas spill (a bf16 tensor-core convolution for sm_86: 70 registers, no spills,
  with the barrier; 64 and four spill stores without)."""
  bars = [k for k, z in enumerate(stmts) if isinstance(z, Sync)]
  if len(bars) < 3 or any(isinstance(x, (Mma, FragmentLoad)) for z in stmts for x in walk_stmts(z)): return stmts
  drop = set()
  start = None                     # where the run before the barrier under test begins (after the last kept one)
  for a, b, c in zip(bars, bars[1:], bars[2:]):
    start = a + 1 if start is None else start
    before, after = [z for k, z in enumerate(stmts[start:b], start) if k not in drop], stmts[b + 1:c]
    if _plain(before) and _plain(after) and not _conflict(_touched(before), _touched(after)):
      drop.add(b)
    else:
      start = None
  return [z for k, z in enumerate(stmts) if k not in drop]


def _plain(stmts: list) -> bool:
  """Only loops, guards, comments and synchronous stores (no barrier, cross-thread reduction, asynchronous copy
  or tensor-core statement)."""
  return all(isinstance(x, (For, Seq, If, Comment)) or (isinstance(x, Store) and not x.async_copy)
             for s in stmts for x in walk_stmts(s))


def _touched(stmts: list) -> tuple[set, set]:
  """(the names of the buffers read, those written) by ``stmts``, registers (local buffers) left out."""
  reads, writes = set(), set()
  for s in stmts:
    reads |= {b.name for b in _buffers_read(s) if b.scope != "local"}
    writes |= {x.buffer.name for x in walk_stmts(s) if isinstance(x, Store) and x.buffer.scope != "local"}
  return reads, writes


def _conflict(first: tuple[set, set], then: tuple[set, set]) -> bool:
  (r1, w1), (r2, w2) = first, then
  return bool(w1 & (r2 | w2) or r1 & w2)


def _buffers_read(stmt) -> list[Buffer]:
  out: list[Buffer] = []

  for s in walk_stmts(stmt):
    for e in stmt_parts(s)[1]:
      for n in walk(e):
        if n.op is Op.LOAD and isinstance(n.arg, Buffer) and n.arg not in out: out.append(n.arg)
  return out


def _step_of(s: State, stage: str, it: str | None, kind: str | None = None) -> str:
  """The step that last touched loop ``it`` of ``stage`` (or the last ``kind`` step on it), for error messages."""
  for k in range(len(s.steps) - 1, -1, -1):
    st = s.steps[k]
    if getattr(st, "stage", None) != stage: continue
    if (it is not None and getattr(st, "iter", None) == it) or (kind is not None and st.kind == kind):
      return f"step {k} {st}"
  return f"stage {stage}" + (f" loop {it}" if it else "")


def _check_mma_guards(body, thread_vars: set[str]) -> None:
  """A guard around a tensorized loop nest must be the same for every lane of a warp (mma.sync needs all 32)."""
  def into(s, conds):
    return conds + (s.cond,) if isinstance(s, If) else conds
  for s, conds in walk_scoped(body, (), into):
    if not isinstance(s, Mma): continue
    for c in conds:
      used = {v for v in free_vars(c) if v in thread_vars or v.startswith("threadIdx")}
      if used:
        raise ScheduleError(f"the tensorized loops of {s.acc.name} sit under the guard {c!r}, which depends on the "
                            f"thread index ({', '.join(sorted(used))}): some lanes of a warp would skip mma.sync. "
                            "Make the tiles divide the tensor and the threads fill the block")


def _spatial_inside(st, reduce_leaves: list[str]) -> bool:
  """Whether a spatial loop of stage ``st`` lies inside its first reduction loop (so one register cannot
  accumulate the reduction: a cross-thread or a half one needs them all outside)."""
  return bool(reduce_leaves) and any(st.kind(x) == "spatial" for x in st.leaves[st.leaves.index(reduce_leaves[0]):])
