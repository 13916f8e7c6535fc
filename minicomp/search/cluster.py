"""Tuning on a Ray cluster: the cluster is an executor; the task scheduler and the strategies do not change.

``compile(..., trials=N, cluster=ADDRESS)`` and ``minicomp tune --cluster ADDRESS`` connect to a running Ray
cluster (``ray://HOST:PORT``: its Ray Client server, from any machine; ``HOST:PORT``: its GCS, from a driver
on one of its nodes; ``"auto"``: the cluster started last on this machine) and measure the candidates there:

* a **static-model** measurement is one CPU task (replay, lower, emit, NVRTC, estimate) on any node;
* a **GPU** measurement is a CPU task that builds (anywhere), then a task that asks for one GPU and the
  target's arch as a custom resource (``sm_90``) and times the binary, so a candidate built for sm_90 is timed
  only on an sm_90 GPU. Such a node is started with ``ray start --address HEAD --num-gpus 1 --resources
  '{"sm_90": 1}'``.

The driver (this process) is the only writer of the tuning log. Workers are stateless: they receive plain
data (the task's DAG, the schedule steps as JSON, the target; for timing the launch plan, CUDA source and
binary) and return a :class:`~minicomp.search.measure.MeasureResult`; the search state never leaves the driver.

Faults: a task whose worker or node dies is run again once by Ray (on a node still alive); a second death
makes it a failed record of kind ``"worker lost"`` that says what died, and the run goes on with the nodes
left (a warning names how many). A driver killed with -9 resumes from the log as any run does. Before any
candidate is measured, :meth:`Cluster.check` makes sure that every node answers, runs the driver's minicomp
(same code digest) and estimates with the same static-model calibration: a node that differed would give
another cost for the same program.
"""
from __future__ import annotations

import concurrent.futures as cf
import contextlib
import logging
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence

from minicomp.errors import ClusterError, MeasureError, MissingDependencyError, WorkerLostError
from minicomp.search.measure import (ErrorKind, MeasureInput, MeasureResult, Measurer, StaticMeasurer, build_or_failure,
                                     time_on_gpu)

log = logging.getLogger("minicomp")
CONNECT_TIMEOUT_S = 5.0        # an address that does not answer a TCP connect in this time is unreachable
CLIENT_ATTEMPTS = 3            # ray:// connections asked again when the client server fails to start
CHECK_TIMEOUT_S = 120.0        # every node must run a first task (a worker starts, imports minicomp) in this time
RETRIES = 1                    # Ray runs a task whose worker died once more
START_HINT = "start one with `ray start --head` (docs/cluster.md)"


def _ray():
  try:
    import ray
  except ImportError:
    raise MissingDependencyError("tuning on a cluster needs Ray: pip install 'minicomp[cluster]'") from None
  return ray


def _host_port(address: str) -> tuple[str, int] | None:
  """(host, port) of ``ray://HOST:PORT`` or ``HOST:PORT``; None for ``auto``; a ClusterError for anything else."""
  if address == "auto": return None
  rest = address[len("ray://"):] if address.startswith("ray://") else address
  host, sep, port = rest.rpartition(":")
  if not sep or not host or not port.isdigit():
    raise ClusterError(f"cluster address {address!r}: expected 'ray://HOST:PORT', 'HOST:PORT' or 'auto'")
  return host, int(port)


def connect(address: str = "auto", setup: str | None = None) -> Cluster:
  """Connect this process to the Ray cluster at ``address`` as its driver. ``setup``: a function's import path
  (``"mypkg.hooks.setup"``) every worker runs when it starts (Ray's ``worker_process_setup_hook``).

  Raises :class:`ClusterError` at once for an address that does not answer (no tuning budget is spent) and
  :class:`~minicomp.errors.MissingDependencyError` without Ray. A process already connected (``ray.init``
  called by the user) is used as it is."""
  ray = _ray()
  if ray.is_initialized(): return Cluster(address, ray, owned=False)
  hp = _host_port(address)
  if hp is not None:
    try:
      socket.create_connection(hp, timeout=CONNECT_TIMEOUT_S).close()
    except OSError as e:
      raise ClusterError(f"cannot reach the Ray cluster at {address} ({e.strerror or type(e).__name__}); "
                         f"{START_HINT}") from None
  for attempt in range(CLIENT_ATTEMPTS):
    try:
      ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False, namespace="minicomp",
               runtime_env={"worker_process_setup_hook": setup} if setup else None)
      break
    except Exception as e:   # ConnectionError (no cluster for "auto"), a version mismatch, ...
      # Ray Client's server starts a process per client; on a loaded head it can miss its start-up deadline
      # ("Initialization failure from server"): asked again, it usually comes up
      if isinstance(e, ConnectionAbortedError) and attempt + 1 < CLIENT_ATTEMPTS:
        time.sleep(2.0)
        continue
      raise ClusterError(f"cannot connect to the Ray cluster at {address}: {type(e).__name__}: {_first_line(e)}; "
                         f"{START_HINT}") from None
  return Cluster(address, ray, owned=True)


@contextlib.contextmanager
def connected(cluster):
  """``cluster`` as a :class:`Cluster` for the block: an address is connected to (and disconnected after), a
  Cluster is used as it is, None stays None."""
  if cluster is None or isinstance(cluster, Cluster):
    yield cluster
    return
  with connect(cluster) as c:
    yield c


def _node_facts(arch: str) -> dict:
  """What must agree between the driver and every node (run on the node)."""
  import platform
  from minicomp.schedule_cache import code_version
  from minicomp.search.static.calibration import active
  from minicomp.target import as_target
  cal = active(as_target(arch))
  return {"host": platform.node(), "code": code_version(), "calibration": cal.digest if cal else "uncalibrated"}


class Cluster:
  """A connected Ray cluster: executors on it, the measurer of a tuning run, its nodes and throughput."""

  def __init__(self, address: str, ray, owned: bool):
    self.address, self.ray, self.owned = address, ray, owned
    self._executors: list[RayExecutor] = []
    self._measuring: list[RayExecutor] = []
    self._nodes_seen = self._alive = len(self.alive_nodes())

  def alive_nodes(self) -> list[dict]:
    return [n for n in self.ray.nodes() if n.get("Alive")]

  def gpu_nodes(self, arch: str) -> list[dict]:
    """Alive nodes that offer a GPU and ``arch`` as a resource."""
    return [n for n in self.alive_nodes() if n["Resources"].get("GPU", 0) >= 1 and n["Resources"].get(arch, 0) >= 1]

  def check(self, arch: str) -> None:
    """Every alive node runs a task within CHECK_TIMEOUT_S, with the driver's minicomp code and calibration for
    ``arch``: else a ClusterError naming the node (before any candidate is measured)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    ray = self.ray
    mine = _node_facts(arch)
    facts = ray.remote(num_cpus=0, max_retries=0)(_node_facts)
    nodes = self.alive_nodes()
    if not nodes: raise ClusterError(f"the Ray cluster at {self.address} has no alive node")
    refs = {facts.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote(arch):
            n for n in nodes}
    ready, late = ray.wait(list(refs), num_returns=len(refs), timeout=CHECK_TIMEOUT_S)
    if late:
      raise ClusterError(f"node {_name(refs[late[0]])} of the Ray cluster at {self.address} did not run a task "
                         f"within {CHECK_TIMEOUT_S:.0f} s")
    for ref in ready:
      n = refs[ref]
      try:
        got = ray.get(ref)
      except Exception as e:
        raise ClusterError(f"node {_name(n)} cannot run minicomp ({type(e).__name__}: {_first_line(e)}): install the "
                           "driver's minicomp on every node (docs/cluster.md)") from None
      if got["code"] != mine["code"]:
        raise ClusterError(f"node {_name(n)} ({got['host']}) runs other minicomp code (digest {got['code']}, the "
                           f"driver's {mine['code']}): install the same version on every node")
      if got["calibration"] != mine["calibration"]:
        raise ClusterError(f"node {_name(n)} ({got['host']}) estimates with static-model calibration "
                           f"{got['calibration']} for {arch}, the driver with {mine['calibration']}: copy the "
                           "driver's calibration file to it, or set MINICOMP_STATIC_MODEL alike (docs/cluster.md)")

  def executor(self, num_cpus: float = 1, num_gpus: float = 0, resources: dict | None = None,
               measures: bool = True) -> RayExecutor:
    """A ``concurrent.futures.Executor`` whose tasks each ask the cluster for these resources; ``measures``: each
    of its tasks is one candidate measured (what :meth:`status` counts; a GPU measurement's builds are not)."""
    ex = RayExecutor(self.ray, num_cpus, num_gpus, resources)
    self._executors.append(ex)
    if measures: self._measuring.append(ex)
    return ex

  def measurer(self, is_estimate: bool, arch: str) -> Measurer:
    """The measurer of a tuning run for ``arch``: the static model on CPU tasks, or builds on CPU tasks and
    timings on the nodes with a GPU and the ``arch`` resource (checked: a ClusterError when there is none)."""
    self.check(arch)
    if is_estimate: return StaticMeasurer(executor=self.executor())
    return ClusterGPUMeasurer(self, arch)

  def watch(self) -> int:
    """The number of alive nodes; when it fell since the last look, a warning says so (the run goes on)."""
    alive = len(self.alive_nodes())
    if alive < self._alive:
      log.warning("cluster: %d node(s) lost, %d left; their candidates in flight run again once on the nodes left",
                  self._alive - alive, alive)
    self._nodes_seen = max(self._nodes_seen, alive)
    self._alive = alive
    return alive

  def status(self) -> str:
    """``"2/2 nodes, 41 candidates/min"``: alive nodes of those seen, and the candidates measured per minute."""
    alive = self.watch()
    done = sum(ex.completed for ex in self._measuring)
    starts = [ex.started for ex in self._measuring if ex.started is not None]
    rate = done * 60.0 / max(1e-9, time.monotonic() - min(starts)) if starts else 0.0
    return f"{alive}/{self._nodes_seen} nodes, {rate:.0f} candidates/min"

  def tasks_per_node(self) -> Counter:
    """Completed tasks by node id (over every executor of this cluster)."""
    out: Counter = Counter()
    for ex in self._executors: out.update(ex.per_node)
    return out

  def close(self) -> None:
    """Disconnect, when :func:`connect` connected this process (a connection the user made stays)."""
    if self.owned and self.ray.is_initialized(): self.ray.shutdown()

  def __enter__(self): return self
  def __exit__(self, *exc): self.close()


def _name(node: dict) -> str:
  return f"{node.get('NodeManagerAddress', '?')}:{node.get('NodeManagerPort', '?')} ({node['NodeID'][:8]})"


def _first_line(e: BaseException) -> str:
  text = str(e).strip()
  return text.splitlines()[0] if text else ""


def _on_node(fn, chained: tuple[int, ...], *args, **kwargs):
  """Run ``fn`` on a worker: (the node's id, its result). The arguments at positions ``chained`` were futures of
  this executor: Ray has resolved them to their (node, result) pairs; ``fn`` gets the results."""
  import ray
  args = tuple(a[1] if i in chained else a for i, a in enumerate(args))
  return ray.get_runtime_context().get_node_id(), fn(*args, **kwargs)


class _RayFuture(cf.Future):
  """A ``concurrent.futures.Future`` of one Ray task; ``cancel`` cancels the task too (and kills a worker stuck
  in it, which would hold its CPU)."""

  def __init__(self, ref, ray):
    super().__init__()
    self.ref, self._ray = ref, ray

  def cancel(self) -> bool:
    if self.done(): return False
    try:
      self._ray.cancel(self.ref, force=True)
    except Exception:    # finished meanwhile, or the cluster is gone: nothing to stop
      pass
    return super().cancel()


class RayExecutor(cf.Executor):
  """``submit(fn, *args)`` runs ``fn`` as a Ray task asking for ``num_cpus`` / ``num_gpus`` / ``resources``; a
  future passed as an argument is handed to Ray, which runs the task when its value is ready (a dependent
  task: the value does not travel through the driver). A worker that dies is replaced and its task run again
  once (``RETRIES``); a second death fails the future with :class:`~minicomp.errors.WorkerLostError`; an
  exception raised by ``fn`` itself comes back as it was raised."""

  def __init__(self, ray, num_cpus: float = 1, num_gpus: float = 0, resources: dict | None = None):
    self._ray = ray
    self._remote = ray.remote(num_cpus=num_cpus, num_gpus=num_gpus, resources=resources or None,
                              max_retries=RETRIES, retry_exceptions=False)(_on_node)
    self._lock = threading.Lock()
    self._closed = False
    self.completed, self.started = 0, None
    self.per_node: Counter = Counter()

  def submit(self, fn, /, *args, **kwargs) -> cf.Future:
    if self._closed: raise RuntimeError("cannot schedule new futures after shutdown")
    chained = tuple(i for i, a in enumerate(args) if isinstance(a, _RayFuture))
    args = tuple(a.ref if isinstance(a, _RayFuture) else a for a in args)
    if self.started is None: self.started = time.monotonic()
    ref = self._remote.remote(fn, chained, *args, **kwargs)
    fut = _RayFuture(ref, self._ray)
    ref.future().add_done_callback(lambda rf: self._finish(fut, rf))
    return fut

  def _finish(self, fut: _RayFuture, rf: cf.Future) -> None:
    ray = self._ray
    try:
      node, value = rf.result()
      with self._lock:
        self.completed += 1
        self.per_node[node] += 1
      outcome = ("result", value)
    except ray.exceptions.TaskCancelledError:
      outcome = ("cancel", None)
    except ray.exceptions.RayTaskError as e:     # raised by fn: hand back what it raised
      cause = getattr(e, "cause", None)
      outcome = ("error", cause if isinstance(cause, BaseException) else e)
    except (ray.exceptions.RayError, cf.CancelledError) as e:   # the worker or its node died, twice
      outcome = ("error", WorkerLostError(f"the Ray worker measuring it died, and again on its retry "
                                          f"({type(e).__name__}: {_first_line(e)})"))
    try:
      if outcome[0] == "result": fut.set_result(outcome[1])
      elif outcome[0] == "error": fut.set_exception(outcome[1])
      elif not fut.cancelled(): fut.cancel()
    except cf.InvalidStateError:                  # cancelled by the caller meanwhile
      pass

  def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
    """No more submissions (the cluster's workers are not this executor's to stop)."""
    self._closed = True


class ClusterGPUMeasurer(Measurer):
  """GPU timings on the cluster: each candidate is built by a CPU task anywhere, then timed (as
  :class:`~minicomp.search.measure.GPUMeasurer` times, checked against the CPU simulator first) by a task asking
  for one GPU and the ``arch`` resource. Results come as they finish; a lost GPU context stops the run
  (``MeasureError``), as it does on one machine."""
  is_estimate = False

  def __init__(self, cluster: Cluster, arch: str, min_total_s: float = 0.1, max_repeats: int = 1000,
               timeout_s: float = 120.0, check_elements: int = 1 << 16):
    if not cluster.gpu_nodes(arch):
      raise ClusterError(f"no alive node of the Ray cluster at {cluster.address} offers a GPU with the resource "
                         f"{arch!r}: start one with `ray start --address HEAD --num-gpus 1 --resources "
                         f"'{{\"{arch}\": 1}}'` (docs/cluster.md), or tune with measurer='static'")
    self.builds = cluster.executor(num_cpus=1, measures=False)
    self.timings = cluster.executor(num_cpus=0, num_gpus=1, resources={arch: 1})
    self.settings = (min_total_s, max_repeats, check_elements)
    self.timeout_s = timeout_s

  def measure(self, inputs: Sequence[MeasureInput]) -> list[MeasureResult]: return self._in_order(inputs)

  def measure_iter(self, inputs: Sequence[MeasureInput]) -> Iterator[tuple[int, MeasureResult]]:
    futs = {self.timings.submit(time_on_gpu, self.builds.submit(build_or_failure, inp), inp, *self.settings): i
            for i, inp in enumerate(inputs)}
    try:
      while futs:
        done, _ = cf.wait(futs, timeout=self.timeout_s, return_when=cf.FIRST_COMPLETED)
        if not done:                  # nothing finished for timeout_s: what is left is stuck
          for f in list(futs):
            f.cancel()
            yield futs.pop(f), MeasureResult(None, ErrorKind.TIMEOUT, f"no result within {self.timeout_s} s", False)
          continue
        for f in done:
          i = futs.pop(f)
          try:
            yield i, f.result()
          except WorkerLostError as e:
            yield i, MeasureResult(None, ErrorKind.LOST, str(e), False)
          except MeasureError:
            raise
          except Exception as e:      # e.g. an input that does not pickle
            yield i, MeasureResult(None, ErrorKind.INTERNAL, f"worker failed: {type(e).__name__}: {e}", False)
    finally:                          # the caller stopped early: the cluster must not measure the rest
      for f in futs: f.cancel()
