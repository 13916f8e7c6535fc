"""A fake GPU backend for tests (CI has no GPU): it implements minicomp's Driver interface with
host memory, runs every launched kernel on the CPU simulator (so results are real and can be
checked against numpy / onnxruntime), and records every call so tests can assert what crossed
the bus and what was launched.

Memory it hands out starts as 0xFF bytes (NaN for floats), never zeros, so code that relies on
zero-initialised device memory fails here. A cubin is refused on a GPU whose major arch differs
or whose minor arch is older (as the real driver does: CUDA_ERROR_NO_BINARY_FOR_GPU), and
``max_ptx`` makes it refuse newer PTX (CUDA_ERROR_UNSUPPORTED_PTX_VERSION).

Use the ``fake_gpu`` fixture of conftest.py: it installs the fake as the "cuda" backend and
teaches it the source of every binary minicomp loads.
"""
from __future__ import annotations

import re

import numpy as np

from minicomp.codegen.driver import DeviceInfo, DriverError
from minicomp.codegen.gpu_runtime import ptx_isa
from minicomp.target import STATIC_SHARED_BYTES, arch_compute_capability
from minicomp.codegen.simulator import build_simulator

_SIG = r'extern\s+"C"\s+__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?{name}\s*\(([^)]*)\)'


def param_types(source: str, name: str) -> list[str]:
  """C types of kernel ``name``'s parameters, e.g. ["const float*", "float*"]."""
  m = re.search(_SIG.format(name=re.escape(name)), source)
  if m is None: raise DriverError(f"named symbol not found: {name}", "CUDA_ERROR_NOT_FOUND")
  out = []
  for p in (p.strip() for p in m.group(1).split(",") if p.strip()):
    words = p.replace("*", " * ").replace("__restrict__", "").split()
    if "*" in words: out.append(" ".join(w for w in words[:words.index("*")]) + "*")
    else: out.append(" ".join(words[:-1]))
  return out


_DYNAMIC = re.compile(r"extern __shared__ __align__\(16\) unsigned char \w+\[\];  // (\d+) bytes")


def _dynamic_need(source: str, name: str) -> int:
  """The bytes of dynamic shared memory kernel ``name`` of ``source`` declares (codegen/cuda.py's comment), or 0."""
  body = next((part for part in source.split('extern "C" __global__')[1:] if re.search(rf"\b{name}\(", part.split("{")[0])), "")
  m = _DYNAMIC.search(body)
  return int(m.group(1)) if m else 0


class FakeDriver:
  name = "cuda"

  def __init__(self, cc=(8, 6), driver_version=13000, gpu_name="Fake GPU", max_ptx: tuple[int, int] | None = None,
               launch_s: float = 1e-5, max_shared_optin: int = 99 * 1024):
    self._info = DeviceInfo(gpu_name, cc, driver_version, 1 << 34, "fake")
    self.max_ptx, self.launch_s = max_ptx, launch_s
    self.calls: list[tuple] = []
    self.mem: dict[int, np.ndarray] = {}
    self.images: dict[bytes, tuple[str, str, str]] = {}   # image -> (source, build arch, "cubin" | "ptx")
    self._next = 1 << 20
    self._clock = 0.0
    self._capturing: list | None = None
    self.fail_launch: dict[str, str] = {}    # kernel name -> CUDA error code to raise on launch
    self.allowed: dict[tuple, int] = {}      # (simulator module, kernel) -> dynamic shared memory allowed
    self.max_shared_optin = max_shared_optin

  def know(self, binary) -> None:
    """Learn the source behind a CudaBinary's images (the conftest fixture calls this on load)."""
    self.images[binary.cubin] = (binary.source, binary.arch, "cubin")
    self.images[binary.ptx.encode() + b"\0"] = (binary.source, binary.arch, "ptx")

  # -- what the tests look at
  def count(self, what: str) -> int: return sum(1 for c in self.calls if c[0] == what)
  def of(self, what: str) -> list[tuple]: return [c for c in self.calls if c[0] == what]
  @property
  def live_bytes(self) -> int: return sum(a.nbytes for a in self.mem.values())

  # -- Driver interface
  def info(self) -> DeviceInfo: return self._info

  def module_load(self, image: bytes):
    if image not in self.images: raise DriverError("fake driver: unknown image", "CUDA_ERROR_INVALID_IMAGE")
    source, arch, kind = self.images[image]
    self.calls.append(("module_load", kind, arch))
    (bm, bn), (dm, dn) = arch_compute_capability(arch), self._info.compute_capability
    if kind == "cubin" and not (bm == dm and dn >= bn):
      raise DriverError("no kernel image is available for execution on the device", "CUDA_ERROR_NO_BINARY_FOR_GPU")
    if kind == "ptx" and self.max_ptx is not None and ptx_isa(image.decode().rstrip("\0")) > self.max_ptx:
      raise DriverError("the provided PTX was compiled with an unsupported toolchain", "CUDA_ERROR_UNSUPPORTED_PTX_VERSION")
    return {"source": source, "sims": {}}

  def module_unload(self, module) -> None: self.calls.append(("module_unload",))

  def function(self, module, name: str):
    if name not in module["sims"]:
      module["sims"][name] = build_simulator(module["source"], {name: param_types(module["source"], name)})
    return (module["sims"][name], name, _dynamic_need(module["source"], name))

  def allow_shared(self, fn, nbytes: int) -> None:
    sim, name, _ = fn
    if nbytes > self.max_shared_optin:
      raise DriverError(f"fake driver: {nbytes} bytes of dynamic shared memory > {self.max_shared_optin}",
                        "CUDA_ERROR_INVALID_VALUE")
    self.allowed[(id(sim), name)] = nbytes
    self.calls.append(("allow_shared", name, nbytes))

  def alloc(self, nbytes: int) -> int:
    p = self._next
    self._next += (nbytes + 255) // 256 * 256 + 256
    self.mem[p] = np.full(nbytes, 0xFF, np.uint8)
    self.calls.append(("alloc", p, nbytes))
    return p

  def free(self, ptr: int) -> None:
    if ptr not in self.mem: raise DriverError(f"free of unknown pointer {ptr:#x}", "CUDA_ERROR_INVALID_VALUE")
    del self.mem[ptr]
    self.calls.append(("free", ptr))

  def htod(self, ptr: int, src: np.ndarray, stream=None) -> None:
    b = np.ascontiguousarray(src).view(np.uint8).reshape(-1)
    self.mem[ptr][:b.size] = b
    self.calls.append(("htod", ptr, b.size))

  def dtoh(self, dst: np.ndarray, ptr: int, stream=None) -> None:
    dst.reshape(-1).view(np.uint8)[:] = self.mem[ptr][:dst.nbytes]
    self.calls.append(("dtoh", ptr, dst.nbytes))

  def memset(self, ptr: int, nbytes: int, stream=None) -> None:
    if nbytes == self.mem[ptr].size:   # a fresh zeroed array: its pages are mapped lazily, so the timing loop's
      self.mem[ptr] = np.zeros(nbytes, np.uint8)   # 256 MB L2 flushes (up to 1000 per program) cost ~nothing
    else:
      self.mem[ptr][:nbytes] = 0
    self.calls.append(("memset", ptr, nbytes))

  def launch(self, fn, grid, block, shared_bytes, args, stream=None) -> None:
    if self._capturing is not None:
      self._capturing.append((fn, tuple(grid), tuple(block), shared_bytes, list(args)))
      return
    self._run(fn, grid, block, shared_bytes, args)

  def _run(self, fn, grid, block, shared_bytes, args) -> None:
    sim, name, need = fn
    self.calls.append(("launch", name, tuple(grid), tuple(block), tuple(args)))
    if name in self.fail_launch: raise DriverError(f"fake failure of {name}", self.fail_launch[name])
    # as the driver: more than 48 KiB only where allowed (else CUDA_ERROR_INVALID_VALUE); and, which a GPU would
    # not say (it reads past the end), fewer bytes than the kernel's dynamic shared array holds
    if shared_bytes > STATIC_SHARED_BYTES and self.allowed.get((id(sim), name), 0) < shared_bytes:
      raise DriverError(f"fake driver: {name} launched with {shared_bytes} bytes of dynamic shared memory, not "
                        "allowed", "CUDA_ERROR_INVALID_VALUE")
    if need > shared_bytes:
      raise DriverError(f"fake driver: {name} needs {need} bytes of dynamic shared memory, launched with "
                        f"{shared_bytes}", "CUDA_ERROR_ILLEGAL_ADDRESS")
    params = sim.kernels[name]
    vals = [self.mem[a].view(p.dtype) if p.pointer else a for p, a in zip(params, args)]
    sim.launch(name, tuple(grid), tuple(block), vals)
    self._clock += self.launch_s

  def stream(self): return object()
  def sync(self, stream=None) -> None: self.calls.append(("sync",))
  def event(self): return {"t": None}
  def record(self, event, stream=None) -> None: event["t"] = self._clock
  def elapsed_s(self, start, end) -> float: return end["t"] - start["t"]

  def capture_begin(self, stream) -> None:
    self._capturing = []
    self.calls.append(("capture_begin",))

  def capture_end(self, stream):
    graph, self._capturing = self._capturing, None
    self.calls.append(("capture_end", len(graph)))
    return graph

  def graph_launch(self, graph, stream) -> None:
    self.calls.append(("graph_launch", len(graph)))
    for g in graph: self._run(*g)

  def graph_destroy(self, graph) -> None: self.calls.append(("graph_destroy",))


def install(monkeypatch, **kw) -> FakeDriver:
  """Install a FakeDriver(**kw) as the "cuda" backend (the default) for one test, teaching it every
  binary minicomp loads; monkeypatch restores the real backend afterwards."""
  from minicomp.codegen import driver as drv_mod
  from minicomp.codegen.gpu_runtime import GpuModule
  fake = FakeDriver(**kw)
  orig = GpuModule.__init__

  def init(self, binary, driver=None):
    d = driver or drv_mod.get_driver()
    if isinstance(d, FakeDriver): d.know(binary)
    orig(self, binary, d)
  monkeypatch.setattr(GpuModule, "__init__", init)
  monkeypatch.setenv(drv_mod.ENV_BACKEND, "cuda")
  monkeypatch.delitem(drv_mod._failures, "cuda", raising=False)   # both undone after the test
  monkeypatch.setitem(drv_mod._drivers, "cuda", fake)
  return fake


def setup_worker() -> None:
  """A Ray worker's setup hook (``cluster.connect(setup="fake_gpu.setup_worker")``, with this folder on the
  nodes' PYTHONPATH): a FakeDriver of an sm_90 GPU as the worker's "cuda" backend, for the whole process."""
  import pytest
  install(pytest.MonkeyPatch(), cc=(9, 0), gpu_name="Fake H100")
