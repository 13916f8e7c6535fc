"""How fast the static model estimates, and where its time goes.

A search asks the static model for thousands of estimates per round, so its speed bounds
how many candidates a tuning run can afford without a GPU. For a set of kernels (the random
valid matmul / conv2d schedules of ``tests/schedule_gen.py`` and the six 4096^3 SGEMM kernels
of ``static_model_fidelity.py``) this builds each kernel once (not timed) and then times, on
one core, each stage of ``minicomp.estimate``:

  ptx        PTX analysis: basic blocks, loops and trip counts, dynamic instruction counts
  footprint  islpy data movement (access relations, distinct-element counts, coalescing,
             bank conflicts): ``footprint.analyze_kernel``
  rest       the remainder of a full estimate: occupancy, the latency formula, glue
  total      one full ``estimate(kernel, target)`` call (includes the others)

and prints per-kernel-set medians / 90th percentiles / maxima, estimates per second per
core, and how the counts were taken (isl, numpy enumeration, or isl without a budget).
The build (replay + lower + emit + NVRTC) is timed separately: a StaticMeasurer pays it too.

  python benchmarks/estimate_speed.py                 # 24 random schedules + 6 SGEMM kernels
  python benchmarks/estimate_speed.py --random 60     # more random schedules
"""
from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, HERE)

import minicomp as mc
from minicomp.search.static.estimate import estimate
from minicomp.search.static.footprint import analyze_kernel
from minicomp.search.static.ptx import analyze_ptx, ir_loop_extents
from minicomp.target import Target
from provenance import header_lines

DEVICE = "rtx3090"


def _kernels(n_random: int):
  import schedule_gen as G
  import static_model_fidelity as F
  sets = collections.OrderedDict()
  rand = []
  for seed in range(n_random):
    kind = ("matmul", "conv2d")[seed % 2]
    smp = G.sample(kind, 1000 + seed)
    t0 = time.perf_counter()
    k = mc.build(smp.schedule, target=smp.target)
    rand.append((f"{kind}#{1000 + seed}", k, time.perf_counter() - t0))
  sets["random schedules (tests/schedule_gen.py)"] = rand
  sgemm = []
  for name, _ in F.PUBLISHED:
    t0 = time.perf_counter()
    k = mc.build(F.SCHEDULES[name](), target="sm_86")
    sgemm.append((f"sgemm 4096 {name}", k, time.perf_counter() - t0))
  sets["SGEMM 4096^3 (static_model_fidelity.py)"] = sgemm
  return sets


def _time_stages(kernel, dev):
  """Seconds of the PTX and footprint analyses on their own, and of one full estimate."""
  t0 = time.perf_counter()
  for l, kir in zip(kernel.plan.launches, kernel.program.kernels):
    analyze_ptx(kernel.binary.ptx, l.kernel, hints=ir_loop_extents(kir.body))
  t1 = time.perf_counter()
  stats = collections.Counter()
  for kir in kernel.program.kernels:
    dm = analyze_kernel(kir, l1_bytes=dev.l1_bytes_per_sm, l2_bytes=dev.l2_bytes)
    stats.update(dict(dm.counts))
  t2 = time.perf_counter()
  estimate(kernel, DEVICE)
  t3 = time.perf_counter()
  return {"ptx": t1 - t0, "footprint": t2 - t1, "rest": max(0.0, (t3 - t2) - (t2 - t0)), "total": t3 - t2}, stats


def _pct(xs, q):
  xs = sorted(xs)
  return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--random", type=int, default=24, help="random schedules to time (half matmul, half conv2d)")
  args = ap.parse_args(argv)
  dev = Target(DEVICE).device
  sets = _kernels(args.random)
  for line in header_lines(__file__, argv): print(line)
  print(f"device:   {DEVICE} (static model; every latency it produces is an ESTIMATE); one process, one core\n")
  head = ("kernels", "n", "build med s", "ptx med ms", "footprint med ms", "footprint p90 ms", "rest med ms",
          "estimate med ms", "estimate p90 ms", "estimate max ms", "estimates/s/core")
  rows, counts_all, slowest = [], collections.Counter(), []
  for label, ks in sets.items():
    per = []
    for name, k, build_s in ks:
      t, stats = _time_stages(k, dev)
      counts_all.update(stats)
      per.append((t, build_s))
      slowest.append((t["total"], name))
    col = lambda key, per=per: [t[key] for t, _ in per]
    tot = col("total")
    rows.append((label, str(len(per)), f"{statistics.median(b for _, b in per):.2f}",
                 f"{statistics.median(col('ptx')) * 1e3:.1f}", f"{statistics.median(col('footprint')) * 1e3:.1f}",
                 f"{_pct(col('footprint'), 0.9) * 1e3:.1f}", f"{statistics.median(col('rest')) * 1e3:.2f}",
                 f"{statistics.median(tot) * 1e3:.1f}", f"{_pct(tot, 0.9) * 1e3:.1f}", f"{max(tot) * 1e3:.1f}",
                 f"{len(tot) / sum(tot):.1f}"))
  w = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
  print("  ".join(h.ljust(w[i]) for i, h in enumerate(head)))
  print("  ".join("-" * x for x in w))
  for r in rows: print("  ".join(c.ljust(w[i]) if i == 0 else c.rjust(w[i]) for i, c in enumerate(r)))
  print(f"\ndistinct-element counts taken by: {dict(counts_all)}")
  print("slowest estimates: " + ", ".join(f"{n} {t * 1e3:.0f} ms" for t, n in sorted(slowest, reverse=True)[:3]))
  return 0


if __name__ == "__main__":
  sys.exit(main())
