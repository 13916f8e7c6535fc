"""Felix's gradient descent against Ansor's evolutionary search: how soon each reaches 90/95/99% of the best.

Each task is tuned alone by each strategy from several seeds, with the same measurer (the static model:
every latency here is an ESTIMATE, no GPU), trial budget, measurements per round and cost-model
architecture (MLPCostModel, rank loss). For every task, "best" is the lowest estimate any run of either
strategy found; a run reaches X% when its best-so-far is within best / X. Printed per task and strategy:
the mean (over seeds) number of measurements and wall seconds to reach 90/95/99% (a run that never
reaches a level counts as the budget and the cell gets a ``>``), cost-model predictions per second of
tuning time (Ansor: candidates scored; Felix: candidates scored plus gradient-step evaluations, one per
start per step), and the mean final best. The last line is the geometric mean over tasks of
``ansor measurements-to-95% / felix measurements-to-95%`` (Felix's paper reports 2.8-3.4x to 90-95%).

  python research/felix_vs_ansor.py                          # 4 tasks, 3 seeds, 96 trials, 16 per round
  python research/felix_vs_ansor.py --tasks dense,bmm --seeds 2 --trials 64
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))   # provenance.py
LEVELS = (0.90, 0.95, 0.99)


def _tasks():
  from minicomp import workloads as W
  return {   # name -> (description, workload builder)
    "conv": ("ResNet-18 conv 3x3 64->64, 56x56", lambda: W.conv2d(1, 64, 56, 56, 64, 3, 1, 1)),
    "depthwise": ("MobileNet depthwise 3x3, 128ch, 28x28", lambda: W.depthwise_conv2d(1, 128, 28, 28, 3, 1, 1)),
    "dense": ("BERT dense 128x768 -> 3072, bias+relu", lambda: W.matmul(128, 3072, 768, bias_relu=True)),
    "bmm": ("attention scores 12 x 128x64 @ 64x128", lambda: W.batch_matmul(12, 128, 128, 64)),
  }


def _strategy(name: str, seed: int, args):
  if name == "ansor":
    from minicomp.search.strategies.ansor import AnsorStrategy
    return AnsorStrategy(seed=seed, population=args.population, generations=args.generations)
  from minicomp.search.strategies.felix import FelixStrategy
  return FelixStrategy(seed=seed)


def run_one(name: str, wl, strategy: str, seed: int, args, measurer) -> dict:
  """One tuning run of one task: the best-so-far after each measurement, the wall time of each round."""
  from minicomp.ir.dag import ComputeDAG
  from minicomp.search.strategies.base import TuneTask
  from minicomp.search.task_scheduler import tune
  from minicomp.target import Target
  dag = ComputeDAG(wl.outputs)
  task = TuneTask(f"{name}-{strategy}-{seed}", dag, Target(args.target), 1, dag.flop_count(), "", name)
  strat = _strategy(strategy, seed, args)
  task.sketches  # noqa: B018 -- generate the sketches before the clock starts (same for both strategies)
  res = tune([task], strat, measurer, args.trials, seed=seed, measures_per_round=args.per_round)
  best, curve = math.inf, []
  for _, cost in task.history:
    if cost is not None: best = min(best, cost)
    curve.append(best)
  rounds = [(used, t) for used, t, _ in res.curve]
  stats = getattr(strat, "stats", {})
  scored = stats.get("scored", 0) + stats.get("visited", 0)     # Felix: each gradient step scores every seed
  return {"curve": curve, "rounds": rounds, "wall": res.elapsed_s,
          "scored": scored, "best": best}


def reach(run: dict, target: float) -> tuple[int | None, float | None]:
  """(measurements, wall seconds) until the run's best-so-far is <= target; None when it never is."""
  for n, b in enumerate(run["curve"], 1):
    if b <= target:
      for used, t in run["rounds"]:
        if used >= n: return n, t
      return n, run["rounds"][-1][1]
  return None, None


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--tasks", default="conv,depthwise,dense,bmm")
  ap.add_argument("--seeds", type=int, default=3)
  ap.add_argument("--trials", type=int, default=96)
  ap.add_argument("--per-round", type=int, default=16)
  ap.add_argument("--population", type=int, default=2048)
  ap.add_argument("--generations", type=int, default=4)
  ap.add_argument("--target", default="sm_86")
  args = ap.parse_args(argv)

  from minicomp.search.measure import StaticMeasurer
  tasks = _tasks()
  names = args.tasks.split(",")
  unknown = [n for n in names if n not in tasks]
  if unknown: ap.error(f"unknown task(s) {unknown}; known: {', '.join(tasks)}")
  runs: dict[tuple[str, str], list[dict]] = {}
  with StaticMeasurer() as meas:
    for name in names:
      for strategy in ("ansor", "felix"):
        for seed in range(args.seeds):
          t0 = time.perf_counter()
          r = run_one(name, tasks[name][1](), strategy, seed, args, meas)
          runs.setdefault((name, strategy), []).append(r)
          print(f"# {name:10s} {strategy:6s} seed {seed}: best {r['best'] * 1e6:9.2f} us*  "
                f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)

  from provenance import header_lines
  for line in header_lines(__file__, argv): print(line)
  print(f"setup:    target {args.target}; {args.trials} trials per run, {args.per_round} per round; {args.seeds} seeds; "
        f"ansor population {args.population}, {args.generations} generations; felix defaults (8 starts, 200 steps)")
  print("latency:  static model (no GPU): every latency is an ESTIMATE\n")
  head = ["task", "strategy"] + [f"meas@{int(x * 100)}%" for x in LEVELS] + [f"s@{int(x * 100)}%" for x in LEVELS] \
    + ["pred/s", "final us*", "best us*"]
  widths = [10, 8] + [9] * 6 + [9, 10, 9]
  print("  ".join(f"{h:>{w}s}" for h, w in zip(head, widths)))
  ratios = []
  for name in names:
    best = min(r["best"] for s in ("ansor", "felix") for r in runs[(name, s)])
    meas95 = {}
    for strategy in ("ansor", "felix"):
      rs = runs[(name, strategy)]
      cells_n, cells_s = [], []
      for lvl in LEVELS:
        hits = [reach(r, best / lvl) for r in rs]
        ns = [h[0] if h[0] is not None else args.trials for h in hits]
        ts = [h[1] if h[1] is not None else r["wall"] for h, r in zip(hits, rs)]
        miss = ">" if any(h[0] is None for h in hits) else ""
        cells_n.append(f"{miss}{sum(ns) / len(ns):.0f}")
        cells_s.append(f"{miss}{sum(ts) / len(ts):.0f}")
        if lvl == 0.95: meas95[strategy] = sum(ns) / len(ns)
      wall = sum(r["wall"] for r in rs)
      pps = sum(r["scored"] for r in rs) / wall if wall > 0 else 0.0
      final = sum(r["best"] for r in rs) / len(rs)
      row = [name, strategy] + cells_n + cells_s + [f"{pps:.0f}", f"{final * 1e6:.2f}", f"{best * 1e6:.2f}"]
      print("  ".join(f"{c:>{w}s}" for c, w in zip(row, widths)))
    ratios.append(meas95["ansor"] / meas95["felix"])
  print("\n* ESTIMATE from the static model; not measured on a GPU. Wall seconds include measuring (the same")
  print("  measurer for both) and each strategy's search and cost-model training.")
  geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
  print(f"felix/ansor measurements-to-95% geomean speedup: {geo:.2f}x")
  return 0


if __name__ == "__main__":
  sys.exit(main())
