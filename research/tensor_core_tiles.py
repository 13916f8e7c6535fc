"""Would a warp tile of virtual threads with padded shared tiles beat compile's tensor-core template?

The template (``graph/tensor_core_schedules.py``) maps a lane's rows to ``g (2 MI) + 2 m + r`` so its accumulators
form one box; the A fragment reads of the 8 groups then land 2 MI rows apart in the shared tile, in the same
banks (8-way conflicts by the static model for MI = 4). The alternative here puts the warp tile's MI x NI
instructions on virtual threads (rows ``m (16 WM) + 16 wm + 2 g + r``: a lane's rows of one instruction 2 apart)
and pads the tiles' rows (``storage_align``) so the fragment reads are conflict-free. Both are built for a fp16
matmul and estimated (static model, no GPU); the alternative is also checked against numpy in the simulator.

    python research/tensor_core_tiles.py                  # 1024^3 on a100 and h100
"""
from __future__ import annotations

import argparse

import numpy as np

import minicomp as mc
from minicomp import workloads as W


def vthread_schedule(M: int, N: int, K: int, WM=2, WN=2, MI=4, NI=4, pad: bool = False):
  wl = W.matmul(M, N, K, dtype="float16")
  C, (A, B) = wl.stages["C"], wl.inputs
  s = mc.Schedule([C])
  CL = s.cache_write(C, "local")
  i, j = s.axis(C)
  io, m, wm, g, r = s.split(C, i, [MI, WM, 8, 2])
  jo, n, wn, t, c = s.split(C, j, [NI, WN, 4, 2])
  s.reorder(C, io, jo, m, n, wm, wn, g, t, r, c)
  s.bind(C, s.fuse(C, io, jo), "blockIdx.x")
  s.bind(C, m, "vthread"); s.bind(C, n, "vthread")
  tx = s.fuse(C, wm, wn, g, t)
  s.bind(C, tx, "threadIdx.x")
  s.compute_at(CL, C, tx)
  ci, cj, ck = s.loops(CL)
  k0, k1, k2 = s.split(CL, ck, [2, 16])
  s.reorder(CL, k0, k1, ci, cj, k2)
  for X, align in ((A, (8, 4)), (B, (32, 8))):   # rows 4 (A) / 8 (B) halves past a multiple of 8 / 32: no conflicts
    XS = s.cache_read(X, "shared", [CL])
    s.compute_at(XS, CL, k0)
    if pad: s.storage_align(XS, 0, *align)
    width = 4 if pad and X is A else 8              # (a padded A row is 8-byte aligned, not 16)
    o, thr, v = s.split(XS, s.fuse(XS, *s.loops(XS)), [WM * WN * 32, width])
    s.bind(XS, thr, "threadIdx.x"); s.unroll(XS, o); s.vectorize(XS, v)
  s.unroll(CL, k1)
  s.tensorize(CL, ci, "m16n8k16_f16")
  return wl, s


def main() -> int:
  from minicomp.graph.tensor_core_schedules import tensor_core_schedules
  from minicomp.ir.dag import ComputeDAG
  from minicomp.search.static.estimate import estimate
  from minicomp.search.static.footprint import data_movement
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--size", type=int, default=1024)
  ap.add_argument("--devices", nargs="+", default=["a100", "h100"])
  a = ap.parse_args()
  wl, s = vthread_schedule(128, 128, 64, pad=True)          # the alternative computes the right thing
  k = mc.build(s, target="sm_80")
  x, y = wl.random_inputs()
  err = float(np.abs(k(x, y, device="cpu").astype(np.float32) - x.astype(np.float32) @ y.astype(np.float32)).max())
  print(f"# simulator check, 128x128x64 padded virtual-thread tile: max |error| {err:.4f} (fp16 output)")
  n = a.size
  for dev in a.devices:
    tgt = mc.Target(dev)
    rows = [("template (compile's)", sc) for sc in tensor_core_schedules(ComputeDAG(W.matmul(n, n, n, dtype="float16").outputs), tgt)]
    rows += [(f"virtual threads{', padded' if pad else ''}", vthread_schedule(n, n, n, pad=pad)[1]) for pad in (False, True)]
    for name, sc in rows:
      k = mc.build(sc, target=tgt)
      e = estimate(k, tgt).launches[0]
      dm = data_movement(k.program.kernels[0], l1_bytes=tgt.device.l1_bytes_per_sm, l2_bytes=tgt.device.l2_bytes)
      worst = max((x.bank_conflict or 1.0) for x in dm.accesses if x.scope == "shared")
      print(f"{dev}  {n}^3  {name:28s}  {e.latency_s * 1e6:8.1f} us*  bound: {e.bound:8s}  worst shared conflict {worst:.0f}")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
