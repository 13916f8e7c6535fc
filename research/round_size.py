"""Does the round size matter? One strategy's saved runs at two round sizes, side by side.

``strategies.py`` measures 16 programs per round so that a budget of 64 is four rounds and the learned
strategies learn in between. Ansor's own default is 64 per round (its ``num_measures_per_round``); issue
17 asks for Ansor with its own defaults at 1024 trials. This reads the runs ``strategies.py`` saved for
both round sizes (same task, strategy and seeds) and prints, per task, the best program after N
measurements in us* (geometric mean over seeds, min-max beside it) and the round size's ratio to the
other. Every latency is an ESTIMATE of the static model (no GPU).

  python benchmarks/strategies.py --tasks depthwise --strategies ansor --budgets 1024 --seeds 3 --per-round 64
  python benchmarks/strategies.py --tasks depthwise --strategies ansor --budgets 1024 --seeds 3 --per-round 16
  python research/round_size.py --tasks depthwise --strategy ansor --at 64,256,1024
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent / "benchmarks"   # strategies.py, provenance.py and their results
sys.path[:0] = [str(HERE), str(BENCH)]

from provenance import header_lines  # noqa: E402
from strategies import OUT, best_so_far, geomean, load_runs  # noqa: E402


def table(runs: dict[int, list[dict]], tasks: list[str], strategy: str, at: list[int]) -> list[str]:
  """``runs``: round size -> saved runs. One row per task and round size: the best after each of ``at`` measurements
  (us*, geometric mean over the seeds both round sizes ran whose run is that long; min-max and how many seeds
  beside it), then a row with the ratio of the two round sizes."""
  sizes = sorted(runs)
  head = "| task | per round | seeds | " + " | ".join(f"best@{a} us*" for a in at) + " |"
  lines = [head, "|---|---:|---:|" + "---:|" * len(at)]
  for t in tasks:
    longest: dict[int, dict[int, dict]] = {}         # round size -> seed -> its longest run
    for r in sizes:
      for x in runs[r]:
        if x["task"] == t and x["strategy"] == strategy and len(x["costs"]) >= len(longest.get(r, {}).get(x["seed"], {}).get("costs", [])):
          longest.setdefault(r, {})[x["seed"]] = x
    seeds = set.intersection(*(set(v) for v in longest.values())) if longest else set()   # the same seeds for both
    means: dict[int, list[float | None]] = {}
    for r in sizes:
      if r not in longest or not seeds: continue
      cells, means[r] = [], []
      for a in at:
        v = [best_so_far(longest[r][sd]["costs"][:a])[-1] * 1e6 for sd in sorted(seeds) if len(longest[r][sd]["costs"]) >= a]
        v = [x for x in v if x != float("inf")]
        means[r].append(geomean(v) if v else None)
        cells.append(f"{geomean(v):.2f} ({min(v):.2f}-{max(v):.2f}), {len(v)}" if v else "")
      lines.append(f"| {t} | {r} | {','.join(map(str, sorted(seeds)))} | " + " | ".join(cells) + " |")
    if len(means) == 2:
      a_, b_ = (means[r] for r in sizes)
      lines.append(f"| {t} | {sizes[0]} / {sizes[1]} | | " + " | ".join(
        f"{x / y:.2f}" if x and y else "" for x, y in zip(a_, b_)) + " |")
  return lines


def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--tasks", required=True, help="comma-separated task names")
  ap.add_argument("--strategy", default="ansor")
  ap.add_argument("--rounds", default="16,64", help="the two round sizes (default 16,64)")
  ap.add_argument("--at", default="64,256,1024", help="measurement counts to compare at")
  ap.add_argument("--target", default="h100")
  ap.add_argument("--out", type=Path, default=OUT, help="strategies.py's --out (its runs/ folder is read)")
  args = ap.parse_args(argv)
  try:
    sizes = [int(x) for x in args.rounds.split(",")]
    at = [int(x) for x in args.at.split(",")]
  except ValueError:
    ap.error("--rounds and --at take comma-separated integers")
  if len(sizes) != 2: ap.error("--rounds takes two round sizes")
  runs = {r: load_runs(args.out, args.target, r) for r in sizes}
  print("\n".join(["```", *header_lines(__file__, argv), "every latency is an ESTIMATE of the static model (no GPU)",
                   "```", "", *table(runs, args.tasks.split(","), args.strategy, at)]))
  return 0


if __name__ == "__main__":
  sys.exit(main())
