"""A seeded sample of the fuzzing harness (benchmarks/fuzz.py): mutated ONNX models, tampered saved
models and corrupted tuning logs. Every case must end in a match with the reference or a clean
MinicompError: no silent mismatch, no other exception, no crash, no hang. The long run (>= 1,000
cases) is the benchmark; its table is in benchmarks/README.md."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
import fuzz  # noqa: E402


def _check(results, n):
  assert len(results) == n
  bad = [r for r in results if r["class"] in fuzz.FAILURES]
  assert not bad, "\n".join(f"{r['class']}: {r['case']}: {r.get('why', '')}" for r in bad)
  return {c: sum(r["class"] == c for r in results) for c in ("match", "clean")}


def test_onnx_mutants_are_matched_or_refused_cleanly():
  results = fuzz.run(60, seed=11, kinds=["onnx"], timeout_s=240)
  counts = _check(results, 60)
  assert counts["match"] >= 2 and counts["clean"] >= 30   # the sample exercises both outcomes
  for what in ("cname", "chain", "nonfinite"):            # the second round's classes: hostile names (saved and
    assert any(what in r["case"] for r in results), what  # loaded too), deep chains, non-finite feeds


def test_every_saved_model_tamper_is_refused_or_harmless():
  import tamper
  n = len(tamper.CASES)
  counts = _check(fuzz.run(n, seed=0, kinds=["tamper"], timeout_s=240), n)
  assert counts["clean"] >= n - 2


@pytest.mark.slow
def test_corrupted_tuning_logs_never_give_a_wrong_model():
  counts = _check(fuzz.run(24, seed=5, kinds=["log"], timeout_s=240), 24)
  assert counts["match"] >= 12          # a damaged log still compiles a correct model, from its valid records


def test_mutator_is_deterministic_per_seed():
  import numpy as np
  m = fuzz.seed_models()["gemm"]
  a = [fuzz.mutate(m, np.random.default_rng(3)) for _ in range(2)]
  assert a[0] == a[1]
