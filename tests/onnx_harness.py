"""Build single-node / small ONNX models with onnx.helper and compare minicomp with onnxruntime."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import minicomp as mc

NP_TO_ONNX = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
              np.dtype(np.int64): TensorProto.INT64, np.dtype(np.int32): TensorProto.INT32,
              np.dtype(np.bool_): TensorProto.BOOL, np.dtype(np.int8): TensorProto.INT8, np.dtype(np.uint8): TensorProto.UINT8,
              np.dtype(np.int16): TensorProto.INT16, np.dtype(np.uint16): TensorProto.UINT16,
              np.dtype(np.uint32): TensorProto.UINT32, np.dtype(np.uint64): TensorProto.UINT64}


def make_model(nodes, inputs: dict, outputs: list, initializers: dict | None = None, opset: int = 17,
               output_types: dict | None = None) -> onnx.ModelProto:
  """A model from helper nodes; ``inputs``: name -> array (its shape/dtype declare the input);
  ``initializers``: name -> array; output types are left for shape inference unless given."""
  ins = [helper.make_tensor_value_info(n, NP_TO_ONNX[a.dtype], a.shape) for n, a in inputs.items()]
  outs = [helper.make_tensor_value_info(o, (output_types or {}).get(o, TensorProto.UNDEFINED), None) for o in outputs]
  inits = [numpy_helper.from_array(np.asarray(a), n) for n, a in (initializers or {}).items()]
  g = helper.make_graph(nodes, "test", ins, outs, inits)
  m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
  m.ir_version = 8
  im = onnx.shape_inference.infer_shapes(m).graph
  inferred = {v.name: v for v in list(im.value_info) + list(im.output) if v.type.tensor_type.elem_type}
  for o in m.graph.output:   # onnxruntime wants typed outputs: take them from shape inference
    if o.type.tensor_type.elem_type == TensorProto.UNDEFINED and o.name in inferred:
      o.type.CopyFrom(inferred[o.name].type)
  return m


def run_ort(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
  import onnxruntime as ort
  so = ort.SessionOptions()
  so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
  sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
  return sess.run(None, feeds)


def check_model(model, feeds: dict, rtol=1e-4, atol=1e-5, target="sm_80"):
  """Compile with minicomp, run on the simulator, compare every output with onnxruntime."""
  want = run_ort(model, feeds)
  cm = mc.compile(model, target=target)
  got = cm.run(feeds, device="cpu")
  assert len(got) == len(want)
  for g_, w in zip(got, want):
    assert g_.shape == w.shape, (g_.shape, w.shape)
    assert g_.dtype == w.dtype, (g_.dtype, w.dtype)
    if w.dtype == np.bool_ or np.issubdtype(w.dtype, np.integer): np.testing.assert_array_equal(g_, w)
    else: np.testing.assert_allclose(g_, w, rtol=rtol, atol=atol)
  return cm


def check_node(op_type: str, inputs: dict, attrs: dict | None = None, initializers: dict | None = None,
               n_outputs: int = 1, opset: int = 17, rtol=1e-4, atol=1e-5, input_order: list | None = None):
  """A single-node model: ``inputs`` are runtime inputs, ``initializers`` constant ones; the node's
  input list is ``input_order`` (names, "" for omitted) or runtime inputs then initializers."""
  order = input_order if input_order is not None else list(inputs) + list(initializers or {})
  outs = [f"y{k}" for k in range(n_outputs)]
  node = helper.make_node(op_type, order, outs, name=f"{op_type.lower()}_node", **(attrs or {}))
  m = make_model([node], inputs, outs, initializers, opset)
  return check_model(m, inputs, rtol, atol)


def to_half(model: onnx.ModelProto, elem: int = TensorProto.FLOAT16) -> onnx.ModelProto:
  """``model`` with every float32 tensor in ``elem`` (FLOAT16 or BFLOAT16): initializers (rounded to nearest
  even), inputs, outputs, value infos and Cast targets. What onnxconverter-common's float16 converter does, for
  the zoo's models (no Constant nodes, no float attributes that are tensors)."""
  import ml_dtypes
  m = onnx.ModelProto()
  m.CopyFrom(model)
  np_t = np.float16 if elem == TensorProto.FLOAT16 else ml_dtypes.bfloat16
  for t in m.graph.initializer:
    if t.data_type != TensorProto.FLOAT: continue
    with np.errstate(over="ignore"):     # a mask's -1e9 or float32's lowest: -inf in float16, as the converter does
      a = numpy_helper.to_array(t).astype(np_t)
    new = helper.make_tensor(t.name, elem, a.shape, a.view(np.uint16).reshape(-1).tobytes(), raw=True)
    t.CopyFrom(new)
  for vi in list(m.graph.input) + list(m.graph.output) + list(m.graph.value_info):
    if vi.type.tensor_type.elem_type == TensorProto.FLOAT: vi.type.tensor_type.elem_type = elem
  for n in m.graph.node:
    for a in n.attribute:
      if n.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT: a.i = elem
  return m


def rounded_weights(model: onnx.ModelProto, np_t) -> onnx.ModelProto:
  """``model`` (float32) with its float32 initializers rounded to ``np_t`` and kept in float32: the float32
  reference of a half model's weights (onnxruntime's CPU provider has no bfloat16 kernels)."""
  m = onnx.ModelProto()
  m.CopyFrom(model)
  for t in m.graph.initializer:
    if t.data_type == TensorProto.FLOAT:
      t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np_t).astype(np.float32), t.name))
  return m
