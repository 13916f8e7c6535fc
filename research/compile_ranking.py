"""Can `compile` rank Gensor's compared candidates on copies unrolled less, instead of building them in full?

For every task of the models (minicomp.zoo, ``--models``) whose construction leaves 2 or more of its first
``--compare`` candidates within ``gensor.TIE`` (``gensor.compared``), on each target: the full static estimate of
every candidate (unroll 512, what compile kept until 2026-11-30: the best of them), and, per cap of ``--caps``,
the full static estimate of each candidate's copy with every ``auto_unroll_max_step`` capped there. Printed per
model and target: how many tasks the copies of the first k candidates (k = 2 .. ``--compare``) rank first the
candidate the full programs do, and the sum of the full estimates of the candidates each policy keeps (the full
programs' best; the analytic model's first; the copies' first). Build
times are not compared here (the caps share builds where their copies are the same program):
benchmarks/compile_model.py times compile. Every latency is a static-model ESTIMATE (no GPU).

  python research/compile_ranking.py
  python research/compile_ranking.py --models resnet18 --targets h100 --caps 64 128 256
  python research/compile_ranking.py --models resnet18 --targets sm_86 --caps 128 --hw 224
  python research/compile_ranking.py --caps 64 128 --compare 3      # what chose compile's COMPARE and RANK_UNROLL
"""
from __future__ import annotations

import argparse

MODELS = {"resnet18": {"hw": 64}, "mobilenet_v2": {"hw": 64}, "bert_tiny": {"s": 128},
          "residual_block": {"c": 64, "hw": 56}}    # (56x56: where the first two candidates on 64-step copies failed)


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--models", nargs="*", default=list(MODELS))
  ap.add_argument("--targets", nargs="*", default=["sm_86", "h100"])
  ap.add_argument("--caps", nargs="*", type=int, default=[64, 128, 256])
  ap.add_argument("--compare", type=int, default=3, help="the analytic model's first candidates within TIE to rank")
  ap.add_argument("--hw", type=int, default=None, help="image size of the convolutional models (default 64)")
  args = ap.parse_args()

  import minicomp as mc
  from minicomp import zoo
  from minicomp.codegen.kernel import build
  from minicomp.search.sketch import generate_sketches
  from minicomp.search.static.estimate import estimate
  from minicomp.search.strategies.gensor import CONSTRUCT_SEED, compared, construct, ranking_copy
  from minicomp.target import as_target

  def full_estimate(schedule, tgt) -> float:
    try: return estimate(build(schedule, tgt), tgt).latency_s
    except mc.MinicompError: return float("inf")

  ks = range(2, args.compare + 1)
  print(f"{'target':7s} {'model':13s} {'tasks':>5s} {'full best us':>12s} {'first us':>9s}  "
        + "  ".join(f"cap {c} of {k}: agree / us" for c in args.caps for k in ks))
  for tname in args.targets:
    tgt = as_target(tname)
    for mname in args.models:
      kw = {k: (args.hw if k == "hw" and args.hw else v) for k, v in MODELS[mname].items()}
      model = getattr(zoo, mname)(**kw)[0]
      cm = mc.compile(model, tgt, schedules="rules", progress=False)
      n, best_sum, first_sum = 0, 0.0, 0.0
      per = {(c, k): [0, 0.0] for c in args.caps for k in ks}
      for t in cm.tasks:
        sks = generate_sketches(t.dag, tgt)
        cands = compared(construct(t.dag, tgt, seed=CONSTRUCT_SEED, sketches=sks, keep=args.compare), args.compare)
        if len(cands) < 2: continue
        n += 1
        full = [full_estimate(c.schedule, tgt) for c in cands]
        best = min(range(len(full)), key=full.__getitem__)
        best_sum += full[best]; first_sum += full[0]
        for cap in args.caps:
          costs = []
          for c in cands:
            copy = ranking_copy(c, sks, tgt, cap)
            costs.append(full_estimate(copy.schedule, tgt) if copy is not None else float("inf"))
          for k in ks:
            pick = min(range(min(k, len(costs))), key=costs.__getitem__)
            per[cap, k][0] += pick == best
            per[cap, k][1] += full[pick]
      print(f"{tname:7s} {mname:13s} {n:5d} {best_sum * 1e6:12.2f} {first_sum * 1e6:9.2f}  "
            + "  ".join(f"{per[c, k][0]:>11d} / {per[c, k][1] * 1e6:.2f}" for c in args.caps for k in ks),
            flush=True)


if __name__ == "__main__":
  main()
