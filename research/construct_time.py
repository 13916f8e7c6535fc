"""Gensor's construction of every task of whole models, timed, with what it found (issue 45: a speed-up must keep it).

Runs ``gensor.construct`` (compile's sketches, seed 0, the 3 candidates compile may compare) on every task of
the models for each target, in this process, and prints the total seconds; ``--out FILE`` writes every task's
candidates (their keys) and analytic costs (``repr``, every digit) as JSON, so that a change meant to make the
construction faster, not different, can be checked byte for byte: run it before and after (``PYTHONPATH`` at a
worktree of the old commit for "before") and ``cmp`` the files. Time before / after in alternation, several
times: the machine's speed moves by 20% between runs.

  python research/construct_time.py --out after.json
  PYTHONPATH=/tmp/wt_before python research/construct_time.py --out before.json && cmp before.json after.json
  python research/construct_time.py --models resnet18 bert_tiny mobilenet_v2 --targets sm_86 h100
  python research/construct_time.py --memo-ab      # CPU seconds with and without the analytic model's per-point memo
  python research/construct_time.py --targets sm_86 --buckets    # where the default's construction spends its CPU

``--memo-ab`` constructs every task twice in this process, once with ``SketchModel._remembered`` (the bank degrees
and sectors remembered per point) and once computing them directly, in alternating order, and prints the CPU
seconds of each: a comparison the machine's drift between runs cannot blur.

``--buckets`` constructs every task as compile's default does (its first candidate) and prints the CPU seconds spent
in the walks and in the analytic model's parts (each function's time includes what it calls; a few microseconds a
call of timing overhead).
"""
from __future__ import annotations

import argparse
import json
import time

MODELS = {"resnet18": {"hw": 64}, "bert_tiny": {"s": 128}, "mobilenet_v2": {"hw": 64}}


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--models", nargs="*", default=["resnet18"], choices=sorted(MODELS))
  ap.add_argument("--targets", nargs="*", default=["sm_86", "h100"])
  ap.add_argument("--out", help="write every task's candidates and costs here (JSON)")
  ap.add_argument("--memo-ab", action="store_true", help="CPU seconds with and without the per-point memo")
  ap.add_argument("--buckets", action="store_true", help="the CPU seconds of the construction's parts")
  args = ap.parse_args(argv)
  if args.memo_ab: return memo_ab(args)
  if args.buckets: return buckets(args)
  from minicomp.search.strategies.gensor import COMPARE, construct
  found, total = {}, 0.0
  for name, tname, tgt, task, sks in _tasks(args):
    t0 = time.perf_counter()
    res = construct(task.dag, tgt, seed=0, sketches=sks, keep=COMPARE)
    total += time.perf_counter() - t0
    found[f"{name}/{tname}/{task.key}"] = [(c.key, repr(cost)) for c, cost in zip(res.candidates, res.costs)]
  print(f"construction of {len(found)} tasks ({' '.join(args.models)}; {' '.join(args.targets)}): {total:.2f} s")
  if args.out:
    with open(args.out, "w") as f: json.dump(found, f, indent=0, sort_keys=True)
  return 0


def _tasks(args):
  """(model, target name, target, task, compile's sketches of it) per task of ``--models`` on each ``--targets``."""
  from minicomp import zoo
  from minicomp.compiler import constructed_sketches, model_tasks
  from minicomp.target import as_target
  for name in args.models:
    model = getattr(zoo, name)(**MODELS[name])[0]
    for tname in args.targets:
      tgt = as_target(tname)
      for task, _ in model_tasks(model, tname):
        yield name, tname, tgt, task, constructed_sketches(task.dag, tgt)


def memo_ab(args) -> int:
  from minicomp.search.static.analytic import SketchModel
  from minicomp.search.strategies.gensor import COMPARE, construct
  remembered = SketchModel._remembered
  modes = {"memo": remembered, "direct": lambda self, fn, *columns: fn(*columns)}
  cpu, n = dict.fromkeys(modes, 0.0), 0
  try:
    for _, _, tgt, task, sks in _tasks(args):
      for mode in (list(modes) if n % 2 else list(modes)[::-1]):
        SketchModel._remembered = modes[mode]
        t0 = time.process_time()
        construct(task.dag, tgt, seed=0, sketches=sks, keep=COMPARE)
        cpu[mode] += time.process_time() - t0
      n += 1
  finally:
    SketchModel._remembered = remembered
  print(f"construction of {n} tasks, CPU s: with the memo {cpu['memo']:.2f}, without {cpu['direct']:.2f} "
        f"({cpu['memo'] / cpu['direct']:.3f}x)")
  return 0


def buckets(args) -> int:
  from minicomp.search.features.formulas import FormulaProgram
  from minicomp.search.static import analytic
  from minicomp.search.static.analytic import SketchModel
  from minicomp.search.strategies import gensor
  spent: dict[str, list] = {}
  parts = [(gensor.SketchWalker, "walk", "walks"), (gensor.SketchWalker, "finish", "  finishing the walks' states"),
           (gensor, "check_values", "  the walker's limits check"), (SketchModel, "__call__", "  analytic model calls"),
           (SketchModel, "valid", "    limits (its own formulas)"), (SketchModel, "_launches", "    launch facts"),
           (FormulaProgram, "bind", "      formulas (also the limits')"),
           (SketchModel, "_whole", "      whole-reduction sizes"),
           (SketchModel, "_remembered", "      bank degrees and sectors"),
           (analytic, "launch_times", "    launch times"), (SketchModel, "__init__", "analytic model built"),
           (gensor, "make_candidate", "candidates lowered")]
  saved = [(owner, name, getattr(owner, name)) for owner, name, _ in parts]

  def timed(fn, label):
    def call(*a, **k):
      t0 = time.process_time()
      try: return fn(*a, **k)
      finally:
        s = spent.setdefault(label, [0.0, 0])
        s[0] += time.process_time() - t0
        s[1] += 1
    return call
  total, n = 0.0, 0
  try:
    for (owner, name, label), (_, _, fn) in zip(parts, saved): setattr(owner, name, timed(fn, label))
    for _, _, tgt, task, sks in _tasks(args):
      t0 = time.process_time()
      gensor.construct(task.dag, tgt, seed=0, sketches=sks, keep=1)
      total, n = total + time.process_time() - t0, n + 1
  finally:
    for owner, name, fn in saved: setattr(owner, name, fn)
  print(f"construction of {n} tasks ({' '.join(args.models)}; {' '.join(args.targets)}), compile's default: "
        f"{total:.2f} CPU s")
  for _, _, label in parts:
    s, calls = spent.get(label, (0.0, 0))
    print(f"{label:34s} {s:7.2f} s {s / total * 100:5.1f}%  {calls} calls")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
