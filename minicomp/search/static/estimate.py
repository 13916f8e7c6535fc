"""``estimate(kernel, target)``: the static model's latency estimate for a built Kernel.

It gathers, for every launch of the kernel, the facts the formula of
:mod:`minicomp.search.static.model` needs:

- per-thread dynamic instruction counts by class from the NVRTC PTX (Tuna's Algorithm 3,
  :mod:`.ptx`; loop trip counts the PTX hides come from minicomp's own loop IR);
- one warp's latency-bound cycles (Tuna's ILP cost, :func:`.ptx.chain_cycles`);
- registers, shared memory and register spills from ptxas, and the occupancy they allow
  (:mod:`.occupancy`);
- data movement from islpy (Tuna's Algorithm 2, :mod:`.footprint`): compulsory DRAM bytes,
  L2 -> SM bytes with the reuse L1 captures, sectors per warp request (coalescing) and
  shared-memory bank conflicts of the first warp.

The result is labelled an estimate everywhere it is printed.
"""
from __future__ import annotations

import math

from minicomp.errors import EstimateError
from minicomp.search.static.model import Estimate, LaunchFacts, launch_time
from minicomp.target import Target, as_target


def launch_facts(kernel, dev) -> list[LaunchFacts]:
  """The model's inputs for every launch of ``kernel`` on device ``dev`` (remembered by
  :mod:`.cache`: the same source, arch, launches and device are analysed once)."""
  from minicomp.search.static.footprint import data_movement
  from minicomp.search.static.occupancy import occupancy
  from minicomp.search.static.ptx import analyze_ptx, ir_loop_extents
  from minicomp.search.static import cache
  if kernel.program is None:
    saved = kernel.saved_facts
    if saved is not None and saved[0] == dev.name: return list(saved[1])
    raise EstimateError(
      "the static model needs the kernel's loop IR, which a kernel loaded from disk does not carry; "
      + (f"its saved model keeps the analyses for {saved[0]} only: estimate on that device, or compile the model "
         f"again to estimate on {dev.name}" if saved is not None else
         "this saved model keeps no analyses (saved by an older minicomp, or the static model could not analyse "
         "this kernel): compile the model again and save it"))
  ck = cache.key(kernel, dev)
  hit = cache.get(ck)
  if hit is not None: return list(hit)
  out = []
  for l, kir in zip(kernel.plan.launches, kernel.program.kernels):
    prof = analyze_ptx(kernel.binary.ptx, l.kernel, hints=ir_loop_extents(kir.body))
    res = kernel.binary.resources.get(l.kernel)
    threads, blocks = math.prod(l.block), math.prod(l.grid)
    occ = occupancy(dev, threads, res.registers if res else 32, (res.shared_bytes if res else 0) + l.shared_bytes,
                    blocks)   # (ptxas counts static shared memory only; the launch passes the dynamic)
    dm = data_movement(kir, l1_bytes=dev.l1_bytes_per_sm, l2_bytes=dev.l2_bytes)
    warps = math.ceil(threads / dev.warp_size)
    # L1 handles one 128-byte line (up to four sectors) per cycle: a request costs a cycle per
    # distinct line it touches (an uncoalesced warp request: up to 32)
    l1_cycles = sum((a.requests or 0.0) * max(a.lines_per_request or 1.0, math.ceil((a.sectors_per_request or 4) / 4))
                    for a in dm.accesses if a.scope == "global")
    shared_instr = (prof.counts.get("ld_shared", 0.0) + prof.counts.get("st_shared", 0.0)) * warps
    # L2 -> SM traffic: the 32-byte sectors each warp request touches (so uncoalesced accesses
    # pay for whole sectors), scaled by the reuse L1 captures inside a block (distinct elements
    # per block over dynamic accesses of the buffer), never below the distinct bytes per block
    reuse = {b.name: min(1.0, b.block_sum / max(b.reads + b.writes, 1)) for b in dm.buffers}
    l2 = sum((a.requests or 0.0) * (a.sectors_per_request or 4) * 32 * reuse.get(a.buffer, 1.0)
             for a in dm.accesses if a.scope == "global")
    l2 = max(l2, dm.l2_read_bytes + dm.l2_write_bytes)
    out.append(LaunchFacts(
      name=l.kernel, blocks=blocks, threads_per_block=threads, per_thread=dict(prof.counts),
      active_warps_per_sm=occ.active_warps_per_sm, blocks_per_sm=occ.blocks_per_sm,
      dram_bytes=dm.dram_bytes, l2_bytes=l2,
      l1_cycles_per_block=l1_cycles / max(blocks, 1),
      shared_wavefronts_per_block=shared_instr * max(dm.bank_conflict, 1.0),
      chain_cycles=prof.chain_cycles, local_bytes_per_thread=_spill_traffic(prof, res),
      registers=res.registers if res else 0))
  cache.put(ck, tuple(out))
  return out


def analyse(kernels, dev, jobs: int | None = None, on_done=None) -> None:
  """Put in :mod:`.cache` the analyses of the ``kernels`` it lacks on device ``dev``, in ``jobs`` worker processes of
  the shared pool at once (default ``$MINICOMP_JOBS``, else one per core), so that a whole model's estimate or save,
  which read the cache after, pays them over the cores instead of one after another (0.05-0.2 s a kernel). Nothing
  where fewer than two kernels lack one, with one job, or where :func:`~minicomp.search.workers.own_work_pool`
  keeps the work in this process; a kernel
  the model cannot analyse is left for the caller's own :func:`launch_facts` to say so. ``on_done(kernel)`` is
  called for each kernel analysed here (a progress bar)."""
  from minicomp.search import workers
  from minicomp.search.static import cache
  todo = {}
  for k in kernels:
    if k.program is not None and cache.peek(ck := cache.key(k, dev)) is None: todo.setdefault(ck, k)
  try: n = jobs or workers.default_jobs()
  except ValueError: n = 1
  import multiprocessing
  if n < 2 or len(todo) < 2 or multiprocessing.current_process().daemon: return   # (a worker cannot start processes)
  pool = workers.own_work_pool(n, "analysing kernels")
  if pool is None: return
  import concurrent.futures as cf
  futs = {pool.submit(_launch_facts_of, (k.program, k.plan, k.binary, k.source, k.target), dev): ck
          for ck, k in todo.items()}
  from minicomp.progress import check_interrupt
  for f in cf.as_completed(futs):
    check_interrupt()
    try: cache.put(futs[f], tuple(f.result()))
    except Exception:  # noqa: BLE001 -- (a worker's failure: the caller analyses that kernel itself, and says why)
      continue
    if on_done is not None: on_done(todo[futs[f]])


def _launch_facts_of(parts: tuple, dev) -> list[LaunchFacts]:
  """:func:`launch_facts` in a worker, of a kernel sent as its parts (a Kernel holds a lock: not picklable)."""
  from types import SimpleNamespace
  program, plan, binary, source, target = parts
  return launch_facts(SimpleNamespace(program=program, plan=plan, binary=binary, source=source, target=target,
                                      saved_facts=None), dev)


def _spill_traffic(prof, res) -> float:
  """Bytes of register-spill traffic per thread: ptxas's spill stores + loads (bytes in the code),
  each run as often as the average PTX instruction (dynamic / static instruction counts)."""
  if res is None or not (res.spill_stores or res.spill_loads): return 0.0
  return (res.spill_stores + res.spill_loads) * prof.total / max(sum(prof.static_counts.values()), 1)


def estimate(kernel, target: Target | str | None = None) -> Estimate:
  """Estimated latency of ``kernel`` (all its launches) on ``target`` (default: the kernel's own
  target; an arch like "sm_86" means its default device, or name a device: "a100", "rtx3090").

  Returns an :class:`~minicomp.search.static.model.Estimate` with ``latency_s``, per-launch
  terms (``launches[i].parts``: issue, pipes, shared, L1, L2, DRAM, launch overhead) and the
  bound that sets each launch's time. Always an estimate: no GPU is involved. On an arch with a calibration
  (:mod:`.calibration`: sm_90) the calibrated model, unless ``MINICOMP_STATIC_MODEL=uncalibrated``."""
  from minicomp.search.static.calibration import active, describe
  tgt = as_target(target) if target is not None else kernel.target
  dev = tgt.device
  cal = active(dev)
  return Estimate(dev.name, tuple(launch_time(f, dev, cal) for f in launch_facts(kernel, dev)), model=describe(cal))
