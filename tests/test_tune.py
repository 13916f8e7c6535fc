"""The tuning loop: task scheduler, records, resume, and compile(trials=..., log_file=...)."""
import hashlib
import json
import logging
import math
import re

import numpy as np
import pytest

import minicomp as mc
from minicomp import workloads as W
from minicomp import zoo
from minicomp.ir.dag import ComputeDAG
from minicomp.search.measure import ErrorKind, Measurer, MeasureResult
from minicomp.search.records import load_records
from minicomp.search.strategies.base import RandomStrategy, TuneTask
from minicomp.search.task_scheduler import pick_task, tune
from minicomp.search.tune import TuneError, make_strategy
from minicomp.target import Target


class HashMeasurer(Measurer):
  """A deterministic stand-in for a measurer: cost from a hash of the program, no build.
  Every 7th program 'fails to compile'. Counts what it was asked to measure."""
  is_estimate = True

  def __init__(self):
    self.seen = []

  def measure(self, inputs):
    out = []
    for inp in inputs:
      self.seen.append((inp.key, inp.steps_json))
      h = int(hashlib.sha256(inp.steps_json.encode()).hexdigest()[:8], 16)
      if h % 7 == 0: out.append(MeasureResult(None, ErrorKind.COMPILE, "fake compile error"))
      else: out.append(MeasureResult(1e-6 * (1 + h % 1000), ErrorKind.NONE, "", True))
    return out


def _task(wl, key, weight=1, kind="data_reuse"):
  dag = ComputeDAG(wl.outputs)
  return TuneTask(key, dag, Target("sm_86"), weight, dag.flop_count(), kind, key)


def test_pick_task_prefers_tasks_without_a_valid_program_then_the_steepest():
  a, b = _task(W.matmul(16, 16, 16), "a"), _task(W.matmul(16, 16, 32), "b")
  rng = np.random.default_rng(0)
  a.best_cost = 1e-5
  assert pick_task([a, b], {"a": [1e-5], "b": []}, {"a", "b"}, rng, eps=0) is b
  b.best_cost = 1e-5
  hist = {"a": [4e-5, 3e-5, 2e-5, 1e-5, 1e-5], "b": [1e-5] * 5}   # a still improving, b flat
  assert pick_task([a, b], hist, {"a", "b"}, rng, eps=0) is a
  b.weight = 10                                                   # b runs 10x per inference: worth more
  assert pick_task([a, b], {"a": [1e-5] * 5, "b": [1e-5] * 5}, {"a", "b"}, rng, eps=0) is b
  assert pick_task([a, b], hist, {"b"}, rng, eps=0) is b          # dead tasks are never picked
  assert pick_task([a, b], hist, set(), rng) is None


def test_tune_measures_each_program_once_and_logs_everything(tmp_path):
  from minicomp.search.records import RecordLog
  tasks = [_task(W.matmul(32, 32, 16), "mm"), _task(W.softmax(8, 64), "sm", kind="reduction")]
  meas = HashMeasurer()
  path = tmp_path / "log.jsonl"
  with RecordLog(path) as log:
    res = tune(tasks, RandomStrategy(), meas, trials=40, seed=1, measures_per_round=8, log=log)
  assert res.trials == 40 == len(meas.seen)
  assert len({s for _, s in meas.seen}) == 40                    # no program measured twice
  recs = load_records(path)
  assert len(recs) == 40 and {r.workload_key for r in recs} == {"mm", "sm"}
  assert sum(not r.ok for r in recs) == sum(t.measured[s] is None for t in tasks for s in t.measured)
  for t in tasks:
    ok = [r.cost_s for r in recs if r.workload_key == t.key and r.ok]
    assert t.best_cost == min(ok)
  assert [c[0] for c in res.curve] == sorted(c[0] for c in res.curve)
  assert math.isfinite(res.objective_s)


def test_unknown_strategy_is_a_clear_error():
  with pytest.raises(TuneError, match="unknown search strategy 'beam'"):
    make_strategy("beam")


def _onnx_ref(m, feeds):
  import onnxruntime as ort
  return ort.InferenceSession(m.SerializeToString()).run(None, feeds)[0]


def _trials(path):
  return [r for r in load_records(path) if r.strategy != "default"]


def test_compile_with_trials_resumes_and_applies_the_log(tmp_path):
  m, feeds = zoo.residual_block()
  path = str(tmp_path / "rb.jsonl")
  meas = HashMeasurer()
  cm = mc.compile(m, "sm_86", trials=12, strategy="random", log_file=path, measurer=meas, measures_per_round=4)
  np.testing.assert_allclose(cm.run(feeds)[0], _onnx_ref(m, feeds), rtol=1e-4, atol=1e-4)
  defaults = [r for r in load_records(path) if r.strategy == "default"]
  assert len(_trials(path)) == 12 and len(defaults) == 2 and len(meas.seen) == 12 + 2   # + each task's default, once
  first = {s for _, s in meas.seen}
  # the same command again: the log already holds 12 trials and the defaults -> nothing measured
  mc.compile(m, "sm_86", trials=12, strategy="random", log_file=path, measurer=meas)
  assert len(meas.seen) == 14
  # a bigger budget resumes: only new programs are measured
  mc.compile(m, "sm_86", trials=20, strategy="random", log_file=path, measurer=meas, measures_per_round=4, seed=3)
  assert len(meas.seen) == 22 and not first & {s for _, s in meas.seen[14:]}
  assert len(_trials(path)) == 20 and len(load_records(path)) == 22
  # trials=0 applies, per task, the better of its best record and its default schedule
  applied = mc.compile(m, "sm_86", log_file=path)
  plain = mc.compile(m, "sm_86")
  recs = load_records(path)
  kept = 0
  for idx, task in enumerate(applied.tasks):
    best = min((r for r in recs if r.workload_key == task.key and r.ok and r.strategy != "default"), key=lambda r: r.cost_s)
    default = next(r for r in recs if r.workload_key == task.key and r.strategy == "default")
    k = applied.kernels[next(c.kernel for c in applied.calls if c.task == task.key)]
    if default.ok and default.cost_s <= best.cost_s:
      kept += 1
      assert k.source == plain.kernels[next(c.kernel for c in plain.calls if c.task == task.key)].source
    else:
      assert k.source == mc.build(mc.Schedule.from_json(task.dag, best.steps_json), "sm_86", name=f"task{idx}").source
  np.testing.assert_allclose(applied.run(feeds)[0], _onnx_ref(m, feeds), rtol=1e-4, atol=1e-4)


def test_a_tuned_schedule_never_replaces_a_better_default(tmp_path):
  """A measurer under which every default schedule is the fastest program: no record replaces one
  (a short tuning run once made a model slower by minicomp's own estimate)."""
  m, feeds = zoo.residual_block()
  plain = mc.compile(m, "sm_86")

  class DefaultsFastest(HashMeasurer):            # the first batch measured is the defaults
    def measure(self, inputs):
      first = not self.seen
      out = super().measure(inputs)
      return [MeasureResult(1e-9, ErrorKind.NONE, "", True) for _ in out] if first else out
  path = str(tmp_path / "d.jsonl")
  tuned = mc.compile(m, "sm_86", trials=8, strategy="random", log_file=path, measurer=DefaultsFastest(),
                     measures_per_round=4)
  assert [a.source for a in tuned.kernels] == [b.source for b in plain.kernels]
  defaults = [r for r in load_records(path) if r.strategy == "default"]
  assert len(defaults) == 2 and all(r.cost_s == 1e-9 for r in defaults) and len(_trials(path)) == 8
  assert mc.compile(m, "sm_86", log_file=path).kernels[0].source == plain.kernels[0].source   # applying the log too


def test_killed_run_leaves_a_log_that_resumes(tmp_path):
  m, _ = zoo.residual_block()
  path = str(tmp_path / "k.jsonl")
  mc.compile(m, "sm_86", trials=8, strategy="random", log_file=path, measurer=HashMeasurer(), measures_per_round=4)
  with open(path, "a") as f: f.write('{"v": 1, "workload_key": "tor')          # a torn last line
  meas = HashMeasurer()
  mc.compile(m, "sm_86", trials=12, strategy="random", log_file=path, measurer=meas, measures_per_round=4)
  assert len(meas.seen) == 4 and len(_trials(path)) == 12


@pytest.mark.slow
def test_static_measurer_tuning_beats_the_default_schedule_estimate(tmp_path):
  from minicomp.search.measure import StaticMeasurer
  m, feeds = zoo.residual_block()
  with StaticMeasurer(workers=2) as meas:
    tuned = mc.compile(m, "sm_86", trials=24, strategy="random", measurer=meas, measures_per_round=8)
  rules = mc.compile(m, "sm_86", schedules="rules")
  default = mc.compile(m, "sm_86")
  np.testing.assert_allclose(tuned.run(feeds)[0], _onnx_ref(m, feeds), rtol=1e-4, atol=1e-4)
  assert tuned.estimate().latency_s < rules.estimate().latency_s
  assert tuned.estimate().latency_s <= default.estimate().latency_s    # a record never replaces a better default
  assert "estimate" in str(tuned.estimate())


@pytest.mark.slow
def test_cli_tune_then_report(tmp_path):
  import subprocess
  import sys

  import onnx
  m, _ = zoo.residual_block()
  mp = tmp_path / "rb.onnx"
  onnx.save(m, str(mp))
  log, png = tmp_path / "rb.jsonl", tmp_path / "curve.png"
  run = lambda *a: subprocess.run([sys.executable, "-m", "minicomp.cli", *map(str, a)], capture_output=True, text=True,
                                  cwd=tmp_path)
  r = run("tune", mp, "--trials", 8, "--log", log, "--strategy", "random", "--per-round", 4)
  assert r.returncode == 0, r.stderr
  assert "estimated latency on rtx3090 (static model, no GPU measurement)" in r.stdout
  assert "[minicomp] tuning" in r.stderr and "8/8" in r.stderr and "end-to-end" in r.stderr and "(estimate)" in r.stderr
  r = run("report", log, "--png", png)
  assert r.returncode == 0, r.stderr
  assert "8 records, 2 tasks (+ 2 default-schedule records)" in r.stdout and "ESTIMATE" in r.stdout
  assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  r = run("report", tmp_path / "missing.jsonl")
  assert r.returncode == 2 and "RecordsError" in r.stderr


def test_report_text_and_curve(tmp_path):
  from minicomp.search.report import text_report, total_curve
  m, _ = zoo.residual_block()
  path = str(tmp_path / "r.jsonl")
  mc.compile(m, "sm_86", trials=8, strategy="random", log_file=path, measurer=HashMeasurer(), measures_per_round=4)
  recs = _trials(path)
  defaults = {r.workload_key: r.cost_s for r in load_records(path) if r.strategy == "default"}
  pts = total_curve(load_records(path))
  assert len(pts) == len(recs) + 1 and pts[0][:2] == (0, 0.0)           # a total from the start: every task
  assert pts[0][2] == pytest.approx(sum(defaults.values()))              # has its default, no partial sums
  assert all(b[2] <= a[2] for a, b in zip(pts, pts[1:]))                 # the kept total never rises
  kept = dict(defaults)
  for r in recs:
    if r.ok: kept[r.workload_key] = min(kept[r.workload_key], r.cost_s)
  assert pts[-1][2] == pytest.approx(sum(kept.values())) and sum(kept.values()) <= sum(defaults.values())
  text = text_report(path)
  assert "8 records, 2 tasks (+ 2 default-schedule records)" in text and "kept (us)" in text
  assert "Conv+Relu 1x8x10x10" in text and "Conv+Add+Relu 1x8x10x10" in text   # tasks named from their ops
  tuned = sum(kept[k] < defaults[k] for k in kept)
  assert f"{tuned} of 2 tasks tuned" in text and text.count("tuned ") + text.count("default: ") >= 2


def test_progress_is_shown_when_asked_and_quiet_otherwise(capsys):
  m, _ = zoo.residual_block()
  cm = mc.compile(m, "sm_86", progress=False)
  cm.estimate()
  assert capsys.readouterr().err == ""
  cm = mc.compile(m, "sm_86", progress=True, trials=4, measurer=HashMeasurer(), measures_per_round=2, strategy="random")
  cm.estimate(progress=True)
  err = capsys.readouterr().err
  for shown in ("[minicomp] imported", "[minicomp] constructing schedules (Gensor)", "2/2", "[minicomp] tuning", "4/4",
                "end-to-end", "[minicomp] estimate on rtx3090"):
    assert shown in err, shown


class DefaultsSlow(HashMeasurer):
  """The first batch measured (the default schedules) gets 1 s: every task then applies its best record."""
  def measure(self, inputs):
    first = not self.seen
    out = super().measure(inputs)
    return [MeasureResult(1.0, ErrorKind.NONE, "", True) for _ in out] if first else out


def _kernel_of(cm, key):
  return cm.kernels[next(c.kernel for c in cm.calls if c.task == key)]


def _built(cm, key, steps):
  idx = next(i for i, t in enumerate(cm.tasks) if t.key == key)
  return mc.build(mc.Schedule.from_json(cm.tasks[idx].dag, steps), "sm_86", name=f"task{idx}").source


def test_the_best_valid_record_wins_and_bad_ones_are_named(tmp_path, caplog):
  """Records cheaper than the best valid one but unusable: steps that do not apply to the task, a cost of 0,
  steps that do not parse. Each is skipped with its file:line; the best valid record is applied (it once fell
  back to the default schedule, or escaped compile as a KeyError)."""
  from minicomp.search.records import Record
  m, _ = zoo.residual_block()
  path = tmp_path / "v.jsonl"
  mc.compile(m, "sm_86", trials=8, strategy="random", log_file=str(path), measurer=DefaultsSlow(), measures_per_round=4)
  key = _trials(path)[0].workload_key
  best = min((r for r in _trials(path) if r.workload_key == key and r.ok), key=lambda r: r.cost_s)
  n = len(path.read_text().splitlines())
  bad = [Record(key, "sm_86", '[{"step": "split", "stage": "nope", "iter": "i", "factors": [2]}]', 1e-12).to_line(),
         json.dumps({**best.to_dict(), "cost_s": 0}), json.dumps({**best.to_dict(), "cost_s": 1e-13,
                                                                   "steps": [{"step": "split", "stage": "C"}]})]
  with open(path, "a") as f: f.write("\n".join(bad) + "\n")
  with caplog.at_level(logging.WARNING, logger="minicomp"):
    cm = mc.compile(m, "sm_86", log_file=str(path))
  assert _kernel_of(cm, key).source == _built(cm, key, best.steps_json)
  assert re.search(rf"v\.jsonl:{n + 1}: skipping a record of task .* does not replay to a valid schedule", caplog.text)
  assert f"v.jsonl:{n + 2}: skipping an invalid record: cost_s must be a positive" in caplog.text
  assert f"v.jsonl:{n + 3}: skipping an invalid record: steps do not parse" in caplog.text


def test_one_measurement_kind_per_compile(tmp_path, caplog):
  """A GPU timing far below every estimate is ignored by a compile that uses estimates (trials=0, no GPU here),
  and is the only kind a compile with measurer="gpu" looks at (no GPU needed to apply GPU timings)."""
  from minicomp.search.records import Record
  m, _ = zoo.residual_block()
  path = tmp_path / "kind.jsonl"
  mc.compile(m, "sm_86", trials=8, strategy="random", log_file=str(path), measurer=DefaultsSlow(), measures_per_round=4)
  key = _trials(path)[0].workload_key
  ok = sorted((r for r in _trials(path) if r.workload_key == key and r.ok), key=lambda r: r.cost_s)
  assert ok[0].steps_json != ok[-1].steps_json
  with open(path, "a") as f: f.write(Record(key, "sm_86", ok[-1].steps_json, 1e-12, is_estimate=False).to_line() + "\n")
  with caplog.at_level(logging.WARNING, logger="minicomp"):
    est = mc.compile(m, "sm_86", log_file=str(path))
  assert _kernel_of(est, key).source == _built(est, key, ok[0].steps_json)
  assert "ignoring 1 record(s) of GPU timings: this run compares static-model estimates only" in caplog.text
  assert "measurer='gpu'" in caplog.text
  gpu = mc.compile(m, "sm_86", log_file=str(path), measurer="gpu")
  assert _kernel_of(gpu, key).source == _built(gpu, key, ok[-1].steps_json)
  plain = mc.compile(m, "sm_86")
  other = next(t.key for t in gpu.tasks if t.key != key)                # no GPU timings: its default schedule
  assert _kernel_of(gpu, other).source == _kernel_of(plain, other).source


@pytest.mark.parametrize("kw,msg", [
  ({"trials": "4"}, "trials must be a non-negative int, got '4' (str)"),
  ({"trials": -1}, "trials must be a non-negative int, got -1 (int)"),
  ({"trials": 2.0}, "trials must be a non-negative int, got 2.0 (float)"),
  ({"trials": True}, "trials must be a non-negative int, got True (bool)"),
  ({"seed": "0"}, "seed must be a non-negative int, got '0' (str)"),
  ({"measures_per_round": 0}, "measures_per_round must be a positive int, got 0 (int)"),
  ({"time_budget_s": float("nan")}, "time_budget_s must be None or a positive number of seconds"),
  ({"strategy": "beam"}, "unknown search strategy 'beam'"),
  ({"measurer": "cuda"}, "measurer must be None, 'gpu' or 'static' or a Measurer, got 'cuda' (str)"),
  ({"log_file": 3}, "log_file must be None or a path, got 3 (int)"),
])
def test_tuning_arguments_are_checked_at_entry(kw, msg):
  """Before any work (the model here is not even a model), not as a TypeError from deep inside."""
  from minicomp.search.tune import tune_tasks
  with pytest.raises(TuneError, match=re.escape(msg)): mc.compile(b"not a model", "sm_86", **kw)
  with pytest.raises(TuneError, match=re.escape(msg)): tune_tasks([], "sm_86", **kw)
  assert issubclass(TuneError, mc.MinicompError)


def _gtask(wl):
  from minicomp.graph.tasks import Task, task_kind, workload_key
  dag = ComputeDAG(wl.outputs)
  return Task(workload_key(dag), dag, task_kind(dag), 1, ["MatMul"], dag.flop_count())


def test_results_are_logged_as_they_come_and_a_resume_goes_on_where_it_stopped(tmp_path):
  """The measurer dies after 2 of a round's 4 results: those 2 are logged (trials 0, 1), the rest use no
  budget. The resume numbers its trials on from 2 and warms up the tasks never measured, in order, first."""
  from minicomp.search.measure import MeasureError
  from minicomp.search.tune import tune_tasks

  class DiesMidRound(HashMeasurer):
    def measure_iter(self, inputs):
      yield from enumerate(self.measure(inputs[:2]))
      raise MeasureError("the workers died")
  tasks = [_gtask(W.matmul(16, 16, n)) for n in (16, 32, 48)]
  path = str(tmp_path / "r.jsonl")
  with pytest.raises(MeasureError, match="the workers died"):
    tune_tasks(tasks, "sm_86", trials=12, strategy="random", log_file=path, measurer=DiesMidRound(), measures_per_round=4)
  recs = load_records(path)
  assert [(r.trial, r.workload_key) for r in recs] == [(0, tasks[0].key), (1, tasks[0].key)]
  tune_tasks(tasks, "sm_86", trials=12, strategy="random", log_file=path, measurer=HashMeasurer(), measures_per_round=4)
  recs = load_records(path)
  assert [r.trial for r in recs] == list(range(12))
  new = [r.workload_key for r in recs[2:]]
  assert new[0] == tasks[1].key and new.index(tasks[2].key) < (new.index(tasks[0].key) if tasks[0].key in new else 99)


def test_one_strategy_factory_for_compile_the_cli_and_the_benchmarks():
  from minicomp.search.strategies.opevo import OpEvoStrategy
  from minicomp.search.tune import STRATEGIES
  for name in STRATEGIES:
    assert make_strategy(name, 3).name == name
  s = make_strategy("opevo", 1, parents=2, walk="one")
  assert isinstance(s, OpEvoStrategy) and s.parents == 2
  with pytest.raises(TypeError):
    make_strategy("ansor", 0, no_such_option=1)


class SpyStrategy(RandomStrategy):
  """Random proposals; remembers every update (task key, candidate keys, costs) in order."""
  def __init__(self):
    self.updates = []

  def update(self, task, candidates, costs):
    self.updates.append((task.key, [c.key for c in candidates], list(costs)))


def test_tuning_starts_where_the_default_is(tmp_path):
  """The first round of a task hands its default (Gensor's, measured already) to the strategy as a measured
  program, not a trial, and measures Gensor's other constructed programs (those compile compared with the default
  first) ahead of the strategy's own; tasks whose default takes longest go first."""
  from minicomp.search.records import canonical_steps
  from minicomp.search.strategies.gensor import CONSTRUCT_SEED, compared, construct
  m, _ = zoo.residual_block()
  base = mc.compile(m, "sm_86", progress=False)
  spy, log = SpyStrategy(), tmp_path / "t.jsonl"
  mc.compile(m, "sm_86", trials=6, log_file=str(log), strategy=spy, measurer="static", measures_per_round=3,
             progress=False)
  recs = load_records(str(log))
  defaults = {r.workload_key: r for r in recs if r.strategy == "default"}
  trials = sorted((r for r in recs if r.strategy != "default"), key=lambda r: r.trial)
  assert len(trials) == 6 and len(defaults) == len(base.tasks) == 2
  order = list(dict.fromkeys(r.workload_key for r in trials))
  by_cost = sorted(defaults, key=lambda k: -defaults[k].cost_s * next(t.weight for t in base.tasks if t.key == k))
  assert order == by_cost                                   # the slower default is tuned first
  for t in base.tasks:
    res = construct(t.dag, "sm_86", seed=CONSTRUCT_SEED)
    default = canonical_steps(defaults[t.key].steps_json)
    gensor = [c for c in res.candidates if canonical_steps(c.key) != default]
    starts = [c.key for c in gensor if c in compared(res)] + [c.key for c in gensor if c not in compared(res)]
    mine = [r.steps_json for r in trials if r.workload_key == t.key]
    assert [canonical_steps(s) for s in mine[:len(starts)]] == [canonical_steps(s) for s in starts[:3]][:len(mine)]
    assert default not in {canonical_steps(s) for s in mine}   # the default is never a trial
    if any(canonical_steps(c.key) == default for c in res.candidates):   # Gensor's default: a seed
      first = next(u for u in spy.updates if u[0] == t.key)
      assert [canonical_steps(k) for k in first[1]] == [default] and first[2] == [defaults[t.key].cost_s]
