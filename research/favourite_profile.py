"""What the static model's favourites of a task look like next to the GPU's fastest (issue 48: the model at the top).

Reads timings files (the timings format, docs/static_model.md: each line a program timed on a GPU, with the static
model's facts), estimates every correct program of ``--task`` with the active calibration for the GPU's device
(and the uncalibrated formula), and prints the ``--top`` favourites by estimate and the ``--top`` fastest on the
GPU, each with its GPU time, both estimates, launch shape (blocks, threads, registers, warps the occupancy allows
per SM), its per-thread FMAs and shared loads, and its largest unit (uncalibrated / calibrated): what separates
the programs the model prefers from the ones the GPU runs fastest. No build, no GPU: seconds.

  python research/favourite_profile.py --task conv512
  python research/favourite_profile.py --task matmul --top 8 --data benchmarks/data/h200-2026-11-27/timings.jsonl.gz
"""
from __future__ import annotations

import argparse
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = [ROOT / "benchmarks/data/h200-2026-11-30" / f for f in ("favourites.jsonl.gz", "picks.jsonl.gz")]


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--task", default="conv512")
  ap.add_argument("--data", nargs="*", default=[str(p) for p in DATA], help="timings files (.jsonl or .jsonl.gz)")
  ap.add_argument("--top", type=int, default=5)
  a = ap.parse_args(argv)
  from minicomp.search.static.calibration import active
  from minicomp.search.static.model import LaunchFacts, launch_time
  from minicomp.search.static.timings import read
  from minicomp.target import Target
  rows = [r for path in a.data for r in read(path) if r.task == a.task and r.correct and r.facts]
  if not rows: raise SystemExit(f"no correct program of task {a.task!r} with facts in {', '.join(a.data)}")
  dev = Target(rows[0].facts["device"]).device
  cal = active(dev)
  table = []
  def largest(parts: dict) -> str:
    return max((k for k in parts if k != "launch_s"), key=parts.get).removesuffix("_s")
  for r in rows:
    launches = [LaunchFacts(**f) for f in r.facts["launches"]]
    unc, calib = [launch_time(f, dev, None) for f in launches], [launch_time(f, dev, cal) for f in launches]
    first = launches[0]
    table.append((r.median_s * 1e6, sum(e.latency_s for e in calib) * 1e6, sum(e.latency_s for e in unc) * 1e6,
                  int(sum(f.blocks for f in launches)), int(first.threads_per_block), int(first.registers),
                  int(first.active_warps_per_sm), first.per_thread.get("fp32_fma", 0.0),
                  first.per_thread.get("ld_shared", 0.0), f"{largest(unc[0].parts)} / {largest(calib[0].parts)}"))
  print(f"command:  python research/favourite_profile.py --task {a.task} --top {a.top}")
  dates = ", ".join(sorted({r.date for r in rows}))
  print(f"task {a.task}: {len(table)} correct programs on {rows[0].gpu} ({dates}); estimates for {dev.name}, "
        f"calibrated: {'yes' if cal is not None else 'none for this arch'}")
  head = ("  GPU us  est us*  uncal us*  blocks  threads  regs  warps/SM  FMA/thread  lds/thread  "
          "largest unit (unc / cal)")
  for title, key in (("the model's favourites (by calibrated estimate)", lambda t: t[1]),
                     ("the GPU's fastest", lambda t: t[0])):
    print(f"\n{title}:\n{head}")
    for t in sorted(table, key=key)[:a.top]:
      print(f"  {t[0]:6.1f}  {t[1]:7.1f}  {t[2]:9.1f}  {t[3]:6d}  {t[4]:7d}  {t[5]:4d}  {t[6]:8d}  {t[7]:10.0f}  "
            f"{t[8]:10.0f}  {t[9]}")
  print("\n* static-model ESTIMATES; GPU us: the timings' median kernel time; warps/SM: what occupancy allows, "
        "not what the grid gives (128 blocks fill at most one per SM of an H200's 132)")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
