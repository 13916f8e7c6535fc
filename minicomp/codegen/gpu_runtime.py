"""Run NVRTC-compiled kernels on a GPU through a :class:`~minicomp.codegen.driver.Driver`.

:class:`GpuModule` loads one :class:`CudaBinary` onto the GPU, choosing the image the GPU can
run (:func:`choose_image`):

* the CUBIN when it was built for the GPU's major arch and a minor arch no newer than the GPU's
  (``sm_86`` code runs on an ``sm_89`` GPU; CUBINs are compatible only within a major arch);
* else the PTX, JIT-compiled by the driver, when the GPU is newer than the build's arch (an
  ``sm_86`` build on an H100): logged once per (build arch, GPU) pair;
* else a :class:`RuntimeLaunchError` that names the fix (build for the GPU's arch: ``target="cuda"``).

PTX newer than the driver can JIT (NVRTC 13 emits PTX ISA 9.0, which a CUDA 12 driver refuses)
is refused with the versions and the fix, before the driver is asked.

:func:`run_plan` runs a :class:`LaunchPlan` on numpy arrays (copy in, launch in order on one
stream, copy out, one synchronisation); :func:`time_plan` times one with CUDA events, the L2
flushed before each run. A compiled model keeps its buffers on the device instead
(:mod:`minicomp.codegen.resident`). Importing this module never touches a GPU.
"""
from __future__ import annotations

import logging
import re
import weakref
from collections.abc import Sequence

import numpy as np

from minicomp.codegen.driver import (DeviceInfo, DevicePtr, Driver, DriverError, NoGPUError, get_driver, gpu_arch,  # noqa: F401
                                     gpu_available, gpu_status)
from minicomp.codegen.nvrtc import CudaBinary
from minicomp.errors import RuntimeLaunchError
from minicomp.target import STATIC_SHARED_BYTES, arch_compute_capability

_logger = logging.getLogger("minicomp")
_warned: set[tuple[str, str]] = set()

# The newest PTX ISA each CUDA release's driver JIT-compiles (PTX ISA reference, "Release Notes").
# A driver newer than the table is taken to accept any PTX NVRTC writes today.
PTX_ISA_OF_CUDA = {(11, 0): (7, 0), (11, 1): (7, 1), (11, 2): (7, 2), (11, 3): (7, 3), (11, 4): (7, 4),
                   (11, 5): (7, 5), (11, 6): (7, 6), (11, 7): (7, 7), (11, 8): (7, 8), (12, 0): (8, 0),
                   (12, 1): (8, 1), (12, 2): (8, 2), (12, 3): (8, 3), (12, 4): (8, 4), (12, 5): (8, 5),
                   (12, 6): (8, 5), (12, 7): (8, 6), (12, 8): (8, 7), (12, 9): (8, 8), (13, 0): (9, 0)}


def choose_image(build_arch: str, device: DeviceInfo) -> str:
  """``"cubin"`` or ``"ptx"``: which image of a ``build_arch`` build ``device`` runs.

  Raises RuntimeLaunchError when the GPU is older than the build (no image can run)."""
  (bm, bn), (dm, dn) = arch_compute_capability(build_arch), device.compute_capability
  if bm == dm and dn >= bn: return "cubin"
  if (dm, dn) > (bm, bn): return "ptx"
  raise RuntimeLaunchError(f"the kernels were built for {build_arch}, newer than the GPU ({device}): "
                           f"rebuild them for its arch with target='cuda' (or target='{device.arch}')")


def ptx_isa(ptx: str) -> tuple[int, int] | None:
  """The ``.version`` of a PTX text, e.g. (8, 8); None when it has none."""
  m = re.search(r"^\s*\.version\s+(\d+)\.(\d+)", ptx, re.M)
  return (int(m.group(1)), int(m.group(2))) if m else None


def check_ptx_supported(ptx: str, device: DeviceInfo) -> None:
  """Refuse PTX whose ISA version is newer than what ``device``'s driver JIT-compiles."""
  have, cuda = ptx_isa(ptx), device.driver_cuda
  newest = PTX_ISA_OF_CUDA.get(cuda)
  if have is None or newest is None or cuda > max(PTX_ISA_OF_CUDA): return
  if have > newest:
    wheel = "nvidia-cuda-nvrtc-cu12" if cuda[0] == 12 else "nvidia-cuda-nvrtc"
    raise RuntimeLaunchError(
      f"the PTX is ISA {'%d.%d' % have}, newer than the driver on {device.name} can JIT-compile (CUDA "
      f"{'%d.%d' % cuda}: up to PTX {'%d.%d' % newest}); update the NVIDIA driver, or install the NVRTC of the "
      f"driver's CUDA (pip install '{wheel}=={cuda[0]}.{cuda[1]}.*') and rebuild")


def _unload(driver: Driver, module) -> None:
  try: driver.module_unload(module)
  except Exception: pass   # the context may be gone at interpreter exit


class GpuModule:
  """The kernels of one :class:`CudaBinary`, loaded onto the GPU of ``driver`` (default backend).

  >>> mod = GpuModule(compile_cuda(src, "sm_86"))        # doctest: +SKIP
  >>> mod.launch("add", grid=4, block=256, shared_bytes=0, args=[a, b, c, np.int32(1024)])  # doctest: +SKIP
  """

  def __init__(self, binary: CudaBinary, driver: Driver | None = None):
    self.binary, self.driver = binary, driver or get_driver()
    info = self.driver.info()
    self.image = choose_image(binary.arch, info)
    if self.image == "ptx":
      check_ptx_supported(binary.ptx, info)
      if (binary.arch, info.arch) not in _warned:
        _warned.add((binary.arch, info.arch))
        _logger.warning("kernels built for %s run on %s through the driver's PTX JIT (slower first load; "
                        "build with target='cuda' for native code)", binary.arch, info)
    data = binary.cubin if self.image == "cubin" else binary.ptx.encode() + b"\0"
    try:
      self._module = self.driver.module_load(data)
    except DriverError as e:
      hint = {"CUDA_ERROR_UNSUPPORTED_PTX_VERSION": "; the PTX is newer than this driver can JIT-compile: update "
                                                    "the NVIDIA driver, or build with an NVRTC no newer than it",
              "CUDA_ERROR_NO_BINARY_FOR_GPU": "; rebuild for the GPU's arch with target='cuda'"}.get(e.code, "")
      raise DriverError(f"could not load the {binary.arch} {self.image.upper()} ({', '.join(binary.resources)}) "
                        f"on {info}: {e}{hint}", e.code) from e
    self._functions: dict[str, object] = {}
    self._allowed: dict[str, int] = {}     # kernel -> the dynamic shared memory it was allowed
    self._params = kernel_params(binary.source)
    self._finalizer = weakref.finalize(self, _unload, self.driver, self._module)

  def function(self, name: str, shared_bytes: int = 0):
    """Kernel ``name``'s handle, allowed ``shared_bytes`` of dynamic shared memory where that is more than a kernel
    may take without asking (:data:`~minicomp.target.STATIC_SHARED_BYTES`)."""
    if name not in self._functions:
      try:
        self._functions[name] = self.driver.function(self._module, name)
      except DriverError as e:
        raise RuntimeLaunchError(f"kernel {name!r} is not in the module ({', '.join(self.binary.resources)}): {e}") from e
    fn = self._functions[name]
    if shared_bytes > max(STATIC_SHARED_BYTES, self._allowed.get(name, 0)):
      try:
        self.driver.allow_shared(fn, int(shared_bytes))
      except DriverError as e:
        raise launch_failed(f"allowing {name} {shared_bytes} bytes of dynamic shared memory", self.driver, e) from e
      self._allowed[name] = int(shared_bytes)
    return fn

  def launch(self, name: str, grid: int | Sequence[int], block: int | Sequence[int], shared_bytes: int,
             args: Sequence[object], time: bool = False, stream=None) -> float | None:
    """Run kernel ``name`` once.

    ``args``: numpy arrays for pointer parameters (copied in, and back in place unless the
    parameter is ``const``; the call then synchronises), device pointers (:class:`DevicePtr`),
    and scalars (numpy scalars as they are; Python ``int``/``bool`` -> int32, ``float`` ->
    float32). With ``time`` the kernel's run time in seconds (CUDA events) is returned.
    Raises RuntimeLaunchError naming the launch.
    """
    drv = self.driver
    config = f"{name}<<<grid={grid}, block={block}, shared={shared_bytes}>>>"
    consts = self._params.get(name)
    if consts is not None and len(consts) != len(args):
      raise RuntimeLaunchError(f"{config}: the kernel takes {len(consts)} arguments, got {len(args)}")
    allocs, copies, kargs = [], [], []
    try:
      grid3, block3 = _dim3(grid, "grid"), _dim3(block, "block")
      fn = self.function(name, int(shared_bytes))
      for i, a in enumerate(args):
        if isinstance(a, np.ndarray):
          host = np.ascontiguousarray(a)
          ptr = drv.alloc(host.nbytes)
          allocs.append(ptr)
          drv.htod(ptr, host, stream)
          if not (consts and consts[i]) and a.flags.writeable: copies.append((a, host, ptr))
          kargs.append(ptr)
        elif isinstance(a, DevicePtr): kargs.append(int(a))
        elif isinstance(a, int): kargs.append(np.int32(a))
        elif isinstance(a, np.generic): kargs.append(a)
        elif isinstance(a, float): kargs.append(np.float32(a))
        else: raise RuntimeLaunchError(f"{config}: argument {i} has unsupported type {type(a).__name__}")
      if time:
        start, end = drv.event(), drv.event()
        drv.record(start, stream)
      drv.launch(fn, grid3, block3, int(shared_bytes), kargs, stream)
      elapsed = None
      if time:
        drv.record(end, stream)
        elapsed = drv.elapsed_s(start, end)
      for a, host, ptr in copies:
        drv.dtoh(host, ptr, stream)
      if allocs: drv.sync(stream)
      for a, host, ptr in copies:
        if host is not a: a[...] = host
      return elapsed
    except RuntimeLaunchError as e:
      if isinstance(e, DriverError):
        raise launch_failed(f"{config} ({self.binary.resources.get(name)})", drv, e) from e
      raise
    finally:
      free_all(drv, allocs)


def launch_failed(what: str, driver: Driver, e: DriverError) -> DriverError:
  """``e`` restated with the launch that failed (``what``) and the GPU, keeping its CUDA error code."""
  return DriverError(f"{what} on {driver.info()} failed: {e}", e.code)


def free_all(drv: Driver, ptrs) -> None:
  """Free every device pointer in ``ptrs``, ignoring failures (used by finalizers)."""
  for p in ptrs:
    try: drv.free(p)
    except Exception: pass   # the context may already be broken by the failed launch


def nbytes(shape: Sequence[int], dtype: str) -> int:
  from minicomp.ir.ops import NP_DTYPE
  return int(np.prod(shape, dtype=np.int64)) * np.dtype(NP_DTYPE[dtype]).itemsize


def launch_plan(module: GpuModule, plan, ptrs: dict[str, int], stream=None) -> None:
  """Queue every launch of ``plan`` (a LaunchPlan) on ``stream`` with buffers ``ptrs`` (name -> pointer)."""
  for l in plan.launches:
    try:
      module.driver.launch(module.function(l.kernel, l.shared_bytes), l.grid, l.block, l.shared_bytes,
                           [ptrs[n] for n in l.params], stream)
    except DriverError as e:
      raise launch_failed(f"{l.kernel}<<<{l.grid}, {l.block}>>> ({module.binary.resources.get(l.kernel)})",
                          module.driver, e) from e


class PlanBuffers:
  """Device buffers for every buffer of a LaunchPlan (inputs, outputs, temps), freed on close/collection."""

  def __init__(self, driver: Driver, plan):
    self.driver, self.ptrs, owned = driver, {}, []
    self._finalizer = weakref.finalize(self, free_all, driver, owned)
    for b in plan.inputs + plan.outputs + plan.temps:
      self.ptrs[b.name] = driver.alloc(nbytes(b.shape, b.dtype))
      owned.append(self.ptrs[b.name])

  def close(self) -> None: self._finalizer()


def run_plan(module: GpuModule, plan, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray]) -> None:
  """Run ``plan`` once: inputs copied up, every launch queued on one stream, outputs copied down
  into ``outputs`` (C-contiguous arrays), one synchronisation; the device buffers are freed."""
  drv = module.driver
  bufs = PlanBuffers(drv, plan)
  try:
    for b, a in zip(plan.inputs, inputs): drv.htod(bufs.ptrs[b.name], a)
    launch_plan(module, plan, bufs.ptrs)
    for b, o in zip(plan.outputs, outputs): drv.dtoh(o, bufs.ptrs[b.name])
    drv.sync()
  finally:
    bufs.close()


FLUSH_BYTES = 256 << 20   # larger than the L2 of any GPU minicomp targets (H100: 50 MB, B200: 126 MB)


class L2Flush:
  """Evicts the L2 cache when called: writes a buffer larger than any current GPU's L2 (queued on
  the stream). The buffer is allocated on first use and freed by :meth:`close` or collection."""

  def __init__(self, driver: Driver, nbytes: int = FLUSH_BYTES):
    self.driver, self.nbytes, self._ptrs = driver, nbytes, []
    self._finalizer = weakref.finalize(self, free_all, driver, self._ptrs)

  def __call__(self, stream=None) -> None:
    if not self._ptrs: self._ptrs.append(self.driver.alloc(self.nbytes))
    self.driver.memset(self._ptrs[0], self.nbytes, stream)

  def close(self) -> None: self._finalizer()


DELAY_SOURCE = """extern "C" __global__ void mc_delay(long long cycles) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {}
}
"""


class GpuDelay:
  """Holds back a stream's later work on the GPU: one thread spins for ``cycles`` SM clock cycles (queued on the
  stream). Queued ahead of a run's launches, it gives the host time to queue them all before the GPU reaches the
  first, so each kernel is timed back to back with the one before rather than waiting for the host to launch it
  (``resident.DeviceSession.benchmark``). The kernel is built with NVRTC for the driver's GPU on first use."""

  def __init__(self, driver: Driver):
    self.driver, self._fn, self._module = driver, None, None

  def __call__(self, cycles: int, stream=None) -> None:
    if self._fn is None:
      from minicomp.codegen.nvrtc import compile_cuda
      self._module = GpuModule(compile_cuda(DELAY_SOURCE, self.driver.info().arch), self.driver)
      self._fn = self._module.function("mc_delay")
    self.driver.launch(self._fn, (1, 1, 1), (1, 1, 1), 0, [np.int64(cycles)], stream)


def time_plan(module: GpuModule, plan, inputs: Sequence[np.ndarray], min_total_s: float = 0.1,
              max_repeats: int = 1000, min_repeats: int = 3, flush: bool = True) -> list[float]:
  """Run times in seconds of the whole ``plan`` on ``inputs`` (real dtypes; uploaded once): one
  warm-up run, then runs (each after an L2 flush when ``flush``) bracketed by CUDA events until
  ``min_total_s`` of kernel time and ``min_repeats`` runs, or ``max_repeats`` runs."""
  drv = module.driver
  bufs, flush_l2 = PlanBuffers(drv, plan), L2Flush(drv)
  try:
    for b, a in zip(plan.inputs, inputs): drv.htod(bufs.ptrs[b.name], np.ascontiguousarray(a))
    launch_plan(module, plan, bufs.ptrs)
    drv.sync()
    start, end = drv.event(), drv.event()
    times: list[float] = []
    while len(times) < max_repeats and (sum(times) < min_total_s or len(times) < min_repeats):
      if flush: flush_l2()
      drv.record(start)
      launch_plan(module, plan, bufs.ptrs)
      drv.record(end)
      times.append(drv.elapsed_s(start, end))
    return times
  finally:
    bufs.close()
    flush_l2.close()


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
