"""Gensor's favourites of the strategies' tasks, for a GPU to time: the programs a trials=0 compile chooses among.

The calibration of 2026-11-29 was fitted on the strategies' programs of 2026-11-27 (runs of five searches and a
spread sample); compile's picks of 2026-11-30, timed on an H200, ran 1.0-2.6x slower than each task's fastest
(benchmarks/README.md): the model misjudges the region Gensor's construction walks into, where it had few timed
programs. This writes a selection (``strategies_gpu.py measure``'s format) of that region: for each task, the
distinct candidates of Gensor's construction for an H200 under ``--seeds`` walk seeds (``keep`` each, the analytic
model's best first), plus every program of the ``--also`` selections (earlier picks, each task's fastest).

    python research/favourites.py --out /tmp/fav.jsonl.gz \
      --also benchmarks/results/strategies/gpu/picks_2026-11-30/gpu_selection.jsonl.gz
    python benchmarks/strategies_gpu.py measure --selection /tmp/fav.jsonl.gz --out DIR    # on the GPU
    python research/timings_convert.py --measured DIR --out benchmarks/data/h200-<date>/favourites.jsonl.gz
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "benchmarks")]

import strategies as S  # noqa: E402
import strategies_gpu as G  # noqa: E402
from minicomp.search.strategies.gensor import construct  # noqa: E402

TASKS = tuple(sorted(S.tasks()))    # the strategies benchmark's eight


def favourites(task: str, seeds: int, keep: int) -> list[tuple[str, float]]:
  """(steps, analytic estimate s) of the distinct candidates of ``seeds`` constructions of ``task`` for an H200."""
  dag = S.task_dag(task)
  out: dict[str, tuple[str, float]] = {}
  for seed in range(seeds):
    res = construct(dag, "h200", seed=seed, keep=keep)
    for c, cost in zip(res.candidates, res.costs):
      steps = c.schedule.to_json()
      out.setdefault(G.digest(steps), (G.compact(steps), cost))
  return sorted(out.values(), key=lambda sc: sc[1])


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--out", type=Path, required=True, help="the selection to write (.jsonl.gz)")
  ap.add_argument("--seeds", type=int, default=4)
  ap.add_argument("--keep", type=int, default=8, help="candidates kept per construction")
  ap.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
  ap.add_argument("--also", nargs="*", default=[], help="selections whose programs are added (their roles kept)")
  a = ap.parse_args(argv)
  rows: dict[str, dict] = {}
  for path in a.also:
    for r in G.read_jsonl(Path(path)):
      if r["task"] in a.tasks: rows.setdefault(G.digest(r["steps"]), dict(r, steps=G.compact(r["steps"])))
  for task in a.tasks:
    t0 = time.perf_counter()
    progs = favourites(task, a.seeds, a.keep)
    for rank, (steps, cost) in enumerate(progs):
      r = rows.setdefault(G.digest(steps), {"task": task, "steps": steps, "estimate": None, "roles": []})
      r["roles"].append([f"gensor construction, analytic rank {rank}", 0, 0])
    print(f"  {task}: {len(progs)} distinct candidates in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
  a.out.parent.mkdir(parents=True, exist_ok=True)
  G.write_jsonl(a.out, list(rows.values()))
  print(f"{len(rows)} programs -> {a.out}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
