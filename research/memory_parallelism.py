"""Would a memory efficiency from the bytes each warp has in flight rank the H200's programs better? (issue 48)

The static model divides a launch's L2 and DRAM times by a memory efficiency, ``min(1, resident warps / warps
needed)``, where the warps needed follow Little's law from the DRAM latency and the bandwidth per SM with every warp
taken to hold two 128-byte requests in flight (``model.MLP_LOADS_PER_WARP``). A warp that issues eight 16-byte loads
before it uses the first, or a ``cp.async`` pipeline that keeps two k-steps of tiles in flight, holds far more: the
model then calls a few-warp kernel memory-bound that is not (compile's 256 x 128 tensor-core tiles, BERT's
128-row projections). This script

1. rebuilds each timed program (sm_90) and reads from its PTX the global bytes a thread has in flight per *round*:
   each basic block scanned in order, a round ending where an instruction reads a pending global load's register
   (or the block ends with one pending); a ``cp.async.wait_group N`` ends 1 / (N + 1) round of the copies before it
   (N younger groups stay in flight); bytes per round = the bytes loaded / the rounds, each block weighted by how
   often it runs;
2. recomputes every launch's memory efficiency as ``min(1, resident warps x 32 x bytes per round / (DRAM latency x
   bytes per cycle per SM))`` and scores each task's ranking (favourite / fastest, top-10, Spearman) under the
   shipped calibration, before and after, and leave one task out with the calibration refitted on each form.

  python research/memory_parallelism.py --data benchmarks/data/h200-2026-11-27/timings.jsonl.gz [--per-task N]
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import random
import re
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "benchmarks")]

import numpy as np  # noqa: E402

_REG = re.compile(r"%[A-Za-z_]\w*")
FORMS = ("model", "inorder", "hoisted")


def bytes_per_round(instrs, blocks, hoist: bool = False) -> float | None:
  """Global bytes one thread has in flight per round (the module docstring), or None without global loads. With
  ``hoist`` a round ends only at a barrier or the block's end (ptxas taken to issue a block's loads ahead of their
  uses, as it does where registers allow), not at the first use of a pending load."""
  from minicomp.search.static.ptx_parse import classify
  loaded = rounds = 0.0
  for bb in blocks:
    pending: set[str] = set()
    got, r = 0.0, 0.0
    for ins in instrs[bb.first:bb.last + 1]:
      reads = {x for op in (ins.operands[1:] if ins.dsts else ins.operands) for x in _REG.findall(op)}
      if ins.guard: reads.add(ins.guard)
      if pending and (ins.base == "bar" if hoist else pending & reads):
        r += 1; pending.clear()
      if ins.base == "cp" and "async" in ins.mods:
        if "wait_group" in ins.mods or "wait_all" in ins.mods:
          n = int(ins.operands[0]) if "wait_group" in ins.mods and ins.operands and ins.operands[0].isdigit() else 0
          r += 1 / (n + 1)
        elif "ca" in ins.mods or "cg" in ins.mods:
          nb = int(ins.operands[2]) if len(ins.operands) > 2 and ins.operands[2].isdigit() else 16
          got += nb
        continue
      cls, nb = classify(ins.opcode)
      if cls == "ld_global":
        got += nb; pending |= set(ins.dsts)
    if pending: r += 1
    loaded += got * bb.executions; rounds += r * bb.executions
  return loaded / rounds if rounds else None


def _one(task: str, steps: str) -> list:
  """Each launch's bytes per round of one timed program, rebuilt for sm_90."""
  import strategies_gpu as G

  from minicomp.search.measure import MeasureInput, build_candidate
  from minicomp.search.static import ptx as P
  from minicomp.search.static.ptx_parse import entry_body, parse_body
  k = build_candidate(MeasureInput(G.dag_of(task), G.replayable(steps), "sm_90", key=task))
  out = []
  for l, kir in zip(k.plan.launches, k.program.kernels):
    prof = P.analyze_ptx(k.binary.ptx, l.kernel, hints=P.ir_loop_extents(kir.body))
    instrs, _ = parse_body(entry_body(k.binary.ptx, l.kernel)[1])
    out.append([bytes_per_round(instrs, prof.blocks, h) for h in (False, True)])
  return out


def efficiency(f, dev, per_round) -> float:
  """The memory efficiency of launch facts ``f`` with ``per_round`` bytes a thread in flight (None: the model's)."""
  from minicomp.search.static.model import memory_efficiency
  warps = np.ceil(f.threads_per_block / dev.warp_size)
  return float(memory_efficiency(min(f.blocks_per_sm, np.ceil(f.blocks / dev.sm_count)) * warps, dev, per_round))


def tasks_with(rows, mlp: dict, form: str):
  """fit.tasks_of's TaskData with each launch's L2 and DRAM times under ``form``: "model" (as the model has them),
  "inorder" or "hoisted" (the memory efficiency from the bytes per round in PTX order or hoisted)."""
  from minicomp.search.static import calibration as C
  from minicomp.search.static import fit as F
  from minicomp.search.static.model import LaunchFacts, unit_times
  acc: dict[str, list] = defaultdict(lambda: [[], [], []])
  for r in rows:
    got = mlp.get(_key(r))
    if got is None or len(got) != len(r.facts["launches"]): continue
    dev = F.device_of(r)
    a = acc[r.task]
    prog = len(a[2])
    for f, b in zip(r.facts["launches"], got):
      lf = LaunchFacts(**f)
      ut, eff, _ = unit_times(lf, dev)
      if form != "model":
        new = efficiency(lf, dev, b[form == "hoisted"])
        for u in ("l2", "dram"): ut[u] = ut[u] * eff / new
      a[0].append([ut.get(u, 0.0) for u in C.UNITS]); a[1].append(prog)
    a[2].append(r.median_s)
  return {k: F.TaskData(k, np.array(v[0], float).reshape(-1, len(C.UNITS)), np.array(v[1]), np.array(v[2]), set())
          for k, v in sorted(acc.items())}


def _key(r) -> str:
  return json.dumps([r.task, r.steps, r.median_s, r.date])


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--data", action="append", required=True)
  ap.add_argument("--per-task", type=int, default=0, help="programs sampled per task (0: all)")
  ap.add_argument("--jobs", type=int, default=os.cpu_count())
  ap.add_argument("--memo", type=Path, default=HERE / "results" / "memory_parallelism" / "bytes_per_round.json",
                  help="each program's bytes per round, kept between runs")
  a = ap.parse_args(argv)
  from minicomp.search.static import calibration as C
  from minicomp.search.static import fit as F
  from minicomp.search.static import timings as T
  rows = [r for p in a.data for r in T.read(p) if r.correct and r.facts]
  by: dict[str, list] = defaultdict(list)
  for r in rows: by[r.task].append(r)
  rng = random.Random(0)
  if a.per_task: by = {t: rng.sample(rs, min(a.per_task, len(rs))) for t, rs in by.items()}
  rows = [r for rs in by.values() for r in rs]
  memo = json.loads(a.memo.read_text()) if a.memo.exists() else {}
  todo = [r for r in rows if _key(r) not in memo]
  if todo:
    with cf.ProcessPoolExecutor(a.jobs) as ex:
      for r, got in zip(todo, ex.map(_one, [r.task for r in todo], [r.steps for r in todo], chunksize=4)):
        memo[_key(r)] = got
    a.memo.parent.mkdir(parents=True, exist_ok=True)
    a.memo.write_text(json.dumps(memo))
  print(f"command:  python research/memory_parallelism.py {' '.join('--data ' + d for d in a.data)}"
        + (f" --per-task {a.per_task}" if a.per_task else ""))
  print(f"programs: {len(rows)}; bytes a thread has in flight per round, over their launches (the model's "
        f"assumption: {2 * 128 / 32:.0f}):")
  for h, name in enumerate(FORMS[1:]):
    per = [b[h] for r in rows for b in memo[_key(r)] if b[h] is not None]
    print(f"  {name}: median {np.median(per):.1f}, 10th-90th percentile {np.percentile(per, 10):.1f}-"
          f"{np.percentile(per, 90):.1f}")
  data = {form: tasks_with(rows, memo, form) for form in FORMS}
  shipped = C.active(F.device_of(rows[0]))
  print("\n| task | programs | shipped calibration: pick, top-10, rho (" + " / ".join(FORMS) + ") | "
        "leave one task out: pick, top-10, rho (" + " / ".join(FORMS) + ") |")
  print("|---|---:|---|---|")
  scores = {}
  for form, tasks in data.items():
    scores[form] = {"shipped": {k: F.rank_quality(F.predict(shipped, d), d.gpu_s) for k, d in tasks.items()},
                    "loto": F.leave_one_task_out(tasks, "sm_90")}
  for k in sorted(data["model"]):
    cells = []
    for which in ("shipped", "loto"):
      ss = [scores[f][which].get(k) for f in FORMS]
      cells.append("-" if ss[0] is None else ", ".join(" / ".join(f"{s[m]:.2f}" if m != "top10" else str(s[m])
                                                                    for s in ss) for m in ("pick", "top10", "rho")))
    print(f"| {k} | {len(data['model'][k].gpu_s)} | {cells[0]} | {cells[1]} |")
  for which in ("shipped", "loto"):
    g = [np.exp(np.mean([np.log(s["pick"]) for s in scores[f][which].values()])) for f in FORMS]
    print(f"geometric mean pick, {which}: " + " / ".join(f"{x:.3f}" for x in g))
  return 0


if __name__ == "__main__":
  sys.exit(main())
