"""Do guarded fetches make each global load wait for the one before, and does staging them through registers stop it?

A cooperative fetch is ``for i: if (guard) tile[index] = value`` of global loads. Where ptxas does not turn the
guard (or a convolution's padding select) into predicated instructions, the machine code is, per iteration, a
branch, the load, and the store that needs the loaded register: in-order issue waits for each load before the
next one starts, so every iteration pays a global load's whole latency. This rebuilds timed programs for sm_90,
disassembles them (``nvdisasm``, a research tool, not a minicomp dependency: ``pip download --no-deps
nvidia-cuda-nvdisasm`` and unzip the wheel, then pass ``--nvdisasm PATH``) and counts, per program, the stores to
shared memory that wait on a lone load (a load, then the store of its register, no other load between:
"serialized"), as compile emits the
fetch now (``CUDARenderer._staged``: loads into a register array first, then the stores) and as it did before
(``MINICOMP_STAGED_FETCH=0``). Per task: how many programs had serialized loads, their GPU time over the calibrated
estimate against the others', and how many serialized loads staging leaves. ``--write-selection FILE`` also
writes the sampled programs as a GPU selection (``benchmarks/strategies_gpu.py measure --selection``), which
``benchmarks/gpu_check.sh`` times with staging off and on.

  python research/fetch_staging.py --nvdisasm /tmp/nvd/nvidia/cu13/bin/nvdisasm \\
      --data benchmarks/data/h200-2026-11-30/favourites.jsonl.gz --per-task 24
"""
from __future__ import annotations

import argparse
import os
import random
import re
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "benchmarks")]

import numpy as np  # noqa: E402

_LINE = re.compile(r"\s*/\*[0-9a-f]{4}\*/\s+(.*?)\s*;")
_GUARD = re.compile(r"^@!?U?P\w+\s+")


def serialized_loads(cubin: bytes, nvdisasm: str) -> tuple[int, int]:
  """(global loads, stores to shared memory that wait on a lone load) in ``cubin``'s SASS: a load, then the store of
  its register with no other load issued between them (a batch of loads, then their stores, counts none)."""
  with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
    f.write(cubin)
    f.flush()
    sass = subprocess.run([nvdisasm, "-c", f.name], capture_output=True, text=True, check=True).stdout
  ops = [_GUARD.sub("", m.group(1)) for m in map(_LINE.match, sass.splitlines()) if m]
  loads = serial = 0
  since: list[str] = []           # the registers loaded since the last store to shared memory
  for op in ops:
    name = op.split()[0] if op else ""
    if name.startswith("LDG"):
      loads += 1
      since.append(op.split()[1].rstrip(","))
    elif name.startswith("STS"):
      serial += since == [op.rsplit(",", 1)[-1].strip()]
      since = []
  return loads, serial


def build(task: str, steps: str, staged: bool):
  import strategies_gpu as G

  from minicomp.search.measure import MeasureInput, build_candidate
  os.environ["MINICOMP_STAGED_FETCH"] = "1" if staged else "0"
  return build_candidate(MeasureInput(G.dag_of(task), G.replayable(steps), "sm_90", key=task))


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--nvdisasm", required=True, help="path of an nvdisasm that reads sm_90 cubins")
  ap.add_argument("--data", action="append", required=True, help="timings files (benchmarks/data/...)")
  ap.add_argument("--per-task", type=int, default=24, help="programs sampled per task (seed 0)")
  ap.add_argument("--write-selection", help="write the sampled programs as a GPU selection (jsonl.gz) here")
  a = ap.parse_args(argv)
  from minicomp.search.static import calibration as C
  from minicomp.search.static import fit as F
  from minicomp.search.static import timings as T
  from minicomp.search.static.model import LaunchFacts, combine, unit_times
  rows = [r for p in a.data for r in T.read(p) if r.correct and r.facts]
  by: dict[str, list] = defaultdict(list)
  for r in rows: by[r.task].append(r)
  rng = random.Random(0)
  print(f"command:  python research/fetch_staging.py --nvdisasm NVDISASM {' '.join('--data ' + d for d in a.data)} "
        f"--per-task {a.per_task}")
  print("| task | programs | with serialized loads | GPU / estimate: those, the others (medians) | serialized loads a "
        "program: before, staged (mean) |")
  print("|---|---:|---:|---|---|")
  selection = []
  for task, rs in sorted(by.items()):
    sample = rng.sample(rs, min(a.per_task, len(rs)))
    cal = C.active(F.device_of(sample[0]))
    ratio, before, after = [], [], []
    for r in sample:
      est = sum(combine(unit_times(LaunchFacts(**f), F.device_of(r))[0], cal)[3] for f in r.facts["launches"])
      ratio.append(r.median_s / est)
      before.append(serialized_loads(build(task, r.steps, False).binary.cubin, a.nvdisasm)[1])
      after.append(serialized_loads(build(task, r.steps, True).binary.cubin, a.nvdisasm)[1])
      selection.append({"task": task, "steps": r.steps, "estimate": est,
                        "roles": [[f"sampled, {before[-1]} serialized loads, {r.median_s * 1e6:.1f} us on {r.gpu}", 0, 0]]})
    ratio, before = np.array(ratio), np.array(before)
    med = lambda x: f"{np.median(x):.2f}" if len(x) else "-"   # noqa: E731
    print(f"| {task} | {len(sample)} | {int((before > 0).sum())} | {med(ratio[before > 0])}, {med(ratio[before == 0])} "
          f"| {before.mean():.1f}, {np.mean(after):.1f} |", flush=True)
  if a.write_selection:
    import gzip
    import json
    with gzip.open(a.write_selection, "wt") as f:
      for p in selection: f.write(json.dumps(p) + "\n")
  return 0


if __name__ == "__main__":
  sys.exit(main())
