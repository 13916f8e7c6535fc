"""CompiledModel: feeds validation, save/load, summary, CLI, and bad models."""
import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import minicomp as mc
from minicomp.saved_model import FORMAT_VERSION
from onnx_harness import make_model, run_ort

rng = np.random.default_rng(0)


def _model():
  nodes = [helper.make_node("Add", ["x", "b"], ["t"], name="add0"), helper.make_node("Relu", ["t"], ["y"], name="relu0")]
  return make_model(nodes, {"x": np.zeros((2, 3), np.float32)}, ["y"], {"b": rng.standard_normal(3).astype(np.float32)})


def test_feed_errors():
  cm = mc.compile(_model(), target="sm_80")
  x = rng.standard_normal((2, 3)).astype(np.float32)
  with pytest.raises(mc.FeedError, match=r"missing inputs \['x'\].*unknown inputs \['z'\]"):
    cm.run({"z": x})
  with pytest.raises(mc.FeedError, match=r"expected shape \[2, 3\], got \[3, 2\]"):
    cm.run({"x": x.T.copy()})
  with pytest.raises(mc.FeedError, match="expected dtype float32, got float64"):
    cm.run({"x": x.astype(np.float64)})


def test_save_load_identical(tmp_path):
  m = _model()
  cm = mc.compile(m, target="sm_86")
  x = rng.standard_normal((2, 3)).astype(np.float32)
  out1 = cm.run({"x": x})
  cm.save(tmp_path / "m")
  cm2 = mc.load(tmp_path / "m")
  out2 = cm2.run({"x": x})
  np.testing.assert_array_equal(out1[0], out2[0])
  np.testing.assert_allclose(out2[0], run_ort(m, {"x": x})[0], rtol=1e-6)
  assert cm2.kernels[0].source == cm.kernels[0].source
  assert "Add+Relu" in cm.summary() and "kernel calls" in cm.summary()


def test_load_refuses_bad_folders(tmp_path):
  with pytest.raises(mc.SaveFormatError, match="no manifest.json"):
    mc.load(tmp_path)
  cm = mc.compile(_model(), target="sm_80")
  p = cm.save(tmp_path / "m")
  mf = json.loads((p / "manifest.json").read_text())
  mf["format_version"] = 99
  (p / "manifest.json").write_text(json.dumps(mf))
  with pytest.raises(mc.SaveFormatError, match="format version 99 is not supported"):
    mc.load(p)
  mf["format_version"] = FORMAT_VERSION
  (p / "manifest.json").write_text(json.dumps(mf))
  (p / "kernels" / "k0.cu").unlink()
  with pytest.raises(mc.SaveFormatError, match="incomplete or corrupted"):
    mc.load(p)
  (p / "manifest.json").write_text("{not json")
  with pytest.raises(mc.SaveFormatError, match="corrupted manifest"):
    mc.load(p)


def test_unsupported_ops_listed_all_at_once():
  nodes = [helper.make_node("Relu", ["x"], ["a"], name="r"), helper.make_node("NonMaxSuppression", ["a", "a"], ["b"], name="nms"),
           helper.make_node("Unique", ["a"], ["c"], name="uniq")]
  g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 4])],
                        [helper.make_tensor_value_info("b", TensorProto.INT64, ["n", 3]),
                         helper.make_tensor_value_info("c", TensorProto.FLOAT, ["m"])])
  m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
  with pytest.raises(mc.UnsupportedOpError) as e:
    mc.compile(m)
  msg = str(e.value)
  assert "NonMaxSuppression (node 'nms')" in msg and "Unique (node 'uniq')" in msg and "Supported ops:" in msg
  assert e.value.nodes == [("NonMaxSuppression", "nms"), ("Unique", "uniq")]


def test_dynamic_dims_need_input_shapes():
  nodes = [helper.make_node("Relu", ["x"], ["y"])]
  g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])])
  m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
  with pytest.raises(mc.ShapeError, match=r"x \['batch', 4\].*input_shapes="):
    mc.compile(m)
  cm = mc.compile(m, input_shapes={"x": (3, 4)})
  x = rng.standard_normal((3, 4)).astype(np.float32)
  np.testing.assert_allclose(cm.run({"x": x})[0], np.maximum(x, 0))
  with pytest.raises(mc.ShapeError, match=r"neither inputs \(\['x'\]\) nor symbolic dims of them \(\['batch'\]\)"):
    mc.compile(m, input_shapes={"q": (3, 4)})


def test_malformed_models():
  with pytest.raises(mc.ModelError, match="no ONNX file"):
    mc.compile("/nonexistent/model.onnx")
  with pytest.raises(mc.ModelError, match="could not parse"):
    mc.compile(b"\x00\x01garbage")
  nodes = [helper.make_node("Relu", ["x"], ["y"])]
  g = helper.make_graph(nodes, "g", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])   # x undefined
  m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
  with pytest.raises(mc.ModelError, match="checker"):
    mc.compile(m)
  m2 = _model()
  m2.opset_import[0].version = onnx.defs.onnx_opset_version() + 1
  with pytest.raises(mc.ModelError, match="newer than the installed onnx"):
    mc.compile(m2)


def test_cli_round_trip(tmp_path):
  m = _model()
  mp = tmp_path / "m.onnx"
  onnx.save(m, str(mp))
  x = rng.standard_normal((2, 3)).astype(np.float32)
  np.save(tmp_path / "x.npy", x)
  run = lambda *args: subprocess.run([sys.executable, "-m", "minicomp.cli", *map(str, args)], capture_output=True, text=True)
  r = run("info", mp)
  assert r.returncode == 0 and "Relu" in r.stdout and "supported" in r.stdout, r.stderr
  r = run("compile", mp, "--target", "sm_80", "-o", tmp_path / "out")
  assert r.returncode == 0, r.stderr
  assert "[minicomp]" in r.stderr   # progress lines
  r = run("run", tmp_path / "out", "--input", f"x={tmp_path / 'x.npy'}", "--output", tmp_path / "y.npy")
  assert r.returncode == 0, r.stderr
  np.testing.assert_allclose(np.load(tmp_path / "y.npy"), run_ort(m, {"x": x})[0], rtol=1e-6)
  r = run("run", tmp_path / "out", "--input", f"z={tmp_path / 'x.npy'}")
  assert r.returncode == 2 and "FeedError" in r.stderr
  r = run("--help")
  assert r.returncode == 0 and "compile" in r.stdout and "info" in r.stdout


def test_buffer_plan_reuses_intermediates():
  nodes = []
  # a chain long enough that dead intermediates can be reused: 6 matmul+relu layers
  w = {f"w{k}": rng.standard_normal((8, 8)).astype(np.float32) for k in range(6)}
  prev = "x"
  for k in range(6):
    nodes += [helper.make_node("MatMul", [prev, f"w{k}"], [f"m{k}"]), helper.make_node("Sigmoid", [f"m{k}"], [f"s{k}"])]
    prev = f"s{k}"
  m = make_model(nodes, {"x": np.zeros((5, 8), np.float32)}, [prev], w)
  cm = mc.compile(m, target="sm_80")
  assert len(cm.calls) == 6
  assert cm.pool_bytes < cm.unplanned_bytes      # 5 intermediates of 160 bytes fit in 2 slots
  x = rng.standard_normal((5, 8)).astype(np.float32)
  np.testing.assert_allclose(cm.run({"x": x})[0], run_ort(m, {"x": x})[0], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(cm.run({"x": x})[0], run_ort(m, {"x": x})[0], rtol=1e-5, atol=1e-6)
