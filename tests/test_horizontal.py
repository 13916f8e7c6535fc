"""Sibling matmuls merged into one (graph/horizontal.py): where it is made, where it is not, and that the merged
model computes onnxruntime's result."""
import numpy as np
import pytest
from onnx import helper

from minicomp.frontend.onnx_import import load_onnx
from minicomp.graph.horizontal import merge_sibling_matmuls
from minicomp.graph.partition import partition
from onnx_harness import check_model, make_model

rng = np.random.default_rng(0)
S, D, H = 6, 8, 2     # sequence, model width, heads (head width D // H)


def f32(*s): return rng.standard_normal(s).astype(np.float32)


def attention(bias=(True, True, True), opset=17, extra=()):
  """Single-head-group self-attention as exporters write it: x @ Wq/Wk/Wv (+ b), heads split by Reshape +
  Transpose, softmax(q @ k^T) @ v. ``bias``: which projections add a bias; ``extra``: more nodes and outputs."""
  nodes, inits = [], {"heads": np.array([1, S, H, D // H], np.int64)}
  for p, b in zip("qkv", bias):
    inits[f"w{p}"] = f32(D, D)
    nodes.append(helper.make_node("MatMul", ["x", f"w{p}"], [f"{p}0" if b else f"{p}1"], name=f"proj_{p}"))
    if b:
      inits[f"b{p}"] = f32(D)
      nodes.append(helper.make_node("Add", [f"{p}0", f"b{p}"], [f"{p}1"], name=f"bias_{p}"))
    nodes.append(helper.make_node("Reshape", [f"{p}1", "heads"], [f"{p}2"]))
    nodes.append(helper.make_node("Transpose", [f"{p}2"], [f"{p}3"], perm=[0, 2, 1, 3]))
  nodes += [helper.make_node("Transpose", ["k3"], ["kt"], perm=[0, 1, 3, 2]),
            helper.make_node("MatMul", ["q3", "kt"], ["s"]),
            helper.make_node("Softmax", ["s"], ["p"], axis=-1),
            helper.make_node("MatMul", ["p", "v3"], ["y"])]
  nodes += [n for n, _ in extra]
  feeds = {"x": f32(1, S, D)}
  return make_model(nodes, feeds, ["y"] + [o for _, o in extra if o], inits, opset=opset), feeds


def matmuls(m) -> int:
  return sum(n.op_type == "MatMul" for n in merge_sibling_matmuls(load_onnx(m)).nodes)


@pytest.mark.parametrize("bias", [(True, True, True), (False, False, False)])
def test_q_k_v_projections_become_one_matmul_and_two_kernels_fewer(bias):
  m, feeds = attention(bias)
  g = merge_sibling_matmuls(load_onnx(m))
  assert sum(n.op_type == "MatMul" for n in g.nodes) == 3          # one projection + the attention's two
  assert sum(n.op_type == "Slice" for n in g.nodes) == 3
  assert sum(n.op_type == "Add" for n in g.nodes) == (1 if bias[0] else 0)
  merged = next(n for n in g.nodes if n.op_type == "MatMul" and n.inputs[0] == "x")
  np.testing.assert_array_equal(g.constant(merged.inputs[1]).shape, (D, 3 * D))
  # the slices, reshapes and transposes are index math in the attention's kernels: 4 kernels, not 6
  assert len(partition(g).groups) == 4
  cm = check_model(m, feeds)
  assert len(cm.calls) == 4


def test_a_projection_without_a_bias_is_merged_with_its_like_only():
  m, feeds = attention((True, True, False))
  assert matmuls(m) == 4          # q and k merged; v alone
  check_model(m, feeds)


def test_no_merge_where_a_product_is_read_by_arithmetic_or_is_an_output():
  """A product read by an activation (a gated MLP's SiLU(x @ Wg) * (x @ Wu)) keeps its matmul, whose epilogue the
  activation is; so does one that is a graph output, or one read twice."""
  m, feeds = attention((False, False, False), extra=[(helper.make_node("Relu", ["v1"], ["r"]), "r")])
  assert matmuls(m) == 4          # q and k merged; v is read by the Relu too
  check_model(m, feeds)
  m, feeds = attention((False, False, False), extra=[(helper.make_node("Identity", ["y"], ["y2"]), "q1")])
  assert matmuls(m) == 4          # q is an output
  check_model(m, feeds)
  nodes = [helper.make_node("MatMul", ["x", "wg"], ["g"]), helper.make_node("Sigmoid", ["g"], ["sg"]),
           helper.make_node("Mul", ["g", "sg"], ["silu"]), helper.make_node("MatMul", ["x", "wu"], ["u"]),
           helper.make_node("Mul", ["silu", "u"], ["h"]), helper.make_node("MatMul", ["h", "wd"], ["y"])]
  feeds = {"x": f32(S, D)}
  m = make_model(nodes, feeds, ["y"], {"wg": f32(D, 16), "wu": f32(D, 16), "wd": f32(16, D)})
  assert matmuls(m) == 3


def test_an_opset_12_model_is_merged_after_its_conversion():
  m, feeds = attention(opset=12)
  assert matmuls(m) == 3
  check_model(m, feeds)


def test_projections_of_different_widths_merge_and_compute_the_same():
  """A grouped-query attention's K and V are narrower than Q: merged all the same, sliced at their own offsets."""
  nodes = [helper.make_node("MatMul", ["x", "wq"], ["q"]), helper.make_node("MatMul", ["x", "wk"], ["k"]),
           helper.make_node("MatMul", ["x", "wv"], ["v"]),
           helper.make_node("Transpose", ["k"], ["kt"], perm=[1, 0]), helper.make_node("MatMul", ["q", "kt"], ["s"]),
           helper.make_node("Softmax", ["s"], ["p"], axis=-1), helper.make_node("MatMul", ["p", "v"], ["y"])]
  feeds = {"x": f32(S, D)}
  m = make_model(nodes, feeds, ["y"], {"wq": f32(D, 4), "wk": f32(D, 4), "wv": f32(D, 3)})
  assert matmuls(m) == 3
  check_model(m, feeds)


def test_a_scaled_dot_product_attention_as_torch_exports_it_is_four_kernels():
  """q and k^T each multiplied by sqrt(scale) (torch.onnx's F.scaled_dot_product_attention): the projections still
  merge, the scales are inlined with the slices into q @ k^T: projection, q @ k^T, softmax, p @ v."""
  inits = {"heads": np.array([1, S, H, D // H], np.int64), "sq": np.array((D // H) ** -0.25, np.float32)}
  nodes = []
  for p in "qkv":
    inits[f"w{p}"], inits[f"b{p}"] = f32(D, D), f32(D)
    nodes += [helper.make_node("MatMul", ["x", f"w{p}"], [f"{p}0"]),
              helper.make_node("Add", [f"{p}0", f"b{p}"], [f"{p}1"]),
              helper.make_node("Reshape", [f"{p}1", "heads"], [f"{p}2"]),
              helper.make_node("Transpose", [f"{p}2"], [f"{p}3"], perm=[0, 2, 1, 3])]
  nodes += [helper.make_node("Mul", ["q3", "sq"], ["qs"]),
            helper.make_node("Transpose", ["k3"], ["kt"], perm=[0, 1, 3, 2]),
            helper.make_node("Mul", ["kt", "sq"], ["ks"]),
            helper.make_node("MatMul", ["qs", "ks"], ["s"]), helper.make_node("Softmax", ["s"], ["p"], axis=-1),
            helper.make_node("MatMul", ["p", "v3"], ["y"])]
  feeds = {"x": f32(1, S, D)}
  m = make_model(nodes, feeds, ["y"], inits)
  assert matmuls(m) == 3
  assert len(check_model(m, feeds).calls) == 4


def test_gemm_projections_merge_with_their_biases_and_transposed_weights():
  """torch.onnx's nn.Linear on 2-D input is Gemm(x, W, b, transB=1): three of them merge into one MatMul + Add
  (weights transposed back); a Gemm with alpha != 1 is not merged with them."""
  def model(alpha_v):
    nodes, inits = [], {"heads": np.array([S, H, D // H], np.int64)}
    for p in "qkv":
      inits[f"w{p}"], inits[f"b{p}"] = f32(D, D), f32(D)
      nodes += [helper.make_node("Gemm", ["x", f"w{p}", f"b{p}"], [f"{p}1"], transB=1,
                                 alpha=alpha_v if p == "v" else 1.0),
                helper.make_node("Reshape", [f"{p}1", "heads"], [f"{p}2"]),
                helper.make_node("Transpose", [f"{p}2"], [f"{p}3"], perm=[1, 0, 2])]
    nodes += [helper.make_node("Transpose", ["k3"], ["kt"], perm=[0, 2, 1]),
              helper.make_node("MatMul", ["q3", "kt"], ["s"]), helper.make_node("Softmax", ["s"], ["p"], axis=-1),
              helper.make_node("MatMul", ["p", "v3"], ["y"])]
    feeds = {"x": f32(S, D)}
    return make_model(nodes, feeds, ["y"], inits), feeds
  m, feeds = model(1.0)
  g = merge_sibling_matmuls(load_onnx(m))
  assert [n.op_type for n in g.nodes].count("Gemm") == 0 and matmuls(m) == 3
  assert len(check_model(m, feeds).calls) == 4
  m, feeds = model(0.5)
  g = merge_sibling_matmuls(load_onnx(m))
  assert [n.op_type for n in g.nodes].count("Gemm") == 1 and matmuls(m) == 3    # q and k merged, v's Gemm left
  check_model(m, feeds)


def test_info_lists_the_kernels_compile_makes(tmp_path, capsys):
  """``minicomp info`` partitions the graph as compile does, sibling matmuls merged: 4 kernels, not 6."""
  import onnx

  from minicomp.cli import main
  m, _ = attention()
  onnx.save(m, str(tmp_path / "m.onnx"))
  assert main(["info", str(tmp_path / "m.onnx")]) == 0
  assert "\n4 kernels (fused groups)" in capsys.readouterr().out


def test_a_matmul_whose_shapes_do_not_multiply_is_refused_not_crashed_on():
  """The fuzzer's case (benchmarks/fuzz.py --precision fp16, seed 23): a float16 x[32, 17] times a float32
  W[32, 40] with a bias, compiled in fp16: the sibling search met the product before any shape was known for it
  (KeyError: 'm'); now the MatMul refuses it, naming the node."""
  import minicomp as mc
  from onnx import TensorProto, numpy_helper
  rng = np.random.default_rng(0)
  g = helper.make_graph(
    [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"), helper.make_node("Add", ["m", "b"], ["y"], name="bias")],
    "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [32, 17])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [32, 40])],
    [numpy_helper.from_array(rng.standard_normal((32, 40)).astype(np.float32), "w"),
     numpy_helper.from_array(rng.standard_normal(40).astype(np.float32), "b")])
  model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
  with pytest.raises(mc.ShapeError, match="MatMul node 'mm'"):
    mc.compile(model, target="sm_86", precision="fp16", progress=False)
