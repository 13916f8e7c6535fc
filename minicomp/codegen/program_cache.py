"""Lowered programs on disk, by schedule: what lets a compile from the schedule cache skip lowering too.

A second compile of a model takes every task's schedule from the schedule cache (minicomp/schedule_cache.py)
and its binaries from NVRTC's cache; what it still did was lower each schedule to its loop nest again
(ResNet-18 at 64x64: 0.57 of its 1.26 s on 2 cores, 2026-12-01). The loop nest is a function of the
task's DAG (its structure and its tensors' and axes' names, which the program's buffers and loops carry),
the schedule's steps, the kernel's name and minicomp's code, and the resource check of the target it was
lowered for (its arch and every limit); so :class:`minicomp.codegen.kernel.Builds` keeps every program it lowers
here under those and reads it back instead of lowering (in 0.3 ms).

``cache_dir("programs")/<code version>/<key>.pickle``, written atomically, governed by the schedule cache's
switch (``MINICOMP_SCHEDULE_CACHE=0`` turns both off): the two are one mechanism's halves. The files are
pickles of minicomp's own IR in the user's own cache folder (as NVRTC's binaries there are code the GPU
runs); one that does not read back is removed with a warning and the schedule lowered again.
"""
from __future__ import annotations

import logging
import pickle
import weakref

from minicomp.codegen.cache import (atomic_write, cache_dir, cache_key, clear_version_folders, switched_on,
                                    version_folders_info)

_log = logging.getLogger("minicomp")
KIND = "programs"
SWITCH = "MINICOMP_SCHEDULE_CACHE"


_dags: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()     # ComputeDAG -> its part of the key


def _dag_key(dag) -> str:
  """The DAG's structure (the workload key's text) and its tensors' and axes' names, digested once per DAG."""
  k = _dags.get(dag)
  if k is None:
    from minicomp.graph.tasks import dag_text
    names = ";".join(f"{t.name}:{','.join(a.name for a in (*t.axes, *t.reduce_axes))}" for t in dag.tensors)
    k = _dags[dag] = cache_key(dag_text(dag), names)
  return k


def key(schedule, steps_json: str, name: str, target) -> str:
  """What lowering ``schedule`` (its steps as ``steps_json``) under kernel name ``name`` depends on."""
  return cache_key(_dag_key(schedule.dag), steps_json, name, repr(target))     # (every limit it was checked against)


def _file(k: str):
  from minicomp.schedule_cache import code_version
  return cache_dir(KIND) / code_version() / f"{k}.pickle"


def get(k: str):
  """The program stored under ``k``, or None (none there, the cache off, or a file that does not read back)."""
  if not switched_on(SWITCH): return None
  from minicomp.ir.loop import Program
  f = _file(k)
  try: data = f.read_bytes()
  except OSError: return None
  try:
    prog = pickle.loads(data)
    if not isinstance(prog, Program): raise TypeError(f"holds a {type(prog).__name__}, not a Program")
    return prog
  except Exception as e:      # (a truncated or foreign pickle raises anything unpickling can)
    _log.warning("the cached program %s does not read back (%s: %s): removed, the schedule is lowered again", f,
                 type(e).__name__, str(e)[:200])
    f.unlink(missing_ok=True)
    return None


def put(k: str, prog) -> None:
  """Keep ``prog`` under ``k`` (where it is not there yet); a full or read-only cache folder costs time only."""
  if not switched_on(SWITCH): return
  try:
    f = _file(k)
    if not f.exists(): atomic_write(f, pickle.dumps(prog, protocol=pickle.HIGHEST_PROTOCOL))
  except OSError as e:
    _log.info("could not store a lowered program in the cache (%s)", e.strerror or e)
  except (pickle.PicklingError, TypeError, AttributeError, RecursionError) as e:   # (what does not pickle; a chain
    # of expressions too deep for pickle's recursion)
    _log.info("a lowered program could not be stored (%s)", e)


def info() -> str:
  """What ``minicomp cache info`` prints of it: the folder, and per code version its programs and size."""
  from minicomp.schedule_cache import code_version
  return version_folders_info(KIND, "lowered programs", "*.pickle", "programs", SWITCH, code_version())


def clear() -> int:
  """Remove every stored program; returns how many files went."""
  return clear_version_folders(KIND, "*.pickle")
