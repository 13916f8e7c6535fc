"""What a GPU backend is: the :class:`Driver` interface, the records it returns, and the registry the
backends register into (:func:`register`). Below both the backends and :mod:`minicomp.codegen.driver`,
which picks and opens one: a backend module imports only this, and the chooser finds a backend's
module by name (:data:`BACKEND_MODULES`) without importing it until it is asked for.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from minicomp.errors import DriverError  # noqa: F401 (the error every backend raises; imported from here)

# backend name -> the module that registers it (imported on first use: pycuda may not be installed)
BACKEND_MODULES = {"cuda": "minicomp.codegen.driver_cuda", "pycuda": "minicomp.codegen.driver_pycuda"}
_factories: dict[str, Callable[[], "Driver"]] = {}


def register(name: str):
  """Class decorator of a backend: ``@register("cuda") class CudaDriver: ...``."""
  def deco(cls):
    _factories[name] = cls
    return cls
  return deco


def factory(name: str) -> Callable[[], "Driver"]:
  """The registered constructor of backend ``name`` (its module imported first)."""
  if name not in _factories:
    import importlib
    importlib.import_module(BACKEND_MODULES[name])
  return _factories[name]


class DevicePtr(int):
  """A device address (an ``int``): where a numpy-level call takes both, tells a pointer from an int scalar."""


@dataclass(frozen=True)
class DeviceInfo:
  """What the backend reports about GPU 0."""
  name: str
  compute_capability: tuple[int, int]
  driver_version: int          # as cuDriverGetVersion: 1000 * major + 10 * minor (12080 = CUDA 12.8)
  total_bytes: int
  backend: str

  @property
  def arch(self) -> str: return "sm_%d%d" % self.compute_capability

  @property
  def driver_cuda(self) -> tuple[int, int]:
    """The newest CUDA version the driver supports, e.g. (12, 8)."""
    return self.driver_version // 1000, (self.driver_version % 1000) // 10

  def __str__(self) -> str:
    return f"{self.name} ({self.arch}, driver CUDA {'%d.%d' % self.driver_cuda}, via {self.backend})"


class Driver(Protocol):
  """What a GPU backend implements. Device memory is addressed by plain ``int`` pointers; a
  ``stream`` argument of ``None`` means the backend's default stream for minicomp."""
  name: str

  def info(self) -> DeviceInfo: ...
  def module_load(self, image: bytes) -> Any: ...           # a CUBIN, or NUL-terminated PTX (JIT-compiled)
  def module_unload(self, module: Any) -> None: ...
  def function(self, module: Any, name: str) -> Any: ...
  def allow_shared(self, fn: Any, nbytes: int) -> None: ...  # dynamic shared memory past 48 KiB (cuFuncSetAttribute)
  def alloc(self, nbytes: int) -> int: ...
  def free(self, ptr: int) -> None: ...
  def htod(self, ptr: int, src: np.ndarray, stream: Any = None) -> None: ...   # src C-contiguous
  def dtoh(self, dst: np.ndarray, ptr: int, stream: Any = None) -> None: ...   # dst C-contiguous
  def memset(self, ptr: int, nbytes: int, stream: Any = None) -> None: ...     # zero bytes
  def launch(self, fn: Any, grid: tuple[int, int, int], block: tuple[int, int, int], shared_bytes: int,
             args: Sequence[int | np.generic], stream: Any = None) -> None: ...  # ints are device pointers
  def stream(self) -> Any: ...
  def sync(self, stream: Any = None) -> None: ...
  def event(self) -> Any: ...
  def record(self, event: Any, stream: Any = None) -> None: ...
  def elapsed_s(self, start: Any, end: Any) -> float: ...
  def capture_begin(self, stream: Any) -> None: ...
  def capture_end(self, stream: Any) -> Any: ...            # an instantiated graph
  def graph_launch(self, graph: Any, stream: Any) -> None: ...
  def graph_destroy(self, graph: Any) -> None: ...
