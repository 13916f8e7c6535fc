"""Can `compile` keep the ranking copy of the candidate it chose, instead of building that candidate in full?

For every task of the models (minicomp.zoo, ``--models``) on each target whose chosen Gensor candidate (compile's
ranking: ``compiler.rank_constructed``) unrolls past ``gensor.RANK_UNROLL``: the analytic model's estimate of the
candidate's copy over its own, the full static model's estimate of the candidate built in full and of its copy
(each times the task's kernel calls), and NVRTC's seconds for the full build (the copy was built to rank it).
Printed per task, then per model and target: the sum of the full estimates of what each policy keeps (the full
program, as compile does; the copy where the analytic model puts it within ``--tie`` of the program; the copy
always) and the NVRTC seconds the tie rule would save. Every latency is a static-model ESTIMATE (no GPU).

  python research/keep_copy.py                                   # ~10 minutes on 2 cores
  python research/keep_copy.py --models resnet18 --targets h100
"""
from __future__ import annotations

import argparse
import os
import time

MODELS = {"resnet18": {"hw": 64}, "mobilenet_v2": {"hw": 64}, "bert_tiny": {"s": 128},
          "residual_block": {"c": 64, "hw": 56}, "conv3d_block": {"c": 32, "d": 8}}   # (the last two: defaults.py's)


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--models", nargs="*", default=list(MODELS))
  ap.add_argument("--targets", nargs="*", default=["sm_86", "h100"])
  ap.add_argument("--tie", type=float, default=1e-3, help="the tie rule's tolerance (copy / program - 1)")
  args = ap.parse_args()
  os.environ["MINICOMP_NVRTC_CACHE"] = "0"      # (NVRTC's time is one of the results)
  from minicomp import zoo
  from minicomp.codegen.kernel import Builds
  from minicomp.compiler import constructed_sketches, model_tasks, rank_constructed
  from minicomp.search.static.analytic import sketch_model
  from minicomp.search.static.estimate import estimate
  from minicomp.search.strategies import gensor as G
  from minicomp.target import as_target

  for tname in args.targets:
    tgt = as_target(tname)
    for mname in args.models:
      model, _ = getattr(zoo, mname)(**MODELS[mname])
      tot = {"full": 0.0, "rule": 0.0, "copy": 0.0, "saved_s": 0.0}
      print(f"\n{mname} on {tname}: task, calls, analytic copy/full - 1, full estimate us*, copy us*, NVRTC s (full)")
      for task, _ in model_tasks(model, target=tname):
        sks = constructed_sketches(task.dag, tgt)
        res = G.construct(task.dag, tgt, seed=G.CONSTRUCT_SEED, sketches=sks, keep=G.COMPARE)
        if not res.candidates: continue
        chosen = rank_constructed(G.compared(res), sks, Builds(tgt), "k")[0]
        copy = G.ranking_copy(chosen, sks, tgt)
        if copy is None or copy is chosen: continue
        m = sketch_model(sks[chosen.sketch_index], tgt)
        a_full = m([chosen.values])[0]
        m.unroll = G.RANK_UNROLL
        a_copy = m([chosen.values])[0]
        t0 = time.perf_counter()
        kf = Builds(tgt).kernel(chosen.schedule, "k", chosen.program)
        secs = time.perf_counter() - t0
        ef = estimate(kf, tgt).latency_s * 1e6 * task.weight
        ec = estimate(Builds(tgt).kernel(copy.schedule, "k", copy.program), tgt).latency_s * 1e6 * task.weight
        tie = a_copy <= a_full * (1 + args.tie)
        tot["full"] += ef; tot["copy"] += ec; tot["rule"] += ec if tie else ef; tot["saved_s"] += secs if tie else 0
        print(f"  {'+'.join(dict.fromkeys(task.ops))[:28]:28s} x{task.weight}  analytic {a_copy / a_full - 1:+.4f}"
              f"{' (tie)' if tie else '      '}  full {ef:8.2f}  copy {ec:8.2f} ({ec / ef - 1:+.3f})  NVRTC {secs:.2f} s",
              flush=True)
      print(f"  sum over these tasks, us*: full programs {tot['full']:.2f}, compile's rule {tot['rule']:.2f} "
            f"({tot['rule'] / max(tot['full'], 1e-9) - 1:+.2%}), copies always {tot['copy']:.2f} "
            f"({tot['copy'] / max(tot['full'], 1e-9) - 1:+.2%}); NVRTC the rule saves: {tot['saved_s']:.2f} s")


if __name__ == "__main__":
  main()
