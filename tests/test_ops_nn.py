"""Neural-network ops against onnxruntime: Conv, ConvTranspose, pooling, Pad, Resize, BatchNormalization,
InstanceNormalization, and the Conv+BatchNormalization folding pass."""
import numpy as np
import pytest
from onnx import helper

import minicomp as mc
from minicomp.errors import UnsupportedOpError
from onnx_harness import check_model, check_node, make_model, run_ort

rng = np.random.default_rng(0)


def f32(*shape): return rng.standard_normal(shape).astype(np.float32)


def compile_node(op_type, inputs, attrs=None, inits=None, n_outputs=1, opset=17, input_order=None):
  """Compile a one-node model without running it (for forms onnxruntime refuses too)."""
  order = input_order if input_order is not None else list(inputs) + list(inits or {})
  outs = [f"y{k}" for k in range(n_outputs)]
  node = helper.make_node(op_type, order, outs, name=f"{op_type.lower()}_node", **(attrs or {}))
  return mc.compile(make_model([node], inputs, outs, inits, opset), target="sm_80")


# ---------------------------------------------------------------------------------------------- Conv
CONV = {
  "3x3_pad1_bias": ((1, 4, 7, 7), (6, 4, 3, 3), {"pads": [1, 1, 1, 1]}, True),
  "stride2_asym_pads": ((2, 3, 8, 7), (4, 3, 3, 3), {"strides": [2, 2], "pads": [0, 1, 2, 1]}, True),
  "dilation2": ((1, 3, 9, 9), (4, 3, 3, 3), {"dilations": [2, 2], "pads": [1, 2, 1, 2]}, False),
  "depthwise": ((1, 4, 7, 7), (4, 1, 3, 3), {"group": 4, "pads": [1, 1, 1, 1]}, True),
  "depthwise_multiplier2": ((1, 3, 6, 6), (6, 1, 3, 3), {"group": 3, "strides": [2, 2]}, False),
  "grouped": ((1, 4, 7, 7), (6, 2, 3, 2), {"group": 2, "pads": [1, 0, 1, 1]}, True),
  "same_upper_stride2": ((1, 2, 7, 8), (3, 2, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}, False),
  "same_lower_stride2": ((1, 2, 7, 8), (3, 2, 2, 3), {"auto_pad": "SAME_LOWER", "strides": [2, 2]}, False),
  "valid": ((1, 2, 7, 8), (3, 2, 3, 3), {"auto_pad": "VALID", "strides": [1, 2]}, True),
  "1x1_kernel_shape_attr": ((2, 5, 4, 4), (3, 5, 1, 1), {"kernel_shape": [1, 1]}, False),
  "1d": ((2, 3, 9), (4, 3, 3), {"pads": [2, 1], "strides": [2], "dilations": [2]}, True),
  "3d": ((1, 2, 5, 4, 6), (3, 2, 3, 2, 3), {"pads": [1, 0, 1, 1, 0, 1], "strides": [1, 2, 1]}, True),
  "3d_depthwise": ((1, 2, 4, 4, 4), (2, 1, 2, 2, 2), {"group": 2}, False),
}


@pytest.mark.parametrize("case", list(CONV))
def test_conv(case):
  xs, ws, attrs, bias = CONV[case]
  inits = {"w": f32(*ws), **({"b": f32(ws[0])} if bias else {})}
  check_node("Conv", {"x": f32(*xs)}, attrs, inits)


def test_conv_runtime_weights():
  check_node("Conv", {"x": f32(1, 2, 6, 6), "w": f32(3, 2, 3, 3), "b": f32(3)}, {"pads": [1, 1, 1, 1]})


CONVT = {
  "basic": ((1, 3, 5, 5), (3, 2, 3, 3), {}, False),
  "stride2_pads_outpad_bias": ((1, 4, 5, 5), (4, 3, 3, 3), {"strides": [2, 2], "pads": [1, 0, 0, 1],
                                                          "output_padding": [1, 1]}, True),
  "group2_dilation": ((1, 4, 4, 5), (4, 3, 3, 2), {"strides": [2, 1], "group": 2, "dilations": [2, 1]}, True),
  "depthwise_stride3": ((2, 3, 4, 4), (3, 1, 2, 2), {"strides": [3, 3], "group": 3}, False),
  "output_shape": ((1, 2, 4, 4), (2, 3, 3, 3), {"strides": [2, 2], "output_shape": [8, 9]}, False),
  "same_upper": ((1, 2, 4, 5), (2, 2, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}, False),
  "same_lower": ((1, 2, 4, 5), (2, 2, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_LOWER"}, True),
  "1d": ((2, 3, 6), (3, 4, 3), {"strides": [2], "pads": [1, 2], "output_padding": [1]}, True),
  "3d": ((1, 2, 3, 3, 2), (2, 2, 2, 3, 2), {"strides": [2, 1, 2]}, False),
}


@pytest.mark.parametrize("case", list(CONVT))
def test_conv_transpose(case):
  xs, ws, attrs, bias = CONVT[case]
  inits = {"w": f32(*ws), **({"b": f32(ws[1] * attrs.get("group", 1))} if bias else {})}
  check_node("ConvTranspose", {"x": f32(*xs)}, attrs, inits)


# ---------------------------------------------------------------------------------------------- pooling
MAXPOOL = {
  "2x2_s2": ((1, 3, 8, 8), {"kernel_shape": [2, 2], "strides": [2, 2]}),
  "3x3_s2_pad1": ((2, 2, 7, 7), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
  "ceil_mode": ((1, 2, 7, 8), {"kernel_shape": [3, 2], "strides": [2, 3], "ceil_mode": 1}),
  "ceil_mode_pads": ((1, 2, 6, 6), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1}),
  "dilations": ((1, 2, 9, 9), {"kernel_shape": [2, 3], "dilations": [2, 2], "pads": [0, 1, 1, 1]}),
  "same_upper": ((1, 2, 7, 6), {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
  "same_lower": ((1, 2, 7, 6), {"kernel_shape": [2, 2], "strides": [2, 2], "auto_pad": "SAME_LOWER"}),
  "1d": ((2, 3, 10), {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
  "3d": ((1, 2, 4, 5, 6), {"kernel_shape": [2, 2, 3], "strides": [2, 2, 2]}),
}


@pytest.mark.parametrize("case", list(MAXPOOL))
def test_max_pool(case):
  xs, attrs = MAXPOOL[case]
  check_node("MaxPool", {"x": f32(*xs)}, attrs)


AVGPOOL = {
  "2x2_s2": ((1, 3, 8, 8), {"kernel_shape": [2, 2], "strides": [2, 2]}, 17),
  "pads_exclude": ((1, 2, 7, 7), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, 17),
  "pads_include": ((1, 2, 7, 7), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
                                 "count_include_pad": 1}, 17),
  "asym_pads_include": ((1, 2, 6, 5), {"kernel_shape": [3, 2], "pads": [2, 0, 1, 1], "count_include_pad": 1}, 17),
  "ceil_exclude": ((1, 2, 7, 8), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}, 17),
  "ceil_include_pads": ((1, 2, 6, 6), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
                                      "ceil_mode": 1, "count_include_pad": 1}, 17),
  "same_upper": ((1, 2, 7, 6), {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"}, 17),
  "1d": ((2, 3, 10), {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}, 17),
  "3d": ((1, 2, 4, 5, 6), {"kernel_shape": [2, 2, 3], "strides": [2, 2, 2], "pads": [0, 1, 1, 1, 0, 1]}, 17),
  "dilations_opset19": ((1, 2, 9, 9), {"kernel_shape": [2, 2], "dilations": [2, 3], "pads": [1, 1, 1, 1]}, 19),
}


@pytest.mark.parametrize("case", list(AVGPOOL))
def test_average_pool(case):
  xs, attrs, opset = AVGPOOL[case]
  check_node("AveragePool", {"x": f32(*xs)}, attrs, opset=opset)


LPPOOL = {
  "p2_pads_strides": ((1, 3, 7, 7), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, 17),
  "p1_1d": ((2, 3, 10), {"kernel_shape": [3], "strides": [2], "p": 1}, 17),
  "p3_3d": ((1, 2, 4, 5, 6), {"kernel_shape": [2, 2, 3], "pads": [0, 1, 1, 1, 0, 1], "p": 3}, 17),
  "dilations_ceil_opset18": ((1, 2, 9, 8), {"kernel_shape": [2, 2], "dilations": [2, 2], "strides": [2, 2],
                                            "ceil_mode": 1, "p": 4}, 18),
  "same_lower": ((1, 2, 7, 6), {"kernel_shape": [3, 2], "strides": [2, 1], "auto_pad": "SAME_LOWER"}, 17),
}


@pytest.mark.parametrize("case", list(LPPOOL))
def test_lp_pool(case):
  """(sum |x|^p over the window)^(1/p), against onnxruntime: p 1, 2 and beyond, pads, dilations, ceil_mode."""
  xs, attrs, opset = LPPOOL[case]
  check_node("LpPool", {"x": f32(*xs)}, attrs, opset=opset)


@pytest.mark.parametrize("p", [1, 2, 3])
@pytest.mark.parametrize("shape", [(2, 3, 5, 6), (1, 4, 3, 2, 5), (2, 3, 7)], ids=["2d", "3d", "1d"])
def test_global_lp_pool(shape, p):
  """(sum |x|^p over every spatial dim)^(1/p), the dims kept as 1, against onnxruntime."""
  check_node("GlobalLpPool", {"x": f32(*shape)}, {"p": p}, opset=17)


@pytest.mark.parametrize("op_type", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("shape", [(2, 3, 5, 6), (1, 4, 3, 2, 5)], ids=["2d", "3d"])
def test_global_pool(op_type, shape):
  check_node(op_type, {"x": f32(*shape)})


def test_max_pool_indices_output_is_unsupported():
  with pytest.raises(UnsupportedOpError, match="Indices"):
    compile_node("MaxPool", {"x": f32(1, 2, 4, 4)}, {"kernel_shape": [2, 2]}, n_outputs=2)


# ---------------------------------------------------------------------------------------------- Pad
def i64(*v): return np.array(v, np.int64)


PAD = {   # data, mode, pads, constant_value, axes, opset
  "constant_value": (f32(2, 3, 4), "constant", i64(0, 1, 2, 1, 0, 1), np.float32(1.5), None, 13),
  "constant_default": (f32(3, 4), "constant", i64(1, 0, 2, 3), None, None, 17),
  "crop_and_pad": (f32(2, 5, 6), "constant", i64(0, -1, 2, 0, 1, -3), np.float32(-2.0), None, 13),
  "crop_only": (f32(4, 6), "constant", i64(-1, 0, -2, -3), None, None, 13),
  "reflect": (f32(1, 2, 5, 4), "reflect", i64(0, 0, 2, 3, 0, 0, 4, 1), None, None, 13),
  "edge": (f32(1, 2, 4, 4), "edge", i64(0, 0, 3, 1, 0, 0, 1, 5), None, None, 13),
  "wrap_opset19": (f32(2, 3, 4), "wrap", i64(0, 2, 1, 0, 1, 3), None, None, 19),
  "int64": (rng.integers(-9, 9, (3, 4)).astype(np.int64), "constant", i64(1, 2, 0, 1), np.int64(7), None, 13),
  "bool_edge": (rng.random((3, 4)) > 0.5, "edge", i64(1, 2, 0, 1), None, None, 13),
  "axes_opset18": (f32(2, 3, 4), "constant", i64(1, 2, 0, 3), np.float32(0.5), i64(1, -1), 18),
  "axes_reflect_opset18": (f32(2, 5, 4), "reflect", i64(2, 3), None, i64(-2), 18),
}


@pytest.mark.parametrize("case", list(PAD))
def test_pad(case):
  data, mode, pads, cv, axes, opset = PAD[case]
  inits = {"pads": pads, **({"cv": cv} if cv is not None else {}), **({"axes": axes} if axes is not None else {})}
  order = ["x", "pads", "cv" if cv is not None else "", *(["axes"] if axes is not None else [])]
  check_node("Pad", {"x": data}, {"mode": mode}, inits, opset=opset, input_order=order)


def test_pad_runtime_constant_value():
  check_node("Pad", {"x": f32(3, 4), "cv": np.array(2.5, np.float32)}, {}, {"pads": i64(1, 0, 0, 2)},
             input_order=["x", "pads", "cv"])


def test_pad_runtime_pads_is_unsupported():
  with pytest.raises(UnsupportedOpError, match="pads must be a constant"):
    compile_node("Pad", {"x": f32(3, 4), "pads": i64(1, 0, 0, 2)})


# ---------------------------------------------------------------------------------------------- Resize
def f32a(*v): return np.array(v, np.float32)


RESIZE = {   # x shape, attrs, scales, sizes, opset
  "nearest_x2_asym_floor": ((1, 2, 3, 4), {"coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
                            f32a(1, 1, 2, 2), None, 13),
  "nearest_half_pixel_prefer_floor": ((1, 2, 4, 5), {}, f32a(1, 1, 1.5, 0.6), None, 13),
  "nearest_half_pixel_prefer_ceil": ((1, 2, 4, 5), {"nearest_mode": "round_prefer_ceil"}, f32a(1, 1, 1.5, 2.5),
                                     None, 13),
  "nearest_align_corners_ceil": ((2, 1, 4, 3), {"coordinate_transformation_mode": "align_corners",
                                                "nearest_mode": "ceil"}, None, i64(2, 1, 7, 5), 13),
  "nearest_pytorch_sizes": ((1, 2, 5, 6), {"coordinate_transformation_mode": "pytorch_half_pixel"}, None,
                            i64(1, 2, 3, 9), 13),
  "nearest_ties_prefer_floor": ((1, 1, 3, 3), {"coordinate_transformation_mode": "asymmetric"}, f32a(1, 1, 4, 4),
                                None, 13),
  "nearest_ties_prefer_ceil": ((1, 1, 3, 3), {"coordinate_transformation_mode": "asymmetric",
                                              "nearest_mode": "round_prefer_ceil"}, f32a(1, 1, 4, 4), None, 13),
  "nearest_downsample": ((1, 3, 8, 8), {"coordinate_transformation_mode": "asymmetric"}, f32a(1, 1, 0.5, 0.5), None,
                         13),
  "linear_half_pixel_x2": ((1, 2, 3, 4), {"mode": "linear"}, f32a(1, 1, 2, 2), None, 13),
  "linear_half_pixel_down": ((1, 2, 8, 7), {"mode": "linear"}, f32a(1, 1, 0.5, 0.6), None, 13),
  "linear_align_corners": ((1, 2, 3, 4), {"mode": "linear", "coordinate_transformation_mode": "align_corners"},
                           None, i64(1, 2, 7, 5), 13),
  "linear_asymmetric": ((2, 1, 4, 4), {"mode": "linear", "coordinate_transformation_mode": "asymmetric"},
                        f32a(1, 1, 1.5, 3), None, 13),
  "linear_pytorch_to_1": ((1, 2, 4, 4), {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"},
                          None, i64(1, 2, 1, 6), 13),
  "linear_axes_opset18": ((1, 2, 4, 5), {"mode": "linear", "axes": [2, 3]}, f32a(2, 1.5), None, 18),
  "nearest_axes_neg_opset18": ((1, 2, 4, 5), {"axes": [-1]}, None, i64(8), 18),
  "linear_not_larger_opset18": ((1, 2, 4, 6), {"mode": "linear", "axes": [2, 3],
                                               "keep_aspect_ratio_policy": "not_larger"}, None, i64(8, 9), 18),
  "nearest_half_pixel_symmetric_opset19": ((1, 2, 4, 5), {"coordinate_transformation_mode": "half_pixel_symmetric"},
                                           f32a(1, 1, 1.7, 2.2), None, 19),
}


@pytest.mark.parametrize("case", list(RESIZE))
def test_resize(case):
  xs, attrs, scales, sizes, opset = RESIZE[case]
  inits = {"scales": scales} if scales is not None else {"sizes": sizes}
  order = ["x", "", "scales" if scales is not None else "", *(["sizes"] if sizes is not None else [])]
  check_node("Resize", {"x": f32(*xs)}, attrs, inits, opset=opset, input_order=order)


def test_resize_cubic():
  check_node("Resize", {"x": f32(1, 2, 3, 5)}, {"mode": "cubic"}, {"scales": f32a(1, 1, 2, 1.6)},
             input_order=["x", "", "scales"])


# ONNX's coordinate rule for every coordinate_transformation_mode, scales and sizes, down- and upsampling
# by non-integer factors (no output index lands on a nearest-rounding tie: float32 and ONNX's float64
# reference would round a tie apart). ONNX's reference evaluator is the oracle; onnxruntime agrees except
# where it uses the rounded output length (align_corners and pytorch_half_pixel with a fractional one).
RESIZE_FORMS = {"down": ("scales", f32a(1, 1, 0.6, 0.45)), "up": ("scales", f32a(1, 1, 1.7, 2.35)),
                "sizes": ("sizes", i64(1, 2, 3, 11)), "to_one": ("scales", f32a(1, 1, 0.3, 0.2))}
ORT_ROUNDS_LENGTH = {("align_corners", "down"), ("align_corners", "up"), ("pytorch_half_pixel", "to_one")}


@pytest.mark.parametrize("form", list(RESIZE_FORMS))
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("ctm", ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                                 "asymmetric", "tf_half_pixel_for_nn"])
def test_resize_coordinate_rule(ctm, mode, form):
  from onnx.reference import ReferenceEvaluator
  kind, value = RESIZE_FORMS[form]
  x = f32(1, 2, 5, 7)
  node = helper.make_node("Resize", ["x", "", "scales"] if kind == "scales" else ["x", "", "", "sizes"], ["y"],
                          mode=mode, coordinate_transformation_mode=ctm)
  m = make_model([node], {"x": x}, ["y"], {kind: value}, 19)
  got = mc.compile(m, target="sm_80", schedules="rules").run({"x": x}, device="cpu")[0]
  if ctm != "tf_half_pixel_for_nn":        # (ONNX's reference evaluator lacks the deprecated mode)
    want = ReferenceEvaluator(m).run(None, {"x": x})[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  if (ctm, form) not in ORT_ROUNDS_LENGTH:
    np.testing.assert_allclose(got, run_ort(m, {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_resize_align_corners_divides_by_the_unrounded_length():
  """ONNX's test_resize_downsample_scales_linear_align_corners: 4 x 0.6 = 2.4 columns, so column 1 reads
  input coordinate 1 * 3 / 1.4 = 2.142857 (onnxruntime divides by 2 - 1 and returns 4)."""
  x = np.array([[[[1, 2, 3, 4], [5, 6, 7, 8]]]], np.float32)
  node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="linear",
                          coordinate_transformation_mode="align_corners")
  m = make_model([node], {"x": x}, ["y"], {"scales": f32a(1, 1, 0.6, 0.6)}, 13)
  got = mc.compile(m, target="sm_80", schedules="rules").run({"x": x}, device="cpu")[0]
  np.testing.assert_allclose(got, [[[[1, 3.142857]]]], rtol=1e-6)


def test_resize_runtime_scales_is_unsupported():
  with pytest.raises(UnsupportedOpError, match="scales must be a constant"):
    compile_node("Resize", {"x": f32(1, 1, 3, 3), "scales": f32a(1, 1, 2, 2)}, input_order=["x", "", "scales"])


# ---------------------------------------------------------------------------------------------- normalisation
def _bn_params(c):
  return {"scale": f32(c), "B": f32(c), "mean": f32(c), "var": rng.random(c).astype(np.float32) + 0.5}


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (2, 4, 6), (3, 5)], ids=["4d", "3d", "2d"])
def test_batch_norm_constant_params(shape):
  check_node("BatchNormalization", {"x": f32(*shape)}, {"epsilon": 1e-3}, _bn_params(shape[1]), opset=15)


def test_batch_norm_runtime_params():
  check_node("BatchNormalization", {"x": f32(2, 3, 4, 4), **_bn_params(3)}, opset=15)


def test_batch_norm_training_mode_is_unsupported():
  with pytest.raises(UnsupportedOpError, match="training"):
    compile_node("BatchNormalization", {"x": f32(2, 3, 4, 4)}, {"training_mode": 1}, _bn_params(3), 3, opset=15)


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (1, 4, 7)], ids=["4d", "3d"])
def test_instance_norm(shape):
  check_node("InstanceNormalization", {"x": f32(*shape)}, {"epsilon": 1e-4},
             {"scale": f32(shape[1]), "B": f32(shape[1])})


# ---------------------------------------------------------------------------------------------- BN folding
def _conv_bn_relu(bias: bool):
  c, f = 3, 4
  inits = {"w": f32(f, c, 3, 3), **({"cb": f32(f)} if bias else {}), **_bn_params(f)}
  nodes = [helper.make_node("Conv", ["x", "w", "cb" if bias else ""], ["c"], name="conv", pads=[1, 1, 1, 1]),
           helper.make_node("BatchNormalization", ["c", "scale", "B", "mean", "var"], ["bn"], name="bn"),
           helper.make_node("Relu", ["bn"], ["y"], name="relu")]
  return make_model(nodes, {"x": f32(1, c, 6, 6)}, ["y"], inits)


@pytest.mark.parametrize("bias", [True, False], ids=["conv_bias", "no_conv_bias"])
def test_fold_batchnorm(bias):
  """minicomp.compile folds BN into the conv: one kernel, same result as onnxruntime."""
  from minicomp.frontend.onnx_import import load_onnx
  from minicomp.graph.fold import fold_batchnorm
  m = _conv_bn_relu(bias)
  g = load_onnx(m)
  folded = fold_batchnorm(g)
  assert folded.op_counts() == {"Conv": 1, "Relu": 1}
  assert g.op_counts() == {"Conv": 1, "BatchNormalization": 1, "Relu": 1}   # the input graph is unchanged
  conv = folded.producer("bn")
  assert conv.op_type == "Conv" and list(folded.nx.successors(conv.name)) == ["relu"]
  cm = check_model(m, {"x": f32(1, 3, 6, 6)})
  assert len(cm.calls) == 1


def test_fold_batchnorm_skips_shared_conv_output():
  from minicomp.frontend.onnx_import import load_onnx
  from minicomp.graph.fold import fold_batchnorm
  inits = {"w": f32(4, 3, 3, 3), **_bn_params(4)}
  nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
           helper.make_node("BatchNormalization", ["c", "scale", "B", "mean", "var"], ["bn"], name="bn"),
           helper.make_node("Add", ["bn", "c"], ["y"], name="add")]
  g = load_onnx(make_model(nodes, {"x": f32(1, 3, 6, 6)}, ["y"], inits))
  assert fold_batchnorm(g).op_counts() == g.op_counts()


SAME_DILATED = {   # onnxruntime refuses dilations with auto_pad SAME_*: compare with ONNX's reference evaluator
  "conv_same_upper": ("Conv", {"auto_pad": "SAME_UPPER", "dilations": [2, 1], "strides": [1, 2]}, (3, 2, 3, 2)),
  "conv_same_lower": ("Conv", {"auto_pad": "SAME_LOWER", "dilations": [2, 2]}, (3, 2, 2, 3)),
  "maxpool_same_upper": ("MaxPool", {"auto_pad": "SAME_UPPER", "dilations": [2, 2], "kernel_shape": [2, 3]}, None),
}


@pytest.mark.parametrize("case", list(SAME_DILATED))
def test_same_pad_with_dilation_vs_onnx_reference(case):
  from onnx.reference import ReferenceEvaluator
  op_type, attrs, ws = SAME_DILATED[case]
  x = f32(1, 2, 7, 8)
  inits = {"w": f32(*ws)} if ws else {}
  m = make_model([helper.make_node(op_type, ["x", *inits], ["y"], **attrs)], {"x": x}, ["y"], inits)
  want = ReferenceEvaluator(m).run(None, {"x": x})[0]
  got = mc.compile(m, target="sm_80").run({"x": x}, device="cpu")[0]
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_lp_pool_and_bit_shift_refuse_bad_attributes_by_name():
  from minicomp.errors import MinicompError
  x = np.ones((1, 1, 4, 4), np.float32)
  m = make_model([helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[2, 2], p=0, name="lp")], {"x": x}, ["y"])
  with pytest.raises(MinicompError, match="lp.*p must be a positive integer"):
    mc.compile(m, target="sm_80", progress=False)
  u = np.ones((4,), np.uint8)
  m = make_model([helper.make_node("BitShift", ["a", "b"], ["y"], direction="UP", name="sh")], {"a": u, "b": u}, ["y"])
  with pytest.raises(MinicompError, match="sh.*direction"):
    mc.compile(m, target="sm_80", progress=False)


@pytest.mark.parametrize("attr", ["strides", "dilations"])
def test_conv_transpose_with_a_zero_stride_or_dilation_is_a_model_error_naming_the_node(attr):
  """Fuzz seed 26 (2026-11-30): strides [0, 0] was a ZeroDivisionError traceback."""
  from onnx import TensorProto, numpy_helper
  from minicomp.errors import ModelError
  node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="ct", **{attr: [0, 1]})
  graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
                            [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", "c", "h", "w"])],
                            [numpy_helper.from_array(f32(2, 3, 3, 3), "w")])
  m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
  with pytest.raises(ModelError, match=r"ct.*strides and dilations must be positive"):
    mc.compile(m, target="sm_80", progress=False)
