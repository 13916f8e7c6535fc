"""One number for Gensor's construction: the geometric mean of its kernels' static estimates.

The data-reuse tasks (convolutions of every kind, matmuls, batch matmuls) of five zoo models
at realistic sizes, each constructed (seed 0) and its best ``--builds`` candidates built and
estimated with the full static model, as ``compile`` does. Use it to compare a change to the
walk or to the analytic model (same machine, one run each): the geomean is what ``compile``
gives those tasks, and the construction time is what it costs. Every latency is an ESTIMATE.

  python research/gensor_quality.py
  python research/gensor_quality.py --target sm_86 --builds 5
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

MODELS = [("resnet18", {"hw": 64}), ("generator", {"z": 100, "c": 64}), ("conv3d_block", {"c": 32, "d": 8}),
          ("inverted_residual", {"c": 32, "hw": 28, "expand": 6}),
          ("transformer_encoder", {"s": 128, "d": 256, "heads": 4, "ff": 1024})]


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--target", default="h100")
  ap.add_argument("--builds", type=int, default=None, help="candidates built per task (default: compile's)")
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("-v", "--verbose", action="store_true", help="a line per task")
  args = ap.parse_args(argv)
  sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))   # provenance.py
  from provenance import header_lines

  import minicomp as mc
  from minicomp import zoo
  from minicomp.codegen.kernel import build
  from minicomp.search.strategies.gensor import COMPARE
  from minicomp.search.static.estimate import estimate
  from minicomp.search.strategies.gensor import construct
  from minicomp.target import as_target

  tgt = as_target(args.target)
  builds = args.builds or COMPARE
  for line in header_lines(__file__, argv): print(line)
  tasks, seen = [], set()
  for fn, kw in MODELS:
    model, _ = getattr(zoo, fn)(**kw)
    for t in mc.compile(model, tgt, schedules="rules").tasks:
      if t.kind == "data_reuse" and t.key not in seen:
        seen.add(t.key); tasks.append(t)
  logs, secs = [], []
  for t in tasks:
    t0 = time.perf_counter()
    res = construct(t.dag, tgt, seed=args.seed, keep=max(builds, 1))
    secs.append(time.perf_counter() - t0)
    best = min(estimate(build(c.schedule, tgt), tgt).latency_s for c in res.candidates[:builds])
    logs.append(math.log(best))
    if args.verbose: print(f"  {'+'.join(dict.fromkeys(t.ops))[:34]:34s} {best * 1e6:9.2f} us*  construct {secs[-1]:.2f} s")
  secs.sort()
  print(f"target {args.target} ({tgt.device.name}); {len(tasks)} data-reuse tasks; best of {builds} constructed candidates")
  print(f"geomean {math.exp(sum(logs) / len(logs)) * 1e6:.2f} us* (static-model ESTIMATE); construction median "
        f"{secs[len(secs) // 2]:.2f} s, max {secs[-1]:.2f} s")
  return 0


if __name__ == "__main__":
  sys.exit(main())
