"""ConvInteger, MatMulInteger, QLinearConv, QLinearMatMul (minicomp/graph/ops/qlinear.py) and DynamicQuantizeLinear
(frontend/expand.py) against onnxruntime and numpy's exact integer arithmetic; an int8 model in onnxruntime's
QOperator format against onnxruntime."""
import numpy as np
import onnx
import pytest
from onnx import helper

import minicomp as mc
from onnx_harness import make_model, run_ort

rng = np.random.default_rng(0)


def _u8(*s): return rng.integers(0, 256, s).astype(np.uint8)
def _i8(*s): return rng.integers(-128, 128, s).astype(np.int8)


def _run(m, feeds):
  return mc.compile(m, target="sm_86", schedules="rules", progress=False).run(feeds, device="cpu")


def test_matmul_integer_is_exact_past_float32s_integers():
  """K = 1024 with full-range operands: sums pass 2^24, where a float32 accumulation would round; per-row and
  per-column zero points; against numpy in int64."""
  a, b = rng.integers(200, 256, (2, 3, 1024)).astype(np.uint8), rng.integers(100, 128, (1024, 5)).astype(np.int8)
  a_zp, b_zp = rng.integers(0, 9, 3).astype(np.uint8), rng.integers(-9, 0, 5).astype(np.int8)
  m = make_model([helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])], {"a": a}, ["y"],
                 {"b": b, "az": a_zp, "bz": b_zp})
  want = (a.astype(np.int64) - a_zp[:, None]) @ (b.astype(np.int64) - b_zp)
  assert np.abs(want).max() > 2 ** 24
  got = _run(m, {"a": a})[0]
  assert got.dtype == np.int32 and np.array_equal(got, want)


def test_conv_integer_pads_with_the_zero_point_as_onnxruntime():
  x, w = _u8(1, 4, 7, 6), _u8(6, 2, 3, 3)
  m = make_model([helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], pads=[1, 2, 1, 0], strides=[2, 1],
                                   group=2)], {"x": x}, ["y"], {"w": w, "xz": np.uint8(120), "wz": np.uint8(3)})
  got, want = _run(m, {"x": x})[0], run_ort(m, {"x": x})[0]
  assert got.dtype == np.int32 and np.array_equal(got, want)


@pytest.mark.parametrize("out_type", [np.uint8, np.int8])
def test_qlinear_conv_with_per_channel_scales_and_bias_matches_onnxruntime(out_type):
  """y's type is x's (onnxruntime's kernels are registered so)."""
  x, w = (_u8 if out_type == np.uint8 else _i8)(1, 3, 9, 9), _i8(4, 3, 3, 3)
  inits = {"xs": np.float32(0.05), "xz": out_type(3), "w": w, "ws": np.array([0.01, 0.02, 0.005, 0.03], np.float32),
           "wz": np.zeros(4, np.int8), "ys": np.float32(0.2), "yz": out_type(10), "b": rng.integers(-500, 500, 4).astype(np.int32)}
  m = make_model([helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"],
                                   pads=[1, 1, 1, 1])], {"x": x}, ["y"], inits)
  got, want = _run(m, {"x": x})[0], run_ort(m, {"x": x})[0]
  assert got.dtype == out_type
  assert np.abs(got.astype(int) - want).max() <= 1 and np.mean(got == want) > 0.99
  assert len(np.unique(want)) > 10       # not saturated flat


def test_qlinear_matmul_matches_onnxruntime():
  a, b = _u8(2, 4, 16), _u8(16, 3)
  inits = {"as": np.float32(0.02), "az": np.uint8(100), "b": b, "bs": np.float32(0.03), "bz": np.uint8(130),
           "ys": np.float32(0.5), "yz": np.uint8(120)}
  m = make_model([helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])], {"a": a},
                 ["y"], inits)
  got, want = _run(m, {"a": a})[0], run_ort(m, {"a": a})[0]
  assert got.dtype == np.uint8 and np.abs(got.astype(int) - want).max() <= 1 and np.mean(got == want) > 0.95


def test_dynamic_quantize_linear_matches_onnxruntime():
  x = (rng.standard_normal((3, 7)) * 4 + 1).astype(np.float32)
  m = make_model([helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])], {"x": x}, ["y", "s", "z"])
  got, want = _run(m, {"x": x}), run_ort(m, {"x": x})
  assert [g.dtype for g in got] == [np.uint8, np.float32, np.uint8]
  assert np.array_equal(got[0], want[0]) and np.array_equal(got[2], want[2])
  np.testing.assert_allclose(got[1], want[1], rtol=1e-6)


def test_qlinear_conv_of_a_float_input_is_refused_naming_the_node():
  x = rng.standard_normal((1, 3, 5, 5)).astype(np.float32)
  inits = {"xs": np.float32(0.05), "xz": np.uint8(128), "w": _i8(4, 3, 3, 3), "ws": np.float32(0.01),
           "wz": np.int8(0), "ys": np.float32(0.2), "yz": np.uint8(10)}
  node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"], name="qconv")
  g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, list(x.shape))],
                        [helper.make_tensor_value_info("y", onnx.TensorProto.UINT8, [1, 4, 3, 3])],
                        [onnx.numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
  m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
  with pytest.raises(mc.MinicompError, match="qconv"):
    mc.compile(m, target="sm_86", schedules="rules", progress=False)
