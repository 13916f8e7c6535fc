"""The tensor-core instructions (codegen/tensor_core.py): mma.sync, ldmatrix and cp.async in the CPU simulator
against numpy, their fragment layouts, NVRTC builds per arch, the refusals; on a GPU (gpu-marked) the same
kernels against numpy.

The test kernels place each fragment element with the layout functions of ``tensor_core.Intrinsic`` (tables
computed in Python); the simulator implements each instruction from the PTX ISA's figures on its own
(cuda_shim.h), so the two agree only if both are right, and a kernel with a wrong layout is caught."""
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
  elem, reg = ("unsigned short", "unsigned") if half else ("float", "float")

  def pack(mat, table, regs, ld, r0, c0):
    out = []
    for r in range(regs):
      if half:
        lo, hi = (f"(unsigned){mat}[({r0} + {table}[lane][{2 * r + h}][0]) * {ld} + {c0} + {table}[lane][{2 * r + h}][1]]"
                  for h in (0, 1))
        out.append(f"      {mat.lower()}[{r}] = {lo} | {hi} << 16;")
      else:
        out.append(f"      {mat.lower()}[{r}] = {mat}[({r0} + {table}[lane][{r}][0]) * {ld} + {c0} + {table}[lane][{r}][1]];")
    return "\n".join(out)
  return (_table("a_rc", a_element or intr.a_element, intr.a_elements) + _table("b_rc", intr.b_element, intr.b_elements)
          + _table("c_rc", intr.c_element, 4) + f"""\
extern "C" __global__ void __launch_bounds__({32 * WARPS}) mma_test(const {elem}* __restrict__ A, const {elem}* __restrict__ B, const float* __restrict__ C, float* __restrict__ D) {{
  int lane = threadIdx.x % 32, m0 = threadIdx.x / 32 * 16;
  for (int n0 = 0; n0 < {N}; n0 += 8) {{
    float acc[4];
    for (int i = 0; i < 4; ++i) acc[i] = C[(m0 + c_rc[lane][i][0]) * {N} + n0 + c_rc[lane][i][1]];
    for (int k0 = 0; k0 < {K}; k0 += {intr.k}) {{
      {reg} a[{intr.a_regs}], b[{intr.b_regs}];
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
  return (av.astype(np.float64) @ bv.astype(np.float64) + c).astype(np.float32)


def tolerance(av, bv, c) -> float:
  """float32 rounding of a k-long sum of products: k ulps of the largest partial sum, bounded by sum |a b| + |c|."""
  bound = np.abs(av.astype(np.float64)) @ np.abs(bv.astype(np.float64)) + np.abs(c)
  return float(bound.max()) * av.shape[1] * 2.0 ** -23


def run_mma_sim(intr, source=None, seed=0):
  A, B, C, av, bv = operands(intr, seed)
  elem = "const unsigned short*" if intr.per_register == 2 else "const float*"
  mod = build_simulator(source or mma_kernel(intr), {"mma_test": [elem, elem, "const float*", "float*"]})
  D = np.full(C.shape, np.nan, np.float32)
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
    return ((r + 8) % 16, c) if intr.k == 8 else (r, (c + 8) % 16)
  D, ref, tol = run_mma_sim(intr, mma_kernel(intr, a_element=wrong))
  assert np.abs(D - ref).max() > 100 * tol


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
  shape = f"mma.sync.aligned.m{intr.m}n{intr.n}k{intr.k}.row.col.f32"
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
  D = np.full(C.shape, np.nan, np.float32)
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


# ---- Schedule.tensorize: a matmul whose inner tiles run on mma.sync -----------------------------------------------

TYPES = {"m16n8k16_f16": "float16", "m16n8k16_bf16": "bfloat16", "m16n8k8_f16": "float16", "m16n8k8_tf32": "float32"}


def tensorized_matmul(intr: str, M=64, N=64, K=64, lanes=("g", "t"), k_split=None, mi=1, ni=1):
  """C = A @ B with 128 threads a block (2 x 2 warps), each warp ``mi`` x ``ni`` tiles of 16 x 8 per k-step: rows
  ``i = block + wm (16 mi) + g (2 mi) + 2 m + r`` and columns ``j = block + wn (8 ni) + t (2 ni) + 2 n + c``, so
  lane 4 g + t holds a (2 mi) x (2 ni) box; A and B staged in shared memory per k-step. ``lanes`` orders g and t
  inside the thread index."""
  from minicomp import workloads as W
  dtype = TYPES[intr]
  wl = W.matmul(M, N, K, dtype=dtype)
  C, (A, B) = wl.stages["C"], wl.inputs
  s = mc.Schedule([C])
  CL = s.cache_write(C, "local")
  i, j = s.axis(C)
  io, wm, g, m, r = s.split(C, i, [2, 8, mi, 2])
  jo, wn, t, n, c = s.split(C, j, [2, 4, ni, 2])
  s.reorder(C, io, jo, wm, wn, *(g, t) if lanes == ("g", "t") else (t, g), m, n, r, c)
  s.bind(C, s.fuse(C, io, jo), "blockIdx.x")
  tx = s.fuse(C, wm, wn, *(g, t) if lanes == ("g", "t") else (t, g))
  s.bind(C, tx, "threadIdx.x")
  s.compute_at(CL, C, tx)
  ci, cj, ck = s.loops(CL)
  cm, cr = s.split(CL, ci, 2)
  cn, cc = s.split(CL, cj, 2)
  k0, k1 = s.split(CL, ck, k_split or tc.INTRINSICS[intr].k)
  s.reorder(CL, k0, cm, cn, cr, cc, k1)
  for X in (A, B):
    XS = s.cache_read(X, "shared", [CL])
    s.compute_at(XS, CL, k0)
    s.bind(XS, s.split(XS, s.fuse(XS, *s.loops(XS)), 128)[1], "threadIdx.x")
  s.unroll(CL, cm); s.unroll(CL, cn)
  s.tensorize(CL, cr, intr)
  return wl, s


def _matmul_tolerance(intr: str, a32, b32, ref) -> np.ndarray:
  """Per element: half an ulp of C's type (its rounding) plus the float32 sum's error, and for tf32 the operands'
  rounding (2^-11 relative each)."""
  out_bits = {"float16": 10, "bfloat16": 7, "float32": 23}[TYPES[intr]]
  mag = np.abs(a32.astype(np.float64)) @ np.abs(b32.astype(np.float64))
  per_product = 2.0 ** -10 if intr.endswith("tf32") else a32.shape[1] * 2.0 ** -23
  return 2.0 ** -(out_bits + 1) * np.abs(ref) + per_product * mag + 1e-30


import minicomp as mc  # noqa: E402


@pytest.mark.parametrize("intr", sorted(TYPES))
def test_tensorized_matmul_matches_numpy_in_the_simulator(intr):
  wl, s = tensorized_matmul(intr)
  arch = "sm_75" if intr == "m16n8k8_f16" else "sm_80"
  k = mc.build(s, target=arch)
  assert f"mma.sync.aligned.m16n8k{tc.INTRINSICS[intr].k}" in k.binary.ptx and tc.INTRINSICS[intr].helper in k.source
  if TYPES[intr] != "float32":
    # the tiles the tensor cores read hold the half values; A's pairs are adjacent: one 32-bit read each
    ctype = "__half" if TYPES[intr] == "float16" else "__nv_bfloat16"
    assert f"__shared__ __align__(16) {ctype} A_shared[" in k.source and f"__shared__ __align__(16) {ctype} B_shared[" in k.source
    assert "reinterpret_cast<const unsigned*>(A_shared + " in k.source and "mc_pack_h2(B_shared[" in k.source
  a, b = wl.random_inputs()
  a32, b32 = a.astype(np.float32), b.astype(np.float32)
  ref = a32.astype(np.float64) @ b32.astype(np.float64)
  out = k(a, b, device="cpu").astype(np.float64)
  assert (np.abs(out - ref) <= _matmul_tolerance(intr, a32, b32, ref)).all(), np.abs(out - ref).max()
  # the loop-IR interpreter runs the scalar loops the statement stands for (float32 products, no tf32 rounding;
  # one block of 32 x 16: the interpreter is slow)
  from minicomp.ir.interp import run_program
  wl, s = tensorized_matmul(intr, M=32, N=16, K=2 * tc.INTRINSICS[intr].k)
  a, b = wl.random_inputs(seed=1)
  a32, b32 = a.astype(np.float32), b.astype(np.float32)
  ref = a32.astype(np.float64) @ b32.astype(np.float64)
  interp = run_program(s.lower(), a, b).astype(np.float64)
  assert (np.abs(interp - ref) <= _matmul_tolerance(intr, a32, b32, ref)).all()


def test_a_warp_tile_of_several_mma_matches_numpy_and_reuses_its_fragments():
  """2 x 4 instructions per warp and k-step (32 x 32 per warp): correct, and NVVM reads each A fragment once for
  the 4 instructions of its row and each B fragment once for the 2 of its column (the helpers' asm is not
  volatile): 2 x 4 (A) + 4 x 4 (B: 16-bit reads) shared reads per k-step, not 8 x 8."""
  wl, s = tensorized_matmul("m16n8k16_f16", M=128, N=128, K=32, mi=2, ni=4)
  k = mc.build(s, target="sm_80")
  a, b = wl.random_inputs()
  a32, b32 = a.astype(np.float32), b.astype(np.float32)
  ref = a32.astype(np.float64) @ b32.astype(np.float64)
  out = k(a, b, device="cpu").astype(np.float64)
  assert (np.abs(out - ref) <= _matmul_tolerance("m16n8k16_f16", a32, b32, ref)).all()
  from minicomp.search.static.ptx import analyze_ptx, ir_loop_extents
  prof = analyze_ptx(k.binary.ptx, k.plan.launches[0].kernel, hints=ir_loop_extents(k.program.kernels[0].body))
  per_step = prof.counts["ld_shared"] / (prof.counts["tensor_k16"] / 8)
  assert prof.counts["tensor_k16"] == 2 * 8 and per_step == 2 * 4 + 4 * 4


def test_tensorize_replays_from_json_and_prints():
  wl, s = tensorized_matmul("m16n8k16_f16")
  again = mc.Schedule.from_json(wl.outputs, s.to_json())
  assert mc.build(again, target="sm_86").source == mc.build(s, target="sm_86").source
  assert "@mma.sync m16n8k16_f16" in str(s)
  from minicomp.ir.loop_text import program_text
  assert "mma_sync_m16n8k16_f16(C_local[" in program_text(s.lower())


@pytest.mark.parametrize("case, message", [
  ("lanes", "operand A .* changes with the lane's column"),
  ("k_extent", "loop k_1 has extent 8; m16n8k16_f16 needs 16"),
  ("guard", "no guard"),
  ("arch", "mma.sync m16n8k16_f16 needs sm_80 or newer; sm_75 does not have it"),
])
def test_tensorize_refuses_what_mma_cannot_compute(case, message):
  """Lanes in the wrong order (t outside g), a reduction loop of the wrong extent, tiles that do not divide the
  matrix (a guard inside the tensorized loops), an arch without the instruction: ScheduleError naming the step."""
  from minicomp.errors import ScheduleError
  with pytest.raises(ScheduleError, match=message):
    if case == "lanes": mc.build(tensorized_matmul("m16n8k16_f16", lanes=("t", "g"))[1], target="sm_86")
    elif case == "k_extent": mc.build(tensorized_matmul("m16n8k16_f16", k_split=8)[1], target="sm_86")
    elif case == "guard": mc.build(tensorized_matmul("m16n8k16_f16", K=56)[1], target="sm_86")
    else: mc.build(tensorized_matmul("m16n8k16_f16")[1], target="sm_75")


def test_tensorize_step_checks():
  from minicomp.errors import ScheduleError
  from minicomp import workloads as W
  wl = W.matmul(32, 32, 32, dtype="float16")
  C = wl.stages["C"]
  s = mc.Schedule([C])
  with pytest.raises(ScheduleError, match="no tensor-core intrinsic 'm16n16k16'"):
    s.tensorize(C, "i", "m16n16k16")
  with pytest.raises(ScheduleError, match="must be two spatial loops of extent 2 .* they are \\['j', 'k'\\]"):
    s.tensorize(C, "j", "m16n8k16_f16")
  wl = W.softmax(4, 16)
  with pytest.raises(ScheduleError, match="is not a sum reduction"):
    t = next(x for x in wl.stages.values() if x.reduce is not None and x.reduce.combiner == "max")
    mc.Schedule(wl.outputs).tensorize(t, mc.Schedule(wl.outputs).loops(t)[0], "m16n8k16_f16")


@pytest.mark.gpu
@pytest.mark.parametrize("intr", sorted(TYPES))
def test_tensorized_matmul_on_the_gpu(intr):
  drv, arch = _gpu()
  try:
    tc.check_arch(tc.INTRINSICS[intr], arch)
  except TargetError as e:
    pytest.skip(str(e))
  wl, s = tensorized_matmul(intr, M=128, N=128, K=256)
  k = mc.build(s, target=arch)
  a, b = wl.random_inputs()
  a32, b32 = a.astype(np.float32), b.astype(np.float32)
  ref = a32.astype(np.float64) @ b32.astype(np.float64)
  out = k(a, b, device="gpu").astype(np.float64)
  assert (np.abs(out - ref) <= _matmul_tolerance(intr, a32, b32, ref)).all(), np.abs(out - ref).max()


def test_the_docs_matmul_example_builds_on_mma():
  from pathlib import Path
  text = (Path(__file__).resolve().parents[1] / "docs" / "tensor_cores.md").read_text()
  start = text.index("```python\n") + len("```python\n")
  scope: dict = {}
  exec(compile(text[start:text.index("```", start)], "docs/tensor_cores.md", "exec"), scope)
  assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in scope["kern"].binary.ptx


def test_the_static_model_counts_mma_on_the_tensor_pipe():
  """Each mma.sync of the PTX is m n k FMAs at the device's dense tensor rate: the 64^3 matmul's 8 blocks of 4
  warps, 4 k-steps each, put 4 x 4 m16n8k16 on the busiest SM (one block per SM)."""
  from minicomp.search.static.estimate import estimate
  wl, s = tensorized_matmul("m16n8k16_f16")
  k = mc.build(s, target="sm_80")
  for name in ("a100", "rtx3090", "h100"):
    dev = mc.Target(name).device
    parts = estimate(k, mc.Target(name)).launches[0].parts
    assert parts["tensor_s"] == pytest.approx(4 * 4 * 2048 / dev.tensor_fma_per_clock_per_sm("fp16") / dev.clock_hz)
  # a kernel without mma.sync has no tensor term
  from minicomp import workloads as W
  from minicomp.graph.schedules import default_schedule
  plain = mc.build(default_schedule(W.matmul(64, 64, 64).outputs), target="sm_80")
  assert "tensor_s" not in estimate(plain, mc.Target("a100")).launches[0].parts


def test_tensor_rates_from_the_datasheets():
  from minicomp.target import DEVICES
  rate = lambda n, kind: DEVICES[n].tensor_fma_per_clock_per_sm(kind)   # noqa: E731
  assert rate("a100", "fp16") == pytest.approx(1024, rel=0.01) and rate("a100", "tf32") == pytest.approx(512, rel=0.01)
  # GeForce GA102 / AD102 accumulate in FP32 at half the rate of the professional parts on the same chip
  assert rate("rtx3090", "fp16") == pytest.approx(rate("a6000", "fp16") / 2, rel=0.01)
  assert rate("rtx4090", "fp16") == pytest.approx(rate("l4", "fp16") / 2, rel=0.01)
  assert rate("t4", "tf32") == 0 and rate("v100", "tf32") == 0


# ---- compile: tensor-core schedules for half-precision matmul-like tasks (graph/tensor_core_schedules.py) --------

TC_WORKLOADS = {
  "matmul": lambda dt: __import__("minicomp.workloads", fromlist=["x"]).matmul(64, 128, 96, dtype=dt),
  "matmul_bias_relu": lambda dt: __import__("minicomp.workloads", fromlist=["x"]).matmul(32, 64, 64, bias_relu=True, dtype=dt),
  "batch_matmul": lambda dt: __import__("minicomp.workloads", fromlist=["x"]).batch_matmul(2, 32, 32, 64, dtype=dt),
  "conv2d": lambda dt: __import__("minicomp.workloads", fromlist=["x"]).conv2d(1, 32, 8, 8, 32, 3, pad=1, dtype=dt),
}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", sorted(TC_WORKLOADS))
def test_tensor_core_schedules_of_matmul_like_tasks_match_numpy(name, dtype):
  from minicomp.graph.tensor_core_schedules import tensor_core_schedules
  from minicomp.ir.dag import ComputeDAG
  wl = TC_WORKLOADS[name](dtype)
  scheds = tensor_core_schedules(ComputeDAG(wl.outputs), mc.Target("sm_80"))
  assert scheds, f"no tensor-core schedule for {name}"
  ins = wl.random_inputs()
  ref = wl.reference(*[a.astype(np.float32) for a in ins]).astype(np.float64)
  bits = 10 if dtype == "float16" else 7
  for s in scheds:
    k = mc.build(s, target="sm_80")
    assert "mma.sync.aligned.m16n8k16" in k.binary.ptx
    out = k(*ins, device="cpu").astype(np.float64)
    # rounding to the output type (half an ulp) plus the float32 sum (k ulps of the sum of |products|)
    assert np.abs(out - ref).max() <= 2.0 ** -(bits + 1) * np.abs(ref).max() + 1e-3, (name, np.abs(out - ref).max())


def test_tensor_core_schedules_only_where_they_apply():
  from minicomp import workloads as W
  from minicomp.graph.tensor_core_schedules import tensor_core_schedules
  from minicomp.ir.dag import ComputeDAG
  dag = lambda wl: ComputeDAG(wl.outputs)   # noqa: E731
  assert tensor_core_schedules(dag(W.matmul(64, 64, 64)), mc.Target("sm_80")) == []            # float32
  assert tensor_core_schedules(dag(W.matmul(64, 64, 64, dtype="float16")), mc.Target("sm_70")) == []
  assert tensor_core_schedules(dag(W.matmul(64, 64, 64, dtype="bfloat16")), mc.Target("sm_75")) == []
  assert tensor_core_schedules(dag(W.matmul(64, 64, 40, dtype="float16")), mc.Target("sm_80")) == []   # k % 32
  assert tensor_core_schedules(dag(W.softmax(64, 128, dtype="float16")), mc.Target("sm_80")) == []
  on_turing = tensor_core_schedules(dag(W.matmul(64, 64, 64, dtype="float16")), mc.Target("sm_75"))
  assert on_turing and all("m16n8k8_f16" in s.to_json() for s in on_turing)


def _fp16_mlp():
  from onnx import TensorProto, helper, numpy_helper
  rng = np.random.default_rng(0)
  w, b = rng.standard_normal((256, 128)).astype(np.float16), rng.standard_normal((128,)).astype(np.float16)
  g = helper.make_graph(
    [helper.make_node("MatMul", ["x", "W"], ["y"]), helper.make_node("Add", ["y", "b"], ["z"]),
     helper.make_node("Relu", ["z"], ["o"])], "mlp",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [64, 256])],
    [helper.make_tensor_value_info("o", TensorProto.FLOAT16, [64, 128])],
    [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")])
  return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), w, b


def test_compile_puts_an_fp16_matmul_on_the_tensor_cores(tmp_path, monkeypatch):
  """The static model estimates the tensor-core schedule of an fp16 MatMul+Add+Relu faster than Gensor's FP32
  ones on an A100: compile keeps it, the summary says so, and the model computes what numpy does."""
  monkeypatch.setenv("MINICOMP_CACHE_DIR", str(tmp_path))
  monkeypatch.setenv("MINICOMP_SCHEDULE_CACHE", "1")
  model, w, b = _fp16_mlp()
  cm = mc.compile(model, target="sm_80", progress=False, jobs=1)
  assert cm.stats.tensor_cores == 1 and "fp16/fp32 tensor cores" in cm.summary()
  x = np.random.default_rng(1).standard_normal((64, 256)).astype(np.float16)
  out = cm.run({"x": x}, device="cpu")
  out = np.asarray(out[0] if isinstance(out, (list, tuple)) else next(iter(out.values())) if isinstance(out, dict) else out)
  ref = np.maximum(x.astype(np.float64) @ w.astype(np.float64) + b.astype(np.float64), 0)
  assert np.abs(out.astype(np.float64) - ref).max() <= 2.0 ** -11 * np.abs(ref).max() + 1e-3
  # saved and loaded (the kernel text calls the helpers, holds no asm), it computes the same
  loaded = mc.load(cm.save(tmp_path / "saved"))
  again = loaded.run({"x": x}, device="cpu")
  again = np.asarray(again[0] if isinstance(again, (list, tuple)) else next(iter(again.values())) if isinstance(again, dict) else again)
  np.testing.assert_array_equal(again, out)
  assert "tensor cores" in loaded.summary()
  # computed in float32 (precision="fp32" widens the model), it is not offered tensor cores (no "tf32" yet)
  assert mc.compile(model, target="sm_80", progress=False, jobs=1, precision="fp32").stats.tensor_cores == 0
  monkeypatch.setenv("MINICOMP_TENSOR_CORES", "0")        # the switch: FP32 pipes only (the schedule cache apart)
  off = mc.compile(model, target="sm_80", progress=False, jobs=1)
  assert off.stats.tensor_cores == 0 and "tensor cores" not in off.summary()


def test_precision_tf32_puts_fp32_matmuls_on_tf32_tensor_cores(tmp_path, monkeypatch):
  """``precision="tf32"``: an fp32 MatMul+Add+Relu (256 x 256 x 512, where the static model finds TF32 faster on an
  A100) runs on m16n8k8.tf32, within TF32's rounding of numpy; without it, or on sm_75 (no TF32), the FP32 pipes."""
  from onnx import TensorProto, helper, numpy_helper
  monkeypatch.setenv("MINICOMP_CACHE_DIR", str(tmp_path))
  rng = np.random.default_rng(0)
  w, b = rng.standard_normal((256, 512)).astype(np.float32), rng.standard_normal((512,)).astype(np.float32)
  g = helper.make_graph(
    [helper.make_node("MatMul", ["x", "W"], ["y"]), helper.make_node("Add", ["y", "b"], ["z"]),
     helper.make_node("Relu", ["z"], ["o"])], "mlp32",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [256, 256])],
    [helper.make_tensor_value_info("o", TensorProto.FLOAT, [256, 512])],
    [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")])
  model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
  cm = mc.compile(model, target="sm_80", precision="tf32", progress=False, jobs=1)
  assert cm.stats.tensor_cores == 1 and "fp32/tf32 tensor cores" in cm.summary()
  assert "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32" in cm.kernels[0].binary.ptx
  x = rng.standard_normal((256, 256)).astype(np.float32)
  out = np.asarray(cm.run({"x": x}, device="cpu")[0], np.float64)
  exact = np.maximum(x.astype(np.float64) @ w + b, 0)
  bound = 2.0 ** -10 * (np.abs(x.astype(np.float64)) @ np.abs(w.astype(np.float64)))   # two operands at 2^-11 each
  assert (np.abs(out - exact) <= bound + 1e-5).all()
  assert np.abs(out - exact).max() > 1e-4          # (rounded: not the float32 result)
  assert mc.compile(model, target="sm_80", progress=False, jobs=1).stats.tensor_cores == 0
  assert mc.compile(model, target="sm_75", precision="tf32", progress=False, jobs=1).stats.tensor_cores == 0


def test_an_fp16_bert_runs_its_matmuls_on_tensor_cores_and_matches_onnxruntime(tmp_path, monkeypatch):
  """The zoo's BERT-tiny (2 layers, s128) in float16 for sm_80: the static model puts 6 of its 12 tasks on the
  tensor cores; the whole model against onnxruntime's float16 run (tolerance of tests/test_precision.py)."""
  from minicomp import zoo
  from onnx_harness import run_ort, to_half
  monkeypatch.setenv("MINICOMP_CACHE_DIR", str(tmp_path))
  model, feeds = zoo.bert_tiny()
  half = to_half(model)
  hfeeds = {k: v.astype(np.float16) if v.dtype == np.float32 else v for k, v in feeds.items()}
  cm = mc.compile(half, target="sm_80", progress=False, jobs=1)
  assert cm.stats.tensor_cores >= 4
  got, ref = cm.run(hfeeds, device="cpu")[0].astype(np.float32), run_ort(half, hfeeds)[0].astype(np.float32)
  assert np.abs(got - ref).max() <= 4 * 2.0 ** -10 * np.abs(ref).max()


def test_tuning_starts_from_a_tensor_core_default(tmp_path, monkeypatch):
  """A few trials of Ansor on the fp16 MLP for sm_80: the tuner starts from the tensor-core default (a schedule
  with a tensorize step in the records), keeps it unless a trial beats it, and the model stays correct."""
  monkeypatch.setenv("MINICOMP_CACHE_DIR", str(tmp_path))
  model, w, b = _fp16_mlp()
  log = tmp_path / "tune.jsonl"
  cm = mc.compile(model, target="sm_80", trials=4, strategy="ansor", log_file=str(log), progress=False, jobs=1)
  assert cm.stats.tensor_cores == 1 and '"tensorize"' in log.read_text()
  x = np.random.default_rng(2).standard_normal((64, 256)).astype(np.float16)
  out = np.asarray(cm.run({"x": x}, device="cpu")[0], np.float64)
  ref = np.maximum(x.astype(np.float64) @ w.astype(np.float64) + b.astype(np.float64), 0)
  assert np.abs(out - ref).max() <= 2.0 ** -11 * np.abs(ref).max() + 1e-3
