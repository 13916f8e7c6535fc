"""The tuning loop: task scheduler, records, resume, and compile(trials=..., log_file=...)."""
import hashlib
import math

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
  pts = total_curve(load_records(path))
  n_all = next(n for n in range(1, len(recs) + 1) if len({r.workload_key for r in recs[:n]}) == 2)
  tail = [p for p in pts if p[0] >= n_all]                               # once every task is in the sum,
  assert tail and all(b[2] <= a[2] for a, b in zip(tail, tail[1:]))      # best-so-far never gets worse
  best = {}
  for r in recs:
    if r.ok: best[r.workload_key] = min(best.get(r.workload_key, 1.0), r.cost_s)
  assert pts[-1][2] == pytest.approx(sum(best.values()))
  text = text_report(path)
  assert "8 records, 2 tasks (+ 2 default-schedule records)" in text and "kept (us)" in text


def test_progress_is_shown_when_asked_and_quiet_otherwise(capsys):
  m, _ = zoo.residual_block()
  cm = mc.compile(m, "sm_86")
  cm.estimate()
  assert capsys.readouterr().err == ""
  cm = mc.compile(m, "sm_86", progress=True, trials=4, measurer=HashMeasurer(), measures_per_round=2, strategy="random")
  cm.estimate(progress=True)
  err = capsys.readouterr().err
  for shown in ("[minicomp] imported", "[minicomp] constructing schedules (Gensor)", "2/2", "[minicomp] tuning", "4/4",
                "end-to-end", "[minicomp] estimate on rtx3090"):
    assert shown in err, shown
