"""benchmarks/strategies_gpu.py: which programs it picks from the strategies benchmark's runs and memo, how
it checks and times them on a GPU (here the fake GPU of tests/fake_gpu.py: kernels on the CPU simulator,
results checked against the task's numpy reference), and its report."""
from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import minicomp as mc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import strategies as S  # noqa: E402
import strategies_gpu as G  # noqa: E402
from memo_fixture import seeded_programs  # noqa: E402

TASK = "matmul64"


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
  """A strategies-benchmark folder: a memo of 8 programs (program i costs (i+1) us) and three runs."""
  out = tmp_path_factory.mktemp("bench")
  progs = seeded_programs(G.dag_of(TASK), draws=40, keep=8, seed=0)
  assert len(progs) == 8
  cost = {p: (i + 1) * 1e-6 for i, p in enumerate(progs)}
  (out / "measured_h100.jsonl").write_text("".join(json.dumps({"task": TASK, "steps": p, "cost": c}) + "\n"
                                                   for p, c in cost.items()))
  (out / "runs").mkdir()

  def run(strategy, seed, budget, costs):
    r = {"task": TASK, "strategy": strategy, "seed": seed, "budget": budget, "costs": costs}
    S.write_run(S.run_path(out, TASK, strategy, seed, budget, "h100", 16), r)
  c = [cost[p] for p in progs]
  run("tuna", 0, 4, [c[5], c[2], None, c[7]])                # best within 2: program 2, within 4: the same
  run("ansor", 0, 4, [c[6], c[4], c[1], c[3]])               # within 2: program 4, within 4: program 1
  run("ansor", 0, 2, [c[7], c[6]])                           # a shorter run of the same seed: not used
  run("random", 1, 4, [c[3], None, c[0] * 0.5, None])        # within 4: a best the memo lacks, left out
  return out, progs


def test_select_takes_each_runs_final_best_per_budget_the_sample_and_the_rules(bench):
  out, progs = bench
  sel = G.select(out, [TASK], [2, 4], 3, "h100", 16, estimate=lambda t, s: 42e-6)
  by = {G.digest(p["steps"]): p for p in sel}
  roles = {d: p["roles"] for d, p in by.items()}
  d = [G.digest(p) for p in progs]
  assert ["tuna", 0, 2] in roles[d[2]] and ["tuna", 0, 4] in roles[d[2]]
  assert ["ansor", 0, 2] in roles[d[4]] and ["ansor", 0, 4] in roles[d[1]]
  assert not any(["ansor", 0, 2] in r for k, r in roles.items() if k != d[4])   # the longest run only
  assert ["random", 1, 2] in roles[d[3]]                                        # found in the memo
  assert not any(["random", 1, 4] in r for r in roles.values())                 # 0.5 x c[0] is not
  assert sorted(k for k, r in roles.items() if "sample" in r) == sorted([d[0], d[4], d[7]])   # ranks 0, 3.5, 7
  (rules,) = [p for p in sel if "rules" in p["roles"]]
  assert G.digest(rules["steps"]) not in d and rules["estimate"] == 42e-6
  assert all(p["estimate"] == (d.index(k) + 1) * 1e-6 for k, p in by.items() if k in d)


def test_evenly_spread_sample_keeps_both_ends():
  assert G.evenly(list(range(10)), 3) == [0, 4, 9]
  assert G.evenly([1, 2], 5) == [1, 2] and G.evenly([7, 8, 9], 1) == [7]


def test_measure_checks_against_numpy_and_times_then_reports(bench, tmp_path, monkeypatch):
  import fake_gpu as fg
  fake_gpu = fg.install(monkeypatch, cc=(9, 0))     # the programs are built for the H100 (sm_90)
  out, progs = bench
  sel = [p for p in G.select(out, [TASK], [4], 0, "h100", 16, estimate=lambda t, s: 42e-6)]
  bad = dict(sel[0], steps=progs[6])               # a program whose result we then corrupt on the "GPU"
  sel.append(bad)
  orig = fake_gpu.dtoh

  def corrupt(dst, ptr, stream=None):              # the last program's output comes back wrong
    orig(dst, ptr, stream)
    if corrupt.calls == len(sel) - 1: dst.flat[0] += 1.0
    corrupt.calls += 1
  corrupt.calls = 0
  fake_gpu.dtoh = corrupt
  with ThreadPoolExecutor(2) as ex:
    n = G.measure(sel, tmp_path, deadline_s=600, min_total_s=0.0, max_repeats=3, executor=ex)
  rows = G.read_jsonl(tmp_path / G.MEASURED)
  assert n == len(sel) == len(rows)
  assert [r["correct"] for r in rows] == [True] * (len(sel) - 1) + [False]
  assert all(r["repeats"] == 3 and r["median_s"] >= 0 for r in rows)
  assert json.loads((tmp_path / G.META).read_text())["programs"] == len(sel)
  text = G.report(sel, rows, {TASK: 1e-6, "_torch": "x"}, {"gpu": "Fake GPU", "date": "2026-11-27"},
                  {TASK: "matmul 64"}, ["header"])
  assert "1 gave a wrong result" in text and "Fake GPU" in text
  assert "| tuna @4 | 1 |" in text and "| ansor @4 | 1 |" in text and "| rule-based (no search) | 1 |" in text
  assert "| PyTorch (x) | 1 |" in text and "| matmul64 |" in text
  with pytest.raises(ValueError, match="does not match the selection"):
    G.report(sel[::-1], rows, {}, {}, {}, [])


def test_measure_refuses_without_a_gpu(capsys, monkeypatch):
  import minicomp as mc
  monkeypatch.setattr(mc, "gpu_available", lambda *a: False)
  assert G.main(["measure", "--out", "/nonexistent/x", "--selection", "/nonexistent/s.jsonl"]) == 2
  assert "no GPU here" in capsys.readouterr().err


def test_rules_schedule_takes_dynamic_shared_memory_where_it_passes_48_kib():
  # the rule-based Conv3d schedule stages 50616 bytes of shared memory, over the 48 KiB a block's static arrays may
  # hold (found on an H200, where it failed to build): it builds with dynamic shared memory now, and backs off to
  # no staging only on a target that allows less
  import dataclasses

  from minicomp.codegen.kernel import Builds
  from minicomp.compiler import build_rule_based
  from minicomp.errors import ScheduleError
  from minicomp.graph.schedules import default_schedule
  from minicomp.target import as_target
  k = mc.build(default_schedule(G.dag_of("conv3d"), "h100"), "h100")
  assert [l.shared_bytes for l in k.plan.launches] == [50616]
  assert "extern __shared__" in k.source and ".extern .shared" in k.ptx
  assert G.rules_schedule("conv3d", "h100") == default_schedule(G.dag_of("conv3d"), "h100").to_json()
  small = dataclasses.replace(as_target("h100"), max_shared_bytes_per_block=48 * 1024)
  with pytest.raises(ScheduleError, match="shared memory"):
    mc.build(default_schedule(G.dag_of("conv3d"), "h100"), small)
  assert build_rule_based(G.dag_of("conv3d"), Builds(small), "rules")[1].to_json() == \
    default_schedule(G.dag_of("conv3d"), "h100", shared=False).to_json()


def test_reproducibility_pairs_programs_by_task_and_digest():
  a = [{"task": "t", "digest": "x", "median_s": 1.0}, {"task": "t", "digest": "y", "median_s": 2.0},
       {"task": "u", "digest": "x", "error": "E"}]
  b = [{"task": "t", "digest": "y", "median_s": 2.2}, {"task": "t", "digest": "x", "median_s": 1.0},
       {"task": "u", "digest": "x", "median_s": 5.0}]
  assert G.reproducibility(a, b).startswith("2 programs timed in both") and "extremes 1.00-1.10" in G.reproducibility(a, b)
  assert G.reproducibility(a, []) == "no program was timed in both measurements"


def test_spearman_the_report_uses_against_known_values():
  from static_model_fidelity import spearman
  assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
  assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
  assert spearman([1, 2, 3, 4, 5], [2, 1, 4, 3, 5]) == pytest.approx(0.8)


def test_trials_replays_the_open_loop_runs_and_reports_what_each_measurer_keeps(tmp_path, capsys):
  from minicomp.search.measure import StaticMeasurer
  from minicomp.search.strategies.base import TuneTask
  from minicomp.search.task_scheduler import tune
  from minicomp.target import as_target
  (tmp_path / "runs").mkdir()
  # a saved random run of seed 0 (made here by the benchmark's own code), to check the re-made one against
  dag = G.dag_of(TASK)
  tt = TuneTask(TASK, dag, as_target("h100"), 1, dag.flop_count(), "", TASK)
  with StaticMeasurer(workers=1) as m:
    tune([tt], S.make_strategy("random", 0, True), m, 6, seed=0, measures_per_round=16)
  saved = [c for _, c in tt.history]
  S.write_run(S.run_path(tmp_path, TASK, "random", 0, 6, "h100", 16),
              {"task": TASK, "strategy": "random", "seed": 0, "budget": 6, "costs": saved})
  sel = G.select_trials(tmp_path, [TASK], ["random", "tuna"], 1, 6, "h100", 16)
  assert "differs" not in capsys.readouterr().err                 # the re-made random run is the saved one
  pos = {(r[1], r[3]): i for i, p in enumerate(sel) for r in p["roles"]}
  assert sorted(k for k in pos if k[0] == "random") == [("random", j) for j in range(6)]
  assert [sel[pos[("random", j)]]["estimate"] for j in range(6)] == saved
  assert any(k[0] == "tuna" for k in pos)
  with pytest.raises(ValueError, match="adapt"):
    G.select_trials(tmp_path, [TASK], ["ansor"], 1, 2, "h100", 16)
  # GPU times: the reverse of the estimates' order, so the GPU keeps the program the estimate ranks last
  est = [p["estimate"] for p in sel]
  rank = sorted(range(len(sel)), key=lambda i: est[i])
  gpu = {i: (len(sel) - rank.index(i)) * 1e-6 for i in range(len(sel))}
  by_i = {i: {"correct": True, "median_s": gpu[i]} for i in range(len(sel))}
  lines = G.trials_section(sel, by_i, {TASK: 1e-6}, ks=(1, 6))
  rand = [i for j in range(6) for i in [pos[("random", j)]]]
  row = next(ln for ln in lines if ln.startswith(f"| {TASK} | random |"))
  static6 = gpu[min(rand, key=lambda i: est[i])] * 1e6
  gpu6 = min(gpu[i] for i in rand) * 1e6
  assert row == f"| {TASK} | random | 1 | {gpu[rand[0]] * 1e6:.1f} | {gpu[rand[0]] * 1e6:.1f} | {static6:.1f} | {gpu6:.1f} | 1.0 |"
  assert static6 > gpu6


def test_select_command_writes_a_gzipped_selection_that_reads_back(bench, tmp_path, capsys):
  out, progs = bench
  dest = tmp_path / "sel" / G.SELECTION
  assert G.main(["select", "--tasks", TASK, "--budgets", "2,4", "--sample", "2", "--out", str(out),
                 "--selection", str(dest)]) == 0
  assert dest.read_bytes()[:2] == b"\x1f\x8b"                      # gzip
  sel = G.read_jsonl(dest)
  assert f"{len(sel)} programs -> {dest}" in capsys.readouterr().out
  assert {G.digest(p) for p in progs[:1]} <= {G.digest(p["steps"]) for p in sel}   # the cheapest: a sample end
  with pytest.raises(SystemExit):
    G.main(["select", "--tasks", "nosuch", "--out", str(out)])


def test_measure_stops_at_its_deadline_without_recording_a_failure(bench, tmp_path, monkeypatch, capsys):
  import fake_gpu as fg
  fg.install(monkeypatch, cc=(9, 0))
  out, _ = bench
  sel = G.select(out, [TASK], [4], 0, "h100", 16, estimate=lambda t, s: 42e-6)
  with ThreadPoolExecutor(1) as ex:
    assert G.measure(sel, tmp_path, deadline_s=0.0, min_total_s=0.0, max_repeats=1, executor=ex) == 0
  assert (tmp_path / G.MEASURED).read_text() == ""
  assert f"stopped after 0 of {len(sel)} programs" in capsys.readouterr().out


def test_measure_refuses_a_gpu_the_programs_were_not_built_for(bench, tmp_path, monkeypatch):
  import fake_gpu as fg
  fg.install(monkeypatch, cc=(8, 6))
  with pytest.raises(SystemExit, match="built for sm_90"):
    G.measure([], tmp_path, deadline_s=1.0, min_total_s=0.0, max_repeats=1)


def test_measure_resumes_a_folder_measured_before(bench, tmp_path, monkeypatch, capsys):
  import fake_gpu as fg
  fg.install(monkeypatch, cc=(9, 0))
  out, _ = bench
  sel = G.select(out, [TASK], [4], 0, "h100", 16, estimate=lambda t, s: 42e-6)
  first = {"i": 0, "task": TASK, "digest": G.digest(sel[0]["steps"]), "correct": True, "median_s": 9.0}
  (tmp_path / G.MEASURED).write_text(json.dumps(first) + "\n")
  with ThreadPoolExecutor(2) as ex:
    assert G.measure(sel, tmp_path, deadline_s=600, min_total_s=0.0, max_repeats=1, executor=ex) == len(sel) - 1
  rows = G.read_jsonl(tmp_path / G.MEASURED)
  assert rows[0] == first and sorted(r["i"] for r in rows) == list(range(len(sel)))
  assert f"1 programs measured before in {tmp_path}: {len(sel) - 1} to go" in capsys.readouterr().out


def test_programs_timed_before_the_stage_rename_replay():
  """The Conv3d's and ConvTranspose's fastest programs of 2026-11-27 name stages as the tasks were named then
  (``Conv_0_conv``); they do not replay as recorded, and do through ``replayable``, their digest unchanged."""
  from minicomp.errors import ScheduleError
  sel = G.read_jsonl(Path(__file__).resolve().parent.parent / "benchmarks/results/strategies/gpu/picks_2026-11-30"
                     / G.SELECTION)
  old = [r for r in sel if r["task"] in ("conv3d", "convT") and r["roles"][0][0] == "fastest of 2026-11-27"]
  assert len(old) == 2
  for r in old:
    outs = G.dag_of(r["task"]).outputs
    with pytest.raises(ScheduleError, match="no stage named"):
      mc.Schedule.from_json(outs, r["steps"])
    s = mc.Schedule.from_json(outs, G.replayable(r["steps"]))
    assert s.to_json() and G.replayable(G.replayable(r["steps"])) == G.replayable(r["steps"])
