"""Can the PTX tell which guarded fetch loads the machine code serializes, and does charging them rank better?

``fetch_staging.py`` found, in the SASS, stores to shared memory that wait on a lone global load: ptxas left the
guard a branch, so in-order issue waits out each load. In the PTX such a fetch is a conditional block that ends
with the load and falls through into a join block holding the store (``@p bra L; ...; ld.global %f; L: st.shared
[..], %f``). Where that block is short (the load alone), ptxas predicates it and hoists the loads; where it is long
(an address computed inside the guard), the branch stays. ``ptx.chain_cycles`` schedules each basic block alone,
so it charges neither. This script

1. counts, per program, the PTX's stores that read a load of the block before across a fall-through join whose
   block holds more than ``T`` instructions, for several ``T``, beside the SASS count (``--nvdisasm``): which ``T``
   agrees with ptxas;
2. recomputes each timed program's latency chain with those joins followed (the store waits for the load: the
   chain carries the ready times of a long block into the join that follows it), and ranks the programs of each
   task by the shipped calibration's estimate with the old and the new chain: favourite / fastest and Spearman.

  python research/fetch_chain.py --data benchmarks/data/h200-2026-11-30/favourites.jsonl.gz \\
      --data benchmarks/data/h200-2026-11-30/picks.jsonl.gz [--nvdisasm PATH] [--per-task N]
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import os
import random
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "benchmarks")]

import numpy as np  # noqa: E402

THRESHOLDS = (1, 2, 4, 8, 16)


def joins(instrs, blocks) -> list[int]:
  """The length of the block that falls into the join, for every store to shared memory in a join block that reads a
  global load of that block (``ptx._falls_into_join``, whatever the block's length)."""
  from minicomp.search.static.ptx import _REG_RE, _falls_into_join
  from minicomp.search.static.ptx_parse import classify
  out = []
  for a, b in zip(blocks, blocks[1:]):
    if not _falls_into_join(instrs, a, b): continue
    loaded = {d for ins in instrs[a.first:a.last + 1] if classify(ins.opcode)[0] == "ld_global" for d in ins.dsts}
    for ins in instrs[b.first:b.last + 1]:
      if classify(ins.opcode)[0] == "st_shared" and loaded & set(_REG_RE.findall(" ".join(ins.operands))):
        out.append(a.last - a.first + 1)
  return out


def _one(task: str, steps: str, sass: str | None):
  """(join lengths of every launch, each launch's chain as the model had it, with the joins followed, the SASS's
  serialized stores or None) of one timed program, rebuilt for sm_90 (the loops' trip counts from the loop IR, as
  ``estimate.py`` gives them)."""
  import strategies_gpu as G

  from minicomp.search.measure import MeasureInput, build_candidate
  from minicomp.search.static import ptx as P
  from minicomp.search.static.ptx_parse import entry_body, parse_body
  k = build_candidate(MeasureInput(G.dag_of(task), G.replayable(steps), "sm_90", key=task))
  lens, old, new = [], [], []
  for l, kir in zip(k.plan.launches, k.program.kernels):
    prof = P.analyze_ptx(k.binary.ptx, l.kernel, hints=P.ir_loop_extents(kir.body))
    instrs, _ = parse_body(entry_body(k.binary.ptx, l.kernel)[1])
    lens += joins(instrs, prof.blocks)
    old.append(P.chain_cycles(instrs, prof.blocks, 0))       # every block alone (the model before 2026-12-01)
    new.append(P.chain_cycles(instrs, prof.blocks, P.PREDICATED_BLOCK))
  serial = None
  if sass:
    from fetch_staging import serialized_loads
    serial = serialized_loads(k.binary.cubin, sass)[1]
  return lens, old, new, serial


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--data", action="append", required=True)
  ap.add_argument("--nvdisasm")
  ap.add_argument("--per-task", type=int, default=0, help="programs sampled per task (0: all)")
  ap.add_argument("--jobs", type=int, default=os.cpu_count())
  ap.add_argument("--write", type=Path, help="also write copies of the --data files with each chain, before and "
                  "after (DIR/before/, DIR/after/: the same file names), for minicomp calibrate --data")
  a = ap.parse_args(argv)
  from minicomp.search.static import calibration as C
  from minicomp.search.static import fit as F
  from minicomp.search.static import timings as T
  from minicomp.search.static.model import LaunchFacts, combine, unit_times
  rows = [r for p in a.data for r in T.read(p) if r.correct and r.facts]
  by: dict[str, list] = defaultdict(list)
  for r in rows: by[r.task].append(r)
  rng = random.Random(0)
  if a.per_task:
    by = {t: rng.sample(rs, min(a.per_task, len(rs))) for t, rs in by.items()}
  todo = [r for rs in by.values() for r in rs]
  with cf.ProcessPoolExecutor(a.jobs) as ex:
    res = list(ex.map(_one, [r.task for r in todo], [r.steps for r in todo], [a.nvdisasm] * len(todo), chunksize=4))
  got = {_key(r): x for r, x in zip(todo, res)}
  if a.write:
    _write(a.data, a.write, got)
  print(f"command:  python research/fetch_chain.py {' '.join('--data ' + d for d in a.data)}"
        + (f" --per-task {a.per_task}" if a.per_task else "") + (" --nvdisasm NVDISASM" if a.nvdisasm else ""))
  if a.nvdisasm:
    print("\nPTX join stores in blocks longer than T against the SASS's serialized stores (programs that agree):")
    for t in THRESHOLDS:
      agree = sum((sum(n > t for n in got[_key(r)][0]) > 0) == (got[_key(r)][3] > 0) for r in todo)
      exact = sum(sum(n > t for n in got[_key(r)][0]) == got[_key(r)][3] for r in todo)
      print(f"  T={t:2d}: {agree} of {len(todo)} agree on whether, {exact} on how many")
  print("\n| task | programs | favourite / fastest: chain as now, joins followed | Spearman: now, followed |")
  print("|---|---:|---|---|")
  for task, rs in sorted(by.items()):
    dev = F.device_of(rs[0])
    cal = C.active(dev)
    gpu = np.array([r.median_s for r in rs])
    est = {}
    for which in (1, 2):
      e = []
      for r in rs:
        tot = 0.0
        chains = got[_key(r)][which]        # (by launch order: the stored launches' names may differ)
        assert len(chains) == len(r.facts["launches"])
        for n, f in enumerate(r.facts["launches"]):
          f = dict(f)
          f["chain_cycles"] = chains[n]
          tot += combine(unit_times(LaunchFacts(**f), dev)[0], cal)[3]
        e.append(tot)
      est[which] = np.array(e)
    fav = [gpu[np.argmin(est[w])] / gpu.min() for w in (1, 2)]
    rho = [_spearman(gpu, est[w]) for w in (1, 2)]
    print(f"| {task} | {len(rs)} | {fav[0]:.2f}, {fav[1]:.2f} | {rho[0]:.2f}, {rho[1]:.2f} |", flush=True)
  return 0


def _write(paths: list[str], out: Path, got: dict) -> None:
  """Each timings file again, its rows' chains replaced by the rebuilt program's: as the model had it (before) and with
  the joins followed (after); a row whose rebuild has another number of launches is left out of both."""
  import gzip

  from minicomp.search.static import timings as T
  for which, sub in ((1, "before"), (2, "after")):
    (out / sub).mkdir(parents=True, exist_ok=True)
    for path in paths:
      rows = [r for r in T.read(path) if r.correct and r.facts]
      with gzip.open(out / sub / Path(path).name, "wt") as f:
        for r in rows:
          x = got.get(_key(r))
          if x is None or len(x[which]) != len(r.facts["launches"]): continue
          facts = dict(r.facts, launches=[dict(l, chain_cycles=c) for l, c in zip(r.facts["launches"], x[which])])
          f.write(T.Timing(r.task, r.workload, r.arch, r.steps, r.gpu, r.date, r.median_s, r.correct,
                           facts).to_json() + "\n")


def _key(r) -> tuple:
  return (r.task, r.steps, r.median_s, r.date)


def _spearman(x, y) -> float:
  rx, ry = np.argsort(np.argsort(x)), np.argsort(np.argsort(y))
  return float(np.corrcoef(rx, ry)[0, 1])


if __name__ == "__main__":
  sys.exit(main())
