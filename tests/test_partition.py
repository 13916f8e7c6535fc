"""Import-time folding and the fusion decisions of the partitioner."""
import numpy as np
from onnx import helper

import minicomp as mc
from minicomp.frontend.onnx_import import load_onnx
from minicomp.graph.partition import partition
from onnx_harness import check_model, make_model

rng = np.random.default_rng(0)


def f32(*s): return rng.standard_normal(s).astype(np.float32)


def test_pytorch_style_shape_chain_folds_to_a_view():
  """x.view(x.size(0), -1) as exporters write it: Shape -> Gather -> Unsqueeze -> Concat -> Reshape."""
  nodes = [helper.make_node("Shape", ["x"], ["s"]),
           helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
           helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"]),
           helper.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
           helper.make_node("Reshape", ["x", "shape"], ["y"])]
  inits = {"zero": np.array(0, np.int64), "ax0": np.array([0], np.int64), "minus1": np.array([-1], np.int64)}
  m = make_model(nodes, {"x": f32(2, 3, 4)}, ["y"], inits)
  g = load_onnx(m)
  assert [n.op_type for n in g.nodes] == ["Reshape"]
  assert g.values["shape"].is_const and list(g.values["shape"].const) == [2, -1]
  cm = check_model(m, {"x": f32(2, 3, 4)})
  assert len(cm.calls) == 0 and len(cm.steps) == 1     # a view, no kernel


def test_conv_epilogue_and_pad_prologue_fuse():
  nodes = [helper.make_node("Pad", ["x", "pads"], ["p"], mode="constant"),
           helper.make_node("Conv", ["p", "w", "b"], ["c"], kernel_shape=[3, 3]),
           helper.make_node("Relu", ["c"], ["r"]),
           helper.make_node("Add", ["r", "x"], ["y"])]
  inits = {"pads": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "w": f32(3, 3, 3, 3), "b": f32(3)}
  m = make_model(nodes, {"x": f32(1, 3, 6, 6)}, ["y"], inits)
  part = partition(load_onnx(m))
  assert [[n.op_type for n in g.nodes] for g in part.groups] == [["Pad", "Conv", "Relu", "Add"]]
  check_model(m, {"x": f32(1, 3, 6, 6)})


def test_a_diamond_epilogue_joins_its_anchor_unless_another_kernel_reads_the_anchor():
  """A MatMul output read twice by one pointwise epilogue (relu(m) * sigmoid(m), as GELU and SiLU read theirs) is one
  kernel with it: the product is never stored. Read by another kernel too (a second MatMul), the product stays its
  own kernel's output and the epilogue a kernel of its own; both compute onnxruntime's result."""
  def model(second_reader):
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["a"]),
             helper.make_node("Sigmoid", ["m"], ["b"]), helper.make_node("Mul", ["a", "b"], ["y"])]
    nodes += [helper.make_node("MatMul", ["m", "w2"], ["z"])] if second_reader else []
    return make_model(nodes, {"x": f32(4, 5)}, ["y", "z"] if second_reader else ["y"], {"w": f32(5, 6), "w2": f32(6, 3)})
  m = model(False)
  part = partition(load_onnx(m))
  assert [sorted(n.op_type for n in g.nodes) for g in part.groups] == [["MatMul", "Mul", "Relu", "Sigmoid"]]
  assert part.groups[0].outputs == ["y"]
  check_model(m, {"x": f32(4, 5)})
  m = model(True)
  assert len(partition(load_onnx(m)).groups) == 3
  check_model(m, {"x": f32(4, 5)})


def test_elementwise_diamond_is_one_kernel():
  nodes = [helper.make_node("Mul", ["x", "x"], ["m"]),
           helper.make_node("Tanh", ["m"], ["t"]),
           helper.make_node("Add", ["t", "m"], ["y"])]
  m = make_model(nodes, {"x": f32(3, 7)}, ["y"])
  cm = check_model(m, {"x": f32(3, 7)})
  assert len(cm.calls) == 1


def test_an_elementwise_chain_is_pulled_into_its_one_reader_only_without_an_anchor():
  """Slice+Sigmoid read by one Mul joins the Mul's kernel (an LSTM gate into its cell update); the same chain read
  by a MatMul stays a kernel of its own (inlined, it would be recomputed at every read of the product)."""
  sl = lambda o, lo: helper.make_node("Slice", ["x", f"lo{lo}", f"hi{lo}", "ax"], [o])
  nodes = [sl("a", 0), helper.make_node("Sigmoid", ["a"], ["sa"]), sl("b", 4), helper.make_node("Tanh", ["b"], ["tb"]),
           helper.make_node("Mul", ["sa", "tb"], ["y"]), sl("c", 8), helper.make_node("Sigmoid", ["c"], ["sc"]),
           helper.make_node("MatMul", ["sc", "w"], ["z"])]
  inits = {"lo0": np.array([0]), "hi0": np.array([4]), "lo4": np.array([4]), "hi4": np.array([8]),
           "lo8": np.array([8]), "hi8": np.array([12]), "ax": np.array([1]), "w": f32(4, 3)}
  m = make_model(nodes, {"x": f32(2, 12)}, ["y", "z"], inits)
  groups = sorted(sorted(n.op_type for n in g.nodes) for g in partition(load_onnx(m)).groups)
  assert groups == [["MatMul"], ["Mul", "Sigmoid", "Slice", "Slice", "Tanh"], ["Sigmoid", "Slice"]], groups
  check_model(m, {"x": f32(2, 12)})


def test_identical_subgraphs_share_one_task():
  nodes = [helper.make_node("MatMul", ["x", "w1"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
           helper.make_node("MatMul", ["b", "w2"], ["c"]), helper.make_node("Relu", ["c"], ["y"])]
  m = make_model(nodes, {"x": f32(6, 6)}, ["y"], {"w1": f32(6, 6), "w2": f32(6, 6)})
  cm = check_model(m, {"x": f32(6, 6)})
  assert len(cm.calls) == 2 and len(cm.kernels) == 1
  assert cm.tasks[0].weight == 2


def test_simple_default_schedule_is_valid_for_every_workload():
  """The fallback schedule (used when a tuned rule hits a resource limit) is correct too."""
  from minicomp import workloads as W
  from minicomp.graph.schedules import default_schedule
  for wl in [W.matmul(33, 17, 9, True), W.conv2d(1, 3, 7, 7, 4, 3, 1, 1, 1), W.softmax(3, 40), W.layernorm(2, 70)]:
    k = mc.build(default_schedule(wl.outputs, simple=True), "sm_80")
    ins = wl.random_inputs()
    np.testing.assert_allclose(k(*ins), wl.reference(*ins), rtol=1e-4, atol=1e-5)


def test_a_chain_that_only_moves_data_is_pulled_into_a_matmul():
  """Attention's K transposed twice before Q @ K^T: index math inlined into the MatMul's reads, not a kernel of its
  own (a chain with arithmetic, as above, stays one)."""
  nodes = [helper.make_node("Transpose", ["k"], ["t1"], perm=[0, 2, 1, 3]),
           helper.make_node("Transpose", ["t1"], ["t2"], perm=[0, 1, 3, 2]),
           helper.make_node("MatMul", ["q", "t2"], ["y"])]
  feeds = {"q": f32(1, 2, 5, 4), "k": f32(1, 5, 2, 4)}
  m = make_model(nodes, feeds, ["y"])
  assert [sorted(n.op_type for n in g.nodes) for g in partition(load_onnx(m)).groups] == \
      [["MatMul", "Transpose", "Transpose"]]
  check_model(m, feeds)


def test_data_movement_goes_through_a_view_into_the_matmul_that_reads_it():
  """Attention's heads transposed back and reshaped for the output projection: the Transpose and the Reshape join
  the MatMul's kernel (the Reshape, a view elsewhere, is an index there)."""
  nodes = [helper.make_node("Transpose", ["a"], ["t"], perm=[0, 2, 1, 3]),
           helper.make_node("Reshape", ["t", "shape"], ["r"]),
           helper.make_node("MatMul", ["r", "w"], ["y"])]
  feeds = {"a": f32(1, 2, 5, 4)}
  m = make_model(nodes, feeds, ["y"], {"shape": np.array([1, 5, 8], np.int64), "w": f32(8, 3)})
  part = partition(load_onnx(m))
  assert [sorted(n.op_type for n in g.nodes) for g in part.groups] == [["MatMul", "Reshape", "Transpose"]]
  assert len(part.steps) == 1
  check_model(m, feeds)


def test_a_grouped_query_attentions_kv_expansion_is_inlined_into_its_matmul():
  """K of 1 head expanded to 2 (Transpose, Unsqueeze, Expand, Reshape: two views on the way) is read by Q @ K^T
  through its indices: one kernel, the expanded K never stored."""
  nodes = [helper.make_node("Transpose", ["k"], ["t"], perm=[0, 2, 1, 3]),
           helper.make_node("Unsqueeze", ["t", "ax"], ["u"]),
           helper.make_node("Expand", ["u", "to"], ["e"]),
           helper.make_node("Reshape", ["e", "shape"], ["r"]),
           helper.make_node("Transpose", ["r"], ["rt"], perm=[0, 1, 3, 2]),
           helper.make_node("MatMul", ["q", "rt"], ["y"])]
  feeds = {"q": f32(1, 2, 5, 4), "k": f32(1, 5, 1, 4)}
  inits = {"ax": np.array([2], np.int64), "to": np.array([1, 1, 2, 5, 4], np.int64),
           "shape": np.array([1, 2, 5, 4], np.int64)}
  m = make_model(nodes, feeds, ["y"], inits)
  part = partition(load_onnx(m))
  assert len(part.groups) == 1 and len(part.steps) == 1
  check_model(m, feeds)


def test_a_chain_that_moves_data_and_scales_it_once_is_pulled_into_a_matmul():
  """torch.onnx's scaled dot-product attention multiplies q and k^T by sqrt(scale) each: a transpose and one multiply
  by a constant scalar are inlined into ``q @ k^T``'s reads (one kernel, not three). Two multiplies, or one by a
  vector (per-column), are arithmetic the matmul would redo at every read: their chain stays a kernel."""
  def model(scale):
    nodes = [helper.make_node("Transpose", ["q"], ["qt"], perm=[0, 2, 1, 3]),
             helper.make_node("Mul", ["qt", "cq"], ["qs"]),
             helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 3, 1]),
             helper.make_node("Mul", ["kt", "c"], ["ks"]),
             helper.make_node("MatMul", ["qs", "ks"], ["y"])]
    if scale == "twice":
      nodes.insert(2, helper.make_node("Mul", ["qs", "c"], ["qs2"]))
      nodes[-1].input[0] = "qs2"
    cq = np.full((4,) if scale == "vector" else (), 0.7, np.float32)
    feeds = {"q": f32(1, 5, 2, 4), "k": f32(1, 5, 2, 4)}
    return make_model(nodes, feeds, ["y"], {"c": np.array(0.7, np.float32), "cq": cq}), feeds
  m, feeds = model("scalar")
  assert [sorted(n.op_type for n in g.nodes) for g in partition(load_onnx(m)).groups] == \
      [["MatMul", "Mul", "Mul", "Transpose", "Transpose"]]
  check_model(m, feeds)
  for scale in ("twice", "vector"):
    m, feeds = model(scale)
    assert len(partition(load_onnx(m)).groups) == 2, scale      # q's chain stays its own kernel
    check_model(m, feeds)
