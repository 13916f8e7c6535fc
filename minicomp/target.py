"""Compilation targets: a CUDA architecture (``"sm_86"``) or a named device (``"rtx3090"``).

``Target`` holds the limits the schedule checks need (threads per block, shared memory per
block, warp size). ``DeviceSpec`` holds the per-device numbers the static cost model needs
(SM count, clock, lanes per SM, occupancy limits, caches, DRAM bandwidth); ``DEVICES`` names
them and ``DEFAULT_DEVICE`` picks one per arch, so ``Target("sm_86").device`` is an RTX 3090
and ``Target("a6000")`` is an sm_86 target with the RTX A6000's numbers.

Sources (named again next to each value):

* [CCT] CUDA C++ Programming Guide, "Compute Capabilities" (Technical Specifications per
  Compute Capability) and "Arithmetic Instructions" throughput tables: every per-SM limit
  that depends only on the compute capability (threads / warps / blocks / registers /
  shared memory per SM, shared memory per block, unified L1 size, FP32 / INT32 / SFU
  results per clock per SM, 32 shared-memory banks, warp size 32). For compute capability 10.0
  and 12.0 also its per-arch sections "Compute Capability 10.0" / "12.0" ("Architecture",
  "Shared Memory"; numbered 20.9 / 20.10 in the CUDA 13.1 edition).
* [OCC] ``cuda_occupancy.h`` (CUDA Toolkit occupancy calculator): register allocation unit
  256 per warp, 4 SM sub-partitions, shared-memory allocation unit (256 B on 7.x, 128 B
  on 8.x; 128 B taken for 9.0 as well; CUDA 13.0's header: 128 B for majors 8 .. 12) and the
  1 KiB of shared memory the driver reserves per block from Ampere on
  (``reservedSharedMemPerBlock``).
* [WP] The SM diagrams of the architecture whitepapers (Volta GV100, Turing, Ampere GA100 and
  GA102, Ada, Hopper GH100): load/store units per SM, 8 per sub-partition on the datacenter
  chips (GV100, GA100, GH100) and 4 on the others (TU10x, GA10x, AD10x). The Jetson archs are
  taken as their desktop relatives (sm_72 as Volta, sm_87 as GA10x), an assumption; so are
  the Blackwell archs (sm_100 as GH100, sm_120 as AD10x: see ``_ARCH``).
* [BTG] NVIDIA Blackwell Tuning Guide (CUDA 12.8+), "Occupancy" and "Unified Shared Memory/L1/
  Texture Cache": the compute capability 10.0 and 12.0 limits (warps, blocks, registers and
  shared memory per SM, shared memory per block, 1 KiB reserved per block, the 256 KiB
  combined L1 / shared memory of the B200).
* Product figures (SM count, boost clock, L2, DRAM bandwidth) from the architecture
  whitepaper or datasheet named in each ``DEVICES`` entry.

Limits checked at build time are the same on every arch minicomp supports: 1024 threads per
block, 48 KiB of statically allocated shared memory per block, 255 registers per thread,
warp size 32 [CCT].
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from minicomp.errors import TargetError


SUPPORTED_ARCHS = ("sm_70", "sm_72", "sm_75", "sm_80", "sm_86", "sm_87", "sm_89", "sm_90", "sm_100", "sm_120")

# Opt-in dynamic shared memory per block (CUDA C++ Programming Guide, compute capability table;
# sm_100 / sm_120: its sections 20.9.3 / 20.10.3 "Shared Memory" and [BTG]).
_SMEM_OPTIN = {"sm_70": 96 * 1024, "sm_72": 96 * 1024, "sm_75": 64 * 1024, "sm_80": 163 * 1024,
               "sm_86": 99 * 1024, "sm_87": 163 * 1024, "sm_89": 99 * 1024, "sm_90": 227 * 1024,
               "sm_100": 227 * 1024, "sm_120": 99 * 1024}

# A block's static __shared__ arrays may hold this much on every arch; more is dynamic shared memory, which a kernel
# must be allowed (cuFuncSetAttribute MAX_DYNAMIC_SHARED_SIZE_BYTES) up to _SMEM_OPTIN (CUDA C Programming Guide,
# "Shared Memory" of each compute capability)
STATIC_SHARED_BYTES = 48 * 1024
MAX_SHARED_OPTIN_BYTES = max(_SMEM_OPTIN.values())   # the most any arch allows (the simulator's dynamic array)

# "sm_86" / "sm86" -> "86"; "sm_100" -> "100" (three digits from Blackwell on: CC 10.0, 12.0).
_ARCH_RE = re.compile(r"sm_?(\d{2,3})", re.IGNORECASE)   # ("SM_86" too)


def arch_compute_capability(arch: str) -> tuple[int, int]:
  """``"sm_86"`` -> (8, 6); ``"sm_100"`` -> (10, 0): the last digit is the minor version."""
  m = _ARCH_RE.fullmatch(arch.strip())
  if m is None:
    raise TargetError(f"not a CUDA arch: {arch!r} (expected e.g. 'sm_86' or 'sm_100')")
  digits = m.group(1)
  return int(digits[:-1]), int(digits[-1])

KiB, MiB = 1024, 1024 * 1024


@dataclass(frozen=True)
class DeviceSpec:
  """The numbers of one GPU that the static cost model (Tuna, Sec. III-B) and the occupancy
  calculator need. Per-SM figures are per streaming multiprocessor; sizes are in bytes."""
  name: str
  arch: str
  sm_count: int
  boost_clock_mhz: float
  fp32_lanes_per_sm: int            # FP32 add/mul/fma results per clock per SM [CCT]
  sfu_lanes_per_sm: int             # rcp/rsqrt/lg2/ex2/sin/cos results per clock per SM [CCT]
  int32_lanes_per_sm: int           # 32-bit integer add results per clock per SM [CCT]
  fp64_lanes_per_sm: int            # FP64 add/mul/fma results per clock per SM [CCT]
  lsu_lanes_per_sm: int             # load/store unit lanes per SM [WP]: a warp's memory instruction per 32/lanes clocks
  max_threads_per_sm: int
  max_warps_per_sm: int
  max_blocks_per_sm: int
  regs_per_sm: int                  # 32-bit registers
  max_regs_per_thread: int
  reg_alloc_unit: int               # registers, allocated per warp [OCC]
  smem_per_sm_bytes: int            # largest shared-memory carveout per SM
  smem_per_block_static: int        # statically allocated __shared__ per block
  smem_per_block_optin: int         # with cudaFuncAttributeMaxDynamicSharedMemorySize
  smem_alloc_unit: int              # shared-memory allocation granularity [OCC]
  smem_reserved_per_block: int      # driver-reserved shared memory per block (sm_80+) [OCC]
  l1_bytes_per_sm: int              # unified L1 / shared-memory capacity per SM
  l2_bytes: int
  dram_bandwidth_gbs: float         # GB/s (10^9 bytes per second), vendor peak
  smem_banks: int = 32
  warp_size: int = 32
  max_threads_per_block: int = 1024
  regs_per_block: int = 64 * 1024
  sub_partitions: int = 4           # SM sub-partitions (warp schedulers) [OCC]
  tensor_fp16_tflops: float = 0.0   # dense tensor-core FP16 / BF16 TFLOP/s with FP32 accumulate (datasheets; see DEVICES)
  tensor_tf32_tflops: float = 0.0   # dense tensor-core TF32 TFLOP/s (0: no TF32)
  tensor_int8_tops: float = 0.0     # dense tensor-core INT8 TOPS, int32 accumulate (0: none)

  @property
  def clock_hz(self) -> float: return self.boost_clock_mhz * 1e6

  @property
  def fp32_peak_flops(self) -> float:
    """Peak FP32 FLOP/s: 2 (an FMA is two FLOPs) x lanes x SMs x boost clock."""
    return 2.0 * self.fp32_lanes_per_sm * self.sm_count * self.clock_hz

  @property
  def fp64_peak_flops(self) -> float: return 2.0 * self.fp64_lanes_per_sm * self.sm_count * self.clock_hz

  @property
  def int32_peak_ops(self) -> float: return float(self.int32_lanes_per_sm * self.sm_count * self.clock_hz)

  @property
  def sfu_peak_ops(self) -> float: return float(self.sfu_lanes_per_sm * self.sm_count * self.clock_hz)

  @property
  def dram_bytes_per_s(self) -> float: return self.dram_bandwidth_gbs * 1e9

  @property
  def smem_bytes_per_clock_per_sm(self) -> int:
    """One 32-bit word per bank per clock [CCT, "Shared Memory"]."""
    return 4 * self.smem_banks

  @property
  def smem_bandwidth_bytes_per_s(self) -> float:
    return float(self.smem_bytes_per_clock_per_sm * self.sm_count * self.clock_hz)

  @property
  def ridge_flops_per_byte(self) -> float:
    """FP32 roofline ridge point: the arithmetic intensity at which DRAM stops limiting."""
    return self.fp32_peak_flops / self.dram_bytes_per_s

  @property
  def compute_capability(self) -> tuple[int, int]: return arch_compute_capability(self.arch)

  def tensor_fma_per_clock_per_sm(self, kind: str) -> float:
    """Dense tensor-core FMAs per clock per SM for ``kind`` ("fp16": fp16 / bf16 inputs, "tf32", "int8": 8-bit
    integers), from the device's published TFLOP/s (TOPS) at its boost clock; 0 where it has none."""
    tflops = {"fp16": self.tensor_fp16_tflops, "tf32": self.tensor_tf32_tflops, "int8": self.tensor_int8_tops}[kind]
    return tflops * 1e12 / (2.0 * self.sm_count * self.clock_hz)


# Per-compute-capability columns [CCT] + allocation rules [OCC]:
# (max threads/SM, max warps/SM, max blocks/SM, smem/SM, smem/block opt-in, smem alloc unit,
#  reserved smem/block, unified L1+smem/SM, FP32 lanes, INT32 lanes, SFU lanes, FP64 lanes,
#  LD/ST lanes [WP]).
# FP64 lanes of the Jetson archs (sm_72, sm_87) are not published per SM; 2 (as on the other
# non-datacenter parts, sm_75 / sm_86 / sm_89) is an assumption.
#
# Blackwell (sm_100: B200 class; sm_120: GeForce RTX 50 / RTX PRO Blackwell class):
# - threads / warps per SM: [BTG] "64 [warps] for compute capability 10.0 and 48 for 12.0" (the
#   RTX 5090's driver reports 1536 threads per SM);
# - blocks per SM: 32 on sm_100 ([BTG]; cuda_occupancy.h of CUDA 13.0). sm_120: 24, from
#   cuda_occupancy.h (CUDA 13.0) ``cudaOccMaxBlocksPerMultiprocessor`` ("case 12: value = 24"),
#   which is what the occupancy calculator uses; [BTG] says 32 for 12.0. The sources disagree;
#   24 is the calculator's (and sm_89's, the other 48-warp SM) figure;
# - shared memory per SM: 228 KiB on sm_100 (carveouts 0 .. 228 KiB, [CCT] 20.9.3, [BTG]),
#   100 KiB on sm_120 (carveouts 0 .. 100 KiB, [CCT] 20.10.3; cuda_occupancy.h; the RTX 5090's
#   driver reports 102400 B). [BTG] says "128KB" for 12.0, which is the L1 + shared total;
# - per block with opt-in: 227 / 99 KiB ([CCT] 20.9.3 / 20.10.3, [BTG]); 1 KiB reserved per
#   block ([CCT], [BTG]); allocation unit 128 B (cuda_occupancy.h, CUDA 13.0: majors 8 .. 12);
# - unified L1 + shared per SM: 256 KiB on sm_100 ([CCT] 20.9.1, [BTG]); 128 KiB on sm_120
#   (NVIDIA RTX Blackwell GPU Architecture whitepaper, SM: 128 KB L1 / shared memory; [BTG]'s
#   "128KB"). [CCT] 20.10.1 prints "100 KB" for the unified cache of 12.0, which would leave no
#   L1 beside the 100 KiB carveout: taken as the shared-memory maximum, not the L1 size;
# - lanes: [CCT] 20.9.1 / 20.10.1 (the per-arch "Architecture" sections): 128 FP32, 64 INT32,
#   16 SFU per SM; FP64 64 (10.0) and 2 (12.0). The RTX Blackwell whitepaper makes all 128
#   cores FP32-or-INT32 capable (up to 128 INT32 per clock, shared with FP32); minicomp models
#   FP32 and INT32 as separate pipes, so the guide's 64 is kept;
# - LD/ST lanes: not published for either (NVIDIA has published no B200 SM diagram). An
#   assumption: sm_100 as GH100 (32: 8 per sub-partition, the datacenter SM it extends; the
#   diagram Chips and Cheese / Cornell CVW draw of the B200 SM shows 32), sm_120 as AD10x (16:
#   4 per sub-partition, the consumer SM it replaces).
_ARCH = {
  "sm_70": (2048, 64, 32, 96 * KiB, 96 * KiB, 256, 0, 128 * KiB, 64, 64, 16, 32, 32),
  "sm_72": (2048, 64, 32, 96 * KiB, 96 * KiB, 256, 0, 128 * KiB, 64, 64, 16, 2, 32),
  "sm_75": (1024, 32, 16, 64 * KiB, 64 * KiB, 256, 0, 96 * KiB, 64, 64, 16, 2, 16),
  "sm_80": (2048, 64, 32, 164 * KiB, 163 * KiB, 128, 1 * KiB, 192 * KiB, 64, 64, 16, 32, 32),
  "sm_86": (1536, 48, 16, 100 * KiB, 99 * KiB, 128, 1 * KiB, 128 * KiB, 128, 64, 16, 2, 16),
  "sm_87": (1536, 48, 16, 164 * KiB, 163 * KiB, 128, 1 * KiB, 192 * KiB, 128, 64, 16, 2, 16),
  "sm_89": (1536, 48, 24, 100 * KiB, 99 * KiB, 128, 1 * KiB, 128 * KiB, 128, 64, 16, 2, 16),
  "sm_90": (2048, 64, 32, 228 * KiB, 227 * KiB, 128, 1 * KiB, 256 * KiB, 128, 64, 16, 64, 32),
  "sm_100": (2048, 64, 32, 228 * KiB, 227 * KiB, 128, 1 * KiB, 256 * KiB, 128, 64, 16, 64, 32),
  "sm_120": (1536, 48, 24, 100 * KiB, 99 * KiB, 128, 1 * KiB, 128 * KiB, 128, 64, 16, 2, 16),
}


def _device(name: str, arch: str, sm_count: int, boost_clock_mhz: float, l2_bytes: int,
            dram_bandwidth_gbs: float, tensor: tuple[float, float, float] = (0.0, 0.0, 0.0)) -> DeviceSpec:
  (threads, warps, blocks, smem_sm, optin, smem_unit, reserved, l1, fp32, int32, sfu, fp64, lsu) = _ARCH[arch]
  return DeviceSpec(name=name, arch=arch, sm_count=sm_count, boost_clock_mhz=boost_clock_mhz,
                    fp32_lanes_per_sm=fp32, sfu_lanes_per_sm=sfu, int32_lanes_per_sm=int32, fp64_lanes_per_sm=fp64,
                    lsu_lanes_per_sm=lsu,
                    max_threads_per_sm=threads, max_warps_per_sm=warps, max_blocks_per_sm=blocks,
                    regs_per_sm=64 * 1024, max_regs_per_thread=255, reg_alloc_unit=256,
                    smem_per_sm_bytes=smem_sm, smem_per_block_static=48 * KiB, smem_per_block_optin=optin,
                    smem_alloc_unit=smem_unit, smem_reserved_per_block=reserved, l1_bytes_per_sm=l1,
                    l2_bytes=l2_bytes, dram_bandwidth_gbs=dram_bandwidth_gbs,
                    tensor_fp16_tflops=tensor[0], tensor_tf32_tflops=tensor[1], tensor_int8_tops=tensor[2])


# name -> DeviceSpec. Product figures: SM count, boost clock (MHz), L2, DRAM bandwidth (GB/s), and the tensor cores'
# dense TFLOP/s (FP16/BF16 inputs with FP32 accumulate, TF32) and INT8 TOPS (int32 accumulate), what minicomp's
# mma.sync computes (its INT8 shape, m16n8k32, needs sm_80: older parts' INT8 figures are given, not used).
# Datasheets give sparse figures beside dense ones (2x); the dense ones are used. GeForce parts accumulate FP16 in
# FP32 at half the rate of the professional parts on the same chip (GA102, AD102 whitepapers: "with FP32 Accumulate").
DEVICES: dict[str, DeviceSpec] = {d.name: d for d in (
  # NVIDIA Tesla V100 GPU Architecture whitepaper (WP-08608-001), Table 1 (V100 SXM2):
  # 80 SMs, 1530 MHz boost, 6144 KB L2, 900 GB/s HBM2 -> 15.7 TFLOP/s FP32.
  # Tensor: 125 TFLOP/s mixed precision (whitepaper Table 1); no TF32, no INT8.
  _device("v100", "sm_70", 80, 1530, 6 * MiB, 900, (125.0, 0.0, 0.0)),
  # NVIDIA Jetson AGX Xavier series datasheet: 512-core Volta GPU (8 SMs) at 1377 MHz max,
  # 512 KB L2, 136.5 GB/s LPDDR4x (256-bit, 2133 MHz).
  # Tensor: 64 Volta tensor cores (8 per SM as on the V100: 512 FP16 FMA per clock per SM) -> 11.3 TFLOP/s; no TF32.
  _device("xavier", "sm_72", 8, 1377, 512 * KiB, 136.5, (11.3, 0.0, 0.0)),
  # NVIDIA Turing GPU Architecture whitepaper (WP-09183-001), Appendix (Tesla T4) and the T4
  # datasheet: 40 SMs, 1590 MHz boost, 4096 KB L2, 320 GB/s GDDR6 -> 8.1 TFLOP/s FP32.
  # Tensor: 65 TFLOP/s mixed precision FP16/FP32, 130 INT8 TOPS (T4 datasheet); no TF32.
  _device("t4", "sm_75", 40, 1590, 4 * MiB, 320, (65.0, 0.0, 130.0)),
  # NVIDIA A100 Tensor Core GPU Architecture whitepaper, Table 3 (A100 SXM4 40 GB):
  # 108 SMs, 1410 MHz boost, 40 MB L2, 1555 GB/s HBM2 -> 19.5 TFLOP/s FP32.
  # Tensor: 312 FP16 / BF16, 156 TF32 TFLOP/s, 624 INT8 TOPS dense (whitepaper Table 1).
  _device("a100", "sm_80", 108, 1410, 40 * MiB, 1555, (312.0, 156.0, 624.0)),
  # NVIDIA Ampere GA102 GPU Architecture whitepaper (v2.1), Table 9 (GeForce RTX 3090):
  # 82 SMs, 1695 MHz boost, 6144 KB L2, 936 GB/s GDDR6X -> 35.6 TFLOP/s FP32.
  # Tensor (Table 9): FP16 with FP32 accumulate 71 dense (142 with FP16 accumulate), TF32 35.6, INT8 284 dense.
  _device("rtx3090", "sm_86", 82, 1695, 6 * MiB, 936, (71.0, 35.6, 284.0)),
  # NVIDIA A10G (AWS EC2 G5): NVIDIA publishes no datasheet; figures as reported by
  # deviceQuery / nvidia-smi on g5 instances and the TechPowerUp GPU Database "NVIDIA A10G":
  # GA102 with 80 SMs, 1710 MHz boost, 6 MB L2, 600 GB/s GDDR6 -> 35.0 TFLOP/s FP32.
  # Tensor: assumed as the A10 (NVIDIA A10 datasheet: FP16 125, TF32 62.5 dense over 72 SMs: 512 and 256 FMA
  # per clock per SM; INT8 250 dense), scaled to 80 SMs at 1710 MHz: 140, 70 and 280. Unverified.
  _device("a10g", "sm_86", 80, 1710, 6 * MiB, 600, (140.0, 70.0, 280.0)),
  # NVIDIA RTX A5000 datasheet: 8192 CUDA cores (64 SMs), 27.8 TFLOP/s FP32 (-> 1695 MHz
  # boost), 768 GB/s GDDR6; 6 MB L2 (GA102, 384-bit bus; GA102 whitepaper).
  # Tensor: 222.2 TFLOP/s sparse (datasheet) -> FP16 111.1 dense; TF32 half of it, INT8 twice (derived).
  _device("a5000", "sm_86", 64, 1695, 6 * MiB, 768, (111.1, 55.6, 222.2)),
  # NVIDIA RTX A6000 datasheet: 10752 CUDA cores (84 SMs), 38.7 TFLOP/s FP32 (-> 1800 MHz
  # boost), 768 GB/s GDDR6; 6 MB L2 (GA102 whitepaper).
  # Tensor: 309.7 TFLOP/s sparse (datasheet) -> FP16 154.8 dense; TF32 half of it, INT8 twice (derived).
  _device("a6000", "sm_86", 84, 1800, 6 * MiB, 768, (154.8, 77.4, 309.6)),
  # NVIDIA Jetson AGX Orin series datasheet (AGX Orin 64GB): 2048-core Ampere GPU (16 SMs)
  # at 1300 MHz max (5.3 TFLOP/s FP32), 4 MB L2, 204.8 GB/s LPDDR5.
  # Tensor: the datasheet gives the GPU 170 sparse INT8 TOPS -> 85 INT8 and 42.5 FP16 dense, TF32 half of that.
  # Derived, unverified.
  _device("orin", "sm_87", 16, 1300, 4 * MiB, 204.8, (42.5, 21.3, 85.0)),
  # NVIDIA Ada GPU Architecture whitepaper (v2.1), Table 1 (GeForce RTX 4090): 128 SMs,
  # 2520 MHz boost, 72 MB L2, 1008 GB/s GDDR6X -> 82.6 TFLOP/s FP32.
  # Tensor (Table 1): FP16 with FP32 accumulate 165.2 dense, TF32 82.6 dense, INT8 660.6 dense.
  _device("rtx4090", "sm_89", 128, 2520, 72 * MiB, 1008, (165.2, 82.6, 660.6)),
  # NVIDIA L4 Tensor Core GPU datasheet and Ada whitepaper: 58 SMs (7424 CUDA cores),
  # 2040 MHz boost, 48 MB L2, 300 GB/s GDDR6 -> 30.3 TFLOP/s FP32.
  # Tensor: FP16 242, TF32 120 TFLOP/s, INT8 485 TOPS sparse (datasheet) -> 121, 60 and 242.5 dense.
  _device("l4", "sm_89", 58, 2040, 48 * MiB, 300, (121.0, 60.0, 242.5)),
  # NVIDIA H100 Tensor Core GPU Architecture whitepaper (SXM5: 132 SMs, 50 MB L2) and the H100
  # datasheet (SXM: 67 TFLOP/s FP32 -> 1980 MHz boost, 3.35 TB/s HBM3).
  # Tensor: what mma.sync reaches, which is all minicomp emits. The datasheet's FP16 / BF16 989.4, TF32 494.7
  # TFLOP/s and INT8 1978.9 TOPS dense (SXM) are wgmma's; register-only mma.sync m16n8k16 chains filling every SM
  # ran at 636 TFLOP/s on an H200 (2026-11-30, research/mma_peak.py: 0.64 of the datasheet's; the same GH100 and
  # clocks as the H100). TF32 and INT8 are taken at the same fraction (318.0, 1272.3): an assumption, not timed.
  _device("h100", "sm_90", 132, 1980, 50 * MiB, 3352, (636.0, 318.0, 1272.3)),
  # NVIDIA H200 Tensor Core GPU datasheet (SXM): the H100's GH100 (132 SMs, 50 MB L2, 67 TFLOP/s FP32
  # -> 1980 MHz boost) with 141 GB of HBM3e at 4.8 TB/s. Not the sm_90 default: an H100 is the common one.
  # Tensor: as the H100 (mma.sync's rate, measured on this GPU; datasheet 989 / 494 dense, INT8 1979).
  _device("h200", "sm_90", 132, 1980, 50 * MiB, 4800, (636.0, 318.0, 1272.3)),
  # NVIDIA B200 (HGX / DGX B200, 180 GB HBM3e). NVIDIA's datasheets give no SM count or clock:
  # - 148 SMs: what the CUDA driver reports for a B200 (cudaDeviceProp.multiProcessorCount,
  #   e.g. the device query in pytorch/ao PR #4002); the full two-die GB100 has more, disabled;
  # - 1965 MHz: the B200's maximum SM clock as nvidia-smi reports it (used as the locked clock of
  #   published B200 benchmarks, e.g. FlashInfer's); an assumption, not a datasheet figure;
  #   -> 74.4 TFLOP/s FP32;
  # - 126 MiB L2: [BTG] "Increased L2 Capacity" (the driver reports 126.5 MiB);
  # - 8000 GB/s: DGX B200 datasheet (64 TB/s HBM3e for 8 GPUs). The driver's bus width and
  #   memory clock give 7.67 TB/s (7680-bit at 3996 MHz), a 4% lower peak.
  # Tensor: FP16 / BF16 2250, TF32 1100 TFLOP/s, INT8 4500 TOPS dense (HGX B200 datasheet, per GPU) reach the
  # tcgen05 instructions;
  # what the older mma.sync reaches on sm_100 is not published: an assumption.
  _device("b200", "sm_100", 148, 1965, 126 * MiB, 8000, (2250.0, 1100.0, 4500.0)),
  # NVIDIA RTX Blackwell GPU Architecture whitepaper, GeForce RTX 5090 (GB202) specifications:
  # 170 SMs (21760 CUDA cores), 2407 MHz boost, 98304 KB L2, 1792 GB/s GDDR7 (512-bit,
  # 28 Gbps) -> 104.8 TFLOP/s FP32.
  # Tensor: FP16 with FP32 accumulate 209.5, TF32 104.8 TFLOP/s, INT8 838 TOPS dense (the same whitepaper).
  # Unverified here.
  _device("rtx5090", "sm_120", 170, 2407, 96 * MiB, 1792, (209.5, 104.8, 838.0)),
)}

# The device an arch-only target estimates for. sm_72 / sm_87 exist only as Jetson modules:
# the largest of each (AGX Xavier, AGX Orin 64GB).
DEFAULT_DEVICE = {"sm_70": "v100", "sm_72": "xavier", "sm_75": "t4", "sm_80": "a100", "sm_86": "rtx3090",
                  "sm_87": "orin", "sm_89": "rtx4090", "sm_90": "h100", "sm_100": "b200", "sm_120": "rtx5090"}


def _device_key(name: str) -> str:
  """``"RTX 3090"``, ``"rtx-3090"`` and ``"rtx3090"`` name the same device."""
  return re.sub(r"[\s_\-]", "", name.strip().lower())


def get_device(name: str) -> DeviceSpec:
  """The ``DeviceSpec`` named ``name`` (a device name or an arch, which gives its default device)."""
  key = _device_key(name)
  if key in DEVICES:
    return DEVICES[key]
  m = _ARCH_RE.fullmatch(key)
  if m and f"sm_{m.group(1)}" in DEFAULT_DEVICE:
    return DEVICES[DEFAULT_DEVICE[f"sm_{m.group(1)}"]]
  raise TargetError(f"unknown device {name!r}; known devices: {', '.join(DEVICES)}; "
                    f"archs: {', '.join(SUPPORTED_ARCHS)}")


@dataclass(frozen=True)
class Target:
  """A CUDA compilation target.

  ``Target("sm_86")`` (or ``"sm86"``) is the arch with its default device (``.device``);
  ``Target("rtx3090")`` (any name in ``DEVICES``) is that device's arch with that device.
  ``max_shared_bytes_per_block`` is the shared memory a block may use: by default the arch's opt-in maximum
  (``max_shared_optin_bytes``; a kernel past :data:`STATIC_SHARED_BYTES` takes it as dynamic shared memory,
  codegen/cuda.py). The searches offer a block at most :attr:`search_shared_bytes`.
  """
  arch: str
  max_threads_per_block: int = 1024
  max_shared_bytes_per_block: int | None = None    # None: the arch's opt-in maximum
  max_registers_per_thread: int = 255
  warp_size: int = 32
  max_vthread_extent: int = 8  # Ansor's GPU default (HardwareParams.max_vthread_extent)
  max_block_dims: tuple[int, int, int] = (1024, 1024, 64)
  max_grid_dims: tuple[int, int, int] = (2**31 - 1, 65535, 65535)
  device_name: str | None = None  # set for named-device targets; None -> DEFAULT_DEVICE[arch]

  def __post_init__(self):
    self._resolve()
    if self.max_shared_bytes_per_block is None:
      object.__setattr__(self, "max_shared_bytes_per_block", _SMEM_OPTIN[self.arch])

  def _resolve(self) -> None:
    if self.arch.strip().lower() in GPU_TARGETS:
      arch, dev = resolve_gpu_target(self.arch.strip().lower())
      object.__setattr__(self, "arch", arch)
      if self.device_name is None: object.__setattr__(self, "device_name", dev)
      return
    m = _ARCH_RE.fullmatch(self.arch.strip())
    if m is None:
      key = _device_key(self.arch)
      if key not in DEVICES:
        raise TargetError(f"unknown target {self.arch!r}; supported archs: {', '.join(SUPPORTED_ARCHS)}; "
                          f"devices: {', '.join(DEVICES)}")
      if self.device_name is not None and _device_key(self.device_name) != key:
        raise TargetError(f"target {self.arch!r} given with a different device_name {self.device_name!r}")
      object.__setattr__(self, "arch", DEVICES[key].arch)
      object.__setattr__(self, "device_name", key)
      return
    if f"sm_{m.group(1)}" not in SUPPORTED_ARCHS:
      raise TargetError(f"unknown target {self.arch!r}; supported: {', '.join(SUPPORTED_ARCHS)}; "
                        f"devices: {', '.join(DEVICES)}")
    object.__setattr__(self, "arch", f"sm_{m.group(1)}")
    if self.device_name is not None:
      key = _device_key(self.device_name)
      if key not in DEVICES:
        raise TargetError(f"unknown device {self.device_name!r}; known devices: {', '.join(DEVICES)}")
      if DEVICES[key].arch != self.arch:
        raise TargetError(f"device {key} is {DEVICES[key].arch}, not {self.arch}")
      object.__setattr__(self, "device_name", key)

  @property
  def compute_capability(self) -> tuple[int, int]:
    return arch_compute_capability(self.arch)

  @property
  def max_shared_optin_bytes(self) -> int:
    return _SMEM_OPTIN[self.arch]

  @property
  def search_shared_bytes(self) -> int:
    """The shared memory the searches (sketch validity, Gensor, Felix, the tensor-core template) offer a block:
    :data:`STATIC_SHARED_BYTES`, or less where ``max_shared_bytes_per_block`` is less. Tiles past it build (as
    dynamic shared memory) but are not proposed: none has been timed on a GPU yet."""
    return min(self.max_shared_bytes_per_block, STATIC_SHARED_BYTES)

  @property
  def device(self) -> DeviceSpec:
    """The device the cost model estimates for: the named one, else the arch's default."""
    return DEVICES[self.device_name or DEFAULT_DEVICE[self.arch]]

  @property
  def name(self) -> str:
    """The device name (``"rtx3090"`` for both ``Target("rtx3090")`` and ``Target("sm_86")``)."""
    return self.device.name

  def __str__(self) -> str:
    return self.device_name or self.arch


GPU_TARGETS = ("cuda", "auto")
AUTO_FALLBACK_ARCH = "sm_86"   # what target="auto" builds for on a machine without a GPU


def device_for_gpu(gpu_name: str, arch: str) -> str | None:
  """The ``DEVICES`` entry a GPU's reported name is (``"NVIDIA H100 80GB HBM3"`` -> ``"h100"``):
  the longest device name of the same arch found in it, else None (the arch's default device)."""
  key = _device_key(gpu_name)
  hits = [n for n, d in DEVICES.items() if d.arch == arch and n in key]
  return max(hits, key=len) if hits else None


def resolve_gpu_target(kind: str) -> tuple[str, str | None]:
  """(arch, device name) for ``target="cuda"`` / ``"auto"``: GPU 0's compute capability (its
  device entry when the table knows it). Without a usable GPU ``"cuda"`` raises TargetError
  saying so and ``"auto"`` builds for :data:`AUTO_FALLBACK_ARCH`. A GPU newer than every
  supported arch gets the newest supported one of no newer compute capability (the driver
  JIT-compiles its PTX)."""
  import logging
  from minicomp.codegen.driver import get_driver
  from minicomp.errors import RuntimeLaunchError
  log = logging.getLogger("minicomp")
  try:
    info = get_driver().info()
  except RuntimeLaunchError as e:
    if kind == "cuda":
      raise TargetError(f"target='cuda' means the arch of GPU 0, but there is none here ({e}); name an arch "
                        f"instead, e.g. target='sm_86' (NVRTC compiles for any arch without a GPU), or use "
                        f"target='auto' ({AUTO_FALLBACK_ARCH} without a GPU)") from None
    log.info("target='auto': no usable GPU, building for %s", AUTO_FALLBACK_ARCH)
    return AUTO_FALLBACK_ARCH, None
  cc = info.compute_capability
  ok = [a for a in SUPPORTED_ARCHS if arch_compute_capability(a) <= cc]
  if not ok:
    raise TargetError(f"GPU 0 ({info}) is older than every arch minicomp supports ({', '.join(SUPPORTED_ARCHS)})")
  arch = max(ok, key=arch_compute_capability)
  if arch_compute_capability(arch) != cc:
    log.warning("GPU 0 is %s, which minicomp has no target for: building for %s (the driver JIT-compiles its PTX)",
                info.arch, arch)
  return arch, device_for_gpu(info.name, arch)


def as_target(t: Target | str) -> Target:
  return t if isinstance(t, Target) else Target(t)
