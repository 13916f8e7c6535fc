"""Which GPU backend minicomp runs kernels through, opened once per process.

Everything that touches a GPU goes through a :class:`~minicomp.codegen.driver_api.Driver`: a dozen calls
on raw device pointers (plain ``int``), streams, events and CUDA graphs. Two backends implement it, each
registering itself into :mod:`minicomp.codegen.driver_api` when its module is first asked for:

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

from minicomp.codegen.driver_api import BACKEND_MODULES, DeviceInfo, DevicePtr, Driver, factory  # noqa: F401 (API)
from minicomp.errors import DriverError, NoGPUError, RuntimeLaunchError  # noqa: F401 (API)

BACKENDS = tuple(BACKEND_MODULES)
ENV_BACKEND = "MINICOMP_GPU_BACKEND"

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


def get_driver(name: str | None = None) -> Driver:
  """The driver of backend ``name`` (default: :func:`default_backend`), opened once per process.

  Raises :class:`NoGPUError` saying why when it cannot be opened (the failure is remembered)."""
  name = name or default_backend()
  with _lock:
    if name in _drivers: return _drivers[name]
    if name in _failures: raise NoGPUError(_failures[name])
    try:
      drv = factory(name)()
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
