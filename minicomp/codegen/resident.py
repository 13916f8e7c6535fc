"""A compiled model kept on the GPU: :class:`DeviceSession`, and its timings (:class:`BenchmarkResult`).

On the first GPU run of a :class:`~minicomp.compiled_model.CompiledModel` a session is opened
for that backend and kept by the model:

* weights and folded constants are uploaded once;
* the planned intermediate pool (``CompiledModel.pool_bytes``, slots reused by lifetime), each
  kernel's global temporaries, the graph inputs and the graph outputs get device buffers once;
* every kernel call is resolved to (function, grid, block, device pointers) once, so a run is:
  copy the inputs up, queue every launch on one stream (no synchronisation between kernels),
  copy the outputs down, synchronise once;
* with ``cuda_graph=True`` the launch sequence is captured into a CUDA graph on first use and
  replayed (one launch call per run: small models are launch-bound).

The session frees all of it when the model is dropped (or on :meth:`DeviceSession.close`).
"""
from __future__ import annotations

import datetime
import statistics
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from minicomp.codegen.driver import Driver, DriverError
from minicomp.codegen.gpu_runtime import GpuDelay, L2Flush, free_all, launch_failed, nbytes
from minicomp.ir.ops import NP_DTYPE
from minicomp.model_parts import ViewStep

# the per-call timing's delay (DeviceSession._per_launch): its first length (~0.1 ms at 2 GHz), the most it grows to
# (~1 s), and the runs tried a repetition before its launches are taken as they came
DELAY_START_CYCLES = 200_000
DELAY_MAX_CYCLES = 2_000_000_000
DELAY_TRIES = 4


def _release(driver: Driver, ptrs: list[int], graphs: list) -> None:
  for g in graphs:
    try: driver.graph_destroy(g)
    except Exception: pass   # releasing: the context may be gone (interpreter exit, a failed launch)
  graphs.clear()
  free_all(driver, ptrs)
  ptrs.clear()


@dataclass
class _Launch:
  fn: object
  grid: tuple[int, int, int]
  block: tuple[int, int, int]
  shared_bytes: int  # dynamic shared memory
  args: list[int]
  call: int          # index of the kernel call in CompiledModel.calls
  what: str          # for error messages


class DeviceSession:
  """The device-resident state of one CompiledModel on one GPU backend (see the module docstring)."""

  def __init__(self, model, driver: Driver):
    self.driver, self.model = driver, weakref.proxy(model)
    self._ptrs: list[int] = []
    self._graphs: list = []
    self._finalizer = weakref.finalize(self, _release, driver, self._ptrs, self._graphs)
    self._lock = threading.Lock()
    self.stream = driver.stream()
    self.uploaded_bytes = 0
    try:
      self._build(model)
    except BaseException:
      self.close()
      raise

  def _alloc(self, n: int) -> int:
    p = self.driver.alloc(n)
    self._ptrs.append(p)
    return p

  def _upload(self, a: np.ndarray) -> int:
    a = np.ascontiguousarray(a)
    p = self._alloc(a.nbytes)
    self.driver.htod(p, a, self.stream)
    self.uploaded_bytes += a.nbytes
    return p

  def _build(self, m) -> None:
    drv = self.driver
    weights = {n: self._upload(w) for n, w in m.weights.items()}
    addr: dict[str, int] = {n: self._upload(c) for n, c in m.consts.items()}     # value -> device pointer
    shape: dict[str, tuple[tuple[int, ...], str]] = {n: (c.shape, np.dtype(c.dtype).name) for n, c in m.consts.items()}
    self.inputs = []
    for i in m.inputs:
      addr[i.name] = self._alloc(nbytes(i.shape, m.kernel_dtype(i.name)))
      shape[i.name] = (tuple(i.shape), m.kernel_dtype(i.name))
      self.inputs.append((i.name, addr[i.name]))
    pool = [self._alloc(n) for n in m._slot_bytes]
    temps: dict[int, dict[str, int]] = {}
    self.launches: list[_Launch] = []
    modules = {}
    call = -1
    for st in m.steps:
      if isinstance(st, ViewStep):
        addr[st.dst] = addr[st.src]
        shape[st.dst] = (tuple(st.shape), shape[st.src][1])
        continue
      call += 1
      kern = m.kernels[st.kernel]
      plan = kern.plan
      if st.kernel not in modules: modules[st.kernel] = kern.gpu_module(drv.name)
      for v, b in zip(st.outputs, plan.outputs):
        addr[v] = pool[m._slot[v]] if v in m._slot else self._alloc(nbytes(b.shape, b.dtype))
        shape[v] = (tuple(b.shape), b.dtype)
      if st.kernel not in temps: temps[st.kernel] = {b.name: self._alloc(nbytes(b.shape, b.dtype)) for b in plan.temps}
      ptr = dict(temps[st.kernel])
      for (kind, n), b in zip(st.inputs, plan.inputs): ptr[b.name] = weights[n] if kind == "const" else addr[n]
      for v, b in zip(st.outputs, plan.outputs): ptr[b.name] = addr[v]
      mod = modules[st.kernel]
      for l in plan.launches:
        self.launches.append(_Launch(mod.function(l.kernel, l.shared_bytes), l.grid, l.block, l.shared_bytes,
                                     [ptr[n] for n in l.params], call,
                                     f"call {call} ({'+'.join(st.ops)}): {l.kernel}<<<{l.grid}, {l.block}>>>"))
    # graph outputs: read back from the device, or copied on the host when they are inputs / constants
    self.outputs = []
    host = {i.name for i in m.inputs} | set(m.consts)
    for o in m.output_names:
      r = m._root.get(o, o)
      self.outputs.append(("host" if r in host else "device", o, addr[o], *shape[o]))
    drv.sync(self.stream)

  # -- running
  def _queue(self, cuda_graph: bool) -> None:
    drv = self.driver
    if cuda_graph:
      if not self._graphs:
        drv.capture_begin(self.stream)
        try:
          self._launch_all()
        finally:
          graph = drv.capture_end(self.stream)
        self._graphs.append(graph)
      drv.graph_launch(self._graphs[0], self.stream)
    else:
      self._launch_all()

  def _launch_all(self, events: list | None = None) -> None:
    drv = self.driver
    for k, l in enumerate(self.launches):
      try:
        drv.launch(l.fn, l.grid, l.block, l.shared_bytes, l.args, self.stream)
      except DriverError as e:
        raise launch_failed(l.what, drv, e) from e
      if events is not None: drv.record(events[k + 1], self.stream)

  def _upload_feeds(self, feeds: Mapping[str, np.ndarray]) -> None:
    for name, p in self.inputs: self.driver.htod(p, feeds[name], self.stream)

  def run(self, feeds: Mapping[str, np.ndarray], cuda_graph: bool = False) -> list[np.ndarray]:
    """Inputs up, every launch queued (or the captured graph replayed), outputs down, one sync."""
    with self._lock:
      self._upload_feeds(feeds)
      self._queue(cuda_graph)
      outs = []
      for kind, name, p, shp, dt in self.outputs:
        if kind == "host":
          r = self.model._root.get(name, name)
          src = self.model.consts[r] if r in self.model.consts else feeds[r]
          outs.append(np.array(np.asarray(src).reshape(shp)))
          continue
        o = np.empty(shp, NP_DTYPE[dt])
        self.driver.dtoh(o, p, self.stream)
        outs.append(o)
      self.driver.sync(self.stream)
      return outs

  def benchmark(self, feeds: Mapping[str, np.ndarray], repeat: int, warmup: int, flush_l2: bool,
                cuda_graph: bool) -> "BenchmarkResult":
    """Per-kernel-call and end-to-end times with CUDA events (see CompiledModel.benchmark)."""
    drv = self.driver
    with self._lock:
      flush = L2Flush(drv)
      try:
        self._upload_feeds(feeds)
        for _ in range(warmup): self._queue(cuda_graph)
        drv.sync(self.stream)
        start, end = drv.event(), drv.event()
        total = []
        for _ in range(repeat):
          if flush_l2: flush(self.stream)
          drv.record(start, self.stream)
          self._queue(cuda_graph)
          drv.record(end, self.stream)
          total.append(drv.elapsed_s(start, end))
        per_launch, host_waits = self._per_launch(repeat, flush if flush_l2 else None)
      finally:
        flush.close()
    n_calls = len(self.model.calls)
    per_call = [[0.0] * repeat for _ in range(n_calls)]
    for l, ts in zip(self.launches, per_launch):
      for r, t in enumerate(ts): per_call[l.call][r] += t
    calls = [("+".join(c.ops), c.task, statistics.median(ts), min(ts)) for c, ts in zip(self.model.calls, per_call)]
    return BenchmarkResult(str(drv.info()), self.model.name, statistics.median(total), min(total), repeat,
                           flush_l2, cuda_graph, calls,
                           datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), host_waits)

  def _per_launch(self, repeat: int, flush) -> tuple[list[list[float]], int]:
    """Each launch's times over ``repeat`` runs (events between launches: a kernel sees the L2 the ones before it
    left), and how many runs' launches may have waited for the host. Python queues a launch in 5-10 us, longer than
    many kernels run: left alone, the GPU would drain the queue and each later event pair would time the host's
    launch call too (on an H200, 2026-11-30, BERT-tiny's first three calls measured 4.7 us and its later, like-sized
    ones 11-19 us: what a drained queue looks like). So a
    :class:`~minicomp.codegen.gpu_runtime.GpuDelay` holds the GPU back until every launch is queued, its length
    grown (at most :data:`DELAY_TRIES` times a run) until it outlasts the host's queueing."""
    drv = self.driver
    delay, held_from = GpuDelay(drv), drv.event()
    events = [drv.event() for _ in range(len(self.launches) + 1)]
    per_launch: list[list[float]] = [[] for _ in self.launches]
    cycles, last_held, grows, host_waits = DELAY_START_CYCLES, 0.0, True, 0
    for _ in range(repeat):
      for attempt in range(DELAY_TRIES):
        if flush is not None: flush(self.stream)
        drv.record(held_from, self.stream)
        delay(cycles, self.stream)
        t0 = time.perf_counter()
        drv.record(events[0], self.stream)
        self._launch_all(events)
        host_s = time.perf_counter() - t0
        drv.sync(self.stream)
        held_s = drv.elapsed_s(held_from, events[0])
        ok = host_s * 1.25 + 20e-6 < held_s
        # (a backend whose delay does not lengthen with its cycles, the fake GPU's: no use trying again)
        grows = grows and held_s > last_held * 1.1
        if ok or not grows or attempt == DELAY_TRIES - 1: break
        last_held = held_s
        cycles = min(DELAY_MAX_CYCLES, int(cycles * max(2.0, 1.5 * (host_s + 20e-6) / max(held_s, 1e-9))))
      host_waits += not ok
      for k in range(len(self.launches)): per_launch[k].append(drv.elapsed_s(events[k], events[k + 1]))
    return per_launch, host_waits

  def close(self) -> None:
    """Free every device buffer and graph of the session (also done when it is collected)."""
    self._finalizer()


@dataclass
class BenchmarkResult:
  """Measured GPU times of one model (CUDA events): end-to-end and per kernel call, in seconds."""
  device: str
  model: str
  median_s: float
  min_s: float
  repeat: int
  flush_l2: bool
  cuda_graph: bool
  calls: list = field(default_factory=list)   # (ops, task, median_s, min_s) per kernel call, launch order
  date: str = ""
  host_waits: int = 0   # runs whose per-call times may include the host's launch calls (the GPU waited for them)
  is_estimate: bool = False

  def __str__(self) -> str:
    how = (f"{self.repeat} runs, median (min); L2 {'flushed before each run' if self.flush_l2 else 'not flushed'}; "
           f"{'CUDA graph replay' if self.cuda_graph else 'stream launches'}")
    rows = [f"{self.model} on {self.device}, {self.date} (MEASURED with CUDA events; {how})",
            f"end to end: {self.median_s * 1e6:.1f} us ({self.min_s * 1e6:.1f} us)",
            f"  {'#':>3}  {'kernel call':<40} {'median us':>10} {'min us':>10} {'share':>6}"]
    tot = sum(c[2] for c in self.calls) or 1.0
    for k, (ops, _task, med, mn) in enumerate(self.calls):
      rows.append(f"  {k:3d}  {ops[:40]:<40} {med * 1e6:10.2f} {mn * 1e6:10.2f} {100 * med / tot:5.1f}%")
    rows.append(f"  sum of kernel medians: {tot * 1e6:.1f} us over {len(self.calls)} kernel calls")
    if self.host_waits:
      rows.append(f"  note: in {self.host_waits} of {self.repeat} runs the GPU may have waited for the host between "
                  "launches; those per-call times include the launch calls")
    return "\n".join(rows)
