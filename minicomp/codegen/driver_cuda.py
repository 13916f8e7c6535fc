"""The default GPU backend: NVIDIA's driver API through ``cuda-bindings`` (``cuda.bindings.driver``).

cuda-bindings is already a dependency (NVRTC), and ships the driver API as a binary wheel, so
this backend needs no build step and no CUDA toolkit: only an NVIDIA driver (``libcuda``).
The calls used here exist with the same signatures in cuda-bindings 12.x and 13.x (event timing
falls back to ``cuEventElapsedTime_v2`` where 13.x renamed it). GPU 0's primary context is made
current on each thread that calls in (the driver API's current context is per thread).
"""
from __future__ import annotations

import threading
from typing import Any, Sequence

import numpy as np

from minicomp.codegen.driver_api import DeviceInfo, DriverError, register


@register("cuda")
class CudaDriver:
  """:class:`minicomp.codegen.driver_api.Driver` over ``cuda.bindings.driver`` (GPU 0, primary context)."""
  name = "cuda"

  def __init__(self, ordinal: int = 0):
    from cuda.bindings import driver as cu
    self._cu = cu
    self._call("cuInit", 0)
    self._dev = self._call("cuDeviceGet", ordinal)
    self._ctx = self._call("cuDevicePrimaryCtxRetain", self._dev)
    self._tls = threading.local()
    self._current()
    attr = cu.CUdevice_attribute
    cc = (self._call("cuDeviceGetAttribute", attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self._dev),
          self._call("cuDeviceGetAttribute", attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self._dev))
    name = self._call("cuDeviceGetName", 256, self._dev)
    name = name.split(b"\0", 1)[0].decode(errors="replace") if isinstance(name, bytes) else str(name)
    self._info = DeviceInfo(name, (int(cc[0]), int(cc[1])), int(self._call("cuDriverGetVersion")),
                            int(self._call("cuDeviceTotalMem", self._dev)), self.name)
    self._stream = self._call("cuStreamCreate", 0)

  # -- plumbing
  def _call(self, fn: str, *args):
    err, *out = getattr(self._cu, fn)(*args)
    if err != self._cu.CUresult.CUDA_SUCCESS:
      code = getattr(err, "name", str(err))
      try:
        desc = self._cu.cuGetErrorString(err)[1]
        desc = f" ({desc.decode(errors='replace')})" if isinstance(desc, bytes) else ""
      except Exception:   # no description without a working driver
        desc = ""
      raise DriverError(f"{fn} failed: {code}{desc}", code)
    return None if not out else out[0] if len(out) == 1 else out

  def _current(self) -> None:
    if getattr(self._tls, "ok", False): return
    self._call("cuCtxSetCurrent", self._ctx)
    self._tls.ok = True

  def _s(self, stream):
    self._current()
    return self._stream if stream is None else stream

  # -- the Driver interface
  def info(self) -> DeviceInfo: return self._info

  def module_load(self, image: bytes) -> Any:
    self._current()
    return self._call("cuModuleLoadData", image)

  def module_unload(self, module: Any) -> None:
    self._current()
    self._call("cuModuleUnload", module)

  def function(self, module: Any, name: str) -> Any:
    self._current()
    return self._call("cuModuleGetFunction", module, name.encode())

  def allow_shared(self, fn: Any, nbytes: int) -> None:
    self._current()
    self._call("cuFuncSetAttribute", fn,
               self._cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(nbytes))

  def alloc(self, nbytes: int) -> int:
    self._current()
    return int(self._call("cuMemAlloc", max(int(nbytes), 1)))

  def free(self, ptr: int) -> None:
    self._current()
    self._call("cuMemFree", ptr)

  def htod(self, ptr: int, src: np.ndarray, stream: Any = None) -> None:
    if src.nbytes: self._call("cuMemcpyHtoDAsync", ptr, src.ctypes.data, src.nbytes, self._s(stream))

  def dtoh(self, dst: np.ndarray, ptr: int, stream: Any = None) -> None:
    if dst.nbytes: self._call("cuMemcpyDtoHAsync", dst.ctypes.data, ptr, dst.nbytes, self._s(stream))

  def memset(self, ptr: int, nbytes: int, stream: Any = None) -> None:
    if nbytes: self._call("cuMemsetD8Async", ptr, 0, int(nbytes), self._s(stream))

  def launch(self, fn: Any, grid, block, shared_bytes: int, args: Sequence[int | np.generic], stream: Any = None) -> None:
    # Each argument's bytes in its own 8-byte slot; kernelParams is the address of an array of
    # pointers to the slots (the driver copies the values when the launch is queued).
    values = np.zeros(max(len(args), 1), np.uint64)
    raw = values.view(np.uint8).reshape(-1, 8)
    for i, a in enumerate(args):
      if isinstance(a, int): values[i] = a   # a device pointer
      else:                                  # a numpy scalar: its own bytes
        b = np.asarray(a).tobytes()
        raw[i, :len(b)] = np.frombuffer(b, np.uint8)
    ptrs = np.array([values.ctypes.data + 8 * i for i in range(len(args))] or [0], np.uint64)
    s = self._s(stream)
    self._call("cuLaunchKernel", fn, *grid, *block, int(shared_bytes), s, int(ptrs.ctypes.data), 0)

  def stream(self) -> Any:
    self._current()
    return self._call("cuStreamCreate", 0)

  def sync(self, stream: Any = None) -> None:
    self._call("cuStreamSynchronize", self._s(stream))

  def event(self) -> Any:
    self._current()
    return self._call("cuEventCreate", 0)

  def record(self, event: Any, stream: Any = None) -> None:
    self._call("cuEventRecord", event, self._s(stream))

  def elapsed_s(self, start: Any, end: Any) -> float:
    self._call("cuEventSynchronize", end)
    fn = "cuEventElapsedTime" if hasattr(self._cu, "cuEventElapsedTime") else "cuEventElapsedTime_v2"
    return float(self._call(fn, start, end)) / 1e3

  def capture_begin(self, stream: Any) -> None:
    mode = self._cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
    self._call("cuStreamBeginCapture", self._s(stream), mode)

  def capture_end(self, stream: Any) -> Any:
    graph = self._call("cuStreamEndCapture", self._s(stream))
    try:
      return self._call("cuGraphInstantiate", graph, 0)
    finally:
      self._call("cuGraphDestroy", graph)

  def graph_launch(self, graph: Any, stream: Any) -> None:
    self._call("cuGraphLaunch", graph, self._s(stream))

  def graph_destroy(self, graph: Any) -> None:
    self._current()
    self._call("cuGraphExecDestroy", graph)
