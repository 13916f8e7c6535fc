"""If, Loop and Scan unrolled at import (minicomp/frontend/control_flow.py), against onnxruntime; the forms that
cannot be unrolled are refused naming the node."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto as T, helper

import minicomp as mc
from onnx_harness import run_ort

rng = np.random.default_rng(0)
F = lambda name, shape: helper.make_tensor_value_info(name, T.FLOAT, shape)   # noqa: E731


def _model(nodes, inputs, outputs, inits=(), opset=17):
  g = helper.make_graph(nodes, "cf", inputs, outputs, list(inits))
  m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
  m.ir_version = 8
  return m


def _check(m, feeds):
  got = mc.compile(m, target="sm_80", schedules="rules", progress=False).run(feeds, device="cpu")
  for g, w in zip(got, run_ort(m, feeds)):
    assert g.shape == w.shape
    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def _const(name, value):
  return helper.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(np.asarray(value)))


@pytest.mark.parametrize("cond", [True, False])
def test_if_on_a_runtime_condition_computes_both_branches_and_selects(cond):
  then = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["t"])], "then", [], [F("t", [2, 3])])
  other = helper.make_graph([helper.make_node("Sigmoid", ["x"], ["e"])], "else", [], [F("e", [2, 3])])
  m = _model([helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
             [helper.make_tensor_value_info("c", T.BOOL, []), F("x", [2, 3])], [F("y", [2, 3])])
  _check(m, {"c": np.array(cond), "x": rng.standard_normal((2, 3)).astype(np.float32)})


def test_if_on_a_shape_keeps_its_branch_even_of_another_shape():
  """``if x.shape[0] == 2`` as exporters write it: the condition folds from the static shape, the other branch
  (a different shape) is dropped."""
  then = helper.make_graph([helper.make_node("ReduceSum", ["x", "ax"], ["t"], keepdims=0)], "then", [], [F("t", [3])])
  other = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [], [F("e", [2, 3])])
  nodes = [helper.make_node("Shape", ["x"], ["s"]), _const("zero", np.array(0, np.int64)), _const("two", np.array(2, np.int64)),
           _const("ax", np.array([0], np.int64)), helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
           helper.make_node("Equal", ["n", "two"], ["c"]),
           helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)]
  m = _model(nodes, [F("x", [2, 3])], [F("y", [3])])
  _check(m, {"x": rng.standard_normal((2, 3)).astype(np.float32)})


def _loop_body(computed_stop: bool = False):
  """state <- state * 0.5 + x_outer[i] (a read of the enclosing graph, indexed by the iteration), scanned out;
  an inner If on the iteration number adds 1 on even steps."""
  inner_then = helper.make_graph([helper.make_node("Add", ["acc", "one"], ["a1"])], "t", [], [F("a1", [3])])
  inner_else = helper.make_graph([helper.make_node("Identity", ["acc"], ["a2"])], "e", [], [F("a2", [3])])
  nodes = [_const("half", np.float32(0.5)), _const("one", np.float32(1.0)), _const("two", np.array(2, np.int64)),
           helper.make_node("Gather", ["x", "i"], ["xi"], axis=0),
           helper.make_node("Mul", ["s", "half"], ["sh"]), helper.make_node("Add", ["sh", "xi"], ["acc"]),
           helper.make_node("Mod", ["i", "two"], ["r"]), _const("zero", np.array(0, np.int64)),
           helper.make_node("Equal", ["r", "zero"], ["even"]),
           helper.make_node("If", ["even"], ["s2"], then_branch=inner_then, else_branch=inner_else),
           helper.make_node("Identity", ["s2"], ["scan"])]
  if computed_stop:
    nodes += [helper.make_node("ReduceSum", ["s2"], ["tot"], keepdims=0), _const("lim", np.float32(3.0)),
              helper.make_node("Less", ["tot", "lim"], ["c_out"])]
  else:
    nodes.append(helper.make_node("Identity", ["c_in"], ["c_out"]))
  return helper.make_graph(nodes, "body", [helper.make_tensor_value_info("i", T.INT64, []),
                                           helper.make_tensor_value_info("c_in", T.BOOL, []), F("s", [3])],
                           [helper.make_tensor_value_info("c_out", T.BOOL, []), F("s2", [3]), F("scan", [3])])


def test_loop_of_a_constant_trip_count_unrolls_with_carried_and_scanned_values():
  inits = [onnx.numpy_helper.from_array(np.array(5, np.int64), "M"), onnx.numpy_helper.from_array(np.array(True), "C")]
  m = _model([helper.make_node("Loop", ["M", "C", "s0"], ["s_final", "scans"], body=_loop_body())],
             [F("s0", [3]), F("x", [5, 3])], [F("s_final", [3]), F("scans", [5, 3])], inits)
  _check(m, {"s0": rng.standard_normal(3).astype(np.float32), "x": rng.standard_normal((5, 3)).astype(np.float32)})


def test_a_loop_that_ends_on_a_computed_condition_is_refused_naming_it():
  inits = [onnx.numpy_helper.from_array(np.array(5, np.int64), "M"), onnx.numpy_helper.from_array(np.array(True), "C")]
  m = _model([helper.make_node("Loop", ["M", "C", "s0"], ["s_final", "scans"], body=_loop_body(True), name="lp")],
             [F("s0", [3]), F("x", [5, 3])], [F("s_final", [3]), F("scans", [5, 3])], inits)
  with pytest.raises(mc.UnsupportedOpError, match="Loop node 'lp': the loop ends on a condition its body computes"):
    mc.compile(m, target="sm_80", schedules="rules", progress=False)


def test_scan_with_a_reversed_input_and_an_output_on_axis_1():
  """A cumulative sum over axis 1 of x, read backwards, its partial sums stacked on axis 1."""
  body = helper.make_graph([helper.make_node("Add", ["s", "xt"], ["s2"]), helper.make_node("Identity", ["s2"], ["o"])],
                           "body", [F("s", [2]), F("xt", [2])], [F("s2", [2]), F("o", [2])])
  node = helper.make_node("Scan", ["s0", "x"], ["s", "ys"], body=body, num_scan_inputs=1, scan_input_axes=[1],
                          scan_input_directions=[1], scan_output_axes=[1])
  m = _model([node], [F("s0", [2]), F("x", [2, 4])], [F("s", [2]), F("ys", [2, 4])], opset=16)
  _check(m, {"s0": np.zeros(2, np.float32), "x": rng.standard_normal((2, 4)).astype(np.float32)})
