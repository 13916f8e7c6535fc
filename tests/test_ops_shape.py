"""Shape and layout ops against onnxruntime: views (alone: a ViewStep; fused: an inlined index
remapping), injective ops (Transpose, Concat, Slice, Split, Gather, GatherElements, Expand, Tile,
DepthToSpace, SpaceToDepth), compile-time shape ops, chains, and the errors for bad forms."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import minicomp as mc
from minicomp.codegen.kernel import build
from minicomp.model_parts import ViewStep
from minicomp.errors import ShapeError, UnsupportedOpError
from minicomp.frontend.graph import Node
from minicomp.frontend.onnx_import import load_onnx
from minicomp.graph.registry import OpCtx, lookup
from minicomp.graph.schedules import default_schedule
from minicomp.graph.subgraph import nodes_to_te
from minicomp.ir.dag import ComputeDAG
from minicomp.ir.te import Tensor, placeholder
from onnx_harness import NP_TO_ONNX, check_model, check_node, make_model, run_ort

rng = np.random.default_rng(0)
I64 = lambda *v: np.array(v, np.int64)
INT_MAX, INT_MIN = 2**63 - 1, -2**63


def f32(*shape): return rng.standard_normal(shape).astype(np.float32)
def i64(*shape): return rng.integers(-100, 100, shape).astype(np.int64)


# ---------------------------------------------------------------------------------------------
# view ops alone: no kernel, the compiled model re-labels the buffer

VIEWS = {
  "reshape_infer": ("Reshape", {"x": f32(2, 3, 4)}, {}, {"s": I64(4, -1)}, 17),
  "reshape_zero_copy": ("Reshape", {"x": f32(2, 3, 4)}, {}, {"s": I64(0, -1, 2)}, 17),
  "reshape_split_dims": ("Reshape", {"x": f32(6, 4)}, {}, {"s": I64(2, 3, 2, 2)}, 13),
  "reshape_allowzero_op14": ("Reshape", {"x": f32(2, 3, 4)}, {"allowzero": 1}, {"s": I64(3, 8)}, 14),
  "reshape_to_scalar": ("Reshape", {"x": f32(1, 1)}, {}, {"s": np.zeros(0, np.int64)}, 17),
  "flatten_default": ("Flatten", {"x": f32(2, 3, 4, 5)}, {}, {}, 17),
  "flatten_axis0": ("Flatten", {"x": f32(2, 3, 4)}, {"axis": 0}, {}, 17),
  "flatten_axis_neg": ("Flatten", {"x": f32(2, 3, 4, 5)}, {"axis": -1}, {}, 17),
  "flatten_axis_rank": ("Flatten", {"x": f32(2, 3, 4)}, {"axis": 3}, {}, 17),
  "squeeze_axes": ("Squeeze", {"x": f32(1, 3, 1, 4)}, {}, {"a": I64(0, -2)}, 13),
  "squeeze_all": ("Squeeze", {"x": f32(1, 3, 1, 4, 1)}, {}, {}, 17),
  "unsqueeze": ("Unsqueeze", {"x": f32(3, 4)}, {}, {"a": I64(0, -1)}, 13),
  "unsqueeze_middle": ("Unsqueeze", {"x": f32(3, 4)}, {}, {"a": I64(3, 1)}, 21),
  "identity": ("Identity", {"x": f32(3, 4)}, {}, {}, 17),
  "identity_int64": ("Identity", {"x": i64(3, 4)}, {}, {}, 17),
  "dropout": ("Dropout", {"x": f32(3, 4)}, {}, {"r": np.array(0.3, np.float32)}, 13),
  "dropout_training_false": ("Dropout", {"x": f32(3, 4)}, {}, {"r": np.array(0.3, np.float32), "t": np.array(False)}, 17),
}


@pytest.mark.parametrize("case", list(VIEWS))
def test_view_alone(case):
  op_type, ins, attrs, inits, opset = VIEWS[case]
  cm = check_node(op_type, ins, attrs, inits, opset=opset)
  assert not cm.calls and any(isinstance(s, ViewStep) for s in cm.steps)


def test_dropout_mask_output():   # a view with two outputs is a kernel group: the compute path of the view
  cm = check_node("Dropout", {"x": f32(2, 3)}, n_outputs=2)
  assert len(cm.calls) == 1


def test_dropout_mask_is_constant_true():
  out = call_op("Dropout", [placeholder((2, 3), "float32", "x")], n_out=2)
  assert isinstance(out[0], Tensor) and out[1].dtype == np.bool_ and out[1].shape == (2, 3) and out[1].all()


# ---------------------------------------------------------------------------------------------
# view ops fused: every node of the model in one DAG, the views inlined as index remappings

def check_fused(model, feeds):
  """Lower all nodes into one ComputeDAG (as a fused group would), run it, compare with ORT."""
  g = load_onnx(model)
  te_ = nodes_to_te(g, g.nodes, g.outputs)
  outs = [te_.outputs[o] for o in g.outputs]
  dag = ComputeDAG(outs)
  kern = build(default_schedule(dag, "sm_80"), "sm_80", name="fused")
  by_ph = {t.name: v for v, t in te_.inputs.items()}
  args = [te_.consts[p.name] if p.name in te_.consts else feeds[by_ph[p.name]] for p in dag.placeholders]
  got = kern.run(args, device="cpu")
  for g_, w in zip(got, run_ort(model, feeds)):
    assert g_.shape == w.shape and g_.dtype == w.dtype
    np.testing.assert_allclose(g_, w, rtol=1e-4, atol=1e-5)


FUSED = {
  "transpose_reshape_add": ([("Transpose", ["x"], ["t"], {"perm": [2, 1, 0]}), ("Reshape", ["t", "s"], ["u"], {}),
                             ("Add", ["u", "b"], ["y"], {})],
                            {"x": f32(2, 3, 4)}, {"s": I64(2, -1, 3), "b": f32(3)}),
  "reshape_merge_split": ([("Relu", ["x"], ["t"], {}), ("Reshape", ["t", "s"], ["u"], {}), ("Add", ["u", "u"], ["y"], {})],
                          {"x": f32(6, 4, 5)}, {"s": I64(4, 3, 10)}),
  "flatten_squeeze_unsqueeze": ([("Relu", ["x"], ["t"], {}), ("Unsqueeze", ["t", "a"], ["u"], {}),
                                 ("Squeeze", ["u"], ["v"], {}), ("Flatten", ["v"], ["w"], {"axis": 2}),
                                 ("Identity", ["w"], ["d"], {}), ("Dropout", ["d"], ["y"], {})],
                                {"x": f32(1, 3, 4, 5)}, {"a": I64(0, 3)}),
}


@pytest.mark.parametrize("case", list(FUSED))
def test_view_fused(case):
  nodes, ins, inits = FUSED[case]
  m = make_model([helper.make_node(t, i, o, **a) for t, i, o, a in nodes], ins, ["y"], inits)
  check_fused(m, ins)


def test_chain_transpose_reshape_add():
  nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1]), helper.make_node("Reshape", ["t", "s"], ["u"]),
           helper.make_node("Add", ["u", "b"], ["y"])]
  x = f32(2, 3, 4)
  cm = check_model(make_model(nodes, {"x": x}, ["y"], {"s": I64(8, 3), "b": f32(3)}), {"x": x})
  # the transpose and the reshape move data only: inlined through the view into the Add's reads, one kernel
  assert len(cm.calls) == 1 and sum(isinstance(s, ViewStep) for s in cm.steps) == 0


# ---------------------------------------------------------------------------------------------
# injective ops alone

x234 = f32(2, 3, 4)
INJ = {
  "transpose_default": ("Transpose", {"x": x234}, {}, {}, 17),
  "transpose_perm4d": ("Transpose", {"x": f32(2, 3, 4, 5)}, {"perm": [0, 2, 3, 1]}, {}, 17),
  "transpose_bool": ("Transpose", {"x": rng.random((3, 4)) > 0.5}, {}, {}, 17),
  "concat_3_inputs_neg_axis": ("Concat", {"a": x234, "b": f32(2, 3, 1)}, {"axis": -1}, {"c": f32(2, 3, 2)}, 17),
  "concat_axis0": ("Concat", {"a": x234, "b": f32(1, 3, 4)}, {"axis": 0}, {}, 13),
  "concat_int64_const_first": ("Concat", {"b": i64(2, 3)}, {"axis": 1}, {"a": i64(2, 2)}, 17),
  "concat_empty_const": ("Concat", {"a": f32(2, 3)}, {"axis": 1}, {"e": np.zeros((2, 0), np.float32)}, 17),
  "concat_single": ("Concat", {"a": x234}, {"axis": 1}, {}, 17),
  "slice_basic": ("Slice", {"x": x234}, {}, {"s": I64(0, 1), "e": I64(2, 3)}, 13),
  "slice_neg_axes_steps": ("Slice", {"x": x234}, {}, {"s": I64(-1, 0), "e": I64(INT_MIN, INT_MAX), "a": I64(-1, 1),
                                                     "st": I64(-2, 2)}, 17),
  "slice_clamp": ("Slice", {"x": f32(5, 6)}, {}, {"s": I64(-100, 2), "e": I64(100, -1), "a": I64(0, 1)}, 17),
  "slice_reverse": ("Slice", {"x": f32(5, 6)}, {}, {"s": I64(100), "e": I64(-100), "a": I64(1), "st": I64(-1)}, 17),
  "slice_neg_step_partial": ("Slice", {"x": f32(7)}, {}, {"s": I64(5), "e": I64(1), "a": I64(0), "st": I64(-3)}, 17),
  "slice_start_below_neg_step": ("Slice", {"x": f32(5)}, {}, {"s": I64(-100), "e": I64(INT_MIN), "a": I64(0),
                                                            "st": I64(-1)}, 17),   # start clamps to 0: one element
  "slice_int64": ("Slice", {"x": i64(4, 6)}, {}, {"s": I64(1), "e": I64(INT_MAX), "a": I64(-1), "st": I64(2)}, 17),
  "expand_up": ("Expand", {"x": f32(3, 1)}, {}, {"s": I64(2, 3, 4)}, 13),
  "expand_both_ways": ("Expand", {"x": f32(1, 4)}, {}, {"s": I64(3, 1)}, 17),
  "expand_lower_rank_shape": ("Expand", {"x": f32(2, 1, 4)}, {}, {"s": I64(5, 1)}, 17),
  "tile": ("Tile", {"x": f32(2, 1, 3)}, {}, {"r": I64(2, 3, 1)}, 13),
  "tile_int32": ("Tile", {"x": rng.integers(0, 9, (2, 3)).astype(np.int32)}, {}, {"r": I64(1, 2)}, 17),
  "depth_to_space_dcr": ("DepthToSpace", {"x": f32(1, 8, 2, 3)}, {"blocksize": 2}, {}, 13),
  "depth_to_space_crd": ("DepthToSpace", {"x": f32(2, 8, 2, 3)}, {"blocksize": 2, "mode": "CRD"}, {}, 17),
  "space_to_depth": ("SpaceToDepth", {"x": f32(1, 2, 4, 6)}, {"blocksize": 2}, {}, 17),
  "gather_axis0_const": ("Gather", {"x": x234}, {}, {"i": I64(1, 0, 1)}, 13),
  "gather_axis_neg_const_neg_idx": ("Gather", {"x": x234}, {"axis": -1}, {"i": np.array([[-1, 0], [2, -3]], np.int64)}, 17),
  "gather_single_const_1d": ("Gather", {"x": x234}, {}, {"i": I64(-2)}, 17),
  "gather_scalar_const": ("Gather", {"x": x234}, {"axis": 1}, {"i": np.array(-1, np.int64)}, 17),
  "gather_runtime_int64": ("Gather", {"x": x234, "i": np.array([[1, -1], [0, 2]], np.int64)}, {"axis": 1}, {}, 17),
  "gather_runtime_int32": ("Gather", {"x": x234, "i": np.array([3, -4, 0], np.int32)}, {"axis": 2}, {}, 17),
  "gather_int64_data": ("Gather", {"x": i64(5, 3), "i": I64(4, 0, -1)}, {}, {}, 17),
  "gather_elements_axis0": ("GatherElements", {"x": f32(3, 4), "i": np.array([[0, 2, -1, 1], [2, 0, 0, -3]], np.int64)},
                            {}, {}, 13),
  "gather_elements_axis_neg_const": ("GatherElements", {"x": f32(3, 4)}, {"axis": -1},
                                     {"i": np.array([[0, 3], [-1, 1], [2, 2]], np.int64)}, 17),
}


@pytest.mark.parametrize("case", list(INJ))
def test_injective(case):
  op_type, ins, attrs, inits, opset = INJ[case]
  cm = check_node(op_type, ins, attrs, inits, opset=opset)
  assert len(cm.calls) == 1


def test_gather_const_table_runtime_indices():   # embedding lookup: the data is a weight
  check_node("Gather", {"i": np.array([[0, 3], [2, -2]], np.int64)}, initializers={"w": f32(4, 5)}, input_order=["w", "i"])


SPLITS = {
  "split_input_op13": (13, {"axis": 1}, {"s": I64(1, 3)}, 2, f32(2, 4)),
  "split_equal_op13": (13, {"axis": -1}, {}, 3, f32(2, 6)),
  "split_num_outputs_uneven_op18": (18, {"axis": 0, "num_outputs": 3}, {}, 3, f32(7, 2)),
  "split_input_op18_int64": (18, {"axis": 0}, {"s": I64(2, 1)}, 2, i64(3, 2)),
}


@pytest.mark.parametrize("case", list(SPLITS))
def test_split(case):
  opset, attrs, inits, n, x = SPLITS[case]
  check_node("Split", {"x": x}, attrs, inits, n_outputs=n, opset=opset)


def test_chain_slice_concat_gather():
  nodes = [helper.make_node("Slice", ["x", "s", "e", "a", "st"], ["t"]),
           helper.make_node("Concat", ["t", "x"], ["c"], axis=1),
           helper.make_node("Gather", ["c", "i"], ["g"], axis=1), helper.make_node("Relu", ["g"], ["y"])]
  x = f32(3, 4)
  m = make_model(nodes, {"x": x}, ["y"], {"s": I64(-1), "e": I64(INT_MIN), "a": I64(1), "st": I64(-1),
                                                  "i": I64(0, 5, -1)})
  check_model(m, {"x": x})


def test_chain_split_add_int64():
  nodes = [helper.make_node("Split", ["x"], ["p", "q"], axis=1), helper.make_node("Add", ["p", "q"], ["y"])]
  x = i64(2, 6)
  check_model(make_model(nodes, {"x": x}, ["y"], {}, opset=13), {"x": x})


def test_gather_runtime_scalar_index():
  check_node("Gather", {"x": x234, "i": np.array(-2, np.int64)}, {"axis": 1})


# ---------------------------------------------------------------------------------------------
# compile-time shape ops (folded by the importer; the op functions are checked directly too)

def call_op(op_type, inputs, attrs=None, opset=17, n_out=1):
  node = Node(f"{op_type.lower()}_node", op_type, [f"i{k}" for k in range(len(inputs))],
              [f"o{k}" for k in range(n_out)], attrs or {})
  return lookup(op_type, opset).fn(OpCtx(node, opset), *inputs)


@pytest.mark.parametrize("attrs,want", [({}, [2, 3, 4, 5]), ({"start": 1}, [3, 4, 5]), ({"end": -1}, [2, 3, 4]),
                                        ({"start": -3, "end": 3}, [3, 4]), ({"start": -10, "end": 10}, [2, 3, 4, 5]),
                                        ({"start": 3, "end": 1}, [])])
def test_shape_op(attrs, want):
  out = call_op("Shape", [placeholder((2, 3, 4, 5), "float32", "x")], attrs, opset=15)[0]
  assert out.dtype == np.int64 and out.tolist() == want


def test_size_constant_of_shape_range_ops():
  s = call_op("Size", [placeholder((2, 3), "float32", "x")])[0]
  assert s.dtype == np.int64 and s.shape == () and s == 6
  c = call_op("ConstantOfShape", [I64(2, 3)], {"value": np.array([7], np.int64)})[0]
  assert c.dtype == np.int64 and c.shape == (2, 3) and (c == 7).all()
  c = call_op("ConstantOfShape", [I64(4)])[0]
  assert c.dtype == np.float32 and (c == 0).all()
  r = call_op("Range", [np.array(10, np.int64), np.array(1, np.int64), np.array(-3, np.int64)])[0]
  assert r.dtype == np.int64 and r.tolist() == [10, 7, 4]
  r = call_op("Range", [np.array(0.5, np.float32), np.array(2.0, np.float32), np.array(0.5, np.float32)])[0]
  assert r.dtype == np.float32 and r.tolist() == [0.5, 1.0, 1.5]


def test_shape_ops_in_a_model():
  nodes = [helper.make_node("Shape", ["x"], ["s"], start=1), helper.make_node("ConstantOfShape", ["s"], ["c"],
           value=helper.make_tensor("v", TensorProto.FLOAT, [1], [2.0])), helper.make_node("Add", ["x", "c"], ["y"]),
           helper.make_node("Size", ["x"], ["n"])]
  x = f32(2, 3, 4)
  check_model(make_model(nodes, {"x": x}, ["y", "n"], opset=15), {"x": x})


# ---------------------------------------------------------------------------------------------
# errors

def _single(op_type, ins, attrs=None, inits=None, opset=17, n_out=1, order=None, rank=2, elem=TensorProto.FLOAT):
  """A one-node model named "bad_node" whose outputs are declared (rank ``rank``, unknown dims)."""
  outs = [f"y{k}" for k in range(n_out)]
  node = helper.make_node(op_type, order or list(ins) + list(inits or {}), outs, name="bad_node", **(attrs or {}))
  g = helper.make_graph([node], "bad",
                        [helper.make_tensor_value_info(n, NP_TO_ONNX[a.dtype], a.shape) for n, a in ins.items()],
                        [helper.make_tensor_value_info(o, elem, [f"d{d}" for d in range(rank)]) for o in outs],
                        [numpy_helper.from_array(a, n) for n, a in (inits or {}).items()])
  m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
  m.ir_version = 8
  return m


@pytest.mark.parametrize("case", ["reshape", "slice", "squeeze", "tile", "expand", "dropout_runtime", "range"])
def test_runtime_value_where_constant_needed(case):
  x = f32(2, 3)
  m = {"reshape": lambda: _single("Reshape", {"x": x, "s": I64(3, 2)}),
       "slice": lambda: _single("Slice", {"x": x, "s": I64(0)}, inits={"e": I64(1)}),
       "squeeze": lambda: _single("Squeeze", {"x": f32(1, 3), "a": I64(0)}, rank=1),
       "tile": lambda: _single("Tile", {"x": x, "r": I64(1, 2)}),
       "expand": lambda: _single("Expand", {"x": x, "s": I64(2, 3)}),
       "dropout_runtime": lambda: _single("Dropout", {"x": x, "t": np.array(False)}, inits={"r": np.array(0.5, np.float32)},
                                          order=["x", "r", "t"]),
       "range": lambda: _single("Range", {"s": np.array(0, np.int64)}, inits={"l": np.array(5, np.int64),
                                                                            "d": np.array(1, np.int64)}, rank=1,
                                elem=TensorProto.INT64)}[case]()
  with pytest.raises(UnsupportedOpError, match="bad_node.*constant initializer"):
    mc.compile(m, target="sm_80")


def test_dropout_training_mode_true():
  m = _single("Dropout", {"x": f32(2, 3)}, inits={"r": np.array(0.5, np.float32), "t": np.array(True)})
  with pytest.raises(UnsupportedOpError, match="training_mode"):
    mc.compile(m, target="sm_80")


def test_an_empty_slice_is_an_empty_output_and_refused_as_an_operand():
  """A Slice of length 0 is an empty array of the right shape and type (no kernel; as onnxruntime), and an op that
  would compute on it refuses it, naming the node."""
  from onnx_harness import make_model, run_ort
  m = _single("Slice", {"x": f32(2, 5)}, inits={"s": I64(3), "e": I64(1), "a": I64(1)})
  x = np.ones((2, 5), np.float32)
  got, want = mc.compile(m, target="sm_80").run({"x": x})[0], run_ort(m, {"x": x})[0]
  assert got.shape == want.shape == (2, 0) and got.dtype == want.dtype
  nodes = [helper.make_node("Slice", ["x", "s", "e", "a"], ["z"]), helper.make_node("Neg", ["z"], ["y"], name="neg")]
  m2 = make_model(nodes, {"x": x}, ["y"], {"s": I64(3), "e": I64(1), "a": I64(1)})
  with pytest.raises(UnsupportedOpError, match="neg.*empty"):
    mc.compile(m2, target="sm_80")


@pytest.mark.parametrize("case", ["gather_index_out_of_range", "split_uneven_op13", "squeeze_non_one"])
def test_bad_shapes(case):
  m = {"gather_index_out_of_range": lambda: _single("Gather", {"x": f32(2, 3)}, {"axis": 1}, {"i": I64(0, 3)}),
       "split_uneven_op13": lambda: _single("Split", {"x": f32(2, 5)}, {"axis": 1}, opset=13, n_out=2),
       "squeeze_non_one": lambda: _single("Squeeze", {"x": f32(1, 3)}, inits={"a": I64(1)}, rank=1)}[case]
  with pytest.raises(ShapeError, match="bad_node"):
    mc.compile(m(), target="sm_80")


def test_an_empty_part_concatenated_back_adds_nothing():
  """Split into [4, 0] (an empty chunk) and a Slice of length 0, each concatenated with a computed part: the
  empty ones are left out of the Concat (RotaryEmbedding's body does this when the whole head rotates);
  checked against onnxruntime."""
  from onnx_harness import check_model, make_model
  x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
  nodes = [helper.make_node("Split", ["x", "sizes"], ["a", "e"], axis=2),
           helper.make_node("Neg", ["a"], ["n"]),
           helper.make_node("Slice", ["x", "s", "t", "ax"], ["z"]),
           helper.make_node("Concat", ["n", "e", "z"], ["y"], axis=2)]
  m = make_model(nodes, {"x": x}, ["y"], {"sizes": np.array([4, 0], np.int64), "s": np.array([3], np.int64),
                                          "t": np.array([3], np.int64), "ax": np.array([2], np.int64)}, opset=18)
  check_model(m, {"x": x})


@pytest.mark.parametrize("k,dtype", [(0, None), (2, TensorProto.INT32), (-1, TensorProto.DOUBLE), (7, None)])
def test_eye_like(k, dtype):
  """EyeLike against onnxruntime: the diagonal moved by k (past the matrix: all zeros), the input's type or dtype."""
  from onnx_harness import make_model, run_ort
  x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
  attrs = {"k": k, **({"dtype": dtype} if dtype is not None else {})}
  m = make_model([helper.make_node("EyeLike", ["x"], ["y"], **attrs), helper.make_node("Identity", ["x"], ["z"])],
                 {"x": x}, ["y", "z"])
  got, want = mc.compile(m, target="sm_80").run({"x": x})[0], run_ort(m, {"x": x})[0]
  assert got.dtype == want.dtype and np.array_equal(got, want)
