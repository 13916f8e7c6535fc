"""The static model against published GPU measurements (benchmarks/static_model_fidelity.py):
Simon Boehm's six SGEMM kernels at 4096^3 on an RTX A6000. Every figure here is an estimate
compared with a published measurement; nothing runs on a GPU."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
import static_model_fidelity as F  # noqa: E402

import minicomp as mc  # noqa: E402
from minicomp.search.static.estimate import estimate  # noqa: E402


@pytest.mark.slow
def test_estimates_rank_and_scale_like_the_published_measurements():
  measured, est = [], []
  for name, gflops in F.PUBLISHED:
    e = estimate(mc.build(F.SCHEDULES[name](), target="sm_86"), F.DEVICE)
    measured.append(gflops)
    est.append(2.0 * F.N ** 3 / e.latency_s / 1e9)
  assert F.spearman(measured, est) >= 0.9, list(zip(measured, est))
  assert all(0.5 <= e / m <= 2.0 for m, e in zip(measured, est)), list(zip(measured, est))


def test_spearman():
  assert F.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
  assert F.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
