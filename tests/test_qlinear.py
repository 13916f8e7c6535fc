"""ConvInteger, MatMulInteger, QLinearConv, QLinearMatMul (minicomp/graph/ops/qlinear.py) and DynamicQuantizeLinear
(frontend/expand.py) against onnxruntime and numpy's exact integer arithmetic; an int8 model in onnxruntime's
QOperator format against onnxruntime.

onnxruntime 1.32.0 computes some integer convolutions wrongly on the CPU: QLinearConv of uint8 x and int8 w, and
ConvInteger of int8 x and uint8 w, by up to 100 against numpy and ONNX's own reference evaluator, which agree with
each other and with minicomp (2026-12-01; the onnxruntime of 2026-11-30's CI agreed). Those tests judge by ONNX's
reference evaluator (:func:`_reference`), a numpy implementation of the spec, instead."""
import re

import numpy as np
import onnx
import pytest
from onnx import helper

import minicomp as mc
from onnx_harness import make_model, run_ort

rng = np.random.default_rng(0)


def _reference(m: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
  """ONNX's reference evaluator (numpy): the judge where onnxruntime 1.32 is wrong (module docstring)."""
  from onnx.reference import ReferenceEvaluator
  return ReferenceEvaluator(m).run(None, feeds)


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
  got, want = _run(m, {"x": x})[0], _reference(m, {"x": x})[0]
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


def _sources(cm) -> str:
  return "\n".join(k.source for k in cm.kernels)


@pytest.mark.parametrize("a_type,b_type,a_zp", [(np.uint8, np.int8, "tensor"), (np.int8, np.int8, "row"),
                                                (np.uint8, np.uint8, None), (np.int8, np.uint8, "tensor")])
@pytest.mark.parametrize("schedules", ["rules", "gensor"])
def test_matmul_integer_with_constant_weights_runs_on_dp4a(a_type, b_type, a_zp, schedules):
  """B a constant with no zero point (a QDQ model's weights), K a multiple of 4: one dp4a per four steps of k (A read
  a word at a time, B transposed at compile time), A's zero point taken off after the sum; exact against numpy's
  int64 product, with the rule-based schedule and Gensor's (whose fetches go through shared memory)."""
  info = np.iinfo(a_type)
  a = rng.integers(info.min, info.max + 1, (2, 6, 64)).astype(a_type)
  b = rng.integers(np.iinfo(b_type).min, np.iinfo(b_type).max + 1, (64, 12)).astype(b_type)
  zp = {"tensor": a_type(7), "row": rng.integers(-9, 9, 6).astype(a_type), None: None}[a_zp]
  inits = {"b": b, **({"az": zp} if zp is not None else {})}
  m = make_model([helper.make_node("MatMulInteger", ["a", "b"] + (["az"] if zp is not None else []), ["y"])],
                 {"a": a}, ["y"], inits)
  shift = 0 if zp is None else zp.astype(np.int64)[:, None] if zp.ndim else np.int64(zp)
  want = (a.astype(np.int64) - shift) @ b.astype(np.int64)
  cm = mc.compile(m, target="sm_86", schedules=schedules, progress=False)
  got = cm.run({"a": a}, device="cpu")[0]
  assert got.dtype == np.int32 and np.array_equal(got, want)
  src = _sources(cm)
  signs = "".join("s" if t == np.int8 else "u" for t in (a_type, b_type))
  assert f"mc_dp4a_{signs}(" in src and "mc_word(&" in src


def test_a_weight_with_a_zero_point_or_k_not_a_multiple_of_4_keeps_the_widening_sum():
  """Where dp4a does not apply the sum is the widened one, still exact."""
  for k, bz in ((64, np.int8(3)), (30, None)):
    a, b = _u8(5, k), _i8(k, 7)
    inits = {"b": b, **({"bz": bz} if bz is not None else {})}
    node = helper.make_node("MatMulInteger", ["a", "b"] + (["", "bz"] if bz is not None else []), ["y"])
    cm = mc.compile(make_model([node], {"a": a}, ["y"], inits), target="sm_86", schedules="rules", progress=False)
    want = a.astype(np.int64) @ (b.astype(np.int64) - (0 if bz is None else int(bz)))
    assert np.array_equal(cm.run({"a": a}, device="cpu")[0], want)
    assert "mc_dp4a" not in _sources(cm)


def _qdq_matmul(a, w, y_scale: float):
  """DequantizeLinear -> MatMul -> QuantizeLinear: uint8 ``a`` (zero point 120), int8 symmetric weights ``w``, a
  uint8 output (zero point 128) of scale ``y_scale``."""
  nodes = [helper.make_node("DequantizeLinear", ["a", "as", "az"], ["af"]),
           helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"]),
           helper.make_node("MatMul", ["af", "wf"], ["yf"]),
           helper.make_node("QuantizeLinear", ["yf", "ys", "yz"], ["y"])]
  inits = {"as": np.float32(0.02), "az": np.uint8(120), "w": w, "ws": np.float32(0.01), "wz": np.int8(0),
           "ys": np.float32(y_scale), "yz": np.uint8(128)}
  return make_model(nodes, {"a": a}, ["y"], inits)


def test_a_qdq_matmul_becomes_a_dp4a_kernel_matching_onnxruntime():
  """DequantizeLinear -> MatMul -> QuantizeLinear with int8 symmetric weights (onnxruntime's default for weights):
  the QLinearMatMul it becomes runs on dp4a; within one step of onnxruntime on under 5% of the outputs."""
  a = _u8(4, 32)
  m = _qdq_matmul(a, _i8(32, 16), 0.05)
  cm = mc.compile(m, target="sm_86", progress=False)
  got, want = cm.run({"a": a}, device="cpu")[0], run_ort(m, {"a": a})[0]
  assert got.dtype == np.uint8 and np.abs(got.astype(int) - want).max() <= 1 and np.mean(got != want) < 0.05
  assert re.search(r"mc_dp4av?_us\(", _sources(cm))     # (a uint8, w int8)


def test_a_qdq_matmul_runs_on_int8_tensor_cores_only_where_compile_is_asked_to(monkeypatch):
  """The same QDQ matmul at 128 x 256 x 256. By default compile keeps it on dp4a, also for the H100 whose static model
  estimates the int8 tensor cores faster (an H200 ran them slower: compiler.INT8_TENSOR_CORE_TEMPLATE). Switched on,
  compile's tensor-core template (graph/tensor_core_schedules.py) tensorizes its dot4 sum on mma.sync m16n8k32
  (uint8 x int8) and the model keeps it for the H100: the same bytes as dp4a (exact int32 sums, one requantization),
  within one step of onnxruntime (its float rounding of the requantization) on under 5% of the outputs; every
  candidate builds for sm_80 and reads both fragments with ldmatrix (no other shared load)."""
  import minicomp.compiler
  from minicomp.graph.tensor_core_schedules import tensor_core_schedules
  a = _u8(128, 256)
  m = _qdq_matmul(a, _i8(256, 256), 2.0)
  want = run_ort(m, {"a": a})[0]
  default = mc.compile(m, target="h100", progress=False)
  assert "mc_mma_" not in _sources(default) and re.search(r"mc_dp4av?_us\(", _sources(default))
  monkeypatch.setattr(minicomp.compiler, "INT8_TENSOR_CORE_TEMPLATE", True)
  h100, sm80 = (mc.compile(m, target=t, progress=False) for t in ("h100", "sm_80"))
  assert "mc_mma_m16n8k32_u8s8(" in _sources(h100) and re.search(r"mc_dp4av?_us\(", _sources(sm80))
  got = h100.run({"a": a}, device="cpu")[0]
  assert np.array_equal(got, sm80.run({"a": a}, device="cpu")[0])
  assert np.array_equal(got, default.run({"a": a}, device="cpu")[0])
  assert np.abs(got.astype(int) - want).max() <= 1 and np.mean(got != want) < 0.05
  task = next(t for t in mc.compile(m, target="sm_80", schedules="rules", progress=False).tasks if "MatMul" in t.ops
              or "QLinearMatMul" in t.ops)
  schedules = tensor_core_schedules(task.dag, mc.Target("sm_80"))
  assert schedules
  for s in schedules:
    k = mc.build(s, target="sm_80")
    assert "mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32" in k.binary.ptx
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in k.binary.ptx and "ld.shared" not in k.binary.ptx


@pytest.mark.parametrize("c, hw, m, k, x_type", [(64, 16, 64, 3, np.uint8), (64, 8, 32, 1, np.int8)])
def test_an_int8_convolution_on_the_tensor_cores_equals_onnxruntime(monkeypatch, c, hw, m, k, x_type):
  """A ConvInteger's dot4 sum (four channels of a tap a term; x blocked by four channels, weights channels-last) on
  mma.sync m16n8k32 through compile's tensor-core template (switched on) with the static model made to prefer it (it
  keeps dp4a at these sizes): the kernel is the tensor-core one and its output onnxruntime's exactly."""
  import minicomp.compiler
  import minicomp.search.static.estimate as E
  monkeypatch.setattr(minicomp.compiler, "INT8_TENSOR_CORE_TEMPLATE", True)
  real = E.estimate

  class Cheap:
    def __init__(self, e, k): self.latency_s = e.latency_s * (0.01 if "mc_mma" in k.source else 1.0)
  monkeypatch.setattr(E, "estimate", lambda kern, t=None: Cheap(real(kern, t), kern))
  x = rng.integers(np.iinfo(x_type).min, np.iinfo(x_type).max + 1, (1, c, hw, hw)).astype(x_type)
  model = make_model([helper.make_node("ConvInteger", ["x", "w", "xz"], ["y"], pads=[k // 2] * 4)], {"x": x}, ["y"],
                     {"w": _i8(m, c, k, k), "xz": x_type(3)})
  cm = mc.compile(model, target="sm_80", progress=False)
  signs = "".join("s" if t == np.int8 else "u" for t in (x_type, np.int8))
  assert f"mc_mma_m16n8k32_{signs[0]}8{signs[1]}8(" in _sources(cm)
  assert np.array_equal(cm.run({"x": x}, device="cpu")[0], run_ort(model, {"x": x})[0])


@pytest.mark.parametrize("x_type,w_type,x_zp,group,attrs,schedules", [
  (np.uint8, np.int8, 120, 1, {"pads": [1, 1, 1, 1]}, "rules"),
  (np.int8, np.int8, -5, 2, {"pads": [1, 2, 1, 0], "strides": [2, 1]}, "gensor"),
  (np.uint8, np.uint8, None, 1, {"dilations": [2, 2], "pads": [2, 2, 2, 2]}, "gensor"),
  (np.int8, np.uint8, 0, 1, {}, "rules"),
  (np.uint8, np.int8, 77, 2, {"auto_pad": "SAME_UPPER", "strides": [2, 2]}, "gensor")])
def test_conv_integer_with_constant_weights_runs_on_dp4a(x_type, w_type, x_zp, group, attrs, schedules):
  """Constant weights with no zero point and channels per group a multiple of 4: one dp4a per four channels of a tap
  (the weights stored channels-last, x blocked by four channels and padded with its zero point, which is taken off
  after the sum as x_zero_point x the weights' sums); exact against ONNX's reference evaluator, with pads, strides,
  groups and dilations, with the rule-based schedule and Gensor's."""
  x = rng.integers(np.iinfo(x_type).min, np.iinfo(x_type).max + 1, (1, 8, 9, 7)).astype(x_type)
  w = rng.integers(np.iinfo(w_type).min, np.iinfo(w_type).max + 1, (6, 8 // group, 3, 3)).astype(w_type)
  inits = {"w": w, **({"xz": x_type(x_zp)} if x_zp is not None else {})}
  node = helper.make_node("ConvInteger", ["x", "w"] + (["xz"] if x_zp is not None else []), ["y"], group=group, **attrs)
  m = make_model([node], {"x": x}, ["y"], inits)
  cm = mc.compile(m, target="sm_86", schedules=schedules, progress=False)
  got, want = cm.run({"x": x}, device="cpu")[0], _reference(m, {"x": x})[0]
  assert got.dtype == np.int32 and np.array_equal(got, want)
  signs = "".join("s" if t == np.int8 else "u" for t in (x_type, w_type))
  assert re.search(rf"mc_dp4a_{signs}\(mc_word\(", _sources(cm)) and "mc_pack4(" not in _sources(cm)   # x's four
  # channels one word too: the padded input is blocked by four channels ([N, C / 4, H, W, 4]) in its shared tile


def test_a_saved_dp4a_model_loads_and_runs(tmp_path):
  """The dp4a helpers are not in the saved kernel text (which holds no asm: the loader refuses it); NVRTC and the
  simulator have their own (nvrtc.DP4A_HEADER, cuda_shim.h)."""
  x, w = _u8(1, 8, 6, 6), _i8(4, 8, 3, 3)
  inits = {"xs": np.float32(0.05), "xz": np.uint8(3), "w": w, "ws": np.float32(0.01), "wz": np.int8(0),
           "ys": np.float32(0.2), "yz": np.uint8(10)}
  m = make_model([helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"], pads=[1] * 4)],
                 {"x": x}, ["y"], inits)
  cm = mc.compile(m, target="sm_86", progress=False)
  assert "mc_dp4a" in _sources(cm) and "asm" not in _sources(cm)
  cm.save(tmp_path / "m")
  got = mc.load(tmp_path / "m").run({"x": x}, device="cpu")[0]
  assert np.array_equal(got, cm.run({"x": x}, device="cpu")[0])
  assert np.abs(got.astype(int) - _reference(m, {"x": x})[0]).max() <= 1


@pytest.mark.parametrize("x_shape,w_shape,attrs", [((2, 8, 11), (5, 8, 3), {"pads": [1, 1], "strides": [2]}),
                                                   ((1, 4, 5, 6, 4), (3, 4, 2, 3, 2), {"pads": [0, 1, 0, 1, 0, 1]})])
def test_conv_integer_on_dp4a_in_one_and_three_dims(x_shape, w_shape, attrs):
  x, w = _u8(*x_shape), _i8(*w_shape)
  m = make_model([helper.make_node("ConvInteger", ["x", "w", "xz"], ["y"], **attrs)], {"x": x}, ["y"],
                 {"w": w, "xz": np.uint8(77)})
  cm = mc.compile(m, target="sm_86", progress=False)
  assert np.array_equal(cm.run({"x": x}, device="cpu")[0], run_ort(m, {"x": x})[0]) and "mc_dp4a" in _sources(cm)
