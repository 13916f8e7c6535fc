"""research/isl_injective.py on small inputs: the saved questions asked both ways, and the three
steps on a small depthwise memo (the questions it poses, then its data movement each way)."""
import gzip
import json
import re
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent / d) for d in ("research", "benchmarks")]
from memo_fixture import write_depthwise_memo  # noqa: E402


def _row(out: str, task: str) -> list[str]:
  (line,) = [ln for ln in out.splitlines() if ln.startswith(f"| {task} |")]
  return [c.strip() for c in line.strip("|").split("|")]


def test_compare_on_the_saved_questions(tmp_path, capsys, monkeypatch):
  """The first saved questions: both forms agree where both answer, and the table says so."""
  import isl_injective as B
  monkeypatch.setattr(B, "START", "spawn")       # (the pytest worker runs JAX's threads: no fork)
  B.main(["compare", "--limit", "6", "--cap", "60", "--jobs", "2", "--save", str(tmp_path / "c.md")])
  out = capsys.readouterr().out
  row = _row(out, "all")
  assert row[1] == "6" and row[4] == "0" and row[5] == "0"        # questions, disagreements, answers lost
  assert (tmp_path / "c.md").read_text().startswith("### AccessMap.injective")


def test_collect_and_movement_on_a_small_memo(tmp_path, capsys, monkeypatch):
  import isl_injective as B
  monkeypatch.setattr(B, "START", "spawn")
  memo = write_depthwise_memo(tmp_path / "memo.jsonl", draws=30, keep=6, seed=1)
  qs = tmp_path / "q.jsonl.gz"
  B.main(["collect", "--memo", str(memo), "--tasks", "depthwise", "--per-task", "4", "--jobs", "1", "--queries", str(qs)])
  with gzip.open(qs, "rt") as f: rows = [json.loads(ln) for ln in f]
  for q in rows:                                                  # each question names its relation and inputs
    assert q["task"] == "depthwise" and q["map"].startswith("{") and q["instance_dims"] >= 6
  B.main(["movement", "--memo", str(memo), "--tasks", "depthwise", "--per-task", "3", "--cap", "120", "--jobs", "1"])
  row = _row(capsys.readouterr().out, "depthwise")
  assert row[1] == "3" and int(row[2]) + int(row[3]) == 3        # programs; identical + differ
  assert row[7] == "0 / 0"                                        # none capped
  assert re.fullmatch(r"[\d.]+", row[5])
