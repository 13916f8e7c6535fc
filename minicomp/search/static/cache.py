"""The static model's per-kernel analysis cache: launch facts by kernel source, launches and device.

The analyses behind an estimate (PTX instruction counts, islpy data movement, occupancy) depend only
on the kernel's CUDA source (which fixes its loop IR, shapes and index math), the arch it was built
for (the PTX), its launch configuration and the device the estimate is for. A model whose calls share
a kernel, a search that meets a program twice, or ``mod.estimate()`` asked again, reuse the facts.

The cache lives in memory, keeps the :data:`CACHE_SIZE` most recently used kernels (LRU), and is
only a speed-up: a hit returns the facts the analyses would compute again.
"""
from __future__ import annotations

import hashlib

from minicomp.lru import LRU

CACHE_SIZE = 4096
_facts: LRU[tuple, list] = LRU(lambda: CACHE_SIZE)
stats = {"hits": 0, "misses": 0}


def key(kernel, dev) -> tuple:
  """What the analyses of ``kernel`` on device ``dev`` depend on."""
  src = hashlib.sha256(kernel.source.encode()).hexdigest()
  return (src, kernel.target.arch, tuple((l.kernel, l.grid, l.block) for l in kernel.plan.launches), dev)


def get(k: tuple):
  v = _facts.get(k)
  stats["misses" if v is None else "hits"] += 1
  return v


def peek(k: tuple):
  """The facts under ``k`` or None, not counted as a hit or a miss."""
  return _facts.get(k)


def put(k: tuple, facts: list) -> None:
  _facts.put(k, facts)


def clear() -> None:
  """Forget every cached analysis (and the hit counts)."""
  _facts.clear()
  stats.update(hits=0, misses=0)
