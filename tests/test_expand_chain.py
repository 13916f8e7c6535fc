"""Llama's repeat_kv as PyTorch's TorchScript exporter (opset 17) writes it:
Unsqueeze -> Expand(shape from Shape/Gather/Concat, then Where(Equal(shape, -ConstantOfShape), ...))
-> Reshape. ONNX's data propagation does not see through ConstantOfShape/Equal/Where, so the first
shape inference leaves the Expand's output without a shape; the import folds the shape to a constant
and infers again (issue #14)."""
import numpy as np
import onnx
from onnx import helper, numpy_helper

import minicomp as mc
from minicomp.cli import main
from minicomp.frontend.onnx_import import load_onnx
from onnx_harness import make_model, run_ort

B, S, KVH, D, N_REP = 1, 8, 2, 8, 2


def _const(name, arr):
  return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(arr)), name=f"/Constant_{name}")


def repeat_kv_model(batch: int = B) -> onnx.ModelProto:
  """k (batch, S, KVH, D) -> transpose (batch, KVH, S, D) -> repeat_kv -> (batch, KVH * N_REP, S, D)."""
  mk = helper.make_node
  nodes = [mk("Transpose", ["k"], ["kt"], perm=[0, 2, 1, 3], name="/Transpose"),
           mk("Shape", ["kt"], ["shape"], name="/Shape")]
  for i, dim in enumerate("bhsd"):
    nodes += [_const(f"i{i}", np.array(i, np.int64)), mk("Gather", ["shape", f"i{i}"], [dim], axis=0, name=f"/Gather_{i}"),
              mk("Unsqueeze", [dim, "ax0"], [f"{dim}_1d"], name=f"/Unsqueeze_{i}")]
  nodes += [
    _const("ax0", np.array([0], np.int64)), _const("n_rep", np.array([N_REP], np.int64)), _const("minus1", np.array([-1], np.int64)),
    mk("Concat", ["b_1d", "h_1d", "n_rep", "s_1d", "d_1d"], ["size_cat"], axis=0, name="/Concat"),
    mk("Reshape", ["size_cat", "minus1"], ["size"], name="/Reshape"),
    _const("rank", np.array([5], np.int64)),
    mk("ConstantOfShape", ["rank"], ["ones"], value=numpy_helper.from_array(np.array([1], np.int64)), name="/ConstantOfShape"),
    _const("neg", np.array(-1, np.int64)),
    mk("Mul", ["ones", "neg"], ["neg_ones"], name="/Mul"),
    mk("Equal", ["size", "neg_ones"], ["is_neg"], name="/Equal"),
    mk("Where", ["is_neg", "ones", "size"], ["expand_shape"], name="/Where"),
    _const("ax2", np.array([2], np.int64)),
    mk("Unsqueeze", ["kt", "ax2"], ["k5"], name="/Unsqueeze_k"),
    mk("Expand", ["k5", "expand_shape"], ["/Expand_output_0"], name="/Expand"),
    _const("n_rep0", np.array(N_REP, np.int64)),
    mk("Mul", ["h", "n_rep0"], ["heads"], name="/Mul_1"),
    mk("Unsqueeze", ["heads", "ax0"], ["heads_1d"], name="/Unsqueeze_heads"),
    mk("Concat", ["b_1d", "heads_1d", "s_1d", "d_1d"], ["out_shape"], axis=0, name="/Concat_1"),
    mk("Reshape", ["/Expand_output_0", "out_shape"], ["y"], name="/Reshape_3")]
  nodes.sort(key=lambda n: n.op_type != "Constant")   # constants first: a topological order
  return make_model(nodes, {"k": _k(batch)}, ["y"])


def _k(batch: int) -> np.ndarray:
  return np.random.default_rng(batch).standard_normal((batch, S, KVH, D)).astype(np.float32)


def _check(model, feeds, input_shapes=None):
  want = run_ort(model, feeds)[0]
  cm = mc.compile(model, target="sm_80", input_shapes=input_shapes)
  got = cm.run(feeds, device="cpu")[0]
  assert got.shape == want.shape == (len(feeds["k"]), KVH * N_REP, S, D)
  np.testing.assert_array_equal(got, want)


def test_expand_output_gets_a_static_shape():
  g = load_onnx(repeat_kv_model())
  assert sorted(n.op_type for n in g.nodes) == ["Expand", "Reshape", "Transpose", "Unsqueeze"]
  assert g.values["/Expand_output_0"].shape == (B, KVH, N_REP, S, D)
  assert g.values["expand_shape"].const.tolist() == [B, KVH, N_REP, S, D]


def test_repeat_kv_chain_static():
  _check(repeat_kv_model(), {"k": _k(B)})


def test_repeat_kv_chain_dynamic_batch():
  m = repeat_kv_model(3)
  m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
  m.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "batch"
  _check(m, {"k": _k(3)}, input_shapes={"k": (3, S, KVH, D)})


def test_info_reports_every_op_supported(tmp_path, capsys):
  path = tmp_path / "repeat_kv.onnx"
  onnx.save(repeat_kv_model(), str(path))
  assert main(["info", str(path)]) == 0
  out = capsys.readouterr().out
  assert "NOT SUPPORTED" not in out and "Expand" in out
