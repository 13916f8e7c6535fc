"""research/estimate_speed.py on a strategies.py memo: it re-estimates the memo's programs and says
how many estimates equal the recorded ones (a recorded cost that is off is counted as different)."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

import minicomp as mc
from minicomp.search.annotate import sample_population
from minicomp.search.sketch import generate_sketches
from minicomp.search.static.estimate import estimate

sys.path[:0] = [str(Path(__file__).resolve().parent.parent / d) for d in ("research", "benchmarks")]
import estimate_speed as ES  # noqa: E402
import strategies as B  # noqa: E402


def test_memo_mode_checks_estimates_against_the_recorded_ones(tmp_path, capsys):
  dag = B.task_dag("matmul64", smoke=True)
  cands = sample_population(generate_sketches(dag, ES.TARGET), 2, np.random.default_rng(0), ES.TARGET, time_limit_s=None)
  memo = tmp_path / "measured_h100.jsonl"
  rows = []
  for i, c in enumerate(cands):
    cost = estimate(mc.build(c.schedule, target=ES.TARGET), ES.DEVICE).latency_s
    rows.append({"task": "matmul64", "steps": c.schedule.to_json(), "cost": cost * (1 if i == 0 else 2), "error": "none"})
  memo.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"task": "matmul64", "ste')   # a torn last line
  assert ES.main(["--memo", str(memo), "--per-workload", "4"]) == 0
  out = capsys.readouterr().out
  line = next(ln for ln in out.splitlines() if ln.startswith("matmul64 (searched)"))
  assert line.split()[-1] == "1/2" and line.split()[2] == "2"
  assert "= memo" in out and "ESTIMATE" in out
  assert "MINICOMP_NVRTC_MEMORY_CACHE" not in os.environ    # the benchmark's caches-off setting does not leak
