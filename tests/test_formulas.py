"""Sketch formulas: the population-at-once features and resource pre-filter of the Ansor search."""
import numpy as np
import pytest

from minicomp import workloads as W
from minicomp.search.annotate import check_values, draw_unroll, draw_values, make_candidate
from minicomp.search.features import evaluate_features, feature_names
from minicomp.search.features.formulas import SketchFormulas
from minicomp.search.sketch import generate_sketches
from minicomp.target import Target

CASES = {"matmul": lambda: W.matmul(256, 256, 128), "conv2d": lambda: W.conv2d(1, 8, 10, 10, 8, 3, 1, 1),
         "softmax": lambda: W.softmax(8, 100), "broadcast": lambda: W.broadcast_chain(3, 17, 29)}


@pytest.mark.parametrize("name", sorted(CASES))
def test_batched_features_equal_one_by_one_evaluation(name):
  (sk,) = generate_sketches(CASES[name]().outputs)[:1]
  f = SketchFormulas(sk)
  rng = np.random.default_rng(0)
  vals = [draw_values(sk, rng) for _ in range(12)]
  unr = [draw_unroll(sk, rng) for _ in range(12)]
  X = f.features(vals, unr)
  col = feature_names().index("auto_unroll_max_step")
  for k in (0, 5, 11):
    ref = evaluate_features(f.rows, vals[k])           # minicomp.ir.evaluate, one expression at a time
    ref[:, col] = np.log2(max(unr[k].values(), default=0) + 1.0)
    np.testing.assert_allclose(X[k], ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", sorted(CASES))
def test_resource_prefilter_agrees_with_lowering(name):
  (sk,) = generate_sketches(CASES[name]().outputs)[:1]
  tgt = Target("sm_86", max_shared_bytes_per_block=8192)       # tight, so both answers occur for matmul
  f = SketchFormulas(sk)
  rng = np.random.default_rng(1)
  vals = [draw_values(sk, rng) for _ in range(40)]
  ok = f.valid(vals, tgt)
  agree = 0
  for v, o in zip(vals, ok):
    cheap = bool(o) and check_values(sk, v, tgt) is None
    exact = make_candidate(sk, v, {}, tgt)[0] is not None
    assert not (cheap and not exact)                            # never lets an invalid candidate through
    agree += cheap == exact
  assert agree >= 36
