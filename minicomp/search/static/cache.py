"""The static model's per-kernel analysis cache: launch facts by kernel source, launches and device.

The analyses behind an estimate (PTX instruction counts, islpy data movement, occupancy) depend only
on the kernel's CUDA source (which fixes its loop IR, shapes and index math), the arch it was built
for (the PTX), its launch configuration and the device the estimate is for. A model whose calls share
a kernel, a search that meets a program twice, or ``mod.estimate()`` asked again, reuse the facts.

The cache lives in memory (the :data:`CACHE_SIZE` most recently used kernels, LRU) and on disk:
``cache_dir("static")/<code version>/``, one small JSON file per kernel and device, written atomically
(``MINICOMP_STATIC_CACHE=0`` turns the disk off). The code version is a digest of minicomp's source
(:func:`minicomp.schedule_cache.code_version`), so an analysis another minicomp wrote is never read. On disk
it is what lets a second compile of a model save and estimate it without analysing its kernels again (the
schedule cache skips the choosing, which is where a first compile analyses them): ResNet-18 at 64x64, 3.7 s of
analyses on 2 cores. Either way the cache is only a speed-up: a hit returns the facts the analyses would
compute again; a file that does not read back is a miss.
"""
from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

from minicomp.codegen.cache import (atomic_write, cache_dir, cache_key, clear_version_folders, switched_on,
                                    version_folders_info)
from minicomp.lru import LRU

CACHE_SIZE = 4096
KIND = "static"
DISK_SWITCH = "MINICOMP_STATIC_CACHE"
_facts: LRU[tuple, list] = LRU(lambda: CACHE_SIZE)
stats = {"hits": 0, "misses": 0}
_log = logging.getLogger("minicomp")


def key(kernel, dev) -> tuple:
  """What the analyses of ``kernel`` on device ``dev`` depend on."""
  src = hashlib.sha256(kernel.source.encode()).hexdigest()
  return (src, kernel.target.arch, tuple((l.kernel, l.grid, l.block) for l in kernel.plan.launches), dev)


def _file(k: tuple) -> Path:
  from minicomp.schedule_cache import code_version
  src, arch, launches, dev = k
  name = cache_key(src, arch, repr(launches), getattr(dev, "name", str(dev)))
  return cache_dir(KIND) / code_version() / f"{name}.json"


def _load(k: tuple):
  """The facts under ``k`` on disk, now also in memory; None where there are none. A file that does not read back
  is removed (with a warning), so the next :func:`put` writes it again."""
  if not switched_on(DISK_SWITCH): return None
  from minicomp.search.static.model import facts_from_json
  f = _file(k)
  try: text = f.read_text()
  except (OSError, ValueError): return None      # not there (ValueError: not text)
  try:
    facts = facts_from_json(json.loads(text))
  except (ValueError, TypeError, KeyError, AttributeError) as e:
    _log.warning("the cached static facts %s do not read back (%s: %s): removed, to be analysed again", f,
                 type(e).__name__, e)
    try: f.unlink()
    except OSError: pass
    return None
  _facts.put(k, facts)
  return facts


def get(k: tuple):
  v = _facts.get(k)
  if v is None: v = _load(k)
  stats["misses" if v is None else "hits"] += 1
  return v


def peek(k: tuple):
  """The facts under ``k`` or None, not counted as a hit or a miss."""
  v = _facts.get(k)
  return v if v is not None else _load(k)


def put(k: tuple, facts: list) -> None:
  """Keep ``facts`` under ``k``, in memory and (where it is not there yet) on disk."""
  _facts.put(k, facts)
  if not switched_on(DISK_SWITCH): return
  from minicomp.search.static.model import facts_json
  data = facts_json(facts)
  if data is None: return
  try:
    f = _file(k)
    if not f.exists(): atomic_write(f, json.dumps(data, separators=(",", ":")).encode())
  except OSError as e:               # a full or read-only cache folder costs time only
    _log.info("could not store a kernel's static facts in the cache (%s)", e.strerror or e)


def clear() -> None:
  """Forget every cached analysis in memory (and the hit counts); the disk is :func:`clear_disk`'s."""
  _facts.clear()
  stats.update(hits=0, misses=0)


def info() -> str:
  """What ``minicomp cache info`` prints of it: the folder, and per code version its kernels and size."""
  from minicomp.schedule_cache import code_version
  return version_folders_info(KIND, "static facts", "*.json", "kernels", DISK_SWITCH, code_version())


def clear_disk() -> int:
  """Remove every kernel's facts from the disk; returns how many files went."""
  return clear_version_folders(KIND, "*.json")
