"""Lowering: a schedule State -> a loop-nest Program (kernels, buffers, launch configs).

Stages computed at root become kernels; stages computed at a loop of another stage are
emitted inside that loop. The work happens in three passes:

1. *inline*: bodies of inlined stages are substituted into their consumers;
2. *bound inference* (consumers first): a stage computed at loop ``L`` of ``T`` covers the
   region its consumers read while the loops inside ``L`` sweep their range (for a shared
   buffer the threadIdx loops sweep too: the block fills it together). Regions are symbolic
   in the loops outside ``L``; their extents must not be (a tile has a fixed size);
3. *nest building*: loops, guards for non-divisible splits and partial regions, reduction
   init / update, cross-thread reductions, ``__syncthreads()`` around shared-memory stages.

Each kernel then gets its index type (``LoopKernel.index_dtype``, see :func:`choose_index_dtype`):
int32 when every index provably fits, int64 otherwise; :func:`force_index64` forces int64.
"""
from __future__ import annotations

import contextlib
import contextvars
import math
from dataclasses import dataclass, field, replace

from minicomp.errors import LoweringError, ScheduleError
from minicomp.ir.bound import max_over, relax, shift_free_extent
from minicomp.ir.expr import Expr, as_expr, const, free_vars, max_, min_, var, walk
from minicomp.ir.rewrite import map_loads, substitute
from minicomp.ir.loop import Buffer, For, LoopKernel, Program, stmt_parts, walk_stmts
from minicomp.ir.ops import HALF_DTYPES, Op
from minicomp.ir.linear import _bounds, _ctx, linear
from minicomp.ir.simplify import simplify
from minicomp.ir.state import BLOCK_TAGS, INLINE, THREAD_TAGS, Split, Stage, State
from minicomp.ir.names import c_ident, check_distinct
from minicomp.ir.nest import NestBuilder, _is_one, _step_of, kernel_name

@dataclass
class _Info:
  """What lowering knows about one non-inlined compute stage."""
  st: Stage
  body: Expr                                  # inlined body (REDUCE node for reductions)
  kernel: str = ""
  scope: str = "global"
  lo: list[Expr] = field(default_factory=list)      # region start per output dim (symbolic in outer loops)
  ext: list[Expr] = field(default_factory=list)     # region extent per output dim
  root_ext: dict[str, Expr] = field(default_factory=dict)
  leaf_ext: dict[str, Expr] = field(default_factory=dict)
  cvar: dict[str, str] = field(default_factory=dict)       # leaf iter -> C variable name
  root_val: dict[str, Expr] = field(default_factory=dict)  # root axis -> value in loop variables
  preds: list[Expr] = field(default_factory=list)
  fill: list[Expr] = field(default_factory=list)   # where the stage stores its value, else zero (_computes_padding)
  buffer: Buffer | None = None
  strides: list[Expr] = field(default_factory=list)
  vdims: list[tuple[str, Expr]] = field(default_factory=list)   # injected virtual-thread dims: (C var, extent)
  vt_ext: dict[str, Expr] = field(default_factory=dict)          # extents of the injected vthread loops
  radix: list[tuple[tuple[int, int], ...] | None] = field(default_factory=list)  # per dim, a strided region: below
  slots: tuple[str, int | Expr, Expr] | None = None   # a pipelined shared tile: (the loop's C variable, stages, size)


class _Lowerer(NestBuilder):
  def __init__(self, state: State, name: str):
    self.s, self.name = state, name
    self.info: dict[str, _Info] = {}
    self.in_buffers: dict[str, Buffer] = {}
    self.ranges: dict[str, tuple[int, int]] = {}     # concrete ranges of all loop variables
    self.sym_ranges: dict[str, tuple[Expr, Expr]] = {}
    self._scratch: dict[str, list[Buffer]] = {}

  # ----------------------------------------------------------------------------------------
  def run(self) -> Program:
    s = self.s
    self._infer_bounds()
    for i in self.info.values(): i.kernel = self._kernel_root(i.st.name)
    self._make_buffers()
    kernels = [self._kernel(n) for n, i in self.info.items() if i.st.attach.kind == "root"]
    for k in kernels: k.index_dtype = choose_index_dtype(k)
    temps = [i.buffer for i in self.info.values() if i.buffer.role == "temp" and i.buffer.scope == "global"]
    outs = [self.info[o].buffer for o in s.outputs]
    ins = [self.in_buffers[st.name] for st in s.stages if st.is_placeholder]
    shapes = {c_ident(st.name): st.tensor.shape for st in s.stages}
    return Program(kernels, ins, outs, temps, shapes)

  def _infer_bounds(self) -> None:
    """Check the attach points, inline, and infer every stage's region and loop extents (consumers first)."""
    s = self.s
    for st in s.stages:
      if st.attach.kind == "at":
        t = s.stage(st.attach.stage)
        if t.attach == INLINE: raise ScheduleError(f"compute_at {st.name} -> {t.name}: the target stage is inlined")
        if st.attach.iter not in t.leaves:
          raise ScheduleError(f"compute_at {st.name} -> {t.name}.{st.attach.iter}: that loop no longer exists")
    check_distinct([st.name for st in s.stages], "stages", LoweringError)
    for st in s.stages:
      if st.is_placeholder:
        self.in_buffers[st.name] = Buffer(c_ident(st.name), st.tensor.dtype, "global", const(math.prod(st.tensor.shape)), "input")
    bodies = self._inline()
    for st in s.stages:
      if not st.is_placeholder and st.attach != INLINE:
        self.info[st.name] = _Info(st, bodies[st.name])
    for st in s.stages:
      if st.attach.kind == "at" and st.name in s.outputs: self._check_output_at(st, bodies)
    self._name_vars()
    self.loop_vars = {c for i in self.info.values() for c in i.cvar.values()}
    self._vt_pending: dict[str, list[str]] = {}
    self._zero_fill: set[str] = set()         # tiles a padding tensorized stage reads (_computes_padding)
    for name in reversed(list(self.info)):
      self._infer(self.info[name])
      self._plan_vthreads(self.info[name])

  # ----------------------------------------------------------------------------------------
  def _inline(self) -> dict[str, Expr]:
    out: dict[str, Expr] = {}
    for st in self.s.stages:
      if st.is_placeholder: continue

      def sub(n: Expr) -> Expr:
        src = self.s.stage(n.arg.name)
        if src.attach != INLINE: return n
        b = out[src.name]
        return substitute(b, {a.name: i for a, i in zip(src.tensor.axes, n.src)})
      out[st.name] = map_loads(st.tensor.body, sub)
    return out

  def _name_vars(self):
    count: dict[str, int] = {}
    for i in self.info.values():
      for it in i.st.leaves: count[c_ident(it)] = count.get(c_ident(it), 0) + 1
    taken = {b.name for b in self.in_buffers.values()} | {c_ident(n) for n in self.info}
    for i in self.info.values():
      for it in i.st.leaves:
        c = c_ident(it)
        i.cvar[it] = c if count[c] == 1 and c not in taken else c_ident(f"{i.st.name}_{it}")

  def _check_output_at(self, st: Stage, bodies: dict[str, Expr]) -> None:
    """An output computed inside another stage (``compute_at``): that stage must be a root stage of its shape, the
    output's only reader, reading it at its own indices (after inlining), at a loop inside all of its thread
    loops -- so each thread computes and stores exactly the elements it then reads, and every element once."""
    t = self.s.stage(st.attach.stage)
    where = f"{_step_of(self.s, st.name, None, 'compute_at')} (an output of the DAG)"
    readers = [n for n, b in bodies.items() if n != st.name and self.s.stage(n).attach != INLINE
               and any(x.op is Op.LOAD and x.arg.name == st.name for x in walk(b))]
    if readers != [t.name]:
      raise ScheduleError(f"{where}: {t.name!r} must be its only reader; read by {readers}")
    if t.attach.kind != "root" or t.tensor.shape != st.tensor.shape:
      raise ScheduleError(f"{where}: {t.name!r} must be a root stage of the same shape")
    axes = [a.name for a in t.tensor.axes]
    for x in walk(bodies[t.name]):
      if x.op is Op.LOAD and x.arg.name == st.name and [e.arg if e.op is Op.VAR else None for e in x.src] != axes:
        raise ScheduleError(f"{where}: {t.name!r} reads it at {[str(e) for e in x.src]}, not elementwise at {axes}")
    bound = [k for k, x in enumerate(t.leaves) if t.annotation(x) in THREAD_TAGS]
    at = t.leaves.index(st.attach.iter)
    others = {a for n in self.info if n != t.name and self._kernel_root(n) == t.name
              for _, a in self.s.stage(n).annotations if a in THREAD_TAGS}
    if any(k > at for k in bound) or not others <= {t.annotation(t.leaves[k]) for k in bound}:
      raise ScheduleError(f"{where}: loop {st.attach.iter!r} is outside a thread loop of the kernel; attach it "
                          f"inside {t.name!r}'s thread loops, so each thread stores what it reads")

  def _kernel_root(self, name: str) -> str:
    st = self.s.stage(name)
    return name if st.attach.kind == "root" else self._kernel_root(st.attach.stage)

  def _ancestors(self, name: str) -> list[tuple[str, str]]:
    """(stage, loop) attach points from ``name`` up to its kernel root."""
    out, st = [], self.s.stage(name)
    while st.attach.kind == "at":
      out.append((st.attach.stage, st.attach.iter)); st = self.s.stage(st.attach.stage)
    return out

  def _inside(self, t: str, it: str) -> set[str]:
    """C variables of every loop nested strictly inside loop ``it`` of stage ``t``."""
    ti = self.info[t]
    pos = ti.st.leaves.index(it)
    out = {ti.cvar[x] for x in ti.st.leaves[pos + 1:]}
    for o in self.info.values():
      if o.st.attach.kind == "at" and o.st.attach.stage == t and ti.st.leaves.index(o.st.attach.iter) >= pos:
        out |= self._subtree(o)
    return out

  def _subtree(self, o: _Info) -> set[str]:
    out = set(o.cvar.values())
    for p in self.info.values():
      if p.st.attach.kind == "at" and p.st.attach.stage == o.st.name: out |= self._subtree(p)
    return out

  def _bound_leaves(self, i: _Info, tags) -> list[str]:
    return [i.cvar[it] for it, a in i.st.annotations if a in tags and it in i.st.leaves]

  # ----------------------------------------------------------------------------------------
  def _infer(self, i: _Info):
    st, t = i.st, i.st.tensor
    shape = [const(d) for d in t.shape]
    if st.attach.kind == "root":
      i.lo, i.ext = [const(0)] * len(shape), shape
      i.scope = "global"
    else:
      i.scope = "global" if st.name in self.s.outputs else st.scope or self._infer_scope(st)
      i.lo, i.ext = self._region(i, shape)
    if len(i.radix) != len(shape): i.radix = [None] * len(shape)
    i.root_ext = {a.name: e for a, e in zip(t.axes, i.ext)}
    i.root_ext.update({a.name: a.extent for a in t.reduce_axes})
    i.leaf_ext = st.leaf_extents(i.root_ext)
    i.leaf_ext.update(i.vt_ext)
    for it in st.leaves:
      e = i.leaf_ext[it]
      self.sym_ranges[i.cvar[it]] = (const(0), e - 1)
      self.ranges[i.cvar[it]] = (0, int(e.arg) - 1) if e.is_const else (0, None)
      for v in free_vars(e): self.ranges.setdefault(v, (1, None))   # schedule parameters are positive
    # leaf values -> root values
    # a loop of extent 1 is no loop: its variable is 0 everywhere
    val: dict[str, Expr] = {it: const(0) if _is_one(i.leaf_ext[it]) else var(i.cvar[it]) for it in st.leaves}
    preds: list[Expr] = []
    tiles = self._computes_padding(i) if st.attach.kind == "at" else None
    pad_k = tiles is not None and _every_read_spans(i.body, {a.name for a in t.reduce_axes})
    for r in reversed(st.relations):
      if isinstance(r, Split):
        v = val[r.children[0]]
        for c, f in zip(r.children[1:], r.factors): v = v * as_expr(f) + val[c]
        val[r.parent] = v
        prod = const(1)
        for f in r.factors: prod = prod * as_expr(f)
        divisible = simplify(i.leaf_ext[r.parent] % prod)
        padded = pad_k and st.kind(r.parent) == "reduce"     # (k past the end: zeros from both operands' tiles)
        if not (divisible.is_const and divisible.arg == 0) and not padded: preds.append(v < i.leaf_ext[r.parent])
      else:
        exts = [i.leaf_ext[p] for p in r.parents]
        for k, p in enumerate(r.parents):
          stride = const(1)
          for e in exts[k + 1:]: stride = stride * e
          v = val[r.child] // stride
          val[p] = v if k == 0 else v % exts[k]
    self._zero_fill |= tiles or set()
    within = []          # the region's points inside the tensor: only those are computed (or filled with zero)
    for d, a in enumerate(t.axes):
      v = simplify(_expand(val[a.name], i.radix[d]) + i.lo[d], self.ranges)
      i.root_val[a.name] = v
      if st.attach.kind == "at" and tiles is None:
        within += [v < int(t.shape[d]), v >= 0]
    for a in t.reduce_axes: i.root_val[a.name] = simplify(val[a.name], self.ranges)
    if st.name in self._zero_fill: i.fill = _not_proven(within, self.ranges)
    else: preds += within
    i.preds = _not_proven(preds, self.ranges)

  def _computes_padding(self, i: _Info) -> set[str] | None:
    """The shared tiles tensorized stage ``i`` reads where it computes its whole register box, past the tensor's
    edge too; None where it does not. A warp's ``mma.sync`` needs every lane, so a tile that overhangs the tensor
    (rows or columns not a multiple of the block's) is computed whole, and only its consumers' stores are guarded.
    Only where every value it reads comes from a shared tile: bound inference sized those to the whole box, so
    reading past the edge stays inside the buffer, and they store zeros where they overhang their own tensor
    (``_Info.fill``), so the rows and columns past the edge are sums of zeros, never stored. Its reduction runs
    whole k-steps too where every operand reads every reduction axis: past the reduction's end both operands' tiles
    hold zeros (a split of k that does not divide adds no guard), which add nothing (an operand that did not read k
    would give its own values there, and 0 x inf is NaN)."""
    st = i.st
    if not st.tensorize or i.scope != "local": return None
    reads = {n.arg.name for n in walk(i.body) if n.op is Op.LOAD} - {st.name}
    return reads if all(self.s.stage(r).scope == "shared" for r in reads) else None

  def _plan_vthreads(self, t: _Info) -> None:
    """Virtual-thread injection (TVM's InjectVirtualThread, by loop motion).

    When stages are computed inside ``t``'s vthread loops, those loops move inward past the
    attach points, so the stages computed there serve every virtual thread at once: a shared
    tile covers all of them (its bound inference sweeps the vthread loops), and a register
    stage gets the vthread loops injected into its own nest, right after its own attach points
    (one shared load, then every virtual thread's work), with one buffer slice per virtual
    thread instead of a box. Called right after ``t``'s bounds are inferred, before those of
    the stages computed inside it. Falls back to plain serial vthread loops when a register
    stage inside is read by anything but ``t``."""
    st = t.st
    vts = [x for x in st.leaves if st.annotation(x) == "vthread"]
    if not vts: return
    first = min(st.leaves.index(v) for v in vts)
    inside = [o for o in self.info.values() if o.st.attach.kind == "at" and o.st.attach.stage == st.name
              and st.leaves.index(o.st.attach.iter) >= first]
    if not inside or any(o.st.attach.iter in vts for o in inside): return
    local = [o for o in inside if (o.st.scope or self._infer_scope(o.st)) == "local"]
    for o in local:
      if any(q.st.name != st.name and any(n.op is Op.LOAD and n.arg.name == o.st.name for n in walk(q.body))
             for q in self.info.values()):
        return
    rest = [x for x in st.leaves if x not in vts]
    marks = [rest.index(x) for x in rest if x in {o.st.attach.iter for o in inside}
             or st.annotation(x) in THREAD_TAGS + BLOCK_TAGS]
    cut = max(marks + [-1]) + 1
    t.st = replace(st, leaves=tuple(rest[:cut] + vts + rest[cut:]))
    for o in local:
      self._vt_pending[o.st.name] = [t.cvar[v] for v in vts]
      o.vdims = [(t.cvar[v], t.leaf_ext[v]) for v in vts]
      ost = o.st
      pts = [ost.leaves.index(p.st.attach.iter) for p in self.info.values()
             if p.st.attach.kind == "at" and p.st.attach.stage == ost.name]
      at = max(pts + [-1]) + 1
      names = [f"vthread:{v}" for v in vts]
      for nm, v in zip(names, vts): o.cvar[nm] = t.cvar[v]
      o.st = replace(ost, leaves=ost.leaves[:at] + tuple(names) + ost.leaves[at:],
                     kinds=ost.kinds + tuple((nm, "spatial") for nm in names),
                     annotations=ost.annotations + tuple((nm, "vthread") for nm in names))
      o.vt_ext = {nm: t.leaf_ext[v] for nm, v in zip(names, vts)}

  def _infer_scope(self, st: Stage) -> str:
    under_block = False
    for t, it in self._ancestors(st.name):
      ts = self.s.stage(t)
      anns = {ts.annotation(x) for x in ts.leaves[:ts.leaves.index(it) + 1]}
      if anns & set(THREAD_TAGS): return "local"
      if anns & set(BLOCK_TAGS): under_block = True
    return "shared" if under_block else "local" if not self._kernel_has_threads(st.name) else "shared"

  def _kernel_has_threads(self, name: str) -> bool:
    root = self._kernel_root(name)
    return any(a in THREAD_TAGS for n, o in self.info.items() if self._kernel_root(n) == root for _, a in o.st.annotations)

  def _region(self, i: _Info, shape: list[Expr]) -> tuple[list[Expr], list[Expr]]:
    st = i.st
    t_name, it = st.attach.stage, st.attach.iter
    inner = self._inside(t_name, it)
    relaxed_names = set(inner) - set(self._vt_pending.get(st.name, []))
    if i.scope in ("shared", "global") and st.name not in self.s.outputs:    # (an output in its reader: per thread)
      for o in self.info.values():
        if self._kernel_root(o.st.name) == self._kernel_root(t_name): relaxed_names |= set(self._bound_leaves(o, THREAD_TAGS))
    rng = {v: self.sym_ranges[v] for v in relaxed_names if v in self.sym_ranges}
    los: list[list[Expr]] = [[] for _ in shape]
    his: list[list[Expr]] = [[] for _ in shape]
    idxs: list[list[Expr]] = [[] for _ in shape]
    i.radix = []
    for q in self.info.values():
      if q is i or not any(n.op is Op.LOAD and n.arg.name == st.name for n in walk(q.body)): continue
      if q.st.name != t_name and not (set(q.cvar.values()) <= inner):
        raise ScheduleError(f"{_step_of(self.s, st.name, None, 'compute_at')}: its consumer {q.st.name!r} is computed outside "
                            f"loop {t_name}.{it}; compute it inside that loop too, or attach {st.name!r} further out")
      env = dict(q.root_val)
      for n in walk(q.body):
        if n.op is not Op.LOAD or n.arg.name != st.name: continue
        for d, e in enumerate(n.src):
          idxs[d].append(simplify(substitute(e, env), self.ranges))
          r = relax(idxs[d][-1], rng)
          if r is None: r = (const(0), shape[d] - 1)
          los[d].append(simplify(r[0], self.ranges)); his[d].append(simplify(r[1], self.ranges))
    if not los or not los[0]:
      raise ScheduleError(f"{_step_of(self.s, st.name, None, 'compute_at')}: no stage inside loop {t_name}.{it} reads {st.name!r}")
    lo, ext = [], []
    for d in range(len(shape)):
      l, h = los[d][0], his[d][0]
      for x in los[d][1:]: l = simplify(min_(l, x), self.ranges)
      for x in his[d][1:]: h = simplify(max_(h, x), self.ranges)
      e = simplify(h - l + 1, self.ranges)
      if not e.is_const and free_vars(e) & self.loop_vars:
        # the tile size varies with the outer loops (fused / strided indices): allocate the largest
        m = max_over(e, self.ranges) if free_vars(e) <= set(self.ranges) else None
        if m is None and (b := shift_free_extent(e, self.loop_vars, self.ranges)) is not None:
          lo.append(l); ext.append(b); i.radix.append(None)    # a symbolic tile: the largest region over the outer loops
          continue
        if m is None:
          raise LoweringError(f"{_step_of(self.s, st.name, None, 'compute_at')}: cannot bound the extent {e} of dim {d} "
                              "of the computed region (it depends on loops with symbolic extents)")
        e = const(m)
      radix = _strided(idxs[d], rng, self.ranges) if i.scope == "local" else None
      if radix: e = const(math.prod(n for _, n in radix))     # (its start: the reads' base, not clamped to 0)
      elif e.is_const and e.arg >= shape[d].arg and st.name not in self._zero_fill:   # (a padded tile keeps its
        l, e = const(0), shape[d]                                                      # overhang: _computes_padding)
      lo.append(l); ext.append(e); i.radix.append(radix)
    return lo, ext

  # ----------------------------------------------------------------------------------------
  def _make_buffers(self):
    for n, i in self.info.items():
      st = i.st
      dt = st.tensor.dtype
      if st.attach.kind == "root":
        if st.storage_align:      # a global buffer is dense: padded strides would index past its end
          raise ScheduleError(f"storage_align {n}: a root stage's buffer is dense in global memory; align a stage "
                              "computed inside another (a cache_read / cache_write stage, or one placed by compute_at)")
        role = "output" if n in self.s.outputs else "temp"
        i.buffer = Buffer(c_ident(n), dt, "global", const(math.prod(st.tensor.shape)), role)
        exts = [const(d) for d in st.tensor.shape]
      elif n in self.s.outputs:   # computed in its reader, stored to the output at its own indices
        i.buffer = Buffer(c_ident(n), dt, "global", const(math.prod(st.tensor.shape)), "output")
        exts = [const(d) for d in st.tensor.shape]
        i.lo, i.radix = [const(0)] * len(exts), [None] * len(exts)
      else:
        exts = list(i.ext)
      strides, acc = [const(1)] * len(exts), const(1)
      align = {a: (f, o) for a, f, o in st.storage_align}
      for d in range(len(exts) - 1, -1, -1):
        if d in align:
          f, o = align[d]
          acc = simplify((acc + f - 1 - o) // f * f + o) if acc.is_const and acc.arg % f != o else acc
        strides[d] = acc
        acc = simplify(acc * exts[d])
      i.strides = strides
      if st.attach.kind != "root" and i.buffer is None:
        for _, e in reversed(i.vdims): acc = simplify(acc * e)
        stages = self._pipeline_stages(i)
        if stages is not None:     # one tile per stage, the iteration's tile at (loop variable % stages) (ir/nest.py: _pipelined)
          i.slots = (self.info[st.attach.stage].cvar[st.attach.iter], stages, acc)
          acc = simplify(acc * stages)
        mma_only = i.scope == "shared" and all(self.s.stage(c).tensorize for c in self.s.consumers(n))
        i.buffer = Buffer(c_ident(n), dt, i.scope, acc, "temp", half_tile=mma_only and dt in HALF_DTYPES)

  def _pipeline_stages(self, i: _Info) -> int | Expr | None:
    """The stages of the pipelined loop shared stage ``i`` is computed at (``Schedule.pipeline``), or None."""
    at = i.st.attach
    if i.scope != "shared" or at.kind != "at": return None
    target = self.info[at.stage]
    stages = dict(target.st.pipeline).get(at.iter)
    return None if _is_one(target.leaf_ext[at.iter]) else stages

  def _flat(self, i: _Info, idx) -> Expr:
    e = const(0)
    for d, x in enumerate(idx): e = e + _compress(x - i.lo[d], i.radix[d] if i.radix else None) * i.strides[d]
    stride = i.strides[0] * i.ext[0] if i.strides else const(1)
    for v, ext in reversed(i.vdims):
      if not _is_one(ext): e = e + var(v) * stride
      stride = stride * ext
    if i.slots:
      v, stages, size = i.slots
      e = e + var(v) % stages * size
    return simplify(e, self.ranges)

  def _rewrite_loads(self, e: Expr) -> Expr:
    def f(n: Expr) -> Expr:
      name = n.arg.name
      if name in self.in_buffers:
        shp = self.s.stage(name).tensor.shape
        flat, stride = const(0), 1
        for d in range(len(shp) - 1, -1, -1):
          flat = flat + n.src[d] * stride; stride *= shp[d]
        return Expr.make(Op.LOAD, n.dtype, (simplify(flat, self.ranges),), self.in_buffers[name])
      q = self.info[name]
      return Expr.make(Op.LOAD, n.dtype, (self._flat(q, n.src),), q.buffer)
    return map_loads(e, f)

# ------------------------------------------------------------------------------------------
# Strided register regions

def _every_read_spans(body: Expr, axes: set[str]) -> bool:
  """Whether every load of ``body`` indexes with all of ``axes``."""
  return all(axes <= {v for e in n.src for v in free_vars(e)} for n in walk(body) if n.op is Op.LOAD)


def _not_proven(conds: list[Expr], ranges: dict) -> list[Expr]:
  """``conds`` simplified, without those the ranges prove true."""
  return [c for c in (simplify(c, ranges) for c in conds) if not (c.is_const and c.arg)]


def _strided(idxs: list[Expr], rng: dict, ranges: dict) -> tuple[tuple[int, int], ...] | None:
  """The radix of a register region read with gaps, or None. When every read of a dim is ``base + sum(c_k v_k)``
  with the same base and the same loop variables ``v_k`` (relaxed, extents ``e_k``, from 0) at coefficients that
  leave gaps (``c_k`` sorted, each ``c_{k+1}`` a multiple of ``c_k e_k`` and some ``c_{k+1} > c_k e_k``), the
  region keeps only the values read: ``((c_1, e_1), ...)``, ``prod(e_k)`` of them, value ``v`` standing for
  ``lo + sum(((v // D_k) % e_k) c_k)`` (``D_k``: the product of the extents before k). So a thread's accumulator
  tile of rows ``g + 8 r + 16 m`` (tensor cores in the PTX layout) holds 2 MI rows, not the 16 MI - 7 of its box."""
  forms = set()
  for e in idxs:
    terms, c = linear(e)
    moving = tuple(sorted((k, t.arg) for t, k in terms.items() if free_vars(t) & rng.keys()
                          if t.op is Op.VAR and k > 0))
    if len(moving) != len([t for t in terms if free_vars(t) & rng.keys()]): return None
    base = simplify(e - sum((k * var(v) for k, v in moving), const(0)), ranges)
    forms.add((moving, base))
  if len(forms) != 1: return None
  ((moving, _),) = forms
  radix, dense = [], True
  for k, v in moving:
    lo, hi = ranges.get(v, (None, None))
    if lo != 0 or hi is None: return None
    radix.append((k, hi + 1))
  for (c0, e0), (c1, _) in zip(radix, radix[1:]):
    if c1 % (c0 * e0): return None
    dense &= c1 == c0 * e0
  return None if dense and (not radix or radix[0][0] == 1) else tuple(radix)


def _expand(v: Expr, radix) -> Expr:
  """The offset in the tensor of value ``v`` of a strided region (:func:`_strided`), or ``v`` of a dense one."""
  if not radix: return v
  out, below = const(0), 1
  for c, n in radix:
    out, below = out + (v // below) % n * c, below * n
  return out


def _compress(x: Expr, radix) -> Expr:
  """The value in a strided region of the tensor offset ``x`` (one of its own), or ``x`` in a dense one."""
  if not radix: return x
  out, below = const(0), 1
  for c, n in radix:
    out, below = out + x // c % n * below, below * n
  return out


# ------------------------------------------------------------------------------------------
# Index type

INT32_MAX, INT64_MAX = 2**31 - 1, 2**63 - 1
_FORCE_INT64 = contextvars.ContextVar("minicomp_force_int64", default=False)


@contextlib.contextmanager
def force_index64(on: bool = True):
  """Kernels lowered inside the block index with int64 even where int32 fits: tests run the
  int64 path on small shapes with it (int32 is never forced: it could be wrong)."""
  tok = _FORCE_INT64.set(on)
  try: yield
  finally: _FORCE_INT64.reset(tok)


def _index_span(k: LoopKernel) -> int | None:
  """The largest magnitude the kernel's index arithmetic can reach: its buffers' sizes, its
  thread count, its loop extents, and the interval bounds of every int32 expression it computes
  (data-dependent values, e.g. gathered indices, are unknown and bounded by the buffers they
  index). None for a symbolic program."""
  if not all(isinstance(d, int) for d in k.grid + k.block) or not all(b.size.is_const for b in k.params + k.allocs):
    return None
  span = [math.prod(k.grid) * math.prod(k.block)] + [int(b.size.arg) for b in k.params + k.allocs]
  ranges = {f"{t}.{a}": (0, d - 1) for t, dims in (("blockIdx", k.grid), ("threadIdx", k.block)) for a, d in zip("xyz", dims)}
  for v, tag in k.bindings: ranges[v] = ranges[tag]
  exprs: list[Expr] = []
  for s in walk_stmts(k.body):
    if isinstance(s, For):
      if not s.extent.is_const: return None
      n = int(s.extent.arg)
      ranges[s.var] = (0, max(n - 1, ranges.get(s.var, (0, 0))[1])); span.append(n)
    else: exprs += stmt_parts(s)[1]
  cx, seen = _ctx(ranges), set()   # one bounds context for the kernel (bounds() would rebuild it per node)
  while exprs:
    n = exprs.pop()
    if n in seen: continue
    seen.add(n); exprs += n.src
    if n.dtype == "int32" and n.op is not Op.LOAD:
      lo, hi = _bounds(n, cx)
      span += [hi or 0, -(lo or 0) - 1]
  return max(span)


def choose_index_dtype(k: LoopKernel) -> str:
  """int32 when every index of ``k`` provably fits in it, else int64 (TVM's rule): 32-bit index
  math is cheaper on a GPU, but wraps silently past 2^31 - 1. A kernel whose indices would not
  fit in int64 either raises LoweringError."""
  span = _index_span(k)
  if span is not None and span > INT64_MAX:
    raise LoweringError(f"kernel {k.name}: its indices reach {span}, more than 64-bit indexing can address "
                        f"(buffers: {', '.join(f'{b.name}[{b.size}]' for b in k.params + k.allocs)})")
  return "int64" if _FORCE_INT64.get() or (span is not None and span > INT32_MAX) else "int32"


def lower(state: State, name: str = "default") -> Program:
  """Lower a schedule state to a loop-nest Program."""
  return _Lowerer(state, name).run()


def inferred_extents(state: State) -> dict[str, dict[str, Expr]]:
  """Each compute stage's loop extents after bound inference, as lowering builds them ({stage: {loop: extent}}; an
  inlined stage has none): a stage computed inside another covers the region one iteration of its attach loop needs,
  not its whole shape. Raises what lowering raises for a schedule that cannot be lowered."""
  low = _Lowerer(state, "default")
  low._infer_bounds()
  return {n: {it: i.leaf_ext[it] for it in i.st.leaves} for n, i in low.info.items()}


def renamed(prog: Program, name: str) -> Program:
  """``prog`` with its kernels named as ``lower(state, name)`` names them (``name`` is all that the kernels' names
  depend on: a program lowered under another name, a search's candidate, need not be lowered again)."""
  return replace(prog, kernels=[replace(k, name=kernel_name(name, k.root, len(prog.kernels))) for k in prog.kernels])
