"""The second GPU backend: pycuda (``pip install minicomp[gpu]``; it builds from source and needs
the CUDA toolkit). Selected with ``device="pycuda"`` or ``MINICOMP_GPU_BACKEND=pycuda``.

pycuda hands out allocation objects that free their memory when collected; this backend keeps
them in a table keyed by the raw pointer, so callers see plain ``int`` pointers as with the
default backend. pycuda reports errors as text without CUDA's error names, so ``DriverError.code``
is recovered from the message where pycuda spells the name, else left empty.
"""
from __future__ import annotations

import re
from typing import Any, Sequence

import numpy as np

from minicomp.codegen.driver_api import DeviceInfo, DriverError, register

_CODE_RE = re.compile(r"CUDA_ERROR_[A-Z_]+")


@register("pycuda")
class PycudaDriver:
  """:class:`minicomp.codegen.driver_api.Driver` over pycuda (GPU 0, primary context)."""
  name = "pycuda"

  def __init__(self):
    import pycuda.driver as drv
    drv.init()
    if drv.Device.count() == 0: raise DriverError("pycuda found no CUDA device", "CUDA_ERROR_NO_DEVICE")
    try:   # pycuda >= 2021.1: the primary context, shared with other CUDA libraries
      import pycuda.autoprimaryctx  # noqa: F401
    except ImportError:
      import pycuda.autoinit  # noqa: F401
    self._drv = drv
    dev = drv.Device(0)
    self._info = DeviceInfo(dev.name(), tuple(dev.compute_capability()), int(drv.get_driver_version()),
                            int(dev.total_memory()), self.name)
    self._allocs: dict[int, Any] = {}
    self._stream = drv.Stream()

  def _wrap(self, what: str, fn, *args, **kw):
    try:
      return fn(*args, **kw)
    except DriverError:
      raise
    except Exception as e:   # pycuda LogicError / LaunchError / MemoryError / RuntimeError
      m = _CODE_RE.search(str(e))
      raise DriverError(f"{what} failed: {type(e).__name__}: {e}", m.group(0) if m else "") from e

  def info(self) -> DeviceInfo: return self._info

  def module_load(self, image: bytes) -> Any: return self._wrap("module load", self._drv.module_from_buffer, image)
  def module_unload(self, module: Any) -> None: pass          # pycuda unloads a module when it is collected
  def function(self, module: Any, name: str) -> Any: return self._wrap(f"get function {name}", module.get_function, name)
  def allow_shared(self, fn: Any, nbytes: int) -> None:
    self._wrap("set its dynamic shared memory", fn.set_attribute,
               self._drv.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES, int(nbytes))

  def alloc(self, nbytes: int) -> int:
    a = self._wrap("alloc", self._drv.mem_alloc, max(int(nbytes), 1))
    self._allocs[int(a)] = a
    return int(a)

  def free(self, ptr: int) -> None:
    a = self._allocs.pop(int(ptr), None)
    if a is not None: self._wrap("free", a.free)

  def _s(self, stream): return self._stream if stream is None else stream

  def htod(self, ptr: int, src: np.ndarray, stream: Any = None) -> None:
    if src.nbytes: self._wrap("copy to device", self._drv.memcpy_htod_async, ptr, src, self._s(stream))

  def dtoh(self, dst: np.ndarray, ptr: int, stream: Any = None) -> None:
    if dst.nbytes: self._wrap("copy to host", self._drv.memcpy_dtoh_async, dst, ptr, self._s(stream))

  def memset(self, ptr: int, nbytes: int, stream: Any = None) -> None:
    if nbytes: self._wrap("memset", self._drv.memset_d8_async, ptr, 0, int(nbytes), self._s(stream))

  def launch(self, fn: Any, grid, block, shared_bytes: int, args: Sequence[int | np.generic], stream: Any = None) -> None:
    kargs = [np.uintp(a) if isinstance(a, int) else a for a in args]   # ints are device pointers
    self._wrap("launch", fn, *kargs, grid=tuple(grid), block=tuple(block), shared=int(shared_bytes), stream=self._s(stream))

  def stream(self) -> Any: return self._drv.Stream()
  def sync(self, stream: Any = None) -> None: self._wrap("synchronize", self._s(stream).synchronize)
  def event(self) -> Any: return self._drv.Event()
  def record(self, event: Any, stream: Any = None) -> None: self._wrap("event record", event.record, self._s(stream))

  def elapsed_s(self, start: Any, end: Any) -> float:
    self._wrap("event synchronize", end.synchronize)
    return float(start.time_till(end)) / 1e3

  # CUDA graphs: minicomp does not use pycuda's graph API (its spelling changed across pycuda
  # versions and was never tried here); ``cuda_graph=True`` needs the default backend.
  def capture_begin(self, stream: Any) -> None:
    raise DriverError("CUDA graph capture is not supported by the pycuda backend; use device='cuda' "
                      "(the default backend) for cuda_graph=True", "CUDA_ERROR_NOT_SUPPORTED")

  def capture_end(self, stream: Any) -> Any: raise DriverError("no capture in progress", "CUDA_ERROR_NOT_SUPPORTED")
  def graph_launch(self, graph: Any, stream: Any) -> None: raise DriverError("no graphs", "CUDA_ERROR_NOT_SUPPORTED")
  def graph_destroy(self, graph: Any) -> None: pass
