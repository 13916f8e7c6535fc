"""`minicomp collect` through the fake GPU of tests/fake_gpu.py (kernels run on the CPU simulator, so results
are real and checked against numpy; times are the fake's), then `minicomp calibrate` on what it wrote."""
import dataclasses

import pytest

from minicomp.search import collect as K
from minicomp.search.static import calibration as C
from minicomp.search.static import timings as T

SMALL = ["matmul(16, 16, 16)", "softmax(8, 32)"]


@pytest.fixture
def h100(monkeypatch, tmp_path):
  import fake_gpu as fg
  monkeypatch.setenv("MINICOMP_CACHE_DIR", str(tmp_path / "cache"))
  monkeypatch.delenv(C.MODEL_ENV, raising=False)
  return fg.install(monkeypatch, cc=(9, 0), gpu_name="NVIDIA H100 80GB HBM3")


def test_collect_times_checks_and_analyses_each_program_and_resumes(h100, tmp_path):
  out = tmp_path / "t.jsonl"
  done = K.collect(SMALL, per_task=4, out=out, progress=False)
  assert (done.timed, done.skipped, done.wrong, done.failed) == (8, 0, 0, 0) and done.arch == "sm_90"
  rows = T.read(out)
  assert {r.task for r in rows} == {"matmul_16x16x16", "softmax_8x32"} and len({r.steps for r in rows}) == 8
  r = rows[0]
  assert r.gpu == "NVIDIA H100 80GB HBM3" and r.arch == "sm_90" and r.correct and r.median_s == pytest.approx(h100.launch_s)
  assert r.workload == "matmul(16, 16, 16)" and r.facts["device"] == "h100" and r.facts["launches"][0]["blocks"] >= 1
  launched = sum(1 for c in h100.calls if c[0] == "launch")
  again = K.collect(SMALL, per_task=6, out=out, progress=False)       # two more each; the first four are kept
  assert (again.timed, again.skipped) == (4, 8) and len(T.read(out)) == 12
  assert sum(1 for c in h100.calls if c[0] == "launch") > launched


def test_a_wrong_result_is_kept_marked_and_never_fitted_on(h100, tmp_path, monkeypatch):
  from minicomp import workloads as W
  real = W.from_call

  def off_by_one(call):
    wl = real(call)
    return dataclasses.replace(wl, reference=lambda *a: wl.reference(*a) + 1.0) if "softmax" in call else wl
  monkeypatch.setattr(W, "from_call", off_by_one)
  out = tmp_path / "t.jsonl"
  done = K.collect(SMALL, per_task=3, out=out, progress=False)
  assert done.wrong == 3 and done.timed == 6
  rows = T.read(out)
  assert [r.correct for r in rows if r.task == "softmax_8x32"] == [False] * 3
  from minicomp.search.static.fit import tasks_of
  assert set(tasks_of(rows, "sm_90")) == {"matmul_16x16x16"}


def test_half_programs_are_checked_against_a_float32_reference(h100, tmp_path):
  """An fp16 convolution's programs (tensor-core draws among them) are right: numpy's convolution of the same half
  inputs computed in float32, within the output type's resolution. (On an H200, 2026-11-29, all 32 programs of the
  fp16 conv 3x3 56x56x64 were marked wrong: the reference was computed in float16.)"""
  done = K.collect(['conv2d(1, 32, 8, 8, 32, 3, pad=1, dtype="float16", channels_last_weights=True)'], per_task=4,
                   out=tmp_path / "t.jsonl", progress=False)
  assert (done.timed, done.wrong) == (4, 0)


def test_a_task_on_the_tensor_cores_collects_compiles_template_first(h100, tmp_path):
  """Where the tensor cores take a task, half of its programs are compile's template in its tile sizes and pipeline
  depths (the programs compile's choice is made from), the two compile builds first; all right in the simulator."""
  from minicomp import target as TG
  from minicomp import workloads as W
  from minicomp.graph.tensor_core_schedules import tensor_core_schedules, tensor_core_variants
  from minicomp.ir.dag import ComputeDAG
  call = 'matmul(64, 128, 64, dtype="float16")'
  out = tmp_path / "t.jsonl"
  done = K.collect([call], per_task=6, out=out, progress=False)
  rows = T.read(out)
  assert (done.timed, done.wrong, done.failed) == (6, 0, 0)
  dag = ComputeDAG(W.from_call(call).outputs)
  tgt = TG.Target("h100")
  family = [s.to_json() for s in tensor_core_variants(dag, tgt)]
  assert len(family) > 3 and family[:2] == [s.to_json() for s in tensor_core_schedules(dag, tgt)]
  assert [r.steps for r in rows[:3]] == family[:3]
  assert all('"tensorize"' in f for f in family) and not any(r.steps in family for r in rows[3:])


def test_results_agree_within_a_half_outputs_resolution():
  import numpy as np
  from minicomp.search.measure import results_agree
  want = np.array([100.0, 0.01, -3.0], np.float32)
  half = want.astype(np.float16)
  assert results_agree([half], [want], 1e-3, 1e-3)
  assert results_agree([half + np.float16(0.0625)], [want], 1e-3, 1e-3)            # one ulp at 100
  assert not results_agree([half + np.float16(0.25)], [want], 1e-3, 1e-3)
  assert not results_agree([want + np.float32(0.0625)], [want], 1e-3, 1e-3)         # float32: no widening


def test_collect_then_calibrate_from_the_command_line(h100, tmp_path, capsys):
  from minicomp.cli import main
  assert main(["collect", "--workload", SMALL[0], "--workload", SMALL[1], "--per-task", "3"]) == 0
  out = capsys.readouterr().out
  assert "6 programs timed on NVIDIA H100 80GB HBM3 (sm_90)" in out and "minicomp calibrate --arch sm_90" in out
  assert len(T.read(T.default_path("sm_90"))) == 6
  assert main(["calibrate", "--arch", "sm_90"]) == 0
  from minicomp.target import get_device
  cal = C.active(get_device("h100"))
  assert cal.source == str(C.user_path("sm_90")) and cal.provenance["gpus"] == ["NVIDIA H100 80GB HBM3"]
  assert cal.provenance["programs"] == 6


def test_collect_refuses_bad_workloads_and_counts(h100, tmp_path):
  from minicomp.errors import UsageError
  with pytest.raises(UsageError, match="not a call of a minicomp.workloads function"):
    K.collect(["os.system('true')"], out=tmp_path / "t.jsonl", progress=False)
  with pytest.raises(UsageError, match="per_task"):
    K.collect(SMALL, per_task=0, out=tmp_path / "t.jsonl", progress=False)


def test_collect_without_a_gpu_says_so(monkeypatch, capsys):
  from minicomp.cli import main
  from minicomp.codegen.driver import gpu_available
  if gpu_available():
    pytest.skip("a GPU is usable here: this checks the message on a machine without one")
  monkeypatch.setenv("MINICOMP_CACHE_DIR", "/tmp/minicomp-test-collect-nogpu")
  assert main(["collect", "--workload", SMALL[0]]) == 2
  assert "NoGPUError" in capsys.readouterr().err


def _small_model(tmp_path):
  import onnx
  from minicomp import zoo
  path = tmp_path / "block.onnx"
  onnx.save(zoo.residual_block(c=4, hw=6)[0], path)
  return path


def test_collect_a_models_heaviest_tasks_checked_against_their_tensor_expressions(h100, tmp_path):
  out = tmp_path / "t.jsonl"
  done = K.collect((), per_task=2, out=out, progress=False, model=_small_model(tmp_path), max_tasks=1)
  assert (done.timed, done.wrong, done.failed) == (2, 0, 0)
  rows = T.read(out)
  assert len({r.task for r in rows}) == 1 and rows[0].task.startswith("Conv+Add+Relu 1x4x6x6 [")   # the heavier
  assert rows[0].workload is None and rows[0].correct and rows[0].facts["launches"][0]["blocks"] >= 1


def test_a_model_task_with_a_wrong_reference_is_marked_wrong(h100, tmp_path, monkeypatch):
  from minicomp.ir import reference as R
  real = R.evaluate_dag
  monkeypatch.setattr(R, "evaluate_dag", lambda dag, args: [o + 1.0 for o in real(dag, args)])
  done = K.collect((), per_task=2, out=tmp_path / "t.jsonl", progress=False, model=_small_model(tmp_path), max_tasks=1)
  assert (done.timed, done.wrong) == (2, 2)


def test_a_model_task_reading_integers_the_model_computes_is_skipped(h100, tmp_path, monkeypatch, caplog):
  """Indices the model computes have a valid range only the model knows: such a task is skipped, said in the log,
  and the next one is collected in its place."""
  from minicomp import compiler
  from minicomp.graph.tasks import Task
  from minicomp.ir.dag import ComputeDAG
  from minicomp import workloads as W
  gather, mm = W.from_call("embedding(6, 11, 4)"), W.from_call("matmul(8, 8, 8)")
  tasks = [(Task("g", ComputeDAG(gather.outputs), "injective", ops=["Gather"]), [None, None]),
           (Task("m", ComputeDAG(mm.outputs), "data_reuse", ops=["MatMul"]), [None, None])]
  monkeypatch.setattr(compiler, "model_tasks", lambda *a, **k: tasks)
  done = K.collect((), per_task=2, out=tmp_path / "t.jsonl", progress=False, model="any.onnx", max_tasks=1)
  assert (done.timed, done.wrong) == (2, 0)
  assert {r.task for r in T.read(tmp_path / "t.jsonl")} == {"MatMul 8x8 [m]"}
  assert "not collected" in caplog.text and "integers the model computes" in caplog.text


def test_collect_a_model_from_the_command_line(h100, tmp_path, capsys):
  from minicomp.cli import main
  assert main(["collect", "--model", str(_small_model(tmp_path)), "--tasks", "2", "--per-task", "1",
               "-o", str(tmp_path / "t.jsonl")]) == 0
  assert "2 programs timed on NVIDIA H100 80GB HBM3 (sm_90)" in capsys.readouterr().out
  assert len({r.task for r in T.read(tmp_path / "t.jsonl")}) == 2
  assert main(["collect", "--model", str(tmp_path / "block.onnx"), "--tasks", "0"]) == 2
  assert "--tasks) must be at least 1, not 0" in capsys.readouterr().err


def test_a_bad_model_is_refused_before_anything_is_timed(h100, tmp_path):
  from minicomp.errors import ModelError
  out = tmp_path / "t.jsonl"
  with pytest.raises(ModelError, match="no ONNX file"):
    K.collect(SMALL, per_task=2, out=out, progress=False, model=tmp_path / "missing.onnx")
  assert not out.exists() and not any(c[0] == "launch" for c in h100.calls)
