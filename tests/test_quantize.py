"""QuantizeLinear / DequantizeLinear and int8 QDQ models (the form onnxruntime's static quantization writes),
against onnxruntime and ONNX's rules (round half to even, saturation, per-axis scales)."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import minicomp as mc
from onnx_harness import make_model, run_ort


def _compile_run(m, feeds):
  return mc.compile(m, target="sm_86", progress=False).run(feeds)


@pytest.mark.parametrize("zp_type", [np.int8, np.uint8, np.int16, np.uint16])
def test_quantize_rounds_half_to_even_and_saturates(zp_type):
  info = np.iinfo(zp_type)
  x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 1e6, -1e6, 3.2, -7.7, 0.0], np.float32).reshape(2, 5)
  zp = np.array(3 if info.min == 0 else -2, zp_type)
  m = make_model([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])], {"x": x}, ["y"],
                 initializers={"s": np.array(0.5, np.float32), "z": zp}, opset=21)   # (int16: opset 21)
  got = _compile_run(m, {"x": x})[0]
  want = np.clip(np.round(x / np.float32(0.5)) + int(zp), info.min, info.max).astype(zp_type)   # np.round: half to even
  assert got.dtype == zp_type and np.array_equal(got, want)
  assert np.array_equal(got, run_ort(m, {"x": x})[0])


def test_per_axis_quantize_and_dequantize_match_onnxruntime():
  rng = np.random.default_rng(0)
  x = rng.standard_normal((2, 3, 4, 4)).astype(np.float32) * 3
  scale = np.array([0.02, 0.05, 0.1], np.float32)
  zp = np.array([-3, 0, 7], np.int8)
  nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1),
           helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1)]
  m = make_model(nodes, {"x": x}, ["q", "y"], initializers={"s": scale, "z": zp}, opset=19)
  q, y = _compile_run(m, {"x": x})
  rq, ry = run_ort(m, {"x": x})
  assert q.dtype == np.int8 and np.array_equal(q, rq) and np.array_equal(y, ry)


def test_blocked_quantization_is_refused_by_name():
  x = np.ones((4, 4), np.float32)
  m = make_model([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], axis=1, block_size=2)], {"x": x}, ["y"],
                 initializers={"s": np.full((4, 2), 0.1, np.float32), "z": np.zeros((4, 2), np.int8)}, opset=21)
  with pytest.raises(mc.UnsupportedOpError, match="blocked quantization"):
    mc.compile(m, target="sm_86", progress=False)


def test_int8_qdq_model_from_onnxruntime_static_quantization_matches_it(tmp_path):
  """A small ResNet basic block (8 channels, 10x10) quantized by onnxruntime's quantize_static (QDQ, int8
  activations and per-channel int8 weights): minicomp computes between each DequantizeLinear and QuantizeLinear
  in float32, onnxruntime with its int8 kernels; here the outputs are equal (at 64 channels and 56x56 a few
  differ by up to 3 output steps: docs/onnx.md)."""
  from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
  from minicomp import zoo
  m, feeds = zoo.residual_block()
  (name, x), = feeds.items()

  class Reader(CalibrationDataReader):
    def __init__(self):
      self.it = iter([{name: np.random.default_rng(s).standard_normal(x.shape).astype(np.float32)} for s in range(8)])

    def get_next(self): return next(self.it, None)
  fp, qp = tmp_path / "f.onnx", tmp_path / "q.onnx"
  onnx.save(m, fp)
  quantize_static(str(fp), str(qp), Reader(), quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8,
                  weight_type=QuantType.QInt8, per_channel=True)
  q = onnx.load(qp)
  assert {"QuantizeLinear", "DequantizeLinear"} <= {n.op_type for n in q.graph.node}
  import onnxruntime as ort
  want = ort.InferenceSession(str(qp), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
  got = mc.compile(q, target="sm_86", progress=False).run(feeds)[0]
  step = float(np.min(np.abs(np.diff(np.unique(want)))))       # the output's quantization step
  assert np.abs(got - want).max() <= 1e-6 * max(1.0, step), (np.abs(got - want).max(), step)
