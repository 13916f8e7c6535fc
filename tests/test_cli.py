"""The command line's small promises: targets in any case, dims by name, `info` on a model with dynamic
dims, a closed pipe, a bad -o refused before compiling, `run` saying what it ran on."""
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import minicomp as mc
from minicomp.cli import main
from onnx_harness import run_ort


def _dynamic(tmp_path):
  """Relu(x + b) with x of shape (batch, 3): a dynamic dim called batch."""
  x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])
  y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])
  b = onnx.numpy_helper.from_array(np.array([0.5, -1.0, 2.0], np.float32), "b")
  g = helper.make_graph([helper.make_node("Add", ["x", "b"], ["t"]), helper.make_node("Relu", ["t"], ["y"])],
                        "dyn", [x], [y], [b])
  m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
  m.ir_version = 8
  onnx.save(m, tmp_path / "dyn.onnx")
  return m, tmp_path / "dyn.onnx"


def test_targets_are_read_in_any_case():
  assert mc.Target("SM_86").arch == mc.Target("sm86").arch == "sm_86" and mc.Target("Sm90").arch == "sm_90"


def test_a_dynamic_dim_is_given_by_its_name(tmp_path, capsys):
  m, path = _dynamic(tmp_path)
  x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
  cm = mc.compile(m, target="sm_80", input_shapes={"batch": 4}, schedules="rules")
  np.testing.assert_allclose(cm.run({"x": x}, device="cpu")[0], run_ort(m, {"x": x})[0], rtol=1e-6)
  with pytest.raises(mc.ShapeError, match="neither inputs .* nor symbolic dims"):
    mc.compile(m, input_shapes={"seq": 4})
  with pytest.raises(mc.ShapeError, match="--input-shape batch=1"):   # the message speaks both languages
    mc.compile(m)
  assert main(["compile", str(path), "--input-shape", "batch=4", "-o", str(tmp_path / "out"), "-q"]) == 0


def test_info_lists_the_ops_of_a_model_with_dynamic_dims(tmp_path, capsys):
  _, path = _dynamic(tmp_path)
  assert main(["info", str(path)]) == 0
  out = capsys.readouterr().out
  assert "Add" in out and "Relu" in out and "supported" in out and "--input-shape" in out


def test_a_closed_pipe_ends_info_quietly(tmp_path):
  """`minicomp info model.onnx | head`: the reader leaves; no BrokenPipeError traceback."""
  _, path = _dynamic(tmp_path)
  code = f"""
import os, sys
r, w = os.pipe(); os.close(r); os.dup2(w, sys.stdout.fileno())
from minicomp.cli import main
sys.exit(main(["info", {str(path)!r}]))
"""
  p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
  assert p.returncode == 141 and "Traceback" not in p.stderr, p.stderr


def test_a_bad_output_folder_is_refused_before_compiling(tmp_path, capsys, monkeypatch):
  import minicomp.compiler as C
  _, path = _dynamic(tmp_path)
  (tmp_path / "taken").write_text("a file")
  monkeypatch.setattr(C, "compile", lambda *a, **k: pytest.fail("compiled before checking -o"))
  assert main(["compile", str(path), "--input-shape", "batch=2", "-o", str(tmp_path / "taken")]) == 2
  assert "is not a folder" in capsys.readouterr().err
  for bad in (tmp_path / "taken" / "below" / "out", "/proc/minicomp-out"):    # (under a file; where no folder can be)
    assert main(["compile", str(path), "--input-shape", "batch=2", "-o", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "could not save to" in err and "Traceback" not in err
  assert not list(tmp_path.glob(".*probe*"))


def _compiled(tmp_path, capsys, batch: int) -> str:
  """`minicomp compile` of :func:`_dynamic`'s model at ``batch`` into tmp_path/out (its output read away)."""
  _, path = _dynamic(tmp_path)
  assert main(["compile", str(path), "--input-shape", f"batch={batch}", "-o", str(tmp_path / "out"), "-q"]) == 0
  capsys.readouterr()
  return str(tmp_path / "out")


def test_run_says_what_it_ran_on(tmp_path, capsys):
  out = _compiled(tmp_path, capsys, 2)
  np.save(tmp_path / "x.npy", np.ones((2, 3), np.float32))
  assert main(["run", out, "--input", f"x={tmp_path / 'x.npy'}", "--device", "cpu"]) == 0
  assert "ran on the CPU simulator" in capsys.readouterr().err


def test_info_on_a_compiled_folder_lists_its_kernels(tmp_path, capsys):
  """`minicomp info FOLDER` on what `minicomp compile -o FOLDER` wrote: the kernels as compile printed them (it said
  "no ONNX file" before)."""
  assert main(["info", _compiled(tmp_path, capsys, 4)]) == 0
  out = capsys.readouterr().out
  assert "kernel calls" in out and "Add+Relu" in out and "target sm_86" in out


def test_run_without_its_inputs_says_how_to_give_them(tmp_path, capsys):
  assert main(["run", _compiled(tmp_path, capsys, 4)]) == 2
  err = capsys.readouterr().err
  assert "FeedError" in err and "--input NAME=FILE.npy" in err and "x [4, 3] float32" in err
