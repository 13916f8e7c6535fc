"""End-to-end: ONNX models through minicomp.compile against onnxruntime."""
import numpy as np
from onnx import helper

from onnx_harness import check_model, check_node, make_model

rng = np.random.default_rng(0)


def f32(*shape): return rng.standard_normal(shape).astype(np.float32)


def test_add_relu_chain_is_one_kernel():
  nodes = [helper.make_node("Add", ["x", "b"], ["t"]), helper.make_node("Relu", ["t"], ["y"])]
  m = make_model(nodes, {"x": f32(4, 5)}, ["y"], {"b": f32(5)})
  cm = check_model(m, {"x": f32(4, 5)})
  assert len(cm.calls) == 1


def test_add_broadcast_both_runtime():
  check_node("Add", {"a": f32(3, 1, 5), "b": f32(4, 1)})
