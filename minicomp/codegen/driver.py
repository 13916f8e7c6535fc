"""The GPU driver interface minicomp runs kernels through, and which backend serves it.

Everything that touches a GPU goes through a :class:`Driver`: a dozen calls on raw device
pointers (plain ``int``), streams, events and CUDA graphs. Two backends implement it:

* ``"cuda"`` (the default): NVIDIA's driver API from ``cuda-bindings`` (``cuda.bindings.driver``),
  already a dependency for NVRTC, so ``pip install minicomp`` alone runs kernels on a GPU
  (:mod:`minicomp.codegen.driver_cuda`).
* ``"pycuda"``: pycuda, where it is installed (``pip install minicomp[gpu]``; it builds from
  source) (:mod:`minicomp.codegen.driver_pycuda`).

``MINICOMP_GPU_BACKEND`` (``cuda`` or ``pycuda``) picks the backend that ``device="gpu"`` and
``device=None`` use; ``device="cuda"`` / ``device="pycuda"`` name one directly. Backends use GPU 0
of the process (choose another with ``CUDA_VISIBLE_DEVICES``) in its primary context, so they
share it with other CUDA libraries in the process.

Probing never raises: :func:`gpu_available` answers False with a reason (:func:`gpu_status`)
on a machine without a driver, a GPU, or the backend's package. Tests install a fake backend
with :func:`set_driver` (no GPU is needed to test everything above this interface).
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any, Protocol, Sequence

import numpy as np

from minicomp.errors import DriverError, NoGPUError, RuntimeLaunchError  # noqa: F401 (backends import DriverError here)

BACKENDS = ("cuda", "pycuda")
ENV_BACKEND = "MINICOMP_GPU_BACKEND"

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


_lock = threading.RLock()
_drivers: dict[str, Driver] = {}
_failures: dict[str, str] = {}


def default_backend() -> str:
  """The backend ``device="gpu"`` means: ``$MINICOMP_GPU_BACKEND``, else ``"cuda"``."""
  name = os.environ.get(ENV_BACKEND, "cuda").strip().lower() or "cuda"
  if name not in BACKENDS:
    raise RuntimeLaunchError(f"{ENV_BACKEND}={name!r}: the GPU backends are {', '.join(BACKENDS)}")
  return name


def backend_for(device: str | None) -> str | None:
  """The backend a ``device=`` argument asks for: ``None`` for the CPU simulator.

  ``None`` means the GPU when one is usable, else the CPU; ``"cpu"``; ``"gpu"`` (the default
  backend, which must be usable); ``"cuda"`` or ``"pycuda"`` (that backend)."""
  if device is None: return default_backend() if gpu_available() else None
  if device == "cpu": return None
  if device == "gpu": return default_backend()
  if device in BACKENDS: return device
  raise RuntimeLaunchError(f"device must be None, 'cpu', 'gpu', 'cuda' or 'pycuda', got {device!r}")


def _open(name: str) -> Driver:
  if name == "cuda":
    from minicomp.codegen.driver_cuda import CudaDriver
    return CudaDriver()
  from minicomp.codegen.driver_pycuda import PycudaDriver
  return PycudaDriver()


def get_driver(name: str | None = None) -> Driver:
  """The driver of backend ``name`` (default: :func:`default_backend`), opened once per process.

  Raises :class:`NoGPUError` saying why when it cannot be opened (the failure is remembered)."""
  name = name or default_backend()
  with _lock:
    if name in _drivers: return _drivers[name]
    if name in _failures: raise NoGPUError(_failures[name])
    try:
      drv = _open(name)
      drv.info()
    except Exception as e:   # ImportError, no libcuda, CUDA_ERROR_NO_DEVICE, ...
      hint = " (pip install minicomp[gpu])" if name == "pycuda" and isinstance(e, ImportError) else ""
      _failures[name] = f"no usable GPU through the {name!r} backend: {type(e).__name__}: {e}{hint}"
      raise NoGPUError(_failures[name]) from None
    _drivers[name] = drv
    return drv


def set_driver(name: str, driver: Driver | None) -> None:
  """Install ``driver`` as backend ``name`` (tests: a fake backend), or forget it with ``None``."""
  with _lock:
    _failures.pop(name, None)
    if driver is None: _drivers.pop(name, None)
    else: _drivers[name] = driver


def gpu_available(name: str | None = None) -> bool:
  """True when backend ``name`` (default: the default backend) has a usable GPU. Never raises."""
  try:
    get_driver(name)
    return True
  except RuntimeLaunchError:
    return False


def gpu_status(name: str | None = None) -> str:
  """The GPU backend ``name`` would use (``str(DeviceInfo)``), or why there is none."""
  try:
    return str(get_driver(name).info())
  except RuntimeLaunchError as e:
    return str(e)


def gpu_arch(name: str | None = None) -> str | None:
  """The arch of GPU 0 (``"sm_90"``), or None without a usable GPU."""
  try:
    return get_driver(name).info().arch
  except RuntimeLaunchError:
    return None
