"""Build the cost model's pre-training data (``minicomp/search/cost_model/pretrain.py``).

Two sources of labelled programs:

- ``--memo FILE`` (default: the strategies benchmark's memo, ``results/strategies/measured_h100.jsonl``):
  the programs the benchmark's strategies measured, with the static model's estimates for an H100 as
  costs. This is how the shipped ``minicomp/search/cost_model/data/pretrain_h100_static.npz`` is made: a fixed
  random sample of ``--per-task`` programs of each task (failed ones included: they teach the model
  what fails).
- ``--fresh``: random valid programs of each task (``sample_population``), measured now with the
  default measurer of ``--target`` (the GPU when one of that arch is here, else the static model). With a
  GPU this makes measured data, the kind Felix pre-trains on (TenSet).

The tasks are the strategies benchmark's eight (``strategies.tasks()``). The meta data (labels, target,
source, command, commit, date) is stored in the file and printed.

  python research/pretrain_data.py                                   # rebuild the shipped file from the memo
  python research/pretrain_data.py --fresh --per-task 64 --out /tmp/mine.npz --target h100
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent / "benchmarks"   # strategies.py, provenance.py and their results
sys.path[:0] = [str(HERE), str(BENCH)]

from provenance import header_lines, revision  # noqa: E402
from strategies import OUT, task_dag, tasks  # noqa: E402


def from_memo(path: Path, per_task: int, names: list[str]) -> list[tuple[str, object, str, float | None]]:
  """A fixed random sample (seed 0) of ``per_task`` memoised programs of each task in ``names``."""
  import numpy as np
  by_task: dict[str, dict[str, float | None]] = {}
  for ln in path.read_text().splitlines():
    try: r = json.loads(ln)
    except json.JSONDecodeError: continue               # a torn last line
    if r["task"] in names: by_task.setdefault(r["task"], {})[r["steps"]] = r["cost"]
  out = []
  for t in names:
    progs = sorted(by_task.get(t, {}).items())
    rng = np.random.default_rng(0)
    for i in rng.permutation(len(progs))[:per_task]:
      steps, cost = progs[int(i)]
      out.append((t, task_dag(t), steps, cost))
  return out


def fresh(per_task: int, names: list[str], target: str, seed: int) -> tuple[list, bool]:
  """``per_task`` random valid programs of each task, measured by the target's default measurer."""
  import numpy as np

  from minicomp.search.annotate import sample_population
  from minicomp.search.measure import MeasureInput
  from minicomp.search.sketch import generate_sketches
  from minicomp.search.tune import default_measurer
  from minicomp.target import as_target
  tgt = as_target(target)
  meas = default_measurer(tgt)
  out = []
  for t in names:
    dag = task_dag(t)
    cands = sample_population(generate_sketches(dag, tgt), per_task, np.random.default_rng(seed), tgt)
    res = meas.measure([MeasureInput(dag, c.key, tgt.device_name or tgt.arch, key=t) for c in cands])
    out += [(t, dag, c.key, r.cost_s if r.ok else None) for c, r in zip(cands, res)]
    print(f"  {t}: {len(cands)} programs measured", flush=True)
  return out, bool(getattr(meas, "is_estimate", False))


def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--memo", type=Path, default=OUT / "measured_h100.jsonl")
  ap.add_argument("--fresh", action="store_true", help="measure random programs now instead of reading a memo")
  ap.add_argument("--per-task", type=int, default=256)
  ap.add_argument("--tasks", default=",".join(tasks()))
  ap.add_argument("--target", default="h100", help="with --fresh: the target measured for")
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--out", type=Path, default=HERE.parent / "minicomp" / "search" / "data" / "pretrain_h100_static.npz")
  args = ap.parse_args(argv)
  from minicomp.search.cost_model.pretrain import build
  names = [t for t in args.tasks.split(",") if t]
  unknown = sorted(set(names) - set(tasks()))
  if unknown: ap.error(f"unknown task(s) {', '.join(unknown)}; known: {', '.join(tasks())}")
  for ln in header_lines(__file__, argv): print(ln)
  if args.fresh:
    progs, estimate = fresh(args.per_task, names, args.target, args.seed)
    source = f"random valid programs (sample_population, seed {args.seed}), measured for {args.target}"
    labels = "static-model estimates (seconds)" if estimate else "GPU timings (seconds)"
  else:
    if not args.memo.exists():
      ap.error(f"{args.memo}: no such memo; run benchmarks/strategies.py first, or pass --fresh")
    progs = from_memo(args.memo, args.per_task, names)
    source = (f"a random sample (seed 0) of the programs benchmarks/strategies.py measured ({args.memo.name}): "
              "programs its strategies proposed, good and bad")
    labels = "static-model estimates for an H100 (seconds)"
  skipped: list[str] = []
  data = build(progs, {"labels": labels, "source": source, "tasks": {t: tasks()[t][0] for t in names},
                       "command": header_lines(__file__, argv)[0].split(":", 1)[1].strip(),
                       "commit": revision(), "date": datetime.date.today().isoformat()},
               on_skip=lambda t, s, e: skipped.append(f"{t}: {type(e).__name__}: {e}"))
  path = data.save(args.out)
  failed = sum(c is None for c in data.costs)
  print(f"\n{len(data)} programs ({failed} failed) of {len(data.task_names())} tasks, "
        f"{sum(len(f) for f in data.features)} feature rows x {data.n_features}; {len(skipped)} left out "
        f"(no longer lower){': ' + skipped[0] if skipped else ''}")
  for t in data.task_names():
    print(f"  {t:10s} {data.tasks.count(t):4d} programs")
  print(f"labels: {labels}\nwritten: {path} ({path.stat().st_size / 1e6:.2f} MB)")
  return 0


if __name__ == "__main__":
  sys.exit(main())
