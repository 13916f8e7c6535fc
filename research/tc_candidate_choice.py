"""Does Gensor's analytic model pick the same one of a task's tensor-core schedules as the full static model?

``compile`` builds every tensor-core schedule ``tensor_core_schedules`` offers a task (two or three: the tiles that
fill the SMs, the next larger one, a split-K one) with NVRTC and estimates each with the full static model (PTX,
islpy footprints), then keeps the fastest of them, Gensor's and the rules'. Choosing among the tensor-core ones by
the analytic model (no NVRTC, no footprint enumeration) and building only that one would save the others' builds
and estimates. This measures, per task of some half-precision models, the analytic and the full estimate of each
tensor-core schedule, the seconds each takes, and what the analytic pick loses by the full model. Every latency is
a static-model ESTIMATE (no GPU).

  python research/tc_candidate_choice.py --out research/results/tc_candidate_choice/DATE.jsonl
  python research/tc_candidate_choice.py --report research/results/tc_candidate_choice/DATE.jsonl
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time

MODELS = {   # (zoo function, its arguments, precision)
  "resnet18_224": ("resnet18", {"hw": 224}, "fp16"),
  "resnet18_64": ("resnet18", {"hw": 64}, "fp16"),
  "mobilenet_v2": ("mobilenet_v2", {"hw": 224}, "fp16"),
  "bert_base_layer": ("bert_tiny", {"s": 128, "layers": 1, "d": 768, "heads": 12, "ff": 3072}, "fp16"),
  "vit_base_layer": ("bert_tiny", {"s": 197, "layers": 1, "d": 768, "heads": 12, "ff": 3072}, "fp16"),
  "bert_tiny_tf32": ("bert_tiny", {}, "tf32"),
}


def collect(args) -> None:
  import minicomp as mc
  from minicomp import zoo
  from minicomp.codegen.kernel import build
  from minicomp.compiler import model_tasks
  from minicomp.graph.tensor_core_schedules import is_split_k, tensor_core_schedules
  from minicomp.search.static.analytic import schedule_seconds
  from minicomp.search.static.estimate import estimate
  from minicomp.target import as_target
  seen = set()
  with open(args.out, "a") as f:
    for tname in args.targets:
      tgt = as_target(tname)
      for mname in args.models:
        fn, kw, precision = MODELS[mname]
        model, _ = getattr(zoo, fn)(**kw)
        for t, _ in model_tasks(model, tgt, None, precision):
          if (tname, t.key) in seen: continue
          seen.add((tname, t.key))
          scheds = tensor_core_schedules(t.dag, tgt, tf32=precision == "tf32")
          if not scheds: continue
          row = {"target": tname, "model": mname, "task": "+".join(dict.fromkeys(t.ops))[:40], "key": t.key,
                 "analytic": [], "full": [], "analytic_s": [], "full_s": [],
                 "split": [is_split_k(x) for x in scheds]}
          for s in scheds:
            t0 = time.perf_counter()
            try: a = schedule_seconds(s, tgt)
            except mc.MinicompError: a = math.inf
            t1 = time.perf_counter()
            try: full = estimate(build(s, tgt), tgt).latency_s
            except mc.MinicompError: full = math.inf
            row["analytic"].append(a); row["full"].append(full)
            row["analytic_s"].append(t1 - t0); row["full_s"].append(time.perf_counter() - t1)
          f.write(json.dumps(row) + "\n")
          f.flush()
          print(tname, mname, row["task"], [f"{x * 1e6:.1f}" for x in row["analytic"]],
                [f"{x * 1e6:.1f}" for x in row["full"]], flush=True)


POLICIES = {   # which of a task's tensor-core schedules are built and estimated in full (the best of them kept)
  "all (today)": lambda r: range(len(r["full"])),
  "analytic's first": lambda r: [_order(r["analytic"])[0]],
  "analytic's first two": lambda r: _order(r["analytic"])[:2],
  "analytic's first tile + split-K": lambda r: [i for i in _order(r["analytic"]) if not r["split"][i]][:1]
                                              + [i for i, x in enumerate(r["split"]) if x],
}


def _order(xs):
  return sorted(range(len(xs)), key=lambda i: xs[i])


def report(path: str) -> None:
  rows = [json.loads(x) for x in open(path)]
  print(f"{len(rows)} tasks with tensor-core schedules ({sum(len(r['full']) > 1 for r in rows)} with more than one), "
        f"{sum(len(r['full']) for r in rows)} schedules; full estimate {sum(sum(r['full_s']) for r in rows):.1f} s "
        f"(NVRTC + static model), analytic {sum(sum(r['analytic_s']) for r in rows):.1f} s")
  print("| policy | schedules built | full-model seconds | tasks losing | worst kept / best | sum of kept us* |")
  print("| --- | ---: | ---: | ---: | ---: | ---: |")
  best = sum(min(r["full"]) for r in rows)
  for name, pick in POLICIES.items():
    built = [list(pick(r)) for r in rows]
    kept = [min(r["full"][i] for i in b) for r, b in zip(rows, built)]
    ratios = [k / min(r["full"]) for r, k in zip(rows, kept)]
    worst = max(range(len(rows)), key=lambda i: ratios[i])
    w = rows[worst]
    print(f"| {name} | {sum(map(len, built))} | {sum(r['full_s'][i] for r, b in zip(rows, built) for i in b):.1f} | "
          f"{sum(x > 1.0001 for x in ratios)} | {ratios[worst]:.3f} ({w['target']} {w['model']} {w['task'][:24]}) | "
          f"{sum(kept) * 1e6:.1f} ({sum(kept) / best:.4f}x) |")


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--out")
  ap.add_argument("--report")
  ap.add_argument("--targets", nargs="+", default=["h100", "sm_86"])
  ap.add_argument("--models", nargs="+", default=list(MODELS))
  args = ap.parse_args(argv)
  if args.report: report(args.report)
  elif args.out: collect(args)
  else: ap.error("--out or --report")
  return 0


if __name__ == "__main__":
  sys.exit(main())
