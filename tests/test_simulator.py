"""The CPU simulator runs hand-written CUDA C (written the way the emitter writes it) against numpy."""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from minicomp.codegen.simulator import build_simulator
from minicomp.errors import SimulatorCompileError, SimulatorError

F, CF, I = "float*", "const float*", "int"


@pytest.fixture(scope="session")
def _sim_cache(tmp_path_factory):
  return tmp_path_factory.mktemp("sim-cache")


@pytest.fixture(autouse=True)
def _isolated_cache(_sim_cache, monkeypatch):
  monkeypatch.setenv("MINICOMP_CACHE_DIR", str(_sim_cache))


def _rand(*shape, seed=0):
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


ADD = """\
extern "C" __global__ void __launch_bounds__(256) add(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) C[i] = A[i] + B[i];
}
"""


def test_elementwise_add_with_guard():
  mod = build_simulator(ADD, {"add": [CF, CF, F, I]})
  n = 1000
  a, b, c = _rand(n, seed=1), _rand(n, seed=2), np.full(1024, -7.0, np.float32)
  mod.launch("add", (4, 1, 1), (256, 1, 1), [a, b, c, n])
  np.testing.assert_array_equal(c[:n], a + b)
  assert (c[n:] == -7.0).all()  # the guard kept threads n..1023 from writing


MATMUL = """\
extern "C" __global__ void __launch_bounds__(256) matmul(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int N) {
  __shared__ __align__(16) float As[8][64];
  __shared__ __align__(16) float Bs[8][64];
  int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  int row0 = blockIdx.y * 64, col0 = blockIdx.x * 64;
  float acc[4][4] = {{0.0f}};
  for (int k0 = 0; k0 < N; k0 += 8) {
    for (int l = 0; l < 2; ++l) {
      int idx = threadIdx.x + l * 256;
      As[idx % 8][idx / 8] = A[(row0 + idx / 8) * N + k0 + idx % 8];
      Bs[idx / 64][idx % 64] = B[(k0 + idx / 64) * N + col0 + idx % 64];
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < 8; ++k)
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
          acc[i][j] += As[k][ty * 4 + i] * Bs[k][tx * 4 + j];
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j)
      C[(row0 + ty * 4 + i) * N + col0 + tx * 4 + j] = acc[i][j];
}
"""


def test_tiled_matmul_128_shared_memory(tmp_path, monkeypatch):
  monkeypatch.setenv("MINICOMP_CACHE_DIR", str(tmp_path))  # a cold build
  n = 128
  a, b, c = _rand(n, n, seed=3), _rand(n, n, seed=4), np.zeros((n, n), np.float32)
  t0 = time.perf_counter()
  mod = build_simulator(MATMUL, {"matmul": [CF, CF, F, I]})
  t1 = time.perf_counter()
  mod.launch("matmul", (2, 2, 1), (256, 1, 1), [a, b, c, n])
  t2 = time.perf_counter()
  np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
  mod2 = build_simulator(MATMUL, {"matmul": [CF, CF, F, I]})
  t3 = time.perf_counter()
  c[:] = 0
  mod2.launch("matmul", (2, 2, 1), (256, 1, 1), [a, b, c, n])
  t4 = time.perf_counter()
  np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
  print(f"\nmatmul 128^3: cold build {t1 - t0:.3f}s run {t2 - t1:.4f}s | cached build {t3 - t2:.4f}s run {t4 - t3:.4f}s")
  assert t2 - t0 < 10.0 and t3 - t2 < 0.5 and t4 - t3 < 1.0


BLOCK_SUM = """\
extern "C" __global__ void __launch_bounds__(256) block_sum(const float* __restrict__ X, float* __restrict__ out, int n) {
  __shared__ float s[256];
  int t = threadIdx.x, i = blockIdx.x * 256 + t;
  s[t] = i < n ? X[i] : 0.0f;
  __syncthreads();
  for (int h = 128; h > 0; h >>= 1) {
    if (t < h) s[t] += s[t + h];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}
"""


def test_block_tree_reduction():
  mod = build_simulator(BLOCK_SUM, {"block_sum": [CF, F, I]})
  n = 1000
  x, out = _rand(n, seed=5), np.zeros(4, np.float32)
  mod.launch("block_sum", (4, 1, 1), (256, 1, 1), [x, out, n])
  np.testing.assert_allclose(out, np.pad(x, (0, 24)).reshape(4, 256).sum(1), rtol=1e-5, atol=1e-5)


WARP_SUM = """\
extern "C" __global__ void __launch_bounds__(256) warp_sum(const float* __restrict__ X, float* __restrict__ out, float* __restrict__ allsum, int* __restrict__ lanes) {
  __shared__ float partial[8];
  int t = threadIdx.x;
  float v = X[blockIdx.x * 256 + t];
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffff, v, off);
  if ((t & 31) == 0) partial[t >> 5] = v;
  __syncthreads();
  if (t < 32) {
    float w = t < 8 ? partial[t] : 0.0f;
    for (int m = 16; m > 0; m >>= 1) w += __shfl_xor_sync(0xffffffff, w, m);
    allsum[blockIdx.x * 32 + t] = w;
    if (t == 0) out[blockIdx.x] = w;
    lanes[(blockIdx.x * 32 + t) * 2] = __shfl_sync(0xffffffff, t * 3, 5);
    lanes[(blockIdx.x * 32 + t) * 2 + 1] = __shfl_up_sync(0xffffffff, t, 1);
  }
}
"""


def test_warp_shuffle_reduction():
  mod = build_simulator(WARP_SUM, {"warp_sum": [CF, F, F, "int*"]})
  x = _rand(3 * 256, seed=6)
  out, allsum, lanes = np.zeros(3, np.float32), np.zeros(3 * 32, np.float32), np.zeros(3 * 64, np.int32)
  mod.launch("warp_sum", (3, 1, 1), (256, 1, 1), [x, out, allsum, lanes])
  want = x.reshape(3, 256).sum(1)
  np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(allsum.reshape(3, 32), np.repeat(want[:, None], 32, 1), rtol=1e-5, atol=1e-5)
  lanes = lanes.reshape(3, 32, 2)
  assert (lanes[..., 0] == 15).all()  # broadcast from lane 5
  np.testing.assert_array_equal(lanes[0, :, 1], np.maximum(np.arange(32) - 1, 0))  # lane 0 keeps its own


VEC4 = """\
extern "C" __global__ void __launch_bounds__(64) axpy4(const float* __restrict__ X, float* __restrict__ Y, int* __restrict__ info, int n4) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i == 0) { info[0] = sizeof(float4); info[1] = alignof(float4); info[2] = alignof(float2); info[3] = alignof(int4); }
  if (i < n4) {
    float4 x = reinterpret_cast<const float4*>(X)[i];
    float4 y = __ldg(reinterpret_cast<const float4*>(Y) + i);
    reinterpret_cast<float4*>(Y)[i] = make_float4(2.0f * x.x + y.x, 2.0f * x.y + y.y, 2.0f * x.z + y.z, fmaxf(x.w, y.w));
  }
}
"""


def test_float4_vector_loads_and_stores():
  mod = build_simulator(VEC4, {"axpy4": [CF, F, "int*", I]})
  x, y, info = _rand(400, seed=7), _rand(400, seed=8), np.zeros(4, np.int32)
  want = (2 * x + y).reshape(-1, 4)
  want[:, 3] = np.maximum(x, y).reshape(-1, 4)[:, 3]
  mod.launch("axpy4", (2, 1, 1), (64, 1, 1), [x, y, info, 100])
  np.testing.assert_allclose(y.reshape(-1, 4), want, rtol=1e-6)
  assert info.tolist() == [16, 16, 8, 16]


INDEX3D = """\
extern "C" __global__ void __launch_bounds__(64) index3d(int* __restrict__ out, int* __restrict__ rev) {
  __shared__ int s[64];
  int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  int b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  out[b * 64 + t] = threadIdx.x + 10 * threadIdx.y + 100 * threadIdx.z + 1000 * blockIdx.x + 10000 * blockIdx.y + 100000 * blockIdx.z;
  s[t] = t;
  __syncthreads();
  rev[b * 64 + t] = s[63 - t];
}
"""


def test_3d_block_and_grid_indices():
  mod = build_simulator(INDEX3D, {"index3d": ["int*", "int*"]})
  out, rev = np.zeros(12 * 64, np.int32), np.zeros(12 * 64, np.int32)
  mod.launch("index3d", (2, 3, 2), (8, 4, 2), [out, rev])
  bz, by, bx, tz, ty, tx = np.meshgrid(*map(np.arange, (2, 3, 2, 2, 4, 8)), indexing="ij")
  want = tx + 10 * ty + 100 * tz + 1000 * bx + 10000 * by + 100000 * bz
  np.testing.assert_array_equal(out, want.ravel())
  np.testing.assert_array_equal(rev.reshape(12, 64), np.tile(np.arange(63, -1, -1), (12, 1)))


EARLY_EXIT = """\
extern "C" __global__ void __launch_bounds__(256) early_exit(const float* __restrict__ X, float* __restrict__ Y, int active) {
  __shared__ float s[256];
  int t = threadIdx.x;
  if (t >= active) return;
  s[t] = X[blockIdx.x * 256 + t];
  __syncthreads();
  float v = s[(t + 1) % active];
  if (t % 2) return;
  Y[blockIdx.x * 256 + t] = 2.0f * v;
}
"""


def test_early_return_counts_as_arrived_at_barrier():
  mod = build_simulator(EARLY_EXIT, {"early_exit": [CF, F, I]})
  x, y, active = _rand(2 * 256, seed=9), np.zeros(2 * 256, np.float32), 100
  mod.launch("early_exit", (2, 1, 1), (256, 1, 1), [x, y, active])
  want = np.zeros((2, 256), np.float32)
  t = np.arange(0, active, 2)
  want[:, t] = 2 * x.reshape(2, 256)[:, (t + 1) % active]
  np.testing.assert_array_equal(y.reshape(2, 256), want)


def test_compile_error_names_the_kernel_line():
  src = 'extern "C" __global__ void broken(float* C) {\n  int i = threadIdx.x;\n  C[i] = undefined_thing;\n}\n'
  with pytest.raises(SimulatorCompileError) as e:
    build_simulator(src, {"broken": [F]})
  assert "kernel.cu:3" in str(e.value) and "C[i] = undefined_thing;" in str(e.value)
  assert "undefined_thing" in e.value.log and e.value.source == src


def test_argument_checks():
  mod = build_simulator(ADD, {"add": [CF, CF, F, I]})
  a = np.zeros(8, np.float32)
  with pytest.raises(SimulatorError, match=r"argument 0 \(A, const float\*\) expects dtype float32, got float64"):
    mod.launch("add", (1, 1, 1), (8, 1, 1), [a.astype(np.float64), a, a, 8])
  with pytest.raises(SimulatorError, match="C-contiguous"):
    mod.launch("add", (1, 1, 1), (8, 1, 1), [np.zeros(16, np.float32)[::2], a, a, 8])
  with pytest.raises(SimulatorError, match=r"argument 3 \(n, int\) expects an integer"):
    mod.launch("add", (1, 1, 1), (8, 1, 1), [a, a, a, 8.0])
  with pytest.raises(SimulatorError, match="takes 4 arguments"):
    mod.launch("add", (1, 1, 1), (8, 1, 1), [a, a, a])
  with pytest.raises(SimulatorError, match="more than 1024"):
    mod.launch("add", (1, 1, 1), (64, 32, 1), [a, a, a, 8])
  with pytest.raises(SimulatorError, match=r"grid.x = 0"):
    mod.launch("add", (0, 1, 1), (8, 1, 1), [a, a, a, 8])
  with pytest.raises(SimulatorError, match="not defined"):
    build_simulator(ADD, {"sub": [CF, CF, F, I]})


BAD_SYNC = """\
extern "C" __global__ void __launch_bounds__(64) deadlock(float* Y) {
  float v = Y[threadIdx.x];
  if (threadIdx.x % 2 == 0) __syncthreads();
  else v = __shfl_xor_sync(0xffffffff, v, 1);
  Y[threadIdx.x] = v;
}
extern "C" __global__ void __launch_bounds__(64) divergent(float* Y) {
  if (threadIdx.x < 32) __syncthreads();
  __syncthreads();
  Y[threadIdx.x] = 1.0f;
}
"""


def test_deadlock_and_divergent_barrier_raise():
  mod = build_simulator(BAD_SYNC, {"deadlock": [F], "divergent": [F]})
  y = np.zeros(64, np.float32)
  with pytest.raises(SimulatorError, match=r"deadlock: 32 thread\(s\) wait at __syncthreads\(\) \(line 3\), 32 at a warp-level"):
    mod.launch("deadlock", (1, 1, 1), (64, 1, 1), [y])
  with pytest.raises(SimulatorError, match=r"divergent __syncthreads\(\): reached the one on line 9 while 32"):
    mod.launch("divergent", (1, 1, 1), (64, 1, 1), [y])
  mod.launch("divergent", (1, 1, 1), (32, 1, 1), [y])  # the module still works afterwards
  assert (y[:32] == 1.0).all()


FAULTS = """\
extern "C" __global__ void __launch_bounds__(32) wild(float* Y, long long off) { if (threadIdx.x == 7) Y[off] = 1.0f; }
extern "C" __global__ void __launch_bounds__(32) divide(int* Y, int d) { Y[threadIdx.x] = 10 / d; }
"""


def test_memory_and_arithmetic_faults_raise():
  mod = build_simulator(FAULTS, {"wild": [F, "long long"], "divide": ["int*", I]})
  y = np.zeros(32, np.float32)
  with pytest.raises(SimulatorError, match=r"block \(0,0,0\) thread \(7,0,0\): memory fault"):
    mod.launch("wild", (1, 1, 1), (32, 1, 1), [y, -(y.ctypes.data // 4) + 4])
  with pytest.raises(SimulatorError, match="SIGFPE"):
    mod.launch("divide", (1, 1, 1), (32, 1, 1), [np.zeros(32, np.int32), 0])
  out = np.zeros(32, np.int32)
  mod.launch("divide", (1, 1, 1), (32, 1, 1), [out, 3])
  assert (out == 3).all()


def test_launches_from_several_python_threads():
  mod = build_simulator(ADD, {"add": [CF, CF, F, I]})

  def job(seed):
    a, b, c = _rand(3000, seed=seed), _rand(3000, seed=seed + 100), np.zeros(3000, np.float32)
    for _ in range(10):
      mod.launch("add", (12, 1, 1), (256, 1, 1), [a, b, c, 3000])
    return np.array_equal(c, a + b)

  with ThreadPoolExecutor(4) as pool:
    assert all(pool.map(job, range(8)))


def test_builds_use_the_precompiled_shim_and_fall_back_to_its_text(tmp_path, monkeypatch):
  """With g++ the shim is precompiled once into the cache, and g++ takes the .gch (``-H`` marks a used one
  with ``!``); a .gch g++ cannot use (here: garbage) makes it read the header's text, and the build is right."""
  import subprocess
  import minicomp.codegen.simulator as S
  monkeypatch.setenv("MINICOMP_CACHE_DIR", str(tmp_path))
  d = S._shim_dir("g++")
  gch = d / "cuda_shim.h.gch"
  assert d != S.SHIM_PATH.parent and gch.is_file() and (d / "cuda_shim.h").read_text() == S._shim_text()
  src = tmp_path / "t.cpp"
  src.write_text('#include "cuda_shim.h"\n' + ADD)
  h = subprocess.run(["g++", *S.OBJECT_FLAGS, "-Winvalid-pch", "-H", "-fsyntax-only", f"-I{d}", str(src)],
                     capture_output=True, text=True)
  assert h.returncode == 0 and f"! {gch}" in h.stderr, h.stderr[:2000]
  gch.write_bytes(b"not a precompiled header")
  mod = build_simulator(ADD + "// fresh source, fresh build\n", {"add": [CF, CF, F, I]})
  a, b, c = _rand(300, seed=1), _rand(300, seed=2), np.zeros(300, np.float32)
  mod.launch("add", (2, 1, 1), (256, 1, 1), [a, b, c, 300])
  np.testing.assert_array_equal(c, a + b)


def test_builds_link_the_runtime_compiled_once_and_survive_a_damaged_one(tmp_path, monkeypatch):
  """The shim's runtime is compiled once into the cache and linked by every build (the kernel's own
  translation unit does not define it: alone it does not link); a damaged runtime object is dropped and
  the build defines the runtime itself, still right."""
  import subprocess
  import minicomp.codegen.simulator as S
  monkeypatch.setenv("MINICOMP_CACHE_DIR", str(tmp_path))
  mod = build_simulator(WARP_SUM, {"warp_sum": [CF, F, F, "int*"]})
  (rt,) = (tmp_path / "sim").glob("runtime-*.o")
  stamp = rt.stat().st_mtime_ns
  build_simulator(ADD + "// another build\n", {"add": [CF, CF, F, I]})
  assert rt.stat().st_mtime_ns == stamp                  # reused, not rebuilt
  tu = tmp_path / "k.cpp"
  tu.write_text(S._translation_unit(ADD, {"add": S._parse_params(ADD, "add", [CF, CF, F, I])}))
  alone = subprocess.run(["g++", *S.FLAGS, "-Wl,--no-undefined", f"-I{S.SHIM_PATH.parent}", "-o", str(tmp_path / "k.so"), str(tu)],
                         capture_output=True, text=True)
  assert alone.returncode != 0 and "undefined reference" in alone.stderr, alone.stderr[-2000:]
  x = _rand(256, seed=3)
  out, allsum, lanes = np.zeros(1, np.float32), np.zeros(32, np.float32), np.zeros(64, np.int32)
  mod.launch("warp_sum", (1, 1, 1), (256, 1, 1), [x, out, allsum, lanes])
  np.testing.assert_allclose(out, [x.sum()], rtol=1e-5, atol=1e-5)
  rt.write_bytes(b"not an object file")
  mod = build_simulator(ADD + "// built after the runtime object was damaged\n", {"add": [CF, CF, F, I]})
  a, b, c = _rand(300, seed=1), _rand(300, seed=2), np.zeros(300, np.float32)
  mod.launch("add", (2, 1, 1), (256, 1, 1), [a, b, c, 300])
  np.testing.assert_array_equal(c, a + b)
  assert not rt.exists()
