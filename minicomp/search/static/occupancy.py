"""Occupancy (resident blocks and warps per SM), waves and tail effect of one kernel launch.

Follows the CUDA occupancy calculator (``cuda_occupancy.h`` in the CUDA Toolkit,
``cudaOccMaxActiveBlocksPerMultiprocessor``) with the default shared-memory carveout:

* warps: ``max_warps_per_sm // ceil(threads / 32)``;
* registers: registers per warp = ``regs * 32`` rounded up to the allocation unit (256);
  registers are allocated per SM sub-partition (4), so warps per SM =
  ``4 * ((regs_per_sm / 4) // regs_per_warp)``; a block whose register file need
  (``regs_per_warp * roundup(warps, 4)``) exceeds 64 K registers cannot launch;
* shared memory: ``smem + reserved`` (1 KiB per block from sm_80 on) rounded up to the
  allocation unit; ``smem_per_sm // that``;
* blocks: the hardware limit of resident blocks per SM.

Tuna (Sec. III-B, "Warp latency hiding" and "SM occupancy") uses the resulting blocks per SM
and the number of blocks against the number of SMs; ``waves`` and ``tail_fraction`` express
the latter: a grid of ``n`` blocks runs in ``n / (blocks_per_sm * sm_count)`` waves, and the
last, partial wave leaves ``1 - tail_fraction`` of the machine idle.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from minicomp.errors import OccupancyError
from minicomp.target import DeviceSpec, Target, as_target

LIMITS = ("warps", "registers", "shared", "blocks")  # tie-break order of the limiter


@dataclass(frozen=True)
class Occupancy:
  """Resident blocks per SM, what limits them, and how a grid of ``n_blocks`` maps onto the GPU."""
  device: str
  threads_per_block: int
  warps_per_block: int
  blocks_per_sm: int
  limiter: str                                   # "warps" | "registers" | "shared" | "blocks"
  blocks_per_sm_by_limit: dict = field(compare=False)   # limit -> blocks per SM (a large int if unlimited)
  active_warps_per_sm: int
  occupancy: float                               # active warps / max warps per SM
  n_blocks: int
  waves: float                                   # n_blocks / (blocks_per_sm * sm_count)
  full_waves: int
  tail_fraction: float                           # utilisation of the last wave (1.0 if it is full)
  regs_per_block_allocated: int = 0
  smem_per_block_allocated: int = 0

  @property
  def partial_wave(self) -> bool: return self.tail_fraction < 1.0

  @property
  def wave_efficiency(self) -> float:
    """Average utilisation of the block slots over all waves: waves / ceil(waves)."""
    return self.waves / math.ceil(self.waves) if self.waves > 0 else 0.0


def _as_device(device: DeviceSpec | Target | str) -> DeviceSpec:
  return device if isinstance(device, DeviceSpec) else as_target(device).device


def _round_up(x: int, unit: int) -> int:
  return -(-x // unit) * unit


_UNLIMITED = 1 << 30


def occupancy(device: DeviceSpec | Target | str, threads_per_block: int | tuple, regs_per_thread: int,
              smem_per_block: int, n_blocks: int | tuple = 1) -> Occupancy:
  """Occupancy of a launch of ``n_blocks`` blocks of ``threads_per_block`` threads on ``device``.

  ``threads_per_block`` and ``n_blocks`` may be (x, y, z) tuples. ``regs_per_thread`` and
  ``smem_per_block`` (static + dynamic shared memory, bytes) are what ptxas reports. Raises
  :class:`OccupancyError` when not a single block fits on an SM.
  """
  dev = _as_device(device)
  threads = math.prod(threads_per_block) if isinstance(threads_per_block, (tuple, list)) else int(threads_per_block)
  blocks = math.prod(n_blocks) if isinstance(n_blocks, (tuple, list)) else int(n_blocks)
  if threads <= 0 or blocks <= 0:
    raise OccupancyError(f"a launch needs at least one block of at least one thread (got {blocks} x {threads})")
  if regs_per_thread < 0 or smem_per_block < 0:
    raise OccupancyError(f"negative resources: {regs_per_thread} registers, {smem_per_block} bytes of shared memory")
  warps = -(-threads // dev.warp_size)
  by: dict[str, int] = {}
  why: list[str] = []

  # warps (and threads per block)
  if threads > dev.max_threads_per_block:
    by["warps"] = 0
    why.append(f"{threads} threads per block > {dev.max_threads_per_block}")
  else:
    by["warps"] = dev.max_warps_per_sm // warps

  # registers, allocated per warp in units of reg_alloc_unit, per SM sub-partition
  regs_warp = _round_up(regs_per_thread * dev.warp_size, dev.reg_alloc_unit)
  regs_block = regs_warp * warps
  if regs_per_thread > dev.max_regs_per_thread:
    by["registers"] = 0
    why.append(f"{regs_per_thread} registers per thread > {dev.max_regs_per_thread}")
  elif regs_block > dev.regs_per_block or regs_warp * _round_up(warps, dev.sub_partitions) > dev.regs_per_block:
    by["registers"] = 0
    why.append(f"{regs_per_thread} registers x {warps} warps exceed {dev.regs_per_block} registers per block")
  elif regs_warp == 0:
    by["registers"] = _UNLIMITED
  else:
    warps_per_sub = (dev.regs_per_sm // dev.sub_partitions) // regs_warp
    by["registers"] = warps_per_sub * dev.sub_partitions // warps

  # shared memory (default carveout: the largest shared-memory configuration)
  smem_alloc = _round_up(smem_per_block + dev.smem_reserved_per_block, dev.smem_alloc_unit)
  if smem_per_block > dev.smem_per_block_optin:
    by["shared"] = 0
    why.append(f"{smem_per_block} bytes of shared memory per block > {dev.smem_per_block_optin} (opt-in maximum)")
  elif smem_alloc == 0:
    by["shared"] = _UNLIMITED
  else:
    by["shared"] = dev.smem_per_sm_bytes // smem_alloc

  by["blocks"] = dev.max_blocks_per_sm
  per_sm = min(by.values())
  if per_sm == 0:
    if not why:
      why = [f"{lim} limit" for lim in LIMITS if by[lim] == 0]
    raise OccupancyError(f"a block of {threads} threads, {regs_per_thread} registers per thread and {smem_per_block} "
                         f"bytes of shared memory cannot be resident on a {dev.name} ({dev.arch}) SM: {'; '.join(why)}")
  limiter = next(lim for lim in LIMITS if by[lim] == per_sm)
  active = per_sm * warps
  slots = per_sm * dev.sm_count
  waves = blocks / slots
  full = blocks // slots
  rest = blocks - full * slots
  return Occupancy(device=dev.name, threads_per_block=threads, warps_per_block=warps, blocks_per_sm=per_sm,
                   limiter=limiter, blocks_per_sm_by_limit=dict(by), active_warps_per_sm=active,
                   occupancy=active / dev.max_warps_per_sm, n_blocks=blocks, waves=waves, full_waves=full,
                   tail_fraction=rest / slots if rest else 1.0, regs_per_block_allocated=regs_block,
                   smem_per_block_allocated=smem_alloc)


def kernel_occupancy(kernel, device: DeviceSpec | Target | str | None = None) -> list[Occupancy]:
  """Occupancy of every launch of a built :class:`minicomp.codegen.kernel.Kernel` (ptxas registers
  and shared memory, launch grid and block), on ``device`` or the kernel's target device."""
  dev = _as_device(device if device is not None else kernel.target)
  out = []
  for l in kernel.plan.launches:
    r = kernel.binary.resources.get(l.kernel)
    if r is None:
      raise OccupancyError(f"no ptxas resource usage for kernel {l.kernel}")
    out.append(occupancy(dev, l.block, r.registers, r.shared_bytes, l.grid))
  return out
