"""Does the analytic model, the guide of Gensor's walk and Tuna's search, rank the programs an H200 timed as the GPU
did, and does a calibration fitted on its own facts rank them better than the full model's calibration? (issue 48)

compile's trials=0 schedule comes from Gensor's walk, which the analytic model (``analytic.SketchModel``: launch
facts as formulas of the sketch's variables, no PTX) steers; the full static model only orders the few candidates
the walk returns. On the H200 the calibrated full model's favourite is 1.00-1.16x the fastest, yet compile's picks
ran 1.6-2.4x the fastest on conv 3x3 and conv 512: the walk never gets near the fast programs. This maps every timed
program of ``benchmarks/data/h200-2026-11-27`` onto its sketch's point (``read_point``; Conv3d's and ConvTranspose's
sketches have no analytic model), takes the analytic model's launch facts for it, and scores per task (pick: the GPU
time of the estimate's favourite over the fastest; top-10: the GPU's ten fastest among the estimate's ten; rho:
Spearman; the analytic ranks of the GPU's five fastest programs):

- ``uncalibrated``: the analytic facts under the maximum of the units' times;
- ``shipped``: under the shipped sm_90 calibration (fitted on the full model's facts), what the walk uses today;
- ``own, LOTO``: under a calibration fitted on the analytic facts of the other tasks (leave one task out).

    python research/analytic_ranking.py                  # ~3 minutes on 2 cores
    python research/analytic_ranking.py --write FILE     # also: fit on every task, write the calibration to FILE
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "benchmarks")]

from analytic_fidelity import analytic_points  # noqa: E402
from static_model_fidelity import TIMINGS  # noqa: E402

from minicomp.search.static import calibration as C  # noqa: E402
from minicomp.search.static import fit as F  # noqa: E402
from minicomp.search.static import timings as T  # noqa: E402
from minicomp.search.static.analytic import SketchModel  # noqa: E402
from minicomp.search.static.model import LaunchFacts, unit_times  # noqa: E402
from minicomp.target import as_target  # noqa: E402


FULL: dict[str, F.TaskData] = {}   # the same programs' facts from the full model (their builds' PTX)
ORACLE = ()   # (research) facts taken from the full model's analysis instead: "occupancy", "counts", "latency"


def _oracle(f, full):
  """Analytic launch facts ``f`` with the :data:`ORACLE` facts of the built program's (``full``) put in."""
  import dataclasses
  if not ORACLE or full is None: return f
  kw = {}
  if "occupancy" in ORACLE:
    kw.update(registers=full.registers, active_warps_per_sm=full.active_warps_per_sm, blocks_per_sm=full.blocks_per_sm)
  if "counts" in ORACLE: kw.update(per_thread=full.per_thread)
  if "latency" in ORACLE: kw.update(chain_cycles=full.chain_cycles)
  if "shared" in ORACLE: kw.update(shared_wavefronts_per_block=full.shared_wavefronts_per_block)
  return dataclasses.replace(f, **kw)


def analytic_tasks(target: str = "h200") -> dict[str, F.TaskData]:
  """Per task with an analytic model: every correct timed program's analytic launch facts, as fit.TaskData."""
  tgt = as_target(target)
  rows = [r for r in T.read(TIMINGS["H200"]) if r.correct]
  out = {}
  for task in sorted({r.task for r in rows}):
    rs = [r for r in rows if r.task == task]
    _, tt, points = analytic_points(task, [r.steps for r in rs], target)
    groups: dict[tuple[int, int], list] = {}
    for i, k, step, values in points: groups.setdefault((k, step), []).append((i, values))
    times, program, gpu, full_times, full_program = [], [], [], [], []
    for (k, step), g in groups.items():
      try: model = SketchModel(tt.sketches[k], tgt, unroll=step)
      except Exception:  # noqa: BLE001 -- a sketch without an analytic model
        continue
      kept = [x for x, ok in zip(g, model.valid([v for _, v in g])) if ok]
      for (i, _), facts in zip(kept, model.facts([v for _, v in kept])):
        full = [LaunchFacts(**x) for x in rs[i].facts["launches"]]
        for j, f in enumerate(facts):
          ut, _, _ = unit_times(_oracle(f, full[j] if len(full) == len(facts) else None), tgt.device)
          times.append([ut.get(u, 0.0) for u in C.UNITS]); program.append(len(gpu))
        for f in full:
          ut, _, _ = unit_times(f, tgt.device)
          full_times.append([ut.get(u, 0.0) for u in C.UNITS]); full_program.append(len(gpu))
        gpu.append(rs[i].median_s)
    if len(gpu) >= 2:
      out[task] = F.TaskData(task, np.array(times, float).reshape(-1, len(C.UNITS)), np.array(program),
                             np.array(gpu), {"NVIDIA H200, 2026-11-27"})
      FULL[task] = F.TaskData(task, np.array(full_times, float).reshape(-1, len(C.UNITS)), np.array(full_program),
                              np.array(gpu), set())
    print(f"  {task}: {len(gpu)} of {len(rs)} programs with analytic facts", file=sys.stderr, flush=True)
  return out


def fastest_ranks(est: np.ndarray, gpu: np.ndarray, k: int = 5) -> list[int]:
  rank = np.empty(len(est), int)
  rank[np.argsort(est, kind="stable")] = np.arange(1, len(est) + 1)
  return [int(rank[i]) for i in np.argsort(gpu, kind="stable")[:k]]


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--write", default="", help="fit on every task and write the calibration here")
  ap.add_argument("--oracle", default="", help="(research) comma-separated facts from the built program instead: "
                  "occupancy, counts, latency, shared")
  a = ap.parse_args(argv)
  global ORACLE
  ORACLE = tuple(x for x in a.oracle.split(",") if x)
  tasks = analytic_tasks()
  shipped = C.load(C.SHIPPED / "sm_90.json")
  print("| task | programs | model | pick | top-10 | rho | rho with the full model | ranks of the GPU's 5 fastest |\n"
        "|---|---:|---|---:|---:|---:|---:|---|")
  for name, d in tasks.items():
    if len(d.gpu_s) < F.MIN_PROGRAMS: continue
    own = F.fit({k: v for k, v in tasks.items() if k != name}, "sm_90")
    for label, cal in (("uncalibrated", None), ("shipped", shipped), ("own, LOTO", own)):
      est = F.predict(cal, d)
      q = F.rank_quality(est, d.gpu_s)
      agree = F.rank_quality(est, F.predict(cal, FULL[name]))["rho"]
      print(f"| {name} | {q['programs']} | {label} | {q['pick']:.2f} | {q['top10']} | {q['rho']:.2f} | {agree:.2f} | "
            f"{fastest_ranks(est, d.gpu_s)} |", flush=True)
  if a.write:
    cal = F.fit(tasks, "sm_90", {"fitted on": "the analytic model's facts of the H200 timings of 2026-11-27",
                                 "tasks": sorted(tasks), "programs": int(sum(len(d.gpu_s) for d in tasks.values()))})
    Path(a.write).write_text(json.dumps(cal.to_json(), indent=1) if hasattr(cal, "to_json") else repr(cal))
    print(f"written {a.write}: p {cal.p}, weights {cal.weights}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
