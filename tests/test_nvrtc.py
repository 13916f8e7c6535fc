"""NVRTC compilation (no GPU needed), ptxas resource parsing, the cache, and kernels on a real GPU (gpu-marked)."""
from __future__ import annotations

import numpy as np
import pytest

from minicomp.codegen import nvrtc
from minicomp.codegen.gpu_runtime import GpuModule, gpu_available, gpu_status, kernel_params
from minicomp.codegen.nvrtc import Resources, compile_cuda, parse_ptxas_log
from minicomp.errors import NVRTCError
from minicomp.target import TargetError

SMEM_KERNEL = """
extern "C" __global__ void reverse(float* __restrict__ a) {
  __shared__ float tile[256];
  tile[threadIdx.x] = a[blockIdx.x * 256 + threadIdx.x];
  __syncthreads();
  a[blockIdx.x * 256 + threadIdx.x] = tile[255 - threadIdx.x];
}
"""

TWO_KERNELS = """
extern "C" __global__ void add(const float* __restrict__ x, const float* __restrict__ y, float* z, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) z[i] = x[i] + y[i];
}
extern "C" __global__ void scale(float* z, float s, int n) {
  __shared__ double buf[64];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  buf[threadIdx.x % 64] = s;
  __syncthreads();
  if (i < n) z[i] *= (float)buf[(threadIdx.x + 1) % 64];
}
"""

BROKEN = """extern "C" __global__ void k(float* a) {
  int i = threadIdx.x;
  float v = a[i] + ;
  a[i] = v * undefined_name;
}
"""


@pytest.fixture(autouse=True)
def fresh_cache(tmp_path, monkeypatch):
  """Each test gets its own disk cache folder and an empty in-memory cache."""
  monkeypatch.setenv("MINICOMP_CACHE_DIR", str(tmp_path / "cache"))
  monkeypatch.delenv("MINICOMP_NVRTC_CACHE", raising=False)
  nvrtc.clear_memory_cache()
  yield
  nvrtc.clear_memory_cache()


@pytest.mark.parametrize("arch", ["sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90"])
def test_compile_each_arch(arch):
  b = compile_cuda(SMEM_KERNEL, arch)
  r = b.resources["reverse"]
  assert b.arch == arch and r.registers > 0 and r.barriers == 1
  assert r.shared_bytes == 256 * 4
  assert r.spill_stores == r.spill_loads == 0
  assert len(b.cubin) > 0 and f".target {arch}" in b.ptx
  assert not any("deprecated" in w for w in b.warnings)  # sm_70's NVRTC notice is filtered
  assert "spills=0/0" in str(r) and "smem=1024B" in str(r)


def test_two_kernels_and_options():
  b = compile_cuda(TWO_KERNELS, "sm_86", ["--use_fast_math"])
  assert set(b.resources) == {"add", "scale"}
  assert b.resources["add"].shared_bytes == 0 and b.resources["scale"].shared_bytes == 64 * 8
  assert b.options == ("--use_fast_math",)
  assert compile_cuda(TWO_KERNELS, "sm_86").ptx != b.ptx  # options are part of the key and change the code


def test_kernels_are_compiled_minimal_to_the_same_binary():
  """minicomp's kernels get ``--minimal`` (codegen/kernel.py KERNEL_OPTIONS), which drops declarations they never
  use and changes no byte of the PTX or CUBIN: checked here on an fp32 tiled convolution and an fp16 one."""
  from minicomp import workloads as W
  from minicomp.codegen.kernel import KERNEL_OPTIONS, build
  from minicomp.graph.schedules import default_schedule
  from minicomp.ir.dag import ComputeDAG
  assert "--minimal" in KERNEL_OPTIONS
  for wl in (W.conv2d(1, 16, 8, 8, 16, 3, 1, 1), W.conv2d(1, 16, 8, 8, 16, 3, 1, 1, dtype="float16")):
    k = build(default_schedule(ComputeDAG(wl.outputs), "sm_86"), "sm_86")
    plain = compile_cuda(k.source, "sm_86")
    assert k.binary.options == KERNEL_OPTIONS and plain.options == ()
    assert k.binary.ptx == plain.ptx and k.binary.cubin == plain.cubin


def test_syntax_error_names_source_line():
  with pytest.raises(NVRTCError) as info:
    compile_cuda(BROKEN, "sm_80")
  msg = str(info.value)
  assert "(3): error" in msg and "(4): error" in msg
  assert ">    3 |   float v = a[i] + ;" in msg  # the offending line, numbered and marked
  assert "   1 | extern" in msg and "   5 | }" in msg  # two lines of context either side
  assert info.value.source == BROKEN and "undefined_name" in info.value.log


def test_bad_arch_and_option():
  with pytest.raises(TargetError):
    compile_cuda(SMEM_KERNEL, "sm_61")
  with pytest.raises(TargetError):
    compile_cuda(SMEM_KERNEL, "sm_80", ["--gpu-architecture=sm_86"])
  with pytest.raises(NVRTCError, match="unrecognized option"):
    compile_cuda(SMEM_KERNEL, "sm_80", ["--no-such-option"])


def test_cache_memory_and_disk(tmp_path, monkeypatch):
  first = compile_cuda(SMEM_KERNEL, "sm_86")
  assert compile_cuda(SMEM_KERNEL, "sm_86") is first  # in-memory hit
  files = sorted(p.suffix for p in (tmp_path / "cache" / "nvrtc").iterdir())
  assert files == [".cubin", ".log", ".ptx"]
  nvrtc.clear_memory_cache()
  monkeypatch.setattr(nvrtc, "_compile", lambda *a: pytest.fail("should be served from the disk cache"))
  again = compile_cuda(SMEM_KERNEL, "sm_86")
  assert again == first and again is not first
  assert again.resources == first.resources  # re-parsed from the cached log


def test_disk_cache_disabled(tmp_path, monkeypatch):
  monkeypatch.setenv("MINICOMP_NVRTC_CACHE", "0")
  compile_cuda(SMEM_KERNEL, "sm_75")
  d = tmp_path / "cache" / "nvrtc"
  assert not d.exists() or not any(d.iterdir())


def test_nvrtc_version():
  major, minor = nvrtc.nvrtc_version()
  assert major == 12 and minor >= 0


def test_parse_ptxas_log_with_spills():
  log = """nvrtc: warning: Architectures prior to '<compute/sm>_75' are deprecated
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'gemm' for 'sm_80'
ptxas info    : Function properties for gemm
ptxas         .     48 bytes stack frame, 40 bytes spill stores, 36 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 48 bytes cumulative stack size, 16384 bytes smem, 380 bytes cmem[0]
ptxas info    : Compile time = 12.5 ms
ptxas info    : Compiling entry function '_Z4tinyPf' for 'sm_80'
ptxas info    : Function properties for _Z4tinyPf
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers
ptxas info    : Function properties for _Z6helperf
ptxas         .     16 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
"""
  res = parse_ptxas_log(log)
  assert res == {
      "gemm": Resources(registers=255, shared_bytes=16384, spill_stores=40, spill_loads=36,
                        stack_bytes=48, barriers=1, constant_bytes=380),
      "_Z4tinyPf": Resources(registers=8),  # sm_90-style line without smem / cmem
  }  # the non-entry helper is not a kernel
  assert str(res["gemm"]) == "regs=255 smem=16384B spills=40/36 stack=48B"
  assert parse_ptxas_log("") == {}


def test_kernel_params():
  assert kernel_params(TWO_KERNELS) == {"add": (True, True, False, None), "scale": (False, None, None)}
  src = 'extern "C" __global__ void __launch_bounds__(128) k(float* const p, int n) {}'
  assert kernel_params(src) == {"k": (False, None)}


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["cuda", "pycuda"])
def test_gpu_module_runs_on_gpu(backend):
  if not gpu_available(backend):
    pytest.skip(f"needs a CUDA GPU through the {backend!r} backend: {gpu_status(backend)}")
  from minicomp.codegen.driver import get_driver
  from minicomp.target import SUPPORTED_ARCHS
  drv = get_driver(backend)
  arch = drv.info().arch if drv.info().arch in SUPPORTED_ARCHS else "sm_90"   # a newer GPU JITs the PTX
  mod = GpuModule(compile_cuda(TWO_KERNELS + SMEM_KERNEL, arch), drv)
  n = 1000
  rng = np.random.default_rng(0)
  x, y, z = rng.random(n, np.float32), rng.random(n, np.float32), np.zeros(n, np.float32)
  seconds = mod.launch("add", grid=(n + 255) // 256, block=256, shared_bytes=0, args=[x, y, z, n], time=True)
  np.testing.assert_allclose(z, x + y, rtol=1e-6)
  assert seconds is not None and seconds > 0
  mod.launch("scale", (n + 255) // 256, 256, 0, [z, 2.0, n])
  np.testing.assert_allclose(z, 2 * (x + y), rtol=1e-6)
  a = rng.random(512, np.float32)
  expect = np.concatenate([a[255::-1], a[:255:-1]])
  mod.launch("reverse", 2, 256, 0, [a])
  np.testing.assert_array_equal(a, expect)


def test_an_arch_this_nvrtc_refuses_names_the_fix(monkeypatch):
  monkeypatch.setattr(nvrtc, "nvrtc_version", lambda: (13, 0))      # NVRTC 13 refuses sm_70 (CUDA 13 dropped Volta)
  msg = nvrtc._error_message("", "sm_70", ["--gpu-architecture=sm_70"], "NVRTC_ERROR_INVALID_OPTION",
                             "nvrtc: error: invalid value for --gpu-architecture (-arch)")
  assert "NVRTC 13.x dropped sm_70" in msg and "nvidia-cuda-nvrtc-cu12" in msg
  monkeypatch.setattr(nvrtc, "nvrtc_version", lambda: (12, 4))
  msg = nvrtc._error_message("", "sm_120", [], "NVRTC_ERROR_INVALID_OPTION", "invalid value for --gpu-architecture")
  assert "need NVRTC 12.8 or newer" in msg
