"""How well Tuna's objective (the static model's analytic part) ranks programs the full static model measured.

Tuna's evolution strategies never see a measurement: they follow the analytic ``SketchModel`` (launch
facts as formulas of the sketch's variables) and the full model (PTX-based, one NVRTC build per program)
only rates the top-k they propose. Where the two disagree, Tuna stalls however long it searches. This
benchmark reads the programs ``strategies.py`` measured (its memo, every strategy's programs), rates each
with the analytic model at the program's own unroll step, and prints per task:

- ``n``: programs compared (those with one unroll step on every marked loop, which the analytic model
  takes; a point it rejects for resources counts with an infinite analytic cost);
- ``spearman``: rank correlation of analytic and full cost (1: the same order);
- ``top1 / best``: the full cost of the analytic model's favourite over the best full cost among them
  (1.00: the analytic model picks the best);
- ``best of top-k``: the same for the best full cost among the analytic model's top k (k = 8, 32);
- ``rejected``: programs the full model rated that the analytic resource check rejects, and the best
  full cost among them over the best (1.00: the best program is one Tuna cannot reach).

With ``--show-best K`` the K programs with the best full cost are always in the sample, and a second
table gives each one's analytic cost and its rank under the analytic model among the programs compared
(rank 1: Tuna's favourite). A best program ranked far down is one Tuna's search does not get to.

Every latency is an ESTIMATE of the static model (no GPU).

  python benchmarks/strategies.py --budgets 64                 # first: fills the memo it reads
  python research/analytic_fidelity.py                       # all tasks in the memo
  python research/analytic_fidelity.py --tasks conv3x3,matmul --limit 500
  python research/analytic_fidelity.py --tasks depthwise --limit 3000 --show-best 5
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent / "benchmarks"   # strategies.py, provenance.py and their results
sys.path[:0] = [str(HERE), str(BENCH)]
MEMO = BENCH / "results" / "strategies" / "measured_h100.jsonl"


def read_memo(path: Path, tasks) -> dict[str, list[tuple[str, float]]]:
  """``strategies.py``'s memo: per task among ``tasks``, the (steps JSON, full cost) of every program
  measured with a finite cost (unreadable lines skipped)."""
  by_task: dict[str, list[tuple[str, float]]] = {}
  for ln in path.read_text().splitlines():
    try: r = json.loads(ln)
    except json.JSONDecodeError: continue
    if r.get("cost") is not None and math.isfinite(r["cost"]) and r.get("task") in tasks:
      by_task.setdefault(r["task"], []).append((r["steps"], r["cost"]))
  return by_task


def analytic_points(task: str, programs: list[str], target: str):
  """``(dag, tune task, points)`` of ``task``: for every program (steps JSON) the analytic model takes
  (one sketch's point, with one unroll step on every marked loop), ``(index in programs, sketch index,
  unroll step, the sketch's variable values)``."""
  import strategies as S

  from minicomp.search.strategies.base import TuneTask
  from minicomp.search.strategies.opevo.space import read_point
  from minicomp.target import as_target
  tgt = as_target(target)
  dag = S.task_dag(task)
  tt = TuneTask(task, dag, tgt, 1, dag.flop_count(), "", task)
  symbolic = [json.loads(sk.schedule.to_json()) for sk in tt.sketches]
  points = []
  for i, steps in enumerate(programs):
    for k, sk in enumerate(tt.sketches):
      got = read_point(sk, steps, symbolic[k])
      if got is None: continue
      values, unroll = got
      steps_used = set(unroll.values()) or {0}
      if len(steps_used) == 1: points.append((i, k, steps_used.pop(), values))
      break
  return dag, tt, points


def task_rows(task: str, progs: list[tuple[str, float]], target: str) -> dict | None:
  """The analytic cost of every program of ``task`` the analytic model takes, beside its full cost."""
  from minicomp.search.static.analytic import SketchModel
  from minicomp.target import as_target
  tgt = as_target(target)
  _, tt, points = analytic_points(task, [steps for steps, _ in progs], target)
  groups: dict[tuple[int, int], list[tuple[dict, float]]] = {}   # (sketch, unroll step) -> (values, full cost)
  for i, k, step, values in points:
    groups.setdefault((k, step), []).append((values, progs[i][1]))
  full, analytic, where = [], [], []
  for (k, step), rows in groups.items():
    try: model = SketchModel(tt.sketches[k], tgt, unroll=step)
    except Exception:  # noqa: BLE001 -- a sketch without an analytic model (Tuna falls back to random there)
      continue
    est = model([v for v, _ in rows])
    full += [c for _, c in rows]; analytic += list(est); where += [(k, step)] * len(rows)
  if len(full) < 2: return None
  from static_model_fidelity import spearman    # ties share their mean rank; inf ranks last
  full_a, an_a = np.array(full), np.array(analytic)
  order = np.argsort(an_a, kind="stable")
  best = full_a.min()
  top = lambda k: full_a[order[:k]].min() / best   # noqa: E731
  rank = np.empty(len(an_a), int)
  rank[order] = np.arange(1, len(an_a) + 1)
  best_rows = [(full_a[i], an_a[i], int(rank[i]), *where[i]) for i in np.argsort(full_a, kind="stable")]
  return {"task": task, "n": len(full), "spearman": spearman(an_a, full_a), "top1": top(1), "top8": top(8),
          "top32": top(32), "rejected": int(np.isinf(an_a).sum()),
          "best_rejected": full_a[np.isinf(an_a)].min() / best if np.isinf(an_a).any() else math.inf,
          "favourite_full": full_a[order[0]], "best_rows": best_rows}


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--memo", type=Path, default=MEMO, help="strategies.py's memo of measured programs")
  ap.add_argument("--tasks", default=None, help="comma-separated task names (default: every task in the memo)")
  ap.add_argument("--limit", type=int, default=2000, help="programs per task at most (a fixed random sample)")
  ap.add_argument("--target", default="h100")
  ap.add_argument("--show-best", type=int, default=0, metavar="K",
                  help="keep the K best programs (full cost) in the sample and print their analytic ranks")
  args = ap.parse_args(argv)
  if not args.memo.exists():
    ap.error(f"{args.memo} does not exist: run benchmarks/strategies.py first (it measures the programs compared here)")
  import strategies as S
  known = S.tasks()
  by_task = read_memo(args.memo, known)
  names = args.tasks.split(",") if args.tasks else [t for t in known if t in by_task]
  unknown = [n for n in names if n not in known]
  if unknown: ap.error(f"unknown task(s) {unknown}; known: {', '.join(known)}")
  from provenance import header_lines
  print("```")
  print("\n".join(header_lines(__file__, argv)))
  print("```\n")
  print("| task | n | spearman | top1 / best | best of top-8 / best | best of top-32 / best | rejected | best rejected / best |")
  print("|---|---:|---:|---:|---:|---:|---:|---:|")
  rng = np.random.default_rng(0)
  shown = []
  for t in names:
    progs = sorted(by_task.get(t, []))
    if len(progs) > args.limit:
      keep = set(sorted(progs, key=lambda p: p[1])[:args.show_best])
      progs = sorted(keep | {progs[int(i)] for i in rng.permutation(len(progs))[:args.limit - len(keep)]})
    r = task_rows(t, progs, args.target)
    if r is None:
      print(f"| {t} | {len(progs)} | (too few programs the analytic model takes) | | | | | |"); continue
    print(f"| {t} | {r['n']} | {r['spearman']:.2f} | {r['top1']:.2f} | {r['top8']:.2f} | {r['top32']:.2f} | {r['rejected']} | {r['best_rejected']:.2f} |")
    shown.append(r)
  if args.show_best:
    print(f"\nThe {args.show_best} best programs by full cost, and where the analytic model ranks them:\n")
    print("| task | full us* | analytic us* | analytic rank | of | sketch | unroll | full us* of the analytic favourite |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in shown:
      for full, an, rk, k, step in r["best_rows"][:args.show_best]:
        print(f"| {r['task']} | {full * 1e6:.3f} | {an * 1e6:.3f} | {rk} | {r['n']} | {k} | {step} | {r['favourite_full'] * 1e6:.3f} |")
  print("\n* every latency is an ESTIMATE of the static model, not measured on a GPU")
  return 0


if __name__ == "__main__":
  sys.exit(main())
