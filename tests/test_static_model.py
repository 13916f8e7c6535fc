"""Properties the static cost model must have (no GPU: every figure here is an estimate)."""
import math

import pytest

import minicomp as mc
from minicomp import workloads as W
from minicomp.search.static.estimate import estimate
from minicomp.target import Target


def _elementwise(n: int, strided: bool):
  """y[i, j] = x[i, j] * 2 (coalesced) or x[j, i] * 2 (a transpose read: uncoalesced)."""
  X = mc.placeholder((n, n), name="X")
  Y = mc.compute((n, n), (lambda i, j: X[j, i] * 2.0) if strided else (lambda i, j: X[i, j] * 2.0), name="Y")
  s = mc.Schedule([Y])
  f = s.fuse(Y, *s.axis(Y))
  bo, t = s.split(Y, f, 256)
  s.bind(Y, bo, "blockIdx.x"); s.bind(Y, t, "threadIdx.x")
  return mc.build(s, "sm_86")


def test_coalesced_elementwise_beats_strided():
  fast, slow = estimate(_elementwise(2048, False)), estimate(_elementwise(2048, True))
  assert slow.latency_s > 1.3 * fast.latency_s
  assert slow.launches[0].parts["l2_s"] > 4 * fast.launches[0].parts["l2_s"]   # 8x the sectors, less L1 reuse


def test_memory_bound_elementwise_near_bandwidth():
  n = 4096
  e = estimate(_elementwise(n, False), "rtx3090")
  ideal = 2 * n * n * 4 / (Target("rtx3090").device.dram_bandwidth_gbs * 1e9)
  assert 1.0 <= e.latency_s / ideal <= 2.0, (e, ideal)


def _matmul_naive(n):
  wl = W.matmul(n, n, n)
  s = mc.Schedule(wl.outputs)
  C = wl.outputs[0]
  i, j = s.axis(C)
  io, ii = s.split(C, i, 16); jo, ji = s.split(C, j, 16)
  s.reorder(C, io, jo, ii, ji)
  s.bind(C, io, "blockIdx.y"); s.bind(C, jo, "blockIdx.x"); s.bind(C, ii, "threadIdx.x"); s.bind(C, ji, "threadIdx.y")
  return s   # threadIdx.x walks rows: A and C accesses are strided across the warp


def _matmul_shared(n, per_thread: int):
  import test_workloads as T
  return T.mm_tiled_shared(W.matmul(n, n, n), tile=16 * per_thread, thread=per_thread, kt=16)


@pytest.mark.slow
def test_shared_tiling_then_register_tiling_at_2048():
  n = 2048
  naive = estimate(mc.build(_matmul_naive(n), "sm_86")).latency_s
  shared = estimate(mc.build(_matmul_shared(n, 1), "sm_86")).latency_s
  reg = estimate(mc.build(_matmul_shared(n, 4), "sm_86")).latency_s
  assert naive > 4 * shared, (naive, shared)
  assert shared > 1.3 * reg, (shared, reg)


@pytest.mark.slow
def test_well_tiled_sgemm_near_peak():
  """128 x 128 block tiles, 8 x 8 outputs per thread (the register tile of the 2D-blocktiling
  kernel of Boehm's SGEMM worklog, which reaches ~70% of cuBLAS on an RTX A6000)."""
  import test_workloads as T
  n = 4096
  e = estimate(mc.build(T.mm_tiled_shared(W.matmul(n, n, n), tile=128, thread=8, kt=8), "sm_86"), "rtx3090")
  ideal = 2 * n ** 3 / Target("rtx3090").device.fp32_peak_flops
  assert 1.0 <= e.latency_s / ideal <= 3.0, (e, ideal)


def _column_reads(pad: bool):
  """C = A @ B with A's 32x32 tile in shared memory and thread x walking rows of the tile: every
  shared read of a warp hits one bank 32 times unless the rows are padded to 33 words. C is
  accumulated in registers, so global traffic is small and the shared reads dominate."""
  wl = W.matmul(256, 256, 256)
  s = mc.Schedule(wl.outputs)
  C = wl.outputs[0]
  CL = s.cache_write(C, "local")
  i, j = s.axis(C)
  io, ii = s.split(C, i, 32); jo, ji = s.split(C, j, 8)
  s.reorder(C, io, jo, ji, ii)
  s.bind(C, io, "blockIdx.y"); s.bind(C, jo, "blockIdx.x"); s.bind(C, ii, "threadIdx.x"); s.bind(C, ji, "threadIdx.y")
  s.compute_at(CL, C, ii)
  ci, cj, k = s.loops(CL)
  ko, ki = s.split(CL, k, 32)
  s.reorder(CL, ko, ki, ci, cj)
  AS = s.cache_read("A", "shared", [CL])
  s.compute_at(AS, CL, ko)
  if pad: s.storage_align(AS, 0, 32, 1)
  a, b = s.loops(AS)
  s.bind(AS, b, "threadIdx.x")
  return mc.build(s, "sm_86")


def test_bank_conflicts_cost():
  conflicted, padded = estimate(_column_reads(False)), estimate(_column_reads(True))
  assert conflicted.launches[0].parts["shared_s"] > 8 * padded.launches[0].parts["shared_s"]
  assert conflicted.latency_s > 2 * padded.latency_s


def test_two_blocks_are_far_from_peak():
  """A launch of 2 blocks uses 2 of the 82 SMs of an RTX 3090."""
  wl = W.matmul(128, 64, 512)
  import test_workloads as T
  k = mc.build(T.mm_tiled_shared(wl, tile=64, thread=4), "sm_86")
  assert math.prod(k.launches[0][1]) == 2
  e = estimate(k, "rtx3090")
  ideal = 2 * 128 * 64 * 512 / Target("rtx3090").device.fp32_peak_flops
  assert e.latency_s > 20 * ideal
  assert e.launches[0].blocks_on_busiest_sm == 1


def test_estimate_is_labelled_and_has_parts():
  e = estimate(_elementwise(256, False))
  assert e.is_estimate and "estimate" in str(e)
  assert set(e.launches[0].parts) >= {"issue_s", "fp32_s", "lsu_s", "shared_s", "l1_s", "l2_s", "dram_s", "launch_s"}
  assert e.latency_s == pytest.approx(sum(l.latency_s for l in e.launches))


def test_loaded_kernels_estimate_from_their_saved_facts(tmp_path):
  """A loaded kernel has no loop IR: its estimate comes from the facts saved with it, for that device only."""
  from onnx import helper
  from onnx_harness import make_model
  import numpy as np
  m = make_model([helper.make_node("Relu", ["x"], ["y"])], {"x": np.zeros((4, 4), np.float32)}, ["y"])
  cm = mc.compile(m)
  cm.save(tmp_path / "m")
  from minicomp.search.static.estimate import EstimateError
  loaded = mc.load(tmp_path / "m").kernels[0]
  assert loaded.program is None
  assert estimate(loaded).latency_s == estimate(cm.kernels[0]).latency_s
  with pytest.raises(EstimateError, match="loop IR.*for rtx3090 only"):
    estimate(loaded, "a100")


def _facts(**kw):
  from minicomp.search.static.model import LaunchFacts
  base = dict(name="k", blocks=132, threads_per_block=256, per_thread={"fp32_fma": 100.0}, active_warps_per_sm=16,
              blocks_per_sm=2, dram_bytes=1e6, l2_bytes=2e6, l1_cycles_per_block=10.0, shared_wavefronts_per_block=0.0)
  return LaunchFacts(**{**base, **kw})


def test_a_long_dependent_chain_is_latency_bound_with_few_blocks():
  """One warp's latency-bound cycles times the waves of blocks an SM runs in turn: the same chain
  costs twice as much when each SM must run two waves of blocks."""
  from minicomp.search.static.model import launch_time
  dev = Target("h100").device
  one = launch_time(_facts(chain_cycles=1e6), dev, calibration=None)     # (the uncalibrated formula's terms)
  assert one.bound == "latency" and one.parts["latency_s"] == pytest.approx(1e6 / dev.clock_hz)
  two = launch_time(_facts(chain_cycles=1e6, blocks=132 * 4), dev, calibration=None)  # 4 blocks/SM, 2 resident: 2 waves
  assert two.parts["latency_s"] == pytest.approx(2 * one.parts["latency_s"])
  assert launch_time(_facts(chain_cycles=10.0), dev, calibration=None).bound != "latency"


def test_register_spills_are_l2_traffic():
  from minicomp.search.static.model import L2_BW_FACTOR, launch_time
  dev = Target("h100").device
  base = launch_time(_facts(), dev, calibration=None)
  spilled = launch_time(_facts(local_bytes_per_thread=1000.0), dev, calibration=None)
  extra = 1000.0 * 256 * 132 / (L2_BW_FACTOR * dev.dram_bandwidth_gbs * 1e9)
  assert spilled.parts["l2_s"] - base.parts["l2_s"] == pytest.approx(extra / spilled.efficiency["memory"])


@pytest.mark.parametrize("target", ["rtx3090", "h100"])
def test_no_fp32_kernel_is_estimated_below_the_fp32_floor(target):
  """``fp32_floor``: the least the model can estimate an FP32-pipe kernel of so many multiply-adds at (compile keeps a
  tensor-core schedule below it without constructing an FP32 one). A well tiled SGEMM and Gensor's construction of
  a convolution sit above it, and near it only where the kernel is compute bound; the H100's calibration weighs the
  FP32 pipes by its fitted weight (above 1: no timed program came near FP32 peak)."""
  import test_workloads as T
  from minicomp.search.static.calibration import active
  from minicomp.search.static.model import LAUNCH_OVERHEAD_S, fp32_floor
  from minicomp.search.strategies.gensor import construct
  dev = Target(target).device
  n = 2048
  floor = fp32_floor(n ** 3, dev)
  e = estimate(mc.build(T.mm_tiled_shared(W.matmul(n, n, n), tile=128, thread=8, kt=8), target), target).latency_s
  assert floor <= e <= 4 * floor
  plain = fp32_floor(n ** 3, dev, calibration=None)
  cal = active(dev)
  assert plain - LAUNCH_OVERHEAD_S == pytest.approx(n ** 3 / (dev.fp32_peak_flops / 2), rel=1e-9)
  weight = cal.weights["fp32"] if cal is not None else 1.0
  assert (floor - LAUNCH_OVERHEAD_S) == pytest.approx(weight * (plain - LAUNCH_OVERHEAD_S), rel=1e-9)
  wl = W.conv2d(1, 64, 28, 28, 64, 3, pad=1)
  c = construct(mc.ComputeDAG(wl.outputs), Target(target)).candidates[0]
  assert estimate(mc.build(c.schedule, target), target).latency_s >= fp32_floor(28 * 28 * 64 * 64 * 9, dev)
