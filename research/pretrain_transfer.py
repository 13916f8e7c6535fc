"""Does the shipped pre-training data help on tasks it never saw? Felix against ``felix-pre`` (and Ansor).

``strategy="felix-pre"`` trains Felix's cost model on the shipped data (``minicomp/search/cost_model/pretrain.py``:
static-model labels of the strategies benchmark's eight tasks) before the first measurement. The
strategies benchmark measured its benefit leave-one-task-out; this measures it the way a user gets it:
on ResNet-18 tasks whose shapes are not in the data (the 7x7 stride-2 stem, a 3x3 stride-2 128-channel
conv, a 1x1 stride-2 256-channel downsample and the 512 -> 1000 classifier), each fused as the compiler
partitions the model. Same measurer for all (the static model: every latency is an ESTIMATE, no GPU),
16 measurements per round, several seeds.

Per task, "best" is the lowest estimate any run found; a cell is the run's best-so-far after N
measurements over that best, as the geometric mean over seeds (min-max over seeds beside it); the
last rows are geometric means over tasks. Runs are saved in ``--out`` and skipped when present.

  python research/pretrain_transfer.py                           # 4 tasks x 3 strategies x 3 seeds x 64 (about 40 min on 2 cores)
  python research/pretrain_transfer.py --report                  # the table from the saved runs
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent / "benchmarks"   # strategies.py, provenance.py and their results
sys.path[:0] = [str(HERE), str(BENCH)]

from provenance import header_lines  # noqa: E402
from strategies import MemoMeasurer, best_so_far, geomean  # noqa: E402

OUT = HERE / "results" / "pretrain_transfer"
STRATEGIES = ("ansor", "felix", "felix-pre")
# ResNet-18 (224x224) task index -> name; none of these shapes is in the shipped data
TASKS = {0: "stem7x7s2", 4: "conv3x3s2_128", 11: "conv1x1s2_256", 20: "fc512x1000"}
AT = (16, 32, 64)


def resnet_tasks(target: str) -> dict:
  import minicomp
  from minicomp.zoo import resnet18
  model, _ = resnet18()
  tasks = minicomp.compile(model, target=target, schedules="rules", progress=False).tasks
  return {name: tasks[i] for i, name in TASKS.items()}


def run_one(name: str, task, strategy: str, seed: int, args, meas: MemoMeasurer) -> dict:
  from minicomp.search.strategies.base import TuneTask
  from minicomp.search.task_scheduler import tune
  from minicomp.search.tune import make_strategy
  from minicomp.target import as_target
  tt = TuneTask(name, task.dag, as_target(args.target), 1, task.dag.flop_count(), "", name)
  tt.sketches  # noqa: B018 -- before the clock, the same for every strategy
  strat = make_strategy(strategy, seed)
  if getattr(strat, "pretrain", None) is not None: strat.model  # noqa: B018 -- pre-training before the clock
  spent0, t0 = meas.spent, time.perf_counter()
  tune([tt], strat, meas, args.budget, seed=seed, measures_per_round=args.per_round)
  wall = time.perf_counter() - t0
  return {"task": name, "strategy": strategy, "seed": seed, "budget": args.budget, "costs": [c for _, c in tt.history],
          "search_s": wall - (meas.spent - spent0), "stats": {k: v for k, v in getattr(strat, "stats", {}).items()
                                                              if isinstance(v, (int, float))}}


def table(runs: list[dict], budget: int) -> list[str]:
  names = [n for n in TASKS.values() if any(r["task"] == n for r in runs)]
  at = [a for a in AT if a <= budget] or [budget]
  head = "| task | strategy | seeds | " + " | ".join(f"best@{a} / best" for a in at) + " | search s |"
  lines = [head, "|---|---|---:|" + "---:|" * (len(at) + 1)]
  per_strategy: dict[str, list[list[float]]] = {}
  for n in names:
    mine = [r for r in runs if r["task"] == n]
    best = min((c for r in mine for c in r["costs"] if c is not None), default=None)
    if best is None: continue                  # every program of every run failed: nothing to compare
    for s in STRATEGIES:
      rs = [r for r in mine if r["strategy"] == s]
      if not rs: continue
      cells, row = [], []
      for a in at:
        v = [best_so_far(r["costs"])[min(a, len(r["costs"])) - 1] / best for r in rs]
        row.append(geomean(v))
        cells.append(f"{geomean(v):.2f} ({min(v):.2f}-{max(v):.2f})")
      per_strategy.setdefault(s, []).append(row)
      lines.append(f"| {n} | {s} | {len(rs)} | " + " | ".join(cells)
                   + f" | {sum(r['search_s'] for r in rs) / len(rs):.0f} |")
  lines += ["", "| strategy | tasks | " + " | ".join(f"best@{a} / best, geomean" for a in at) + " |",
            "|---|---:|" + "---:|" * len(at)]
  for s, rows in per_strategy.items():
    lines.append(f"| {s} | {len(rows)} | " + " | ".join(f"{geomean([r[i] for r in rows]):.2f}" for i in range(len(at))) + " |")
  return lines


def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--seeds", type=int, default=3)
  ap.add_argument("--budget", type=int, default=64)
  ap.add_argument("--per-round", type=int, default=16)
  ap.add_argument("--target", default="h100")
  ap.add_argument("--strategies", default=",".join(STRATEGIES))
  ap.add_argument("--out", type=Path, default=OUT)
  ap.add_argument("--report", action="store_true", help="only print the table from the runs in --out")
  args = ap.parse_args(argv)
  runs_dir = args.out / "runs"
  runs_dir.mkdir(parents=True, exist_ok=True)
  if not args.report:
    from minicomp.search.measure import StaticMeasurer
    tasks = resnet_tasks(args.target)
    with StaticMeasurer() as inner:
      meas = MemoMeasurer(args.out / f"measured_{args.target}.jsonl", inner)
      for name, task in tasks.items():
        for s in [x for x in args.strategies.split(",") if x]:
          for seed in range(args.seeds):
            path = runs_dir / f"{args.target}_r{args.per_round}_{name}_{s}_s{seed}_b{args.budget}.json"
            if path.exists(): continue
            r = run_one(name, task, s, seed, args, meas)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(r))
            tmp.replace(path)                    # never a torn run file
            print(f"# {name:14s} {s:9s} seed {seed}: best {min((c for c in r['costs'] if c), default=float('inf')) * 1e6:8.2f} us*, "
                  f"search {r['search_s']:.0f} s", flush=True)
  runs = [json.loads(p.read_text()) for p in sorted(runs_dir.glob(f"{args.target}_r{args.per_round}_*_b{args.budget}.json"))]
  print("\n".join(["```", *header_lines(__file__, argv), "every latency is an ESTIMATE of the static model (no GPU)",
                   "```", "", *table(runs, args.budget)]))
  return 0


if __name__ == "__main__":
  sys.exit(main())
