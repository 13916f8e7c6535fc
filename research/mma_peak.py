"""The tensor pipe's mma.sync throughput on this GPU: the ceiling of minicomp's tensor-core kernels (issue 47).

The static model took each device's tensor rate from its datasheet (target.py). On sm_90 that peak (989 TFLOP/s
fp16 dense on an H100 / H200) is quoted for wgmma, the warp-group instruction; mma.sync, which minicomp emits, ran
at 636 TFLOP/s here on an H200 (2026-11-30), which target.py's sm_90 rate is now. compile's fp16 matmul 4096^3 ran
at 272 TFLOP/s on an H200 (2026-11-29) and cuBLAS (wgmma) at 768: whether 0.6x cuBLAS is reachable with mma.sync at
all depends on this number.

The kernel: every warp of 4 blocks per SM runs ``CHAINS`` independent m16n8k16 accumulations on register operands
(no memory traffic) ``ITERS`` times; TFLOP/s = 2 x 16 x 8 x 16 x instructions / time. ``--check`` runs a short
version in the CPU simulator (accumulator c must hold c + 16 x iterations: the operands are halves of 1.0);
``--gpu`` times it (CUDA events, median of 20) for fp16 and bf16 and prints the ratio to the static model's rate.

    python research/mma_peak.py --check
    python research/mma_peak.py --gpu
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CHAINS = 8            # independent accumulators per warp (hides the instruction's latency)
THREADS = 256
ONE = {"f16": 0x3c003c00, "bf16": 0x3f803f80}    # two 16-bit ones in a register


def source(kind: str, iters: int) -> str:
  one = ONE[kind]
  return f"""\
extern "C" __global__ void __launch_bounds__({THREADS}) peak(float* out) {{
  const unsigned a[4] = {{{one}u, {one}u, {one}u, {one}u}}, b[2] = {{{one}u, {one}u}};
  float d[{CHAINS}][4];
  #pragma unroll
  for (int c = 0; c < {CHAINS}; ++c) d[c][0] = d[c][1] = d[c][2] = d[c][3] = (float)c;   // (chains apart: no CSE)
  #pragma unroll 1
  for (int it = 0; it < {iters}; ++it) {{   // (not unrolled: NVVM took most of a minute on 4096 unrolled steps)
    #pragma unroll
    for (int c = 0; c < {CHAINS}; ++c) mc_mma_m16n8k16_{kind}(d[c], a, b);
  }}
  float s = 0.0f;
  #pragma unroll
  for (int c = 0; c < {CHAINS}; ++c) s += d[c][0] + d[c][1] + d[c][2] + d[c][3];
  out[blockIdx.x * {THREADS} + threadIdx.x] = s;
}}
"""


def check(iters: int = 3) -> int:
  from minicomp.codegen.simulator import build_simulator
  bad = 0
  for kind in ONE:
    mod = build_simulator(source(kind, iters), {"peak": ["float*"]})
    out = np.zeros(2 * THREADS, np.float32)
    mod.launch("peak", (2, 1, 1), (THREADS, 1, 1), [out])
    want = CHAINS * 4 * 16.0 * iters + 4 * sum(range(CHAINS))
    ok = bool((out == want).all())
    bad += not ok
    print(f"{kind}: simulator sums {sorted(set(out.tolist()))[:3]}, want {want}: {'ok' if ok else 'WRONG'}")
  return 1 if bad else 0


def gpu(iters: int, repeat: int) -> int:
  import minicomp as mc
  from minicomp.codegen.driver import get_driver, gpu_arch
  from minicomp.codegen.nvrtc import compile_cuda
  from minicomp.target import Target
  drv, arch = get_driver(), gpu_arch()
  dev = Target(arch).device if not mc.gpu_available() else Target("cuda").device
  blocks = 4 * dev.sm_count
  out = drv.alloc(blocks * THREADS * 4)
  start, end = drv.event(), drv.event()
  flop = 2.0 * 16 * 8 * 16 * CHAINS * iters * blocks * THREADS // 32
  print(f"# python research/mma_peak.py --gpu: {mc.gpu_status()}; {blocks} blocks x {THREADS} threads, {CHAINS} "
        f"chains x {iters} mma.sync m16n8k16 per warp, median of {repeat}")
  print("| operands | us | TFLOP/s | the static model's rate (TFLOP/s) | measured / model |\n|---|---|---|---|---|")
  for kind in ONE:
    fn = drv.function(drv.module_load(compile_cuda(source(kind, iters), arch).cubin), "peak")
    drv.launch(fn, (blocks, 1, 1), (THREADS, 1, 1), 0, [out]); drv.sync()
    times = []
    for _ in range(repeat):
      drv.record(start); drv.launch(fn, (blocks, 1, 1), (THREADS, 1, 1), 0, [out]); drv.record(end)
      times.append(drv.elapsed_s(start, end))
    s = statistics.median(times)
    model = dev.tensor_fp16_tflops
    print(f"| {kind} | {s * 1e6:.1f} | {flop / s / 1e12:.0f} | {model:.0f} | {flop / s / 1e12 / model:.2f} |")
  return 0


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--check", action="store_true", help="a short run in the CPU simulator")
  ap.add_argument("--gpu", action="store_true", help="time it on this machine's GPU")
  ap.add_argument("--iters", type=int, default=4096)
  ap.add_argument("--repeat", type=int, default=20)
  a = ap.parse_args()
  if a.check: return check()
  if a.gpu: return gpu(a.iters, a.repeat)
  ap.print_help()
  return 2


if __name__ == "__main__":
  raise SystemExit(main())
