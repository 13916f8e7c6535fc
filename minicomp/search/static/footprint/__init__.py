"""Data movement of a lowered kernel (Tuna's Algorithm 2, adapted to a GPU memory hierarchy): the entry point.

Every count comes from the access relations ``isl_build.py`` builds from the loop IR, never
from a per-op formula, so the analysis follows any schedule the IR can express: dynamic access
counts are isl cardinalities of (factored) instance domains, distinct elements are isl
cardinalities of images (with numpy enumeration of the same relation for small sets, where
isl's point scan is slower, and as a fallback when isl exceeds an operation budget). Sums over
blocks / threads use translation invariance and classes of equal counts to stay exact; where
they cannot, they are estimated and ``sums_exact`` says so.

:func:`data_movement` puts together, per buffer and per memory level, outermost first:

- **DRAM -> L2** and **L2 -> SM (L1)**: Algorithm 2 over the grid and over the loops of block 0
  (``memory_levels.py``);
- **shared / registers**: the dynamic access counts and the per-block / per-thread distinct
  elements of every buffer (shared buffers are private to a block, local ones to a thread);
- coalescing (global) and bank conflicts (shared) of every access, from the first warp
  (``coalescing.py``).

The files, in reading order: ``isl_build.py`` (accesses -> isl relations; ``isl_text.py`` writes
their expressions), ``counting.py`` (distinct counts: :class:`~minicomp.search.static.footprint.counting.DistinctCounter`,
``enumeration.py`` its numpy side), ``memory_levels.py``, ``coalescing.py``, then this file.
"""
from __future__ import annotations

from dataclasses import dataclass

from minicomp.ir.loop import LoopKernel, Program
from minicomp.search.static.footprint.coalescing import AccessPattern, access_patterns
from minicomp.search.static.footprint.counting import DistinctCounter, sum_unique
from minicomp.search.static.footprint.isl_build import N_HW, access_map, collect_accesses
from minicomp.search.static.footprint.memory_levels import LoopLevel, block_levels, grid_levels


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


def data_movement(kernel_ir: LoopKernel, l1_bytes: int = 128 * 1024, l2_bytes: int = 6 * 1024 * 1024) -> DataMovement:
  """Footprints, data movement per memory level, coalescing and bank conflicts of one concrete kernel."""
  accesses, loops = collect_accesses(kernel_ir)
  maps = [access_map(kernel_ir, a) for a in accesses]
  count = DistinctCounter(kernel_ir)
  bufs = {b.name: b for b in list(kernel_ir.params) + list(kernel_ir.allocs)}
  for m in maps: bufs.setdefault(m.access.buffer.name, m.access.buffer)
  nbytes = {n: b.element_bytes for n, b in bufs.items()}
  dyn = [m.instance_count() for m in maps]
  glob = [n for n, b in bufs.items() if b.scope == "global"]
  smem = sum(int(b.size.arg) * nbytes[b.name] for b in kernel_ir.allocs if b.scope == "shared")
  l1 = max(l1_bytes - smem, 0)
  of = lambda n, kinds=("read", "write"): [m for m in maps if m.access.buffer.name == n and m.access.kind in kinds]

  l1_levels, mov_block = block_levels(count, maps, loops, glob, nbytes, l1)
  fp_block0 = {n: count(of(n, ("read",)), 0, (0, 1, 2)) * nbytes[n] for n in glob}
  l2_levels, dram = grid_levels(count, maps, glob, nbytes, l2_bytes, mov_block)

  traffic = []
  for n, b in bufs.items():
    rd, wr = of(n, ("read",)), of(n, ("write",))
    al = rd + wr
    if not al: continue
    reads = sum(d for m, d in zip(maps, dyn) if m in rd)
    writes = sum(d for m, d in zip(maps, dyn) if m in wr)
    block_sum, ex_b = sum_unique(count, al, 3)
    thread_sum, ex_t = sum_unique(count, al, 6)
    unique = count(al)
    l2r = l2w = dr = 0.0
    if b.scope == "global":
      rd_block_sum, _ = sum_unique(count, rd, 3)
      ratio = mov_block.get(n, 0.0) / fp_block0[n] if fp_block0[n] else 1.0
      l2r = min(max(ratio, 1.0) * rd_block_sum * nbytes[n], reads * nbytes[n])
      l2w = float(writes * nbytes[n])
      dr = max(min(dram.get(n, 0.0), l2r + l2w), unique * nbytes[n])
    traffic.append(BufferTraffic(
      n, b.scope, nbytes[n], int(b.size.arg) if b.size.is_const else -1, all(m.exact for m in al),
      reads, writes, count(rd), count(wr), unique, round(block_sum), round(thread_sum),
      count(al, 0, (0, 1, 2)), count(al, 0, tuple(range(N_HW))), l2r, l2w, dr, ex_b and ex_t))

  pats = access_patterns(kernel_ir, maps, dyn, nbytes)
  gl = [t for t in traffic if t.scope == "global"]
  sh = [t for t in traffic if t.scope == "shared"]
  gp = [p for p in pats if p.scope == "global" and p.efficiency is not None]
  sp = [p for p in pats if p.scope == "shared" and p.bank_conflict is not None]
  wavg = lambda ps, f: (sum(p.count * f(p) for p in ps) / sum(p.count for p in ps)) if sum(p.count for p in ps) else 1.0
  return DataMovement(
    kernel_ir.name, tuple(int(x) for x in kernel_ir.grid), tuple(int(x) for x in kernel_ir.block), tuple(traffic),
    tuple(l2_levels + l1_levels), tuple(pats),
    sum(t.read_bytes for t in gl), sum(t.write_bytes for t in gl), sum(t.read_bytes for t in sh),
    sum(t.write_bytes for t in sh), sum(t.unique_bytes for t in gl), sum(t.block_sum_bytes for t in gl),
    sum(t.l2_read_bytes for t in gl), sum(t.l2_write_bytes for t in gl), sum(t.dram_bytes for t in gl),
    sum(p.requests * p.sectors_per_request for p in gp if p.kind == "read"),
    sum(p.requests * p.sectors_per_request for p in gp if p.kind == "write"),
    wavg(gp, lambda p: p.efficiency), wavg(gp, lambda p: p.sectors_per_request), wavg(sp, lambda p: p.bank_conflict),
    all(m.exact for m in maps) and not count.stats["sampled"], tuple(count.stats.items()))

