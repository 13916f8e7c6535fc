"""Compilation targets: every supported arch builds with NVRTC, three-digit (Blackwell) archs parse,
the Blackwell devices are in the table with finite static estimates. No GPU needed."""
import math

import numpy as np
import pytest

import minicomp as mc
from minicomp import workloads as W
from minicomp.graph.schedules import default_schedule
from minicomp.search.static.estimate import estimate
from minicomp.search.static.occupancy import kernel_occupancy
from minicomp.target import (
  DEFAULT_DEVICE,
  DEVICES,
  SUPPORTED_ARCHS,
  Target,
  TargetError,
  arch_compute_capability,
  get_device,
)


def _tiled_matmul(target: str):
  """C = A @ B with 16 x 16 thread blocks and a 16-wide K tile staged in shared memory."""
  import test_workloads as T
  wl = W.matmul(64, 48, 32)
  return wl, mc.build(T.mm_tiled_shared(wl, tile=32, thread=2, kt=16), target)


@pytest.mark.parametrize("arch", SUPPORTED_ARCHS)
def test_every_supported_arch_compiles(arch):
  wl = W.row_sum(64, 100)
  kern = mc.build(default_schedule(wl.outputs, arch), arch)
  assert kern.binary.arch == arch and kern.target.arch == arch
  assert f"for '{arch}'" in kern.binary.log          # ptxas compiled SASS for the arch itself
  assert kern.binary.resources and all(r.registers > 0 for r in kern.binary.resources.values())   # ptxas -v parsed


@pytest.mark.parametrize("arch", ["sm_100", "sm_120"])
def test_blackwell_kernel_matches_numpy(arch):
  wl, kern = _tiled_matmul(arch)
  assert kern.binary.arch == arch and ".shared" in kern.ptx
  ins = wl.random_inputs(3)
  np.testing.assert_allclose(kern(*ins, device="cpu"), wl.reference(*ins), rtol=1e-4, atol=1e-4)


def test_three_digit_archs_parse():
  assert Target("sm_100").compute_capability == (10, 0) and Target("sm_120").compute_capability == (12, 0)
  assert Target("sm100") == Target("sm_100") and str(Target("sm120")) == "sm_120"
  assert Target("sm_86").compute_capability == (8, 6)     # two digits unchanged
  assert arch_compute_capability("sm_90") == (9, 0) and arch_compute_capability("sm_120") == (12, 0)
  assert DEVICES["b200"].compute_capability == (10, 0) and DEVICES["rtx5090"].compute_capability == (12, 0)
  assert get_device("sm_100") is DEVICES["b200"] and get_device("sm120") is DEVICES["rtx5090"]


def test_blackwell_devices():
  assert Target("sm_100").device.name == "b200" and Target("sm_120").device.name == "rtx5090"
  assert Target("b200").arch == "sm_100" and Target("rtx5090").arch == "sm_120"
  assert Target("RTX 5090") == Target("rtx5090") and Target("sm_120", device_name="rtx5090") == Target("rtx5090")
  assert DEFAULT_DEVICE["sm_100"] == "b200" and DEFAULT_DEVICE["sm_120"] == "rtx5090"
  assert Target("sm_100").max_shared_optin_bytes == 227 * 1024 and Target("sm_120").max_shared_optin_bytes == 99 * 1024
  b, r = DEVICES["b200"], DEVICES["rtx5090"]
  limits = lambda d: (d.max_warps_per_sm, d.max_blocks_per_sm, d.smem_per_sm_bytes // 1024, d.l1_bytes_per_sm // 1024)
  assert limits(b) == (64, 32, 228, 256) and limits(r) == (48, 24, 100, 128)
  assert (b.fp64_lanes_per_sm, r.fp64_lanes_per_sm) == (64, 2)
  # RTX Blackwell whitepaper: 104.8 TFLOP/s FP32; B200: 148 SMs at 1965 MHz (an assumption) -> 74.4
  assert r.fp32_peak_flops / 1e12 == pytest.approx(104.8, rel=0.01)
  assert b.fp32_peak_flops / 1e12 == pytest.approx(74.4, rel=0.01)
  assert b.dram_bandwidth_gbs == 8000 and r.dram_bandwidth_gbs == 1792


@pytest.mark.parametrize("bad", ["sm_61", "sm_101", "sm_121", "sm_1000", "sm_7", "sm_", "b100", "gpu", ""])
def test_unknown_archs_raise(bad):
  with pytest.raises(TargetError):
    Target(bad)


def test_device_name_must_match_a_three_digit_arch():
  with pytest.raises(TargetError):
    Target("sm_100", device_name="rtx5090")
  with pytest.raises(TargetError):
    arch_compute_capability("b200")


@pytest.mark.parametrize("device", ["b200", "rtx5090"])
def test_static_estimate_on_blackwell_devices(device):
  _, kern = _tiled_matmul(Target(device).arch)
  e = estimate(kern, device)
  assert math.isfinite(e.latency_s) and e.latency_s > 0 and e.device == device
  assert mc.estimate(kern, Target(device).arch).latency_s == e.latency_s     # the arch's default device
  occ, = kernel_occupancy(kern, device)
  assert occ.device == device and 0 < occ.occupancy <= 1 and occ.blocks_per_sm >= 1


def test_an_h200_is_an_h100_with_more_memory_bandwidth_and_is_found_by_its_name():
  from minicomp.target import device_for_gpu
  h100, h200 = DEVICES["h100"], DEVICES["h200"]
  assert h200.arch == "sm_90" and h200.dram_bandwidth_gbs == 4800 and DEFAULT_DEVICE["sm_90"] == "h100"
  assert (h200.sm_count, h200.boost_clock_mhz, h200.l2_bytes) == (h100.sm_count, h100.boost_clock_mhz, h100.l2_bytes)
  assert device_for_gpu("NVIDIA H200", "sm_90") == "h200" and device_for_gpu("NVIDIA H100 80GB HBM3", "sm_90") == "h100"
  _, kern = _tiled_matmul("sm_90")
  e100, e200 = estimate(kern, "h100"), estimate(kern, "h200")
  assert e200.device == "h200" and 0 < e200.latency_s <= e100.latency_s   # the same SMs, faster DRAM
