"""Where NVRTC's time goes on the kernels compile keeps (issue 45: cold compile against TVM's).

Compiles a zoo model (default: ResNet-18 at 64x64, sm_86) with ``dump_after="emit"``, then compiles every kept
kernel again with NVRTC in four ways and sums the seconds: as minicomp does (PTX and CUBIN, ptxas -v), PTX only,
PTX with ``-Ofc=max`` (NVRTC's fast-compile mode: other, unoptimized PTX), and PTX of the same source with every
``#pragma unroll`` replaced by ``#pragma unroll 1``. One process, 2 cores; seconds are this machine's.

    python research/nvrtc_cost.py
"""
from __future__ import annotations

import argparse
import glob
import tempfile
import time

from cuda.bindings import nvrtc as nv

import minicomp as mc
from minicomp import zoo

MODES = {
  "cubin (minicomp)": lambda arch, src: (src, [f"--gpu-architecture={arch}", "--ptxas-options=-v"]),
  "ptx only": lambda arch, src: (src, [f"--gpu-architecture=compute_{arch[3:]}"]),
  "ptx -Ofc=max": lambda arch, src: (src, [f"--gpu-architecture=compute_{arch[3:]}", "-Ofc=max"]),
  "ptx, unroll 1": lambda arch, src: (src.replace("#pragma unroll\n", "#pragma unroll 1\n"),
                                      [f"--gpu-architecture=compute_{arch[3:]}"]),
}


def nvrtc_seconds(src: str, opts: list[str]) -> tuple[float, int]:
  """(seconds, PTX bytes) of one NVRTC compile; the half / tensor-core headers are not needed by fp32 kernels."""
  _, prog = nv.nvrtcCreateProgram(src.encode(), b"k.cu", 0, [], [])
  t0 = time.perf_counter()
  (res,) = nv.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
  secs = time.perf_counter() - t0
  if res != nv.nvrtcResult.NVRTC_SUCCESS: raise RuntimeError(f"NVRTC failed: {res}")
  _, n = nv.nvrtcGetPTXSize(prog)
  return secs, n


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--hw", type=int, default=64)
  ap.add_argument("--target", default="sm_86")
  a = ap.parse_args()
  model, _ = zoo.resnet18(hw=a.hw)
  with tempfile.TemporaryDirectory() as d:
    mc.compile(model, target=a.target, progress=False, jobs=1, dump_after="emit", dump_dir=d)
    sources = [open(f).read() for f in sorted(glob.glob(f"{d}/*-emit-*.cu"))]
  print(f"# resnet18 {a.hw}x{a.hw}, {a.target}: {len(sources)} kept kernels; NVRTC seconds summed (one process)")
  for name, make in MODES.items():
    total, ptx = 0.0, 0
    for src in sources:
      s, n = nvrtc_seconds(*make(a.target, src))
      total, ptx = total + s, ptx + n
    print(f"{name:18s} {total:6.2f} s   PTX {ptx / 1e3:7.0f} KB")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
