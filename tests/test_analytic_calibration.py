"""research/analytic_calibration.py on a small memo: it builds the programs, reads ptxas's registers,
fits the analytic register formula (never worse than the module's constants) and prints its tables."""
import re
import sys
from pathlib import Path


sys.path[:0] = [str(Path(__file__).resolve().parent.parent / d) for d in ("research", "benchmarks")]
from memo_fixture import write_depthwise_memo  # noqa: E402


def test_calibration_fits_registers_to_ptxas_and_prints_the_tables(tmp_path, capsys):
  import analytic_calibration as AC
  memo = write_depthwise_memo(tmp_path / "memo.jsonl", draws=10, keep=7, seed=1, cost=lambda i: 1e-6)
  assert AC.main(["--memo", str(memo), "--tasks", "depthwise", "--held-out", "", "--per-task", "7",
                  "--baseline", "24,1,1,96"]) == 0
  out = capsys.readouterr().out
  (loss,) = re.findall(r"pinball loss at 0.8: baseline ([\d.]+), module ([\d.]+), fitted ([\d.]+);", out)
  baseline, module, fitted = map(float, loss)
  assert fitted <= module + 1e-3 and fitted <= baseline + 1e-3      # printed to 3 decimals
  (under,) = re.findall(r"underestimates: baseline (\d+)%, module (\d+)%, fitted (\d+)%;", out)
  assert all(0 <= int(u) <= 100 for u in under)
  (row,) = re.findall(r"^\| depthwise \| fit \| (\d+) \| (.*)$", out, re.M)
  assert 5 <= int(row[0]) <= 7                          # programs the analytic model takes, all built
  cells = [c.strip() for c in row[1].split("|") if c.strip()]
  assert len(cells) == 5 and all(re.fullmatch(r"[\d.]+ / [\d.]+ / [\d.]+", c) for c in cells)
  assert re.search(r"^\| REG_OVERHEAD \| 24 \| [\d.]+ \| [\d.]+ \|$", out, re.M)


def test_calibration_refuses_a_missing_memo_and_bad_constants(tmp_path, capsys):
  import analytic_calibration as AC
  import pytest
  with pytest.raises(SystemExit):
    AC.main(["--memo", str(tmp_path / "none.jsonl")])
  assert "run benchmarks/strategies.py first" in capsys.readouterr().err
  memo = tmp_path / "memo.jsonl"
  memo.write_text("")
  with pytest.raises(SystemExit):
    AC.main(["--memo", str(memo), "--baseline", "1,2"])
  assert "--baseline takes four numbers" in capsys.readouterr().err
  with pytest.raises(SystemExit):
    AC.main(["--memo", str(memo), "--quantile", "1.5"])
  assert "--quantile must be between 0 and 1" in capsys.readouterr().err
