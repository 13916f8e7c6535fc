"""Hostile inputs, round 2 (issue 51): names that are C keywords or directives, output paths, .npy
files that lie, special files, deep and wide elementwise chains. Each test failed before its fix."""
import os
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import minicomp as mc
from minicomp.cli import main
from onnx_harness import make_model, run_ort


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
  """A saved Gemm + Relu model with input x (4, 16) float32."""
  rng = np.random.default_rng(0)
  w, b = rng.standard_normal((8, 16)).astype(np.float32), rng.standard_normal(8).astype(np.float32)
  nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["t"], transB=1), helper.make_node("Relu", ["t"], ["y"])]
  m = make_model(nodes, {"x": np.zeros((4, 16), np.float32)}, ["y"], {"w": w, "b": b})
  d = tmp_path_factory.mktemp("saved")
  return m, mc.compile(m, schedules="rules", progress=False).save(d / "gemm")


def _one_error_line(capsys, match):
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and match in err[0] and "Traceback" not in err[0], err
  return err[0]


def _special_path(special: str, tmp_path: Path):
  """A path that is no regular file: a named pipe, a folder, or a device such as ``/dev/zero`` as given."""
  if special == "fifo":
    os.mkfifo(tmp_path / "pipe")
    return tmp_path / "pipe"
  return tmp_path if special == "folder" else special


# ---- `minicomp run` output paths: exactly the file named, or a one-line refusal before any work
@pytest.mark.parametrize("flag, name", [("--output", "y"), ("-o", "y.out"), ("-o", "y.npy")])
def test_run_writes_exactly_the_output_file_named(saved, tmp_path, flag, name):
  m, folder = saved
  x = np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32)
  np.save(tmp_path / "x.npy", x)
  assert main(["run", str(folder), "--input", f"x={tmp_path / 'x.npy'}", flag, str(tmp_path / name)]) == 0
  assert sorted(p.name for p in tmp_path.iterdir()) == sorted({"x.npy", name})   # no y.npy beside y, no temp file
  np.testing.assert_allclose(np.load(tmp_path / name), run_ort(m, {"x": x})[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("where, match", [("folder", "is a folder"), ("nowhere/y.npy", "no folder")])
def test_run_refuses_an_output_it_cannot_write_before_running(saved, tmp_path, capsys, where, match):
  (tmp_path / "folder").mkdir()
  np.save(tmp_path / "x.npy", np.zeros((4, 16), np.float32))
  assert main(["run", str(saved[1]), "--input", f"x={tmp_path / 'x.npy'}", "-o", str(tmp_path / where)]) == 2
  _one_error_line(capsys, match)


# ---- .npy inputs that lie, and special files: checked before anything is allocated or waited on
def test_npy_header_claiming_2_to_the_40_elements_is_refused_without_allocating(saved, tmp_path, capsys):
  path = tmp_path / "huge.npy"
  with open(path, "wb") as f:
    np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": (2 ** 20, 2 ** 20)})
  assert main(["run", str(saved[1]), "--input", f"x={path}"]) == 2
  _one_error_line(capsys, "expected shape [4, 16]")


def test_npy_of_the_wrong_dtype_is_a_feed_error(saved, tmp_path, capsys):
  np.save(tmp_path / "x.npy", np.zeros((4, 16), np.float64))
  assert main(["run", str(saved[1]), "--input", f"x={tmp_path / 'x.npy'}"]) == 2
  _one_error_line(capsys, "expected dtype float32")


@pytest.mark.parametrize("special", ["fifo", "/dev/zero", "folder"])
def test_special_files_as_inputs_are_refused_not_read(saved, tmp_path, capsys, special):
  assert main(["run", str(saved[1]), "--input", f"x={_special_path(special, tmp_path)}"]) == 2
  _one_error_line(capsys, "not a regular file")


# ---- names: the model's names never reach the CUDA source; TE names are mangled to safe identifiers
HOSTILE_NAMES = ["int", "float", "return", "class", "asm", "nullptr", "and", "max", "expf", "float4", "threadIdx",
                 "__global__", "__restrict__", "x__attribute__y", "_Pragma", "INFINITY", "FLT_MAX", "NAN", "stdin",
                 "SIGINT", "mc_floordiv", "a/b:c", "0start", "naïve", "/* c */", "line\\", "#include <x>"]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_hostile_names_for_inputs_outputs_nodes_and_initializers_compile_save_and_load(tmp_path, name):
  """The name of an input, an output, every node and an initializer; run, then saved and loaded (a name
  with ``__attribute`` made the saved kernel fail the load-time check), against onnxruntime."""
  rng = np.random.default_rng(0)
  x, w = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((4, 5)).astype(np.float32)
  nodes = [helper.make_node("MatMul", [name, name + "_w"], [name + "_t"], name=name),
           helper.make_node("Relu", [name + "_t"], [name + "_y"], name=name + "2")]
  m = make_model(nodes, {name: x}, [name + "_y"], {name + "_w": w})
  want = run_ort(m, {name: x})[0]
  cm = mc.compile(m, target="sm_80", schedules="rules", progress=False)
  np.testing.assert_allclose(cm.run({name: x}, device="cpu")[0], want, rtol=1e-5, atol=1e-6)
  assert all(name not in k.source for k in cm.kernels if len(name) > 3 and not name.isidentifier())
  loaded = mc.load(cm.save(tmp_path / "m"))
  assert loaded.output_names == [name + "_y"]
  np.testing.assert_allclose(loaded.run({name: x}, device="cpu")[0], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["int", "NAN", "x__attribute__y", "_Pragma", "stdin", "expf", "mc_v"])
def test_tensor_expression_names_that_are_not_c_identifiers_build_and_run(name):
  A = mc.placeholder((8, 6), name=name)
  B = mc.compute((8, 6), lambda i, j: A[i, j] * 2.0 + 1.0, name=name + "out")
  s = mc.Schedule([B])
  i, j = s.axis(B)
  s.bind(B, i, "blockIdx.x"); s.bind(B, j, "threadIdx.x")
  a = np.random.default_rng(0).standard_normal((8, 6)).astype(np.float32)
  np.testing.assert_allclose(mc.build(s, target="sm_80")(a, device="cpu"), a * 2 + 1, rtol=1e-6)


def test_two_names_that_mangle_to_one_identifier_are_refused():
  A = mc.placeholder((4,), name="a b")
  B = mc.placeholder((4,), name="a_b")
  C = mc.compute((4,), lambda i: A[i] + B[i], name="c")
  with pytest.raises(mc.LoweringError, match="'a b' and 'a_b' both become the C identifier 'a_b'"):
    mc.build(mc.Schedule([C]), target="sm_80")


def test_every_macro_of_the_simulators_translation_unit_is_reserved():
  """c_macros.txt lists what g++ defines after cuda_shim.h; a compiler or libc that adds a macro fails here
  (regenerate the file with the command at its top)."""
  import shutil
  import subprocess
  from importlib import resources

  from minicomp.ir.names import RESERVED
  if shutil.which("g++") is None: pytest.skip("no g++ on this machine (the CPU simulator needs one)")
  shim = resources.files("minicomp.codegen").joinpath("cuda_shim.h")
  out = subprocess.run(["g++", "-std=c++17", "-dM", "-E", "-x", "c++", str(shim)], capture_output=True, text=True,
                       check=True).stdout
  macros = {line.split()[1].split("(")[0] for line in out.splitlines() if line.startswith("#define ")}
  assert {m for m in macros if not m.startswith("_")} - RESERVED == set()


def test_every_function_the_emitter_calls_is_reserved():
  from minicomp.codegen import cuda
  from minicomp.ir.names import RESERVED
  called = set(cuda._F32_CALL) | set(cuda._F32_CALL.values()) | {"fmaxf", "fminf", "max", "min", "fabs"}
  assert called - RESERVED == set()


# ---- deep and wide elementwise chains: the CUDA text grows with the distinct nodes, walks are iterative
def _chain(n: int, op: str = "Relu"):
  nodes = [helper.make_node(op, ["x" if k == 0 else f"v{k - 1}"], [f"v{k}"]) for k in range(n)]
  x = (np.random.default_rng(0).random((4, 8)) - 0.5).astype(np.float32)
  return make_model(nodes, {"x": x}, [f"v{n - 1}"]), x


@pytest.mark.parametrize("n", [16, 40, 300])
def test_chained_activations_make_linear_cuda_text(n):
  """Relu reads its input twice (select(v < 0, 0, v)): 16 made 34 KB of CUDA, 40 never left NVRTC."""
  m, x = _chain(n)
  cm = mc.compile(m, target="sm_80", schedules="rules", progress=False)
  assert max(len(k.source) for k in cm.kernels) < 100 * min(n, 64) + 1000   # (a kernel takes 64 nodes at most)
  np.testing.assert_allclose(cm.run({"x": x}, device="cpu")[0], run_ort(m, {"x": x})[0], atol=1e-6)


def test_written_out_tanh_gelus_make_linear_cuda_text():
  """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) as eight nodes, seven in a row: 2.8 MB of CUDA before."""
  c = {"c3": np.float32(0.044715), "k": np.float32(np.sqrt(2 / np.pi)), "one": np.float32(1), "half": np.float32(0.5),
       "three": np.float32(3)}
  nodes, prev = [], "x"
  for k in range(7):
    p = f"g{k}_"
    nodes += [helper.make_node("Pow", [prev, "three"], [p + "p"]), helper.make_node("Mul", [p + "p", "c3"], [p + "m"]),
              helper.make_node("Add", [prev, p + "m"], [p + "a"]), helper.make_node("Mul", [p + "a", "k"], [p + "b"]),
              helper.make_node("Tanh", [p + "b"], [p + "t"]), helper.make_node("Add", [p + "t", "one"], [p + "u"]),
              helper.make_node("Mul", [prev, p + "u"], [p + "v"]), helper.make_node("Mul", [p + "v", "half"], [p + "y"])]
    prev = p + "y"
  x = (np.random.default_rng(0).random((4, 8)) - 0.5).astype(np.float32)
  m = make_model(nodes, {"x": x}, [prev], c)
  cm = mc.compile(m, target="sm_80", schedules="rules", progress=False)
  assert len(cm.kernels) == 1 and len(cm.kernels[0].source) < 4000
  np.testing.assert_allclose(cm.run({"x": x}, device="cpu")[0], run_ort(m, {"x": x})[0], atol=1e-6)


def test_a_chain_of_3000_nodes_compiles_in_kernels_of_bounded_size():
  """3,000 nodes hit Python's recursion limit; fusion now stops at MAX_GROUP_NODES nodes a kernel."""
  from minicomp.graph.partition import MAX_GROUP_NODES
  m, x = _chain(3000)
  cm = mc.compile(m, target="sm_80", schedules="rules", progress=False)
  assert len(cm.calls) == -(-3000 // MAX_GROUP_NODES)
  np.testing.assert_allclose(cm.run({"x": x}, device="cpu")[0], run_ort(m, {"x": x})[0], atol=1e-6)


def test_a_tensor_expression_chain_of_3000_stages_builds_its_dag():
  A = mc.placeholder((4,), name="A")
  t = A
  for k in range(3000): t = mc.compute((4,), lambda i, t=t: t[i] + 1.0, name=f"s{k}")
  dag = mc.ComputeDAG([t])
  assert len(dag.tensors) == 3001 and dag.tensors[0] is A and dag.tensors[-1] is t


def test_shared_subexpressions_are_named_only_where_computing_them_first_is_safe():
  from minicomp.codegen.cse import shared_subexpressions
  from minicomp.ir.expr import exp, select, var
  X = mc.placeholder((100,), name="X")
  i = var("i")
  big = exp(exp(exp(exp(i * 1.5 + 2.0) * 3.0 + 1.0)))      # pure arithmetic, 14 nodes
  guarded_load = X[i * 3 + 2] * X[i * 3 + 2] * 2.0           # a load a guard keeps in bounds
  e = select(i < 30, guarded_load * guarded_load + big * big, big * big * 2.0)
  named = shared_subexpressions([e], min_repeat=8)
  assert big in named                                        # read in both branches: safe to compute first
  assert all(n.op.name != "LOAD" for n in named) and guarded_load not in named
  loaded = X[i] * X[i] * X[i] + 1.0
  assert any(n.op.name == "LOAD" for n in shared_subexpressions([loaded * loaded], min_repeat=4))   # unguarded


# ---- concurrency: threads compiling at once, processes saving to one folder at once
def test_three_threads_compile_run_and_save_three_models_at_once(tmp_path):
  """The op registry was filled lazily with its flag set first: a second thread saw MatMul missing."""
  import subprocess
  import sys
  script = f"""
import sys, threading, numpy as np
sys.path.insert(0, {str(Path(__file__).parent)!r})
import minicomp as mc
from minicomp import zoo
from onnx_harness import run_ort
models = [zoo.residual_block(), zoo.generator(), zoo.conv3d_block()]
barrier, errors = threading.Barrier(3), []
def work(k):
  m, feeds = models[k]
  barrier.wait()
  try:
    cm = mc.compile(m, target="sm_80", schedules="rules")
    y = cm.run(feeds, device="cpu")[0]
    assert np.allclose(y, run_ort(m, feeds)[0], rtol=1e-4, atol=1e-4)
    y2 = mc.load(cm.save({str(tmp_path)!r} + f"/m{{k}}")).run(feeds, device="cpu")[0]
    assert np.array_equal(y, y2)
  except BaseException as e:
    errors.append(repr(e))
ts = [threading.Thread(target=work, args=(k,)) for k in range(3)]
[t.start() for t in ts]; [t.join() for t in ts]
print("ERRORS", errors)
"""
  r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
  assert "ERRORS []" in r.stdout, r.stdout + r.stderr


def test_a_save_while_another_holds_the_folder_is_a_clear_error(saved, tmp_path):
  import fcntl
  m, folder = saved
  cm = mc.load(folder)
  target = tmp_path / "m"
  cm.save(target)
  with open(tmp_path / ".m.lock", "a") as f:
    fcntl.flock(f, fcntl.LOCK_EX)                      # another process saving to m
    with pytest.raises(mc.SaveError, match="another process is saving"):
      cm.save(target)
  x = np.zeros((4, 16), np.float32)
  np.testing.assert_array_equal(mc.load(target).run({"x": x}, device="cpu")[0], cm.run({"x": x}, device="cpu")[0])


def _save_many(args):
  folder, target, n = args
  import minicomp as mc
  cm, lost = mc.load(folder), 0
  for _ in range(n):
    try: cm.save(target)
    except mc.SaveError: lost += 1
  return lost


def test_two_processes_saving_to_one_folder_end_with_one_complete_model(saved, tmp_path):
  import multiprocessing as mp
  m, folder = saved
  target = str(tmp_path / "m")
  with mp.get_context("spawn").Pool(2) as pool:
    pool.map(_save_many, [(str(folder), target, 6)] * 2)   # every failure is a SaveError (else map raises)
  x = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)
  np.testing.assert_allclose(mc.load(target).run({"x": x}, device="cpu")[0], run_ort(m, {"x": x})[0], rtol=1e-5, atol=1e-6)
  assert not list(tmp_path.glob(".m.saving-*")) and not list(tmp_path.glob(".m.old-*"))


def test_leftovers_of_a_killed_save_are_tidied_and_a_model_renamed_aside_restored(saved, tmp_path):
  import shutil
  m, folder = saved
  cm = mc.load(folder)
  shutil.copytree(folder, tmp_path / ".m.old-deadbeef0000")        # killed between the two renames
  (tmp_path / ".m.saving-deadbeef0001").mkdir()                    # killed while writing
  (tmp_path / ".m.saving-deadbeef0001" / "weights.npz").write_bytes(b"\0" * 1000)
  cm.save(tmp_path / "m")
  assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


# ---- full disks and limits: a clear error, nothing lost; the simulator builds elsewhere
def _limited(code: str, limit: int, env=None) -> subprocess.CompletedProcess:
  """``code`` in a fresh interpreter whose files (and its children's) may not pass ``limit`` bytes (the
  limit is set by the child itself: forking this process, which runs JAX's threads, could deadlock)."""
  import sys
  cap = f"import resource; resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))\n"
  return subprocess.run([sys.executable, "-c", cap + code], capture_output=True, text=True, timeout=600,
                        env={**os.environ, **(env or {})})


def test_save_past_a_file_size_limit_is_a_save_error_and_keeps_the_old_model(saved, tmp_path):
  m, folder = saved
  big = tmp_path / "big.onnx"
  rng = np.random.default_rng(0)
  w = rng.standard_normal((512, 256)).astype(np.float32)             # 512 KB of weights
  mb = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": np.zeros((4, 512), np.float32)}, ["y"], {"w": w})
  onnx.save(mb, big)
  import shutil
  shutil.copytree(folder, tmp_path / "m")                          # an older model in the folder
  r = _limited(f"""
import minicomp as mc
cm = mc.compile({str(big)!r}, target="sm_80", schedules="rules")
try:
  cm.save({str(tmp_path / "m")!r})
except mc.SaveError as e:
  print("SAVEERROR", e)
""", 256 * 1024)
  assert "SAVEERROR" in r.stdout and "could not save" in r.stdout, r.stdout + r.stderr[-2000:]
  x = np.zeros((4, 16), np.float32)
  assert mc.load(tmp_path / "m").run({"x": x}, device="cpu")[0].shape == (4, 8)   # the old model, intact
  assert not list(tmp_path.glob(".m.saving-*"))


@pytest.mark.parametrize("how", ["cache_is_a_file", "file_size_limit"])
def test_the_simulator_builds_without_a_usable_cache_folder(tmp_path, how):
  code = """
import numpy as np, minicomp as mc
A = mc.placeholder((64,), name="A")
B = mc.compute((64,), lambda i: A[i] * 3.0 + 0.25, name="B")
s = mc.Schedule([B]); i, = s.axis(B); o, t = s.split(B, i, 32)
s.bind(B, o, "blockIdx.x"); s.bind(B, t, "threadIdx.x")
a = np.arange(64, dtype=np.float32)
try:
  print("MATCH", np.allclose(mc.build(s, "sm_80")(a, device="cpu"), a * 3 + 0.25))
except mc.MinicompError as e:
  print("CLEAR", type(e).__name__, e)
"""
  if how == "cache_is_a_file":
    (tmp_path / "cache").write_text("not a folder")
    r = _limited(code, 2 ** 40, {"MINICOMP_CACHE_DIR": str(tmp_path / "cache")})
    assert "MATCH True" in r.stdout and "building in" in r.stderr, r.stdout + r.stderr[-2000:]
  else:   # a cold cache on a 'disk' where no file may pass 4 KB: a clear error, never a raw OSError
    r = _limited(code, 4096, {"MINICOMP_CACHE_DIR": str(tmp_path / "cold")})
    assert "MATCH True" in r.stdout or "CLEAR SimulatorError cannot write" in r.stdout, r.stdout + r.stderr[-2000:]
    assert "Traceback" not in r.stderr, r.stderr[-2000:]


# ---- special files as tuning logs: refused at once, never waited on or read without end
@pytest.mark.parametrize("special", ["fifo", "/dev/zero", "/dev/full", "folder"])
@pytest.mark.parametrize("command", ["report", "tune"])
def test_special_files_as_tuning_logs_are_refused_at_once(saved, tmp_path, capsys, special, command):
  path = _special_path(special, tmp_path)
  onnx.save(saved[0], tmp_path / "m.onnx")
  args = ["report", str(path)] if command == "report" else ["tune", str(tmp_path / "m.onnx"), "--trials", "1",
                                                            "--log", str(path), "-q"]
  assert main(args) == 2
  _one_error_line(capsys, "not a tuning log")


def test_an_overlong_line_in_a_tuning_log_is_skipped_not_read_whole(tmp_path, caplog):
  from minicomp.search import records as R
  log = tmp_path / "log.jsonl"
  log.write_bytes(b"x" * (R.MAX_LINE * 2 + 10) + b"\n")
  assert R.load_records(log) == [] and "skipping an invalid record" in caplog.text


# ---- Ctrl-C during a tuning run: one line, exit 130, the log kept
def test_ctrl_c_is_deferred_to_the_next_check_and_a_second_one_raises_at_once():
  """During the CLI's compile and tune, Ctrl-C only sets a flag (so it never lands inside JAX's native code or
  its gc callback, which made `minicomp tune` crash at exit or go on); the next check raises it."""
  import gc
  import signal
  from minicomp import progress
  before = signal.getsignal(signal.SIGINT)
  gc.disable()     # (the raised KeyboardInterrupt must not land in a gc callback, JAX's, as an unraisable warning)
  try:
    with progress.deferred_interrupts():
      progress.check_interrupt()                                        # nothing yet: no raise
      signal.raise_signal(signal.SIGINT)                                # no KeyboardInterrupt here
      with pytest.raises(KeyboardInterrupt):
        progress.check_interrupt()
      progress.check_interrupt()                                        # raised once
      signal.raise_signal(signal.SIGINT)
      with pytest.raises(KeyboardInterrupt):                            # a second Ctrl-C: at once
        signal.raise_signal(signal.SIGINT)
  finally:
    gc.enable()
  assert signal.getsignal(signal.SIGINT) is before
  progress.check_interrupt()                                            # the flag does not outlive the block


def test_ctrl_c_during_tune_ends_the_run_with_one_line_and_keeps_the_log(saved, tmp_path):
  import signal
  import sys
  import time
  onnx.save(saved[0], tmp_path / "m.onnx")
  log = tmp_path / "log.jsonl"
  p = subprocess.Popen([sys.executable, "-m", "minicomp.cli", "tune", str(tmp_path / "m.onnx"), "--trials", "400",
                        "--log", str(log), "--per-round", "8", "-q"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, start_new_session=True)   # its own process group: the terminal's Ctrl-C reaches all
  deadline = time.monotonic() + 240
  while time.monotonic() < deadline and p.poll() is None and (not log.exists() or log.read_text().count("\n") < 4):
    time.sleep(0.2)
  assert p.poll() is None, p.communicate()
  os.killpg(p.pid, signal.SIGINT)
  out, err = p.communicate(timeout=120)
  assert p.returncode == 130, (p.returncode, err[-3000:])
  assert "Traceback" not in err and err.strip().splitlines()[-1] == "minicomp: interrupted", err[-3000:]
  from minicomp.search.records import load_records
  assert len(load_records(log)) >= 4


@pytest.mark.parametrize("depth, match", [(np.inf, "depth inf must be a finite positive number"),
                                          (np.nan, "depth nan must be a finite positive number"),
                                          (1e30, "is past the 2.31 - 1 elements a dimension may have")])
def test_a_one_hot_depth_of_inf_nan_or_1e30_is_a_shape_error(depth, match):
  """int() of the depth raised OverflowError / ValueError, or Python's int past C's long did later (found by
  benchmarks/fuzz.py, seed 12, 2026-11-30)."""
  g = helper.make_graph([helper.make_node("OneHot", ["i", "depth", "v"], ["y"], axis=1)], "g",
                        [helper.make_tensor_value_info("i", TensorProto.INT64, [2])],
                        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, "d"])],
                        [numpy_helper.from_array(np.array(depth, np.float32), "depth"),
                         numpy_helper.from_array(np.array([0, 1], np.float32), "v")])
  m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
  with pytest.raises(mc.ShapeError, match=match):
    mc.compile(m, "sm_86", schedules="rules", progress=False)
