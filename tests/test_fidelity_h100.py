"""The H100 timings of benchmarks/data/h100-2026-11-24 and the helpers of the fidelity benchmark
that read them (benchmarks/static_model_fidelity.py). No fidelity figures are asserted here: the
benchmark prints those; this checks that the data loads and replays into kernels minicomp builds."""
import math
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
import static_model_fidelity as F  # noqa: E402

import minicomp as mc  # noqa: E402
from minicomp import workloads as W  # noqa: E402

WORKLOADS = {"matmul_1024": 64, "conv_resnet_56x56x64": 64, "depthwise_112x112x32": 64,
             "softmax_4096x1024": 6, "layernorm_4096x768": 6}


@pytest.fixture(scope="module")
def records():
  return F.load_measured()


def test_data_loads(records):
  assert len(records) == 204
  counts = {}
  for r in records:
    counts[r["workload"]] = counts.get(r["workload"], 0) + 1
    assert r["target"] == "sm_90" and r["correct"] is True
    assert 0 < r["min_s"] <= r["median_s"] < 1.0 and r["steps"]
  assert counts == WORKLOADS


def _subset(records, per_workload=2):
  """The first and the last record of each workload (deterministic)."""
  by = {}
  for r in records: by.setdefault(r["workload"], []).append(r)
  return [r for rs in by.values() for r in (rs[0], rs[-1])[:per_workload]]


def test_records_replay_and_build_for_sm90(records):
  for r in _subset(records):
    wl = W.from_call(r["workload_call"])
    kern = mc.build(F.replay(r), target="sm_90")
    assert kern.target.arch == "sm_90", r["workload"]
    # one launch per measured launch (the registers list has one entry per launch)
    assert len(kern.plan.launches) == len(r["registers"]), r["workload"]
    assert [b.shape for b in kern.plan.outputs] == [tuple(t.shape) for t in wl.outputs]


def test_estimate_record_reports_terms(records):
  r = next(r for r in records if r["workload"].startswith("softmax"))
  out = F.estimate_record(r)
  assert out["estimate_s"] > 0 and out["launches"][0]["bound"]
  assert math.isclose(sum(l["latency_s"] for l in out["launches"]), out["estimate_s"])


def test_workload_call_is_parsed_not_evaluated():
  assert W.from_call("minicomp.workloads.conv2d(1, 4, 8, 8, 4, 3, pad=1)").outputs[0].shape == (1, 4, 8, 8)
  for bad in ("os.system('true')", "minicomp.workloads.matmul(__import__('os').getpid(), 2, 2)",
              "minicomp.workloads.nothing(1)"):
    with pytest.raises(mc.UsageError):
      W.from_call(bad)


def test_spearman_known_values():
  # no ties: 1 - 6 * sum(d^2) / (n (n^2 - 1)) = 1 - 6 * 4 / 120
  assert F.spearman([10, 20, 30, 40, 50], [2, 1, 4, 3, 5]) == pytest.approx(0.8)
  # ties share their mean rank: ranks (1, 2.5, 2.5, 4) against (1, 2, 3, 4) -> 4.5 / sqrt(4.5 * 5)
  assert F.spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(4.5 / math.sqrt(22.5))
  assert F.spearman([3, 1, 2], [30, 10, 20]) == pytest.approx(1.0)
  assert math.isnan(F.spearman([1, 1, 1], [1, 2, 3]))


def test_top_overlap_and_pick():
  est, meas = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [10, 9, 8, 7, 6, 5, 4, 3, 2, 1]
  assert F.top_overlap(est, meas) == (0.0, 1)
  assert F.top_overlap(est, est) == (1.0, 1)
  assert F.top_overlap(est, meas, fraction=0.5) == (0.0, 5)
  # three schedules tied for the lowest estimate, one place: the fastest gets it a third of the time
  assert F.top_overlap([1, 1, 1, 2], [5, 6, 7, 8], fraction=0.25) == (pytest.approx(1 / 3), 1)
  assert F.pick_time([2, 1, 1], [5.0, 6.0, 8.0]) == (7.0, 2)
