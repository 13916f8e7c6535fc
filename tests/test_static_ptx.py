"""Static analysis for the Tuna cost model: device table, occupancy calculator, PTX loop / instruction counts.

Occupancy cases are worked by hand from the CUDA occupancy calculator rules (cuda_occupancy.h):
registers per warp rounded up to 256 and allocated per SM sub-partition (4), shared memory
plus the 1 KiB reserved per block (sm_80+) rounded up to 128 B (256 B, nothing reserved, on
sm_70), the warp and block limits of the compute-capability table. PTX counts are checked on
kernels minicomp builds with NVRTC against the loop extents of minicomp's own loop IR.
"""
import math

import pytest

import minicomp as mc
from minicomp import workloads as W
from minicomp.codegen.nvrtc import compile_cuda
from minicomp.errors import PTXAnalysisError
from minicomp.graph.schedules import default_schedule
from minicomp.ir import loop as L
from minicomp.search.static.occupancy import OccupancyError, kernel_occupancy, occupancy
from minicomp.search.static.ptx import analyze_ptx, ir_loop_extents, ptx_profiles
from minicomp.search.static.ptx_parse import classify, list_entries
from minicomp.target import (
  DEFAULT_DEVICE,
  DEVICES,
  SUPPORTED_ARCHS,
  DeviceSpec,
  Target,
  TargetError,
  as_target,
)

# ---------------------------------------------------------------------------------------------
# targets and devices


def test_arch_target_unchanged():
  t = Target("sm_86")
  assert t.arch == "sm_86" and str(t) == "sm_86" and Target("sm86") == t and as_target("sm_86") == t
  assert (t.max_threads_per_block, t.max_shared_bytes_per_block, t.max_registers_per_thread, t.warp_size) == \
    (1024, 99 * 1024, 255, 32)     # a block may use the opt-in maximum (dynamic shared memory past 48 KiB) ...
  assert t.search_shared_bytes == 48 * 1024     # ... the searches offer the static 48 KiB
  assert Target("sm_86", max_shared_bytes_per_block=1024).search_shared_bytes == 1024
  assert t.max_vthread_extent == 8 and t.max_block_dims == (1024, 1024, 64)
  assert t.max_grid_dims == (2**31 - 1, 65535, 65535)
  assert t.compute_capability == (8, 6) and t.max_shared_optin_bytes == 99 * 1024
  assert Target("sm_90").max_shared_optin_bytes == 227 * 1024
  for bad in ("sm_61", "sm_101", "gpu", ""):   # sm_101: a real Blackwell arch, not a supported one
    with pytest.raises(TargetError):
      Target(bad)


def test_named_devices():
  assert set(DEFAULT_DEVICE) == set(SUPPORTED_ARCHS)
  for arch in SUPPORTED_ARCHS:
    assert Target(arch).device.arch == arch and Target(arch).name == DEFAULT_DEVICE[arch]
  assert Target("sm_86").device is DEVICES["rtx3090"] and Target("sm_80").name == "a100"
  for name in ("rtx3090", "a10g", "a5000", "a6000", "rtx4090", "l4", "v100", "t4", "a100", "h100"):
    t = Target(name)
    assert isinstance(t.device, DeviceSpec) and t.name == name and str(t) == name and Target(str(t)) == t
    assert t.arch == t.device.arch and t.arch in SUPPORTED_ARCHS
  assert Target("rtx3090").arch == "sm_86" and Target("RTX 3090") == Target("rtx-3090") == Target("rtx3090")
  assert Target("h100").arch == "sm_90" and Target("a6000").device.sm_count == 84
  assert Target("sm_86", device_name="a6000") == Target("a6000")
  with pytest.raises(TargetError, match="rtx3090"):   # the message lists the known names
    Target("rtx9999")
  with pytest.raises(TargetError):
    Target("sm_80", device_name="rtx3090")


@pytest.mark.parametrize("name,tflops", [("rtx3090", 35.6), ("a100", 19.5), ("v100", 15.7), ("t4", 8.1),
                                         ("h100", 67.0), ("rtx4090", 82.6), ("l4", 30.3), ("a6000", 38.7),
                                         ("a5000", 27.8), ("a10g", 35.0)])
def test_peak_fp32_matches_datasheets(name, tflops):
  assert DEVICES[name].fp32_peak_flops / 1e12 == pytest.approx(tflops, rel=0.01)


def test_device_fields_consistent():
  for d in DEVICES.values():
    assert d.max_warps_per_sm * d.warp_size == d.max_threads_per_sm
    assert d.regs_per_sm == 65536 and d.reg_alloc_unit == 256 and d.max_regs_per_thread == 255
    assert d.smem_per_block_static == 48 * 1024 <= d.smem_per_block_optin <= d.smem_per_sm_bytes <= d.l1_bytes_per_sm
    assert d.smem_per_block_optin == Target(d.arch).max_shared_optin_bytes
    assert d.smem_banks == 32 and d.sfu_lanes_per_sm == 16 and d.dram_bandwidth_gbs > 100 and d.l2_bytes >= 512 * 1024
  g = DEVICES["rtx3090"]
  assert g.dram_bytes_per_s == 936e9 and g.ridge_flops_per_byte == pytest.approx(35.58e12 / 936e9, rel=1e-3)
  assert g.smem_bytes_per_clock_per_sm == 128


def test_build_for_a_named_device():
  wl = W.row_sum(64, 100)
  kern = mc.build(default_schedule(wl.outputs, "a6000"), "a6000")
  assert kern.binary.arch == "sm_86" and kern.target.name == "a6000"
  occ, = kernel_occupancy(kern)
  assert occ.device == "a6000"


# ---------------------------------------------------------------------------------------------
# occupancy, by hand (rtx3090 / sm_86: 48 warps, 16 blocks, 100 KiB shared memory per SM; 82 SMs)

def test_occupancy_warp_limited():
  o = occupancy("sm_86", 256, 32, 0, 1)
  # warps 48 // 8 = 6; registers: 1024 per warp, 16 warps per sub-partition -> 64 warps -> 8 blocks;
  # shared: 1 KiB reserved -> 100; blocks 16
  assert o.blocks_per_sm_by_limit == {"warps": 6, "registers": 8, "shared": 100, "blocks": 16}
  assert (o.blocks_per_sm, o.limiter, o.active_warps_per_sm, o.occupancy) == (6, "warps", 48, 1.0)


def test_occupancy_register_limited():
  o = occupancy(DEVICES["rtx3090"], 256, 255, 0, 1)
  # 255 * 32 = 8160 -> 8192 per warp; 16384 // 8192 = 2 warps per sub-partition -> 8 warps -> 1 block
  assert (o.blocks_per_sm, o.limiter, o.active_warps_per_sm) == (1, "registers", 8)
  assert o.occupancy == pytest.approx(8 / 48)
  o = occupancy("sm_86", 256, 64, 4096, 16)   # the tiled matmul below: 2048 regs per warp -> 32 warps -> 4 blocks
  assert (o.blocks_per_sm, o.limiter, o.blocks_per_sm_by_limit["shared"]) == (4, "registers", 20)
  # sub-partition granularity: 96 regs -> 3072 per warp -> 16384 // 3072 = 5 warps per sub-partition
  # -> 20 warps (not 65536 // 3072 = 21); on sm_80 (32 blocks, 64 warps per SM) 1-warp blocks -> 20
  o = occupancy("sm_80", 32, 96, 0, 1)
  assert (o.blocks_per_sm, o.limiter) == (20, "registers")


def test_occupancy_shared_limited():
  o = occupancy("rtx3090", 256, 32, 48 * 1024, 1)
  # 49152 + 1024 reserved = 50176 (a multiple of 128); 102400 // 50176 = 2
  assert (o.blocks_per_sm, o.limiter, o.active_warps_per_sm, o.smem_per_block_allocated) == (2, "shared", 16, 50176)
  assert o.occupancy == pytest.approx(1 / 3)
  # sm_70 (V100): 256 B granularity, nothing reserved: 20000 -> 20224; 98304 // 20224 = 4
  assert (occupancy("v100", 256, 32, 20000).blocks_per_sm, occupancy("v100", 256, 32, 20000).limiter) == (4, "shared")
  # sm_80 (A100): 20000 + 1024 = 21024 -> 21120; 167936 // 21120 = 7
  assert occupancy("a100", 256, 32, 20000).blocks_per_sm == 7


def test_occupancy_block_limited_and_ties():
  o = occupancy("sm_86", 32, 16, 0, 1)      # 48 by warps, 128 by registers, 100 by shared, 16 by blocks
  assert (o.blocks_per_sm, o.limiter, o.active_warps_per_sm) == (16, "blocks", 16)
  o = occupancy("sm_80", 1024, 32, 0, 1)    # 64 // 32 = 2 by warps and 2 by registers: warps first
  assert (o.blocks_per_sm, o.limiter) == (2, "warps")
  assert occupancy("sm_89", 32, 16, 0).blocks_per_sm == 24 and occupancy("sm_75", 32, 16, 0).blocks_per_sm == 16


def test_waves_and_tail():
  slots = 6 * 82                           # 6 blocks per SM on 82 SMs
  o = occupancy("sm_86", 256, 32, 0, 1000)
  assert o.waves == pytest.approx(1000 / slots) and o.full_waves == 2
  assert o.tail_fraction == pytest.approx((1000 - 2 * slots) / slots) and o.partial_wave
  o = occupancy("sm_86", 256, 32, 0, 2 * slots)
  assert (o.waves, o.full_waves, o.tail_fraction, o.wave_efficiency) == (2.0, 2, 1.0, 1.0)
  o = occupancy("sm_86", (16, 16, 1), 32, 0, (4, 4, 1))     # tuples: 256 threads, 16 blocks
  assert (o.threads_per_block, o.n_blocks, o.full_waves) == (256, 16, 0) and o.tail_fraction == pytest.approx(16 / slots)


def test_occupancy_errors():
  with pytest.raises(OccupancyError, match="registers"):
    occupancy("sm_86", 1024, 128, 0)        # 4096 * 32 warps > 64 K registers per block
  with pytest.raises(OccupancyError, match="shared memory"):
    occupancy("sm_86", 128, 32, 100 * 1024)  # > 99 KiB opt-in
  with pytest.raises(OccupancyError, match="threads"):
    occupancy("sm_86", 2048, 16, 0)
  with pytest.raises(OccupancyError):
    occupancy("sm_86", 128, 256, 0)          # > 255 registers per thread
  assert issubclass(OccupancyError, mc.MinicompError)


# ---------------------------------------------------------------------------------------------
# PTX analysis on kernels minicomp builds

M = N = K = 256


def tiled_matmul():
  """examples/quickstart.py's schedule (64x64 block tiles, 16x16 threads x 4x4 results, k step 8)."""
  wl = W.matmul(M, N, K, bias_relu=True)
  C, D = wl.stages["C"], wl.stages["D"]
  A, B = wl.inputs[:2]
  s = mc.Schedule([D])
  CL = s.cache_write(C, "local")
  s.compute_inline(C)
  i, j = s.axis(D)
  io, ii = s.split(D, i, 64)
  jo, ji = s.split(D, j, 64)
  ty, ii = s.split(D, ii, 4)
  tx, ji = s.split(D, ji, 4)
  s.reorder(D, io, jo, ty, tx, ii, ji)
  for ax, tag in ((io, "blockIdx.y"), (jo, "blockIdx.x"), (ty, "threadIdx.y"), (tx, "threadIdx.x")):
    s.bind(D, ax, tag)
  s.compute_at(CL, D, tx)
  ci, cj, ck = s.loops(CL)
  ko, ki = s.split(CL, ck, 8)
  s.reorder(CL, ko, ki, ci, cj)
  s.unroll(CL, ci)
  s.unroll(CL, cj)
  for X in (A, B):
    XS = s.cache_read(X, "shared", [CL])
    s.compute_at(XS, CL, ko)
    fused = s.fuse(XS, *s.loops(XS))
    _, t = s.split(XS, fused, 256)
    y, x = s.split(XS, t, 16)
    s.bind(XS, y, "threadIdx.y")
    s.bind(XS, x, "threadIdx.x")
  return mc.build(s, "sm_86")


@pytest.fixture(scope="module")
def mm():
  return tiled_matmul()


def threads(kern, i=0):
  l = kern.plan.launches[i]
  return math.prod(l.grid) * math.prod(l.block)


def trips_match_ir(prof, body):
  """Every PTX loop is one of the IR's rolled loops, in order: trip == extent, or ceil(extent / step)
  when NVVM unrolled a unit-stride counter by ``step``."""
  extents = ir_loop_extents(body)
  k = 0
  for lp in prof.loops:
    assert lp.known, lp
    while k < len(extents) and not (lp.trip_count == extents[k] or (
        lp.step and abs(lp.step) > 1 and lp.trip_count == -(-extents[k] // abs(lp.step)))):
      k += 1
    assert k < len(extents), (lp, extents)
    k += 1


def count_syncs(stmt) -> int:
  if isinstance(stmt, L.Sync):
    return 1
  if isinstance(stmt, L.Seq):
    return sum(count_syncs(s) for s in stmt.stmts)
  if isinstance(stmt, (L.For, L.If)):
    return count_syncs(stmt.body if isinstance(stmt, L.For) else stmt.then)
  return 0


def test_matmul_loops_and_counts(mm):
  prof = analyze_ptx(mm.ptx, mm.plan.launches[0].kernel)
  body = mm.program.kernels[0].body
  assert [(l.trip_count, l.depth, l.known) for l in prof.loops] == [(K // 8, 0, True), (8, 1, True)]
  trips_match_ir(prof, body)
  n = threads(mm)
  assert n == (M // 4) * (N // 4)
  assert prof["fp32_fma"] * n == pytest.approx(M * N * K, rel=0.02)       # one FMA per multiply-add
  # per k step each thread reads 4 A and 4 B floats from shared memory (B as one float4)
  assert prof.bytes["ld_shared"] == 8 * 4 * K
  assert 4 * K / 4 <= prof["ld_shared"] <= 8 * K
  # each k_0 step: the block stages 64x8 A and 8x64 B floats, 4 per thread, global -> shared
  assert prof["st_shared"] == 4 * (K // 8) and prof.bytes["st_shared"] == 16 * (K // 8)
  # the same 4 floats from global memory per k_0 step, plus the epilogue's 4 bias values
  assert prof.bytes["ld_global"] == 16 * (K // 8) + 4 * 4
  assert prof["st_global"] == 16 and prof.bytes["st_global"] == 64       # 4x4 results per thread
  assert prof["fp32_arith"] == 2 * 16                                    # + bias, max(., 0) per result
  k_loop = next(s for s in body.stmts if isinstance(s, L.For) and s.kind == "serial")
  assert prof["bar_sync"] == count_syncs(k_loop.body) * (K // 8)
  assert prof.fp32_flops >= 2 * prof["fp32_fma"] and prof.total == sum(prof.counts.values())
  assert not prof.warnings and prof.all_loops_known


def test_matmul_occupancy(mm):
  r = mm.binary.resources[mm.plan.launches[0].kernel]
  occ, = kernel_occupancy(mm)
  assert occ == occupancy("rtx3090", 256, r.registers, r.shared_bytes, 16)
  assert occ.blocks_per_sm == min(occ.blocks_per_sm_by_limit.values()) and occ.full_waves == 0


def test_elementwise_counts():
  wl = W.broadcast_chain(8, 64, 128)
  kern = mc.build(default_schedule(wl.outputs), "sm_86")
  prof, = ptx_profiles(kern).values()
  assert prof.loops == () and threads(kern) == 8 * 64 * 128
  assert prof["st_global"] == 1 and prof["ld_global"] == 3          # X, scale, shift; one output
  assert prof["sfu"] >= 1 and prof["bar_sync"] == 0                 # the sigmoid's exp / reciprocal


def test_row_reduction_serial_and_shuffle():
  wl = W.row_sum(256, 1000)
  kern = mc.build(default_schedule(wl.outputs, simple=True), "sm_86")     # one thread per row, serial k loop
  prof, = ptx_profiles(kern).values()
  lp, = prof.loops
  assert lp.known and lp.trip_count * lp.step == 1000                    # NVVM unrolls k by `step`
  trips_match_ir(prof, kern.program.kernels[0].body)
  assert prof["ld_global"] == 1000 and prof["fp32_arith"] == 1000 and prof.bytes["ld_global"] == 4000
  kern = mc.build(default_schedule(wl.outputs), "sm_86")                  # a block per row, warp shuffles
  prof, = ptx_profiles(kern).values()
  block = kern.plan.launches[0].block[0]
  assert prof["ld_global"] == math.ceil(1000 / block)
  assert prof["shfl"] == 5 and prof["bar_sync"] >= 1                     # log2(32) shuffle steps


def test_loop_entered_in_the_middle():
  """softmax rows of 777: NVVM unrolls by 4 and enters the rotated loop at its test (peeled iteration)."""
  wl = W.softmax(128, 777)
  kern = mc.build(default_schedule(wl.outputs, simple=True), "sm_86")
  profs = ptx_profiles(kern)
  assert list(profs) == [l.kernel for l in kern.plan.launches]
  for name, k in zip(profs, kern.program.kernels):
    trips_match_ir(profs[name], k.body)
  rowmax = profs[kern.plan.launches[0].kernel]
  assert rowmax["ld_global"] == 777 and rowmax.loops[0].known


def test_conv_loops_match_ir():
  wl = W.conv2d(1, 16, 28, 28, 32, 3, 1, 1)
  kern = mc.build(default_schedule(wl.outputs), "sm_86")
  prof, = ptx_profiles(kern).values()
  trips_match_ir(prof, kern.program.kernels[0].body)
  assert [l.depth for l in prof.loops] == [0, 1]
  outer, inner = (l.trip_count for l in prof.loops)
  # every reduction element once per output the thread computes (guarded partial tiles included)
  outputs = 32 * 28 * 28
  assert prof["fp32_fma"] * threads(kern) >= outputs * 16 * 9
  assert prof["fp32_fma"] % (outer * inner) == 0          # every FMA sits in the innermost rolled loop


# ---------------------------------------------------------------------------------------------
# PTX loop forms on hand-written CUDA and PTX

RAW = r'''
extern "C" __global__ void up3(float* a) {
  float s = 0.f;
  #pragma unroll 1
  for (int i = 0; i < 100; i += 3) s += a[i];
  a[threadIdx.x] = s;
}
extern "C" __global__ void down7(float* a) {
  float s = 0.f;
  #pragma unroll 1
  for (int i = 100; i > 0; i -= 7) s += a[i];
  a[threadIdx.x] = s;
}
extern "C" __global__ void nested(float* a) {
  float s = 0.f;
  #pragma unroll 1
  for (int i = 0; i < 10; ++i) {
    #pragma unroll 1
    for (int j = 5; j < 25; j += 2) s += a[i * 32 + j];
    __syncthreads();
  }
  a[threadIdx.x] = s;
}
extern "C" __global__ void ptrloop(float* a) {
  float s = 0.f;
  float* e = a + 64;
  #pragma unroll 1
  for (float* p = a; p != e; ++p) s += __expf(*p);
  a[threadIdx.x] = s;
}
extern "C" __global__ void while_le(float* a) {
  float s = 0.f; int i = 7;
  #pragma unroll 1
  while (i <= 70) { s += a[i]; i += 7; }
  a[threadIdx.x] = s;
}
extern "C" __global__ void strided(float* a) {
  float s = 0.f;
  #pragma unroll 1
  for (int i = threadIdx.x; i < 1000; i += blockDim.x) s += a[i];
  a[threadIdx.x] = s;
}
extern "C" __global__ void mixed(float* a) {
  float s = 0.f;
  #pragma unroll 1
  for (int i = 0; i < 6; ++i) {
    #pragma unroll 1
    for (int j = threadIdx.x; j < 100; j += blockDim.x) s += a[i * 100 + j];
  }
  a[threadIdx.x] = s;
}
'''


@pytest.fixture(scope="module")
def raw_ptx():
  return compile_cuda(RAW, "sm_86").ptx


def test_counted_loop_forms(raw_ptx):
  assert list_entries(raw_ptx) == ["up3", "down7", "nested", "ptrloop", "while_le", "strided", "mixed"]
  cases = {"up3": [34], "down7": [15], "nested": [10, 10], "ptrloop": [64], "while_le": [10]}
  for name, trips in cases.items():
    prof = analyze_ptx(raw_ptx, name)
    assert [l.trip_count for l in prof.loops] == trips and prof.all_loops_known, (name, prof.loops)
    assert prof["ld_global"] == math.prod(trips), name
  assert analyze_ptx(raw_ptx, "nested")["bar_sync"] == 10
  assert analyze_ptx(raw_ptx, "ptrloop")["sfu"] == 64


def test_unknown_trip_count_and_hints(raw_ptx):
  prof = analyze_ptx(raw_ptx, "strided")           # thread-dependent start, blockDim step
  lp, = prof.loops
  assert (lp.known, lp.trip_count, lp.source) == (False, 1, "assumed") and prof.warnings
  prof = analyze_ptx(raw_ptx, "strided", hints=[8])
  assert (prof.loops[0].trip_count, prof.loops[0].source) == (8, "hint") and prof["ld_global"] == 8
  prof = analyze_ptx(raw_ptx, "strided", hints={lp.header_label: 4})
  assert prof["ld_global"] == 4
  # hints never override a recovered count
  assert analyze_ptx(raw_ptx, "up3", hints=[7]).loops[0].trip_count == 34
  # IR extents as hints: known loops anchor the alignment (the IR loop of extent 9 was unrolled away)
  prof = analyze_ptx(raw_ptx, "mixed", hints=[9, 6, 7])
  assert [(l.trip_count, l.source) for l in prof.loops] == [(6, "ptx"), (7, "hint")] and prof["ld_global"] == 42
  assert analyze_ptx(raw_ptx, "mixed", hints=[6, 7])["ld_global"] == 42
  prof = analyze_ptx(raw_ptx, "mixed", hints=[6, 2, 7])      # ambiguous: left unknown, with a warning
  assert prof.loops[1].source == "assumed" and any("could not be matched" in w for w in prof.warnings)


def test_entry_selection_errors(raw_ptx):
  with pytest.raises(PTXAnalysisError, match="up3"):
    analyze_ptx(raw_ptx)                           # several kernels, none named
  with pytest.raises(PTXAnalysisError, match="while_le"):
    analyze_ptx(raw_ptx, "nope")
  with pytest.raises(PTXAnalysisError):
    analyze_ptx("// no kernels here\n.version 8.0\n")


HAND_PTX = r'''
.version 8.0
.target sm_86
.address_size 64
.visible .entry k(.param .u64 k_param_0)
{
  .reg .pred %p<3>;
  .reg .b32 %r<8>;
  .reg .f32 %f<5>;
  .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [k_param_0];
  mov.u32 %r1, 0;
$L__BB0_1:
  setp.ge.s32 %p1, %r1, 10;        // top-tested: leave when r1 >= 10
  @%p1 bra $L__BB0_3;
  add.f32 %f1, %f1, %f2;
  ld.shared.v4.f32 {%f1, %f2, %f3, %f4}, [%rd1];
  add.s32 %r1, %r1, 1;
  bra.uni $L__BB0_1;
$L__BB0_3: mov.u32 %r2, 16;       // a label and an instruction on one line
$L__BB0_4:                         // down-counter, negated guard: continue while !(r2 < 1)
  fma.rn.f32 %f3, %f1, %f2, %f3;
  ex2.approx.f32 %f4, %f3;
  add.s32 %r2, %r2, -2;
  setp.lt.s32 %p2, %r2, 1;
  @!%p2 bra $L__BB0_4;
  mov.u32 %r3, 12;
$L__BB0_5:                         // unsigned down-counter: 9, 6, 3, 0
  st.shared.f32 [%rd1], %f1;
  add.s32 %r3, %r3, -3;
  setp.hi.u32 %p1, %r3, 0;
  @%p1 bra $L__BB0_5;
  mov.u32 %r5, 0;
$L__BB0_6:                         // NVVM's two-trip form: the counter is reset to a constant
  ld.global.f32 %f1, [%rd1];
  add.s32 %r6, %r5, 1;
  mov.u32 %r5, 1;
  setp.lt.u32 %p1, %r6, 2;
  @%p1 bra $L__BB0_6;
  cvt.rn.f32.s32 %f1, %r2;
  st.global.v2.f32 [%rd1], {%f1, %f2};
  ret;
}
'''


def test_hand_written_ptx_forms():
  prof = analyze_ptx(HAND_PTX)
  assert [(l.header_label, l.trip_count, l.known, l.step) for l in prof.loops] == \
    [("$L__BB0_1", 11, True, 1), ("$L__BB0_4", 8, True, -2), ("$L__BB0_5", 4, True, -3),
     ("$L__BB0_6", 2, True, None)]
  # the top-tested loop evaluates its test 11 times and runs its body 10 times
  assert prof["fp32_arith"] == 10 and prof["ld_shared"] == 10 and prof.bytes["ld_shared"] == 160
  assert prof["fp32_fma"] == 8 and prof["sfu"] == 8
  assert prof["st_global"] == 1 and prof.bytes["st_global"] == 8 and prof["conversion"] == 1
  assert prof["st_shared"] == 4 and prof["ld_global"] == 2 and prof["ld_param"] == 1
  assert prof["branch"] == 11 + 10 + 8 + 4 + 2
  assert [b.executions for b in prof.blocks if b.label == "$L__BB0_4"] == [8]


def test_classify():
  assert classify("fma.rn.f32") == ("fp32_fma", 0) and classify("fma.rn.f64") == ("fp64", 0)
  assert classify("ld.global.nc.v4.f32") == ("ld_global", 16) and classify("st.shared.f32") == ("st_shared", 4)
  assert classify("ld.local.u32") == ("ld_local", 4) and classify("st.local.v2.f32") == ("st_local", 8)
  # an ldmatrix is a shared-memory load (its latency and a load/store slot), not an issue-only "other"
  assert classify("ldmatrix.sync.aligned.m8n8.x4.shared.b16") == ("ld_shared", 16)
  assert classify("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16") == ("ld_shared", 8)
  assert classify("setp.lt.f32")[0] == "fp32_arith" and classify("setp.ne.s32")[0] == "int"
  assert classify("mad.lo.s32")[0] == "int" and classify("selp.f32")[0] == "int" and classify("shl.b32")[0] == "int"
  assert classify("rsqrt.approx.ftz.f32")[0] == "sfu" and classify("div.rn.f32")[0] == "sfu"
  assert classify("bar.sync")[0] == "bar_sync" and classify("shfl.sync.down.b32")[0] == "shfl"
  assert classify("cvt.rn.f32.s32")[0] == "conversion" and classify("mov.u32")[0] == "other"
  assert classify("atom.global.add.f32") == ("atomic", 4) and classify("bra.uni")[0] == "branch"


# ---------------------------------------------------------------------------------------------
# latency: one warp's in-order schedule of each basic block (Tuna's ILP cost)

CHAIN_PTX = '''
.version 7.0
.target sm_86
.address_size 64
.visible .entry chain(.param .u64 p) {
  .reg .f32 %f<8>;
  .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [p];
  ld.global.f32 %f1, [%rd1];
  fma.rn.f32 %f2, %f1, %f1, %f1;
  fma.rn.f32 %f3, %f2, %f2, %f2;
  fma.rn.f32 %f4, %f1, %f1, %f1;
  st.global.f32 [%rd1], %f3;
  ret;
}
'''


def test_chain_cycles_follow_dependences_in_issue_order():
  from minicomp.search.static.ptx import LATENCY_CYCLES as L
  prof = analyze_ptx(CHAIN_PTX, "chain")
  # issue times: ld.param 0; ld.global waits for %rd1 (ld.param latency); the first fma waits for %f1,
  # the second for %f2; the independent third issues next cycle; the store waits for %f3; ret follows
  t_ldg = L["ld_param"]
  t_fma1 = t_ldg + L["ld_global"]
  t_fma2 = t_fma1 + L["fp32_fma"]
  t_st = t_fma2 + L["fp32_fma"]
  assert prof.chain_cycles == t_st + 2          # the store, then ret one cycle later, ends the block


def test_dependent_chains_cost_more_than_independent_ones():
  src = r'''
extern "C" __global__ void dep(float* a) {
  float x = a[threadIdx.x];
  #pragma unroll
  for (int i = 0; i < 64; ++i) x = x * 1.0001f + 0.5f;
  a[threadIdx.x] = x;
}
extern "C" __global__ void indep(float* a) {
  float x0 = a[threadIdx.x], x1 = a[threadIdx.x + 32], x2 = a[threadIdx.x + 64], x3 = a[threadIdx.x + 96];
  #pragma unroll
  for (int i = 0; i < 16; ++i) { x0 = x0 * 1.0001f + 0.5f; x1 = x1 * 1.0001f + 0.5f; x2 = x2 * 1.0001f + 0.5f; x3 = x3 * 1.0001f + 0.5f; }
  a[threadIdx.x] = x0 + x1 + x2 + x3;
}
'''
  ptx = compile_cuda(src, "sm_86").ptx
  dep, indep = analyze_ptx(ptx, "dep"), analyze_ptx(ptx, "indep")
  assert dep["fp32_fma"] == indep["fp32_fma"] == 64          # the same work ...
  assert dep.chain_cycles > indep.chain_cycles + 100           # ... one chain of 64 FMAs vs four of 16


GUARDED_FETCH_PTX = '''
.version 7.0
.target sm_86
.address_size 64
.visible .entry fetch(.param .u64 p) {
  .reg .pred %p<2>;
  .reg .f32 %f<4>;
  .reg .b32 %r<4>;
  .reg .b64 %rd<4>;
  .shared .align 4 .b8 tile[64];
  ld.param.u64 %rd1, [p];
  mov.u32 %r1, %tid.x;
  mov.f32 %f1, 0f00000000;
  setp.gt.u32 %p1, %r1, 6;
  @%p1 bra $L__BB0_2;
BODY
  ld.global.f32 %f1, [%rd2];
$L__BB0_2:
  st.shared.f32 [tile], %f1;
  ret;
}
'''


@pytest.mark.parametrize("address_in_guard", [False, True])
def test_a_fetch_store_waits_for_its_load_where_the_guard_stays_a_branch(address_in_guard):
  """``@p bra L; <address>; ld.global %f; L: st.shared [..], %f``: where the guarded block holds more than the load
  (its address computed under the guard), ptxas keeps the branch and the store waits for the load; a guarded load
  alone is predicated and scheduled with what follows, so the join's store does not wait (ptx.PREDICATED_BLOCK)."""
  from minicomp.search.static.ptx import LATENCY_CYCLES as L
  body = ("  mul.wide.u32 %rd3, %r1, 4;\n  add.s64 %rd2, %rd1, %rd3;" if address_in_guard else "")
  prof = analyze_ptx(GUARDED_FETCH_PTX.replace("BODY", body).replace("[%rd2]", "[%rd2]" if body else "[%rd1]"),
                     "fetch")
  assert len(prof.blocks) == 3
  waits = prof.chain_cycles >= L["ld_global"]
  assert waits == address_in_guard
