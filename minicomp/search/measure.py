"""Measurers: candidates in, costs or typed failures out. The search asks this interface only.

A candidate (:class:`MeasureInput`) is plain, picklable data: the task's ComputeDAG, the
schedule steps as JSON and the target name. A worker replays the steps, lowers, emits CUDA C,
compiles it with NVRTC and then either asks the static model (:class:`StaticMeasurer`: no GPU,
every cost an *estimate*) or times it on the GPU (:class:`GPUMeasurer`). Failures never raise
out of ``measure``: each result carries an :class:`ErrorKind` and a message, so one bad
candidate never stops a tuning run.

Work runs through a ``concurrent.futures.Executor`` the caller may pass in (default: a local
process pool with one worker per core), so a Dask (``client.get_executor()``) or Ray executor
drops in unchanged. Results come back in input order; the static model is deterministic.
"""
from __future__ import annotations

import concurrent.futures as cf
import enum
import os
import time
from dataclasses import dataclass, field
from typing import Sequence

from minicomp.errors import CompileError, LoweringError, MinicompError, RuntimeLaunchError, ScheduleError


class MeasureError(MinicompError):
  """The measuring machinery itself failed (not a candidate): e.g. its worker processes cannot start."""


class ErrorKind(enum.Enum):
  NONE = "ok"
  SCHEDULE = "invalid schedule"            # a step does not apply
  RESOURCE = "resource limit"             # threads / shared memory / registers over the target's limits
  LOWERING = "lowering error"
  COMPILE = "compile error"               # NVRTC rejected the source
  LAUNCH = "launch failure"
  TIMEOUT = "timeout"
  WRONG_RESULT = "wrong result"
  INTERNAL = "internal error"             # a bug: reported, the run goes on


@dataclass(frozen=True)
class MeasureInput:
  """One candidate: a task's DAG, the schedule steps (JSON text) and the target name."""
  dag: object
  steps_json: str
  target: str = "sm_86"
  key: str = ""


@dataclass(frozen=True)
class MeasureResult:
  """A cost in seconds (None on failure), what kind of failure, and how the cost was obtained."""
  cost_s: float | None
  error: ErrorKind = ErrorKind.NONE
  message: str = ""
  is_estimate: bool = True
  parts: dict = field(default_factory=dict)
  build_s: float = 0.0

  @property
  def ok(self) -> bool: return self.error is ErrorKind.NONE

  def __str__(self) -> str:
    if not self.ok: return f"failed ({self.error.value}): {self.message}"
    return f"{self.cost_s * 1e6:.2f} us" + (" (estimate)" if self.is_estimate else " (measured)")


def _process_pool(workers: int | None) -> cf.Executor:
  """A local process pool; workers start fresh ("spawn": forking a process that runs JAX or
  pycuda threads can deadlock)."""
  import multiprocessing
  return cf.ProcessPoolExecutor(max_workers=workers or os.cpu_count() or 1, mp_context=multiprocessing.get_context("spawn"))


def _classify(e: BaseException) -> ErrorKind:
  if isinstance(e, ScheduleError):
    msg = str(e)
    return ErrorKind.RESOURCE if ("allows" in msg or "vthread loop" in msg) else ErrorKind.SCHEDULE
  if isinstance(e, LoweringError): return ErrorKind.LOWERING
  if isinstance(e, CompileError): return ErrorKind.COMPILE
  if isinstance(e, RuntimeLaunchError): return ErrorKind.LAUNCH
  return ErrorKind.INTERNAL


def build_candidate(inp: MeasureInput):
  """Replay, lower, emit and compile one candidate (in a worker): returns the Kernel."""
  from minicomp.codegen.kernel import build
  from minicomp.ir.schedule import Schedule
  s = Schedule.from_json(inp.dag, inp.steps_json)
  return build(s, inp.target, name=f"cand_{inp.key}" if inp.key else "cand")


def _static_one(inp: MeasureInput) -> MeasureResult:
  t0 = time.perf_counter()
  try:
    kern = build_candidate(inp)
    t1 = time.perf_counter()
    from minicomp.search.static.estimate import estimate
    est = estimate(kern, inp.target)
    return MeasureResult(est.latency_s, ErrorKind.NONE, "", True, est.parts, t1 - t0)
  except MinicompError as e:
    return MeasureResult(None, _classify(e), str(e), True, {}, time.perf_counter() - t0)
  except Exception as e:   # a bug in minicomp: record it, keep the run going
    return MeasureResult(None, ErrorKind.INTERNAL, f"{type(e).__name__}: {e}", True, {}, time.perf_counter() - t0)


class Measurer:
  """Interface: ``measure(candidates) -> results`` (same order, never raises for a bad candidate)."""
  is_estimate = True

  def measure(self, inputs: Sequence[MeasureInput]) -> list[MeasureResult]:
    raise NotImplementedError


class StaticMeasurer(Measurer):
  """Costs from the static model (no GPU needed). Deterministic; every cost is an estimate.

  ``executor``: any ``concurrent.futures.Executor``; default a process pool of ``workers``
  (one per core). ``timeout_s`` bounds each candidate (a timeout is a typed failure)."""

  def __init__(self, executor: cf.Executor | None = None, workers: int | None = None, timeout_s: float = 120.0):
    self._own, self._workers = executor is None, workers
    self.executor = executor or _process_pool(workers)
    self.timeout_s = timeout_s

  def measure(self, inputs: Sequence[MeasureInput]) -> list[MeasureResult]:
    try:
      futs = [self.executor.submit(_static_one, inp) for inp in inputs]
    except cf.process.BrokenProcessPool as e:
      if not self._own: raise MeasureError(f"the executor's worker processes died: {e}") from e
      self.executor.shutdown(wait=False, cancel_futures=True)    # a worker was killed: start a fresh pool once
      self.executor = _process_pool(self._workers)
      try:
        futs = [self.executor.submit(_static_one, inp) for inp in inputs]
      except cf.process.BrokenProcessPool as e2:
        raise MeasureError(f"the measuring worker processes die at start ({e2}). Workers are started with "
                           "'spawn', which re-imports the main script: put the code that tunes under "
                           "`if __name__ == \"__main__\":`") from e2
    out = []
    timed_out = False
    for f in futs:
      try:
        out.append(f.result(timeout=self.timeout_s))
      except cf.TimeoutError:
        f.cancel()
        timed_out = True
        out.append(MeasureResult(None, ErrorKind.TIMEOUT, f"no result within {self.timeout_s} s"))
      except Exception as e:   # a worker died
        out.append(MeasureResult(None, ErrorKind.INTERNAL, f"worker failed: {type(e).__name__}: {e}"))
    if timed_out and self._own: self._restart()
    return out

  def _restart(self) -> None:
    """Stop the pool's workers (a timed-out estimate keeps its worker busy, for minutes on the slow
    static-model paths: later rounds would queue behind it and close() would wait for it) and start
    a fresh pool."""
    procs = list(getattr(self.executor, "_processes", {}).values())
    self.executor.shutdown(wait=False, cancel_futures=True)
    for p in procs:
      if p.is_alive(): p.terminate()
    for p in procs: p.join(timeout=5)
    self.executor = _process_pool(self._workers)

  def close(self) -> None:
    if self._own: self.executor.shutdown(wait=True, cancel_futures=True)

  def __enter__(self): return self
  def __exit__(self, *exc): self.close()


class GPUMeasurer(Measurer):
  """Costs measured on the local GPU through pycuda (Felix-style: warm-up, repeat until at least
  ``min_total_s`` of kernel time, L2 flushed between runs, median), with the result of the first
  run checked against the CPU simulator when the output is small. Builds run in ``executor``;
  launches run in this process (GPU handles are never sent to workers)."""
  is_estimate = False

  def __init__(self, executor: cf.Executor | None = None, min_total_s: float = 0.1, max_repeats: int = 1000,
               timeout_s: float = 10.0, check_elements: int = 1 << 16):
    from minicomp.codegen.gpu_runtime import gpu_available
    if not gpu_available(): raise RuntimeLaunchError("GPUMeasurer needs pycuda and a CUDA GPU; use StaticMeasurer")
    self._own = executor is None
    self.executor = executor or _process_pool(None)
    self.min_total_s, self.max_repeats, self.timeout_s, self.check_elements = min_total_s, max_repeats, timeout_s, check_elements

  def measure(self, inputs: Sequence[MeasureInput]) -> list[MeasureResult]:   # pragma: no cover - needs a GPU
    import numpy as np
    futs = [self.executor.submit(build_candidate, inp) for inp in inputs]
    out = []
    for inp, f in zip(inputs, futs):
      t0 = time.perf_counter()
      try:
        kern = f.result(timeout=self.timeout_s)
        rng = np.random.default_rng(0)
        from minicomp.codegen.kernel import NP_DTYPE
        args = [rng.standard_normal(b.shape).astype(NP_DTYPE[b.dtype]) for b in kern.plan.inputs]
        ref = None
        if sum(int(np.prod(b.shape)) for b in kern.plan.outputs) <= self.check_elements:
          ref = kern.run(args, device="cpu")
        got = kern.run(args, device="gpu")
        if ref is not None and not all(np.allclose(g, r, rtol=1e-3, atol=1e-3) for g, r in zip(got, ref)):
          out.append(MeasureResult(None, ErrorKind.WRONG_RESULT, "GPU result differs from the CPU simulator", False)); continue
        times = _time_on_gpu(kern, args, self.min_total_s, self.max_repeats)
        out.append(MeasureResult(float(np.median(times)), ErrorKind.NONE, "", False, {"min_s": float(min(times))},
                                 time.perf_counter() - t0))
      except cf.TimeoutError:
        out.append(MeasureResult(None, ErrorKind.TIMEOUT, f"build took over {self.timeout_s} s", False))
      except MinicompError as e:
        out.append(MeasureResult(None, _classify(e), str(e), False))
      except Exception as e:
        out.append(MeasureResult(None, ErrorKind.INTERNAL, f"{type(e).__name__}: {e}", False))
    return out


  def close(self) -> None:
    if self._own: self.executor.shutdown(wait=True, cancel_futures=True)

  def __enter__(self): return self
  def __exit__(self, *exc): self.close()


def _time_on_gpu(kern, args, min_total_s: float, max_repeats: int) -> list[float]:   # pragma: no cover - needs a GPU
  """Kernel times in seconds: one warm-up, then repeats (L2 flushed before each) until
  ``min_total_s`` of kernel time or ``max_repeats``."""
  import numpy as np
  from minicomp.codegen.gpu_runtime import GpuModule, flush_l2
  mod = GpuModule(kern.binary)
  bufs = {b.name: a for b, a in zip(kern.plan.inputs, args)}
  for b in kern.plan.outputs + kern.plan.temps: bufs[b.name] = np.zeros(b.shape, np.float32)
  run = lambda: sum(mod.launch(l.kernel, l.grid, l.block, 0, [bufs[n] for n in l.params], time=True) for l in kern.plan.launches)
  run()
  times: list[float] = []
  while sum(times) < min_total_s and len(times) < max_repeats:
    flush_l2()
    times.append(run())
  return times
