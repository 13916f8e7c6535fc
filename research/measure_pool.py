"""What the shared measuring pool saves: one tuning call after another in one process, each starting its
workers cold (the old behaviour: a pool per measurer) or reusing the warm shared pool.

Each call is ``compile(model, trials=N, strategy="random")`` on a small zoo model with the static
measurer (no GPU; the costs are ESTIMATES and are not what this measures). A first call fills the
NVRTC disk cache (a temporary MINICOMP_CACHE_DIR), so both modes build the same programs from it and
the difference is the pool: ``cold`` stops the shared pool before every call
(``minicomp.search.workers.shutdown_pools``), ``warm`` keeps it. The modes alternate call by call, so
load on the machine hits both alike; the table gives the median and min-max wall seconds per call.

  python research/measure_pool.py [--calls 6] [--trials 8]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent / "benchmarks"   # strategies.py, provenance.py and their results
sys.path[:0] = [str(HERE), str(BENCH)]

from provenance import header_lines  # noqa: E402


def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--calls", type=int, default=6, help="calls per mode")
  ap.add_argument("--trials", type=int, default=8, help="measurements per call")
  args = ap.parse_args(argv)
  if args.calls < 1 or args.trials < 1: ap.error("--calls and --trials must be at least 1")
  os.environ["MINICOMP_CACHE_DIR"] = tempfile.mkdtemp(prefix="mc-pool-")
  import minicomp as mc
  from minicomp import zoo
  from minicomp.search.workers import shutdown_pools
  model, _ = zoo.residual_block(c=8, hw=10)

  def call() -> float:
    t0 = time.perf_counter()
    mc.compile(model, target="h100", trials=args.trials, strategy="random", measures_per_round=args.trials, progress=False)
    return time.perf_counter() - t0

  call()                                    # fills the NVRTC disk cache for both modes
  times: dict[str, list[float]] = {"cold": [], "warm": []}
  for _ in range(args.calls):
    shutdown_pools()
    times["cold"].append(call())
    times["warm"].append(call())            # the pool the cold call just started
  print("\n".join(header_lines(__file__, argv)))
  print(f"\ncompile(residual_block c=8 hw=10, trials={args.trials}, strategy='random'), static measurer, "
        f"{args.calls} calls per mode, wall s per call\n")
  print("| pool | median s | min-max s |")
  print("|---|---:|---:|")
  for k, v in times.items():
    print(f"| {k} | {statistics.median(v):.2f} | {min(v):.2f}-{max(v):.2f} |")
  print(f"\nwarm / cold (medians): {statistics.median(times['warm']) / statistics.median(times['cold']):.2f}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
