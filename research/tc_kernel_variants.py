"""Hand-written fp16 tensor-core matmuls against compile's template, on a GPU: which change buys what (issue 47).

compile's template (graph/tensor_core_schedules.py) reached 64 TFLOP/s on an H200 at 4096^3 (2026-11-29,
benchmarks/tensor_cores.py --gpu: 2150 us against cuBLAS's 181). Its kernel fills fragments with 32-bit and 16-bit
shared loads whose lane rows sit 2 MI tile rows apart (8-way bank conflicts), fetches synchronously and runs 4 warps
on a 128 x 64 tile. Each variant here changes one thing at a time, all written in the CUDA C the emitter writes
(the helpers of codegen/tensor_core.py):

- ``natural``: fragment rows ``16 i + g + 8 r`` (the PTX layout), shared rows padded by ``pad`` halves, the
  fragments read with plain loads;
- ``ldm``: the same with ``ldmatrix`` (A: x4, B: x2.trans);
- ``stages``: global -> shared through ``cp.async`` with that many buffers (1: synchronous loads);
- tile ``bm x bn x bk`` and warps ``wm x wn``;
- compile's template itself, and its 128 x 128 tile of 8 warps in 3 and 4 stages (``DEEP``: more than the 48 KB the
  template offers, as dynamic shared memory).

Correct first: ``--check`` runs each at 256 x 256 x 128 in the CPU simulator against numpy (float32 sums of the
same half inputs); ``--gpu`` checks each once on the GPU and times it (CUDA events, L2 flushed, median), beside
torch.matmul (cuBLAS) where torch is importable.

    python research/tc_kernel_variants.py --check
    python research/tc_kernel_variants.py --gpu --size 4096
    python research/tc_kernel_variants.py --gpu --size 4096 --templates-only   # the template's tiles and cuBLAS
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


@dataclass(frozen=True)
class Variant:
  name: str
  bm: int = 128
  bn: int = 64
  bk: int = 32
  wm: int = 2           # warps along m
  wn: int = 2           # warps along n
  pad: int = 8          # halves added to each shared row
  ldm: bool = True
  stages: int = 1

  @property
  def threads(self) -> int: return 32 * self.wm * self.wn


VARIANTS = [
  Variant("natural_scalar", ldm=False),
  Variant("natural_ldm", ldm=True),
  Variant("natural_ldm_nopad", ldm=True, pad=0),
  Variant("ldm_cp3", stages=3),
  Variant("ldm_128x128_cp2", bn=128, stages=2),
  Variant("ldm_128x128_8w_cp2", bn=128, wn=4, stages=2),
  Variant("ldm_128x128x64_8w_cp1", bn=128, bk=64, wn=4, stages=1),
]


def source(v: Variant, M: int, N: int, K: int) -> str:
  """The kernel ``mm`` of variant ``v`` for C[M, N] = A[M, K] B[K, N] (row-major halves, float32 sums)."""
  wtm, wtn = v.bm // v.wm, v.bn // v.wn
  mi, ni = wtm // 16, wtn // 8
  ar, br = v.bk + v.pad, v.bn + v.pad
  assert M % v.bm == 0 and N % v.bn == 0 and K % v.bk == 0 and v.bk % 16 == 0
  if v.stages > 1:
    copy = "mc_cp_async_16(dst, src, true)"
  else:
    copy = "*reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src)"
  if v.ldm:
    frag_a = "mc_ldmatrix_x4(af[i], &As[s][wrow + i * 16 + lane % 16][kk + lane / 16 * 8]);"
    frag_b = "mc_ldmatrix_x2_trans(bf[j], &Bs[s][kk + lane % 16][wcol + j * 8]);"
  else:
    frag_a = ("for (int r = 0; r < 4; ++r) af[i][r] = *reinterpret_cast<const unsigned*>("
              "&As[s][wrow + i * 16 + g + 8 * (r % 2)][kk + 2 * t + 8 * (r / 2)]);")
    frag_b = ("for (int r = 0; r < 2; ++r) bf[j][r] = mc_pack_h2(Bs[s][kk + 2 * t + 8 * r][wcol + j * 8 + g], "
              "Bs[s][kk + 2 * t + 1 + 8 * r][wcol + j * 8 + g]);")
  wait = f"mc_cp_async_wait<{v.stages - 2}>();" if v.stages > 1 else ""
  commit = "mc_cp_async_commit();" if v.stages > 1 else ""
  return f"""\
extern "C" __global__ void __launch_bounds__({v.threads}) mm(const __half* __restrict__ A, const __half* __restrict__ B,
                                                   __half* __restrict__ C) {{
  __shared__ __align__(16) __half As[{v.stages}][{v.bm}][{ar}];
  __shared__ __align__(16) __half Bs[{v.stages}][{v.bk}][{br}];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
  const int wrow = warp / {v.wn} * {wtm}, wcol = warp % {v.wn} * {wtn};
  const int bm = blockIdx.y * {v.bm}, bn = blockIdx.x * {v.bn};
  float acc[{mi}][{ni}][4];
  #pragma unroll
  for (int i = 0; i < {mi}; ++i)
    #pragma unroll
    for (int j = 0; j < {ni}; ++j)
      #pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
  auto load = [&](int s, int k0) {{
    #pragma unroll
    for (int c = tid; c < {v.bm * v.bk // 8}; c += {v.threads}) {{
      const int r = c / {v.bk // 8}, col = c % {v.bk // 8} * 8;
      void* dst = &As[s][r][col]; const void* src = A + (size_t)(bm + r) * {K} + k0 + col;
      {copy};
    }}
    #pragma unroll
    for (int c = tid; c < {v.bk * v.bn // 8}; c += {v.threads}) {{
      const int r = c / {v.bn // 8}, col = c % {v.bn // 8} * 8;
      void* dst = &Bs[s][r][col]; const void* src = B + (size_t)(k0 + r) * {N} + bn + col;
      {copy};
    }}
  }};
  const int kt_n = {K // v.bk};
  #pragma unroll
  for (int s = 0; s < {v.stages} - 1; ++s) {{ if (s < kt_n) load(s, s * {v.bk}); {commit} }}
  for (int kt = 0; kt < kt_n; ++kt) {{
    {wait}
    __syncthreads();
    const int nk = kt + {v.stages} - 1;
    if (nk < kt_n) load(nk % {v.stages}, nk * {v.bk});
    {commit}
    {"__syncthreads();" if v.stages == 1 else ""}
    const int s = kt % {v.stages};
    #pragma unroll
    for (int kk = 0; kk < {v.bk}; kk += 16) {{
      unsigned af[{mi}][4], bf[{ni}][2];
      #pragma unroll
      for (int i = 0; i < {mi}; ++i) {{ {frag_a} }}
      #pragma unroll
      for (int j = 0; j < {ni}; ++j) {{ {frag_b} }}
      #pragma unroll
      for (int i = 0; i < {mi}; ++i)
        #pragma unroll
        for (int j = 0; j < {ni}; ++j) mc_mma_m16n8k16_f16(acc[i][j], af[i], bf[j]);
    }}
  }}
  #pragma unroll
  for (int i = 0; i < {mi}; ++i)
    #pragma unroll
    for (int j = 0; j < {ni}; ++j)
      #pragma unroll
      for (int h = 0; h < 2; ++h) {{
        const int row = bm + wrow + i * 16 + g + 8 * h, col = bn + wcol + j * 8 + 2 * t;
        *reinterpret_cast<unsigned*>(C + (size_t)row * {N} + col) =
            mc_pack_h2(__float2half_rn(acc[i][j][2 * h]), __float2half_rn(acc[i][j][2 * h + 1]));
      }}
}}
"""


def with_helpers(src: str) -> str:
  """``src`` with the half types and the tensor-core helpers in front (what NVRTC pre-includes for minicomp)."""
  from minicomp.codegen import tensor_core
  from minicomp.codegen.nvrtc import HALF_HEADER
  return HALF_HEADER[1] + tensor_core.HEADER[1] + src


def inputs(M: int, N: int, K: int, seed: int = 0):
  rng = np.random.default_rng(seed)
  a = rng.standard_normal((M, K)).astype(np.float16)
  b = rng.standard_normal((K, N)).astype(np.float16)
  return a, b, a.astype(np.float32) @ b.astype(np.float32)


def close(out: np.ndarray, ref: np.ndarray) -> float:
  """The largest error over half an output ulp of the largest value (<= 1 passes)."""
  return float(np.abs(out.astype(np.float64) - ref).max() / (2.0 ** -11 * np.abs(ref).max()))


# compile's template with more pipeline stages than 48 KB of shared memory holds (dynamic shared memory, which the
# template does not offer until timed): (warps m, warps n, instructions m, n per warp) -> stages. The 256 x 128 and
# 128 x 256 tiles (8 warps of 64 x 64) read a quarter less from L2 than 128 x 128: 1.61 GB at 4096^3 against 2.15,
# which the 128 x 128 tile's 498 us on an H200 (4.3 TB/s) suggests is what bounds it (2026-12-02)
DEEP = {(2, 4, 4, 4): (3, 4), (4, 2, 4, 8): (2, 3), (2, 4, 4, 8): (2, 3)}


def deep_templates(M: int, N: int, K: int, target):
  """(name, schedule) of compile's template of an fp16 M x N x K matmul with :data:`DEEP`'s stages."""
  import minicomp as mc
  from minicomp import workloads as W
  from minicomp.graph.tensor_core_schedules import _schedule, plan
  dag = mc.ComputeDAG(W.matmul(M, N, K, dtype="float16").outputs)
  p = plan(dag, target)
  return [(f"template {16 * wm * mi}x{8 * wn * ni} {32 * wm * wn}t {n} stages", _schedule(dag, p, wm, wn, mi, ni,
                                                                                          target, stages=n))
          for (wm, wn, mi, ni), ns in DEEP.items() for n in ns]


def check(size=(256, 256, 128)) -> int:
  import minicomp as mc
  from minicomp.codegen.simulator import build_simulator
  M, N, K = size
  a, b, ref = inputs(M, N, K)
  bad = 0
  for name, sched in deep_templates(M, N, K, mc.Target("sm_90")):
    k = mc.build(sched, target="sm_90")
    err = close(k(a, b), ref)
    bad += err > 1
    print(f"{name:24s} simulator {M}x{N}x{K}: error {err:.2f} half-ulps of max |C|, {k.plan.launches[0].shared_bytes} "
          f"bytes of dynamic shared memory  {'ok' if err <= 1 else 'WRONG'}", flush=True)
  for v in VARIANTS:
    mod = build_simulator(source(v, M, N, K), {"mm": ["const __half*", "const __half*", "__half*"]})
    out = np.zeros((M, N), np.float16)
    mod.launch("mm", (N // v.bn, M // v.bm, 1), (v.threads, 1, 1), [a, b, out])
    err = close(out, ref)
    bad += err > 1
    print(f"{v.name:24s} simulator {M}x{N}x{K}: error {err:.2f} half-ulps of max |C|  {'ok' if err <= 1 else 'WRONG'}",
          flush=True)
  return 1 if bad else 0


def gpu(size: int, repeat: int, templates_only: bool = False) -> int:
  import minicomp as mc
  from minicomp import workloads as W
  from minicomp.codegen.driver import get_driver, gpu_arch
  from minicomp.codegen.gpu_runtime import L2Flush
  from minicomp.codegen.nvrtc import compile_cuda
  from minicomp.graph.tensor_core_schedules import tensor_core_schedules
  from minicomp.ir.dag import ComputeDAG
  from minicomp.search.static.estimate import estimate
  from minicomp.target import STATIC_SHARED_BYTES
  M = N = K = size
  drv, arch = get_driver(), gpu_arch()
  a, b, ref = inputs(M, N, K)
  flops = 2.0 * M * N * K
  pa, pb, pc = drv.alloc(a.nbytes), drv.alloc(b.nbytes), drv.alloc(M * N * 2)
  drv.htod(pa, a); drv.htod(pb, b)
  flush, start, end = L2Flush(drv), drv.event(), drv.event()

  def timed(fn, grid, block, args, shared=0):
    drv.memset(pc, M * N * 2)
    if shared > STATIC_SHARED_BYTES: drv.allow_shared(fn, shared)
    drv.launch(fn, grid, block, shared, args); drv.sync()
    out = np.zeros((M, N), np.float16); drv.dtoh(out, pc)
    times = []
    for _ in range(repeat):
      flush(); drv.record(start); drv.launch(fn, grid, block, shared, args); drv.record(end)
      times.append(drv.elapsed_s(start, end))
    return statistics.median(times), close(out, ref)

  rows = []
  tgt = mc.Target("cuda")
  wl = W.matmul(M, N, K, dtype="float16")
  scheds = tensor_core_schedules(ComputeDAG(wl.outputs), tgt)
  best = min(scheds, key=lambda sc: estimate(mc.build(sc, target=tgt), tgt).latency_s)
  for ldm in ("1",) if templates_only else ("0", "1"):   # element reads (as on 2026-11-29), then ldmatrix
    os.environ["MINICOMP_LDMATRIX"] = ldm
    k = mc.build(best, target=tgt)
    (call,) = k.plan.launches
    ptr = {k.plan.inputs[0].name: pa, k.plan.inputs[1].name: pb, k.plan.outputs[0].name: pc}
    mod = drv.module_load(k.binary.cubin)
    s, err = timed(drv.function(mod, call.kernel), call.grid, call.block, [ptr[n] for n in call.params])
    rows.append((f"compile's template{', ldmatrix' if ldm == '1' else ''}", s, err,
                 k.binary.resources.get(call.kernel, "")))
  os.environ.pop("MINICOMP_LDMATRIX")
  for name, sched in deep_templates(M, N, K, tgt):
    try:
      k = mc.build(sched, target=tgt)
      (call,) = k.plan.launches
      ptr = {k.plan.inputs[0].name: pa, k.plan.inputs[1].name: pb, k.plan.outputs[0].name: pc}
      mod = drv.module_load(k.binary.cubin)
      s, err = timed(drv.function(mod, call.kernel), call.grid, call.block, [ptr[n] for n in call.params],
                     call.shared_bytes)
    except Exception as e:  # noqa: BLE001 - reported in the table, the others still timed
      print(f"  {name} failed: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
      rows.append((name, float("nan"), float("nan"), f"failed: {type(e).__name__}"))
      continue
    rows.append((name, s, err, f"{k.binary.resources.get(call.kernel, '')} dynamic={call.shared_bytes}B"))
    print(f"  {name} {s * 1e6:.1f} us", file=sys.stderr, flush=True)
  for v in [] if templates_only else VARIANTS:
    try:                # one variant that NVRTC or the driver refuses costs only its row
      binary = compile_cuda(source(v, M, N, K), arch)
      mod = drv.module_load(binary.cubin)
      s, err = timed(drv.function(mod, "mm"), (N // v.bn, M // v.bm, 1), (v.threads, 1, 1), [pa, pb, pc])
    except Exception as e:  # noqa: BLE001 - reported in the table, the others still timed
      print(f"  {v.name} failed: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
      rows.append((v.name, float("nan"), float("nan"), f"failed: {type(e).__name__}"))
      continue
    rows.append((v.name, s, err, binary.resources.get("mm", "")))
    print(f"  {v.name} {s * 1e6:.1f} us", file=sys.stderr, flush=True)
  try:
    import torch
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    for _ in range(3): ta @ tb
    ev = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fl = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    ts = []
    for _ in range(repeat):
      fl.zero_(); ev[0].record(); ta @ tb; ev[1].record(); ev[1].synchronize()
      ts.append(ev[0].elapsed_time(ev[1]) / 1e3)
    rows.append(("torch.matmul (cuBLAS)", statistics.median(ts), close((ta @ tb).cpu().numpy(), ref), ""))
  except ImportError:
    pass
  cublas = rows[-1][1] if rows[-1][0].startswith("torch") else None
  print(f"# python research/tc_kernel_variants.py --gpu --size {size}{' --templates-only' if templates_only else ''}: "
        f"{mc.gpu_status()}; fp16 {M}x{N}x{K}, "
        f"median of {repeat} (CUDA events, L2 flushed); err: max error in half-ulps of max |C| (<= 1 is right)")
  print("| kernel | us | TFLOP/s | cuBLAS time / this | err | resources |\n|---|---|---|---|---|---|")
  for name, s, err, res in rows:
    print(f"| {name} | {s * 1e6:.1f} | {flops / s / 1e12:.0f} | {cublas / s if cublas else float('nan'):.2f} | "
          f"{err:.2f} | {res} |")
  return 0


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--check", action="store_true", help="each variant in the CPU simulator against numpy")
  ap.add_argument("--gpu", action="store_true", help="check and time each on this machine's GPU")
  ap.add_argument("--size", type=int, default=4096)
  ap.add_argument("--repeat", type=int, default=20)
  ap.add_argument("--templates-only", action="store_true", help="with --gpu: compile's template (ldmatrix) and "
                  "DEEP's tiles beside cuBLAS, not the hand-written variants (timed on 2026-11-29)")
  a = ap.parse_args()
  if a.check: return check()
  if a.gpu: return gpu(a.size, a.repeat, a.templates_only)
  ap.print_help()
  return 2


if __name__ == "__main__":
  raise SystemExit(main())
