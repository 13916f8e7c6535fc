"""Does Felix find better half-precision matmuls when it ranks the tensor-core sketch's points with its cost model?

The tensor-core sketch has no symbolic formulas, so Felix cannot descend on it: before 2026-11-30 its programs came
only from the random fill of a round; now Felix draws ``POINTWISE x n`` valid points of it per round and ranks them
with the cost model on their lowered programs (``FelixStrategy._drawn``). This tunes a float16 matmul 1024^3 for
``--trials`` measurements (16 per round) with the static measurer (every latency an ESTIMATE), from each seed, with
the drawn lane (POINTWISE = 4) and without it (0: the old behaviour), and prints the best three estimates of each run.

  python research/felix_tensor_core.py --target sm_90 --seeds 0 1
"""
from __future__ import annotations

import argparse
import time


def run(target: str, seed: int, trials: int, pointwise: int) -> tuple[list[float], float]:
  import minicomp.search.strategies.felix as F
  from minicomp import workloads as W
  from minicomp.ir.dag import ComputeDAG
  from minicomp.search.measure import StaticMeasurer
  from minicomp.search.strategies.base import TuneTask
  from minicomp.search.task_scheduler import tune
  from minicomp.target import Target
  F.POINTWISE = pointwise
  tgt = Target(target)
  dag = ComputeDAG(W.matmul(1024, 1024, 1024, dtype="float16").outputs)
  task = TuneTask("hmm", dag, tgt, 1, dag.flop_count(), "data_reuse", "hmm")
  t0 = time.perf_counter()
  tune([task], F.FelixStrategy(seed=seed), StaticMeasurer(), trials=trials, measures_per_round=16, seed=seed)
  return sorted(c for c in task.measured.values() if c is not None)[:3], time.perf_counter() - t0


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--target", default="sm_90")
  ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
  ap.add_argument("--trials", type=int, default=48)
  a = ap.parse_args()
  print(f"# python research/felix_tensor_core.py --target {a.target} --seeds {' '.join(map(str, a.seeds))} "
        f"--trials {a.trials}  (static-model ESTIMATES, us*)")
  print("| seed | drawn lane: best 3 | s | random fill only: best 3 | s |")
  print("|---|---|---|---|---|")
  for seed in a.seeds:
    cells = []
    for pw in (4, 0):
      best, secs = run(a.target, seed, a.trials, pw)
      cells += [" / ".join(f"{b * 1e6:.2f}" for b in best), f"{secs:.0f}"]
    print(f"| {seed} | " + " | ".join(cells) + " |", flush=True)
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
