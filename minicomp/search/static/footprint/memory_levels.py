"""The memory levels of a kernel: Tuna's Algorithm 2 over the grid (DRAM -> L2) and the loops of a block (L2 -> SM).

- **DRAM -> L2** (:func:`grid_levels`): the grid's block dimensions are treated as loops
  (``blockIdx.z`` outermost, ``blockIdx.x`` innermost: the launch order), with the L2 capacity as
  the cache. One iteration of the innermost one is one block.
- **L2 -> SM (L1)** (:func:`block_levels`): inside block 0, every ``For`` of the body is a loop
  node; all the threads of the block run an iteration together. The cache is the L1 left over by
  the kernel's shared memory. L1 caches reads only; stores write through, so the SM -> L2 traffic
  is the dynamic store volume.

Algorithm 2 at a loop node with trip count ``T``: when the footprint of one iteration (all
buffers of the level) fits the cache, consecutive iterations reuse each other's data and the
movement is the footprint of the whole loop; otherwise it is ``T`` times the movement of one
iteration, which sums its sub-loops and its own accesses. Outer loops are fixed at 0. Every
footprint is a count of :class:`~minicomp.search.static.footprint.counting.DistinctCounter`.
"""
from __future__ import annotations

from dataclasses import dataclass

from minicomp.search.static.footprint.counting import DistinctCounter
from minicomp.search.static.footprint.isl_build import HW_TAGS, N_HW, AccessMap, LoopNode, hw_extent


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


def _pos(m: AccessMap, node: int) -> int:
  """The position of loop ``node`` among the loops around access ``m``."""
  return next(k for k, lp in enumerate(m.access.loops) if lp.node == node)


def block_levels(count: DistinctCounter, maps, loops: list[LoopNode], glob, nbytes, cache: int):
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


def grid_levels(count: DistinctCounter, maps, glob, nbytes, cache: int, mov_block):
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

