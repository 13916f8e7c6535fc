"""What does compile's comparison of Gensor's candidates by the full static model buy on a real GPU? (issue 45)

``compile`` builds ranking copies of Gensor's first ``COMPARE`` candidates (those the analytic model puts within
``TIE`` of its best), estimates them with the full static model (PTX and ptxas's registers) and keeps the best;
that costs about half of a cold compile's NVRTC time (``schedules="compare"``; the default since 2026-12-02 keeps
the first). This picks each strategies task's default schedule for an H200 both ways -- comparing the first
``--compare`` candidates, and the analytic model's first candidate with no comparison (``--compare 1``) --
under each static model, and looks both up among the programs timed on an H200 (``--data``): GPU time over the
task's fastest timed program, or "not timed".

    python research/compare_gain.py --data benchmarks/data/h200-2026-11-27/timings.jsonl.gz \\
      --data benchmarks/data/h200-2026-11-30/picks.jsonl.gz --data benchmarks/data/h200-2026-11-30/favourites.jsonl.gz
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "benchmarks")]

import strategies as S  # noqa: E402
import strategies_gpu as G  # noqa: E402
from minicomp.search.static import timings as T  # noqa: E402
from minicomp.search.strategies import gensor  # noqa: E402

TASKS = tuple(sorted(S.tasks()))    # the strategies benchmark's eight


def pick(task: str, model: str, compare: int) -> str:
  """compile(trials=0)'s steps for ``task`` on an H200 under ``model``, comparing the first ``compare`` candidates
  (``schedules="compare"`` with ``gensor.COMPARE`` set to it)."""
  from static_model_fidelity import _pick
  saved, gensor.COMPARE = gensor.COMPARE, compare
  try:
    return _pick(task, model, "compare")[0]
  finally:
    gensor.COMPARE = saved


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--data", action="append", required=True, help="timings files (repeatable)")
  ap.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
  ap.add_argument("--compare", nargs="+", type=int, default=[3, 2, 1], help="candidates compared (first = baseline)")
  ap.add_argument("--models", nargs="+", default=["calibrated", "uncalibrated"])
  a = ap.parse_args(argv)
  timed: dict[tuple[str, str], float] = {}
  for r in (r for p in a.data for r in T.read(p) if r.correct):
    k = (r.task, G.digest(r.steps))
    timed[k] = min(timed.get(k, math.inf), r.median_s)
  fastest = {t: min(s for (task, _), s in timed.items() if task == t) for t in a.tasks}
  cols = [(m, n) for m in a.models for n in a.compare]
  base = a.compare[0]
  print("| task | fastest us | " + " | ".join(f"{m}, compare {n}" for m, n in cols) + " |")
  print("|---|---:|" + "---:|" * len(cols))
  logs: dict[tuple, list[float]] = {c: [] for c in cols}
  both: dict[tuple, list[tuple[float, float]]] = {c: [] for c in cols if c[1] != base}
  for task in a.tasks:
    cells, got = [], {}
    for m, n in cols:
      steps = pick(task, m, n)
      t = timed.get((task, G.digest(steps)))
      got[(m, n)] = t
      if t is not None: logs[(m, n)].append(math.log(t / fastest[task]))
      cells.append(f"{t / fastest[task]:.2f}" if t is not None else "not timed")
    for m, n in both:
      if got[(m, base)] is not None and got[(m, n)] is not None:
        both[(m, n)].append((got[(m, base)], got[(m, n)]))
    print(f"| {task} | {fastest[task] * 1e6:.1f} | " + " | ".join(cells) + " |", flush=True)
  print("geometric mean over the timed picks: " + ", ".join(
    f"{m} compare {n}: {math.exp(sum(v) / len(v)):.3f} ({len(v)})" for (m, n), v in logs.items() if v))
  for (m, n), pairs in both.items():
    if pairs:
      g = math.exp(sum(math.log(b / a_) for a_, b in pairs) / len(pairs))
      print(f"{m}: compare {n} over compare {base}, tasks where both were timed ({len(pairs)}): {g:.3f}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
