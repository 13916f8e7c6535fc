"""The nine real architectures ONNX ships as "light" models (onnx/backend/test/data/light: opset 9, every
weight built by a ConstantOfShape) compile as they are and match ONNX's stored output and onnxruntime.

Constant weights make every class score equal (the output is a uniform softmax whatever the convolutions
compute), so the models also run with seeded random weights in place of the ConstantOfShape values and
the pre-softmax scores as an extra output, against onnxruntime. Compiled with the rule schedules and no
search; the CPU simulator takes 5 to 45 s per 224x224 model, so all but the smallest are slow tests.
Also here: LRN, the op three of them need, against onnxruntime."""
import os

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import minicomp as mc
from onnx_harness import check_node, run_ort

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
FAST = {"squeezenet"}
MODELS = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet", "squeezenet",
          "vgg19", "zfnet512"]
RANDOM = ["bvlc_alexnet", "squeezenet", "inception_v1", "resnet50", "shufflenet", "densenet121"]


def _param(names, fast):
  return [pytest.param(n, marks=() if n in fast else pytest.mark.slow) for n in names]


def _load(name: str):
  """The model and the input ONNX's runner feeds it: arange(n) / n in the input's shape."""
  m = onnx.load(os.path.join(LIGHT, f"light_{name}.onnx"))
  inits = {t.name for t in m.graph.initializer}
  inp = next(i for i in m.graph.input if i.name not in inits)
  shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
  n = int(np.prod(shape))
  return m, {inp.name: (np.arange(n).reshape(shape) / n).astype(np.float32)}


def _compile_run(m, feeds):
  cm = mc.compile(m, target="sm_80", trials=0, schedules="rules")
  return cm.run(feeds, device="cpu")


@pytest.mark.parametrize("name", _param(MODELS, FAST))
def test_light_model_as_it_is_matches_reference_and_onnxruntime(name):
  m, feeds = _load(name)
  ref = numpy_helper.to_array(onnx.load_tensor(os.path.join(LIGHT, f"light_{name}_output_0.pb")))
  (got,) = _compile_run(m, feeds)
  assert got.shape == ref.shape and got.dtype == ref.dtype
  np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-7)   # ONNX's backend test tolerance
  np.testing.assert_allclose(got, run_ort(m, feeds)[0], rtol=1e-3, atol=1e-7)


def _randomised(m: onnx.ModelProto, feeds: dict) -> onnx.ModelProto:
  """``m`` with each ConstantOfShape weight replaced by seeded random values (scaled by fan-in;
  BatchNormalization scale / variance and Mul factors near 1) and the Softmax input as an extra output."""
  rng = np.random.default_rng(0)
  inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
  users = {}
  for n in m.graph.node:
    for k, i in enumerate(n.input): users.setdefault(i, []).append((n.op_type, k))
  r = onnx.ModelProto(); r.CopyFrom(m)
  keep, new = [], []
  for n in r.graph.node:
    if n.op_type != "ConstantOfShape" or n.input[0] not in inits:
      keep.append(n); continue
    shape = tuple(int(d) for d in inits[n.input[0]])
    use = users.get(n.output[0], [])
    if any(u in (("BatchNormalization", 1), ("BatchNormalization", 4)) or u[0] == "Mul" for u in use):
      w = rng.uniform(0.5, 1.5, shape)
    else:
      w = rng.standard_normal(shape) * (np.prod(shape[1:]) ** -0.5 if len(shape) > 1 else 0.1)
    new.append(numpy_helper.from_array(w.astype(np.float32), n.output[0]))
  del r.graph.node[:]
  r.graph.node.extend(keep)
  r.graph.initializer.extend(new)
  r.graph.input.extend(helper.make_tensor_value_info(t.name, onnx.TensorProto.FLOAT, t.dims) for t in new)   # IR 3
  sm = [n.input[0] for n in r.graph.node if n.op_type == "Softmax"]
  if sm:   # opset-9 shape inference does not reach it through the Reshape: take its shape from a run
    r.graph.output.append(helper.make_tensor_value_info(sm[0], onnx.TensorProto.FLOAT, None))
    shape = run_ort(r, feeds)[-1].shape
    r.graph.output[-1].CopyFrom(helper.make_tensor_value_info(sm[0], onnx.TensorProto.FLOAT, shape))
  return r


@pytest.mark.parametrize("name", _param(RANDOM, {"squeezenet", "bvlc_alexnet"}))
def test_light_model_with_random_weights_matches_onnxruntime(name):
  m, feeds = _load(name)
  r = _randomised(m, feeds)
  want = run_ort(r, feeds)
  got = _compile_run(r, feeds)
  assert len(got) == len(want) == len(r.graph.output)
  for g, w in zip(got, want):
    assert g.shape == w.shape and np.ptp(w) > 0      # the scores differ: the weights reach them
    np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-4 * float(np.abs(w).max()))


rng = np.random.default_rng(3)


def _check_lrn(x, size, attrs, rtol, atol):
  """minicomp against the spec's formula in numpy (onnxruntime's LRN takes odd sizes, float32, 4-D only;
  ONNX's reference evaluator loops over the batch dim where it means channels)."""
  from onnx_harness import make_model
  m = make_model([helper.make_node("LRN", ["x"], ["y"], size=size, **attrs)], {"x": x}, ["y"], opset=13)
  defaults = {"alpha": 1e-4, "beta": 0.75, "bias": 1.0}
  alpha, beta, bias = (float(np.float32(attrs.get(k, d))) for k, d in defaults.items())   # float32 attributes
  C, sq = x.shape[1], np.zeros_like(x)
  for c in range(C):
    sq[:, c] = (x[:, max(0, c - (size - 1) // 2):min(C, c + size // 2 + 1)] ** 2).sum(axis=1)
  want = x / (bias + alpha / size * sq) ** beta
  got = mc.compile(m, target="sm_80", schedules="rules").run({"x": x}, device="cpu")[0]
  assert got.dtype == x.dtype
  np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("size,shape,attrs", [(5, (1, 7, 4, 5), {"alpha": 1e-2, "beta": 0.6, "bias": 2.0}),
                                              (1, (1, 3, 4, 4), {}), (3, (2, 4, 3, 3), {"alpha": 0.5})])
def test_lrn_matches_onnxruntime(size, shape, attrs):
  check_node("LRN", {"x": rng.standard_normal(shape).astype(np.float32)}, {"size": size, **attrs}, opset=13)


def test_lrn_even_window_3d_input_and_float64_match_the_spec():
  """An even window reaches one channel further up than down; a window wider than the channels."""
  _check_lrn(rng.standard_normal((2, 6, 3, 3)).astype(np.float32), 4, {"alpha": 0.5}, 1e-5, 1e-6)
  _check_lrn(rng.standard_normal((2, 5, 7)).astype(np.float32), 2, {"alpha": 0.5, "beta": 1.0}, 1e-5, 1e-6)
  _check_lrn(rng.standard_normal((1, 3, 2, 2)), 7, {"alpha": 0.3}, 1e-9, 1e-12)
