"""Tuning models with a Gather (embedding lookups): an index that reads a tensor.

The feature extractor reads every loaded index value as the position it is loaded from
(``feature_sites._positions``), so the symbolic formulas that Ansor and Felix score and the concrete
extractor agree on gather programs, and no formula holds a LOAD (issue #14: ``KeyError: Op.LOAD``
in ``FormulaEval`` on every model with a Gather, for "ansor" at once and "felix" after one round).
"""
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from onnx import helper
from onnx_harness import make_model, run_ort

import minicomp
from minicomp import workloads as W
from minicomp.errors import ExprError
from minicomp.ir.expr import Expr, const, var
from minicomp.ir.loop import Buffer
from minicomp.ir.ops import Op
from minicomp.search.features import evaluate_features, extract_features, extract_program_exprs, feature_names
from minicomp.search.features.formulas import FormulaEval, SketchFormulas
from minicomp.search.measure import StaticMeasurer
from minicomp.search.records import load_records
from minicomp.search.sketch import generate_sketches
from minicomp.target import Target

TGT = Target("sm_86")
TIMEOUT_S = 300        # a tuning run here takes 1-50 s (more on a busy machine); past this it hangs


def gather_model():
  """One Gather: int64 indices (2, 7) into a float table (100, 32), some negative (wrapped)."""
  rng = np.random.default_rng(0)
  table = rng.standard_normal((100, 32)).astype(np.float32)
  idx = rng.integers(-100, 100, (2, 7)).astype(np.int64)
  node = helper.make_node("Gather", ["table", "idx"], ["y"], axis=0)
  return make_model([node], {"idx": idx}, ["y"], {"table": table}), {"idx": idx}


def embedding_model():
  """Embedding lookup, then a projection: Gather -> MatMul -> Add (one fused task)."""
  rng = np.random.default_rng(1)
  table = rng.standard_normal((100, 32)).astype(np.float32)
  w = rng.standard_normal((32, 16)).astype(np.float32)
  b = rng.standard_normal(16).astype(np.float32)
  idx = rng.integers(0, 100, (2, 7)).astype(np.int64)
  nodes = [helper.make_node("Gather", ["table", "idx"], ["e"], axis=0),
           helper.make_node("MatMul", ["e", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])]
  return make_model(nodes, {"idx": idx}, ["y"], {"table": table, "w": w, "b": b}), {"idx": idx}


MODELS = {"gather": gather_model, "embedding": embedding_model}


def _bounded(fn, timeout_s: float):
  """``fn()`` in a daemon thread: a hang fails the test instead of stalling the run."""
  out: dict = {}

  def go():
    try: out["value"] = fn()
    except BaseException as e:  # noqa: BLE001 -- re-raised in the test's thread
      out["error"] = e
  t = threading.Thread(target=go, daemon=True)
  t.start()
  t.join(timeout_s)
  assert not t.is_alive(), f"did not finish in {timeout_s} s"
  if "error" in out: raise out["error"]
  return out["value"]


@pytest.mark.parametrize("name, strategy", [
  ("gather", "random"), ("gather", "ansor"), ("gather", "felix"),
  ("embedding", "random"), ("embedding", "ansor"),
  # a first descent of 200 steps over 16 variables: ~15 s on an idle 2-core machine, ~50 s on a busy one
  pytest.param("embedding", "felix", marks=pytest.mark.slow),
])
def test_tune_model_with_gather(name, strategy, tmp_path):
  model, feeds = MODELS[name]()
  log = tmp_path / "tune.jsonl"
  measurer = StaticMeasurer(executor=ThreadPoolExecutor(2))
  try:
    cm = _bounded(lambda: minicomp.compile(model, target="sm_86", trials=8, strategy=strategy, log_file=str(log),
                                           measures_per_round=4, measurer=measurer), TIMEOUT_S)
  finally:
    measurer.close()
  recs = load_records(str(log), target="sm_86")
  searched = [r for r in recs if r.strategy != "default"]     # the default schedule is logged besides
  # the one-node Gather has 5 programs (its thread count): fewer than the trials
  assert 4 <= len(searched) <= 8, [r.strategy for r in recs]
  assert all(r.ok for r in recs), [r.message for r in recs if not r.ok]
  got, want = cm.run(feeds, device="cpu"), run_ort(model, feeds)
  assert len(got) == len(want) == 1
  np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)


# the feature path on gather programs

def _assignments(sk, n, seed=0):
  from test_formula_exactness import _valid_assignments
  return _valid_assignments(sk, TGT, n, np.random.default_rng(seed))


@pytest.mark.parametrize("make", [lambda: W.embedding(14, 100, 32), lambda: W.embedding(30, 50, 24, 20)],
                         ids=["embedding", "embedding_matmul"])
def test_gather_formulas_equal_concrete_features(make):
  """Exactly (tests/test_formula_exactness.py has more draws): the gather's index reads `ids`, inside
  a cooperative shared-memory fetch when a matmul follows."""
  names = feature_names()
  col = names.index("auto_unroll_max_step")
  for sk in generate_sketches(make().outputs, TGT):
    f = SketchFormulas(sk)
    pairs = _assignments(sk, 12)
    assert len(pairs) == 12
    X = f.features([v for v, _, _ in pairs], [u for _, u, _ in pairs])     # batched, no LOAD reaches FormulaEval
    for (values, unroll, cand), x in zip(pairs, X):
      sym = evaluate_features(f.rows, values)
      sym[:, col] = np.log2(max(unroll.values(), default=0) + 1.0)
      conc = extract_features(cand.program)                               # raised ExprError on a LOAD before
      bad = np.argwhere(sym != conc)
      assert not len(bad), [(names[c], sym[r, c], conc[r, c]) for r, c in bad[:6]]
      np.testing.assert_allclose(x, conc, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("wl", [W.embedding(14, 100, 32), W.embedding(30, 50, 24, 20)], ids=lambda w: w.name)
def test_embedding_workloads_match_numpy(wl):
  (sk,) = generate_sketches(wl.outputs, TGT)
  (_, _, cand), = _assignments(sk, 1, seed=3)
  ins = wl.random_inputs(1)
  ins[0] -= wl.index_high // 2                            # negative ids wrap, as ONNX Gather's do
  out = minicomp.build(cand.schedule, target="sm_86")(*ins, device="cpu")
  np.testing.assert_allclose(out, wl.reference(*ins), rtol=1e-4, atol=1e-4)


def test_gather_accesses_read_distinct_rows():
  """Loaded index values read as their positions: 14 tokens touch 14 rows of the table (not all 100,
  not one), contiguously, and the 14 int64 ids once each."""
  wl = W.embedding(14, 100, 32)
  (sk,) = generate_sketches(wl.outputs, TGT)
  (_, _, cand), = _assignments(sk, 1)
  x = dict(zip(feature_names(), extract_features(cand.program)[0]))
  slog = lambda v: np.float32(np.log2(v + 1.0))
  # slots: B0 the stored `embed`, then by name: B1 `ids`, B2 `table`
  assert x["B2.unique_bytes"] == slog(14 * 32 * 4) and x["B2.stride"] == slog(1)
  assert x["B1.unique_bytes"] == slog(14 * 8)


def test_formula_eval_names_a_load():
  buf = Buffer("ids", "int64", "global", const(14))
  e = Expr.make(Op.LOAD, "int64", (var("x"),), buf) + 1
  with pytest.raises(ExprError, match="reads a tensor"):
    FormulaEval({"x": np.arange(3)})(e)


def test_gather_rows_hold_no_loads():
  (sk,) = generate_sketches(W.embedding(30, 50, 24, 20).outputs, TGT)
  seen: set[int] = set()
  for row in extract_program_exprs(sk.schedule.lower()):
    for e in row:
      stack = [e]
      while stack:
        n = stack.pop()
        if id(n) in seen: continue
        seen.add(id(n))
        assert n.op is not Op.LOAD, n
        stack.extend(n.src)
