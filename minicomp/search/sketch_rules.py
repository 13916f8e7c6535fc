"""Ansor's GPU sketch rules (TVM's ``sketch_policy_rules.cc``; docs/design.md, Sources), with the analysis and building blocks they share.

The engine (``sketch.py``) tries them in this order (:data:`DEFAULT_RULES`):

  tensor_core_tiling -> add_cache_read -> always_inline -> cross_thread_reduction -> split_reduction
  -> add_cache_write -> multi_level_tiling_with_fusion -> multi_level_tiling -> skip_stage

Where minicomp departs from Ansor (docs/search.md says why):

* The multi-level tiling ("SSSRRSRS": spatial axes in 5 levels, reduce axes in 3) binds its
  levels in the sketch (S0 -> blockIdx.x, S1 -> vthread, S2 -> threadIdx.x), and shared-memory
  caches get their cooperative fetch in the sketch (fused, split by the thread tile sizes and a
  vector width, bound to threadIdx.x): with sizes as variables, Ansor's InitThreadBind and
  fetch rules have no random choice left, and Felix needs them in the symbolic program.
* With fusion, the tiled stage is computed at the consumer's thread loop and split only in its
  inner levels (S3, S4) there, so bound inference gives exact per-thread tiles.
* A tiled reduction also gets a cross-thread sketch for outputs of up to ``CROSS_THREAD_SPACE`` values smaller
  than twice the reduction (Ansor: one block's worth, smaller than the reduction): a ResNet's 2x2 layers.
* Cross-thread reductions split by a *sampled* thread count (32 .. 1024, a multiple of 32)
  instead of the warp size, and a reduction whose consumers all run in one output stage (softmax,
  layer norm statistics) is computed inside that output's kernel, one block per row.
* Root stages nothing else scheduled are fused and split by a sampled thread count (the engine's
  post-pass, in ``sketch.py``).
* Only reductions get multi-level tiling (Ansor also tiles a stage that reads two inputs
  broadcast along different axes, e.g. a softmax output reading its row max and row sum).
* The Winograd rules (special compute location, const-tensor simplification) are not
  implemented: minicomp has no Winograd convolution.
* A tiled reduction of an output of ``SPLIT_MIN_SPACE`` to ``SPLIT_SPACE`` values and a reduction of at least
  ``SPLIT_MIN_REDUCTION`` terms also gets a split-reduction sketch (split-K, ``split_reduction``): partial sums of
  chunks of its longest reduce axis (``rfactor``) in a tiled kernel with more blocks, added with the elementwise
  consumer in a second kernel. compile's construction leaves it to tuning (``compiler.CONSTRUCT_SPLIT_SKETCH``).
* A first rule of minicomp's own, ``tensor_core_tiling``, adds a tensor-core sketch for half matmuls and
  convolutions (docs/tensor_cores.md).
"""
from __future__ import annotations

import math

from minicomp.ir.dag import has_data_reuse, is_injective, kept_axes, reads
from minicomp.ir.expr import Expr, var
from minicomp.ir.ops import Op
from minicomp.ir.schedule import Schedule
from minicomp.ir.state import BLOCK_TAGS, INLINE, ROOT, THREAD_TAGS
from minicomp.search.sketch_types import Choice, Decision, SketchInfo, SketchRule, TileGroup, tile_extent

TILE_STRUCTURE = "SSSRRSRS"        # Ansor's gpu_multi_level_tiling_structure
SPATIAL_LEVELS, REDUCE_LEVELS = 5, 3
THREAD_CHOICES = (32, 64, 128, 256, 512, 1024)
CROSS_THREAD_SPACE = 16384  # the largest output of a data-reuse reduction that also gets a cross-thread sketch
VECTOR_CHOICES = (1, 2, 4)   # elements, in any type (8 half lanes made the defaults worse: docs/precision.md)


# ---------------------------------------------------------------------------------------------
# analysis on a state (looks through inlined stages, as Ansor's GetConsumers does)

def _stage(s: Schedule, i: int): return s.state.stages[i]


def effective_consumers(s: Schedule, name: str) -> list[str]:
  """Consumers of ``name``, replacing inlined ones by their own consumers."""
  out, todo, seen = [], list(s.state.consumers(name)), set()
  while todo:
    c = todo.pop(0)
    if c in seen: continue
    seen.add(c)
    if s.state.stage(c).attach == INLINE: todo.extend(s.state.consumers(c))
    elif c not in out: out.append(c)
  return out


def needs_tiling(s: Schedule, name: str) -> bool:
  """Ansor's NeedsMultiLevelTiling, restricted to reductions: a stage that only broadcasts row
  statistics (a softmax or layer-norm output) gains nothing from register tiles, and tiling it
  would split the statistics off into kernels of their own."""
  st = s.state.stage(name)
  return not st.is_placeholder and bool(st.tensor.reduce_axes) and has_data_reuse(st.tensor)


def _matches_elementwise(consumer, producer) -> bool:
  if consumer.shape != producer.shape or not is_injective(consumer): return False
  names = [a.name for a in consumer.axes]
  return all([e.arg if e.op is Op.VAR else None for e in idx] == names for idx in reads(consumer).get(producer, []))


def fusible_consumer(s: Schedule, name: str) -> str | None:
  """Ansor's HasSingleElementwiseMatchedConsumer: the one (effective) consumer, reached through
  inlined stages that each read their producer elementwise, or None. Unlike Ansor, the paths may part and meet
  again (a diamond: GELU's ``x * (1 + erf(x / sqrt 2)) / 2`` reads ``x`` twice), each of them elementwise."""
  cons = effective_consumers(s, name)
  if len(cons) != 1: return None
  target = cons[0]
  todo, seen = [s.state.stage(name).tensor], set()
  while todo:
    cur = todo.pop()
    for d in s.state.consumers(cur.name):
      c = s.state.stage(d)
      if not _matches_elementwise(c.tensor, cur): return None
      if d == target or d in seen: continue
      if c.attach != INLINE: return None
      seen.add(d)
      todo.append(c.tensor)
  tst = s.state.stage(target)
  return target if tst.scope != "shared" and not (tst.tensor.reduce_axes and s.state.stage(name).tensor.reduce_axes) else None


def int_dims(shape) -> list[int]: return [int(getattr(d, "arg", d)) for d in shape]


def is_bound(st) -> bool:
  return any(a in BLOCK_TAGS or a in THREAD_TAGS for _, a in st.annotations)


# ---------------------------------------------------------------------------------------------
# building blocks

def _tile_spatial(s: Schedule, info: SketchInfo, stage: str, levels: int, vars_of: dict | None = None):
  """Split every spatial axis of ``stage`` into ``levels`` levels; returns per level the list of loops.
  ``vars_of[axis]`` reuses given variables (a consumer following its producer's tiling)."""
  st = s.state.stage(stage)
  per_level = [[] for _ in range(levels)]
  made = {}
  for a, n in zip(st.tensor.axes, int_dims(st.tensor.shape)):
    if vars_of is not None: vs = vars_of[a.name]
    else:
      vs = tuple(info.new_var(f"{stage}_{a.name}_{k}").arg for k in range(1, levels))
      info.tiles.append(TileGroup(stage, a.name, tile_extent(n), vs, "spatial"))
    made[a.name] = vs
    parts = s.split(stage, a.name, [var(v) for v in vs])
    for k, p in enumerate(parts): per_level[k].append(p)
  return per_level, made


def _fuse_bind(s: Schedule, stage: str, loops: list[str], tag: str) -> str | None:
  if not loops: return None
  f = s.fuse(stage, *loops) if len(loops) > 1 else loops[0]
  s.bind(stage, f, tag)
  return f


def thread_choice(info: SketchInfo, stage: str, extent: int, what: str) -> Expr:
  v = info.new_var(f"{stage}_threads")
  cap = max(32, 1 << max(0, (extent - 1).bit_length()))
  info.choices.append(Choice(v.arg, tuple(c for c in THREAD_CHOICES if c <= cap) or (32,), what))
  return v


# ---------------------------------------------------------------------------------------------
# the rules

class AddCacheRead(SketchRule):
  """Stage shared-memory copies of a tiled consumer's inputs, one reduction tile at a time."""
  name = "add_cache_read"

  def condition(self, ctx, s, i, info):
    st = _stage(s, i)
    if st.attach == INLINE or st.scope == "shared": return Decision.SKIP
    cons = effective_consumers(s, st.name)
    if not cons: return Decision.SKIP
    c = s.state.stage(cons[0])
    if c.cross_thread or not needs_tiling(s, c.name) or c.attach == ROOT and not is_bound(c) and c.name not in info.threads:
      return Decision.SKIP
    if not any(u == c.name or s.state.stage(u).attach == INLINE for u in s.state.consumers(st.name)): return Decision.SKIP
    return Decision.APPLY_AND_SKIP_REST if _reduce_tile_loop(s, c.name) else Decision.SKIP

  def apply(self, ctx, s, i, info):
    s, info = s.copy(), info.copy()
    st = _stage(s, i)
    c = effective_consumers(s, st.name)[0]
    readers = [u for u in s.state.consumers(st.name)
               if u == c or (s.state.stage(u).attach == INLINE and s.state.reaches(u, c))]
    xs = s.cache_read(st.name, "shared", readers)
    s.compute_at(xs, c, _reduce_tile_loop(s, c))
    root = _root_of(s, c)
    loops = s.loops(xs)
    f = s.fuse(xs, *loops) if len(loops) > 1 else loops[0]
    vec = info.new_var(f"{xs}_vec")
    info.choices.append(Choice(vec.arg, VECTOR_CHOICES, f"vector width of the {xs} fetch"))
    tvars = info.threads.get(root, [])
    parts = s.split(xs, f, [var(v) for v in tvars] + [vec])
    if tvars: _fuse_bind(s, xs, list(parts[1:-1]), "threadIdx.x")
    s.vectorize(xs, parts[-1])
    info.applied.append(f"{self.name}({st.name})")
    return [(s, i, info)]


def _reduce_tile_loop(s: Schedule, name: str) -> str | None:
  """The last reduce loop of the outermost reduce tile (R0) of a tiled stage."""
  st = s.state.stage(name)
  r0 = [l for l in st.leaves if st.kind(l) == "reduce" and l.endswith(".0")]
  return r0[-1] if r0 else None


def _root_of(s: Schedule, name: str) -> str:
  st = s.state.stage(name)
  while st.attach.kind == "at": st = s.state.stage(st.attach.stage)
  return st.name


class AlwaysInline(SketchRule):
  """On GPU every non-output stage without a reduction is inlined (Ansor)."""
  name = "always_inline"

  def condition(self, ctx, s, i, info):
    st = _stage(s, i)
    ok = (not st.is_placeholder and st.name not in s.state.outputs and not st.tensor.reduce_axes
          and st.attach == ROOT and st.scope is None and not st.relations)
    return Decision.APPLY_AND_SKIP_REST if ok else Decision.SKIP

  def apply(self, ctx, s, i, info):
    s, info = s.copy(), info.copy()
    s.compute_inline(_stage(s, i).name)
    info.applied.append(f"{self.name}({_stage(s, i).name})")
    return [(s, i - 1, info)]


class CrossThreadReduction(SketchRule):
  """Reduce across the threads of a block when the reduction is long and the output small."""
  name = "cross_thread_reduction"

  def condition(self, ctx, s, i, info):
    st = _stage(s, i)
    if st.is_placeholder or not st.tensor.reduce_axes or st.attach != ROOT or st.relations: return Decision.SKIP
    if st.scope is not None: return Decision.SKIP          # a cache_write stage (Ansor: HasCacheWriteStage)
    space = math.prod(int_dims(st.tensor.shape))
    red = math.prod(int(a.extent.arg) for a in st.tensor.reduce_axes)
    if needs_tiling(s, st.name):
      # besides the tiled sketch, for outputs of up to CROSS_THREAD_SPACE values with reductions longer than half
      # their size (Ansor: one block of threads' worth, shorter than the reduction); wider than Ansor's bounds
      # because a tiled convolution of a 2x2 or 4x4 image has too few blocks (a ResNet-18 at 64x64, static-model
      # estimates on sm_86: 1721.7 -> 569.7 us; docs/search.md)
      if space > CROSS_THREAD_SPACE: return Decision.SKIP
      return Decision.APPLY if 2 * red > space else Decision.SKIP
    return Decision.APPLY_AND_SKIP_REST if red > ctx.target.warp_size else Decision.SKIP

  def apply(self, ctx, s, i, info):
    s, info = s.copy(), info.copy()
    st = _stage(s, i)
    name = st.name
    rd = s.reduce_axis(name)
    r = s.fuse(name, *rd) if len(rd) > 1 else rd[0]
    red = math.prod(int(a.extent.arg) for a in st.tensor.reduce_axes)
    row = _row_target(s, name, info)
    epi = _epilogue(s, name, info) if row is None else None
    if row is not None:
      out, k = row
      if out not in info.rows:
        sp = s.axis(out)
        shape = int_dims(s.state.stage(out).tensor.shape)
        blk = _fuse_bind(s, out, sp[:k], "blockIdx.x") if k else None
        rest = s.fuse(out, *sp[k:]) if len(sp) - k > 1 else sp[k]
        t = thread_choice(info, out, max(math.prod(shape[k:]), red), f"threads per row of {out}")
        _, ti = s.split(out, rest, [t])
        s.bind(out, ti, "threadIdx.x")
        info.rows[out] = (blk, t.arg)
        info.threads[out] = [t.arg]
      blk, tv = info.rows[out]
      if blk is not None: s.compute_at(name, out, blk)
      t = var(tv)
    elif epi is not None:
      # Ansor: a consumer that reads the reduction elementwise (a bias, an activation) is its kernel, one output
      # value per block, the reduction computed in the block and the value stored by one thread; not a second launch
      blk = _fuse_bind(s, epi, s.axis(epi), "blockIdx.x")
      s.compute_at(name, epi, blk)
      t = thread_choice(info, name, red, f"threads reducing {name}")
      info.threads[epi] = [t.arg]
    else:
      sp = s.axis(name)
      _fuse_bind(s, name, sp, "blockIdx.x")
      t = thread_choice(info, name, red, f"threads reducing {name}")
      info.threads[name] = [t.arg]
    _, ri = s.split(name, r, [t])
    s.cross_thread_reduce(name, ri, "shuffle")
    into = row[0] if row is not None else epi
    info.applied.append(f"{self.name}({name}{' in ' + into if into else ''})")
    return [(s, i - 1, info)]


def _epilogue(s: Schedule, name: str, info: SketchInfo) -> str | None:
  """The output stage that reads reduction ``name`` elementwise (:func:`fusible_consumer`: through inlined
  stages), is not scheduled yet and reduces nothing itself, or None."""
  c = fusible_consumer(s, name)
  if c is None: return None
  st = s.state.stage(c)
  if st.attach != ROOT or st.relations or is_bound(st) or st.tensor.reduce_axes or c in info.rows: return None
  return c if s.axis(c) else None


def _row_target(s: Schedule, name: str, info: SketchInfo) -> tuple[str, int] | None:
  """An output stage all of ``name``'s consumers run in (directly, or already computed in it),
  whose leading axes are ``name``'s axes: the reduction can run inside its kernel, per row."""
  cons = effective_consumers(s, name)
  outs = {c if s.state.stage(c).attach == ROOT else _root_of(s, c) for c in cons}
  if len(outs) != 1: return None
  out = outs.pop()
  o = s.state.stage(out)
  if o.tensor.reduce_axes or (o.relations and out not in info.rows) or any(
      s.state.stage(c).attach != ROOT and s.state.stage(c).attach.stage != out for c in cons): return None
  rs, os_ = int_dims(s.state.stage(name).tensor.shape), int_dims(o.tensor.shape)
  while rs and rs[-1] == 1 and len(rs) > len(os_): rs.pop()
  k = len(rs)
  while k > 0 and rs[:k] != os_[:k]: k -= 1
  if len(rs) == len(os_) and k < len(rs):       # keepdims: trailing ones stand for the reduced axes
    k = kept_axes(rs)
    if rs[:k] != os_[:k]: return None
  if k == 0 or k >= len(os_): return None
  if out in info.rows:
    blk_k = info.rows[out]
    if blk_k is None: return None
  return out, k


class AddCacheWrite(SketchRule):
  """A tiled stage without a fusible consumer accumulates in registers (``cache_write`` local)."""
  name = "add_cache_write"

  def condition(self, ctx, s, i, info):
    st = _stage(s, i)
    if st.relations or st.attach != ROOT or st.scope is not None or not needs_tiling(s, st.name): return Decision.SKIP
    return Decision.SKIP if fusible_consumer(s, st.name) else Decision.APPLY_AND_SKIP_REST

  def apply(self, ctx, s, i, info):
    s, info = s.copy(), info.copy()
    name = _stage(s, i).name
    s.cache_write(name, "local")
    info.applied.append(f"{self.name}({name})")
    return [(s, i, info)]


def _tile_with_fusion(s: Schedule, info: SketchInfo, name: str, out: str) -> None:
  """``out`` follows ``name``'s first levels and binds them; ``name`` is computed per thread."""
  st = s.state.stage(name)
  out_st = s.state.stage(out)
  vars_of = {}
  for a, n in zip(st.tensor.axes, int_dims(st.tensor.shape)):
    vs = tuple(info.new_var(f"{name}_{a.name}_{k}").arg for k in range(1, SPATIAL_LEVELS))
    info.tiles.append(TileGroup(name, a.name, tile_extent(n), vs, "spatial"))
    vars_of[a.name] = vs
  by_pos = {oa.name: vars_of[a.name] for oa, a in zip(out_st.tensor.axes, st.tensor.axes)}
  levels, _ = _tile_spatial(s, info, out, SPATIAL_LEVELS, by_pos)
  s.reorder(out, *[l for lv in levels for l in lv])
  _fuse_bind(s, out, levels[0], "blockIdx.x")
  _fuse_bind(s, out, levels[1], "vthread")
  thr = _fuse_bind(s, out, levels[2], "threadIdx.x")
  info.threads[out] = [vars_of[a.name][1] for a in st.tensor.axes]
  info.vthreads[out] = [vars_of[a.name][0] for a in st.tensor.axes]
  s.compute_at(name, out, thr)
  inner = []                                   # S3, S4 of each spatial axis, inside the thread
  for a in st.tensor.axes:
    inner.append(s.split(name, a.name, [var(vars_of[a.name][3])]))
  red = _tile_reduce(s, info, name)
  order = list(red[0]) + list(red[1]) + [p[0] for p in inner] + list(red[2]) + [p[1] for p in inner]
  s.reorder(name, *order)
  lead = s.loops(name)[0]
  info.unroll.append((name, lead))


def _tile_reduce(s: Schedule, info: SketchInfo, name: str) -> list[list[str]]:
  st = s.state.stage(name)
  levels = [[] for _ in range(REDUCE_LEVELS)]
  for a in st.tensor.reduce_axes:
    vs = tuple(info.new_var(f"{name}_{a.name}_{k}").arg for k in range(1, REDUCE_LEVELS))
    info.tiles.append(TileGroup(name, a.name, tile_extent(int(a.extent.arg)), vs, "reduce"))
    parts = s.split(name, a.name, [var(v) for v in vs])
    for k, p in enumerate(parts): levels[k].append(p)
  return levels


# split-K: the reduction of a tiled stage whose output is small split into SPLIT_TARGET // (output values) chunks
SPLIT_SPACE = 8192         # the largest output that also gets a split-reduction sketch ...
SPLIT_MIN_SPACE = 512      # ... and the smallest (fewer values: the cross-thread sketch's, a block of threads each)
SPLIT_TARGET = 65536       # output values times chunks aimed at: enough blocks of tiles to fill a GPU
SPLIT_MIN_CHUNK = 32       # the shortest chunk of the split axis
SPLIT_MIN_REDUCTION = 256  # the shortest reduction split (all its axes)


def split_chunks(space: int, extent: int) -> int:
  """How many chunks a split reduction cuts an axis of ``extent`` into for an output of ``space`` values (a power
  of two, 0: none): SPLIT_TARGET // space, at most 32, and chunks of at least SPLIT_MIN_CHUNK."""
  n = 1 << max(0, (SPLIT_TARGET // max(space, 1)).bit_length() - 1)
  n = min(n, 32)
  while n > 1 and extent < n * SPLIT_MIN_CHUNK: n //= 2
  return n if n > 1 else 0


def _split_plan(tensor):
  """(the reduce axis to split, its chunks) of a stage computing ``tensor``, or None where the split-reduction
  sketch does not apply (an output outside SPLIT_MIN_SPACE..SPLIT_SPACE values, a reduction shorter than
  SPLIT_MIN_REDUCTION terms, an axis too short for two chunks)."""
  space = math.prod(int_dims(tensor.shape))
  ax = max(tensor.reduce_axes, key=lambda a: int(a.extent.arg))
  red = math.prod(int(a.extent.arg) for a in tensor.reduce_axes)
  if not SPLIT_MIN_SPACE <= space <= SPLIT_SPACE or red < SPLIT_MIN_REDUCTION: return None
  n = split_chunks(space, int(ax.extent.arg))
  return (ax, n) if n else None


class SplitReduction(SketchRule):
  """Not Ansor's: for a stage with data reuse whose output is too small to fill the GPU with tiles (the 8x8 .. 2x2
  layers of a ResNet on 64x64 images, a classifier's last matmul) and whose reduction is long, one more sketch
  splits the longest reduce axis into chunks (``rfactor``): a tiled stage of partial sums, one per chunk, whose
  tiles of the chunk axis are more blocks, and a kernel that adds each output's partials with the elementwise
  consumer (bias, ReLU, residual) in it. cuBLAS and cuDNN call it split-K."""
  name = "split_reduction"

  def condition(self, ctx, s, i, info):
    st = _stage(s, i)
    if st.relations or st.annotations or st.attach != ROOT or st.scope is not None or not needs_tiling(s, st.name):
      return Decision.SKIP
    if any(a.startswith(self.name) for a in info.applied): return Decision.SKIP     # (once a sketch)
    if _split_plan(st.tensor) is None: return Decision.SKIP
    out = fusible_consumer(s, st.name)
    if out is not None and (s.state.stage(out).relations or s.state.stage(out).attach != ROOT): return Decision.SKIP
    return Decision.APPLY

  def apply(self, ctx, s, i, info):
    s, info = s.copy(), info.copy()
    st = _stage(s, i)
    name = st.name
    ax, n = _split_plan(st.tensor)
    out = fusible_consumer(s, name)
    ko, _ = s.split(name, ax.name, [-(-int(ax.extent.arg) // n)])
    rf = s.rfactor(name, ko)
    final = out or name                          # the kernel that adds the partials: its elementwise consumer's
    sp = s.axis(final)
    f = s.fuse(final, *sp) if len(sp) > 1 else sp[0]
    t = thread_choice(info, final, math.prod(int_dims(s.state.stage(final).tensor.shape)), f"threads of {final}")
    blk, thr = s.split(final, f, [t])
    s.bind(final, blk, "blockIdx.x")
    s.bind(final, thr, "threadIdx.x")
    info.threads[final] = [t.arg]
    if out is not None: s.compute_at(name, out, thr)
    info.applied.append(f"{self.name}({name}: {n} chunks of {ax.name})")
    return [(s, s.state.index(rf), info)]


class MultiLevelTilingWithFusion(SketchRule):
  """Tile ("SSSRRSRS") a stage with data reuse together with its elementwise consumer."""
  name = "multi_level_tiling_with_fusion"

  def condition(self, ctx, s, i, info):
    st = _stage(s, i)
    if st.relations or st.attach != ROOT or not needs_tiling(s, st.name): return Decision.SKIP
    out = fusible_consumer(s, st.name)
    if out is None or s.state.stage(out).relations or s.state.stage(out).attach != ROOT: return Decision.SKIP
    return Decision.APPLY_AND_SKIP_REST

  def apply(self, ctx, s, i, info):
    s, info = s.copy(), info.copy()
    name = _stage(s, i).name
    out = fusible_consumer(s, name)
    _tile_with_fusion(s, info, name, out)
    info.applied.append(f"{self.name}({name} -> {out})")
    return [(s, i - 1, info)]


class MultiLevelTiling(SketchRule):
  """Tile ("SSSRRSRS") a stage with data reuse on its own (it writes its output directly)."""
  name = "multi_level_tiling"

  def condition(self, ctx, s, i, info):
    st = _stage(s, i)
    ok = not st.relations and st.attach == ROOT and needs_tiling(s, st.name)
    return Decision.APPLY_AND_SKIP_REST if ok else Decision.SKIP

  def apply(self, ctx, s, i, info):
    s, info = s.copy(), info.copy()
    name = _stage(s, i).name
    levels, made = _tile_spatial(s, info, name, SPATIAL_LEVELS)
    red = _tile_reduce(s, info, name)
    order = levels[0] + levels[1] + levels[2] + red[0] + red[1] + levels[3] + red[2] + levels[4]
    s.reorder(name, *order)
    _fuse_bind(s, name, levels[0], "blockIdx.x")
    _fuse_bind(s, name, levels[1], "vthread")
    _fuse_bind(s, name, levels[2], "threadIdx.x")
    st = s.state.stage(name)
    info.threads[name] = [made[a.name][1] for a in st.tensor.axes]
    info.vthreads[name] = [made[a.name][0] for a in st.tensor.axes]
    rl = [l for l in s.loops(name) if st.kind(l) == "reduce"]
    if rl: info.unroll.append((name, rl[0]))
    info.applied.append(f"{self.name}({name})")
    return [(s, i - 1, info)]


class TensorCoreTiling(SketchRule):
  """Not Ansor's (it has no tensor cores): for a task whose reduction goes on the tensor cores (half operands,
  graph/tensor_core_schedules.py ``plan``), one more sketch: compile's tensor-core template with its warp tile,
  k-step and fetch widths left open as choices; and, where compile's template offers split-K (tiles that leave SMs
  idle), a second one on the reduction split as it splits it. Applied once, to the untouched first state; the other
  rules still derive their sketches from that state."""
  name = "tensor_core_tiling"

  def condition(self, ctx, s, i, info):
    return Decision.SKIP if s.steps or i != len(s.state.stages) - 1 else Decision.APPLY

  def apply(self, ctx, s, i, info):   # (no sketch where the task does not qualify: tensor_core_sketch's None)
    from minicomp.graph.tensor_core_schedules import tensor_core_sketch
    out = []
    for split in (False, True):       # (and split-K, where compile's template offers it: tiles leaving SMs idle)
      new = info.copy()
      made = tensor_core_sketch(ctx.dag, ctx.target, new.new_var, split)
      if made is None: continue
      sched, choices = made
      new.choices += [Choice(v.arg, cands, what) for v, cands, what in choices]
      new.applied += [self.name, "tensor_core_split_k"] if split else [self.name]
      out.append((sched, -1, new))
    return out


class SkipStage(SketchRule):
  name = "skip_stage"

  def condition(self, ctx, s, i, info): return Decision.APPLY_AND_SKIP_REST
  def apply(self, ctx, s, i, info): return [(s, i - 1, info)]


DEFAULT_RULES: list[SketchRule] = [TensorCoreTiling(), AddCacheRead(), AlwaysInline(), CrossThreadReduction(),
                                   SplitReduction(), AddCacheWrite(), MultiLevelTilingWithFusion(), MultiLevelTiling(),
                                   SkipStage()]
