"""Per kernel call of a model: the static model's estimate and the GPU's time, with and without split-K sketches.

compile(trials=0) leaves the split-reduction sketch (sketch_rules.SplitReduction: partial sums of chunks of a long
reduction, then their sum with the epilogue) to tuning: with it, ResNet-18 at 64 x 64 is estimated 554.1 -> 414.2
us* on sm_86 but 273.7 -> 260.5 on h100, whose model is fitted to H200 timings (2026-11-30), and no GPU has run its
kernels. This compiles the model twice (``compiler.CONSTRUCT_SPLIT_SKETCH`` on, off; one process, no schedule
cache), pairs the kernel calls by position and prints, per call that changed, both estimates and, on a GPU, both
measured medians (research/tc_choice_check.py's ``per_call``: CUDA events, L2 flushed), and the end-to-end times.

    python research/split_check.py                  # estimates only, for an H100 (no GPU here)
    python research/split_check.py --gpu            # on a GPU machine: measured beside the estimates
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import minicomp as mc  # noqa: E402
import minicomp.compiler  # noqa: E402
from tc_choice_check import MODELS, per_call  # noqa: E402


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--model", default="resnet18", choices=sorted(MODELS))
  ap.add_argument("--gpu", action="store_true", help="measure on this machine's GPU (target='cuda')")
  ap.add_argument("--repeat", type=int, default=30)
  ap.add_argument("--target", default="h100", help="without --gpu: the device estimated for")
  a = ap.parse_args(argv)
  target = "cuda" if a.gpu else a.target
  model, feeds = MODELS[a.model]()
  os.environ["MINICOMP_SCHEDULE_CACHE"] = "0"     # (the cache keys no such switch)
  runs = {}
  for on in (True, False):
    minicomp.compiler.CONSTRUCT_SPLIT_SKETCH = on
    runs[on] = per_call(model, feeds, target, "fp32", a.gpu, a.repeat, jobs=1)   # (workers would not see the switch)
  (split, est_s, med_s), (plain, est_p, med_p) = runs[True], runs[False]
  if len(split) != len(plain):
    print(f"the two compiles have {len(split)} and {len(plain)} kernel calls: not paired")
    return 1
  fmt = lambda x: "-" if x is None else f"{x * 1e6:.1f}"   # noqa: E731
  where = mc.gpu_status() if a.gpu else f"no GPU: estimates for {target} only"
  print(f"# python research/split_check.py --model {a.model}{' --gpu' if a.gpu else ''}: {where}; us* static-model "
        f"ESTIMATE, us measured (median of {a.repeat})")
  print("| # | ops | est split us* | est plain us* | GPU split us | GPU plain us | model and GPU agree |")
  print("|---|---|---|---|---|---|---|")
  for k, ((ops, _, e1, m1), (_, _, e0, m0)) in enumerate(zip(split, plain)):
    if e1 == e0: continue            # (the same kernel both times)
    agree = "" if m1 is None else ("yes" if (e1 < e0) == (m1 < m0) else "**no**")
    print(f"| {k} | {ops[:40]} | {fmt(e1)} | {fmt(e0)} | {fmt(m1)} | {fmt(m0)} | {agree} |")
  print(f"end to end: estimate {fmt(est_s)} (split) / {fmt(est_p)} (plain) us*; GPU {fmt(med_s)} / {fmt(med_p)} us")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
