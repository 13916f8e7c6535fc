"""What keeping Gensor's first candidate uncompared costs in kernels, and whether shorter walks would make it quicker
(issue 45).

Compiles every model of ``benchmarks/defaults.py`` with ``schedules="compare"`` (the candidates the analytic model
cannot separate built and ranked by the full static model; the default until 2026-12-02) and with the default
``schedules="gensor"`` (the analytic model's first candidate, nothing built to compare: named ``"quick"`` on
2026-12-01), and prints each model's end-to-end static-model ESTIMATE both ways, their ratio and the seconds. (At
8f80ef1 quick kept that candidate's 128-step ranking copy instead: the same command there, with its mode names,
measures that variant.) ``--steps S --halving H`` also compiles the default with Gensor's walks shortened (at
most S steps per level, the temperature halving every H steps; compile's walks: 36 and 6). One process per mode
here, the schedule cache off and one NVRTC cache folder for all: the seconds are not a cold compile's
(``benchmarks/compile_model.py`` times those).

    python research/quick_choice.py --targets sm_86 h100
    python research/quick_choice.py --models resnet18 mobilenet_v2 --steps 18 --halving 3
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
os.environ.setdefault("MINICOMP_SCHEDULE_CACHE", "0")

import minicomp as mc  # noqa: E402
from defaults import MODELS  # noqa: E402
from minicomp import zoo  # noqa: E402
from minicomp.search.strategies import gensor  # noqa: E402

EXTRA_MODELS = {"mobilenet_v2": ("mobilenet_v2", {"hw": 64}), "bert_tiny": ("bert_tiny", {"s": 128})}


def shortened_walks(steps: int, halving: int) -> None:
  """Gensor's walks in this process (compile with ``jobs=1``) at most ``steps`` per level, halving every ``halving``."""
  d = list(gensor.SketchWalker.walk.__defaults__)      # (starts, walks, max_steps, halving, trace)
  d[2], d[3] = steps, halving
  gensor.SketchWalker.walk.__defaults__ = tuple(d)


def main() -> int:
  models = {**MODELS, **EXTRA_MODELS}
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--models", nargs="*", default=list(MODELS), help=f"of {', '.join(models)}")
  ap.add_argument("--targets", nargs="*", default=["sm_86"])
  ap.add_argument("--steps", type=int, default=None, help="also gensor with walks of at most this many steps a level")
  ap.add_argument("--halving", type=int, default=3)
  args = ap.parse_args()
  modes = ["compare", "gensor"] + (["gensor, short walks"] if args.steps else [])
  print(f"command: python research/quick_choice.py {' '.join(sys.argv[1:])}")
  print("every latency a static-model ESTIMATE (us*); s: this process's compile, warm NVRTC cache")
  print(f"{'model':20s} {'target':6s} " + "  ".join(f"{m + ' us*':>22s} {'s':>5s}" for m in modes) + "  ratios")
  for tgt in args.targets:
    ratios: dict[str, list[float]] = {m: [] for m in modes[1:]}
    for name in args.models:
      fn, kw = models[name]
      model, _ = getattr(zoo, fn)(**kw)
      row = []
      for m in modes:
        saved = gensor.SketchWalker.walk.__defaults__
        if m.endswith("short walks"): shortened_walks(args.steps, args.halving)
        try:
          t0 = time.perf_counter()
          cm = mc.compile(model, target=tgt, schedules=m.split(",")[0], progress=False, jobs=1)
          row.append((cm.estimate().latency_s * 1e6, time.perf_counter() - t0))
        finally:
          gensor.SketchWalker.walk.__defaults__ = saved
      for m, (us, _) in zip(modes[1:], row[1:]): ratios[m].append(us / row[0][0])
      print(f"{name:20s} {tgt:6s} " + "  ".join(f"{us:22.2f} {s:5.1f}" for us, s in row) + "  "
            + " ".join(f"{us / row[0][0]:.3f}" for us, _ in row[1:]), flush=True)
    for m, rs in ratios.items():
      print(f"{tgt}: {m} / compare, geometric mean {math.exp(sum(map(math.log, rs)) / len(rs)):.3f}, "
            f"range {min(rs):.3f}-{max(rs):.3f}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
