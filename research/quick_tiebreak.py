"""Can the analytic model break the ties that quick loses on, without NVRTC? (issue 45)

Gensor's analytic model often gives compile's compared candidates the same cost to the digit (a tiling and its
wide-vector hedge), and the full static model, on their built programs, then separates them; ``schedules="quick"``
keeps the first and loses what the full model would have found. Here each task's compared candidates are costed
again by the analytic model on their concrete programs (``PointwiseModel``: lowered at their sizes, so divisions
the symbolic program keeps fold away and its vectors are judged as the emitter writes them) and the one it puts
first is compared with the first candidate and with the full model's choice. Every latency is a static-model
ESTIMATE (no GPU); one process, the schedule cache off.

    python research/quick_tiebreak.py --target sm_86
    python research/quick_tiebreak.py --target h100 --models llama_block resnet18
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
os.environ.setdefault("MINICOMP_SCHEDULE_CACHE", "0")

import minicomp as mc  # noqa: E402
from defaults import MODELS  # noqa: E402
from minicomp import zoo  # noqa: E402
from minicomp.codegen.kernel import build  # noqa: E402
from minicomp.compiler import constructed_sketches  # noqa: E402
from minicomp.search.static.analytic import PointwiseModel  # noqa: E402
from minicomp.search.static.estimate import estimate  # noqa: E402
from minicomp.search.strategies.gensor import COMPARE, CONSTRUCT_SEED, compared, construct  # noqa: E402
from minicomp.target import as_target  # noqa: E402


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--target", default="sm_86")
  ap.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
  a = ap.parse_args(argv)
  tgt = as_target(a.target)
  print(f"command:  python research/quick_tiebreak.py --target {a.target} --models {' '.join(a.models)}")
  print("task                            first us*  pointwise pick us*  full model's pick us*  (full estimates)")
  sums, secs, hits, n = [0.0, 0.0, 0.0], 0.0, 0, 0
  for name in a.models:
    fn, kw = MODELS[name]
    model = getattr(zoo, fn)(**kw)[0]
    seen = set()
    for t in mc.compile(model, tgt, schedules="rules", progress=False).tasks:
      if t.key in seen: continue
      seen.add(t.key)
      sketches = constructed_sketches(t.dag, tgt)
      cands = compared(construct(t.dag, tgt, seed=CONSTRUCT_SEED, sketches=sketches, keep=COMPARE), COMPARE)
      if len(cands) < 2: continue
      full = [estimate(build(c.schedule, tgt), tgt).latency_s * 1e6 for c in cands]
      t0 = time.perf_counter()
      pw = [PointwiseModel(sketches[c.sketch_index], tgt, max(c.unroll.values(), default=512))([c.values])[0]
            for c in cands]
      secs += time.perf_counter() - t0
      pick, best = min(range(len(cands)), key=pw.__getitem__), min(full)
      for i, x in enumerate((full[0], full[pick], best)): sums[i] += x
      hits, n = hits + (full[pick] == best), n + 1
      print(f"{name[:12]:12s} {'+'.join(dict.fromkeys(t.ops))[:18]:18s} {full[0]:10.2f}  {full[pick]:18.2f}  "
            f"{best:21.2f}", flush=True)
  print(f"{n} tasks with 2+ compared candidates; the pointwise pick is the full model's on {hits}; sums (us*): "
        f"first {sums[0]:.2f}, pointwise pick {sums[1]:.2f}, full model's pick {sums[2]:.2f}; "
        f"pointwise costing {secs:.1f} s")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
