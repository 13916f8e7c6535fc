"""Schedules without measuring: rule-based defaults vs Gensor's construction vs an Ansor search.

For every task of every model below (minicomp.zoo builders at realistic sizes), on each target:

- ``rules``: the static estimate of the rule-based schedule (graph/schedules.py);
- ``gensor``: the static estimate of Gensor's construction (the candidate ``compile`` keeps: the analytic model's
  first; with ``--schedules compare``, the first of those it compares: ``compiler.kept_order``;
  search/strategies/gensor.py; tasks of one walk domain sharing a walk as in ``compile``: ``compiler.construct_task``)
  and its construction time;
- ``default``: what ``compile(trials=0)`` keeps (the faster of the two by the static model);
- ``ansor``: the best static estimate of an Ansor search of ``--ansor-trials`` trials on that
  task alone (StaticMeasurer; ``--ansor-trials 0`` skips it; ``--ansor-per-class N`` runs it on
  the N tasks of each class with the largest rule-based estimate only; a task that occurs in
  several models is searched once). ``--ansor-logs DIR`` keeps each target's tuning log there,
  so a re-run (after a change to Gensor, say) reuses the searches instead of repeating them.

Every latency is an ESTIMATE of the static model (no GPU). Printed: one row per task, then per
task class the geometric mean and the worst of gensor / ansor and of default / rules, then per model every kernel
call at its task's estimate (a task called three times counts three times: the end-to-end sum).

  python benchmarks/defaults.py                                  # h100 and sm_86, no Ansor column
  python benchmarks/defaults.py --ansor-trials 512               # the issue's full comparison (hours)
  python benchmarks/defaults.py --models resnet18 --targets h100 --ansor-trials 64
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

MODELS = {   # name -> (zoo builder, keyword arguments): sizes where schedules matter
  "residual_block": ("residual_block", {"c": 64, "hw": 56}),
  "inverted_residual": ("inverted_residual", {"c": 32, "hw": 28, "expand": 6}),
  "grouped_block": ("grouped_block", {"c": 128, "hw": 28, "groups": 32}),
  "generator": ("generator", {"z": 100, "c": 64}),
  "conv3d_block": ("conv3d_block", {"c": 32, "d": 8}),
  "transformer_encoder": ("transformer_encoder", {"s": 128, "d": 256, "heads": 4, "ff": 1024}),
  "decoder_block": ("decoder_block", {"s": 128, "d": 256, "heads": 4, "ff": 1024}),
  "llama_block": ("llama_block", {"s": 128, "heads": 8, "kv_heads": 2, "hd": 32, "ff": 512}),
  "resnet18": ("resnet18", {"hw": 64}),
}


def task_class(task) -> str:
  """A finer class than ``task_kind``: which kind of operator sets the task's schedule."""
  ops = set(task.ops)
  if "ConvTranspose" in ops: return "conv transposed"
  if "Conv" in ops:
    out = task.dag.outputs[0]
    if len(out.shape) == 5: return "conv 3-D"
    ws = [p for p in task.dag.placeholders if len(p.shape) == len(out.shape) and p.shape[0] == out.shape[1]
          and p.shape[2:] != out.shape[2:]]
    xs = [p for p in task.dag.placeholders if len(p.shape) == len(out.shape) and p not in ws]
    if ws and ws[0].shape[1] == 1 and out.shape[1] > 1: return "conv depthwise"
    if ws and xs and ws[0].shape[1] not in {x.shape[1] for x in xs}: return "conv grouped"
    return "conv 2-D"
  if ops & {"MatMul", "Gemm"}:
    return "batch matmul" if len(task.dag.outputs[0].shape) > 2 and not _is_2d(task) else "matmul"
  if ops & {"Softmax", "LayerNormalization"} or {"ReduceMean", "Sqrt"} <= ops or {"ReduceMean", "Div"} <= ops:
    return "rows (softmax / norm)"
  if any(o.startswith("Reduce") or o in ("GlobalAveragePool", "MaxPool", "AveragePool") for o in ops):
    return "reduction"
  return "elementwise"


def _is_2d(task) -> bool:
  """A MatMul whose second operand is a 2-D weight (batched rows times one matrix): a matmul."""
  return any(len(p.shape) == 2 for p in task.dag.placeholders)


def _gmean(xs):
  xs = [x for x in xs if x and math.isfinite(x)]
  return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--models", nargs="*", default=list(MODELS), help=f"of {', '.join(MODELS)}")
  ap.add_argument("--targets", nargs="*", default=["h100", "sm_86"])
  ap.add_argument("--ansor-trials", type=int, default=0)
  ap.add_argument("--ansor-per-class", type=int, default=1000)
  ap.add_argument("--ansor-logs", default=None, help="folder for the Ansor tuning logs (resumable)")
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--schedules", default="gensor", choices=["gensor", "compare"],
                  help="compile's schedules= mode the gensor column follows (default: gensor, compile's default)")
  args = ap.parse_args(argv)
  sys.path.insert(0, __file__.rsplit("/", 1)[0])
  from provenance import header_lines

  import minicomp as mc
  from minicomp import zoo
  from minicomp.codegen.kernel import Builds, build
  from minicomp.compiler import Walked, construct_task, kept_order, walk_key
  from minicomp.graph.schedules import default_schedule
  from minicomp.search.static.estimate import estimate
  from minicomp.search.strategies.gensor import COMPARE
  from minicomp.target import as_target

  for line in header_lines(__file__, argv): print(line)
  print("latency:  static-model ESTIMATES (no GPU); 'x' columns are ratios; construct s = Gensor's walks")
  worst_ok = True
  for tname in args.targets:
    tgt = as_target(tname)
    rows, calls = [], {}
    for mname in args.models:
      fn, kw = MODELS[mname]
      model, _ = getattr(zoo, fn)(**kw)
      cm = mc.compile(model, tgt, schedules="rules")
      calls[mname] = [c.task for c in cm.calls]
      walks: dict = {}        # (compile's: tasks of one walk domain share it, compiler.choose_defaults)
      for t in cm.tasks:
        rules = estimate(build(default_schedule(t.dag, tgt), tgt), tgt).latency_s
        t0 = time.perf_counter()
        wk = walk_key(t)
        walked = walks.setdefault(wk, Walked()) if wk is not None else None
        sks, res, _ = construct_task(t, tgt, COMPARE if args.schedules == "compare" else 1, walked, args.seed)
        secs = time.perf_counter() - t0
        gensor, built = math.inf, Builds(tgt)
        for c in kept_order(res, sks, built, "task_kernel", args.schedules == "compare"):
          try:
            gensor = estimate(built.kernel(c.schedule, "task_kernel", c.program), tgt).latency_s
            break
          except mc.MinicompError: pass
        rows.append({"model": mname, "task": "+".join(dict.fromkeys(t.ops))[:34], "class": task_class(t), "task_obj": t,
                     "rules": rules, "gensor": gensor, "default": min(rules, gensor), "secs": secs, "ansor": None})
    if args.ansor_trials > 0:
      from minicomp.search.measure import StaticMeasurer
      from minicomp.search.strategies.ansor import AnsorStrategy
      from minicomp.search.tune import tune_tasks
      todo, found = [], {}
      for cls in sorted({r["class"] for r in rows}):
        uniq = {r["task_obj"].key: r for r in rows if r["class"] == cls}
        todo += sorted(uniq.values(), key=lambda r: -r["rules"])[:args.ansor_per_class]
      with StaticMeasurer() as meas:
        for r in todo:
          t = r["task_obj"]
          log = None
          if args.ansor_logs:
            os.makedirs(args.ansor_logs, exist_ok=True)
            log = os.path.join(args.ansor_logs, f"{tname}-{t.key[:16]}.jsonl")
          best = tune_tasks([t], tgt, trials=args.ansor_trials, strategy=AnsorStrategy(seed=args.seed),
                            measurer=meas, seed=args.seed, measures_per_round=min(64, args.ansor_trials),
                            log_file=log)
          if t.key in best:
            from minicomp.ir.schedule import Schedule
            found[t.key] = estimate(build(Schedule.from_json(t.dag, best[t.key]), tgt), tgt).latency_s
      for r in rows: r["ansor"] = found.get(r["task_obj"].key)
    print(f"\ntarget {tname} ({tgt.device.name}); ansor: {args.ansor_trials} trials per task" if args.ansor_trials else
          f"\ntarget {tname} ({tgt.device.name}); ansor: not run (--ansor-trials 0)")
    head = f"{'model':20s} {'task':34s} {'class':22s} {'rules us':>9s} {'gensor us':>9s} {'default us':>10s} " \
           f"{'ansor us':>9s} {'gensor/ansor':>12s} {'rules/default':>13s} {'construct s':>11s}"
    print(head); print("-" * len(head))
    for r in rows:
      a = f"{r['ansor'] * 1e6:9.2f}" if r["ansor"] else f"{'-':>9s}"
      ga = f"{r['gensor'] / r['ansor']:11.2f}x" if r["ansor"] else f"{'-':>12s}"
      print(f"{r['model']:20s} {r['task']:34s} {r['class']:22s} {r['rules'] * 1e6:9.2f} {r['gensor'] * 1e6:9.2f} "
            f"{r['default'] * 1e6:10.2f} {a} {ga} {r['rules'] / r['default']:12.2f}x {r['secs']:11.2f}")
    print(f"\nper task class ({tname}):")
    head = f"{'class':22s} {'tasks':>5s} {'rules/default gmean':>19s} {'gensor/ansor gmean':>18s} " \
           f"{'gensor/ansor worst':>18s} {'default/ansor worst':>19s}"
    print(head); print("-" * len(head))
    for cls in sorted({r["class"] for r in rows}):
      rs = [r for r in rows if r["class"] == cls]
      ga = [r["gensor"] / r["ansor"] for r in rs if r["ansor"]]
      da = [r["default"] / r["ansor"] for r in rs if r["ansor"]]
      worst = max(ga) if ga else float("nan")
      worst_ok &= not ga or worst <= 1.25
      print(f"{cls:22s} {len(rs):5d} {_gmean([r['rules'] / r['default'] for r in rs]):18.2f}x "
            f"{_gmean(ga):17.2f}x {worst:17.2f}x {max(da) if da else float('nan'):18.2f}x")
    print(f"\nper model ({tname}): every kernel call, each at its task's estimate")
    head = f"{'model':20s} {'calls':>5s} {'rules us':>9s} {'default us':>10s}"
    print(head); print("-" * len(head))
    for mname, keys in calls.items():
      by_key = {r["task_obj"].key: r for r in rows if r["model"] == mname}
      tot = lambda col: sum(by_key[k][col] for k in keys) * 1e6   # noqa: E731
      print(f"{mname:20s} {len(keys):5d} {tot('rules'):9.2f} {tot('default'):10.2f}")
    secs = sorted(r["secs"] for r in rows)
    print(f"construction time per task: median {secs[len(secs) // 2]:.2f} s, max {secs[-1]:.2f} s "
          f"({len(rows)} tasks)")
  if args.ansor_trials: print("goal (issue 15): gensor within 1.25x of ansor on every class:", "met" if worst_ok else "NOT met")
  return 0


if __name__ == "__main__":
  sys.exit(main())
