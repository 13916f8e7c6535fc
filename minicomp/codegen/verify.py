"""Resource checks on a lowered program, before any CUDA is emitted.

A violation raises :class:`~minicomp.errors.ScheduleError` naming the schedule step that
caused it (the bind that made the block too large, the cache_read whose tile does not fit
in shared memory), so the search can prune the candidate and a user can fix the schedule.
"""
from __future__ import annotations

import math

from minicomp.codegen.cuda import shared_layout
from minicomp.codegen.tensor_core import check_arch
from minicomp.errors import ScheduleError, TargetError
from minicomp.ir.loop import Program
from minicomp.ir.mma import INTRINSICS
from minicomp.ir.state import State, THREAD_TAGS
from minicomp.target import Target


def _steps_matching(state: State, pred) -> str:
  hits = [f"step {k} {st}" for k, st in enumerate(state.steps) if pred(st)]
  return "; ".join(hits[-3:]) if hits else "(no step: the default schedule)"


def check_resources(state: State, prog: Program, target: Target, shared_limit: int | None = None) -> None:
  """Threads per block, block dims, shared memory per block and vthread extents against ``target``; the
  tensor-core instructions of tensorize steps and the cp.async of pipeline steps against its arch. Shared memory
  is held to ``shared_limit`` where given (the searches': ``Target.search_shared_bytes``), else to the target's
  ``max_shared_bytes_per_block``."""
  for k, st in enumerate(state.steps):
    if st.kind in ("tensorize", "pipeline"):
      try:
        check_arch(INTRINSICS[st.intrinsic] if st.kind == "tensorize" else "cp.async", target.arch)
      except TargetError as e:
        raise ScheduleError(f"step {k} {st}: {e}") from None
  for k in prog.kernels:
    if not all(isinstance(d, int) for d in k.grid + k.block) or not all(b.size.is_const for b in k.allocs):
      raise ScheduleError(f"kernel {k.name}: the program is symbolic (grid={k.grid}, block={k.block}); "
                          "substitute schedule parameters (Schedule.substitute) before building")
    n = math.prod(k.block)
    if n > target.max_threads_per_block or any(b > m for b, m in zip(k.block, target.max_block_dims)):
      raise ScheduleError(
        f"kernel {k.name}: block {k.block} has {n} threads; {target.arch} allows {target.max_threads_per_block} per block "
        f"(and at most {target.max_block_dims} per dim). Caused by: "
        + _steps_matching(state, lambda st: getattr(st, "annotation", None) in THREAD_TAGS or st.kind == "cross_thread_reduce"))
    if any(g > m for g, m in zip(k.grid, target.max_grid_dims)):
      raise ScheduleError(f"kernel {k.name}: grid {k.grid} exceeds the {target.arch} limits {target.max_grid_dims}")
    smem = shared_layout(k)[1]
    limit = target.max_shared_bytes_per_block if shared_limit is None else shared_limit
    if smem > limit:
      names = [b.name for b in k.allocs if b.scope == "shared"]
      allows = f"{target.arch} allows {limit}" if shared_limit is None else f"the search offers {limit}"
      raise ScheduleError(
        f"kernel {k.name}: {smem} bytes of shared memory ({', '.join(names)}); {allows} per block. Caused by: "
        + _steps_matching(state, lambda st: (st.kind == "cache_read" and st.scope == "shared") or st.kind == "compute_at"))
  for st in state.stages:
    for it, a in st.annotations:
      if a != "vthread" or it not in st.leaves: continue
      e = st.leaf_extents()[it]
      if e.is_const and int(e.arg) > target.max_vthread_extent:
        raise ScheduleError(
          f"stage {st.name}: vthread loop {it!r} has extent {int(e.arg)} > {target.max_vthread_extent}. Caused by: "
          + _steps_matching(state, lambda s_: getattr(s_, "stage", None) == st.name and getattr(s_, "iter", None) == it))
