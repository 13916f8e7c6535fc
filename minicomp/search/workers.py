"""The worker processes that measurers build and estimate candidates in, started once per process.

A measurer given no executor runs its candidates in a local process pool whose workers start fresh
("spawn": forking a process that runs JAX or pycuda threads can deadlock) and exit when this process
dies, however it dies (no orphans after a kill). Starting such a pool costs seconds: every worker
imports minicomp and starts its NVRTC child (3-5 s for two workers on a 2-core machine). So the pool
is shared: :func:`shared_pool` starts it on first use and every later measurer without an executor
(each ``compile(trials=...)``, ``tune``, ``with StaticMeasurer()``) reuses it, warm, its workers'
in-memory NVRTC caches included.

A spawned worker copies the parent's environment, ``sys.path``, working directory and main script
when it starts, and never sees later changes. So a pool started under a different one of these is
replaced, not reused (``PYTEST_CURRENT_TEST``, which pytest changes for every test, excepted). A
pool whose workers died is replaced too, and :func:`restart_pool` replaces one on purpose (stuck
workers). One pool per worker count lives at a time (and one more whose workers skip the main script,
:func:`work_pool`); :func:`shutdown_pools` stops them, and runs at
exit (a pool still held when Python tears its modules down makes concurrent.futures print an ignored
``AttributeError`` as the script ends).
"""
from __future__ import annotations

import atexit
import concurrent.futures as cf
import multiprocessing
import multiprocessing.context
import os
import signal
import sys
import threading
import time

_IGNORED_ENV = frozenset({"PYTEST_CURRENT_TEST"})
_pools: dict[tuple[int, bool], tuple[tuple, cf.ProcessPoolExecutor]] = {}   # (workers, main) -> (what they copied, pool)
_lock = threading.Lock()


def default_jobs() -> int:
  """Processes to run at once where the caller names none: ``$MINICOMP_JOBS``, else one per core (ValueError
  naming the variable when it is not a number)."""
  raw = os.environ.get("MINICOMP_JOBS", "").strip()
  try: return int(raw) if raw else (os.cpu_count() or 1)
  except ValueError: raise ValueError(f"MINICOMP_JOBS={raw!r} is not a number of processes") from None


def work_pool(workers: int | None = None) -> cf.ProcessPoolExecutor:
  """The shared pool for work that only minicomp's own functions do on minicomp's own objects (choosing a task's
  default schedule, analysing a kernel, building and estimating a candidate). Spawned workers re-import the main
  script by default: one whose work is not under ``if __name__ == "__main__":`` (the README's first script) would
  run again in every worker, and a guarded one still imports what it imports (onnx and ml_dtypes: 0.7 s a worker
  on 2 cores; torch: seconds). Since the work needs nothing from it, the workers skip it (:func:`shared_pool`
  ``main=False``), unless a sketch rule or schedule step is registered from outside minicomp, which workers that
  skip it would not know: they then import a script they can re-import, and :func:`own_work_pool` keeps the work
  of one they cannot in this process."""
  return shared_pool(workers, main=_main_needed()[0])


def own_work_pool(workers: int, doing: str) -> cf.ProcessPoolExecutor | None:
  """:func:`work_pool`, or None where the work must stay in this process (logged; ``doing`` names it): a script
  without the guard where a sketch rule or schedule step was registered from outside minicomp."""
  main, added = _main_needed()
  if added is not None:
    import logging
    logging.getLogger("minicomp").info("%s in this process: the script has no `if __name__ == \"__main__\":` "
                                       "guard, which worker processes need to see its %s", doing, added)
    return None
  return shared_pool(workers, main=main)


def share_work(items: list, workers: int, here, submit, done) -> tuple[list, BaseException | None]:
  """Run ``items`` (in their order: the longest first) in this process and in a pool, whichever is free taking the
  next: ``workers`` items at a time in the pool (a thread keeps them in flight, so a pool started for it spawns no
  more processes than that), the others here, so this process works instead of waiting. ``here(item)`` runs one here;
  ``submit(item)`` sends one to the pool (a future); ``done(item, result)`` takes a pool's result, in this thread.
  Where the pool breaks (a future failed with ``BrokenProcessPool``, or ``submit`` raised: a worker killed by the
  out-of-memory killer, say), what it held is run here and nothing more is sent to it. (the items it held, run here
  for that; the error that broke the pool)."""
  import collections

  from concurrent.futures.process import BrokenProcessPool

  from minicomp.progress import check_interrupt
  left, finished, failed = collections.deque(items), collections.deque(), []
  lock, stop = threading.Lock(), threading.Event()

  def take():
    with lock:
      return left.popleft() if left else None

  def feed() -> None:
    running: dict = {}
    try:
      while True:
        while len(running) < workers and not stop.is_set() and (item := take()) is not None:
          try:
            running[submit(item)] = item
          except BaseException:
            finished.append((item, None))
            raise
        if not running: return
        for f in cf.wait(running, return_when=cf.FIRST_COMPLETED)[0]:
          finished.append((running.pop(f), f))
          if isinstance(f.exception(), BrokenProcessPool): stop.set()      # (nothing more for a broken pool)
    except BaseException as e:        # (a pool that broke while submitting: what it held runs here)
      failed.append(e)
      finished.extend((item, None) for item in running.values())

  feeder = threading.Thread(target=feed, name="minicomp-share-work", daemon=True)
  feeder.start()
  broken, returned = None, []
  try:
    while True:
      while finished:
        item, f = finished.popleft()
        try:
          result, ok = (f.result(), True) if f is not None else (None, False)
        except BrokenProcessPool as e:
          broken, result, ok = broken or e, None, False
        if not ok:                       # (a broken pool fails every future it had not finished: no more for it)
          stop.set()
          returned.append(item)
          with lock: left.appendleft(item)
          continue
        done(item, result)
      item = take()
      if item is not None: here(item)
      elif feeder.is_alive():
        check_interrupt()
        feeder.join(0.02)
      elif not finished: break
  finally:
    stop.set()
  return returned, broken or (failed[0] if failed else None)


def _main_needed() -> tuple[bool, str | None]:
  """(whether :func:`work_pool`'s workers import the main script, and the sketch rule or step registered from
  outside minicomp where they must but the script has no guard): only where such a rule or step is registered."""
  added = _added_outside()
  if added is None: return False, None
  return True, None if _main_reimportable() else added


def _main_reimportable() -> bool:
  """Can spawned workers re-import the main script without running its work: interactive, ``-c``, ``-m``, or a
  script that guards its work with ``if __name__ == "__main__":``."""
  main = sys.modules.get("__main__")
  path = getattr(main, "__file__", None)
  if path is None or getattr(main, "__spec__", None) is not None: return True
  try:
    with open(path, errors="replace") as f: text = f.read()
  except OSError:
    return False
  return "__name__" in text and "__main__" in text


def _added_outside() -> str | None:
  """A registered sketch rule or schedule step (``sketch.register_rule``, ``steps.register``) defined outside
  minicomp, by the main script or a module it imported: what a worker that skips the script would not have."""
  from minicomp.ir.steps import STEP_TYPES
  from minicomp.search.sketch_rules import DEFAULT_RULES
  for what, classes in (("sketch rule", [type(r) for r in DEFAULT_RULES]), ("schedule step", STEP_TYPES.values())):
    for c in classes:
      if c.__module__.partition(".")[0] != "minicomp":
        return f"{what} {c.__name__}" + ("" if c.__module__ == "__main__" else f" (module {c.__module__})")
  return None


def process_pool(workers: int | None = None, main: bool = True) -> cf.ProcessPoolExecutor:
  """A new local pool of ``workers`` spawn workers (default one per core), not shared; with ``main=False`` workers
  that do not re-import the main script (:class:`_MainFreeProcess`)."""
  return cf.ProcessPoolExecutor(max_workers=workers or os.cpu_count() or 1,
                                mp_context=_QuietSpawn() if main else _MainFreeSpawn(),
                                initializer=_worker_init, initargs=(os.getpid(),))


class _QuietProcess(multiprocessing.context.SpawnProcess):
  """A spawned worker that ignores SIGINT from its first instruction: the terminal's Ctrl-C goes to the whole
  process group, and workers that took it (often while still importing minicomp) printed tracebacks while
  the parent ended the run. An ignored signal stays ignored across exec, and Python keeps it so."""

  def start(self) -> None:
    if threading.current_thread() is not threading.main_thread():   # (only the main thread may set handlers)
      return super().start()
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
      super().start()
    finally:
      signal.signal(signal.SIGINT, old)


class _QuietSpawn(multiprocessing.context.SpawnContext):
  Process = _QuietProcess


_MAIN_FREE = "minicomp-main-free-"    # the name of a worker that does not re-import the main script


class _MainFreeProcess(_QuietProcess):
  """A quiet worker that does not run the main script when it starts. multiprocessing's spawn tells a child to
  re-import the parent's ``__main__`` in the data it prepares for the child's name
  (``multiprocessing.spawn.get_preparation_data``); :func:`_skip_main_for_main_free` drops that for this
  class's names only, so every other process anyone starts is prepared as before."""

  def __init__(self, *args, **kwargs):
    super().__init__(*args, **kwargs)
    self.name = _MAIN_FREE + self.name

  def start(self) -> None:
    _skip_main_for_main_free()
    super().start()


class _MainFreeSpawn(multiprocessing.context.SpawnContext):
  Process = _MainFreeProcess


def _skip_main_for_main_free() -> None:
  """Wrap ``multiprocessing.spawn.get_preparation_data`` (once) to leave the main script out of what a
  :class:`_MainFreeProcess` is told to import."""
  from multiprocessing import spawn
  if getattr(spawn.get_preparation_data, "minicomp_main_free", False): return
  prepare = spawn.get_preparation_data

  def preparation_data(name):
    data = prepare(name)
    if str(name).startswith(_MAIN_FREE):
      data.pop("init_main_from_path", None)
      data.pop("init_main_from_name", None)
    return data
  preparation_data.minicomp_main_free = True
  spawn.get_preparation_data = preparation_data


def _worker_init(parent_pid: int) -> None:
  """A worker exits with its parent."""
  from minicomp.codegen.nvrtc_worker import exit_with_parent
  exit_with_parent(parent_pid)


def ping() -> int:
  """A no-op task: a pool that runs it has workers that start."""
  return os.getpid()


def _inherited(main: bool = True) -> tuple:
  """What a spawned worker copies from this process when it starts (the main script unless ``main`` is False)."""
  main = getattr(sys.modules.get("__main__"), "__file__", None) if main else None
  env = tuple(sorted((k, v) for k, v in os.environ.items() if k not in _IGNORED_ENV))
  try: cwd = os.getcwd()
  except OSError: cwd = None                      # the working directory was deleted
  return env, tuple(sys.path), cwd, main


def _usable(pool: cf.ProcessPoolExecutor) -> bool:
  return not (getattr(pool, "_broken", False) or getattr(pool, "_shutdown_thread", False))


def shared_pool(workers: int | None = None, main: bool = True) -> cf.ProcessPoolExecutor:
  """The process-wide pool of ``workers`` workers (default one per core): started on first use, then
  reused while its workers live and this process's environment, ``sys.path``, working directory and
  main script stay what they were when it started; else stopped and replaced. ``main=False``: a pool of its
  own whose workers do not import the main script (:func:`work_pool`)."""
  key = (workers or os.cpu_count() or 1, main)
  now = _inherited(main)
  with _lock:
    held = _pools.get(key)
    if held is not None and held[0] == now and _usable(held[1]):
      return held[1]
    if held is not None:
      _stop(held[1], kill=not _usable(held[1]))
    pool = process_pool(key[0], main)
    _pools[key] = (now, pool)
    return pool


def restart_pool(pool: cf.ProcessPoolExecutor, workers: int | None = None) -> cf.ProcessPoolExecutor:
  """Kill ``pool``'s workers (stuck or dead ones included) and return a fresh shared pool of its kind in its place."""
  with _lock:
    key = next((k for k, (_, p) in _pools.items() if p is pool), None)
    if key is not None: del _pools[key]
  _stop(pool, kill=True)
  return shared_pool(*key) if key is not None else work_pool(workers)


def shutdown_pools() -> None:
  """Stop every shared pool (idle workers exit; a later measurer starts a new pool)."""
  with _lock:
    held = list(_pools.values())
    _pools.clear()
  for _, pool in held:
    _stop(pool, kill=False)


def _stop(pool: cf.ProcessPoolExecutor, kill: bool) -> None:
  """Shut ``pool`` down without waiting; with ``kill``, terminate its workers (a stuck one would
  otherwise finish its candidate first, for minutes on the slow static-model paths)."""
  procs = list((getattr(pool, "_processes", None) or {}).values())
  pool.shutdown(wait=False, cancel_futures=True)
  if kill:
    for p in procs:
      if p.is_alive(): p.terminate()
    _reap(procs)


def _reap(procs: list, seconds: float = 5.0) -> None:
  """Wait for terminated workers to end, SIGKILL any still alive after ``seconds``. The pool's own manager thread,
  woken by the shutdown, joins the same workers: when it reaps one first, this thread's ``join`` returns at once
  and ``is_alive`` reads True until that thread records the exit code (multiprocessing's poll takes waitpid's
  ECHILD for "still running"; tests/test_workers.py's restart test failed every other run on 2 cores so), so
  each is polled to the deadline."""
  deadline = time.monotonic() + seconds
  for p in procs:
    while p.is_alive() and time.monotonic() < deadline: p.join(timeout=0.05)
    if p.is_alive():
      p.kill()
      p.join(timeout=1)


atexit.register(shutdown_pools)
