"""research/analytic_fidelity.py on a small memo: its tables, and with --show-best the best programs
(by the memo's full cost) kept in the sample with their rank under the analytic model."""
import re
import sys
from pathlib import Path


sys.path[:0] = [str(Path(__file__).resolve().parent.parent / d) for d in ("research", "benchmarks")]
from memo_fixture import write_depthwise_memo  # noqa: E402


def test_show_best_keeps_the_best_programs_and_ranks_them(tmp_path, capsys):
  import analytic_fidelity as AF
  memo = write_depthwise_memo(tmp_path / "memo.jsonl", draws=40, keep=30, seed=0)
  assert AF.main(["--memo", str(memo), "--tasks", "depthwise", "--limit", "10", "--show-best", "3"]) == 0
  out = capsys.readouterr().out
  (n,) = [int(m) for m in re.findall(r"^\| depthwise \| (\d+) \| [-\d.]+ \|", out, re.M)]
  assert 2 <= n <= 10
  rows = re.findall(r"^\| depthwise \| ([\d.]+) \| ([\d.]+|inf) \| (\d+) \| (\d+) \|", out, re.M)
  assert [float(r[0]) for r in rows] == [1.0, 2.0, 3.0]        # the three best of 30, though the sample is 10
  assert all(1 <= int(r[2]) <= n and int(r[3]) == n for r in rows)
  assert len({int(r[2]) for r in rows}) == 3                    # distinct ranks
  assert "ESTIMATE" in out
