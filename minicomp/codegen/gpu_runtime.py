"""Run NVRTC-compiled kernels on a real GPU through pycuda (the optional ``minicomp[gpu]`` extra).

Nothing else in minicomp needs this module, and importing it never imports pycuda: that
happens inside :func:`gpu_available` and :class:`GpuModule`. Kernels run in the device's
primary context on the calling thread; arrays are copied to the device before a launch and
copied back (in place) after it for every pointer the kernel does not declare ``const``.
"""
from __future__ import annotations

import re
import threading
from collections.abc import Sequence

import numpy as np

from minicomp.codegen.nvrtc import CudaBinary
from minicomp.errors import RuntimeLaunchError

_state: dict[str, object] = {}  # "available": bool, "reason": str, "driver": pycuda.driver
_state_lock = threading.Lock()


def _probe() -> tuple[bool, str]:
  try:
    import pycuda.driver as drv
    drv.init()
    if drv.Device.count() == 0:
      return False, "pycuda found no CUDA device"
    try:  # pycuda >= 2021.1: share the primary context with other CUDA libraries
      import pycuda.autoprimaryctx  # noqa: F401
    except ImportError:
      import pycuda.autoinit  # noqa: F401
    _state["driver"] = drv
    return True, f"{drv.Device(0).name()} via pycuda"
  except Exception as e:  # ImportError, pycuda LogicError / RuntimeError without a driver, ...
    return False, f"{type(e).__name__}: {e}"


def gpu_available() -> bool:
  """True when pycuda imports and a CUDA device can be initialised. Never raises; cached."""
  with _state_lock:
    if "available" not in _state:
      _state["available"], _state["reason"] = _probe()
    return bool(_state["available"])


def gpu_status() -> str:
  """Why :func:`gpu_available` answered as it did (the device name, or the failure)."""
  gpu_available()
  return str(_state["reason"])


def _driver():
  if not gpu_available():
    raise RuntimeLaunchError(f"no CUDA GPU / pycuda: {gpu_status()}; install minicomp[gpu] on a GPU machine")
  return _state["driver"]


_BOUNDS = r"(?:__launch_bounds__\s*\([^)]*\)\s*)?"
_KERNEL_RE = re.compile(rf'extern\s+"C"\s+__global__\s+{_BOUNDS}void\s+{_BOUNDS}(\w+)\s*\(([^)]*)\)')


def kernel_params(source: str) -> dict[str, tuple[bool | None, ...]]:
  """Per ``extern "C" __global__`` kernel, for each parameter: is it a pointer to const data?

  ``True`` for ``const float* __restrict__ A``, ``False`` for ``float* C`` (or
  ``float* const C``: the pointer is const, the data is not), ``None`` for a scalar.
  """
  out = {}
  for m in _KERNEL_RE.finditer(source):
    params = [p.strip() for p in m.group(2).split(",") if p.strip() and p.strip() != "void"]
    out[m.group(1)] = tuple(("const" in p.split("*")[0]) if "*" in p else None for p in params)
  return out


def _dim3(d: int | Sequence[int], what: str) -> tuple[int, int, int]:
  t = (d,) if isinstance(d, (int, np.integer)) else tuple(d)
  if not 1 <= len(t) <= 3 or any(int(x) < 1 for x in t):
    raise RuntimeLaunchError(f"{what} must be 1 to 3 positive ints, got {d!r}")
  return tuple(int(x) for x in t) + (1,) * (3 - len(t))


class GpuModule:
  """The kernels of one :class:`CudaBinary`, loaded onto the GPU.

  >>> mod = GpuModule(compile_cuda(src, "sm_86"))        # doctest: +SKIP
  >>> mod.launch("add", grid=4, block=256, shared_bytes=0, args=[a, b, c, 1024])  # doctest: +SKIP
  """

  def __init__(self, binary: CudaBinary):
    drv = _driver()
    self.binary = binary
    self._params = kernel_params(binary.source)
    try:
      self._module = drv.module_from_buffer(binary.cubin)
    except Exception as e:
      raise RuntimeLaunchError(f"could not load the {binary.arch} CUBIN ({', '.join(binary.resources)}) "
                               f"on {gpu_status()}: {e}") from e
    self._functions: dict[str, object] = {}

  def _function(self, name: str):
    if name not in self._functions:
      self._functions[name] = self._module.get_function(name)
    return self._functions[name]

  def launch(self, name: str, grid: int | Sequence[int], block: int | Sequence[int], shared_bytes: int,
             args: Sequence[object], time: bool = False) -> float | None:
    """Run kernel ``name`` once; arrays are copied in, and back in place unless ``const``.

    Parameters
    ----------
    name : str
        The ``extern "C"`` kernel name.
    grid, block : int or tuple of int
        Launch configuration (1 to 3 dimensions).
    shared_bytes : int
        Dynamic shared memory per block (0 for kernels with only static ``__shared__``).
    args : sequence
        numpy arrays for pointer parameters; Python ``int`` / ``float`` scalars are passed
        as ``np.int32`` / ``np.float32``, numpy scalars as they are.
    time : bool
        Return the kernel's run time in seconds (CUDA events; copies excluded).

    Raises
    ------
    RuntimeLaunchError
        Bad arguments, an unknown kernel, or a driver error during the launch.
    """
    drv = _driver()
    config = f"{name}<<<grid={grid}, block={block}, shared={shared_bytes}>>>"
    consts = self._params.get(name)
    if consts is not None and len(consts) != len(args):
      raise RuntimeLaunchError(f"{config}: the kernel takes {len(consts)} arguments, got {len(args)}")
    allocs, copies, kargs = [], [], []
    try:
      grid3, block3 = _dim3(grid, "grid"), _dim3(block, "block")
      fn = self._function(name)
      for i, a in enumerate(args):
        if isinstance(a, np.ndarray):
          host = np.ascontiguousarray(a)
          dev = drv.mem_alloc(max(host.nbytes, 1))
          allocs.append(dev)
          drv.memcpy_htod(dev, host)
          if not (consts and consts[i]) and a.flags.writeable:
            copies.append((a, host, dev))
          kargs.append(dev)
        elif isinstance(a, (bool, int)):
          kargs.append(np.int32(a))
        elif isinstance(a, float):
          kargs.append(np.float32(a))
        elif isinstance(a, np.generic):
          kargs.append(a)
        else:
          raise RuntimeLaunchError(f"{config}: argument {i} has unsupported type {type(a).__name__}")
      start, end = drv.Event(), drv.Event()
      start.record()
      fn(*kargs, grid=grid3, block=block3, shared=int(shared_bytes))
      end.record()
      end.synchronize()
      elapsed = start.time_till(end) / 1e3
      for a, host, dev in copies:
        drv.memcpy_dtoh(host, dev)
        if host is not a:
          a[...] = host
    except RuntimeLaunchError:
      raise
    except Exception as e:  # pycuda LaunchError, LogicError, MemoryError, ...
      res = self.binary.resources.get(name)
      raise RuntimeLaunchError(f"{config} on {gpu_status()} failed ({res}): {type(e).__name__}: {e}") from e
    finally:
      for dev in allocs:
        try:
          dev.free()
        except Exception:  # the context may already be broken by the failed launch
          pass
    return elapsed if time else None


_FLUSH: list = []


def flush_l2(nbytes: int = 256 << 20) -> None:   # pragma: no cover - needs a GPU
  """Evict the L2 cache by writing a buffer larger than any current GPU's L2 (for timing)."""
  import pycuda.driver as drv
  if not _FLUSH: _FLUSH.append(drv.mem_alloc(nbytes))
  drv.memset_d32(_FLUSH[0], 0, nbytes // 4)
  drv.Context.synchronize()
