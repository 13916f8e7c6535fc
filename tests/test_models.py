"""Whole models built with onnx.helper (minicomp.zoo), compiled and compared with onnxruntime."""
import numpy as np
import pytest

import minicomp as mc
from minicomp import zoo
from onnx_harness import run_ort

# attention / normalisation chains accumulate float32 rounding through several reductions
TOL = {"transformer_encoder": (1e-4, 1e-4), "decoder_block": (1e-4, 1e-4)}


@pytest.mark.parametrize("name", sorted(zoo.TEST_MODELS))
def test_model_matches_onnxruntime(name):
  model, feeds = zoo.TEST_MODELS[name]()
  want = run_ort(model, feeds)
  cm = mc.compile(model, target="sm_80")
  got = cm.run(feeds, device="cpu")
  rtol, atol = TOL.get(name, (1e-4, 1e-5))
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
  assert sum(len(c.ops) for c in cm.calls) > len(cm.calls), "nothing was fused"


@pytest.mark.parametrize("build", [lambda: zoo.mobilenet_v2(hw=32, classes=10), lambda: zoo.bert_tiny(s=16)],
                         ids=["mobilenet_v2", "bert_tiny"])
def test_benchmark_models_match_onnxruntime(build):
  """The compile-time benchmark's models (small sizes, rule-based schedules: the defaults are tested above)."""
  model, feeds = build()
  got = mc.compile(model, target="sm_80", schedules="rules", progress=False).run(feeds, device="cpu")[0]
  np.testing.assert_allclose(got, run_ort(model, feeds)[0], rtol=1e-4, atol=1e-4)


def test_batchnorm_is_folded_into_conv():
  model, feeds = zoo.residual_block()
  cm = mc.compile(model, target="sm_80")
  assert not any("BatchNormalization" in c.ops for c in cm.calls)
