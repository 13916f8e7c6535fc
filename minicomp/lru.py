"""The one least-recently-used cache of minicomp's in-memory caches (NVRTC results, loaded simulator
builds, the static model's analyses): a thread-safe mapping that keeps the ``size`` entries used most
recently and forgets the oldest first."""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable, Generic, Hashable, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LRU(Generic[K, V]):
  """``size``: how many entries to keep, or a function answering it at each insertion (a limit read
  from the environment); 0 keeps nothing. ``on_evict(key, value)`` is called for each entry dropped."""

  def __init__(self, size: int | Callable[[], int], on_evict: Callable[[K, V], None] | None = None):
    self.size, self._on_evict = size, on_evict
    self._d: OrderedDict[K, V] = OrderedDict()
    self._lock = threading.Lock()

  def get(self, key: K) -> V | None:
    """The value of ``key`` (now the most recently used), or None."""
    with self._lock:
      v = self._d.get(key)
      if v is not None: self._d.move_to_end(key)
      return v

  def put(self, key: K, value: V) -> V:
    """Keep ``value`` for ``key`` unless an entry is there already: return the one kept, so callers that
    raced to compute the same thing share one object."""
    limit = self.size() if callable(self.size) else self.size
    dropped = []
    with self._lock:
      kept = self._d.get(key)
      if kept is not None:
        self._d.move_to_end(key)
        return kept
      self._d[key] = value
      while len(self._d) > max(limit, 0):   # (also shrinks a cache whose limit was lowered; 0 keeps nothing)
        dropped.append(self._d.popitem(last=False))
    if self._on_evict is not None:
      for k, v in dropped: self._on_evict(k, v)
    return value

  def clear(self) -> None:
    with self._lock: self._d.clear()

  def __len__(self) -> int: return len(self._d)

  def __contains__(self, key: K) -> bool: return key in self._d

  def __iter__(self):
    """The keys, least recently used first (a snapshot)."""
    with self._lock: return iter(list(self._d))
