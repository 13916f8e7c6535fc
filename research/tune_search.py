"""Search quality per trial: Ansor's evolutionary search, Gensor's iterative mode and random sampling.

The strategies (``--strategies``; default random, ansor, gensor) tune the same model's tasks with
the same trial budget, seed and measurer (the static model: every latency here is an ESTIMATE,
no GPU), through ``minicomp.compile(..., trials=N)``. Printed: the estimated end-to-end latency
(sum over kernel calls, each task weighted by how often it runs) of the best *measured*
schedules after each checkpoint of trials, the wall time, and for reference the estimates of the
rule-based schedules and of ``compile``'s default (trials=0: Gensor's construction where faster).

  python research/tune_search.py                                   # residual block, 96 trials
  python research/tune_search.py --trials 256 --per-round 32
  python research/tune_search.py --model inverted_residual

Ansor's evolution runs with Ansor's defaults (population 2048, 4 generations); candidates are
scored through the sketches' feature formulas (docs/search.md).
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))   # provenance.py


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--model", default="residual_block", help="a minicomp.zoo model (default residual_block)")
  ap.add_argument("--trials", type=int, default=96)
  ap.add_argument("--per-round", type=int, default=16)
  ap.add_argument("--population", type=int, default=2048)
  ap.add_argument("--generations", type=int, default=4)
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--strategies", nargs="*", default=["random", "ansor", "gensor"])
  ap.add_argument("--target", default="sm_86")
  args = ap.parse_args(argv)

  import minicomp as mc
  from minicomp import zoo
  from minicomp.search.measure import StaticMeasurer
  from minicomp.search.records import load_records
  from minicomp.search.strategies.ansor import AnsorStrategy

  model, _ = getattr(zoo, args.model)()
  default = mc.compile(model, args.target)                    # Gensor-constructed where faster (trials=0)
  rules = mc.compile(model, args.target, schedules="rules")
  weights = {t.key: t.weight for t in default.tasks}
  rows = []
  with StaticMeasurer() as meas, tempfile.TemporaryDirectory() as tmp:
    for name in args.strategies:
      strat = name if name != "ansor" else AnsorStrategy(seed=args.seed, population=args.population,
                                                          generations=args.generations)
      log = os.path.join(tmp, f"{name}.jsonl")
      t0 = time.perf_counter()
      cm = mc.compile(model, args.target, trials=args.trials, strategy=strat, log_file=log, seed=args.seed,
                      measurer=meas, measures_per_round=args.per_round)
      wall = time.perf_counter() - t0
      recs = load_records(log)
      best, curve = {}, []
      for n, r in enumerate(recs, 1):
        if r.ok and r.cost_s < best.get(r.workload_key, math.inf): best[r.workload_key] = r.cost_s
        total = sum(weights[k] * best.get(k, math.inf) for k in weights)
        curve.append((n, total))
      rows.append((name, curve, wall, cm.estimate().latency_s))

  from provenance import header_lines
  for line in header_lines(__file__, argv): print(line)
  print(f"model:    {args.model}, {len(weights)} tasks; target {args.target}; {args.trials} trials, "
        f"{args.per_round} per round; ansor population {args.population}, {args.generations} generations; seed {args.seed}")
  print("latency:  estimated end-to-end (static model, no GPU): an ESTIMATE\n")
  checkpoints = sorted({c for c in (8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 1024) if c <= args.trials}
                       | {args.trials})
  head = ["strategy"] + [f"@{c} us*" for c in checkpoints] + ["wall s"]
  print("  ".join(f"{h:>10s}" for h in head))
  for name, curve, wall, _ in rows:
    vals = [curve[min(c, len(curve)) - 1][1] if curve else math.inf for c in checkpoints]
    print("  ".join([f"{name:>10s}"] + [f"{v * 1e6:10.2f}" if math.isfinite(v) else f"{'-':>10s}" for v in vals]
                    + [f"{wall:10.1f}"]))
  print(f"{'rules':>10s}  estimated {rules.estimate().latency_s * 1e6:.2f} us* (rule-based schedules, no search)")
  print(f"{'default':>10s}  estimated {default.estimate().latency_s * 1e6:.2f} us* (compile with trials=0: Gensor's "
        f"construction where the static model prefers it; every search keeps it where it is faster)")
  print("\n* ESTIMATE from the static model; not measured on a GPU.")
  return 0


if __name__ == "__main__":
  sys.exit(main())
