"""The compiler as a flat list of named phases: the list, ``dump_after`` / ``dump_dir``, ``--dump-after``."""
import re
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

import minicomp as mc
from minicomp import zoo
from minicomp.compiler import PHASE_NAMES, PHASES
from minicomp.model_parts import CompileStats

ROOT = Path(__file__).resolve().parents[1]
PER_TASK = ("schedule", "lower", "emit", "nvrtc")


@pytest.fixture(scope="module")
def dumped(tmp_path_factory):
  """A ResNet block compiled once (Gensor's schedules) with every phase dumped: (model, {file name: text})."""
  d = tmp_path_factory.mktemp("dumps")
  cm = mc.compile(zoo.residual_block()[0], target="sm_86", dump_dir=d)
  return cm, {p.name: p.read_text() for p in d.iterdir()}


def _file(files: dict, phase: str, task: int | None = None) -> str:
  stem = f"{PHASE_NAMES.index(phase) + 1:02d}-{phase}" + ("" if task is None else f"-task{task}")
  return files[stem + (".cu" if phase == "emit" else ".txt")]


def test_phase_list_is_the_documented_one():
  assert PHASE_NAMES == ("import", "fold", "precision", "layout", "partition", "tasks", "schedule", "lower", "emit", "nvrtc", "link")
  arch = (ROOT / "docs" / "architecture.md").read_text()
  assert "    " + " -> ".join(PHASE_NAMES) + "\n" in arch
  for ph in PHASES:   # the diagram names each phase with the function that runs it
    assert re.search(rf"\|  {ph.name} +{ph.run.__name__} ", arch), ph.name
  assert " -> ".join(PHASE_NAMES) in (ROOT / "docs" / "onnx.md").read_text().replace("\n", " ")


def test_one_file_per_phase_and_task(dumped):
  cm, files = dumped
  assert len(cm.tasks) == len(cm.kernels) == 2
  want = {f"{i:02d}-{n}.txt" for i, n in enumerate(PHASE_NAMES, 1) if n not in PER_TASK}
  want |= {f"{i:02d}-{n}-task{k}{'.cu' if n == 'emit' else '.txt'}" for i, n in enumerate(PHASE_NAMES, 1)
           if n in PER_TASK for k in range(2)}
  assert set(files) == want


def test_graph_partition_and_tasks_texts(dumped):
  cm, files = dumped
  imported, folded = _file(files, "import"), _file(files, "fold")
  assert imported.startswith("graph residual_block: opset 17, 7 nodes") and "input x: float32[1, 8, 10, 10]" in imported
  assert re.search(r"^BatchNormalization_7: BatchNormalization\(conv2_0, ", imported, re.M)
  assert "BatchNormalization" not in folded and "5 nodes" in folded            # folded into the convolutions
  assert re.search(r"^Conv_2: Conv\(x, Conv_2_bnfold_w \(const \[8, 8, 3, 3\]\), .*pads=\[1, 1, 1, 1\]", folded, re.M)
  part = _file(files, "partition")
  assert part.splitlines()[:3] == ["2 fused groups (kernels), 0 views",
                                   "group 0: Conv+Relu  anchor Conv Conv_2  reads x  -> relu8_0",
                                   "group 1: Conv+Add+Relu  anchor Conv Conv_10  reads relu8_0, x  -> relu17_0"]
  tasks = _file(files, "tasks")
  for k, t in enumerate(cm.tasks):
    assert f"task{k}: key {t.key}  kind data_reuse  weight 1  ops {'+'.join(t.ops)}  flops {t.flops}" in tasks
  conv = r"^  conv_conv\[ax0, ax1, ax2, ax3\]: float32\[1, 8, 10, 10\] = sum\(.*axis=\[rc, rk0, rk1\]\)"
  assert re.search(conv, tasks, re.M)
  assert "Conv_2" not in tasks      # the model's names stay out of the tensor expressions (and the CUDA)
  assert tasks.endswith("launch order: task0 task1\n")


def test_schedule_lower_emit_nvrtc_texts(dumped):
  cm, files = dumped
  for k, kern in enumerate(cm.kernels):
    sched = _file(files, "schedule", k)
    assert re.match(rf"task{k} \({re.escape('+'.join(cm.tasks[k].ops))}\): (gensor|rules) schedule, \d+ steps\n", sched)
    assert "@blockIdx.x" in sched and "@threadIdx.x" in sched and "Stage conv_conv " in sched
    low = _file(files, "lower", k)
    (launch,) = kern.plan.launches
    assert f"kernel {launch.kernel}  grid={launch.grid}  block={launch.block}" in low
    assert "param x: float32[1, 8, 10, 10] global (input)" in low and "sync_threads()" in low
    # every loop the CUDA C has is a loop of the loop nest, with the same extent
    loops = set(re.findall(r"^\s*for (\w+) in range\((\d+)\):", low, re.M))
    cuda_loops = set(re.findall(r"for \(int (\w+) = 0; \1 < (\d+); \+\+\1\)", kern.source))
    assert cuda_loops and cuda_loops <= loops
    assert _file(files, "emit", k) == kern.source + "\n" and "__global__" in kern.source
    res = kern.resources
    assert (f"{launch.kernel}: registers {res.registers}, shared {res.shared_bytes} B, spill stores "
            f"{res.spill_stores} B, spill loads {res.spill_loads} B") in _file(files, "nvrtc", k)
    assert res.registers > 0
  assert _file(files, "link") == cm.summary() + "\n"


def test_stats_per_phase_and_declared_fields(dumped, tmp_path):
  cm, _ = dumped
  st = cm.stats
  assert isinstance(st, CompileStats) and tuple(st.phases) == PHASE_NAMES
  assert st.frontend == pytest.approx(st.phases["import"] + st.phases["fold"] + st.phases["precision"] + st.phases["layout"])
  assert st.partition == pytest.approx(st.phases["partition"] + st.phases["tasks"])
  assert (st.tasks, st.calls) == (2, 2) and st.build > 0 and st.nvrtc > 0
  assert [t.key for t in cm.tasks] == [c.task for c in cm.calls]
  loaded = mc.load(cm.save(tmp_path / "m"))            # a saved model keeps no tasks nor compile stats
  assert loaded.tasks == [] and loaded.stats is None


def test_dump_after_prints_to_stderr(capsys):
  model = zoo.residual_block()[0]
  mc.compile(model, schedules="rules", dump_after="emit")
  err = capsys.readouterr().err
  assert re.findall(r"^===== minicomp: after (.*) =====$", err, re.M) == ["emit: task0", "emit: task1"]
  assert err.count("__global__") == 2
  mc.compile(model, schedules="rules", dump_after=["link", "partition,tasks"])   # printed in phase order
  err = capsys.readouterr().err
  assert re.findall(r"^===== minicomp: after (.*) =====$", err, re.M) == ["partition", "tasks", "link"]


def test_tuned_schedules_are_built_by_lower_emit_nvrtc_and_fall_back(monkeypatch, capsys, caplog, tmp_path):
  """A tuning record's schedule is built by the phases after schedule, as ``mc.build`` would; one that fails
  there (NVRTC here) falls back to the task's default kernel, with a warning."""
  import minicomp.codegen.kernel as K
  import minicomp.search.tune as T
  from minicomp.graph.schedules import default_schedule
  model = zoo.residual_block()[0]
  rules = mc.compile(model, schedules="rules")
  records = {t.key: default_schedule(t.dag, simple=True).to_json() for t in rules.tasks}
  monkeypatch.setattr(T, "tune_tasks", lambda tasks, tgt, **kw: records)
  t1 = rules.tasks[1]
  tuned1 = mc.build(mc.Schedule.from_json(t1.dag, records[t1.key]), "sm_86", name="task1").source
  real = K.compile_cuda

  def failing(src, tgt, options=()):
    if src == tuned1: raise mc.NVRTCError("injected failure")   # the tuned kernel of task1
    return real(src, tgt, options)
  monkeypatch.setattr(K, "compile_cuda", failing)
  cm = mc.compile(model, schedules="rules", log_file=str(tmp_path / "log.jsonl"), dump_after="schedule")
  assert re.findall(r"^task\d \(.*\): (\w+) schedule", capsys.readouterr().err, re.M) == ["tuned", "tuned"]
  t0 = cm.tasks[0]
  assert cm.kernels[0].source == mc.build(mc.Schedule.from_json(t0.dag, records[t0.key]), "sm_86", name="task0").source
  assert cm.kernels[0].source != rules.kernels[0].source
  assert cm.kernels[1].source == rules.kernels[1].source
  assert "its best record no longer builds (injected failure)" in caplog.text


def test_loop_text_of_a_matmul():
  from minicomp.ir.loop_text import program_text
  A = mc.placeholder((16, 12), "float32", name="A")
  B = mc.placeholder((12, 20), "float32", name="B")
  k = mc.reduce_axis(12, name="k")
  C = mc.compute((16, 20), lambda i, j: mc.sum(A[i, k] * B[k, j], axis=k), name="C")
  s = mc.Schedule([C])
  i, j = s.axis(C)
  s.bind(C, i, "blockIdx.x")
  s.bind(C, j, "threadIdx.x")
  assert program_text(s.lower("mm")) == """\
input A: float32[16, 12]
input B: float32[12, 20]
output C: float32[16, 20]
kernel mm_kernel  grid=(16, 1, 1)  block=(20, 1, 1)  index=int32
  param A: float32[16, 12] global (input)
  param B: float32[12, 20] global (input)
  param C: float32[16, 20] global (output)
  bind i = blockIdx.x
  bind j = threadIdx.x
  # stage C
  C[i * 20 + j] = 0.0
  for k in range(12):
    C[i * 20 + j] = C[i * 20 + j] + A[i * 12 + k] * B[k * 20 + j]"""


@pytest.mark.parametrize("bad", ["lowr", "lower,bogus", ["tasks", "Emit"], 3])
def test_unknown_phase_is_refused_before_any_work(bad):
  with pytest.raises(mc.CompileError) as e:
    mc.compile(b"not an onnx model", dump_after=bad)      # the bytes would be a ModelError at import
  assert ", ".join(PHASE_NAMES) in str(e.value)


def test_cli_dump_after(tmp_path):
  path = tmp_path / "m.onnx"
  onnx.save(zoo.residual_block()[0], str(path))
  run = lambda *a: subprocess.run([sys.executable, "-m", "minicomp.cli", "compile", str(path), "-q", "--schedules",
                                   "rules", *map(str, a)], capture_output=True, text=True)
  r = run("--dump-after", "lower", "--dump-after", "nvrtc,link")
  assert r.returncode == 0, r.stderr
  heads = re.findall(r"^===== minicomp: after (.*) =====$", r.stderr, re.M)
  assert heads == ["lower: task0", "lower: task1", "nvrtc: task0", "nvrtc: task1", "link"]
  assert re.search(r"^  for \w+ in range\(\d+\):", r.stderr, re.M) and "registers" in r.stderr
  assert "2 kernel calls" in r.stdout and "saved to" not in r.stdout      # without -o nothing is saved
  r = run("--dump-dir", tmp_path / "d", "--dump-after", "emit", "-o", tmp_path / "out")
  assert r.returncode == 0, r.stderr
  assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["09-emit-task0.cu", "09-emit-task1.cu"]
  assert (tmp_path / "out" / "manifest.json").is_file()
  r = run("--dump-after", "lowr")
  assert r.returncode == 2 and "unknown phase 'lowr'" in r.stderr and "import, fold, precision, layout, partition" in r.stderr
  r = run()
  assert r.returncode == 2 and "-o/--output" in r.stderr
