"""Which of the candidates ``compile`` builds does the full static model keep, and what would choosing on
Gensor's analytic model alone (before any NVRTC build) lose?

For every task of benchmarks/defaults.py's models, on each target: Gensor's construction (the compile's
seed), its first ``--keep`` candidates' analytic costs, and the full static estimate (NVRTC + PTX + islpy)
of each and of the rule-based schedule. Writes one JSON line per task to ``--out``; ``--report`` prints, per
selection policy, how many tasks lose and the sum of the kept estimates against today's choice (the best
full estimate of the first 3 candidates and the rules). Every latency is a static-model ESTIMATE (no GPU).

  python research/compile_choice.py --out research/results/compile_choice/DATE.jsonl
  python research/compile_choice.py --report research/results/compile_choice/2026-11-28.jsonl
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time


def collect(args) -> None:
  sys.path.insert(0, "benchmarks")
  from defaults import MODELS, task_class

  import minicomp as mc
  from minicomp import zoo
  from minicomp.codegen.kernel import build
  from minicomp.graph.schedules import default_schedule
  from minicomp.search.static.estimate import estimate
  from minicomp.search.strategies.gensor import CONSTRUCT_SEED, construct
  from minicomp.target import as_target
  seen = set()
  with open(args.out, "a") as f:
    for tname in args.targets:
      tgt = as_target(tname)
      for mname in args.models:
        fn, kw = MODELS[mname]
        model, _ = getattr(zoo, fn)(**kw)
        cm = mc.compile(model, tgt, schedules="rules")
        for t in cm.tasks:
          if (tname, t.key) in seen: continue
          seen.add((tname, t.key))
          rules = estimate(build(default_schedule(t.dag, tgt), tgt), tgt).latency_s
          t0 = time.perf_counter()
          res = construct(t.dag, tgt, seed=CONSTRUCT_SEED)
          secs = time.perf_counter() - t0
          full = []
          for c in res.candidates[:args.keep]:
            try: full.append(estimate(build(c.schedule, tgt), tgt).latency_s)
            except mc.MinicompError: full.append(None)
          f.write(json.dumps({"target": tname, "model": mname, "task": "+".join(dict.fromkeys(t.ops))[:40],
                              "class": task_class(t), "key": t.key, "rules": rules, "analytic": res.costs[:args.keep],
                              "full": full, "construct_s": secs}) + "\n")
          f.flush()
          print(tname, mname, t.key[:12], f"{secs:.1f}s", flush=True)


def report(path: str) -> None:
  rows = [json.loads(x) for x in open(path)]
  def today(r):      # compile's choice: the best full estimate of the first 3 candidates and the rules
    return min([x for x in r["full"][:3] if x is not None] + [r["rules"]])
  def policy(r, within, builds):
    """Build the candidates whose analytic cost is within ``within`` of the best (at most ``builds``), and
    the rules; keep the best full estimate."""
    a = r["analytic"]
    idx = [i for i in range(min(builds, len(a))) if a[i] <= a[0] * (1 + within)]
    return min([r["full"][i] for i in idx if r["full"][i] is not None] + [r["rules"]])
  def first_only(r, rules=True):
    x = r["full"][0] if r["full"] else None
    return min([v for v in (x, r["rules"] if rules or x is None else None) if v is not None])
  print(f"{len(rows)} tasks; latency = static-model ESTIMATES (no GPU)")
  wins = {}
  for r in rows:
    k = "rules" if today(r) == r["rules"] else f"#{[x for x in r['full']].index(today(r))}"
    wins[k] = wins.get(k, 0) + 1
  print("today's winner:", wins)
  for tname in sorted({r["target"] for r in rows}):
    rs = [r for r in rows if r["target"] == tname]
    base = sum(today(r) for r in rs)
    print(f"\ntarget {tname}: {len(rs)} tasks, today's kept total {base * 1e6:.1f} us")
    print(f"{'policy':44s} {'builds':>6s} {'total x':>8s} {'tasks worse':>11s} {'worst x':>8s}")
    cands = [("first candidate + rules", lambda r: first_only(r), lambda r: 1 + 1),
             ("first candidate only", lambda r: first_only(r, False), lambda r: 1)]
    for w in (0.0, 0.05, 0.1, 0.2, 0.5):
      for b in (2, 3):
        cands.append((f"within {w:.0%} of the best, at most {b}, + rules", (lambda w, b: lambda r: policy(r, w, b))(w, b),
                      (lambda w, b: lambda r: 1 + sum(1 for x in r["analytic"][:b] if x <= r["analytic"][0] * (1 + w)))(w, b)))
    for name, fn, nb in cands:
      vals = [fn(r) / today(r) for r in rs]
      tot = sum(fn(r) for r in rs) / base
      print(f"{name:44s} {sum(nb(r) for r in rs) / len(rs):6.2f} {tot:8.4f} {sum(v > 1.0001 for v in vals):11d} "
            f"{max(vals):8.3f}")


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--out")
  ap.add_argument("--report")
  ap.add_argument("--models", nargs="*")
  ap.add_argument("--targets", nargs="*", default=["sm_86", "h100"])
  ap.add_argument("--keep", type=int, default=4)
  args = ap.parse_args(argv)
  if args.report: report(args.report); return 0
  if args.models is None:
    sys.path.insert(0, "benchmarks")
    from defaults import MODELS
    args.models = list(MODELS)
  collect(args)
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
