"""The tensor-core instructions (codegen/tensor_core.py): mma.sync, ldmatrix and cp.async in the CPU simulator
against numpy, their fragment layouts, NVRTC builds per arch, the refusals; on a GPU (gpu-marked) the same
kernels against numpy.

The test kernels place each fragment element with the layout functions of ``ir.mma.Intrinsic`` (tables computed
in Python); the simulator implements each instruction from the PTX ISA's figures on its own (cuda_shim.h), so the
two agree only if both are right, and a kernel with a wrong layout is caught. Schedule.tensorize:
test_tensorize.py; what compile does with them: test_tensor_core_compile.py."""
from __future__ import annotations

import numpy as np
import pytest

from minicomp.codegen import tensor_core as tc
from minicomp.codegen.nvrtc import compile_cuda
from minicomp.codegen.simulator import build_simulator
from minicomp.errors import SimulatorError, TargetError

WARPS, N_TILES, K_TILES = 2, 2, 2      # the test product: (16 WARPS) x (8 N_TILES), reduced over K_TILES k-tiles


def _table(name: str, fn, elements: int) -> str:
  rows = ", ".join("{" + ", ".join(f"{{{r}, {c}}}" for r, c in (fn(lane, i) for i in range(elements))) + "}"
                   for lane in range(32))
  return f"__constant__ int {name}[32][{elements}][2] = {{{rows}}};\n"


def mma_kernel(intr: tc.Intrinsic, a_element=None) -> str:
  """D = A B + C of (16 WARPS) x (8 N_TILES) x (k K_TILES): each warp its 16 rows, every n and k tile in turn,
  each lane loading its fragment elements from global memory by the layout tables (``a_element`` replaces A's)."""
  M, N, K = 16 * WARPS, 8 * N_TILES, intr.k * K_TILES
  half = intr.per_register == 2
  elem = "unsigned short" if half else "unsigned char" if intr.integer else "float"
  acc = "int" if intr.integer else "float"

  def pack(mat, table, regs, ld, r0, c0):
    out = []
    for r in range(regs):
      if intr.integer:      # four bytes a register, the first in the low byte
        at = lambda e: f"{mat}[({r0} + {table}[lane][{e}][0]) * {ld} + {c0} + {table}[lane][{e}][1]]"  # noqa: E731
        parts = (f"(unsigned){at(4 * r + h)} << {8 * h}" for h in range(4))
        out.append(f"      {mat.lower()}[{r}] = {' | '.join(parts)};")
      elif half:
        lo, hi = (f"(unsigned){mat}[({r0} + {table}[lane][{2 * r + h}][0]) * {ld} + {c0} + {table}[lane][{2 * r + h}][1]]"
                  for h in (0, 1))
        out.append(f"      {mat.lower()}[{r}] = {lo} | {hi} << 16;")
      else:
        out.append(f"      {mat.lower()}[{r}] = mc_tf32({mat}[({r0} + {table}[lane][{r}][0]) * {ld} + {c0} + {table}[lane][{r}][1]]);")
    return "\n".join(out)
  return (_table("a_rc", a_element or intr.a_element, intr.a_elements) + _table("b_rc", intr.b_element, intr.b_elements)
          + _table("c_rc", intr.c_element, 4) + f"""\
extern "C" __global__ void __launch_bounds__({32 * WARPS}) mma_test(const {elem}* __restrict__ A, const {elem}* __restrict__ B, const {acc}* __restrict__ C, {acc}* __restrict__ D) {{
  int lane = threadIdx.x % 32, m0 = threadIdx.x / 32 * 16;
  for (int n0 = 0; n0 < {N}; n0 += 8) {{
    {acc} acc[4];
    for (int i = 0; i < 4; ++i) acc[i] = C[(m0 + c_rc[lane][i][0]) * {N} + n0 + c_rc[lane][i][1]];
    for (int k0 = 0; k0 < {K}; k0 += {intr.k}) {{
      unsigned a[{intr.a_regs}], b[{intr.b_regs}];
{pack("A", "a_rc", intr.a_regs, K, "m0", "k0")}
{pack("B", "b_rc", intr.b_regs, N, "k0", "n0")}
      {intr.helper}(acc, a, b);
    }}
    for (int i = 0; i < 4; ++i) D[(m0 + c_rc[lane][i][0]) * {N} + n0 + c_rc[lane][i][1]] = acc[i];
  }}
}}
""")


def _tf32(x: np.ndarray) -> np.ndarray:
  """cvt.rna.tf32.f32 in numpy: 10 mantissa bits, round to nearest, ties away from zero."""
  u = x.astype(np.float32).view(np.uint32)
  return ((u + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


def operands(intr: tc.Intrinsic, seed: int = 0):
  """(A, B, C as the kernel takes them; A and B as the float32 values the tensor cores multiply)."""
  rng = np.random.default_rng(seed)
  M, N, K = 16 * WARPS, 8 * N_TILES, intr.k * K_TILES
  if intr.integer:      # the bytes as the kernel reads them; the values their types give them
    a, b = (rng.integers(0, 256, shape).astype(np.uint8) for shape in ((M, K), (K, N)))
    c = rng.integers(-1000, 1000, (M, N)).astype(np.int32)
    return a, b, c, a.view(intr.dtype).astype(np.int64), b.view(intr.b_dtype).astype(np.int64)
  a, b = rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal((K, N)).astype(np.float32)
  c = rng.standard_normal((M, N)).astype(np.float32)
  if intr.dtype == "float16":
    a16, b16 = a.astype(np.float16), b.astype(np.float16)
    return a16.view(np.uint16), b16.view(np.uint16), c, a16.astype(np.float32), b16.astype(np.float32)
  if intr.dtype == "bfloat16":   # values exact in bfloat16: the upper 16 bits of a float32
    a16, b16 = ((x.view(np.uint32) >> 16).astype(np.uint16) for x in (a, b))
    up = lambda h: (h.astype(np.uint32) << 16).view(np.float32)   # noqa: E731
    return a16, b16, c, up(a16), up(b16)
  return a, b, c, _tf32(a), _tf32(b)


def reference(av, bv, c, k: int) -> np.ndarray:
  if c.dtype == np.int32: return (av @ bv + c).astype(np.int32)         # (8-bit integers: exact)
  return (av.astype(np.float64) @ bv.astype(np.float64) + c).astype(np.float32)


def tolerance(av, bv, c) -> float:
  """float32 rounding of a k-long sum of products: k ulps of the largest partial sum, bounded by sum |a b| + |c|;
  none for the integer types."""
  if c.dtype == np.int32: return 0.0
  bound = np.abs(av.astype(np.float64)) @ np.abs(bv.astype(np.float64)) + np.abs(c)
  return float(bound.max()) * av.shape[1] * 2.0 ** -23


def run_mma_sim(intr, source=None, seed=0):
  A, B, C, av, bv = operands(intr, seed)
  elem = "const unsigned short*" if intr.per_register == 2 else \
      "const unsigned char*" if intr.integer else "const float*"
  acc = "int" if intr.integer else "float"
  mod = build_simulator(source or mma_kernel(intr), {"mma_test": [elem, elem, f"const {acc}*", f"{acc}*"]})
  D = np.full(C.shape, -1, np.int32) if intr.integer else np.full(C.shape, np.nan, np.float32)
  mod.launch("mma_test", (1, 1, 1), (32 * WARPS, 1, 1), [A, B, C, D])
  return D, reference(av, bv, C, intr.k), tolerance(av, bv, C)


@pytest.mark.parametrize("name", sorted(tc.INTRINSICS))
def test_mma_in_the_simulator_matches_numpy(name):
  D, ref, tol = run_mma_sim(tc.INTRINSICS[name])
  np.testing.assert_allclose(D, ref, rtol=0, atol=tol)


@pytest.mark.parametrize("name", sorted(tc.INTRINSICS))
def test_a_wrong_fragment_layout_is_caught(name):
  """A kernel that puts A's elements where the instruction does not expect them (A's two column halves, or its
  two row halves, swapped) computes something else in the simulator: the layout is not a tautology."""
  intr = tc.INTRINSICS[name]

  def wrong(lane, i):
    r, c = intr.a_element(lane, i)
    return ((r + 8) % 16, c) if intr.k == 8 else (r, (c + intr.k // 2) % intr.k)
  D, ref, tol = run_mma_sim(intr, mma_kernel(intr, a_element=wrong))
  assert np.abs(D.astype(np.float64) - ref).max() > 100 * tol


def test_layouts_cover_each_tile_once():
  for intr in tc.INTRINSICS.values():
    for fn, n, shape in ((intr.a_element, intr.a_elements, (intr.m, intr.k)), (intr.b_element, intr.b_elements, (intr.k, intr.n)),
                         (intr.c_element, 4, (intr.m, intr.n))):
      seen = sorted(fn(lane, i) for lane in range(32) for i in range(n))
      assert seen == sorted((r, c) for r in range(shape[0]) for c in range(shape[1])), (intr.name, fn.__name__)


def test_tf32_rounds_to_nearest_ties_away():
  x = np.array([1 + 2 ** -11, 1 + 2 ** -10 + 2 ** -11, -(1 + 2 ** -11), 1 + 2 ** -12], np.float32)
  np.testing.assert_array_equal(_tf32(x), np.array([1 + 2 ** -10, 1 + 2 ** -9, -(1 + 2 ** -10), 1], np.float32))


LDMATRIX = """\
extern "C" __global__ void __launch_bounds__(32) ld_test(const unsigned short* __restrict__ A, const unsigned short* __restrict__ B, unsigned* __restrict__ out) {
  __shared__ __align__(16) unsigned short As[16][16];
  __shared__ __align__(16) unsigned short Bs[16][8];
  for (int i = threadIdx.x; i < 256; i += 32) As[i / 16][i % 16] = A[i];
  for (int i = threadIdx.x; i < 128; i += 32) Bs[i / 8][i % 8] = B[i];
  __syncthreads();
  unsigned a[4], b[2];
  mc_ldmatrix_x4(a, &As[threadIdx.x % 16][threadIdx.x / 16 * 8]);
  mc_ldmatrix_x2_trans(b, &Bs[threadIdx.x % 16][0]);
  for (int r = 0; r < 4; ++r) out[threadIdx.x * 6 + r] = a[r];
  for (int r = 0; r < 2; ++r) out[threadIdx.x * 6 + 4 + r] = b[r];
}
"""


def _ld_inputs():
  rng = np.random.default_rng(3)
  return (rng.integers(0, 2 ** 16, (16, 16), dtype=np.uint16), rng.integers(0, 2 ** 16, (16, 8), dtype=np.uint16))


def _ld_expected(A, B) -> np.ndarray:
  """The m16n8k16 A and B fragments each lane should hold, packed two 16-bit elements per register."""
  intr, out = tc.INTRINSICS["m16n8k16_f16"], np.zeros((32, 6), np.uint32)
  for lane in range(32):
    for r in range(4):
      lo, hi = (A[intr.a_element(lane, 2 * r + h)] for h in (0, 1))
      out[lane, r] = int(lo) | int(hi) << 16
    for r in range(2):
      lo, hi = (B[intr.b_element(lane, 2 * r + h)] for h in (0, 1))
      out[lane, 4 + r] = int(lo) | int(hi) << 16
  return out


def test_ldmatrix_gives_the_mma_fragments():
  """x4 of a row-major 16x16 tile is mma's A fragment; x2.trans of a row-major 16x8 (k x n) tile its B fragment."""
  A, B = _ld_inputs()
  mod = build_simulator(LDMATRIX, {"ld_test": ["const unsigned short*", "const unsigned short*", "unsigned*"]})
  out = np.zeros(32 * 6, np.uint32)
  mod.launch("ld_test", (1, 1, 1), (32, 1, 1), [A.ravel(), B.ravel(), out])
  np.testing.assert_array_equal(out.reshape(32, 6), _ld_expected(A, B))


CP_ASYNC = """\
extern "C" __global__ void __launch_bounds__(32) cp_test(const float* __restrict__ src, float* __restrict__ out) {
  __shared__ __align__(16) float s[2][128];
  for (int i = threadIdx.x; i < 256; i += 32) s[i / 128][i % 128] = -1.0f;
  __syncthreads();
  mc_cp_async_16(&s[0][threadIdx.x * 4], src + threadIdx.x * 4, true);
  mc_cp_async_commit();
  mc_cp_async_8(&s[1][threadIdx.x * 4], src + 128 + threadIdx.x * 4, threadIdx.x < 16);
  mc_cp_async_8(&s[1][threadIdx.x * 4 + 2], src + 130 + threadIdx.x * 4, threadIdx.x < 16);
  mc_cp_async_commit();
  mc_cp_async_wait<1>();
  __syncthreads();
  for (int i = threadIdx.x; i < 128; i += 32) { out[i] = s[0][i]; out[128 + i] = s[1][i]; }
  __syncthreads();
  mc_cp_async_wait<0>();
  __syncthreads();
  for (int i = threadIdx.x; i < 128; i += 32) out[256 + i] = s[1][i];
}
"""


def test_cp_async_lands_at_its_wait():
  """Group 0 is in shared memory after wait<1>; group 1 (half of it zero-filled) only after wait<0>: the
  simulator shows a read before the wait as the stale data it may be on a GPU."""
  src = np.arange(256, dtype=np.float32)
  mod = build_simulator(CP_ASYNC, {"cp_test": ["const float*", "float*"]})
  out = np.zeros(384, np.float32)
  mod.launch("cp_test", (2, 1, 1), (32, 1, 1), [src, out])
  np.testing.assert_array_equal(out[:128], src[:128])
  np.testing.assert_array_equal(out[128:256], -1.0)
  np.testing.assert_array_equal(out[256:], np.concatenate([src[128:192], np.zeros(64, np.float32)]))


@pytest.mark.parametrize("source, message", [
  ('extern "C" __global__ void k(float* d) { unsigned a[4] = {0, 0, 0, 0}, b[2] = {0, 0};\n'
   '  mc_mma_m16n8k16_f16(d + 4 * threadIdx.x, a, b); }', "mma.sync needs all 32 lanes"),
  ('extern "C" __global__ void k(float* d) { __shared__ __align__(16) float s[64];\n'
   '  mc_cp_async_16(&s[1], d, true); }', "cp.async of 16 bytes: an address not aligned"),
  ('extern "C" __global__ void k(float* d) { __shared__ __align__(16) unsigned short s[16][16]; unsigned r[1];\n'
   '  mc_ldmatrix_x1(r, &s[threadIdx.x % 8][1]); }', "not 16-byte aligned"),
])
def test_simulator_refuses_what_the_gpu_leaves_undefined(source, message):
  mod = build_simulator(source, {"k": ["float*"]})
  with pytest.raises(SimulatorError, match=message):
    mod.launch("k", (1, 1, 1), (16 if "mma" in source else 32, 1, 1), [np.zeros(128, np.float32)])


@pytest.mark.parametrize("name", sorted(tc.INTRINSICS))
def test_nvrtc_builds_each_intrinsic_for_its_archs(name):
  intr = tc.INTRINSICS[name]
  shape = f"mma.sync.aligned.m{intr.m}n{intr.n}k{intr.k}.row.col.{'s32' if intr.integer else 'f32'}"
  for arch in ("sm_75", "sm_80", "sm_86", "sm_90"):
    if (int(arch[3]), int(arch[4])) < intr.min_cc:
      with pytest.raises(TargetError, match=f"needs sm_{intr.min_cc[0]}{intr.min_cc[1]}"):
        tc.check_arch(intr, arch)
      continue
    tc.check_arch(intr, arch)
    b = compile_cuda(mma_kernel(intr), arch)
    assert shape in b.ptx
    assert 0 < b.resources["mma_test"].registers <= 255 and b.resources["mma_test"].spill_stores == 0


def test_nvrtc_builds_ldmatrix_and_cp_async():
  ptx = compile_cuda(LDMATRIX, "sm_80").ptx
  assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx and "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16" in ptx
  ptx = compile_cuda(CP_ASYNC, "sm_80").ptx
  assert "cp.async.cg.shared.global" in ptx and "cp.async.ca.shared.global" in ptx and "cp.async.wait_group 1" in ptx


def test_arch_refusals():
  for what in [*tc.INTRINSICS.values(), "ldmatrix", "cp.async"]:
    with pytest.raises(TargetError, match="sm_70 does not have it.*m8n8k4"):
      tc.check_arch(what, "sm_70")
  with pytest.raises(TargetError, match="cp.async needs sm_80"):
    tc.check_arch("cp.async", "sm_75")
  tc.check_arch("ldmatrix", "sm_75")


# ---- on a GPU: the same kernels, the same expectations ---------------------------------------------------------

def _gpu():
  from minicomp.codegen.driver import get_driver, gpu_arch, gpu_available, gpu_status
  if not gpu_available():
    pytest.skip(f"needs a CUDA GPU through the default backend: {gpu_status()}")
  return get_driver(), gpu_arch()


def _run_gpu(drv, arch, source, name, arrays, grid, block):
  mod = drv.module_load(compile_cuda(source, arch).cubin)
  ptrs = []
  try:
    for a in arrays:
      p = drv.alloc(max(a.nbytes, 4)); ptrs.append(p); drv.htod(p, np.ascontiguousarray(a))
    drv.launch(drv.function(mod, name), grid, block, 0, ptrs)
    drv.sync()
    for p, a in zip(ptrs, arrays): drv.dtoh(a, p)
  finally:
    for p in ptrs: drv.free(p)
    drv.module_unload(mod)


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(tc.INTRINSICS))
def test_mma_on_the_gpu_matches_numpy(name):
  drv, arch = _gpu()
  intr = tc.INTRINSICS[name]
  try:
    tc.check_arch(intr, arch)
  except TargetError as e:
    pytest.skip(str(e))
  A, B, C, av, bv = operands(intr)
  D = np.full(C.shape, -1, np.int32) if intr.integer else np.full(C.shape, np.nan, np.float32)
  _run_gpu(drv, arch, mma_kernel(intr), "mma_test", [A, B, C, D], (1, 1, 1), (32 * WARPS, 1, 1))
  np.testing.assert_allclose(D, reference(av, bv, C, intr.k), rtol=0, atol=tolerance(av, bv, C))


@pytest.mark.gpu
def test_ldmatrix_and_cp_async_on_the_gpu():
  drv, arch = _gpu()
  A, B = _ld_inputs()
  out = np.zeros(32 * 6, np.uint32)
  _run_gpu(drv, arch, LDMATRIX, "ld_test", [A.ravel(), B.ravel(), out], (1, 1, 1), (32, 1, 1))
  np.testing.assert_array_equal(out.reshape(32, 6), _ld_expected(A, B))
  src, out = np.arange(256, dtype=np.float32), np.zeros(384, np.float32)
  _run_gpu(drv, arch, CP_ASYNC, "cp_test", [src, out], (1, 1, 1), (32, 1, 1))
  np.testing.assert_array_equal(out[:128], src[:128])      # out[128:256] is undefined on a GPU (no wait yet)
  np.testing.assert_array_equal(out[256:], np.concatenate([src[128:192], np.zeros(64, np.float32)]))


def test_the_mma_peak_kernel_sums_what_it_should():
  """research/mma_peak.py's register-only kernel (the GPU's mma.sync ceiling, timed on a GPU): each of its chains
  holds its start plus 16 per instruction in the simulator, for fp16 and bf16 ones."""
  import sys
  from pathlib import Path
  sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "research"))
  import mma_peak
  assert mma_peak.check(iters=2) == 0
