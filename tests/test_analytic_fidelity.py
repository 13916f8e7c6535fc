"""benchmarks/analytic_fidelity.py on a small memo: its tables, and with --show-best the best programs
(by the memo's full cost) kept in the sample with their rank under the analytic model."""
import json
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))


def test_show_best_keeps_the_best_programs_and_ranks_them(tmp_path, capsys):
  import analytic_fidelity as AF
  import strategies as S
  from minicomp.search.annotate import sample
  from minicomp.search.sketch import generate_sketches
  from minicomp.target import as_target
  tgt = as_target("h100")
  sketch = generate_sketches(S.task_dag("depthwise"), tgt)[0]
  rng = np.random.default_rng(0)
  keys = list(dict.fromkeys(sample(sketch, rng, tgt).key for _ in range(40)))[:30]
  memo = tmp_path / "memo.jsonl"
  memo.write_text("".join(json.dumps({"task": "depthwise", "steps": k, "cost": (i + 1) * 1e-6}) + "\n"
                          for i, k in enumerate(keys)))
  assert AF.main(["--memo", str(memo), "--tasks", "depthwise", "--limit", "10", "--show-best", "3"]) == 0
  out = capsys.readouterr().out
  (n,) = [int(m) for m in re.findall(r"^\| depthwise \| (\d+) \| [-\d.]+ \|", out, re.M)]
  assert 2 <= n <= 10
  rows = re.findall(r"^\| depthwise \| ([\d.]+) \| ([\d.]+|inf) \| (\d+) \| (\d+) \|", out, re.M)
  assert [float(r[0]) for r in rows] == [1.0, 2.0, 3.0]        # the three best of 30, though the sample is 10
  assert all(1 <= int(r[2]) <= n and int(r[3]) == n for r in rows)
  assert len({int(r[2]) for r in rows}) == 3                    # distinct ranks
  assert "ESTIMATE" in out
