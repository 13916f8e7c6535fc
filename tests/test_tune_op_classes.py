"""Tuning one small model per op class (issue 14's list, the classes not covered by
test_tune_gather / test_expand_chain / test_tune_conv_variants): each finishes in bounded time,
raises nothing, matches onnxruntime, and its estimate is not worse than the default schedules'."""
import concurrent.futures as cf
import time

import numpy as np
import pytest
from onnx import helper

import minicomp as mc
from minicomp.search.measure import StaticMeasurer
from onnx_harness import make_model, run_ort

rng = np.random.default_rng(0)
f32 = lambda *s: rng.standard_normal(s).astype(np.float32)


def _depthwise():
  return make_model([helper.make_node("Conv", ["x", "w"], ["y"], group=8, pads=[1, 1, 1, 1])],
                    {"x": f32(1, 8, 10, 10)}, ["y"], {"w": f32(8, 1, 3, 3)})


def _grouped():
  return make_model([helper.make_node("Conv", ["x", "w"], ["y"], group=2, pads=[1, 1, 1, 1])],
                    {"x": f32(1, 8, 8, 8)}, ["y"], {"w": f32(8, 4, 3, 3)})


def _bmm():
  return make_model([helper.make_node("MatMul", ["a", "b"], ["y"])], {"a": f32(4, 16, 24), "b": f32(4, 24, 20)}, ["y"])


def _softmax():
  return make_model([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], {"x": f32(16, 100)}, ["y"])


def _layernorm():
  return make_model([helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1)],
                    {"x": f32(16, 64)}, ["y"], {"g": f32(64), "b": f32(64)})


def _reducel2():
  return make_model([helper.make_node("ReduceL2", ["x"], ["y"], axes=[1], keepdims=0)], {"x": f32(32, 200)}, ["y"],
                    opset=17)


MODELS = {"depthwise": _depthwise, "grouped_conv": _grouped, "batch_matmul": _bmm, "softmax": _softmax,
          "layernorm": _layernorm, "reduce_l2": _reducel2}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_each_op_class_tunes(name, tmp_path):
  model = MODELS[name]()
  feeds = {i.name: f32(*[d.dim_value for d in i.type.tensor_type.shape.dim]) for i in model.graph.input}
  default = mc.compile(model, target="sm_86")
  pool = cf.ThreadPoolExecutor(2)
  t0 = time.perf_counter()
  try:
    with StaticMeasurer(executor=pool) as meas:
      tuned = mc.compile(model, target="sm_86", trials=6, strategy="ansor", measures_per_round=3, measurer=meas,
                         log_file=str(tmp_path / "log.jsonl"))
  finally:
    pool.shutdown()
  assert time.perf_counter() - t0 < 240, "tuning took too long"
  for g, w in zip(tuned.run(feeds, device="cpu"), run_ort(model, feeds)):
    np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
  assert tuned.estimate().latency_s <= default.estimate().latency_s * (1 + 1e-9)


def test_grouped_conv_sketches_lower_symbolically_and_their_samples_are_correct():
  """A grouped conv reads input channel (m // (M/group)) * (C/group) + rc: the channels a tile of
  m needs shift with the tile (a tile of 6 over groups of 4 covers 2 or 3 groups), so the shared
  tile's extent is bounded by ceil(tile / (M/group)) groups, free of the outer loops; the sketch
  then lowers symbolically (formulas, not one lowering per candidate: 85 s -> ~12 s for the
  tuning test above), and concrete samples still compute the convolution."""
  import numpy as np
  from minicomp import workloads as W
  from minicomp.search.annotate import sample_population
  from minicomp.search.features.formulas import formulas_or_none
  from minicomp.search.sketch import generate_sketches
  from test_tune_conv_variants import _dag
  dag = _dag(_grouped())
  sketches = generate_sketches(dag, "sm_86")
  assert sketches and all(formulas_or_none(sk) is not None for sk in sketches)
  x, w = f32(1, 8, 8, 8), f32(8, 4, 3, 3)
  want = W.conv2d_ref(x, w, 1, 1, 1, groups=2)
  for c in sample_population(sketches, 6, np.random.default_rng(1), "sm_86"):
    kern = mc.build(c.schedule, target="sm_86")
    args = [x if tuple(a.shape) == x.shape else w for a in kern.plan.inputs]
    np.testing.assert_allclose(kern(*args), want, rtol=1e-4, atol=1e-4)
