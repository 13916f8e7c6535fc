"""Would a latency chain scheduled out of order rank the H200's programs better? (issue 48)

The static model's ``latency`` unit is one warp's chain: each basic block of the PTX list-scheduled *in order*
(``ptx.chain_cycles``: an instruction issues after the one before it and once its operands are ready). ptxas
reorders within a block, so on programs with independent loads the in-order chain is long: on the H200's matmul
favourites it came to 1.9x the whole kernel's measured time. This computes the out-of-order chain (an instruction
takes the earliest free issue cycle at or after its operands are ready; a barrier fences; a load waits for the
block's earlier stores to its space) and writes a copy of timings files with it as each launch's ``chain_cycles``,
so ``minicomp calibrate -o`` can fit and judge it leave one task out beside the original.

    python research/chain_ooo.py --data benchmarks/data/h200-2026-11-27/timings.jsonl.gz --out /tmp/ooo
    minicomp calibrate --arch sm_90 --data /tmp/ooo/timings.jsonl.gz -o /tmp/cal_ooo.json

Each program is rebuilt (the kernel cache makes a second run fast); the Conv3d's and ConvTranspose's stages,
renamed since 2026-11-27, are renamed first (``strategies_gpu.replayable``).
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import gzip
import os
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "benchmarks")]

from minicomp.search.static import timings as T  # noqa: E402

def ooo_chain(instrs, blocks) -> float:
  """One warp's cycles, each basic block list-scheduled out of order, its length times its executions, summed."""
  from minicomp.search.static import ptx as P
  from minicomp.search.static.ptx_parse import classify
  total = 0.0
  for bb in blocks:
    ready: dict[str, int] = {}
    taken: dict[int, int] = {}     # issue cycle -> a later cycle to try (union-find over taken slots)

    def free(t: int) -> int:
      path = []
      while t in taken:
        path.append(t)
        t = taken[t]
      for p in path: taken[p] = t
      return t
    floor = pending = 0
    last = -1
    stored: dict[str, int] = {}
    for ins in instrs[bb.first:bb.last + 1]:
      cls = classify(ins.opcode)[0]
      lat = P.LATENCY_CYCLES[cls]
      start = floor
      for op in (ins.operands[1:] if ins.dsts else ins.operands):
        for r in P._REG_RE.findall(op): start = max(start, ready.get(r, 0))
      if ins.guard: start = max(start, ready.get(ins.guard, 0))
      for d in ins.dsts: start = max(start, ready.get(d, 0) - lat + 1)          # (a register's writes stay in order)
      space = cls.split("_")[-1] if cls.startswith(("ld_", "st_")) else None
      if cls.startswith("ld_") and space in stored: start = max(start, stored[space] + 1)
      if cls == "bar_sync": start = max(start, pending, last)
      elif ins.base in ("bra", "ret", "exit"): start = max(start, last)
      t = free(start)
      taken[t] = t + 1
      for d in ins.dsts: ready[d] = t + lat
      if cls.startswith("st_"): stored[space] = max(stored.get(space, 0), t)
      pending = max(pending, t + 1 if cls in P._STORES or ins.base == "cp" else t + lat)
      last = max(last, t)
      if cls == "bar_sync": floor = t + 1
    total += (last + 1) * bb.executions
  return total


def _rewrite(r: T.Timing) -> T.Timing | None:
  import minicomp as mc
  import strategies_gpu as G
  from minicomp import workloads as W
  from minicomp.errors import MinicompError
  from minicomp.search.static import ptx as P
  from minicomp.search.static.ptx_parse import entry_body, parse_body
  steps = G.replayable(r.steps)
  try:
    call = r.workload.replace("minicomp.workloads.", "") if r.workload else None
    outs = W.from_call(call).outputs if call else G.dag_of(r.task).outputs
    k = mc.build(mc.Schedule.from_json(outs, steps), target="sm_90")
  except (MinicompError, KeyError):
    return None
  chains = []
  for launch in k.plan.launches:
    prof = P.analyze_ptx(k.binary.ptx, launch.kernel)
    chains.append(ooo_chain(parse_body(entry_body(k.binary.ptx, launch.kernel)[1])[0], prof.blocks))
  if len(chains) != len(r.facts["launches"]): return None
  facts = dict(r.facts, launches=[dict(f, chain_cycles=c) for f, c in zip(r.facts["launches"], chains)])
  return T.Timing(r.task, r.workload, r.arch, r.steps, r.gpu, r.date, r.median_s, r.correct, facts)


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--data", action="append", required=True, help="timings files (repeatable)")
  ap.add_argument("--out", type=Path, required=True, help="folder for the rewritten copies (same file names)")
  ap.add_argument("--jobs", type=int, default=os.cpu_count())
  a = ap.parse_args(argv)
  a.out.mkdir(parents=True, exist_ok=True)
  for path in a.data:
    rows = [r for r in T.read(path) if r.correct and r.facts]
    with cf.ProcessPoolExecutor(a.jobs) as pool:
      kept = [r for r in pool.map(_rewrite, rows, chunksize=16) if r is not None]
    dst = a.out / Path(path).name
    with gzip.open(dst, "wt") as f:
      for r in kept: f.write(r.to_json() + "\n")
    print(f"{dst}: {len(kept)} of {len(rows)} programs rebuilt")
  return 0


if __name__ == "__main__":
  sys.exit(main())
