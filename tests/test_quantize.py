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


def _quantized(model, feeds, tmp_path, pre_process: bool = False) -> onnx.ModelProto:
  """``model`` as onnxruntime's quantize_static writes it (QDQ, int8 activations calibrated on 8 random inputs,
  per-channel int8 weights), after its recommended pre-processing (BatchNormalization folded) if asked."""
  from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
  from onnxruntime.quantization.shape_inference import quant_pre_process
  (name, x), = feeds.items()

  class Reader(CalibrationDataReader):
    def __init__(self):
      self.it = iter([{name: np.random.default_rng(s).standard_normal(x.shape).astype(np.float32)} for s in range(8)])

    def get_next(self): return next(self.it, None)
  fp, pp, qp = tmp_path / "f.onnx", tmp_path / "p.onnx", tmp_path / "q.onnx"
  onnx.save(model, fp)
  if pre_process: quant_pre_process(str(fp), str(pp), skip_symbolic_shape=True)
  quantize_static(str(pp if pre_process else fp), str(qp), Reader(), quant_format=QuantFormat.QDQ,
                  activation_type=QuantType.QInt8, weight_type=QuantType.QInt8, per_channel=True)
  return onnx.load(qp)


def test_int8_qdq_model_from_onnxruntime_static_quantization_matches_it(tmp_path):
  """A small ResNet basic block (8 channels, 10x10) quantized by onnxruntime's quantize_static: each
  DequantizeLinear -> Conv -> QuantizeLinear becomes a QLinearConv (frontend/qdq.py), an int32 sum of the int8
  values; the output equals onnxruntime's, and again after a save and a load."""
  from minicomp import zoo
  m, feeds = zoo.residual_block()
  q = _quantized(m, feeds, tmp_path)
  assert {"QuantizeLinear", "DequantizeLinear"} <= {n.op_type for n in q.graph.node}
  want = run_ort(q, feeds)[0]
  cm = mc.compile(q, target="sm_86", progress=False)
  assert sum("QLinearConv" in c.ops for c in cm.calls) == 2
  assert cm.calls[0].ops == ["QuantizeLinear"]     # the input stored once, as int8 (its readers dequantize it)
  assert np.array_equal(cm.run(feeds)[0], want)
  assert np.array_equal(mc.load(cm.save(tmp_path / "saved")).run(feeds)[0], want)   # int8 weights saved as int8


@pytest.mark.parametrize("schedules", ["rules", "gensor"])
def test_int8_qdq_resnet18_equals_onnxruntime_with_every_conv_an_integer_kernel(tmp_path, schedules):
  """ResNet-18's layers (width 16, 32x32: the simulator's time) through onnxruntime's pre-processing and static
  quantization: all 20 convolutions compile into QLinearConv kernels reading int8, all but the stem on dp4a, and the
  output equals onnxruntime's bit for bit."""
  from minicomp import zoo
  m, feeds = zoo.resnet18(hw=32, width=16, classes=10)
  q = _quantized(m, feeds, tmp_path, pre_process=True)
  cm = mc.compile(q, target="sm_86", schedules=schedules, progress=False)
  assert sum("QLinearConv" in c.ops for c in cm.calls) == 20 and not any("Conv" in c.ops for c in cm.calls)
  qconv = [c for c in cm.calls if "QLinearConv" in c.ops]
  assert all(cm.kernels[c.kernel].plan.inputs[0].dtype == "int8" for c in qconv[1:])   # the stem reads float x
  assert all("mc_dp4a" in cm.kernels[c.kernel].source for c in qconv[1:])    # (the stem's 3 channels: no dp4a)
  assert np.array_equal(cm.run(feeds, device="cpu")[0], run_ort(q, feeds)[0])


@pytest.mark.parametrize("zp,fused", [(-128, True), (0, False)])
def test_a_relu_before_quantize_is_dropped_only_where_saturation_implies_it(zp, fused):
  """DequantizeLinear -> Conv -> Relu -> QuantizeLinear: with the int8 zero point at -128 the Relu changes nothing
  after saturation and the pattern is a QLinearConv; at 0 it stays in float. Both equal onnxruntime."""
  from minicomp.frontend.qdq import fuse_qdq
  rng = np.random.default_rng(1)
  x = rng.integers(-128, 128, (1, 3, 6, 6)).astype(np.int8)
  nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
           helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], axis=0),
           helper.make_node("Conv", ["xf", "wf"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
           helper.make_node("Relu", ["c"], ["r"]),
           helper.make_node("QuantizeLinear", ["r", "ys", "yz"], ["y"])]
  inits = {"xs": np.float32(0.03), "xz": np.int8(2), "w": rng.integers(-128, 128, (4, 3, 3, 3)).astype(np.int8),
           "ws": np.array([0.01, 0.02, 0.015, 0.005], np.float32), "wz": np.zeros(4, np.int8),
           "ys": np.float32(0.1), "yz": np.int8(zp)}
  m = make_model(nodes, {"x": x}, ["y"], inits)
  assert fuse_qdq(m)[1] == int(fused)
  got = mc.compile(m, target="sm_86", schedules="rules", progress=False).run({"x": x}, device="cpu")[0]
  assert np.array_equal(got, run_ort(m, {"x": x})[0])
