"""Tensor-core schedules for matmul-like tasks: the candidates ``compile`` adds for half-precision and int8 tasks.

A task qualifies when its one data-reuse reduction ``R`` is a sum of products ``x * y`` of two half operands
(float16 or bfloat16; float32 with ``precision="tf32"``: a MatMul, Gemm, batched MatMul or convolution), or an
integer matmul's or convolution's sum of ``dot4`` terms of 8-bit operands (four steps of k a term: ``mma.sync``
m16n8k32, k-steps of 32 bytes), and reaches the task's one output ``O``
through elementwise stages (bias, folded batch norm, activation, residual: inlined, as the rule-based
schedules do); a convolution only when an operand reads the k-step's channels innermost (weights stored
channels-last by graph/layout.py). ``R``'s spatial axes are classed by the operands that read them: **rows** (read by ``x`` only:
a matmul's i, a convolution's batch and output pixels), **columns** (``y`` only: j, the output channels) and
**batch** (both). A schedule (docs/tensor_cores.md) then

- fuses ``O``'s row axes and its column axes, and splits them into block, warp, instruction and lane parts in the
  order of the PTX fragments: ``row = block (BM) + warp (16 MI) + m (16) + r (8) + g`` for the lane's groupID
  ``g``, ``column = block (BN) + warp (8 NI) + n (8) + t (2) + c`` for its ``t``. A lane's accumulators are then
  rows 8 and columns 1 and 8 apart, which lowering keeps as a (2 MI) x (2 NI) register tile without the gaps
  (``ir/lower.py``, a strided region), and a fragment's 8 rows are 8 adjacent tile rows, which each shared tile
  (rows padded to an odd multiple of 16 bytes: ``storage_align``) serves to ``ldmatrix`` without bank conflicts.
  (Rows ``g (2 MI) + 2 m + r``, which this replaced on 2026-11-29, put a fragment's rows 2 MI tile rows apart:
  8-way conflicts for MI = 4, the H200's 64 TFLOP/s of benchmarks/README.md.) With two row axes whose last is a
  multiple of 8 (a convolution's output pixels), or padded to one within :data:`MAX_PADDING` where that beats a row
  at a time (:func:`pixel_tiles_fit`: rows of 14 or 7 pixels), the rows are tiled in two dimensions instead: ``g``
  along the last axis (8 columns of pixels), warp, ``m`` and ``r`` along the one before, so a block's input tile is
  a 2-D box (not padded);
- computes ``R`` in registers at the thread loop, its longest reduction axis (a convolution's input channels)
  innermost and split into k-steps of ``KSTEP`` where it divides (the other reduction axes loop around them, so a
  step reads 32 channels at one filter tap: a box bound inference sizes exactly), else all of them fused
  (staged through shared memory, fetched by the whole block) and the intrinsic's k, unrolls the warp tile and
  tensorizes the innermost (r, c, k) loops. A reduction that ``KSTEP`` does not divide (a matmul's k of 16 or 48)
  takes k-steps of one instruction; a matmul's k that is no whole number of instructions (197 keys of attention's
  P x V) is padded to one, its last k-step computed on zero-filled tiles (a convolution's is not offered).

On sm_80+ the shared tiles are fetched ahead with ``cp.async`` (``Schedule.pipeline``: 3 stages where they fit 48 KB,
else 2): a matmul's k-steps, and a convolution's taps and k-steps fused into one loop where it is long enough
(:data:`TAP_PIPELINE_MIN_STEPS`; docs/tensor_cores.md). On an H200
(2026-11-29, research/tc_kernel_variants.py) 3 stages made a hand-written 128 x 64 fp16 matmul 1.12x faster and 2
stages on a 128 x 128 tile 1.43x.

``CONFIGS`` are the (warps in rows, warps in columns, MI, NI) offered, largest tile first; one whose tiles overhang
the task by more than :data:`MAX_PADDING` is skipped (:meth:`Plan.fits`: the overhang is computed, not stored).
Of the others, the largest tile that still gives every SM of the target a block and the next larger one are built
(``MAX_CANDIDATES``); one whose lowering fails (a lane box that bound inference cannot size, too much shared memory)
is dropped. Where the largest tile that fits leaves SMs idle, a split-K candidate is added (:func:`_split_choice`,
:func:`_split`: float32 partial sums per chunk of the reduction, then a kernel adding them with the epilogue). The
static model picks among the ones that build and Gensor's FP32 candidates (``compiler._construct``).
:func:`tensor_core_sketch` is the same template with its warp tile, k-step and fetch widths left open, the tuners'
sketch (``search/sketch_rules.py``).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from minicomp.codegen.tensor_core import CP_ASYNC_MIN_CC
from minicomp.errors import LoweringError, ScheduleError
from minicomp.graph.schedules import epilogue_output
from minicomp.ir.dag import ComputeDAG, has_data_reuse
from minicomp.ir.expr import free_vars, walk
from minicomp.ir.mma import BYTE_TYPES, INTRINSICS
from minicomp.ir.names import c_ident
from minicomp.ir.ops import DOT4, DTYPE_BYTES, Op
from minicomp.ir.rewrite import substitute
from minicomp.ir.schedule import Schedule
from minicomp.target import Target

# (warps on rows, on columns, MI, NI), largest tile first: 128 x 128 (8 warps), 128 x 64, 64 x 64, 64 x 32, 32 x 32,
# 32 x 16, 16 x 8
CONFIGS = ((2, 4, 4, 4), (2, 2, 4, 4), (2, 2, 2, 4), (2, 2, 2, 2), (2, 2, 1, 2), (2, 2, 1, 1), (1, 1, 1, 1))
KSTEP = 32                  # reduction elements per shared-memory step (two m16n8k16 per warp tile)
MAX_CANDIDATES = 2
# split-K (_split_choice): the most chunks, and the blocks per SM aimed at. By the static model on the H100
# (2026-12-02, fp16), ResNet's 3 x 3 convolutions on 28 x 28 to 7 x 7 and BERT-base's FFN matmul (128 x 768,
# k = 3072) ran fastest split into 2-4 blocks an SM; more chunks than 8 wrote partial sums that cost more than the
# blocks gained (the matmul's 32 chunks of 128 x 128: 42.6 us* against 19.2 in 8 chunks of 64 x 64)
SPLIT_MAX_CHUNKS = 8
SPLIT_BLOCKS_PER_SM = 1.5
SPLIT_MIN_K = 256           # products a chunk sums at least (8 k-steps: a pipeline of fewer barely fills)
SPLIT_THREADS = 256         # threads a block of the kernel that adds a split reduction's partial sums
MAX_PADDING = 0.5           # the most products a tile overhanging the task may add, relative to the task's (Plan.fits)
FETCH_BYTES = 16            # bytes a thread copies to shared memory at once (one 16-byte access: 8 halves, 4 floats)
STAGES = (3, 2)             # pipeline stages offered on sm_80+ (cp.async), the most that fit the shared memory first
# a convolution's taps x k-steps below which its tiles stay synchronous: on an H200 (2026-11-29, fp16, research/
# results/tc_choice/) pipelining 9 taps x 4 steps (ResNet-18's 8 x 8 x 128 layers) took 33 -> 20 us, 9 x 2 (16 x 16 x
# 64) changed nothing, and conv 3x3 56x56x64 (9 x 2) went 21.7 -> 43.5 us in fp16 (another of the two candidates
# chosen, each estimated 10.4 us*) and 23.6 -> 20.5 in bf16
TAP_PIPELINE_MIN_STEPS = 32


def intrinsic_for(dtype: str, target: Target, tf32: bool = False, b_dtype: str | None = None) -> str | None:
  """The mma.sync intrinsic for operands of ``dtype`` (B's ``b_dtype`` where it differs: the 8-bit integer types) on
  ``target`` (float32 ones only with ``tf32``), or None."""
  cc = target.device.compute_capability
  b_dtype = b_dtype or dtype
  if dtype in BYTE_TYPES and b_dtype in BYTE_TYPES:
    return f"m16n8k32_{BYTE_TYPES[dtype]}{BYTE_TYPES[b_dtype]}" if cc >= (8, 0) else None
  if b_dtype != dtype: return None
  if dtype == "float16": return "m16n8k16_f16" if cc >= (8, 0) else "m16n8k8_f16" if cc >= (7, 5) else None
  if dtype == "bfloat16": return "m16n8k16_bf16" if cc >= (8, 0) else None
  if dtype == "float32" and tf32: return "m16n8k8_tf32" if cc >= (8, 0) else None
  return None


def _operands(r) -> tuple | None:
  """(x, y): the two factors of ``r``'s summand, or None when it is not a product of two reads; of a ``dot4`` summand
  (an integer matmul's four steps of k a term, graph/ops/qlinear.py), the first term's."""
  body = r.body.src[0] if r.body is not None and r.body.op is Op.REDUCE else None
  if body is not None and body.op is Op.CALL and body.arg == DOT4: x, y = body.src[0], body.src[4]
  elif body is None or body.op is not Op.MUL: return None
  else: x, y = body.src
  if sum(n.op is Op.LOAD for n in walk(x)) != 1 or sum(n.op is Op.LOAD for n in walk(y)) != 1: return None
  return x, y


def _source_index(e) -> tuple | None:
  """(tensor, index expressions) of the stored tensor the one read in ``e`` reaches: through stages whose body
  is a single read (a constant's layout view, a transpose), with their indices substituted; None for another
  body (a pad's select, arithmetic)."""
  load = next(n for n in walk(e) if n.op is Op.LOAD)
  t, idx = load.arg, tuple(load.src)
  while not t.is_placeholder and t.body.op is Op.LOAD:
    env = {a.name: i for a, i in zip(t.axes, idx)}
    t, idx = t.body.arg, tuple(substitute(i, env) for i in t.body.src)
  return (t, idx) if t.is_placeholder else None


def _k_step_contiguous(x, y, k_axis: str) -> bool:
  """Whether an operand reads ``k_axis`` (the k-step's axis) as its stored tensor's innermost index and in no
  other: a step's values then lie side by side (a convolution's channels-last weights, graph/layout.py)."""
  for e in (x, y):
    src = _source_index(e)
    if src is None: continue
    *outer, last = src[1]
    if k_axis in free_vars(last) and not any(k_axis in free_vars(i) for i in outer): return True
  return False


def _classes(r, x, y) -> list[str] | None:
  """Per spatial axis of ``r``: "row", "col" or "batch"."""
  axes = [a.name for a in r.axes]
  dx = {v for n in walk(x) if n.op is Op.LOAD for e in n.src for v in free_vars(e)}
  dy = {v for n in walk(y) if n.op is Op.LOAD for e in n.src for v in free_vars(e)}
  out = ["batch" if (a in dx) == (a in dy) else "row" if a in dx else "col" for a in axes]
  return out if "row" in out and "col" in out else None


@dataclass(frozen=True)
class Plan:
  """How a task goes on the tensor cores: its reduction ``r`` and output ``out`` (stage names), the class of each of
  ``r``'s spatial axes, the intrinsic, whether output rows are tiled in two dimensions, and the task's sizes."""
  r: str
  out: str
  classes: tuple[str, ...]
  intr: str
  two_d: bool
  k_padding: float       # the reduction's length in whole instructions over its own (1.0: no padding)
  rows: int
  cols: int
  batch: int
  inner_row: int
  inner_col: int
  row_ext: tuple[int, ...]
  split: int = 0         # chunks the reduction's longest axis is split into (split-K: :func:`_split`); 0: none

  def fits(self, wm: int, wn: int, mi: int, ni: int) -> bool:
    """Whether the configuration takes the task. Its tiles may overhang the rows and the columns where each is one
    axis (a matmul's; a 2-D tile's rows of pixels): the overhang is computed and not stored (lowering's
    ``_computes_padding``), where it adds, with the reduction's padding to whole instructions, at most
    :data:`MAX_PADDING` to the task's products. Several row (or column) axes fused into one (:func:`plan` leaves them
    fused where the innermost is a multiple of 16 rows or 8 columns, or divides 8) must divide exactly: a lane's rows
    would otherwise straddle two rows of the axis before, a region bound inference cannot size as the fragments
    need."""
    if not self.two_d and self.inner_row != self.rows and (self.rows % (wm * 16 * mi) or self.inner_row % (2 * mi)):
      return False
    if self.inner_col != self.cols and (self.cols % (wn * 8 * ni) or self.inner_col % (2 * ni)): return False
    rows = self.row_ext[-2] * self.row_ext[-1] if self.two_d else self.rows
    padded_rows = _padded(self.row_ext[-2], wm * 2 * mi) * _padded(self.row_ext[-1], 8) if self.two_d \
      else _padded(rows, wm * 16 * mi)
    padded = padded_rows * _padded(self.cols, wn * 8 * ni) * self.k_padding
    return padded <= (1 + MAX_PADDING) * rows * self.cols

  def configs(self) -> list[tuple[int, int, int, int]]:
    """The configurations of :data:`CONFIGS` that take the task (:meth:`fits`), largest tile first."""
    return [c for c in CONFIGS if self.fits(*c)]

  def blocks(self, wm: int, wn: int, mi: int, ni: int) -> int:
    """The thread blocks the configuration launches."""
    rows = -(-self.row_ext[-2] // (wm * 2 * mi)) * math.prod(self.row_ext[:-2]) * -(-self.row_ext[-1] // 8) \
      if self.two_d else -(-self.rows // (wm * 16 * mi))
    return self.batch * rows * -(-self.cols // (wn * 8 * ni))


def _padded(n: int, tile: int) -> int: return -(-n // tile) * tile


def pixel_tiles_fit(width: int, window: bool = True) -> bool:
  """Whether output rows of ``width`` pixels take the 2-D pixel tiles (8 pixels of a row a fragment's lane groups):
  a multiple of 8, or padded to one (the last tile's columns past the edge computed on zeros) within
  :data:`MAX_PADDING` (14 -> 16 and 7 -> 8 do; 5 -> 8 does not) where such tiles beat tiling one row at a time: the
  rows are read through a ``window`` (a filter wider than a pixel, whose halo a 2-D box shares) or are fewer than 16
  (a row alone would be padded to a fragment's 16). So a batch of 2 x 197 tokens is not tiled in 2-D."""
  if width % 8 == 0: return True
  return _padded(width, 8) <= (1 + MAX_PADDING) * width and (window or width < 16)


def _longest(r):
  """``r``'s longest reduction axis (the first of the longest), the one :func:`_build` steps through innermost."""
  return sorted(r.reduce_axes, key=lambda a: int(a.extent.arg))[-1]


def _windowed(e, axis: str, reduce: set[str]) -> bool:
  """Whether the read in ``e`` indexes ``axis`` together with a reduction axis (a convolution's ``ow + kw``)."""
  return any(axis in fv and fv & reduce for n in walk(e) if n.op is Op.LOAD for fv in map(free_vars, n.src))


def plan(dag: ComputeDAG, target: Target, tf32: bool = False) -> Plan | None:
  """The task's :class:`Plan`, or None when it does not qualify (the module docstring) or ``target`` has no
  tensor-core instruction for its type. float32 operands qualify only with ``tf32`` (``precision="tf32"``)."""
  reds = [t for t in dag.tensors if t.reduce_axes]
  if len(dag.outputs) != 1 or len(reds) != 1 or not has_data_reuse(reds[0]): return None
  r = reds[0]
  outs = {t.name for t in dag.outputs}
  out = r.name if r.name in outs else epilogue_output(dag, r, outs)
  return None if out is None else _plan(r, out, target, tf32)


def _plan(r, out: str, target: Target, tf32: bool) -> Plan | None:
  """:func:`plan` of the reduction tensor ``r`` whose result reaches the stage ``out`` (``r`` itself, or its
  epilogue's output)."""
  if r.reduce.combiner != "sum": return None
  ops = _operands(r)
  if ops is None: return None
  a_type, b_type = ({n.arg.dtype for n in walk(e) if n.op is Op.LOAD} for e in ops)
  intr_name = intrinsic_for(a_type.pop(), target, tf32, b_type.pop()) if len(a_type) == len(b_type) == 1 else None
  if intr_name is None: return None
  per = INTRINSICS[intr_name].k_per_term     # (the 8-bit types: a sum of dot4 terms, four steps of k each)
  if (per > 1) != (r.body.src[0].op is Op.CALL): return None
  classes = _classes(r, *ops)
  if classes is None: return None
  shape = [int(a.extent.arg) for a in r.axes]
  # an axis of extent 1 goes with the batch (blocks): fused into the rows, it hides their extent from bound
  # inference behind a // and a % (a lane's box of a (1, 197)-row matmul sized to all 197 rows)
  classes = ["batch" if n == 1 else c for c, n in zip(classes, shape)]
  if "row" not in classes or "col" not in classes: return None
  k = math.prod(int(a.extent.arg) for a in r.reduce_axes)
  k_step = INTRINSICS[intr_name].k // per     # an instruction's k (in dot4 terms for the 8-bit types)
  # k past the reduction's end is computed on zeros (lower.py _computes_padding): one reduction axis only (a
  # convolution's taps and channels fused would put the zeros amid the taps), within MAX_PADDING
  if k % k_step and (len(r.reduce_axes) > 1 or _padded(k, k_step) > (1 + MAX_PADDING) * k): return None
  # a convolution (several reduction axes) only when a k-step's values lie side by side in one operand: in ONNX's
  # weight order they lie a filter's taps apart and the FP32 pipes win (docs/tensor_cores.md)
  longest = _longest(r)
  if len(r.reduce_axes) > 1 and not _k_step_contiguous(*ops, longest.name): return None
  row_ext = tuple(s for s, c in zip(shape, classes) if c == "row")
  # two row axes (a convolution's output rows and columns): a warp's 16 fragment rows are 8 columns x 2 rows of
  # pixels (g along the columns, r and the register tile along the rows), so a block's tile is a 2-D box
  inner = next(a.name for a, c in zip(reversed(r.axes), reversed(classes)) if c == "row")
  window = any(_windowed(e, inner, {a.name for a in r.reduce_axes}) for e in ops)
  two_d = len(row_ext) >= 2 and pixel_tiles_fit(row_ext[-1], window)
  for kind, frag in (("row", 16), ("col", 8)):
    # several row (column) axes whose innermost is neither a multiple of a fragment's 16 rows (8 columns) nor a
    # divisor of 8: fused, a lane's rows would straddle rows of the axis before irregularly, a region bound
    # inference cannot size; the outer ones go with the batch (blocks) and the innermost alone is tiled, its tiles
    # overhanging it (a batch of 2 x 197 tokens; a 14 x 14 image's rows of pixels)
    axes = [d for d, c in enumerate(classes) if c == kind]
    inner = shape[axes[-1]] if axes else 0
    if len(axes) > 1 and inner % frag and 8 % inner and not (kind == "row" and two_d):
      for d in axes[:-1]: classes[d] = "batch"
  row_ext = tuple(s for s, c in zip(shape, classes) if c == "row")
  return Plan(r.name, out, tuple(classes), intr_name, two_d, _padded(k, k_step) / k,
              math.prod(s for s, c in zip(shape, classes) if c == "row"),
              math.prod(s for s, c in zip(shape, classes) if c == "col"),
              math.prod(s for s, c in zip(shape, classes) if c == "batch"),
              next(s for s, c in zip(reversed(shape), reversed(classes)) if c == "row"),
              next(s for s, c in zip(reversed(shape), reversed(classes)) if c == "col"), row_ext)


def tensor_core_schedules(dag: ComputeDAG, target: Target, tf32: bool = False) -> list[Schedule]:
  """Up to :data:`MAX_CANDIDATES` tensor-core schedules of ``dag`` (see the module docstring), the last a split-K
  one where the tiles would leave SMs idle (:func:`_split_choice`); [] when the task does not qualify
  (:func:`plan`)."""
  p = plan(dag, target, tf32)
  if p is None: return []
  fits = p.configs()
  # the largest tile that still gives every SM a block, and the next larger one (fewer, busier blocks)
  blocks = [p.blocks(*c) for c in fits]
  first = next((i for i, b in enumerate(blocks) if b >= target.device.sm_count), len(fits) - 1)
  split = _split_choice(dag, p, target)
  found = []
  for wm, wn, mi, ni in fits[max(first - 1, 0):]:
    if len(found) == MAX_CANDIDATES: break
    try:
      found.append(_schedule(dag, p, wm, wn, mi, ni, target))
    except (ScheduleError, LoweringError):   # (a step this task's stages do not allow: no candidate of this shape)
      continue
  if split is not None:
    try:
      found.append(_schedule(dag, split[0], *split[1], target))
    except (ScheduleError, LoweringError):
      pass
  return found


def is_split_k(s: Schedule) -> bool:
  """Whether ``s`` is a split-K schedule (:func:`_split`: its reduction rfactored into partial sums)."""
  return any(st.kind == "rfactor" for st in s.state.steps)


def _split_choice(dag: ComputeDAG, p: Plan, target: Target) -> tuple[Plan, tuple] | None:
  """(the plan with its reduction split, the configuration) of the split-K candidate, or None: the largest tile
  that up to :data:`SPLIT_MAX_CHUNKS` chunks of the reduction's longest axis (a power of two, each chunk a multiple
  of ``KSTEP`` and at least :data:`SPLIT_MIN_K` products long) make :data:`SPLIT_BLOCKS_PER_SM` blocks an SM, in
  the fewest such chunks; only where the largest tile that fits the task gives fewer blocks than that, and not for
  the 8-bit types (their sums stay integers)."""
  r = next(t for t in dag.tensors if t.name == p.r)
  n = int(_longest(r).extent.arg)
  sms = SPLIT_BLOCKS_PER_SM * target.device.sm_count
  fits = p.configs()
  if INTRINSICS[p.intr].integer or not fits or p.k_padding != 1 or p.blocks(*fits[0]) >= sms: return None
  k = math.prod(int(a.extent.arg) for a in r.reduce_axes)
  counts = [c for c in (2 ** e for e in range(1, SPLIT_MAX_CHUNKS.bit_length()))
            if n % c == 0 and n // c % KSTEP == 0 and k // c >= SPLIT_MIN_K]
  blocks = lambda cfg, c: dataclasses.replace(p, batch=p.batch * c).blocks(*cfg)    # noqa: E731
  return next(((dataclasses.replace(p, split=c), cfg) for cfg in fits for c in counts if blocks(cfg, c) >= sms), None)


def tensor_core_variants(dag: ComputeDAG, target: Target, tf32: bool = False) -> list[Schedule]:
  """The template's whole family on ``dag``: every configuration of :data:`CONFIGS` whose tiles divide the task, on
  sm_80+ in each pipeline depth of :data:`STAGES` whose tiles fit the shared memory the searches offer a block; the
  two :func:`tensor_core_schedules` keeps first, then the rest, largest tile first. For timing them on a GPU
  (``minicomp collect``): the programs compile's choice among the template's is made from."""
  p = plan(dag, target, tf32)
  if p is None: return []
  first = tensor_core_schedules(dag, target, tf32)
  seen = {s.to_json() for s in first}
  out = list(first)
  depths = STAGES if target.device.compute_capability >= CP_ASYNC_MIN_CC else (None,)
  for cfg in p.configs():
    for n in depths:
      try:
        s = _schedule(dag, p, *cfg, target, stages=n)
      except (ScheduleError, LoweringError):
        continue
      key = s.to_json()
      if key in seen or _shared_bytes(s) > target.search_shared_bytes: continue
      seen.add(key)
      out.append(s)
  return out


def _schedule(dag: ComputeDAG, p: Plan, wm: int, wn: int, mi: int, ni: int, target: Target,
              stages: int | None = None) -> Schedule:
  """The schedule of one configuration; each shared tile is fetched ``FETCH_BYTES`` per thread at once,
  or fewer where its size (known once lowered) does not split evenly over the block's threads. On sm_80+ the
  tiles are fetched ahead with cp.async (``Schedule.pipeline``) in ``stages`` buffers where given (more than the
  searches offer: research/tc_kernel_variants.py), else in the most :data:`STAGES` whose tiles fit the shared
  memory the searches offer a block."""
  tiles = [b for k in _build(dag, p, wm, wn, mi, ni, lambda src, name: 1, pad=False).lower().kernels for b in k.allocs
           if b.scope == "shared"]
  threads = wm * wn * 32
  widths = {b.name: next((v for v in (FETCH_BYTES // b.element_bytes, 4, 2)
                          if v <= FETCH_BYTES // b.element_bytes and int(b.size.arg) % (threads * v) == 0), 1)
            for b in tiles}
  s = _build(dag, p, wm, wn, mi, ni, lambda src, name: widths.get(name, 1))
  if target.device.compute_capability >= CP_ASYNC_MIN_CC:
    if stages is None:
      one = _shared_bytes(s)
      stages = next((n for n in STAGES if n * one <= target.search_shared_bytes), None)
    if stages: _pipeline(s, stages)
  return s


def _shared_bytes(s: Schedule) -> int:
  """The bytes of shared memory ``s``'s kernels allocate (padded rows and pipeline buffers included)."""
  return sum(int(b.size.arg) * b.element_bytes for k in s.lower().kernels for b in k.allocs if b.scope == "shared")


def _pipeline(s: Schedule, stages) -> bool:
  """Fetch the template's shared tiles ``stages - 1`` k-steps ahead (``Schedule.pipeline``). A convolution's k-steps
  lie inside its filter-tap loops, where a pipeline would restart at every tap: the taps and the k-steps are fused
  into one loop first (each iteration still reads one tap's box of channels), and only where that loop has
  :data:`TAP_PIPELINE_MIN_STEPS` iterations or more. Whether it pipelined."""
  at = next(st.attach for st in s.state.stages if st.scope == "shared")
  local = s.state.stage(at.stage)
  outer = [x for x in local.leaves[:local.leaves.index(at.iter)] if local.kind(x) == "reduce"]
  if outer:
    ext = local.leaf_extents()
    steps = math.prod(int(ext[x].arg) if ext[x].is_const else 0 for x in (*outer, at.iter))
    if steps < TAP_PIPELINE_MIN_STEPS: return False
  s.pipeline(at.stage, s.fuse(at.stage, *outer, at.iter) if outer else at.iter, stages)
  return True


SKETCH_WARPS = (1, 2, 4)     # the sketch's warps along the rows and along the columns (each a choice: 1 to 16 a block)
SKETCH_TILES = (1, 2, 4)     # instructions per warp tile in rows (MI) and in columns (NI)
SKETCH_STAGES = (2, 3, 4)    # the sketch's pipeline stages on sm_80+ (a draw whose tiles exceed 48 KB is redrawn)


def tensor_core_sketch(dag: ComputeDAG, target: Target, new_var, split: bool = False) \
    -> tuple[Schedule, list[tuple]] | None:
  """The tensor-core template of ``dag`` with its sizes left open, for the search (``search/sketch_rules.py``):
  (a symbolic Schedule, [(variable, candidates, what)]), or None when the task does not qualify (:func:`plan`;
  float32 tasks never: the sketch knows no precision). Open are the warps along the rows and the columns (each of
  :data:`SKETCH_WARPS`: the block tile is warps x warp tile), the warp tile (MI, NI in :data:`SKETCH_TILES`), the
  k-step (half, one or two :data:`KSTEP`) and each shared tile's fetch width
  (up to 16 bytes); on sm_80+ also the pipeline's stages (:data:`SKETCH_STAGES`; a draw whose tiles then exceed the
  shared memory fails to build and is drawn again), for a matmul: a convolution's taps are pipelined only where
  their count is known (:func:`_pipeline`), which the sketch's variable k-step hides. ``new_var(base)`` makes a
  fresh variable. A draw whose tiles do not divide the task fails to lower (a guard inside the tensorized loops)
  and is drawn again. ``split``: the template on the reduction split as compile's split-K candidate splits it
  (:func:`_split_choice`'s chunks; None where it offers none)."""
  p = plan(dag, target)
  if p is None or INTRINSICS[p.intr].integer: return None     # (8-bit: compile's template only, not searched yet)
  if split:
    found = _split_choice(dag, p, target)
    if found is None: return None
    p = found[0]
  choices = []

  def choose(base: str, candidates, what: str):
    v = new_var(base)
    choices.append((v, tuple(candidates), what))
    return v
  wm = choose("tc_wm", SKETCH_WARPS, "warps along the rows")
  wn = choose("tc_wn", SKETCH_WARPS, "warps along the columns")
  mi = choose("tc_mi", SKETCH_TILES, "warp tile rows (mma instructions)")
  ni = choose("tc_ni", SKETCH_TILES, "warp tile columns (mma instructions)")
  per = KSTEP // INTRINSICS[p.intr].k
  ksteps = choose("tc_ksteps", (per // 2, per, 2 * per), "mma instructions' k per shared-memory step")

  def width(src, name):
    most = FETCH_BYTES // DTYPE_BYTES[src.dtype]
    return choose(f"tc_{name}_vec", [v for v in (1, 2, 4, 8) if v <= most], f"fetch width of {name}")
  s = _build(dag, p, wm, wn, mi, ni, width, ksteps)
  if target.device.compute_capability >= CP_ASYNC_MIN_CC:
    stages = choose("tc_stages", SKETCH_STAGES, "pipeline stages (cp.async buffers per shared tile)")
    if not _pipeline(s, stages): choices.pop()      # (a convolution: its k-step count is a variable of the sketch)
  return s, choices


def _split(s: Schedule, p: Plan) -> Plan:
  """Split ``p``'s reduction into ``p.split`` chunks of its longest axis (split-K, as cuBLAS and cuDNN do for
  small outputs of long reductions): a stage of float32 partial sums, one per chunk (``Schedule.rfactor``), whose
  chunks are more blocks, and a kernel of :data:`SPLIT_THREADS`-thread blocks in which each thread adds one
  output's partials and applies the epilogue. The plan of the partial sums' stage: the chunks its first axis, a
  batch axis."""
  t = s.state.stage(p.r).tensor
  ax = _longest(t)
  ko, _ = s.split(p.r, ax.name, [int(ax.extent.arg) // p.split])
  rf = s.rfactor(p.r, ko)
  final = p.out
  axes = s.axis(final)
  blk, thr = s.split(final, s.fuse(final, *axes) if len(axes) > 1 else axes[0], [SPLIT_THREADS])
  s.bind(final, blk, "blockIdx.x")
  s.bind(final, thr, "threadIdx.x")
  if final != p.r: s.compute_at(p.r, final, thr)
  return dataclasses.replace(p, r=rf, out=rf, classes=("batch", *p.classes), batch=p.batch * p.split, split=0)


def _build(dag: ComputeDAG, p: Plan, wm, wn, mi, ni, width_of, ksteps=None, pad: bool = True) -> Schedule:
  """The schedule of ``p`` with warps ``wm`` x ``wn``, warp tiles of ``mi`` x ``ni`` instructions, each shared tile
  fetched ``width_of(source tensor, tile name)`` values at once and ``ksteps`` instructions' k per shared-memory
  step (``KSTEP / k`` when None); the warps, ``mi``, ``ni``, the widths and ``ksteps`` may be variables
  (:func:`tensor_core_sketch`). ``pad=False`` leaves the tiles' rows unpadded (to size them)."""
  s = Schedule(dag)
  for t in dag.tensors:
    if not t.is_placeholder and t.name != p.out and not t.reduce_axes: s.compute_inline(t.name)
  if p.split: p = _split(s, p)
  r, out, classes, intr, two_d = p.r, p.out, p.classes, p.intr, p.two_d
  local = r if r != out else s.cache_write(out, "local")
  ax = s.axis(out)
  by = {c: [a for a, k in zip(ax, classes) if k == c] for c in ("batch", "row", "col")}
  fuse = lambda st, names: s.fuse(st, *names) if len(names) > 1 else names[0]   # noqa: E731
  s.reorder(out, *by["batch"], *by["row"], *by["col"])
  cf = fuse(out, by["col"])
  if two_d:        # rows: the last row axis -> (blocks, g), the one before -> (blocks, warp, m, r), others -> blocks
    *lead, hax, wax = by["row"]
    wo, g = s.split(out, wax, 8)
    ho, w_m, m, rr = s.split(out, hax, [wm, mi, 2])
    io = [*lead, ho, wo]
  else:            # rows in the PTX order: warp, instruction m, r (8 rows apart), g
    io, w_m, m, rr, g = s.split(out, fuse(out, by["row"]), [wm, mi, 2, 8])
    io = [io]
  jo, w_n, n, t, cc = s.split(out, cf, [wn, ni, 4, 2])     # columns: warp, instruction n, t, c
  s.reorder(out, *by["batch"], *io, jo, w_m, w_n, g, t, m, n, rr, cc)
  s.bind(out, s.fuse(out, *by["batch"], *io, jo), "blockIdx.x")
  tx = s.fuse(out, w_m, w_n, g, t)
  s.bind(out, tx, "threadIdx.x")
  s.compute_at(local, out, tx)
  lax = s.axis(local) if local == r else s.loops(local)[:len(classes)]
  lby = {c: [a for a, k in zip(lax, classes) if k == c] for c in ("batch", "row", "col")}
  ext = {a.name: int(a.extent.arg) for a in s.state.stage(local).tensor.reduce_axes}
  red = sorted(s.reduce_axis(local), key=lambda a: ext[a])      # the longest (a convolution's channels) innermost
  s.reorder(local, *lby["batch"], *lby["row"], *lby["col"], *red)
  lm, lr = s.split(local, fuse(local, lby["row"]), 2)
  ln, lc = s.split(local, fuse(local, lby["col"]), 2)
  # k-steps of KSTEP along the longest reduction axis when it divides, the others loops around them (each step
  # then reads a box bound inference sizes exactly: 32 channels at one filter tap); else over all of them fused
  # (k-steps of fewer instructions where KSTEP does not divide the reduction: a matmul's k of 16 or 48)
  outer, inner = (red[:-1], red[-1]) if ext[red[-1]] % KSTEP == 0 else ([], fuse(local, red))
  step = INTRINSICS[intr].k // INTRINSICS[intr].k_per_term    # (8-bit: dot4 terms of 4 k each)
  k_ext = ext[red[-1]] if outer else math.prod(ext.values())
  per = max(1, KSTEP // INTRINSICS[intr].k) if ksteps is None else ksteps
  while isinstance(per, int) and per > 1 and k_ext % (per * step): per //= 2
  ko, k1, ki = s.split(local, inner, [per, step])
  s.reorder(local, *lby["batch"], *outer, ko, k1, lm, ln, lr, lc, ki)
  for src in [t.name for t in s.state.stage(local).tensor.inputs]:
    xs = s.cache_read(src, "shared", [local])
    s.compute_at(xs, local, ko)
    width = width_of(s.state.stage(src).tensor, c_ident(xs))
    if pad and not two_d:   # rows an odd number of 16 bytes apart: the 8 rows an ldmatrix reads hit 8 bank groups
      eb = DTYPE_BYTES[s.state.stage(src).tensor.dtype]     # (8-bit rows: 32-byte multiples 16 bytes on, so a 16-byte
      s.storage_align(xs, len(s.state.stage(xs).tensor.shape) - 2, *((32, 16) if eb == 1 else (16, 8)))   # copy fits)
    if isinstance(wm, int) and isinstance(wn, int):
      o, thr, v = s.split(xs, fuse(xs, s.loops(xs)), [wm * wn * 32, width])
    else:                   # (a symbolic split factor is one variable: the block's threads split as its warps are)
      o, a, b, c, v = s.split(xs, fuse(xs, s.loops(xs)), [wm, wn, 32, width])
      thr = s.fuse(xs, a, b, c)
    s.bind(xs, thr, "threadIdx.x"); s.unroll(xs, o)
    if not isinstance(width, int) or width > 1: s.vectorize(xs, v)
  s.unroll(local, k1); s.unroll(local, lm); s.unroll(local, ln)
  s.tensorize(local, lr, intr)
  return s


__all__ = ["CONFIGS", "KSTEP", "Plan", "intrinsic_for", "is_split_k", "pixel_tiles_fit", "plan",
           "tensor_core_schedules", "tensor_core_sketch", "tensor_core_variants"]
