"""compile's trials=0 pick of each strategies task under a calibration fitted without that task, on the H200.

Issue 48's last goal: Gensor's construction under the calibrated model picks programs within 1.10x of the
fastest measured. The calibration's own leave-one-task-out score (``minicomp calibrate``) ranks the programs
that were timed; compile picks among the candidates Gensor constructs, which the timings may not hold. This
fits a calibration per task on the other tasks' timings (``--data``), lets compile choose that task's default
schedule under it, and looks the pick up among every timed program (all ``--data`` files): its GPU time over
the task's fastest, or "not timed" (``research/favourites.py`` adds Gensor's candidates to a GPU run's
selection so that most picks are). ``--shipped`` also picks under the shipped calibration and uncalibrated.

    python research/picks_loo.py --shipped --data benchmarks/data/h200-2026-11-27/timings.jsonl.gz \\
      --data benchmarks/data/h200-2026-11-30/picks.jsonl.gz --data benchmarks/data/h200-2026-11-30/favourites.jsonl.gz
"""
from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "benchmarks")]

import strategies as S  # noqa: E402
import strategies_gpu as G  # noqa: E402
from minicomp.search.static import fit as F  # noqa: E402
from minicomp.search.static import timings as T  # noqa: E402

TASKS = tuple(sorted(S.tasks()))    # the strategies benchmark's eight


def pick(task: str, model: str) -> str:
  """The steps compile(trials=0) chooses for a strategies task on an H200 under ``model`` (MINICOMP_STATIC_MODEL)."""
  from static_model_fidelity import _pick
  return _pick(task, model)[0]


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--data", action="append", required=True, help="timings files (repeatable)")
  ap.add_argument("--shipped", action="store_true", help="also the shipped calibration's and uncalibrated picks")
  ap.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
  a = ap.parse_args(argv)
  rows = [r for p in a.data for r in T.read(p) if r.correct]
  timed: dict[tuple[str, str], float] = {}
  for r in rows:
    k = (r.task, G.digest(r.steps))
    timed[k] = min(timed.get(k, math.inf), r.median_s)
  fastest = {t: min(s for (task, _), s in timed.items() if task == t) for t in a.tasks}
  data = F.tasks_of(rows, "sm_90")
  models = (["uncalibrated", "calibrated"] if a.shipped else []) + ["leave-one-task-out"]
  print("| task | fastest us | " + " | ".join(f"{m}: GPU / fastest" for m in models) + " |")
  print("|---|---:|" + "---:|" * len(models))
  logs: dict[str, list[float]] = {m: [] for m in models}
  with tempfile.TemporaryDirectory() as tmp:
    for task in a.tasks:
      cells = []
      for m in models:
        if m == "leave-one-task-out":
          cal = F.fit({k: v for k, v in data.items() if k != task}, "sm_90", {"without": task})
          path = Path(tmp) / f"{task}.json"
          cal.save(path)
          m_env = str(path)
        else:
          m_env = m
        t = timed.get((task, G.digest(pick(task, m_env))))
        if t is not None: logs[m].append(math.log(t / fastest[task]))
        cells.append(f"{t / fastest[task]:.2f}" if t is not None else "not timed")
      print(f"| {task} | {fastest[task] * 1e6:.1f} | " + " | ".join(cells) + " |", flush=True)
  print("geometric mean over the timed picks: " + ", ".join(
    f"{m} {math.exp(sum(v) / len(v)):.3f} ({len(v)})" for m, v in logs.items() if v))
  return 0


if __name__ == "__main__":
  sys.exit(main())
