"""Would one more unit in the calibrated p-norm reorder the top? (issue 48)

Leave one task out on the H200 timings (benchmarks/data/h200-2026-11-27), scored on the held-out task's H200 and
H100 programs and on Gensor's 754 timed candidates (benchmarks/data/h200-2026-11-30/favourites.jsonl.gz), with
the shipped calibration's units (``base``) or one unit more (``extra``), computed from each launch's facts:

- ``rounds``: a memory latency (600 cycles) per barrier round per wave;
- ``rounds_res``: the same divided by the blocks resident on an SM (which overlap it);
- ``lowwarp``: the issue time scaled by 16 / resident warps - 1 where an SM holds fewer than 16 warps;
- ``chainlow``: the latency chain's time scaled the same way.

Prints each task's pick (GPU time of the estimate's favourite over the fastest), top-10 overlap, Spearman and the
fitted weight of the extra unit, then the geometric-mean pick. ~1 minute per variant on 2 cores. ``warps``
prints instead, per task, the median GPU time over the shipped calibration's estimate by the warps resident on an
SM (the pattern the variants try to catch).

  python research/calibration_units.py base
  python research/calibration_units.py lowwarp
  python research/calibration_units.py warps
"""
from __future__ import annotations

import math
import sys

import numpy as np

from minicomp.search.static import calibration as C
from minicomp.search.static import fit as F
from minicomp.search.static import model as M
from minicomp.search.static import timings as T

DATA = "benchmarks/data/"
VARIANTS = ("base", "rounds", "rounds_res", "lowwarp", "chainlow", "warps")
BINS = (0, 4, 8, 12, 16, 24, 32, 48, 64)


def warps_table() -> None:
  """Per task, GPU time / the shipped calibration's estimate by resident warps per SM (single-launch programs)."""
  from collections import defaultdict

  from minicomp.search.static.calibration import active
  from minicomp.target import as_target
  dev = as_target("h200").device
  cal = active(dev)
  by = defaultdict(list)
  for path in ("h200-2026-11-27/timings.jsonl.gz", "h200-2026-11-30/favourites.jsonl.gz"):
    for r in T.read(DATA + path):
      if not r.correct or not r.facts or len(r.facts["launches"]) != 1: continue
      f = M.LaunchFacts(**r.facts["launches"][0])
      _, _, on = M.unit_times(f, dev)
      resident = min(f.blocks_per_sm, on) * math.ceil(f.threads_per_block / 32)
      by[r.task].append((r.median_s / M.launch_time(f, dev, cal).latency_s, resident))
  for task, v in sorted(by.items()):
    a = np.array(v)
    cells = [f"({lo},{hi}]: {np.median(a[m, 0]):.2f} (n={m.sum()})" for lo, hi in zip(BINS, BINS[1:])
             for m in [(a[:, 1] > lo) & (a[:, 1] <= hi)] if m.any()]
    print(f"{task:10s} " + "  ".join(cells))


def _with_extra(variant: str):
  base = M.unit_times

  def unit_times(f, dev):
    out, eff, on = base(f, dev)
    clock = dev.boost_clock_mhz * 1e6
    bars = f.per_thread.get("bar_sync", 0.0)
    resident_blocks = max(min(f.blocks_per_sm, on), 1)
    resident = resident_blocks * np.ceil(f.threads_per_block / 32)
    scale = max(0.0, 16.0 / max(resident, 1) - 1)
    out["extra"] = {"rounds": bars * np.ceil(on / max(f.blocks_per_sm, 1)) * 600 / clock,
                    "rounds_res": bars * on * 600 / clock / resident_blocks,
                    "lowwarp": out["issue"] * scale, "chainlow": out["latency"] * scale}[variant]
    return out, eff, on
  return unit_times


def main() -> None:
  variant = sys.argv[1] if len(sys.argv) > 1 else "base"
  if variant not in VARIANTS: raise SystemExit(f"variant: one of {', '.join(VARIANTS)}")
  if variant == "warps": return warps_table()
  if variant != "base":
    C.UNITS = C.UNITS + ("extra",)
    F.unit_times = _with_extra(variant)
  data = {g: F.tasks_of(T.read(DATA + p), "sm_90") for g, p in
          (("H200", "h200-2026-11-27/timings.jsonl.gz"), ("H100", "h100-2026-11-24/timings.jsonl.gz"),
           ("candidates", "h200-2026-11-30/favourites.jsonl.gz"))}
  picks = []
  for k in sorted(data["H200"]):
    if len(data["H200"][k].gpu_s) < F.MIN_PROGRAMS: continue
    cal = F.fit({j: d for j, d in data["H200"].items() if j != k}, "sm_90")
    for g, d in data.items():
      if k not in d or len(d[k].gpu_s) < F.MIN_PROGRAMS: continue
      q = F.rank_quality(F.predict(cal, d[k]), d[k].gpu_s)
      picks.append(q["pick"])
      print(f"{g:10s} {k:10s} pick {q['pick']:.2f} top-10 {q['top10']} rho {q['rho']:.2f} "
            f"extra weight {cal.weights.get('extra', '-')}", flush=True)
  print(f"{variant}: geometric-mean pick {math.exp(np.mean(np.log(picks))):.3f} over {len(picks)} task x data pairs")


if __name__ == "__main__":
  main()
