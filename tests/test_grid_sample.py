"""GridSample (graph/ops/grid_sample.py) against onnxruntime: every mode, padding mode and align_corners on 2-D
inputs, and 3-D (volumetric) linear and nearest, with grids reaching past [-1, 1] so that the padding rules
and reflections over more than one span are used. Bicubic with border padding is checked against ONNX's
reference (numpy) instead: ONNX clamps the coordinate into the input before taking the 4 x 4 taps, onnxruntime
(as PyTorch) clamps each tap only, and minicomp follows ONNX (docs/onnx.md)."""
import itertools

import numpy as np
import pytest
from onnx import TensorProto, helper

import minicomp as mc


def _model(x_shape, grid_shape, opset, **attrs):
  g = helper.make_graph([helper.make_node("GridSample", ["x", "grid"], ["y"], **attrs)], "gs",
                        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape),
                         helper.make_tensor_value_info("grid", TensorProto.FLOAT, grid_shape)],
                        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [*x_shape[:2], *grid_shape[1:-1]])])
  return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _ort(m, feeds):
  import onnxruntime as ort
  return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def _check(x_shape, grid_shape, opset, **attrs):
  rng = np.random.default_rng(sum(map(ord, str(sorted(attrs.items())))))
  x = rng.standard_normal(x_shape).astype(np.float32)
  grid = rng.uniform(-2.6, 2.6, grid_shape).astype(np.float32)     # past the borders, by more than one span
  grid.reshape(-1)[:6] = [-1.0, 1.0, 0.0, -2.0, 2.0, 0.5]          # exact borders and reflection points
  feeds = {"x": x, "grid": grid}
  m = _model(x_shape, grid_shape, opset, **attrs)
  got = mc.compile(m, target="sm_86", progress=False).run(feeds)[0]
  if (attrs["mode"], attrs["padding_mode"]) == ("bicubic", "border"):
    from onnx.reference import ReferenceEvaluator
    want = ReferenceEvaluator(_model(x_shape, grid_shape, 20, **{**attrs, "mode": "cubic"})).run(None, feeds)[0]
  else:
    want = _ort(m, feeds)
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode,padding,align", list(itertools.product(("bilinear", "nearest", "bicubic"),
                                                                     ("zeros", "border", "reflection"), (0, 1))))
def test_grid_sample_2d_matches_onnxruntime(mode, padding, align):
  _check((2, 3, 5, 7), (2, 4, 6, 2), 16, mode=mode, padding_mode=padding, align_corners=align)


@pytest.mark.parametrize("mode,padding", [("linear", "zeros"), ("nearest", "border"), ("linear", "reflection")])
def test_grid_sample_3d_matches_onnxruntime(mode, padding):
  _check((1, 2, 4, 5, 3), (1, 3, 2, 4, 3), 20, mode=mode, padding_mode=padding, align_corners=0)


def test_bad_grid_sample_forms_are_named_errors():
  from minicomp.errors import ModelError, UnsupportedOpError
  with pytest.raises(UnsupportedOpError, match="mode 'area'"):
    mc.compile(_model((1, 1, 4, 4), (1, 2, 2, 2), 16, mode="area"), target="sm_86", progress=False)
  with pytest.raises(UnsupportedOpError, match="cubic sampling of 3 spatial dims"):
    mc.compile(_model((1, 1, 3, 4, 4), (1, 2, 2, 2, 3), 20, mode="cubic"), target="sm_86", progress=False)
  g = _model((1, 1, 4, 4), (1, 2, 2, 2), 16)
  g.graph.input[1].type.tensor_type.shape.dim[3].dim_value = 3                  # a grid of 3 coordinates for 2 dims
  with pytest.raises(ModelError, match="GridSample"):
    mc.compile(g, target="sm_86", progress=False)


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
def test_a_grid_past_floats_range_is_out_of_bounds_not_undefined(mode):
  """Grid coordinates of +-inf and +-1e30 (fuzz seed 45, 2026-12-02: a linear, align_corners GridSample answered
  NaN for an infinite coordinate where ``"zeros"`` padding means 0; onnxruntime converts such coordinates to int64
  as C leaves undefined and returns an arbitrary pixel mix, ONNX's reference raises): out of bounds, so 0 under
  ``"zeros"`` and the edge's value under ``"border"`` (the output at +-1 with align_corners); a NaN coordinate gives
  NaN where weights come from it (linear, cubic)."""
  rng = np.random.default_rng(0)
  x = rng.standard_normal((1, 2, 3, 4)).astype(np.float32)
  grid = rng.uniform(-0.9, 0.9, (1, 2, 5, 2)).astype(np.float32)
  grid[0, 0, :, 0] = [np.inf, -np.inf, 1e30, -1e30, np.nan]
  grid[0, 1, :, 0] = [1.0, -1.0, 1.0, -1.0, 0.0]
  grid[0, 1, :, 1] = grid[0, 0, :, 1]
  for padding in ("zeros", "border"):
    m = _model([1, 2, 3, 4], [1, 2, 5, 2], 16, mode=mode, padding_mode=padding, align_corners=1)
    y = mc.compile(m, target="sm_86", progress=False).run({"x": x, "grid": grid})[0]
    far, edge = y[:, :, 0, :4], y[:, :, 1, :4]
    if padding == "zeros":
      assert np.array_equal(far, np.zeros_like(far))
    else:
      np.testing.assert_allclose(far, edge, rtol=1e-6, atol=1e-6)
    assert np.isnan(y[:, :, 0, 4]).all() == (mode != "nearest")
    assert np.isfinite(y[:, :, 1]).all()
