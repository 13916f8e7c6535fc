"""The latency formula of the static cost model (Tuna-style, adapted to the GPU memory hierarchy).

Everything here is a pure function of :class:`LaunchFacts` (what the analyses measured about
one kernel launch) and a :class:`~minicomp.target.DeviceSpec`; ``estimate.py`` gathers the facts
from the PTX (instruction counts), ptxas (registers, shared memory) and islpy (data movement).

For one launch, on the busiest SM (``ceil(blocks / SMs)`` blocks: the tail effect):

- **issue**: every warp instruction takes an issue slot; an SM issues
  ``schedulers_per_sm`` (4) warp instructions per cycle;
- **pipes**: each instruction class runs on its unit at the published throughput per SM per
  cycle (CUDA C++ Programming Guide, "Arithmetic Instructions" throughput table): FP32 lanes / 32
  warp instructions per cycle for FP32, INT32 lanes / 32 for integer, SFU lanes / 32 for
  special functions, 0.5 for conversions, and load/store-unit lanes / 32 for loads, stores
  and shuffles (16 LD/ST lanes per SM on GA10x / AD10x / TU10x, 32 on GV100 / GA100 / GH100:
  the SM diagrams of the architecture whitepapers);
- **tensor cores**: each ``mma.sync`` of a warp does m x n x k FMAs on the SM's tensor cores at the device's
  dense rate per clock (its published FP16 / TF32 tensor TFLOP/s at its boost clock; ``target.py``);
- **shared memory**: every shared load/store is ``conflict degree`` wavefronts, one per cycle;
- **L1**: global loads and stores are processed one 128-byte line (four 32-byte sectors) per
  cycle, so a warp request touching ``s`` sectors in ``l`` distinct lines costs
  ``max(l, ceil(s / 4))`` cycles (a fully uncoalesced float request: 32);
- **L2 -> SM** traffic: the sectors requested, reduced by the reuse L1 can capture inside a
  block (bounded below by the distinct bytes each block touches), at ``l2_bw_factor x DRAM``
  bandwidth;
- **DRAM** traffic: the distinct bytes the whole grid touches (compulsory traffic) at the DRAM
  bandwidth.

- **latency**: one warp's latency-bound cycles (Tuna's ILP cost: every basic block of the PTX
  list-scheduled with instruction latencies, :func:`~minicomp.search.static.ptx.chain_cycles`)
  times the waves of blocks the busiest SM runs one after another (``ceil(blocks on it /
  resident blocks)``): the resident warps run side by side, so their latencies hide each other
  up to the throughput terms above, and a kernel with few warps per SM is latency-bound;
- **register spills** (ptxas's spill stores and loads, bytes per thread, after PTX) move local
  memory through L1 / L2 as often as the average instruction runs (spill bytes x dynamic /
  static instructions), counted as L2 -> SM traffic.

Uncalibrated, units overlap perfectly: the SM time is the maximum of the issue, pipe, shared, L1 and
latency cycles; memory time is the maximum of the L2 and DRAM times, divided by the memory efficiency
``min(1, active warps / warps needed)`` (the warps needed to keep DRAM busy follow Little's law
from the DRAM latency and the bandwidth per SM). The launch time is ``max(SM time, memory time)
+ launch overhead``. Where a calibration for the device's arch exists (:mod:`.calibration`, fitted on
GPU timings), it weighs each unit's time (barriers among them) and combines them by a p-norm instead:
``(sum (w_k t_k)^p)^(1/p) + launch overhead``. Every figure is an **estimate** of a GPU this machine
does not have.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from minicomp.search.static.ptx_parse import TENSOR_FMAS

# warp instructions per cycle per SM for a unit, given lanes per SM (CUDA C++ Programming Guide)
CVT_PER_CYCLE = 0.5           # type conversions: 16 per SM per cycle on sm_80 / sm_86
BRANCH_PER_CYCLE = 1.0
SCHEDULERS_PER_SM = 4
L1_BYTES_PER_CYCLE = 128
DRAM_LATENCY_CYCLES = 600
L2_BW_FACTOR = 2.5            # L2 -> SM bandwidth relative to DRAM (Ampere: ~2.5-3x; an assumption)
LAUNCH_OVERHEAD_S = 3e-6      # kernel launch overhead measured on current drivers is 2-5 us
MLP_LOADS_PER_WARP = 2        # independent global loads in flight per warp (memory-level parallelism)


@dataclass(frozen=True)
class LaunchFacts:
  """What the analyses say about one kernel launch."""
  name: str
  blocks: int
  threads_per_block: int
  per_thread: dict[str, float]            # dynamic instruction counts per thread, by class (ptx.py classes)
  active_warps_per_sm: float              # from occupancy (resident warps when the SM is full)
  blocks_per_sm: int                      # resident blocks per SM (occupancy)
  dram_bytes: float                       # distinct bytes of global memory the grid reads + writes
  l2_bytes: float                         # bytes moved L2 -> SMs, all blocks together
  l1_cycles_per_block: float              # L1 wavefront cycles of global requests, per block
  shared_wavefronts_per_block: float      # shared-memory wavefronts (bank conflicts included), per block
  chain_cycles: float = 0.0               # one warp's latency-bound cycles (ptx.chain_cycles)
  local_bytes_per_thread: float = 0.0     # register-spill traffic per thread (bytes moved, dynamic)
  registers: int = 0                      # per thread (ptxas's, or the analytic model's estimate); 0: unknown


FACT_FLOATS = ("active_warps_per_sm", "dram_bytes", "l2_bytes", "l1_cycles_per_block", "shared_wavefronts_per_block",
               "chain_cycles", "local_bytes_per_thread")
FACT_INTS = ("blocks", "threads_per_block", "blocks_per_sm", "registers")


def facts_json(facts) -> list[dict] | None:
  """Launch facts as plain JSON values (a saved model's form, and the static cache's on disk); None where one is not
  finite (such facts are not written)."""
  out = [{"name": f.name, "per_thread": {c: float(v) for c, v in f.per_thread.items()},
          **{n: float(getattr(f, n)) for n in FACT_FLOATS}, **{n: int(getattr(f, n)) for n in FACT_INTS}}
         for f in facts]
  finite = all(np.isfinite(v) for d in out for v in [*d["per_thread"].values(), *(d[n] for n in FACT_FLOATS)])
  return out if finite else None


def facts_from_json(items: list) -> tuple[LaunchFacts, ...]:
  """:func:`facts_json`'s list back; ValueError, TypeError or KeyError where it is not that form or a number is not
  finite and >= 0 (for minicomp's own cache files: a saved model, which anyone may hand over, is checked field by
  field instead)."""
  out = tuple(LaunchFacts(name=str(d["name"]), per_thread={str(c): float(v) for c, v in d["per_thread"].items()},
                          **{k: float(d[k]) for k in FACT_FLOATS}, **{k: int(d[k]) for k in FACT_INTS})
              for d in items)
  for f in out:
    numbers = [*f.per_thread.values(), *(getattr(f, k) for k in FACT_FLOATS + FACT_INTS)]
    if not all(np.isfinite(v) and v >= 0 for v in numbers):
      raise ValueError(f"launch facts of {f.name} hold a number that is not finite and >= 0")
  return out


@dataclass(frozen=True)
class LaunchEstimate:
  """Estimated time of one launch and every term it is made of (seconds)."""
  name: str
  latency_s: float
  sm_s: float
  memory_s: float
  parts: dict[str, float]                 # issue_s, fp32_s, ..., shared_s, l1_s, latency_s, l2_s, dram_s, launch_s
  efficiency: dict[str, float]            # memory: latency hiding of DRAM / L2 traffic
  bound: str                              # the term that sets the time
  blocks_on_busiest_sm: int
  is_estimate: bool = True

  def __str__(self) -> str:
    top = sorted(self.parts.items(), key=lambda kv: -kv[1])[:4]
    return (f"{self.name}: ~{self.latency_s * 1e6:.1f} us (estimate; {self.bound}-bound; "
            + ", ".join(f"{k}={v * 1e6:.1f}us" for k, v in top) + ")")


def unit_times(f: LaunchFacts, dev) -> tuple[dict[str, float], float, int]:
  """Every unit's time (seconds) for one launch on the busiest SM, before they are combined: the SM's units
  (issue, the pipes, tensor cores where the kernel has mma.sync, shared memory, L1, the latency chain,
  barriers), then L2 and DRAM (each divided by the memory efficiency); with that efficiency and the blocks
  the busiest SM runs. ``barrier`` (a warp's ``bar.sync`` count x the block's warps x the blocks) is not a
  term of the uncalibrated formula; a calibration weighs it. The facts' numbers may be numpy arrays, one value
  per program (the analytic model's walks cost many at once): then so are the times, each the same arithmetic."""
  clock = dev.boost_clock_mhz * 1e6
  warps = np.ceil(f.threads_per_block / dev.warp_size)
  on_sm = np.ceil(f.blocks / dev.sm_count)
  c = f.per_thread
  warp_instr = lambda *classes: sum(c.get(k, 0.0) for k in classes) * warps * on_sm   # noqa: E731
  total = warp_instr(*c.keys())
  pipes = {
    "issue": total / SCHEDULERS_PER_SM,
    "fp32": warp_instr("fp32_fma", "fp32_arith") / (dev.fp32_lanes_per_sm / 32),
    "int": warp_instr("int") / (dev.int32_lanes_per_sm / 32),
    "sfu": warp_instr("sfu") / (dev.sfu_lanes_per_sm / 32),
    "fp64": warp_instr("fp64") / max(dev.fp64_lanes_per_sm / 32, 1 / 32),
    "lsu": warp_instr("ld_global", "st_global", "ld_shared", "st_shared", "ld_local", "st_local", "shfl", "ld_param")
           / (dev.lsu_lanes_per_sm / 32),
    "cvt": warp_instr("conversion") / CVT_PER_CYCLE,
    "shared": f.shared_wavefronts_per_block * on_sm,
    "l1": f.l1_cycles_per_block * on_sm,
    "latency": np.ceil(on_sm / np.maximum(f.blocks_per_sm, 1)) * f.chain_cycles,
  }
  tensor = [cls for cls in TENSOR_FMAS if np.any(c.get(cls, 0.0))]
  if tensor:     # (a term only where the kernel has mma.sync: other estimates keep their parts)
    pipes["tensor"] = sum(warp_instr(cls) * TENSOR_FMAS[cls][0]
                          / max(dev.tensor_fma_per_clock_per_sm(TENSOR_FMAS[cls][1]), 1e-9) for cls in tensor)
  pipes["barrier"] = warp_instr("bar_sync")
  eff_mem = memory_efficiency(np.minimum(f.blocks_per_sm, on_sm) * warps, dev)
  busy_sms = np.minimum(f.blocks, dev.sm_count)
  dram_s = f.dram_bytes / (dev.dram_bandwidth_gbs * 1e9)
  l2_bytes = f.l2_bytes + f.local_bytes_per_thread * f.threads_per_block * f.blocks
  l2_s = l2_bytes / (L2_BW_FACTOR * dev.dram_bandwidth_gbs * 1e9) * dev.sm_count / np.maximum(busy_sms, 1)
  out = {k: _plain(v / clock) for k, v in pipes.items()}
  out.update({"l2": _plain(l2_s / eff_mem), "dram": _plain(dram_s / eff_mem)})
  return out, _plain(eff_mem), _plain(on_sm, int)


def memory_efficiency(resident_warps, dev, bytes_per_thread: float | None = None):
  """The share of the DRAM / L2 bandwidth ``resident_warps`` warps on an SM draw (Little's law): the bytes in flight
  that hide :data:`DRAM_LATENCY_CYCLES` at the SM's share of the bandwidth, over what the warps hold in flight;
  each warp holds :data:`MLP_LOADS_PER_WARP` 128-byte loads, or ``bytes_per_thread`` a lane where given
  (research/memory_parallelism.py reads it from the PTX). 1 for no resident warp (no launch)."""
  bytes_per_cycle_sm = dev.dram_bandwidth_gbs * 1e9 / (dev.boost_clock_mhz * 1e6) / dev.sm_count
  per_warp = 128 * MLP_LOADS_PER_WARP if bytes_per_thread is None else dev.warp_size * max(bytes_per_thread, 1.0)
  warps_needed = max(1.0, DRAM_LATENCY_CYCLES * bytes_per_cycle_sm / per_warp)
  return np.where(resident_warps > 0, np.minimum(1.0, resident_warps / warps_needed), 1.0)


def _plain(x, kind=float):
  """A number of one program as a Python number (a numpy array of several programs' stays an array)."""
  return x if isinstance(x, np.ndarray) and x.ndim else kind(x)


MEMORY_UNITS = ("l2", "dram")


def combine(times: dict[str, float], calibration=None) -> tuple[dict[str, float], float, float, float]:
  """(the parts, SM time, memory time, launch time without its overhead) of one launch's unit times: by a
  :class:`.calibration.Calibration`'s weighted p-norm, or (None) the uncalibrated maxima."""
  if calibration is not None:
    parts = calibration.weighted(times)
    return (parts, calibration.combine([v for k, v in parts.items() if k not in MEMORY_UNITS]),
            calibration.combine([parts.get(k, 0.0) for k in MEMORY_UNITS]), calibration.combine(list(parts.values())))
  parts = {k: v for k, v in times.items() if k != "barrier"}
  sm_s = _largest([v for k, v in parts.items() if k not in MEMORY_UNITS])
  memory_s = _largest([parts.get("l2", 0.0), parts.get("dram", 0.0)])
  return parts, sm_s, memory_s, _largest([sm_s, memory_s])


def _largest(xs: list) -> float:
  """max of numbers, or the elementwise max of arrays (one value per program); 0.0 for none."""
  if any(isinstance(x, np.ndarray) for x in xs): return _plain(functools.reduce(np.maximum, xs))
  return max(xs, default=0.0)


def launch_time(f: LaunchFacts, dev, calibration="active") -> LaunchEstimate:
  """One launch's time on device ``dev``: its units' times (:func:`unit_times`) combined by the
  calibration for the device's arch (``calibration="active"``: the one :func:`.calibration.active` finds,
  which is the uncalibrated formula where there is none), by a given :class:`.calibration.Calibration`, or
  (``None``) by the uncalibrated formula of the module docstring: the largest SM unit against the larger
  memory time."""
  if calibration == "active":
    from minicomp.search.static.calibration import active
    calibration = active(dev)
  times, eff_mem, on_sm = unit_times(f, dev)
  parts, sm_s, memory_s, body = combine(times, calibration)
  bound = max(parts.items(), key=lambda kv: kv[1])[0] if body > 0 else "launch"
  parts = {f"{k}_s": v for k, v in parts.items()}
  parts["launch_s"] = LAUNCH_OVERHEAD_S
  return LaunchEstimate(f.name, body + LAUNCH_OVERHEAD_S, sm_s, memory_s, parts,
                        {"memory": eff_mem}, bound, on_sm)


def fp32_floor(products: int, dev, calibration="active") -> float:
  """The least this model can estimate any kernel at (seconds, launch overhead included) that computes
  ``products`` floating-point multiply-adds on the FP32 pipes, one an FMA lane (not integer ones: a dp4a takes
  four; nor packed half2 or sm_100's paired FMAs, which minicomp does not emit): its ``fp32`` unit at no fewer
  instructions spread evenly over every SM, weighed as the calibration weighs it (a p-norm of weighted units is at
  least any one of them, for every p > 0; the uncalibrated maximum too). ``compile`` skips Gensor's construction for
  a task whose tensor-core schedule is estimated below it: no FP32-pipe kernel could be estimated faster."""
  if calibration == "active":
    from minicomp.search.static.calibration import active
    calibration = active(dev)
  weight = calibration.weights.get("fp32", 1.0) if calibration is not None else 1.0
  return weight * products / (dev.sm_count * dev.fp32_lanes_per_sm * dev.boost_clock_mhz * 1e6) + LAUNCH_OVERHEAD_S


def launch_times(f: LaunchFacts, dev, calibration=None) -> np.ndarray:
  """:func:`launch_time`'s latency (seconds) of many programs at once: ``f``'s numbers are numpy arrays, one value
  per program (the analytic model's; ``calibration`` a :class:`.calibration.Calibration` or None)."""
  times, _, _ = unit_times(f, dev)
  return combine(times, calibration)[3] + LAUNCH_OVERHEAD_S


@dataclass(frozen=True)
class Estimate:
  """The estimated latency of a compiled kernel (all its launches, in order)."""
  device: str
  launches: tuple[LaunchEstimate, ...] = field(default_factory=tuple)
  is_estimate: bool = True
  model: str = "static model"             # or "static model calibrated on <GPU> timings" (calibration.describe)

  @property
  def latency_s(self) -> float:
    return sum(l.latency_s for l in self.launches)

  @property
  def parts(self) -> dict[str, float]:
    out: dict[str, float] = {}
    for l in self.launches:
      for k, v in l.parts.items(): out[k] = out.get(k, 0.0) + v
    return out

  def __str__(self) -> str:
    head = f"estimated latency on {self.device} ({self.model}, no GPU measurement): {self.latency_s * 1e6:.1f} us"
    return "\n".join([head] + ["  " + str(l) for l in self.launches])
