"""The one folding kit (minicomp/ir/arith.py): its documented examples, and folding equals evaluating."""
import doctest

import numpy as np

import minicomp.ir.arith as A
from minicomp.ir.evaluate import evaluate
from minicomp.ir.expr import var


def test_documented_examples():
  r = doctest.testmod(A, optionflags=doctest.ELLIPSIS)
  assert r.attempted >= 6 and r.failed == 0


def test_folding_equals_evaluating_bit_for_bit():
  """A formula built on constants folds to the value that evaluating the same formula built on a variable
  gives: the feature extractor's concrete and symbolic paths agree exactly."""
  x = var("x")
  rng = np.random.default_rng(0)
  for v in rng.integers(1, 5000, 200).tolist():
    def f(a): return A.slog(A.add(A.div(A.mul(a, 3), 10), A.log2(A.add(a, 1))))
    folded = f(v)
    assert folded.is_const
    assert np.float64(folded.arg) == np.float64(evaluate(f(x), {"x": np.int64(v)})), v


def test_finite_mode_drops_what_exact_mode_keeps():
  x = A.fl(var("x"))
  assert A.add(x, 0.0) is not x and A.add(x, 0.0, finite=True) is x
  assert A.mul(x, 0.0, finite=True).is_const and not A.mul(x, 0.0).is_const
  assert A.sub(x, 0.0) is x and A.mul(x, 1.0) is x
