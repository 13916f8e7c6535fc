"""Data movement of a lowered kernel (Tuna's Algorithm 2, adapted to a GPU memory hierarchy).

Every count comes from the access relations ``isl_build.py`` builds from the loop IR, never
from a per-op formula, so the analysis follows any schedule the IR can express: dynamic access
counts are isl cardinalities of (factored) instance domains, distinct elements are isl
cardinalities of images (with numpy enumeration of the same relation for small sets, where
isl's point scan is slower, and as a fallback when isl exceeds an operation budget; see
:class:`_Counter`). Sums over blocks / threads use translation invariance and classes of equal
counts to stay exact; where they cannot, they are estimated and ``sums_exact`` says so.

Memory levels, outermost first:

- **DRAM -> L2**: the grid's block dimensions are treated as loops (``blockIdx.z`` outermost,
  ``blockIdx.x`` innermost: the launch order), with the L2 capacity as the cache. One
  iteration of the innermost one is one block.
- **L2 -> SM (L1)**: inside block 0, every ``For`` of the body is a loop node; all the threads
  of the block run an iteration together. The cache is the L1 left over by the kernel's shared
  memory. L1 caches reads only; stores write through, so the SM -> L2 traffic is the dynamic
  store volume.
- **shared / registers**: the dynamic access counts and the per-block / per-thread distinct
  elements of every buffer (shared buffers are private to a block, local ones to a thread).

Algorithm 2 at a loop node with trip count ``T``: when the footprint of one iteration (all
buffers of the level) fits the cache, consecutive iterations reuse each other's data and the
movement is the footprint of the whole loop; otherwise it is ``T`` times the movement of one
iteration, which sums its sub-loops and its own accesses. Outer loops are fixed at 0.

Coalescing (global) and bank conflicts (shared) evaluate each index for the 32 lanes of the
first warp (``threadIdx`` linearised x fastest, block 0) at a few loop iterations: every loop at
0, and each loop in turn at 1 and at its last value; ``vectorize`` loops form one request.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import islpy as isl
import numpy as np

from minicomp.errors import ExprError
from minicomp.ir.evaluate import evaluate
from minicomp.ir.expr import Expr, free_vars
from minicomp.ir.loop import LoopKernel, Program
from minicomp.ir.ops import DTYPE_BYTES, Op
from minicomp.ir.simplify import bounds, build_linear, linear, simplify
from minicomp.search.static.isl_build import (HW_TAGS, N_HW, AccessMap, LoopNode, access_map, collect_accesses,
                                              hw_extent, isl_budgeted)

SUM_EXACT_LIMIT = 512     # kept hardware-index combinations isl may scan for an exact per-block / per-thread sum
ISL_BUDGETS = (3000, 30000)   # isl operations a count may take, first and second try
INJECTIVE_BUDGET = 3000   # isl operations an injectivity test may take (a tenth with many digit variables)
ENUM_CHEAP = 1 << 18      # sets of at most this many instances are enumerated with numpy (isl is slower there)
ENUM_LIMIT = 1 << 20      # instances enumerated in one go (sampled sums)
ENUM_HARD_LIMIT = 1 << 25  # instances the numpy fallback enumerates at most (in chunks)
ENUM_CHUNK = 1 << 20
ENUM_PREFERRED = 1 << 25   # past the first isl budget, sets this small are enumerated rather than retried (isl's second budget can take seconds)
SAMPLE_LIMIT = 1 << 22     # instances a sampled count enumerates (sets too large for isl and for ENUM_HARD_LIMIT)
SUM_CLASSES_LIMIT = 256   # classes of equal per-block / per-thread counts counted one by one at most
SUM_ENUM_LIMIT = 1 << 18  # instances a per-block / per-thread sum enumerates before it samples
SECTOR = 32
LINE = 128                # L1 / L2 cache line: four sectors


@dataclass(frozen=True)
class BufferTraffic:
  """Counts for one buffer in one kernel, in elements unless named ``_bytes``."""
  name: str
  scope: str
  dtype_bytes: int
  size: int
  exact: bool           # every access had quasi-affine indices and conditions
  reads: int            # dynamic accesses (one per statement instance)
  writes: int
  unique_read: int      # distinct elements over the grid
  unique_write: int
  unique: int
  block_sum: int        # distinct elements of each block, summed over the blocks
  thread_sum: int       # distinct elements of each thread, summed over the threads
  per_block: int        # distinct elements of block 0
  per_thread: int       # distinct elements of thread 0 of block 0
  l2_read_bytes: float  # L2 -> SM reads, with the reuse L1 captures (global buffers)
  l2_write_bytes: float # SM -> L2 stores (write-through)
  dram_bytes: float     # DRAM <-> L2 traffic (reads and writes)
  sums_exact: bool = True   # block_sum / thread_sum counted (not estimated from sampled indices)

  @property
  def read_bytes(self) -> int: return self.reads * self.dtype_bytes
  @property
  def write_bytes(self) -> int: return self.writes * self.dtype_bytes
  @property
  def unique_bytes(self) -> int: return self.unique * self.dtype_bytes
  @property
  def block_sum_bytes(self) -> int: return self.block_sum * self.dtype_bytes
  @property
  def thread_sum_bytes(self) -> int: return self.thread_sum * self.dtype_bytes
  @property
  def per_thread_bytes(self) -> int: return self.per_thread * self.dtype_bytes


@dataclass(frozen=True)
class LoopLevel:
  """One node of Algorithm 2: a grid dimension (memory "L2") or a loop of the body ("L1")."""
  loop: str             # loop variable, or "blockIdx.x" ...
  node: int | None      # pre-order number of the For in the kernel body (None for grid levels)
  kind: str             # "grid" | "serial" | "unroll" | "vectorize" | "vthread"
  depth: int
  trip: int
  memory: str           # "L2" | "L1"
  cache_bytes: int
  iter_bytes: int       # footprint of one iteration, all buffers of the level
  footprint_bytes: int  # footprint of the whole loop
  movement_bytes: float
  buffers: tuple[tuple[str, int, int, float], ...]   # (buffer, iteration bytes, footprint bytes, movement bytes)

  @property
  def fits(self) -> bool: return self.iter_bytes <= self.cache_bytes


@dataclass(frozen=True)
class AccessPattern:
  """Warp-level behaviour of one global or shared access."""
  buffer: str
  scope: str
  kind: str             # "read" | "write"
  index: str
  count: int            # dynamic accesses
  sectors_per_request: float | None = None    # global: distinct 32-byte sectors per warp request
  efficiency: float | None = None             # global: requested bytes / moved bytes (<= 1)
  requests: float | None = None               # global: estimated warp requests
  bank_conflict: float | None = None          # shared: max distinct words per bank (1 = none)
  lines_per_request: float | None = None      # global: distinct 128-byte lines per warp request


@dataclass(frozen=True)
class DataMovement:
  """Data movement of one kernel launch."""
  kernel: str
  grid: tuple[int, int, int]
  block: tuple[int, int, int]
  buffers: tuple[BufferTraffic, ...]
  levels: tuple[LoopLevel, ...]
  accesses: tuple[AccessPattern, ...]
  global_load_bytes: int        # dynamic
  global_store_bytes: int
  shared_load_bytes: int
  shared_store_bytes: int
  unique_global_bytes: int      # compulsory DRAM traffic
  block_sum_global_bytes: int   # L2 -> SM traffic without any reuse across blocks
  l2_read_bytes: float
  l2_write_bytes: float
  dram_bytes: float
  load_sectors: float           # estimated 32-byte sectors requested by global loads
  store_sectors: float
  coalescing_efficiency: float  # weighted by dynamic accesses (1.0 when there are none)
  sectors_per_request: float
  bank_conflict: float
  exact: bool
  counts: tuple[tuple[str, int], ...] = ()   # how the distinct counts were taken: isl / enumerated / sampled

  def buffer(self, name: str) -> BufferTraffic:
    for b in self.buffers:
      if b.name == name: return b
    raise KeyError(name)


def analyze_program(program: Program, l1_bytes: int = 128 * 1024, l2_bytes: int = 6 * 1024 * 1024) -> list[DataMovement]:
  """:func:`data_movement` for every kernel of a lowered concrete program."""
  return [data_movement(k, l1_bytes, l2_bytes) for k in program.kernels]


# ---------------------------------------------------------------------------------------------
# isl helpers

class _Counter:
  """Distinct-element counts of sets of accesses, memoised, with ``stats`` of how each was taken.

  Sets of at most :data:`ENUM_CHEAP` instances are enumerated with numpy: isl's ``count_val``
  scans the points of a set with existential variables, and a few small ones with awkward
  lattices (fused loops split again by threads) take it seconds to minutes. Larger sets go to
  isl: its count within a small operation budget; for a single injective access, the count of
  its (factored) instance domain; the count within a larger budget; then enumeration when
  there are at most :data:`ENUM_HARD_LIMIT` instances (in chunks); otherwise a sampled count
  (:func:`_sampled`), so that every count finishes in bounded time. (isl without a budget, the
  last resort before, ran for more than 30 minutes on a stride-2 3x3 convolution's input.)
  """

  def __init__(self, kernel: LoopKernel):
    self.kernel = kernel
    self.stats = {"isl": 0, "enumerated": 0, "sampled": 0}
    self.memo: dict[tuple, int] = {}

  def __call__(self, ms, keep: int = 0, fixed: tuple[int, ...] = (), at: tuple[tuple[int, int], ...] = ()) -> int:
    """Distinct (first ``keep`` hardware indices, element) pairs the accesses ``ms`` touch, with
    the input dimensions ``fixed`` at 0 and ``at`` (position, value) fixed."""
    return self.items([(m, fixed, at) for m in ms], keep)

  def union_fixed(self, by_fix: dict[tuple[int, ...], list[AccessMap]]) -> int:
    """Distinct elements of several groups of accesses, each with its own fixed dimensions."""
    return self.items([(m, fx, ()) for fx, ms in by_fix.items() for m in ms], 0)

  def items(self, items: list[tuple[AccessMap, tuple[int, ...], tuple]], keep: int) -> int:
    if not items: return 0
    unit = {p for p in range(N_HW) if hw_extent(self.kernel, p) == 1}     # fixing those changes nothing
    items = [(m, tuple(p for p in fx if p not in unit), at) for m, fx, at in items]
    if unit.issuperset(range(keep)): keep = 0                            # constant keys
    same = {}                          # a read and a write of one statement touch the same elements
    for m, fx, at in items: same.setdefault((_shape(m), fx, at), (m, fx, at))
    items = list(same.values())
    key = (keep,) + tuple((id(m), fx, at) for m, fx, at in items)
    if key not in self.memo: self.memo[key] = self._count(items, keep)
    return self.memo[key]

  def _count(self, items, keep: int) -> int:
    fixes = [(m, {**{p: 0 for p in fx}, **dict(at)}) for m, fx, at in items]
    n = sum(_instances(m, keep, f) for m, f in fixes)
    if n <= ENUM_CHEAP:
      self.stats["enumerated"] += 1
      return _enumerate(fixes, keep)
    s = _union(m.image(keep, fx, at) for m, fx, at in items)
    count = lambda: s.count_val().to_python()
    c = isl_budgeted(count, ISL_BUDGETS[0])
    if c is None and len(fixes) == 1:   # one access, injective: the image is as large as the domain
      (m, fix), = fixes
      drop = frozenset(range(len(m.extents))) - set(_relevant(m, keep)) - set(fix)
      if m.affine_index and m.exact and m.injective(keep, fix, drop, INJECTIVE_BUDGET):
        c = m.instance_count(fix, drop)
    if c is None and n > min(ENUM_PREFERRED, ENUM_HARD_LIMIT): c = isl_budgeted(count, ISL_BUDGETS[1])
    if c is not None:
      self.stats["isl"] += 1
      return c
    if n <= ENUM_HARD_LIMIT:
      self.stats["enumerated"] += 1
      return _enumerate(fixes, keep)
    self.stats["sampled"] += 1        # a huge set isl finds hard: estimated, within stated bounds
    return _sampled(fixes, keep, n, self.kernel)[0]


def _sampled(fixes, keep: int, n: int, kernel: LoopKernel, limit: int = SAMPLE_LIMIT) -> tuple[int, int, int]:
  """(estimate, lower bound, upper bound) of the distinct count of :class:`_Counter`, from at most
  about ``limit`` instances: the hardware index with the most values is restricted to evenly
  spaced values (the first and the last among them), the distinct elements found there are
  counted exactly and scaled by the fraction of its values taken.

  Kept indices (``p < keep``) partition the count, so when the blocks or threads alike touch
  alike many elements the scaling is exact; for an index that is not kept, overlap between its
  values (a convolution's halo) makes the scaled count an overestimate. The estimate is clipped
  to [distinct found, min(instances, buffer elements x kept combinations)], the bounds returned."""
  ms = [m for m, _ in fixes]
  cands = [p for p in range(N_HW) if all(p not in f for _, f in fixes) and len(_kept_span(ms, p)) > 1
           and any(p in _relevant(m, keep) for m in ms)]
  kept = math.prod(len(_kept_span(ms, q)) for q in range(keep))
  upper = min(n, sum(int(m.access.buffer.size.arg) if m.access.buffer.size.is_const else n for m in ms) * kept)
  if not cands: return min(upper, _enumerate(fixes, keep)), 0, upper
  p = max(cands, key=lambda q: len(_kept_span(ms, q)))
  span = _kept_span(ms, p)
  k = max(2, min(len(span), len(span) * limit // max(n, 1)))
  vals = sorted({span[round(i * (len(span) - 1) / (k - 1))] for i in range(k)})
  found = _rows(fixes, keep, {p: vals}).shape[1]
  return max(found, min(upper, round(found * len(span) / len(vals)))), found, upper


def _shape(m: AccessMap) -> tuple:
  a = m.access
  return (a.buffer.name, a.index, a.conds, tuple(lp.node for lp in a.loops))


def _union(sets) -> isl.Set | None:
  out = None
  for s in sets: out = s if out is None else out.union(s)
  return out


def _relevant(m: AccessMap, keep: int) -> list[int]:
  """Input dimensions that can change the kept key or the element: kept ones, and those the
  index or a condition reads (an inner loop shadows an outer one of the same name)."""
  names = m.names
  return [p for p, n in enumerate(names) if p < keep or (n in m.used and n not in names[p + 1:])]


def _instances(m: AccessMap, keep: int, fix: dict[int, int]) -> int:
  return math.prod(len(m.span(p)) for p in _relevant(m, keep) if p not in fix)


def _kept_span(ms, p: int) -> range:
  """The values hardware index ``p`` takes in any of the accesses ``ms``."""
  spans = [m.span(p) for m in ms]
  lo, hi = min(r.start for r in spans), max(r.stop for r in spans)
  return range(lo, max(lo, hi))


def _enumerate(fixes: list[tuple[AccessMap, dict[int, int]]], keep: int) -> int:
  """The count of :class:`_Counter`, by evaluating every instance's index with numpy."""
  packed = _keys(fixes, keep, count=True)
  return packed[0] if packed is not None else _rows(fixes, keep).shape[1]


def _chunks(m: AccessMap, fix: dict[int, int], keep: int, values: dict[int, list[int]]):
  """The instances of access ``m`` (dimensions ``fix`` fixed, ``values`` restricting some), in
  chunks of about :data:`ENUM_CHUNK`: ``(env, mask, full)`` per chunk, ``env`` the loop variables
  as broadcastable arrays over the chunk's grid, ``mask`` its instances the conditions let through
  and ``full(x, dtype)`` an array of the grid flattened."""
  dims = [p for p in _relevant(m, keep) if p not in fix]
  axes = [np.asarray(values.get(p, m.span(p))) for p in dims]
  names = m.names
  lens = [len(x) for x in axes]
  split = len(dims)                              # dims[split:] form a grid of at most ENUM_CHUNK
  while split > 0 and math.prod(lens[split - 1:]) <= ENUM_CHUNK: split -= 1
  inner = lens[split:]
  per = max(1, ENUM_CHUNK // max(1, math.prod(inner)))
  outer_total = math.prod(lens[:split])
  nd = 1 + len(inner)
  for start in range(0, outer_total, per):       # a chunk: (outer instances) x (the inner grid)
    flat = np.arange(start, min(outer_total, start + per))
    coords = np.unravel_index(flat, lens[:split]) if split else ()
    shape = (flat.size, *inner)
    env = {n: 0 for n in names}
    env.update({names[p]: v for p, v in fix.items()})
    env.update({names[dims[k]]: axes[k][coords[k]].reshape((-1,) + (1,) * (nd - 1)) for k in range(split)})
    env.update({names[dims[k]]: axes[k].reshape(tuple(-1 if q == k - split + 1 else 1 for q in range(nd)))
                for k in range(split, len(dims))})
    full = lambda x, dt, shape=shape: np.broadcast_to(np.asarray(x, dt), shape).reshape(-1)
    mask = np.ones(math.prod(shape), bool)
    for c in m.access.conds:
      try: mask &= full(evaluate(c, env), bool)
      except ExprError: pass                     # data-dependent: taken (as isl over-approximates)
    yield env, mask, full


def _radix(fixes, keep: int, values: dict[int, list[int]]) -> list[tuple[int, int]] | None:
  """(lowest value, number of values) of each kept hardware index and, last, of the element
  offset, over the accesses: the mixed radix that packs a (kept indices, element) column into one
  int64. None when an offset has no bound or the packed keys would not fit."""
  out = []
  for p in range(keep):
    vals = []
    for m, fix in fixes:
      if p in fix: vals += [fix[p]]
      elif p in _relevant(m, keep):
        ax = values.get(p, m.span(p))
        if len(ax): vals += [min(ax), max(ax)]
      else: vals += [0]
    out.append((min(vals), max(vals) - min(vals) + 1))
  lo, hi = [], []
  for m, fix in fixes:
    a = m.access
    if not m.affine_index:                       # a gather covers its buffer
      lo.append(0); hi.append(int(a.buffer.size.arg) - 1)
      continue
    names = m.names
    ranges = {n: (0, 0) for n in names}
    for p in _relevant(m, keep):
      ax = [fix[p]] if p in fix else values.get(p, m.span(p))
      if len(ax): ranges[names[p]] = (int(min(ax)), int(max(ax)))
    for p, v in fix.items(): ranges[names[p]] = (v, v)
    b = bounds(a.index, ranges)
    if b[0] is None or b[1] is None: return None
    lo.append(b[0]); hi.append(b[1])
  out.append((min(lo), max(hi) - min(lo) + 1))
  return out if math.prod(n for _, n in out) < 1 << 62 else None


BITMAP_MIN, BITMAP_PER_INSTANCE = 1 << 20, 16   # key spaces up to max(these, 16 x instances) use a bitmap


def _sorted_unique(keys: np.ndarray) -> np.ndarray:
  """np.unique by sorting (numpy 2's hash-based unique is several times slower on int64 keys)."""
  k = np.sort(keys)
  return k[np.concatenate(([True], k[1:] != k[:-1]))] if k.size else k


def _keys(fixes, keep: int, values: dict[int, list[int]] | None = None, count: bool = False):
  """The distinct (kept hardware indices..., element) columns of the accesses, each packed into
  one int64 by :func:`_radix` (sorted), with the radix; None when the columns do not pack.
  With ``count``, their number instead of the columns. Small key spaces are marked in one
  bitmap; larger ones are sorted chunk by chunk."""
  values = values or {}
  radix = _radix(fixes, keep, values)
  if radix is None: return None
  strides = [math.prod(n for _, n in radix[q + 1:]) for q in range(len(radix))]
  space = strides[0] * radix[0][1]
  n = sum(math.prod(len(values.get(p, m.span(p))) for p in _relevant(m, keep) if p not in fix) for m, fix in fixes)
  bitmap = np.zeros(space, bool) if space <= max(BITMAP_MIN, BITMAP_PER_INSTANCE * n) else None
  parts = []
  for m, fix in fixes:
    names = m.names
    for env, mask, full in _chunks(m, fix, keep, values):
      kept = sum((np.asarray(env[names[p]], np.int64) - radix[p][0]) * strides[p] for p in range(keep))
      if m.affine_index:
        keys = full(np.asarray(evaluate(m.access.index, env), np.int64) - radix[-1][0] + kept, np.int64)[mask]
      else:                                      # a gather: every element of the buffer
        size = int(m.access.buffer.size.arg)
        kk = _sorted_unique(full(kept, np.int64)[mask])
        keys = (kk[:, None] + (np.arange(size) - radix[-1][0])[None, :]).reshape(-1)
      if keys.size and (keys.min() < 0 or keys.max() >= space): return None   # (bounds were too tight)
      if bitmap is not None: bitmap[keys] = True
      else: parts.append(_sorted_unique(keys))
  if bitmap is not None: return (int(np.count_nonzero(bitmap)) if count else np.flatnonzero(bitmap)), radix
  keys = np.zeros(0, np.int64) if not parts else parts[0] if len(parts) == 1 else _sorted_unique(np.concatenate(parts))
  return (len(keys) if count else keys), radix


def _rows(fixes, keep: int, values: dict[int, list[int]] | None = None) -> np.ndarray:
  """Distinct (kept hardware indices..., element) columns of the accesses, each with its fixed
  dimensions; ``values`` restricts some dimensions to a few values. A gather covers its buffer.
  Instances are evaluated with numpy in chunks of :data:`ENUM_CHUNK`."""
  packed = _keys(fixes, keep, values)
  if packed is not None:
    keys, radix = packed
    cols, rest = [], keys
    for lo, n in reversed(radix):
      cols.append(rest % n + lo); rest = rest // n
    return np.stack(cols[::-1]) if len(keys) else np.zeros((keep + 1, 0), np.int64)
  values = values or {}
  out = []                                       # columns that do not pack: deduplicated as rows
  for m, fix in fixes:
    names = m.names
    for env, mask, full in _chunks(m, fix, keep, values):
      kept = np.stack([full(env[names[p]], np.int64) for p in range(keep)] + [np.zeros(mask.size, np.int64)])[:keep, mask]
      if m.affine_index:
        addr = full(evaluate(m.access.index, env), np.int64)[mask]
      else:                                      # a gather: every element of the buffer
        size = int(m.access.buffer.size.arg)
        kept = np.repeat(np.unique(kept, axis=1), size, axis=1)
        addr = np.tile(np.arange(size), kept.shape[1] // size if size else 0)
      out.append(_distinct_columns(np.concatenate([kept, addr[None]], axis=0)))
  return _distinct_columns(np.concatenate(out, axis=1)) if out else np.zeros((keep + 1, 0), np.int64)


def _distinct_columns(rows: np.ndarray) -> np.ndarray:
  return np.unique(rows, axis=1) if rows.shape[1] > 1 else rows


def _sum_unique(count: _Counter, ms, keep: int) -> tuple[float, bool]:
  """Distinct elements of each block (keep 3) or thread (keep 6), summed over them; exact?

  A kept index the accesses are translation-invariant in (every access ``c * index + rest``
  with the same ``c``, no condition on it) contributes its extent as a factor, counted at 0.
  When the other kept indices still span more than :data:`SUM_EXACT_LIMIT` combinations and
  the instances are too many to enumerate, the sum is taken by classes of equal counts
  (:func:`_class_sum`), or as the instance count of one injective access. Failing those, it
  is estimated from the first and the last block (where bound guards cut tiles short), the
  first standing for all but the last, with every thread (or the first and last thread too).
  """
  if not ms: return 0, True
  kernel = count.kernel
  factor, fixed, rest = 1, [], []
  for p in range(keep):
    e = hw_extent(kernel, p)
    if e == 1: continue
    cs = {m.translation(HW_TAGS[p]) for m in ms}
    if len(cs) == 1 and None not in cs: factor *= e; fixed.append(p)
    else: rest.append(p)
  fix = {p: 0 for p in fixed}
  if (math.prod(len(_kept_span(ms, p)) for p in rest) <= SUM_EXACT_LIMIT
      or sum(_instances(m, keep, fix) for m in ms) <= SUM_ENUM_LIMIT):
    return factor * count(ms, keep, tuple(fixed)), True
  exact = _class_sum(count, ms, keep, fixed, rest)
  if exact is not None: return factor * exact, True
  shapes = {_shape(m): m for m in ms}
  if len(shapes) == 1:                 # one access, injective: the sum is its number of instances
    m = next(iter(shapes.values()))
    drop = frozenset(range(len(m.extents))) - set(_relevant(m, keep)) - set(fix)
    if m.affine_index and m.exact and m.injective(keep, fix, drop, INJECTIVE_BUDGET):
      return factor * m.instance_count(fix, drop), True
  fixes = [(m, fix) for m in shapes.values()]
  size = lambda vals: sum(math.prod(len(vals[p]) if p in vals else len(m.span(p))
                                    for p in _relevant(m, keep) if p not in fix) for m, _ in fixes)
  spans = {p: _kept_span(ms, p) for p in rest}
  for sampled in ([p for p in rest if p < 3], rest):   # sample block indices; thread indices too if need be
    values = {p: sorted({r[0], r[-1]}) if p in sampled and len(r) else list(r) for p, r in spans.items()}
    if size(values) <= ENUM_LIMIT: break
  weights = {p: np.array([len(spans[p]) - 1, 1] if len(values[p]) == 2 and p in sampled else [1] * len(values[p]),
                         float) for p in rest}   # the first block stands for all but the last
  if size(values) <= ENUM_LIMIT:
    rows = _rows(fixes, keep, values)            # one column per distinct (sampled key, element)
    w = np.ones(rows.shape[1])
    for p in rest: w *= weights[p][np.searchsorted(values[p], rows[p])]
    return factor * float(w.sum()), False
  total = 0.0
  for combo in itertools.product(*[[(p, v, w) for v, w in zip(values[p], weights[p])] for p in rest]):
    total += math.prod(c[2] for c in combo) * count(ms, keep, tuple(fixed), tuple((p, v) for p, v, _ in combo))
  return factor * total, False


def _class_sum(count: _Counter, ms, keep: int, fixed: list[int], rest: list[int]) -> int | None:
  """The exact sum over the ``rest`` kept indices by classes of equal counts, or None.

  When every index is ``K(kept indices) + R(other dims)`` with the same ``K`` for all the
  accesses (a translation of the key's elements) and every condition a boolean combination of
  comparisons ``K'(kept) + R'(other) <op> 0`` (bound guards), two keys whose values ``K'`` agree
  once clipped to the range ``-R'`` can take have equally many distinct elements: one count
  per class, weighted by the class size.
  """
  tags = {HW_TAGS[p]: p for p in rest}
  if math.prod(len(_kept_span(ms, p)) for p in rest) > 1 << 20: return None

  def split(e: Expr):
    terms, const = linear(e)
    kept = {t: k for t, k in terms.items() if free_vars(t) <= tags.keys() and free_vars(t)}
    other = {t: k for t, k in terms.items() if not free_vars(t) & tags.keys()}
    return None if len(kept) + len(other) != len(terms) else (kept, other, const)
  shift, atoms = None, []
  for m in ms:
    a = m.access
    sp = split(a.index) if m.affine_index and m.exact else None
    if sp is None or (shift is not None and build_linear(sp[0], 0) != shift): return None
    shift = build_linear(sp[0], 0)
    names = m.names
    ranges = {n: (0, 0 if p in fixed else m.extents[p] - 1) for p, n in enumerate(names) if n not in tags}
    for c in a.conds:
      for x in _comparisons(c) or [None]:
        sp = None if x is None else split(simplify(x.src[0] - x.src[1]))
        if sp is None: return None
        lo, hi = bounds(build_linear(sp[1], 0), ranges)
        atoms.append((build_linear(sp[0], sp[2]), lo, hi))
  axes = np.meshgrid(*[np.asarray(_kept_span(ms, p)) for p in rest], indexing="ij")
  env = {n: axes[i].ravel() for i, n in enumerate(tags)}
  size = env[next(iter(tags))].size
  sig = [np.zeros(size, np.int64)]
  for k, lo, hi in atoms:        # K' + R' <op> 0 reads K' only through its clip to [-hi - 1, -lo + 1]
    v = np.broadcast_to(np.asarray(evaluate(k, env), np.int64), (size,))
    sig.append(np.clip(v, None if hi is None else -hi - 1, None if lo is None else -lo + 1))
  first, sizes = _column_classes(np.stack(sig))
  if len(first) > SUM_CLASSES_LIMIT: return None
  return sum(int(n) * count(ms, 0, tuple(fixed), tuple((p, int(env[HW_TAGS[p]][i])) for p in rest))
             for i, n in zip(first, sizes))


def _column_classes(sig: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """The first column of each class of equal columns of ``sig`` and the class sizes, in the
  columns' lexicographic order (as ``np.unique(sig, axis=1, return_index=True, return_counts=True)``).
  The columns are packed into one int64 each when their ranges allow (tens of times faster than
  comparing columns as rows of a structured array)."""
  if not sig.shape[1]: return np.zeros(0, np.int64), np.zeros(0, np.int64)
  lo, hi = sig.min(axis=1), sig.max(axis=1)
  spans = [int(h) - int(l) + 1 for l, h in zip(lo, hi)]
  if math.prod(spans) >= 1 << 62:
    _, first, sizes = np.unique(sig, axis=1, return_index=True, return_counts=True)
    return first, sizes
  key = np.zeros(sig.shape[1], np.int64)
  for row, l, n in zip(sig, lo, spans): key = key * n + (row - l)
  _, first, sizes = np.unique(key, return_index=True, return_counts=True)
  return first, sizes


def _comparisons(c: Expr) -> list[Expr] | None:
  """The integer comparisons a condition is a boolean combination of; None if it is not one."""
  if c.op in (Op.AND, Op.OR, Op.NOT):
    parts = [_comparisons(x) for x in c.src]
    return None if any(p is None for p in parts) else [x for p in parts for x in p]
  if c.op is Op.CONST: return []
  if c.op in (Op.LT, Op.LE, Op.GT, Op.GE, Op.EQ, Op.NE) and c.src[0].dtype in ("int32", "int64"): return [c]
  return None


def _pos(m: AccessMap, node: int) -> int:
  return next(k for k, lp in enumerate(m.access.loops) if lp.node == node)


# ---------------------------------------------------------------------------------------------
# the analysis

def data_movement(kernel_ir: LoopKernel, l1_bytes: int = 128 * 1024, l2_bytes: int = 6 * 1024 * 1024) -> DataMovement:
  """Footprints, data movement per memory level, coalescing and bank conflicts of one concrete kernel."""
  accesses, loops = collect_accesses(kernel_ir)
  maps = [access_map(kernel_ir, a) for a in accesses]
  count = _Counter(kernel_ir)
  bufs = {b.name: b for b in list(kernel_ir.params) + list(kernel_ir.allocs)}
  for m in maps: bufs.setdefault(m.access.buffer.name, m.access.buffer)
  nbytes = {n: DTYPE_BYTES.get(b.dtype, 4) for n, b in bufs.items()}
  dyn = [m.instance_count() for m in maps]
  glob = [n for n, b in bufs.items() if b.scope == "global"]
  smem = sum(int(b.size.arg) * nbytes[b.name] for b in kernel_ir.allocs if b.scope == "shared")
  l1 = max(l1_bytes - smem, 0)
  of = lambda n, kinds=("read", "write"): [m for m in maps if m.access.buffer.name == n and m.access.kind in kinds]

  l1_levels, mov_block = _block_levels(count, maps, loops, glob, nbytes, l1)
  fp_block0 = {n: count(of(n, ("read",)), 0, (0, 1, 2)) * nbytes[n] for n in glob}
  grid_levels, dram = _grid_levels(count, maps, glob, nbytes, l2_bytes, mov_block)

  traffic = []
  for n, b in bufs.items():
    rd, wr = of(n, ("read",)), of(n, ("write",))
    al = rd + wr
    if not al: continue
    reads = sum(d for m, d in zip(maps, dyn) if m in rd)
    writes = sum(d for m, d in zip(maps, dyn) if m in wr)
    block_sum, ex_b = _sum_unique(count, al, 3)
    thread_sum, ex_t = _sum_unique(count, al, 6)
    unique = count(al)
    l2r = l2w = dr = 0.0
    if b.scope == "global":
      rd_block_sum, _ = _sum_unique(count, rd, 3)
      ratio = mov_block.get(n, 0.0) / fp_block0[n] if fp_block0[n] else 1.0
      l2r = min(max(ratio, 1.0) * rd_block_sum * nbytes[n], reads * nbytes[n])
      l2w = float(writes * nbytes[n])
      dr = max(min(dram.get(n, 0.0), l2r + l2w), unique * nbytes[n])
    traffic.append(BufferTraffic(
      n, b.scope, nbytes[n], int(b.size.arg) if b.size.is_const else -1, all(m.exact for m in al),
      reads, writes, count(rd), count(wr), unique, round(block_sum), round(thread_sum),
      count(al, 0, (0, 1, 2)), count(al, 0, tuple(range(N_HW))), l2r, l2w, dr, ex_b and ex_t))

  pats = _patterns(kernel_ir, maps, dyn, nbytes)
  gl = [t for t in traffic if t.scope == "global"]
  sh = [t for t in traffic if t.scope == "shared"]
  gp = [p for p in pats if p.scope == "global" and p.efficiency is not None]
  sp = [p for p in pats if p.scope == "shared" and p.bank_conflict is not None]
  wavg = lambda ps, f: (sum(p.count * f(p) for p in ps) / sum(p.count for p in ps)) if sum(p.count for p in ps) else 1.0
  return DataMovement(
    kernel_ir.name, tuple(int(x) for x in kernel_ir.grid), tuple(int(x) for x in kernel_ir.block), tuple(traffic),
    tuple(grid_levels + l1_levels), tuple(pats),
    sum(t.read_bytes for t in gl), sum(t.write_bytes for t in gl), sum(t.read_bytes for t in sh),
    sum(t.write_bytes for t in sh), sum(t.unique_bytes for t in gl), sum(t.block_sum_bytes for t in gl),
    sum(t.l2_read_bytes for t in gl), sum(t.l2_write_bytes for t in gl), sum(t.dram_bytes for t in gl),
    sum(p.requests * p.sectors_per_request for p in gp if p.kind == "read"),
    sum(p.requests * p.sectors_per_request for p in gp if p.kind == "write"),
    wavg(gp, lambda p: p.efficiency), wavg(gp, lambda p: p.sectors_per_request), wavg(sp, lambda p: p.bank_conflict),
    all(m.exact for m in maps) and not count.stats["sampled"], tuple(count.stats.items()))


def _block_levels(count: _Counter, maps, loops: list[LoopNode], glob, nbytes, cache: int):
  """Algorithm 2 over the loops of block 0 (reads of global buffers, L1 capacity)."""
  rmaps = [m for m in maps if m.access.kind == "read" and m.access.buffer.name in glob]
  children: dict[int | None, list[LoopNode]] = {}
  for lp in loops: children.setdefault(lp.parent, []).append(lp)
  levels: dict[int, LoopLevel] = {}
  blocks = (0, 1, 2)

  def fp(node: int, one_iter: bool) -> dict[str, int]:
    out = {}
    for n in glob:
      ms = [m for m in rmaps if m.access.buffer.name == n and any(lp.node == node for lp in m.access.loops)]
      # one union per set of fixed positions: the loop sits at different depths in different accesses
      by_fix: dict[tuple[int, ...], list[AccessMap]] = {}
      for m in ms:
        p = _pos(m, node)
        by_fix.setdefault(blocks + tuple(N_HW + q for q in range(p + (1 if one_iter else 0))), []).append(m)
      out[n] = (count.union_fixed(by_fix) if by_fix else 0) * nbytes[n]
    return out

  def leaves(parent: int | None) -> dict[str, float]:
    out = dict.fromkeys(glob, 0.0)
    for m in rmaps:
      if (m.access.loops[-1].node if m.access.loops else None) == parent:
        out[m.access.buffer.name] += count([m], 0, blocks + tuple(
          N_HW + q for q in range(len(m.access.loops)))) * nbytes[m.access.buffer.name]
    return out

  def inner(parent: int | None) -> dict[str, float]:
    mov = leaves(parent)
    for ch in children.get(parent, []):
      for n, v in visit(ch).items(): mov[n] += v
    return mov

  def visit(lp: LoopNode) -> dict[str, float]:
    sub = inner(lp.node)                 # bottom-up: every loop gets its table row
    it, al = fp(lp.node, True), fp(lp.node, False)
    if sum(it.values()) <= cache: mov = {n: float(v) for n, v in al.items()}
    else: mov = {n: max(lp.extent * v, al[n]) for n, v in sub.items()}
    levels[lp.node] = LoopLevel(lp.var, lp.node, lp.kind, lp.depth + 3, lp.extent, "L1", cache, sum(it.values()),
                                sum(al.values()), sum(mov.values()), tuple((n, it[n], al[n], mov[n]) for n in glob))
    return mov

  total = {n: count([m for m in rmaps if m.access.buffer.name == n], 0, blocks) * nbytes[n] for n in glob}
  sub = inner(None)
  fits = sum(total.values()) <= cache
  mov_block = {n: float(total[n]) if fits else max(v, total[n]) for n, v in sub.items()}
  return [levels[k] for k in sorted(levels)], mov_block


def _grid_levels(count: _Counter, maps, glob, nbytes, cache: int, mov_block):
  """Algorithm 2 over the grid dimensions (all accesses of global buffers, L2 capacity)."""
  kernel = count.kernel
  gmaps = [m for m in maps if m.access.buffer.name in glob]

  def fp(fixed: tuple[int, ...]) -> dict[str, int]:
    return {n: count([m for m in gmaps if m.access.buffer.name == n], 0, fixed) * nbytes[n] for n in glob}
  blk = fp((0, 1, 2))
  mov = {n: float(blk[n]) for n in glob} if sum(blk.values()) <= cache else \
      {n: max(mov_block.get(n, 0.0), float(blk[n])) for n in glob}
  levels = []
  for k in (2, 1, 0):                      # blockIdx.x (innermost) .. blockIdx.z
    trip = hw_extent(kernel, k)
    if trip == 1: continue
    it, al = fp(tuple(range(k + 1))), fp(tuple(range(k)))
    if sum(it.values()) <= cache: mov = {n: float(al[n]) for n in glob}
    else: mov = {n: max(trip * mov[n], al[n]) for n in glob}
    levels.append(LoopLevel(HW_TAGS[k], None, "grid", k, trip, "L2", cache, sum(it.values()), sum(al.values()),
                            sum(mov.values()), tuple((n, it[n], al[n], mov[n]) for n in glob)))
  return levels[::-1], mov


# ---------------------------------------------------------------------------------------------
# coalescing and bank conflicts: the first warp

def _lanes(kernel: LoopKernel) -> dict[str, np.ndarray]:
  bx, by, bz = (int(x) for x in kernel.block)
  lane = np.arange(min(32, bx * by * bz))
  env = {t: np.zeros_like(lane) for t in HW_TAGS[:3]}
  env.update({"threadIdx.x": lane % bx, "threadIdx.y": (lane // bx) % by, "threadIdx.z": lane // (bx * by)})
  return env


def _requests(a, lanes: dict[str, np.ndarray], vec: bool):
  """Per sampled iteration: (active-lane mask over the flattened lanes x vector elements, element indices, lane ids)."""
  vloops = [lp for lp in a.loops if vec and lp.kind == "vectorize" and lp.extent in (2, 4)]
  others = [lp for lp in a.loops if lp not in vloops]
  samples = [{}] + [{lp.var: v} for lp in others for v in sorted({1, lp.extent - 1}) if v > 0]
  nl = len(lanes["threadIdx.x"])
  combos = [dict(zip([lp.var for lp in vloops], c)) for c in np.ndindex(*[lp.extent for lp in vloops])]
  for s in samples:
    idx, act, lid = [], [], []
    for c in combos:
      env = {**lanes, **{lp.var: 0 for lp in a.loops}, **s, **c}
      mask = np.ones(nl, bool)
      for cond in a.conds:
        try: mask &= np.broadcast_to(np.asarray(evaluate(cond, env), bool), (nl,))
        except ExprError: pass                 # a data-dependent condition: assume taken
      idx.append(np.broadcast_to(np.asarray(evaluate(a.index, env), np.int64), (nl,)))
      act.append(mask); lid.append(np.arange(nl))
    yield np.concatenate(act), np.concatenate(idx), np.concatenate(lid)


def _patterns(kernel: LoopKernel, maps, dyn, nbytes) -> list[AccessPattern]:
  lanes = _lanes(kernel)
  out = []
  for m, count in zip(maps, dyn):
    a = m.access
    b = a.buffer
    if b.scope not in ("global", "shared"): continue
    size = nbytes[b.name]
    vec = b.dtype == "float32"
    pat = {"buffer": b.name, "scope": b.scope, "kind": a.kind, "index": repr(a.index), "count": count}
    if not m.affine_index:
      out.append(AccessPattern(**pat)); continue
    try: reqs = [(act, idx[act], lid[act]) for act, idx, lid in _requests(a, lanes, vec) if act.any()]
    except ExprError:
      out.append(AccessPattern(**pat)); continue
    if not reqs:
      out.append(AccessPattern(**pat, **({"sectors_per_request": 0.0, "efficiency": 1.0, "requests": 0.0,
                                          "lines_per_request": 0.0}
                                         if b.scope == "global" else {"bank_conflict": 1.0})))
      continue
    if b.scope == "global":
      sec = [len(np.unique(idx * size // SECTOR)) for _, idx, _ in reqs]
      lines = [len(np.unique(idx * size // LINE)) for _, idx, _ in reqs]
      eff = [min(1.0, len(idx) * size / (s * SECTOR)) for (_, idx, _), s in zip(reqs, sec)]
      per_req = float(np.mean([len(idx) for _, idx, _ in reqs]))
      out.append(AccessPattern(**pat, sectors_per_request=float(np.mean(sec)), efficiency=float(np.mean(eff)),
                               requests=count / per_req, lines_per_request=float(np.mean(lines))))
    else:
      deg = []
      for _, idx, lid in reqs:
        width = size * max(1, len(idx) // max(1, len(np.unique(lid))))
        phase = lid // max(1, 128 // width)
        worst = 1
        for ph in np.unique(phase):
          sel = idx[phase == ph] * size
          words = np.unique(np.concatenate([sel // 4 + k for k in range(max(1, size // 4))]))
          worst = max(worst, int(np.bincount(words % 32, minlength=32).max()))
        deg.append(worst)
      out.append(AccessPattern(**pat, bank_conflict=float(np.mean(deg))))
  return out
