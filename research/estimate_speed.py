"""How fast the static model estimates, against how long building the same kernel takes.

A static measurer pays one build (replay + lower + emit + NVRTC) and one estimate per candidate,
so the estimate is cheap enough when it costs a fraction of the build. For random valid schedules
of the workloads of issue 14 (matmul 1024^3, conv 3x3 56x56x64, batch matmul 12x128x128x64),
drawn from their sketches for ``sm_90`` as a search draws them, this times on one core:

  build      mc.build with the NVRTC disk and memory caches off (what a new candidate costs)
  ptx        PTX analysis: basic blocks, loops and trip counts, dynamic instruction counts
  footprint  islpy data movement (access relations, distinct elements, coalescing, bank conflicts)
  estimate   one full ``estimate(kernel, "h100")`` call, its per-kernel analysis cache cleared first

and prints per workload and over all kernels the median / 90th percentile of each, with the
issue's two ratios: median estimate / median build (goal <= 0.15) and 90th-percentile estimate /
median build (goal <= 1.0). ``--model`` adds the time of ``mod.estimate()`` of a zoo model with
default schedules (the issue's: ResNet-18 at 224x224), its cache cleared first.

``--memo`` takes the schedules from the measurement memo of ``benchmarks/strategies.py`` instead:
the programs the searches measured (larger tiles and deeper fetch loops than random samples, the
static model's slow cases), a fixed random sample per task, and checks each estimate against the
one the memo recorded (column ``= memo``: a change to the model that should not move an estimate).

  python research/estimate_speed.py                       # 16 schedules per workload
  python research/estimate_speed.py --per-workload 32 --model resnet18
  python research/estimate_speed.py --memo benchmarks/results/strategies/measured_h100.jsonl
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(os.path.dirname(HERE), "benchmarks")]   # provenance.py

import numpy as np

import minicomp as mc
from minicomp import workloads as W
from minicomp.search.annotate import sample_population
from minicomp.search.sketch import generate_sketches
from minicomp.search.static import cache as analysis_cache
from minicomp.search.static.estimate import estimate
from minicomp.search.static.footprint import data_movement
from minicomp.search.static.ptx import analyze_ptx, ir_loop_extents
from minicomp.target import Target
from provenance import header_lines

TARGET, DEVICE = "sm_90", "h100"
WORKLOADS = {
  "matmul 1024^3": lambda: W.matmul(1024, 1024, 1024),
  "conv 3x3 56x56x64": lambda: W.conv2d(1, 64, 56, 56, 64, 3, pad=1),
  "batch matmul 12x128x128x64": lambda: W.batch_matmul(12, 128, 128, 64),
}


def _pct(xs, q):
  xs = sorted(xs)
  return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def _time_one(schedule, dev) -> dict:
  t0 = time.perf_counter()
  k = mc.build(schedule, target=TARGET)
  t1 = time.perf_counter()
  for l, kir in zip(k.plan.launches, k.program.kernels):
    analyze_ptx(k.binary.ptx, l.kernel, hints=ir_loop_extents(kir.body))
  t2 = time.perf_counter()
  for kir in k.program.kernels: data_movement(kir, l1_bytes=dev.l1_bytes_per_sm, l2_bytes=dev.l2_bytes)
  t3 = time.perf_counter()
  analysis_cache.clear()
  t4 = time.perf_counter()
  est = estimate(k, DEVICE)
  t5 = time.perf_counter()
  return {"build": t1 - t0, "ptx": t2 - t1, "footprint": t3 - t2, "estimate": t5 - t4, "latency_s": est.latency_s}


def _memo_schedules(path: str, per_task: int, seed: int) -> dict:
  """A fixed random sample of the programs a strategies.py memo holds, per task: (schedule, recorded cost)."""
  from pathlib import Path

  import strategies
  from minicomp.ir.schedule import Schedule
  by_task: dict[str, list] = {}
  for (task, steps), (cost, _) in strategies.MemoMeasurer(Path(path), None).memo.items():
    if cost is not None: by_task.setdefault(task, []).append((steps, cost))
  out = {}
  for task in sorted(by_task):
    rows = by_task[task]
    pick = np.random.default_rng(seed).permutation(len(rows))[:per_task]
    dag = strategies.task_dag(task, smoke=task not in strategies.tasks())   # (the CI smoke tasks too)
    out[f"{task} (searched)"] = [(Schedule.from_json(dag, rows[i][0]), rows[i][1]) for i in pick]
  return out


def _table(head, rows):
  w = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
  out = ["  ".join(h.ljust(w[i]) for i, h in enumerate(head)), "  ".join("-" * x for x in w)]
  out += ["  ".join(c.ljust(w[i]) if i == 0 else c.rjust(w[i]) for i, c in enumerate(r)) for r in rows]
  return out


def _row(label, per, memo: bool):
  col = lambda key: [t[key] for t in per]
  build_med = statistics.median(col("build"))
  est = col("estimate")
  same = [f"{sum(t['latency_s'] == t['recorded'] for t in per)}/{len(per)}"] if memo else []
  return (label, str(len(per)), f"{build_med:.3f}", f"{statistics.median(col('ptx')) * 1e3:.1f}",
          f"{statistics.median(col('footprint')) * 1e3:.1f}", f"{statistics.median(est) * 1e3:.1f}",
          f"{_pct(est, 0.9) * 1e3:.1f}", f"{max(est) * 1e3:.0f}",
          f"{statistics.median(est) / build_med:.3f}", f"{_pct(est, 0.9) / build_med:.3f}", *same)


def main(argv=None) -> int:
  """The run, with NVRTC's caches and the static facts' disk off (every build compiles, every estimate analyses:
  the cost of a new candidate); the environment is restored afterwards (the caches are read per call, so a caller
  is not affected)."""
  keys = ("MINICOMP_NVRTC_CACHE", "MINICOMP_NVRTC_MEMORY_CACHE", "MINICOMP_STATIC_CACHE")
  saved = {k: os.environ.get(k) for k in keys}
  os.environ.update({k: "0" for k in keys})
  try: return _main(argv)
  finally:
    for k, v in saved.items():
      if v is None: os.environ.pop(k, None)
      else: os.environ[k] = v


def _main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--per-workload", type=int, default=16, help="random schedules per workload")
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--model", default=None, help="also time mod.estimate() of this zoo model (e.g. resnet18)")
  ap.add_argument("--hw", type=int, default=224, help="input size of --model")
  ap.add_argument("--memo", default=None, help="take the schedules from this strategies.py memo (measured_*.jsonl)")
  args = ap.parse_args(argv)
  dev = Target(DEVICE).device
  for line in header_lines(__file__, argv): print(line)
  print(f"target:   {TARGET}, estimates for {DEVICE} (static model: every latency it produces is an ESTIMATE); "
        "one process; NVRTC caches off\n")
  if args.memo: sets = _memo_schedules(args.memo, args.per_workload, args.seed)
  else:
    sets = {}
    for label, make in WORKLOADS.items():
      sk = generate_sketches(mc.ComputeDAG(make().outputs), TARGET)
      cands = sample_population(sk, args.per_workload, np.random.default_rng(args.seed), TARGET, time_limit_s=None)
      sets[label] = [(c.schedule, None) for c in cands]
  rows, everything, slowest = [], [], []
  for label, scheds in sets.items():
    per = []
    for sched, recorded in scheds:
      t = _time_one(sched, dev) | {"recorded": recorded}
      per.append(t)
      slowest.append((t["estimate"], label))
    everything += per
    rows.append(_row(label, per, bool(args.memo)))
  rows.append(_row("all", everything, bool(args.memo)))
  head = ("workload", "n", "build med s", "ptx med ms", "footprint med ms", "estimate med ms", "estimate p90 ms",
          "estimate max ms", "med est / med build", "p90 est / med build") + (("= memo",) if args.memo else ())
  for line in _table(head, rows): print(line)
  print("\ngoals (issue 14): median estimate <= 0.15x median build; 90th percentile <= 1.0x")
  print("slowest estimates: " + ", ".join(f"{w} {t * 1e3:.0f} ms" for t, w in sorted(slowest, reverse=True)[:3]))
  if args.model:
    from minicomp import zoo
    model, _ = getattr(zoo, args.model)(hw=args.hw)
    t0 = time.perf_counter()
    mod = mc.compile(model, target=TARGET)
    t1 = time.perf_counter()
    analysis_cache.clear()
    e = mod.estimate(DEVICE)
    t2 = time.perf_counter()
    e2 = mod.estimate(DEVICE)
    t3 = time.perf_counter()
    n = len({c.kernel for c in mod.calls})
    print(f"\n{args.model} at {args.hw}x{args.hw}, default schedules ({n} distinct kernels): compile {t1 - t0:.1f} s, "
          f"mod.estimate() {t2 - t1:.1f} s (again, cached: {t3 - t2:.2f} s); "
          f"estimate {e.latency_s * 1e6:.0f} us (ESTIMATE){'' if e2.latency_s == e.latency_s else ' MISMATCH'}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
