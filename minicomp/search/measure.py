"""Measurers: candidates in, costs or typed failures out. The search asks this interface only.

A candidate (:class:`MeasureInput`) is plain, picklable data: the task's ComputeDAG, the
schedule steps as JSON and the target name. A worker replays the steps, lowers, emits CUDA C,
compiles it with NVRTC and then either asks the static model (:class:`StaticMeasurer`: no GPU,
every cost an *estimate*) or times it on the GPU (:class:`GPUMeasurer`). Failures never raise
out of ``measure``: each result carries an :class:`ErrorKind` and a message, so one bad
candidate never stops a tuning run. A failure of the machinery itself (workers that die at
start, a lost GPU context) raises :class:`MeasureError` instead: recorded as candidate failures,
it would use up the trial budget and tune nothing.

Work runs through a ``concurrent.futures.Executor`` the caller may pass in (default: the process-wide
pool of :mod:`minicomp.search.workers`, one worker per core, started once and shared by every measurer,
whose workers exit when this process dies), so a Dask
(``client.get_executor()``) or a Ray cluster's (:mod:`minicomp.search.cluster`) drops in unchanged. ``measure`` returns results in
input order, ``measure_iter`` as they finish; the static model is deterministic.
"""
from __future__ import annotations

import concurrent.futures as cf
from concurrent.futures.process import BrokenProcessPool   # (`import concurrent.futures` does not load it)
import enum
import time
from dataclasses import dataclass, field
from collections.abc import Iterator, Sequence

from minicomp.errors import (CompileError, LoweringError, MeasureError, MinicompError, RuntimeLaunchError, ScheduleError,
                             WorkerLostError)
from minicomp.search.workers import ping, restart_pool, work_pool


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
  LOST = "worker lost"                    # a cluster worker or node died measuring it, also on the retry


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


MAIN_GUARD_FIX = ("Workers are started with 'spawn', which re-imports the main script where it registers its own "
                  "sketch rules or schedule steps: put the code that tunes under `if __name__ == \"__main__\":`")


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
  """Interface: ``measure(candidates) -> results`` (same order, never raises for a bad candidate).
  ``measure_iter`` yields ``(index, result)`` as each finishes, so a tuning run logs every result
  at once (a kill loses only the candidates in flight); by default it yields ``measure``'s results.
  A failure of the machinery itself (not of a candidate) raises :class:`MeasureError`."""
  is_estimate = True

  def measure(self, inputs: Sequence[MeasureInput]) -> list[MeasureResult]:
    raise NotImplementedError

  def measure_iter(self, inputs: Sequence[MeasureInput]) -> Iterator[tuple[int, MeasureResult]]:
    yield from enumerate(self.measure(inputs))

  def _in_order(self, inputs: Sequence[MeasureInput]) -> list[MeasureResult]:
    """``measure`` of a measurer whose ``measure_iter`` yields as candidates finish: the results in input order."""
    out: list = [None] * len(inputs)
    for i, r in self.measure_iter(inputs): out[i] = r
    return out


def measure_iter(measurer, inputs: Sequence[MeasureInput]) -> Iterator[tuple[int, MeasureResult]]:
  """``measurer.measure_iter(inputs)``, or ``measure`` for a measurer that does not derive from :class:`Measurer`."""
  if hasattr(measurer, "measure_iter"): return measurer.measure_iter(inputs)
  return enumerate(measurer.measure(inputs))


class StaticMeasurer(Measurer):
  """Costs from the static model (no GPU needed). Deterministic; every cost is an estimate.

  ``executor``: any ``concurrent.futures.Executor``; default the shared process pool of ``workers``
  workers (one per core; :func:`minicomp.search.workers.work_pool`, which outlives this measurer so
  the next one starts warm). ``timeout_s`` bounds each candidate (a timeout is a typed failure).

  When the owned pool breaks (a worker died), it is restarted and checked with a no-op task: if
  that fails too, the workers die at start (typically a script without a ``__main__`` guard that registers its own
  sketch rules, :func:`~minicomp.search.workers.work_pool`) and
  :class:`MeasureError` says so; else the unfinished candidates are measured again one at a time,
  so the one that kills its worker is recorded as an internal error and the rest are measured."""

  def __init__(self, executor: cf.Executor | None = None, workers: int | None = None, timeout_s: float = 120.0):
    self._own, self._workers = executor is None, workers
    self.executor = executor or work_pool(workers)
    self.timeout_s = timeout_s

  def measure(self, inputs: Sequence[MeasureInput]) -> list[MeasureResult]: return self._in_order(inputs)

  def measure_iter(self, inputs: Sequence[MeasureInput]) -> Iterator[tuple[int, MeasureResult]]:
    inputs = list(inputs)
    if self._own: self.executor = work_pool(self._workers)   # the shared pool may have been replaced since
    lost: list[int] = []                       # candidates whose pool broke under them
    futs: dict = {}
    try:
      try:
        for i, inp in enumerate(inputs): futs[self.executor.submit(_static_one, inp)] = i
      except BrokenProcessPool:
        lost = sorted(set(range(len(inputs))) - set(futs.values()))
      while futs:
        done, _ = cf.wait(futs, timeout=self.timeout_s, return_when=cf.FIRST_COMPLETED)
        if not done:                             # no progress for timeout_s: the running ones are stuck
          stuck = [f for f in futs if f.running()] or list(futs)
          for f in stuck:
            f.cancel()
            yield futs.pop(f), MeasureResult(None, ErrorKind.TIMEOUT, f"no result within {self.timeout_s} s")
          if self._own:                          # stop the stuck workers; measure the rest in a fresh pool
            rest = sorted(futs.values())
            self._restart()
            futs = {self.executor.submit(_static_one, inputs[i]): i for i in rest}
          continue
        for f in done:
          i = futs.pop(f)
          try:
            yield i, f.result()
          except BrokenProcessPool:
            lost.append(i)
          except WorkerLostError as e:   # a cluster executor's worker died, also on the retry
            yield i, MeasureResult(None, ErrorKind.LOST, str(e))
          except Exception as e:   # e.g. an input that does not pickle
            yield i, MeasureResult(None, ErrorKind.INTERNAL, f"worker failed: {type(e).__name__}: {e}")
    finally:                                   # the caller stopped early: the shared pool must not build the rest
      for f in futs: f.cancel()
    if lost: yield from self._after_break(inputs, sorted(lost))

  def _after_break(self, inputs, lost: list[int]) -> Iterator[tuple[int, MeasureResult]]:
    """The pool broke: check that fresh workers live, then measure the lost candidates one by one."""
    if not self._own:
      raise MeasureError("StaticMeasurer: the executor's worker processes died (BrokenProcessPool); if they die at "
                         f"start: {MAIN_GUARD_FIX}")
    self._restart(check=True)
    for i in lost:
      try:
        r = self.executor.submit(_static_one, inputs[i]).result(timeout=self.timeout_s)
      except BrokenProcessPool:
        r = MeasureResult(None, ErrorKind.INTERNAL, "the worker process died measuring this candidate")
        self._restart(check=True)
      except cf.TimeoutError:
        r = MeasureResult(None, ErrorKind.TIMEOUT, f"no result within {self.timeout_s} s")
        self._restart()
      yield i, r

  def _restart(self, check: bool = False) -> None:
    """Kill the pool's workers (a timed-out estimate keeps its worker busy, for minutes on the slow
    static-model paths: later rounds would queue behind it) and start a fresh shared pool; with
    ``check``, make sure its workers start (MeasureError if not)."""
    self.executor = restart_pool(self.executor, self._workers)
    if check:
      try:
        self.executor.submit(ping).result(timeout=max(60.0, self.timeout_s))
      except (BrokenProcessPool, cf.TimeoutError) as e:
        raise MeasureError(f"StaticMeasurer: the measuring worker processes die at start ({type(e).__name__}). "
                           f"{MAIN_GUARD_FIX}. Nothing was logged for the candidates in flight") from None

  def close(self) -> None:
    """Nothing to stop: the shared pool stays up for the next measurer (a passed executor is the caller's)."""

  def __enter__(self): return self
  def __exit__(self, *exc): self.close()


def build_plain(inp: MeasureInput) -> tuple:
  """:func:`build_candidate` for a worker process: returns plain data (launch plan, CUDA source,
  NVRTC binary, target), never a live Kernel, so it crosses process boundaries by pickling."""
  k = build_candidate(inp)
  return k.plan, k.source, k.binary, str(k.target)


class GPUMeasurer(Measurer):
  """Costs measured on the local GPU with CUDA events (Felix-style: a warm-up run, then runs with
  the L2 flushed before each until ``min_total_s`` of kernel time, the median), every buffer in
  its real dtype. The result of one run is checked against the CPU simulator when the output has
  at most ``check_elements`` elements.

  Builds run in ``executor`` (default: a spawn process pool) and come back as plain data;
  launches run in this process, through ``backend`` (default backend) or ``driver``. A failure of
  the machinery itself — the worker pool died, or the GPU context was lost — raises
  :class:`MeasureError` and stops the run, instead of being recorded as candidate failures.
  """
  is_estimate = False

  def __init__(self, executor: cf.Executor | None = None, min_total_s: float = 0.1, max_repeats: int = 1000,
               timeout_s: float = 10.0, check_elements: int = 1 << 16, backend: str | None = None, driver=None):
    from minicomp.codegen.driver import NoGPUError, get_driver
    try:
      self.driver = driver or get_driver(backend)
    except NoGPUError as e:
      raise NoGPUError(f"GPUMeasurer needs a GPU: {e}; use StaticMeasurer (the static model) instead") from None
    self._own = executor is None
    self.executor = executor or work_pool()
    self.min_total_s, self.max_repeats, self.timeout_s, self.check_elements = min_total_s, max_repeats, timeout_s, check_elements

  def measure(self, inputs: Sequence[MeasureInput]) -> list[MeasureResult]:
    return [r for _, r in self.measure_iter(inputs)]

  def measure_iter(self, inputs: Sequence[MeasureInput]) -> Iterator[tuple[int, MeasureResult]]:
    if self._own: self.executor = work_pool()     # the shared pool may have been replaced since
    try:
      futs = [self.executor.submit(build_plain, inp) for inp in inputs]
    except (BrokenProcessPool, RuntimeError) as e:
      raise MeasureError(f"GPUMeasurer: the build workers cannot take work ({type(e).__name__}: {e}); if they die "
                         f"at start: {MAIN_GUARD_FIX}") from e
    try:
      for i, (inp, f) in enumerate(zip(inputs, futs)): yield i, self._one(inp, f)
    finally:                                   # the caller stopped early: the shared pool must not build the rest
      for f in futs: f.cancel()

  def _one(self, inp: MeasureInput, fut) -> MeasureResult:
    t0 = time.perf_counter()
    try:
      built = fut.result(timeout=self.timeout_s)
    except cf.TimeoutError:
      return MeasureResult(None, ErrorKind.TIMEOUT, f"build took over {self.timeout_s} s", False)
    except BrokenProcessPool as e:
      raise MeasureError(f"GPUMeasurer: a build worker process died ({e}); the measurement machinery is broken. If "
                         f"the workers die at start: {MAIN_GUARD_FIX}") from e
    except Exception as e:   # any failure of one candidate is recorded (its kind, its text): the run goes on
      return _failure(e, t0)
    return time_built(built, inp, self.driver, self.min_total_s, self.max_repeats, self.check_elements, t0)

  def close(self) -> None:
    """Nothing to stop: the shared build pool stays up for the next measurer (a passed executor is the caller's)."""

  def __enter__(self): return self
  def __exit__(self, *exc): self.close()


def _failure(e: BaseException, t0: float) -> MeasureResult:
  """A GPU measurement's failure as a result: its kind (INTERNAL for what is not a MinicompError), its text."""
  if isinstance(e, MinicompError): return MeasureResult(None, _classify(e), str(e), False, {}, time.perf_counter() - t0)
  return MeasureResult(None, ErrorKind.INTERNAL, f"{type(e).__name__}: {e}", False, {}, time.perf_counter() - t0)


def results_agree(got, want, rtol: float, atol: float) -> bool:
  """Whether each output ``got`` matches ``want`` within ``rtol`` / ``atol``, widened for a half output to its
  type's resolution: one unit in the last place of each value (``rtol`` eps) and of the largest (``atol`` eps
  times max |want|), since a half kernel rounds what it computes in float32 once per stored value and its float32
  sums run in another order than the reference's. NaN matches NaN."""
  import numpy as np
  from minicomp.ir.ops import HALF_DTYPES, finfo
  for g, w in zip(got, want):
    eps = float(finfo(np.dtype(g.dtype).name).eps) if np.dtype(g.dtype).name in HALF_DTYPES else 0.0   # 1 ulp at 1.0
    g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
    scale = float(np.abs(w[np.isfinite(w)]).max()) if eps and np.isfinite(w).any() else 0.0
    if not np.allclose(g, w, rtol=max(rtol, eps), atol=max(atol, eps * scale), equal_nan=True): return False
  return True


def time_built(built: tuple, inp: MeasureInput, driver, min_total_s: float, max_repeats: int, check_elements: int,
               t0: float) -> MeasureResult:
  """Time one built candidate (:func:`build_plain`'s data) on ``driver``'s GPU: a run checked against the CPU
  simulator when the outputs have at most ``check_elements`` elements, then CUDA events with the L2 flushed
  until ``min_total_s`` of kernel time (the median). A lost GPU context raises :class:`MeasureError`."""
  import numpy as np
  from minicomp.codegen.driver import DriverError
  from minicomp.codegen.gpu_runtime import GpuModule, run_plan, time_plan
  from minicomp.codegen.kernel import Kernel, random_input
  from minicomp.ir.ops import NP_DTYPE
  from minicomp.target import as_target
  plan, source, binary, target = built
  try:
    kern = Kernel(plan, source, binary, as_target(target))
    rng = np.random.default_rng(0)
    args = [random_input(rng, b.shape, b.dtype) for b in plan.inputs]
    mod = GpuModule(binary, driver)
    if sum(int(np.prod(b.shape)) for b in plan.outputs) <= check_elements:
      ref = kern.run(args, device="cpu")
      got = [np.empty(b.shape, NP_DTYPE[b.dtype]) for b in plan.outputs]
      run_plan(mod, plan, args, got)
      if not results_agree(got, ref, rtol=1e-3, atol=1e-3):
        return MeasureResult(None, ErrorKind.WRONG_RESULT, "GPU result differs from the CPU simulator", False)
    times = time_plan(mod, plan, args, min_total_s, max_repeats)
    return MeasureResult(float(np.median(times)), ErrorKind.NONE, "", False,
                         {"min_s": float(min(times)), "repeats": len(times)}, time.perf_counter() - t0)
  except DriverError as e:
    if e.sticky:
      raise MeasureError(f"GPUMeasurer: the GPU context is lost after candidate {inp.key or '?'} ({e}); "
                         "restart the process to go on (the tuning log keeps what was measured)") from e
    return MeasureResult(None, ErrorKind.LAUNCH, str(e), False, {}, time.perf_counter() - t0)
  except Exception as e:   # any other failure of one candidate is recorded (its kind, its text): the run goes on
    return _failure(e, t0)


def build_or_failure(inp: MeasureInput) -> tuple | MeasureResult:
  """:func:`build_plain` for a worker whose result feeds another task: a failed build is a result, not an
  exception."""
  t0 = time.perf_counter()
  try:
    return build_plain(inp)
  except Exception as e:
    return _failure(e, t0)


def time_on_gpu(built: tuple | MeasureResult, inp: MeasureInput, min_total_s: float, max_repeats: int,
                check_elements: int) -> MeasureResult:
  """A cluster worker's GPU measurement of :func:`build_or_failure`'s output, on its process's GPU driver."""
  import platform
  from minicomp.codegen.driver import NoGPUError, get_driver
  if isinstance(built, MeasureResult): return built
  try:
    driver = get_driver()
  except NoGPUError as e:
    raise MeasureError(f"node {platform.node()} offers a GPU to the cluster but has none usable: {e}") from None
  return time_built(built, inp, driver, min_total_s, max_repeats, check_elements, time.perf_counter())
