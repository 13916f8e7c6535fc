"""Compile-time benchmark for whole models: ops, tasks, kernels, compile seconds by phase, simulator run.

    python benchmarks/compile_model.py                 # the test models + ResNet-18 (224x224)
    python benchmarks/compile_model.py --only resnet   # a subset
    python benchmarks/compile_model.py --no-run        # skip the simulator runs

Compile phases: frontend (ONNX import + constant folding), partition (fusion + tensor
expressions), build (default schedules + lowering + CUDA emission) and NVRTC. The NVRTC disk
cache is turned off and a fresh cache folder is used, so every kernel is really compiled.
"Sim run" is the CPU simulator (correctness only: it says nothing about GPU speed).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--only", default="", help="run models whose name contains this")
  ap.add_argument("--no-run", action="store_true", help="compile only")
  ap.add_argument("--target", default="sm_86")
  args = ap.parse_args()
  tmp = tempfile.mkdtemp(prefix="mc-bench-")
  os.environ["MINICOMP_CACHE_DIR"] = tmp
  os.environ["MINICOMP_NVRTC_CACHE"] = "0"
  import minicomp as mc
  from minicomp import zoo
  from minicomp.codegen import nvrtc
  models = dict(zoo.TEST_MODELS)
  models["resnet18"] = zoo.resnet18
  rows = []
  for name, fn in models.items():
    if args.only not in name: continue
    model, feeds = fn()
    nvrtc.clear_memory_cache()
    t0 = time.perf_counter()
    cm = mc.compile(model, target=args.target)
    total = time.perf_counter() - t0
    st = cm.stats
    run_s = float("nan")
    if not args.no_run and name != "resnet18":
      cm.run(feeds, device="cpu")            # builds the simulator binaries
      t0 = time.perf_counter(); cm.run(feeds, device="cpu"); run_s = time.perf_counter() - t0
    rows.append((name, len(model.graph.node), st.tasks, len(cm.calls), f"{total:.2f}", f"{st.frontend:.2f}",
                 f"{st.partition:.2f}", f"{st.build:.2f}", f"{st.nvrtc:.2f}", "-" if run_s != run_s else f"{run_s:.3f}"))
  head = ("model", "ONNX nodes", "tasks", "kernel calls", "compile s", "frontend s", "partition s", "build s", "nvrtc s", "sim run s*")
  from provenance import header_lines
  for line in header_lines(__file__): print(line)
  print(f"target:   {args.target}; default schedules")
  print("* CPU-simulator time of one run (correctness only; says nothing about GPU speed)\n")
  w = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
  print("  ".join(h.ljust(x) for h, x in zip(head, w)))
  print("  ".join("-" * x for x in w))
  for r in rows: print("  ".join(str(v).ljust(x) for v, x in zip(r, w)))
  return 0


if __name__ == "__main__":
  sys.exit(main())
