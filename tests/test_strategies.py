"""Every search strategy on the strategies benchmark's tasks: only valid schedules, computing the right
thing (checked against numpy in the CPU simulator), and the benchmark itself end to end (its CI smoke
version: tiny tasks, one seed, budget 8)."""
from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

sys.path[:0] = [str(Path(__file__).resolve().parent.parent / d) for d in ("research", "benchmarks")]
import strategies as B  # noqa: E402

import minicomp as mc  # noqa: E402
from minicomp.ir.dag import ComputeDAG  # noqa: E402
from minicomp.search.measure import StaticMeasurer  # noqa: E402
from minicomp.search.strategies.base import TuneTask  # noqa: E402
from minicomp.search.task_scheduler import tune  # noqa: E402
from minicomp.target import as_target  # noqa: E402


def _check(strategy: str, name: str, builder, budget: int, per_round: int, sample: int) -> None:
  """Tune ``name`` with ``strategy`` (static measurer); every measured program must be valid (the static
  model builds it with NVRTC and estimates it), and a sample of them (the best, then random ones) must
  match the workload's numpy reference in the simulator."""
  wl = builder()
  dag = ComputeDAG(wl.outputs)
  task = TuneTask(name, dag, as_target("h100"), 1, dag.flop_count(), "", name)
  with StaticMeasurer(executor=ThreadPoolExecutor(2)) as meas:
    tune([task], B.make_strategy(strategy, 0, smoke=True), meas, budget, seed=0, measures_per_round=per_round)
  assert 0 < task.trials <= budget
  assert len(task.measured) == task.trials                       # never measured a program twice
  failed = [s for s, c in task.history if c is None]
  assert not failed, f"{strategy} proposed {len(failed)} programs the static model could not build"
  rng = np.random.default_rng(1)
  steps = [task.best_steps] + [task.history[int(i)][0] for i in rng.permutation(len(task.history))[:sample - 1]]
  by_name = dict(zip((t.name for t in wl.inputs), wl.random_inputs(3)))
  args = [by_name[p.name] for p in dag.placeholders]
  want = wl.reference(*[by_name[t.name] for t in wl.inputs])
  for s in dict.fromkeys(steps):   # named as the measurer named it: NVRTC's cache has its binary already
    k = mc.build(mc.Schedule.from_json(dag, s), "h100", name=f"cand_{task.key[:12]}")
    np.testing.assert_allclose(k(*args, device="cpu"), want, rtol=2e-3, atol=2e-3,
                               err_msg=f"{strategy} on {name}: {s[:200]}")


@pytest.mark.parametrize("strategy", B.STRATEGIES)
def test_strategy_on_the_smoke_tasks_gives_valid_correct_programs(strategy):
  for name, (_, builder) in B.tasks(smoke=True).items():
    _check(strategy, name, builder, budget=8, per_round=4, sample=2)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", B.STRATEGIES)
@pytest.mark.parametrize("task", list(B.tasks()))
def test_strategy_on_every_benchmark_task_gives_valid_correct_programs(strategy, task):
  # one round of 2 programs per full-size task, both run in the simulator (the smoke test above runs two
  # rounds of each strategy on the small tasks): NVRTC takes 0.3-3 s to build a program of a big task for
  # the static model, and these 40 tests are most of CI's time in this file
  _check(strategy, task, B.tasks()[task][1], budget=2, per_round=2, sample=2)


@pytest.mark.slow   # (50 s; every strategy runs on the smoke tasks in CI: test_strategy_on_the_smoke_tasks_...)
def test_benchmark_smoke_runs_every_strategy_and_reports(tmp_path, capsys):
  assert B.main(["--smoke", "--out", str(tmp_path), "--seeds", "1", "--budgets", "4,8"]) == 0
  text = capsys.readouterr().out
  runs = [B.read_run(p) for p in (tmp_path / "runs").glob("*.json*")]
  names = list(B.tasks(smoke=True))
  for s in B.STRATEGIES:
    got = [r for r in runs if r["strategy"] == s]
    assert sorted(r["task"] for r in got) == sorted(names), s
    for r in got:      # a strategy may use up a tiny space (softmax64: a handful of programs) and stop early
      assert r["budget"] == 8 and 0 < len(r["costs"]) <= 8 and (len(r["costs"]) == 8 or r["task"] == "softmax64")
      assert all(c is None or c > 0 for c in r["costs"])
      assert r["rounds"][-1][0] == len(r["costs"]) and r["search_s"] >= 0
    for t in names: assert f"| {t} | {s} | 1 |" in text
  assert {r["task"] for r in runs if r["strategy"] == "gensor"} == set(names)
  assert "### Budget 4" in text and "### Budget 8" in text and "ESTIMATE" in text
  assert text.count("Per seed at budget") == 2 and all(f"| {t} | " in text.split("Per seed at budget 8")[1] for t in names)
  for b in (4, 8): assert (tmp_path / f"strategies_h100_r4_b{b}.png").stat().st_size > 10_000
  # the best of a budget is the best any run found within it: some strategy's final / best is 1.00
  for b in ("4", "8"):
    section = text.split(f"### Budget {b}")[1].split("###")[0]
    for t in names:
      rows = [ln for ln in section.splitlines() if ln.startswith(f"| {t} |")]
      assert any(ln.rstrip(" |").endswith("1.00") or "| 1.00 ±" in ln for ln in rows), rows
  # felix-pre's pre-training rows: the memoised programs of the *other* tasks only, with their features
  from types import SimpleNamespace
  memo = B.MemoMeasurer(tmp_path / "measured_h100.jsonl", None)
  data = B.pretrain_data(memo, "matmul64", SimpleNamespace(smoke=True))
  assert data is not None and data.task_names() == ["softmax64"]
  assert len(data) <= B.PRETRAIN_PER_TASK and all(f.ndim == 2 and f.shape[0] > 0 for f in data.features)
  # a second run finds every run saved and measures nothing again
  before = (tmp_path / "measured_h100.jsonl").read_text()
  assert B.main(["--smoke", "--out", str(tmp_path), "--seeds", "1", "--budgets", "8"]) == 0
  assert (tmp_path / "measured_h100.jsonl").read_text() == before
  # the variants run on request and are reported beside the five (felix-pre pre-trains on softmax64 for matmul64)
  capsys.readouterr()
  assert B.main(["--smoke", "--out", str(tmp_path), "--seeds", "1", "--budgets", "8",
                 "--strategies", ",".join(B.VARIANTS)]) == 0
  text = capsys.readouterr().out
  for s in B.VARIANTS:
    got = [B.read_run(p) for p in (tmp_path / "runs").glob(f"*_{s}_s0_b8.json*")]
    assert sorted(r["task"] for r in got) == sorted(names), s
    assert all(0 < len(r["costs"]) <= 8 for r in got)
    for t in names: assert f"| {t} | {s} | 1 |" in text
  # --first-seed: seeds 2..2 only, so a second process can take other seeds of the same task and strategy
  assert B.main(["--smoke", "--out", str(tmp_path), "--seeds", "3", "--first-seed", "2", "--budgets", "8",
                 "--tasks", "matmul64", "--strategies", "random"]) == 0
  assert sorted(p.name for p in (tmp_path / "runs").glob("*matmul64_random_s*_b8.json*")) == \
    ["h100_r4_matmul64_random_s0_b8.json.gz", "h100_r4_matmul64_random_s2_b8.json.gz"]
  with pytest.raises(SystemExit):
    B.main(["--smoke", "--out", str(tmp_path), "--seeds", "2", "--first-seed", "2"])


def test_a_partly_run_budget_compares_the_strategies_on_the_tasks_the_five_ran():
  """Budget 4 run on two tasks by random and ansor and on one by the variant felix-32: the summary's last column
  is over both tasks (a variant does not shrink it), over one when ansor ran only that one, and a task only
  Gensor's point has (no strategy ran it at this budget) gets no rows."""
  def run(task, strategy, costs):
    return {"task": task, "strategy": strategy, "seed": 0, "budget": 4, "costs": costs, "rounds": [(4, 1.0)],
            "search_s": 1.0}
  runs = [run("a", "random", [4.0, 4.0, 2.0, 2.0]), run("b", "random", [9.0, 9.0, 9.0, 9.0]),
          run("a", "ansor", [4.0, 1.0, 1.0, 1.0]), run("b", "ansor", [9.0, 9.0, 9.0, 3.0]),
          run("b", "felix-32", [9.0, 9.0, 9.0, 9.0]),     # a variant on one task: no cell, the common set stays
          {**run("c", "gensor", [5.0]), "budget": 0}]
  lines, data = B.table(runs, 4, ["a", "b", "c"], {})
  text = "\n".join(lines)
  assert "| c |" not in text and set(data["best"]) == {"a", "b"}
  assert "final / best on the 2 tasks the five ran" in text
  summary = text.split("tasks the five ran |")[1].split("\n\n")[0].splitlines()
  row = {ln.split(" | ")[0].lstrip("| "): ln for ln in summary if ln.startswith("| ")}
  # random: 2.00 on a, 3.00 on b -> 2.45 over both; ansor 1.00 on both; felix-32 3.00 on b only, no common cell
  assert row["random"].split(" | ")[1:3] == ["2", "2.45"] and row["random"].rstrip(" |").endswith("2.45")
  assert row["ansor"].split(" | ")[1:3] == ["2", "1.00"] and row["ansor"].rstrip(" |").endswith("1.00")
  assert row["felix-32"].split(" | ")[1:3] == ["1", "3.00"] and row["felix-32"].endswith("|  |")
  only_a = "\n".join(B.table(runs[:3] + runs[5:], 4, ["a", "b", "c"], {})[0])   # ansor on a only: the common set is a
  assert "final / best on the 1 tasks the five ran" in only_a


def test_pretrain_transfer_table():
  """research/pretrain_transfer.py's table: best-so-far at 16 / 32 / 64 over the task's best, geometric mean over
  seeds (min-max beside it) and over tasks; a task whose every program failed gets no rows."""
  import pretrain_transfer as P

  def run(task, strategy, seed, costs):
    return {"task": task, "strategy": strategy, "seed": seed, "budget": 64, "costs": costs, "search_s": 2.0}
  runs = [run("stem7x7s2", "ansor", 0, [4.0] * 16 + [2.0] * 48), run("stem7x7s2", "ansor", 1, [2.0] * 64),
          run("stem7x7s2", "felix-pre", 0, [1.0] * 64), run("fc512x1000", "ansor", 0, [None] * 64)]
  lines = P.table(runs, 64)
  text = "\n".join(lines)
  assert "| fc512x1000 |" not in text
  # ansor at 16: seeds 4/1 and 2/1 -> geomean sqrt(8) = 2.83 (2.00-4.00); at 32 and 64 both 2.00
  assert "| stem7x7s2 | ansor | 2 | 2.83 (2.00-4.00) | 2.00 (2.00-2.00) | 2.00 (2.00-2.00) | 2 |" in text
  assert "| felix-pre | 1 | 1.00 | 1.00 | 1.00 |" in text


def test_round_size_table_compares_the_seeds_both_ran():
  """research/round_size.py: best after N measurements in us*, over the seeds both round sizes ran (seed 1 ran only
  at 16 and is left out), a longer run of a seed preferred, and the ratio of the two round sizes."""
  import round_size as R

  def run(seed, r, costs):
    return {"task": "t", "strategy": "ansor", "seed": seed, "budget": len(costs), "costs": costs, "per_round": r}
  runs = {16: [run(0, 16, [4e-6] * 4), run(0, 16, [4e-6] * 4 + [2e-6] * 4), run(1, 16, [1e-6] * 8)],
          64: [run(0, 64, [8e-6] * 4 + [1e-6] * 4)]}
  lines = R.table(runs, ["t"], "ansor", [4, 8])
  assert lines[2] == "| t | 16 | 0 | 4.00 (4.00-4.00), 1 | 2.00 (2.00-2.00), 1 |"
  assert lines[3] == "| t | 64 | 0 | 8.00 (8.00-8.00), 1 | 1.00 (1.00-1.00), 1 |"
  assert lines[4] == "| t | 16 / 64 | | 0.50 | 2.00 |"


def test_reach_and_confidence_interval():
  run = {"costs": [5.0, None, 3.0, 2.0, 2.0, 1.0], "rounds": [(2, 0.5), (4, 1.5), (6, 3.0)], "search_s": 3.0}
  assert B.reach(run, 3.0, 6) == (3, 1.5)
  assert B.reach(run, 1.0, 6) == (6, 3.0)
  assert B.reach(run, 1.0, 4) == (None, None)         # not within the first 4 measurements
  assert B.best_so_far(run["costs"]) == [5.0, 5.0, 3.0, 2.0, 2.0, 1.0]
  assert B.search_at(run, 4) == 1.5 and B.search_at(run, 5) == 3.0    # a censored cell's seconds: at its budget
  m, h = B.mean_ci([1.0, 2.0, 3.0])
  assert m == 2.0 and h == pytest.approx(4.30 * 1.0 / 3 ** 0.5)
  assert B.mean_ci([7.0]) == (7.0, 0.0)


def test_seed_table_counts_the_seeds_at_the_best_and_their_measurements():
  """The best within budget 4 is 1 us (ansor seed 0, at measurement 3; a budget-8 run of seed 1 is cut at 4 and its
  0.5 us at measurement 6 does not count). 1.10x of it is 1.1 us: ansor seed 1 gets within at 2 (1.05 us), seed 0
  at 3; random never; a seed that measured nothing is named; felix's 1.0005 us is within the tie of the best."""
  def run(strategy, seed, costs, budget=4):
    return {"task": "t", "strategy": strategy, "seed": seed, "budget": budget, "costs": [c and c * 1e-6 for c in costs],
            "rounds": [(len(costs), 2.0 + seed)], "search_s": 2.0 + seed}
  runs = [run("ansor", 0, [3.0, 2.0, 1.0, 1.0]), run("ansor", 1, [3.0, 1.05, 1.05, 1.05, 1.0, 0.5], budget=8),
          run("random", 0, [4.0, 2.0, 2.0, 2.0]), run("random", 1, [None] * 4), run("felix", 0, [2.0, 1.0005, 1.0005, 1.0005])]
  rows = {ln.split(" | ")[2]: ln for ln in B.seed_table(runs, 4, ["t"]) if ln.startswith("| t |")}
  assert rows["ansor"] == "| t | 1.00 | ansor | 2 | 1.00-1.05 (1.00-1.05x) | 1 | 2-3 | 3; 1 never | 2-3 |"
  assert rows["random"] == "| t | 1.00 | random | 2 | 2.00 (2.00x), 1 with no program | 0 | never | never | 2-3 |"
  assert rows["felix"] == "| t | 1.00 | felix | 1 | 1.00 (1.00x) | 1 | 2 | 2 | 2 |"  # 0.05% off: a tie, at the best
  assert B._spread([5, 1, 3]) == "1-5 (median 3)" and B._spread([2, 2]) == "2" and B._spread([1, 2, 4, 9]) == "1-9 (median 3)"


def test_missing_runs_lists_the_seeds_to_run_with_their_estimated_time(tmp_path):
  """Seed 0 of ansor ran at 8 (6 minutes), seed 1 only at 4: seed 1 is missing at 8, estimated 6 minutes; tuna ran
  only at 4 (2 and 4 minutes, median of an even count: the upper one), so its runs at 8 are scaled x2 from there;
  random never ran: no estimate."""
  (tmp_path / "runs").mkdir()
  def save(strategy, seed, budget, minutes):
    r = {"task": "t", "strategy": strategy, "seed": seed, "budget": budget, "costs": [1.0] * budget, "wall_s": minutes * 60}
    B.write_run(B.run_path(tmp_path, "t", strategy, seed, budget, "h100", 16), r)
  save("ansor", 0, 8, 6.0), save("ansor", 1, 4, 3.0), save("tuna", 0, 4, 2.0), save("tuna", 1, 4, 4.0)
  lines = B.missing_runs(tmp_path, ["t"], ["ansor", "tuna", "random"], 2, 8, "h100", 16)
  assert lines[2:5] == ["| t | ansor | 1 | 6 | 6 |", "| t | tuna | 0,1 | 8 (from 4) | 16 |", "| t | random | 0,1 | ? | ? |"]
  assert lines[-1].startswith("about 0.4 run-hours") and "plus 2 runs with no saved run" in lines[-1]
  assert B.missing_runs(tmp_path, ["t"], ["ansor"], 1, 8, "h100", 16) == [f"every run of budget 8 is saved in {tmp_path}"]


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["opevo", "tuna"])
def test_cli_tune_with_the_new_strategies_logs_them_and_resumes(tmp_path, strategy):
  import subprocess

  import onnx

  from minicomp import zoo
  from minicomp.search.records import load_records
  m, _ = zoo.residual_block()
  mp, log = tmp_path / "rb.onnx", tmp_path / "rb.jsonl"
  onnx.save(m, str(mp))
  run = lambda n: subprocess.run([sys.executable, "-m", "minicomp.cli", "tune", str(mp), "--trials", str(n), "--log",  # noqa: E731
                                  str(log), "--strategy", strategy, "--per-round", "4"], capture_output=True, text=True,
                                 cwd=tmp_path)
  r = run(4)
  assert r.returncode == 0, r.stderr
  recs = [x for x in load_records(str(log)) if x.strategy != "default"]
  assert len(recs) == 4 and {x.strategy for x in recs} == {strategy}
  r = run(8)                                                   # resume: four more, none measured twice
  assert r.returncode == 0, r.stderr
  recs = [x for x in load_records(str(log)) if x.strategy != "default"]
  assert len(recs) == 8 and len({(x.workload_key, x.steps_json) for x in recs}) == 8
  assert sorted(x.trial for x in recs) == list(range(8))


def test_sample_efficiency_against_ansor():
  """Ansor's mean curve reaches its final (2.0) at measurement 6; a strategy whose curve gets there at 3 is 2x as
  sample-efficient, one that gets there at 8 is 0.75x, and one that never does gives an upper bound."""
  run = lambda costs: {"costs": costs}   # noqa: E731
  by = {("t", "ansor"): {0: run([8.0] * 5 + [2.0] * 3), 1: run([8.0] * 5 + [2.0] * 3)},
        ("t", "fast"): {0: run([8.0, 8.0, 1.0]), 1: run([8.0, 8.0, 4.0])},   # geomean at 3: 2.0
        ("t", "slow"): {0: run([8.0] * 7 + [2.0])},
        ("t", "never"): {0: run([9.0] * 8)}}
  lines = B.efficiency(by, ["t"], ["ansor", "fast", "slow", "never"], 8)
  rows = {ln.split("|")[1].strip(): ln.split("|")[3].strip() for ln in lines if ln.startswith("| ") and "tasks" not in ln}
  assert rows == {"ansor": "1.00", "fast": "2.00", "slow": "0.75", "never": "<0.75"}
  assert B.efficiency({("t", "fast"): by[("t", "fast")]}, ["t"], ["fast"], 8) == []   # no Ansor: no table
  empty = B.efficiency({**by, ("t", "none"): {0: run([])}}, ["t"], ["ansor", "none"], 8)   # proposed nothing
  assert any(ln.startswith("| none | 1 | <") for ln in empty), empty


def test_memo_reads_back_costs_and_failures_but_not_timeouts(tmp_path):
  """A timeout is the machine's load (a build over the measurer's limit), not the program's: a later run
  measures it again instead of taking it as failed."""
  from minicomp.search.measure import ErrorKind, MeasureInput, MeasureResult
  path = tmp_path / "measured_h100.jsonl"
  path.write_text("".join(json.dumps(r) + "\n" for r in [
    {"task": "t", "steps": "a", "cost": 1e-6, "error": "ok"},
    {"task": "t", "steps": "b", "cost": None, "error": "invalid schedule"},
    {"task": "t", "steps": "c", "cost": None, "error": "timeout"}]) + '{"task": "t", "ste')   # a torn last line

  class Inner:
    seen: list[str] = []

    def measure(self, inputs):
      self.seen += [i.steps_json for i in inputs]
      return [MeasureResult(2e-6) for _ in inputs]
  inner = Inner()
  memo = B.MemoMeasurer(path, inner)
  got = memo.measure([MeasureInput(None, s, "h100", key="t") for s in "abc"])
  assert inner.seen == ["c"]
  assert [r.cost_s for r in got] == [1e-6, None, 2e-6] and got[1].error is ErrorKind.SCHEDULE
