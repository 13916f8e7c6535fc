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
workers). One pool per worker count lives at a time; :func:`shutdown_pools` stops them, and runs at
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

_IGNORED_ENV = frozenset({"PYTEST_CURRENT_TEST"})
_pools: dict[int, tuple[tuple, cf.ProcessPoolExecutor]] = {}    # workers -> (what the workers copied, pool)
_lock = threading.Lock()


def default_jobs() -> int:
  """Processes to run at once where the caller names none: ``$MINICOMP_JOBS``, else one per core (ValueError
  naming the variable when it is not a number)."""
  raw = os.environ.get("MINICOMP_JOBS", "").strip()
  try: return int(raw) if raw else (os.cpu_count() or 1)
  except ValueError: raise ValueError(f"MINICOMP_JOBS={raw!r} is not a number of processes") from None


def spawn_safe(doing: str = "working") -> bool:
  """Can worker processes start here? They re-import the main script: one whose work is not under
  ``if __name__ == "__main__":`` would run again in every worker (which cannot start processes). ``doing`` names
  what then stays in this process, in the log line."""
  main = sys.modules.get("__main__")
  path = getattr(main, "__file__", None)
  if path is None or getattr(main, "__spec__", None) is not None: return True   # interactive, -c, or -m
  try:
    with open(path, errors="replace") as f: text = f.read()
  except OSError:
    return False
  if "__name__" in text and "__main__" in text: return True
  import logging
  logging.getLogger("minicomp").info("%s in this process: the script %s has no `if __name__ == \"__main__\":` "
                                     "guard, which worker processes need (they re-import it)", doing, path)
  return False


def process_pool(workers: int | None = None) -> cf.ProcessPoolExecutor:
  """A new local pool of ``workers`` spawn workers (default one per core), not shared."""
  return cf.ProcessPoolExecutor(max_workers=workers or os.cpu_count() or 1, mp_context=_QuietSpawn(),
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


def _worker_init(parent_pid: int) -> None:
  """A worker exits with its parent."""
  from minicomp.codegen.nvrtc_worker import exit_with_parent
  exit_with_parent(parent_pid)


def ping() -> int:
  """A no-op task: a pool that runs it has workers that start."""
  return os.getpid()


def _inherited() -> tuple:
  """What a spawned worker copies from this process when it starts."""
  main = getattr(sys.modules.get("__main__"), "__file__", None)
  env = tuple(sorted((k, v) for k, v in os.environ.items() if k not in _IGNORED_ENV))
  try: cwd = os.getcwd()
  except OSError: cwd = None                      # the working directory was deleted
  return env, tuple(sys.path), cwd, main


def _usable(pool: cf.ProcessPoolExecutor) -> bool:
  return not (getattr(pool, "_broken", False) or getattr(pool, "_shutdown_thread", False))


def shared_pool(workers: int | None = None) -> cf.ProcessPoolExecutor:
  """The process-wide pool of ``workers`` workers (default one per core): started on first use, then
  reused while its workers live and this process's environment, ``sys.path``, working directory and
  main script stay what they were when it started; else stopped and replaced."""
  n = workers or os.cpu_count() or 1
  now = _inherited()
  with _lock:
    held = _pools.get(n)
    if held is not None and held[0] == now and _usable(held[1]):
      return held[1]
    if held is not None:
      _stop(held[1], kill=not _usable(held[1]))
    pool = process_pool(n)
    _pools[n] = (now, pool)
    return pool


def restart_pool(pool: cf.ProcessPoolExecutor, workers: int | None = None) -> cf.ProcessPoolExecutor:
  """Kill ``pool``'s workers (stuck or dead ones included) and return a fresh shared pool in its place."""
  n = workers or os.cpu_count() or 1
  with _lock:
    if n in _pools and _pools[n][1] is pool:
      del _pools[n]
  _stop(pool, kill=True)
  return shared_pool(n)


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
    for p in procs: p.join(timeout=5)


atexit.register(shutdown_pools)
