"""What one call of the analytic model costs, by how many points it evaluates (issue 45: Gensor's walks).

Gensor's walks run in lockstep and cost every walk's next states in one call of the sketch's analytic model
(``SketchWalker.cost``), so a construction's time is its calls times a call's cost. This times one call at 1 to
2048 points, the points drawn from the states a 16-walk construction of each workload's first sketch visited, and
prints milliseconds per call and per point: whether fewer, larger calls (costing the states two steps ahead, say)
could make the walks cheaper.

  python research/analytic_call_cost.py
  python research/analytic_call_cost.py --target h100 --repeat 10
"""
from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(os.path.dirname(HERE), "benchmarks")]   # provenance.py

import numpy as np

import minicomp as mc
from minicomp import workloads as W
from minicomp.compiler import constructed_sketches
from minicomp.ir.dag import ComputeDAG
from minicomp.search.strategies.gensor import SketchWalker

WORKLOADS = {"conv3x3_56": lambda: W.conv2d(1, 64, 56, 56, 64, 3, 1, 1),
             "conv3x3_14": lambda: W.conv2d(1, 256, 14, 14, 256, 3, 1, 1),
             "matmul_512": lambda: W.matmul(512, 512, 512)}
SIZES = (1, 8, 32, 128, 512, 2048)


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--target", default="sm_86")
  ap.add_argument("--repeat", type=int, default=5)
  a = ap.parse_args(argv)
  from provenance import header_lines
  print(f"command:  python research/analytic_call_cost.py --target {a.target} --repeat {a.repeat}")
  print("\n".join(header_lines(__file__, argv)[1:]))
  tgt = mc.Target(a.target)
  print("workload     states  " + "  ".join(f"P={p:<5d}" for p in SIZES) + "  (ms per call; per point at the largest)")
  for name, make in WORKLOADS.items():
    dag = ComputeDAG(make().outputs)
    walker = SketchWalker(constructed_sketches(dag, tgt)[0], tgt)
    walker.walk(np.random.default_rng(0))
    states = [dict(zip(walker.model.names, k)) for k in walker.costs]
    row = []
    for p in SIZES:
      pts = [states[i % len(states)] for i in range(p)]
      walker.model(pts)
      t0 = time.perf_counter()
      for _ in range(a.repeat): walker.model(pts)
      row.append((time.perf_counter() - t0) / a.repeat * 1e3)
    print(f"{name:12s} {len(states):6d}  " + "  ".join(f"{ms:7.2f}" for ms in row)
          + f"  ({(row[-1] - row[0]) / (SIZES[-1] - SIZES[0]):.3f} ms/point)")
  return 0


if __name__ == "__main__":
  sys.exit(main())
