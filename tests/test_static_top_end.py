"""research/static_top_end.py: the static model's facts of GPU-timed programs, saved once and re-evaluated
(as they are, for an H200, with one constant or rule changed) against the GPU times, with no build."""
from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

sys.path[:0] = [str(Path(__file__).resolve().parent.parent / d) for d in ("research", "benchmarks")]
import static_top_end as T  # noqa: E402
from minicomp.target import get_device  # noqa: E402
import strategies_gpu as G  # noqa: E402
from memo_fixture import seeded_programs  # noqa: E402

TASK = "matmul64"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
  """A strategies_gpu folder of 7 seeded programs whose "GPU times" are the static model's estimates for
  an H200 (so the H200 view of the facts ranks them exactly as the GPU did), and an eighth program that
  gave a wrong result (left out everywhere). Returns the folder, the programs and their h100 estimates."""
  from minicomp.search.measure import MeasureInput, StaticMeasurer
  d = tmp_path_factory.mktemp("gpu")
  progs = seeded_programs(G.dag_of(TASK), draws=60, keep=8, seed=3)
  assert len(progs) == 8
  with StaticMeasurer(workers=1) as m:
    est = [r.cost_s for r in m.measure([MeasureInput(G.dag_of(TASK), p, "h100", key=TASK) for p in progs])]
  assert all(e is not None for e in est)
  h200 = get_device("h200")
  gpu = [T.estimate(T.facts_of(TASK, p), h200) for p in progs]
  with gzip.open(d / G.SELECTION, "wt") as f:
    for p, e in zip(progs, est): f.write(json.dumps({"task": TASK, "steps": p, "estimate": e, "roles": ["sample"]}) + "\n")
  (d / G.MEASURED).write_text("".join(
    json.dumps({"i": i, "task": TASK, "digest": G.digest(p), "correct": i != 7, "max_err": 0.0 if i != 7 else 1.0,
                "median_s": g}) + "\n" for i, (p, g) in enumerate(zip(progs, gpu))))
  (d / G.META).write_text(json.dumps({"gpu": "NVIDIA H200 (sm_90, a fake)", "date": "2026-11-27"}))
  return d, progs, est


def test_facts_are_saved_once_and_give_the_measurers_estimate_back(folder, tmp_path, capsys):
  d, progs, est = folder
  facts = tmp_path / "facts.jsonl.gz"
  assert T.main(["facts", "--folders", str(d), "--facts", str(facts), "--jobs", "1"]) == 0
  rows = T._read_facts(facts)
  assert sorted(r["digest"] for r in rows) == sorted(G.digest(p) for p in progs[:7])    # the wrong one left out
  h100 = get_device("h100")
  by = {G.digest(p): e for p, e in zip(progs, est)}
  for r in rows:
    assert r["estimate"] == by[r["digest"]]
    assert T.estimate(r["facts"], h100) == pytest.approx(by[r["digest"]], rel=1e-9)
    # no overlap of SM and memory time can only make a program slower; an H200's bandwidth only faster
    assert T.estimate(r["facts"], h100, {"combine": "sum"}) >= T.estimate(r["facts"], h100) * (1 - 1e-12)
    assert T.estimate(r["facts"], get_device("h200")) <= T.estimate(r["facts"], h100) * (1 + 1e-12)
  assert T.main(["facts", "--folders", str(d), "--facts", str(facts), "--jobs", "1"]) == 0   # resumes: none new
  assert "0 to do" in capsys.readouterr().err
  assert len(T._read_facts(facts)) == 7


def test_report_scores_the_h200_view_as_the_gpu_ranked_and_probes_the_variants(folder, tmp_path, capsys):
  d, progs, est = folder
  facts = tmp_path / "facts.jsonl.gz"
  T.main(["facts", "--folders", str(d), "--facts", str(facts), "--jobs", "1"])
  save = tmp_path / "r.md"
  assert T.main(["report", "--facts", str(facts), "--save", str(save)]) == 0
  text = save.read_text()
  row = next(ln for ln in text.splitlines() if ln.startswith(f"| {TASK} | 7 |"))
  cells = [c.strip() for c in row.strip("|").split("|")]
  assert cells[6:9] == ["1.00", "1.00", "1.00"]         # rho, pick and top5 of the H200 view: the GPU's own order
  assert "gives the benchmark's own estimate for 7 of the 7 that carry one" in text
  assert "NVIDIA H200 (sm_90, a fake), 2026-11-27" in text and "h200 for the NVIDIA H200: 4800 GB/s" in text
  for name in T.VARIANTS: assert f"| {name} |" in text
  assert "Leave one task out" not in text                # one task: nothing to leave out


def test_facts_of_the_shared_h100_data_format(tmp_path, capsys):
  """Records of benchmarks/data's measured.jsonl format (a workload call, steps, a median time): facts of
  the correct ones, their estimate on the h100 equal to the static model's of the same schedule."""
  import minicomp as mc
  from minicomp import workloads as W
  from minicomp.search.static.estimate import estimate
  wl = W.matmul(64, 64, 64)
  steps = seeded_programs(mc.ComputeDAG(wl.outputs), draws=20, keep=3, seed=1)
  data = tmp_path / "measured.jsonl"
  data.write_text("".join(json.dumps({"workload": "mm64", "workload_call": "minicomp.workloads.matmul(64, 64, 64)",
                                      "target": "sm_90", "median_s": (i + 1) * 1e-5, "correct": i != 2,
                                      "steps": json.loads(st)}) + "\n" for i, st in enumerate(steps)))
  facts = tmp_path / "f.jsonl.gz"
  assert T.main(["facts", "--measured-data", str(data), "--facts", str(facts), "--jobs", "1"]) == 0
  rows = T._read_facts(facts)
  assert len(rows) == 2 and {r["gpu"][0] for r in rows} == {T.H100_GPU}
  for r, st in zip(sorted(rows, key=lambda r: r["gpu_s"]), steps):
    want = estimate(mc.build(mc.Schedule.from_json(wl.outputs, st), target="sm_90"), "h100").latency_s
    assert T.estimate(r["facts"], get_device("h100")) == pytest.approx(want, rel=1e-9)
  assert T.main(["report", "--facts", str(facts)]) == 0
  assert "| mm64 | 2 |" in capsys.readouterr().out


def test_commands_refuse_missing_inputs_with_a_message(tmp_path, capsys):
  assert T.main(["report", "--facts", str(tmp_path / "none.jsonl.gz")]) == 2
  assert "no facts" in capsys.readouterr().err
  assert T.main(["facts", "--folders", str(tmp_path), "--facts", str(tmp_path / "f.gz")]) == 2
  assert "not a strategies_gpu folder" in capsys.readouterr().err
  assert T.main(["facts", "--measured-data", str(tmp_path / "none.jsonl"), "--facts", str(tmp_path / "f.gz")]) == 2
  assert "no such file" in capsys.readouterr().err
