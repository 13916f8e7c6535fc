"""Default (rule-based) schedules: always valid, reasonably fast, the baseline search must beat.

``default_schedule(dag, target)`` returns a Schedule for any ComputeDAG:

1. every non-output stage without a reduction is inlined (Ansor's GPU always-inline rule);
2. a reduction with data reuse (matmul, conv) whose result reaches an output through elementwise
   stages only (bias, folded BN, activation, residual add: all inlined) is tiled together with
   that output (Ansor's multi-level tiling with fusion); one without such an output gets a
   ``cache_write("local")``. Every spatial axis is split into block / thread / inner parts: 4x4
   outputs per thread over the last two axes, accumulated in registers, up to 256 threads per
   block; the reduction is split by 8 and its inputs are staged through shared memory per step
   (copied by all the block's threads together);
3. reductions that only feed one output and reduce its trailing axes (softmax, layer norm, RMS
   norm statistics) are computed inside that output's kernel: one block per row, each statistic
   reduced across the block's threads with warp shuffles, then the row written by the same threads;
4. other reductions over 64 or more elements per output: one block per output, reduced across
   the threads with warp shuffles;
5. everything else: spatial axes fused and spread over blocks of up to 256 threads.
"""
from __future__ import annotations

import math

from minicomp.ir.dag import ComputeDAG, has_data_reuse, is_injective, kept_axes, reads
from minicomp.ir.ops import Op
from minicomp.ir.schedule import Schedule
from minicomp.target import Target, as_target


def _parallel(s: Schedule, name: str, threads: int = 256) -> None:
  sp = s.axis(name)
  if not sp: return
  f = s.fuse(name, *sp) if len(sp) > 1 else sp[0]
  ext = math.prod(s.state.stage(name).tensor.shape)
  t = min(threads, max(32, 1 << (ext - 1).bit_length())) if ext > 1 else 1
  if ext <= 1: return
  bo, ti = s.split(name, f, t)
  s.bind(name, bo, "blockIdx.x"); s.bind(name, ti, "threadIdx.x")


def _row_reduce(s: Schedule, name: str) -> None:
  st = s.state.stage(name)
  sp, rd = s.axis(name), s.reduce_axis(name)
  red = math.prod(int(a.extent.arg) for a in st.tensor.reduce_axes)
  threads = 32 if red <= 256 else 128 if red <= 4096 else 256
  r = s.fuse(name, *rd) if len(rd) > 1 else rd[0]
  ro, ri = s.split(name, r, threads)
  if sp:
    f = s.fuse(name, *sp) if len(sp) > 1 else sp[0]
    s.bind(name, f, "blockIdx.x")
  s.cross_thread_reduce(name, ri, "shuffle")


def _tile(s: Schedule, name: str, producer: str | None = None, shared: bool = True) -> None:
  """Tile ``name`` (rule 2 of the module docstring). ``producer`` is the reduction fused into it
  (computed per thread in registers); without one, ``name`` gets a ``cache_write``. With
  ``shared``, the reduction's inputs are staged through shared memory per reduction step, each
  copied cooperatively by all the block's threads.

  Every spatial axis is split into (block, thread, inner) parts; the block parts are fused onto
  blockIdx.x and the thread parts onto threadIdx.x, so each thread's register tile stays a box
  (4x4 over the last two axes) and the block's inputs per reduction step are boxes too."""
  shape = s.state.stage(name).tensor.shape
  local = producer or s.cache_write(name, "local")
  sp = s.axis(name)
  inner = [1] * len(sp)
  for d in range(len(sp) - 1, max(len(sp) - 3, -1), -1): inner[d] = min(4, shape[d])
  threads, budget = [1] * len(sp), 256
  for d in range(len(sp) - 1, -1, -1):
    cap = 16 if d >= len(sp) - 2 else budget
    threads[d] = max(1, min(cap, budget, -(-shape[d] // inner[d])))
    budget //= threads[d]
  parts = [s.split(name, ax, [t, i]) for ax, t, i in zip(sp, threads, inner)]   # (block, thread, inner)
  s.reorder(name, *[p[0] for p in parts], *[p[1] for p in parts], *[p[2] for p in parts])
  blk = s.fuse(name, *[p[0] for p in parts])
  thr = s.fuse(name, *[p[1] for p in parts])
  s.bind(name, blk, "blockIdx.x")
  s.bind(name, thr, "threadIdx.x")
  s.compute_at(local, name, thr)
  rd = s.reduce_axis(local)
  if not rd: return
  r = s.fuse(local, *rd) if len(rd) > 1 else rd[0]
  ro, ri = s.split(local, r, 8)
  s.reorder(local, ro, ri, *[l for l in s.loops(local) if l not in (ro, ri)])
  s.pragma(local, ro, "auto_unroll_max_step", 64)
  if not shared: return
  n_threads = math.prod(threads)
  for src in [t.name for t in s.state.stage(local).tensor.inputs]:
    xs = s.cache_read(src, "shared", [local])
    s.compute_at(xs, local, ro)
    f = s.fuse(xs, *s.loops(xs)) if len(s.loops(xs)) > 1 else s.loops(xs)[0]
    _, x = s.split(xs, f, n_threads)
    if n_threads > 1: s.bind(xs, x, "threadIdx.x")


def epilogue_output(dag: ComputeDAG, t, out_names: set[str]) -> str | None:
  """The one output that everything computed from ``t`` flows into through stages that read ``t`` or each other
  elementwise (bias, folded BN, an activation such as GELU's ``x * 0.5 * (1 + erf(x / sqrt 2))``, whose stages
  branch from ``x`` and meet again: all inlined), or None (two outputs, a reduction, a broadcast or a reindexing on
  the way)."""
  region, todo, found = {t.name: t}, [t], None
  while todo:
    for c in dag.consumers(todo.pop()):
      if c.name in region: continue
      if c.shape != t.shape or not is_injective(c): return None
      region[c.name] = c
      if c.name in out_names:
        if found is not None: return None
        found = c.name
      else: todo.append(c)
  for c in region.values():
    if c is t: continue
    names = [a.name for a in c.axes]
    if any([e.arg if e.op is Op.VAR else None for e in idx] != names
           for p, idxs in reads(c).items() if p.name in region for idx in idxs): return None
  return found


def _row_group(dag: ComputeDAG, out, out_names: set[str]) -> tuple[list[str], int] | None:
  """Reductions that only feed ``out`` (directly or through inlined stages) and reduce its
  trailing axes (softmax, layer norm, RMS norm): they can run inside ``out``'s kernel, one block
  per row. Returns (their names, number of leading row axes) or None."""
  def feeds_only(t, seen=()) -> bool:
    for c in dag.consumers(t):
      if c is out: continue
      if c.name in out_names or c.name in seen: return False
      if not feeds_only(c, seen + (c.name,)): return False
    return True
  reds = [t for t in dag.tensors if t.reduce_axes and t.name not in out_names and not has_data_reuse(t)
          and feeds_only(t)]
  if not reds or out.reduce_axes: return None
  k = None
  for r in reds:
    rs = tuple(d for d in r.shape)
    lead = kept_axes(rs) if len(rs) == len(out.shape) else len(rs)
    while lead > 0 and (lead > len(out.shape) or rs[:lead] != out.shape[:lead]): lead -= 1
    k = lead if k is None else min(k, lead)
  if not k or k >= len(out.shape): return None
  return [r.name for r in reds], k


def _row_fused(s: Schedule, out: str, reds: list[str], k: int) -> None:
  """``out``'s first ``k`` axes -> blockIdx.x, the rest over the threads; each reduction computed
  per block and reduced across the threads (warp shuffles)."""
  shape = s.state.stage(out).tensor.shape
  sp = s.axis(out)
  row = s.fuse(out, *sp[:k]) if k > 1 else sp[0]
  rest = s.fuse(out, *sp[k:]) if len(sp) - k > 1 else sp[k]
  n = math.prod(shape[k:])
  threads = 32 if n <= 256 else 128 if n <= 4096 else 256
  ro, ri = s.split(out, rest, threads)
  s.bind(out, row, "blockIdx.x"); s.bind(out, ri, "threadIdx.x")
  for r in reds:
    s.compute_at(r, out, row)
    rd = s.reduce_axis(r)
    f = s.fuse(r, *rd) if len(rd) > 1 else rd[0]
    _, fi = s.split(r, f, threads)
    s.cross_thread_reduce(r, fi, "shuffle")


def default_schedule(outputs, target: Target | str = "sm_86", simple: bool = False, shared: bool = True) -> Schedule:
  """A valid, reasonably fast schedule for any computation (see module docstring).

  ``shared=False`` tiles without shared-memory staging; ``simple=True`` applies only rules 1
  and 5 (every root stage spread over blocks of threads, reductions serial per thread). The
  compiler falls back to these, in that order, when a schedule breaks a resource limit."""
  as_target(target)
  dag = outputs if isinstance(outputs, ComputeDAG) else ComputeDAG(outputs)
  s = Schedule(dag)
  out_names = {t.name for t in dag.outputs}
  for t in dag.tensors:
    if not t.is_placeholder and t.name not in out_names and not t.reduce_axes:
      s.compute_inline(t.name)
  if simple:
    for t in dag.tensors:
      if not t.is_placeholder and (t.name in out_names or t.reduce_axes): _parallel(s, t.name)
    return s
  fused_into: dict[str, str] = {}    # output -> the data-reuse reduction it is tiled together with
  for t in dag.tensors:
    if t.reduce_axes and has_data_reuse(t) and t.name not in out_names:
      o = epilogue_output(dag, t, out_names)
      if o is not None and o not in fused_into: fused_into[o] = t.name
  rows: dict[str, tuple[list[str], int]] = {}
  for o in dag.outputs:
    if o.name in fused_into: continue
    grp = _row_group(dag, o, out_names)
    if grp is not None and not any(r in fused_into.values() or any(r in g[0] for g in rows.values()) for r in grp[0]):
      rows[o.name] = grp
  in_rows = {r for g in rows.values() for r in g[0]}
  for t in dag.tensors:
    if t.is_placeholder or (t.name not in out_names and not t.reduce_axes) or t.name in fused_into.values() \
        or t.name in in_rows: continue
    if t.name in rows:
      _row_fused(s, t.name, *rows[t.name])
    elif t.name in fused_into:
      _tile(s, t.name, fused_into[t.name], shared)
    elif t.reduce_axes and has_data_reuse(t) and len(t.axes) >= 1:
      _tile(s, t.name, shared=shared)
    elif t.reduce_axes and math.prod(int(a.extent.arg) for a in t.reduce_axes) >= 64:
      _row_reduce(s, t.name)
    else:
      _parallel(s, t.name)
  return s
