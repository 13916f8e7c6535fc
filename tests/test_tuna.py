"""Tuna's search (search/strategies/tuna/__init__.py): the ES update is Algorithm 4 on rank-shaped fitness, it
finds points the analytic model rates far above random ones without measuring anything, every proposal
is valid and new, and ``compile(strategy="tuna")`` tunes, logs and resumes like the other strategies."""
import math

import numpy as np
import pytest

import minicomp as mc
from minicomp import workloads as W
from minicomp import zoo
from minicomp.ir.dag import ComputeDAG
from minicomp.search.annotate import UNROLL_CHOICES, check_values, draw_values, validate
from minicomp.search.records import load_records
from minicomp.search.strategies.base import TuneTask
from minicomp.search.strategies.tuna.evolution_strategies import centered_ranks, es_step, evolve
from minicomp.search.strategies.tuna import SketchSearch, TunaStrategy
from minicomp.target import as_target
from onnx_harness import run_ort

TGT = as_target("sm_86")


def _task(wl, key="t") -> TuneTask:
  dag = ComputeDAG(wl.outputs)
  return TuneTask(key, dag, TGT, 1, dag.flop_count(), "data_reuse", key)


def _no_measuring(monkeypatch):
  """Anything beyond the analytic model (NVRTC builds, the full static model, a measurer) raises."""
  import minicomp.codegen.kernel as kernel
  import minicomp.search.measure as measure
  import minicomp.search.static.estimate as est

  def boom(*a, **k): raise AssertionError("measured during the search")
  for mod, name in [(est, "estimate"), (est, "launch_facts"), (kernel, "build"), (measure, "build_candidate"),
                    (measure, "_static_one")]:
    monkeypatch.setattr(mod, name, boom)


# -- the ES itself

def test_centered_ranks_share_ties_and_rank_inf_last():
  u = centered_ranks(np.array([3.0, -np.inf, 3.0, 1.0, np.nan]))
  # ranks 3.5, 0.5, 3.5, 2, 0.5 of 0..4 (the two -inf / nan tie at the bottom)
  np.testing.assert_allclose(u, np.array([3.5, 0.5, 3.5, 2.0, 0.5]) / 4 - 0.5)
  assert abs(u.sum()) < 1e-12


def test_es_step_is_algorithm_4_on_the_shaped_fitness():
  rng = np.random.default_rng(0)
  R, n, d, alpha, sigma = 3, 10, 4, 0.7, 0.2
  theta, eps = rng.standard_normal((R, d)), rng.standard_normal((R, n, d))
  fit = rng.integers(0, 4, (R, n)).astype(float)              # ties on purpose
  fit[0, 2] = -np.inf
  got = es_step(theta, eps, fit, alpha, sigma)
  want = theta.copy()
  for r in range(R):                                          # the mean rank of each sample, by counting
    F = [((fit[r] < f).sum() + ((fit[r] == f).sum() - 1) / 2) / (n - 1) - 0.5 for f in fit[r]]
    want[r] += alpha / (n * sigma) * sum(F[i] * eps[r, i] for i in range(n))
  np.testing.assert_allclose(got, want, rtol=1e-12)
  raw = es_step(theta, eps, np.nan_to_num(fit, neginf=0.0), alpha, sigma, shaping=False)   # the paper's raw F
  np.testing.assert_allclose(raw, theta + alpha / (n * sigma) * np.einsum("rn,rnd->rd", np.nan_to_num(fit, neginf=0.0), eps))


def test_evolve_moves_toward_the_optimum_of_a_quadratic():
  opt = np.array([1.0, -2.0, 0.5])
  cost = lambda Y: ((Y - opt) ** 2).sum(1)                    # noqa: E731
  theta0 = np.zeros((2, 3))
  res = evolve(cost, theta0, np.random.default_rng(0), population=16, iterations=60, sigma=0.3, alpha=0.3)
  assert res.iterations == 60 and res.samples == 60 * 2 * 17
  assert (np.linalg.norm(res.theta - opt, axis=1) < 0.05 * np.linalg.norm(opt)).all()
  assert (res.best_cost < 1e-3 * cost(theta0[:1])[0]).all()
  assert (evolve(cost, theta0, np.random.default_rng(0), iterations=0).theta == 0).all()
  clipped = evolve(cost, theta0, np.random.default_rng(0), iterations=30, lo=-1.0, hi=0.0)
  assert (clipped.theta >= -1).all() and (clipped.theta <= 0).all()
  np.testing.assert_allclose(clipped.theta, [[0.0, -1.0, 0.0]] * 2, atol=0.3)   # the box's nearest corner


# -- on sketches

def test_es_beats_random_samples_of_the_same_sketch_without_measuring(monkeypatch):
  _no_measuring(monkeypatch)
  task = _task(W.matmul(512, 512, 512))
  (sk,) = task.sketches
  s = SketchSearch(sk, TGT)
  res = s.run(np.random.default_rng(0), restarts=4, population=16, iterations=25, sigma=0.3, alpha=1.0, deadline=None)
  assert res.iterations == 25
  rng = np.random.default_rng(1)
  rand = s.score([(tuple(draw_values(sk, rng)[v] for v in s.names), 512) for _ in range(1000)])
  rand = rand[np.isfinite(rand)]
  assert len(rand) > 20
  assert min(s.archive.values()) < np.median(rand) / 4
  assert res.best_cost.min() < rand.min()                    # better than the best of 1000 random draws
  assert min(s.archive.values()) <= res.best_cost.min()
  # the archive holds exactly the finite-cost distinct points, each with its analytic cost
  assert len(s.archive) == sum(math.isfinite(c) for c in s.costs.values()) > 100
  p, c = next(iter(s.archive.items()))
  assert s.models[p[1]]([dict(zip(s.names, p[0]))])[0] == c


def test_propose_is_valid_and_new_on_every_call_and_measures_nothing(monkeypatch):
  _no_measuring(monkeypatch)
  task = _task(W.conv2d(1, 16, 14, 14, 32, 3, 1, 1))
  strat = TunaStrategy(iterations=10, restarts=4)
  rng = np.random.default_rng(0)
  seen = set()
  for call in range(3):
    cands = strat.propose(task, 6, rng)
    assert len(cands) == 6
    for c in cands:
      assert c.key not in task.measured and c.key not in seen
      assert check_values(task.sketches[c.sketch_index], c.values, TGT) is None
      assert validate(c.schedule, TGT)[1] is None
      seen.add(c.key)
    if call < 2:
      for c in cands: task.record(c.key, 1e-6)
  assert strat.stats["searches"] == 1 and strat.stats["proposed"] == 18 and strat.stats["random"] == 0
  assert strat.task_stats["t"]["archived"] > 100 and strat.task_stats["t"]["seconds"] < 30
  # the first proposal is the archive's best point; a call goes down the archive by analytic cost, one
  # program per tiling (points that differ only in a vector width come after the other tilings)
  st = strat._tasks["t"]
  (s,) = st.searches
  pts = [strat._points[c][1] for c in list(strat._points)[:6]]
  assert s.archive[pts[0]] == min(s.archive.values())
  assert [s.archive[p] for p in pts] == sorted(s.archive[p] for p in pts)
  assert len({p[0][:s.n_tile] for p in pts}) == 6 and {p[1] for p in pts} == {512}


def test_the_unroll_step_can_be_relaxed_too():
  (sk,) = _task(W.matmul(256, 256, 256)).sketches
  s = SketchSearch(sk, TGT, unroll=None)
  assert s.dim == len(sk.params) + 1 and len(s.models) == len(UNROLL_CHOICES)
  assert [u for _, u in s.decode(np.array([s.encode(((1,) * len(sk.params), u)) for u in UNROLL_CHOICES]))] \
    == list(UNROLL_CHOICES)
  s.run(np.random.default_rng(0), restarts=2, population=8, iterations=5, sigma=0.3, alpha=1.0, deadline=None)
  assert len({u for _, u in s.archive}) > 1
  assert SketchSearch(sk, TGT, unroll=64).unrolls == (64,)


def test_a_small_space_is_exhausted_without_repeats():
  """softmax 8x64: one thread choice of two values (and unroll): the archive runs dry, the ES runs again,
  and nothing is ever proposed twice."""
  task = _task(W.softmax(8, 64))
  strat = TunaStrategy(iterations=5, restarts=2)
  rng = np.random.default_rng(0)
  got = []
  for _ in range(6):
    cands = strat.propose(task, 4, rng)
    for c in cands: task.record(c.key, 1e-6)
    got += [c.key for c in cands]
    if not cands: break
  assert got and len(got) == len(set(got))
  assert strat.propose(task, 4, rng) == []
  assert strat.stats["searches"] >= 2


def test_sketches_without_an_analytic_model_get_random_programs(monkeypatch):
  import minicomp.search.strategies.tuna as T

  def broken(*a, **k): raise mc.EstimateError("cannot model this")
  monkeypatch.setattr(T, "sketch_model", broken)
  task = _task(W.matmul(64, 64, 64))
  strat = TunaStrategy(iterations=5, restarts=2)
  cands = strat.propose(task, 4, np.random.default_rng(0))
  assert len(cands) == 4 and len({c.key for c in cands}) == 4
  assert all(validate(c.schedule, TGT)[1] is None for c in cands)
  assert strat.stats["fallback_sketches"] == 1 and strat.stats["random"] == 4


def test_a_bug_in_the_analytic_model_is_not_taken_for_a_sketch_it_cannot_model(monkeypatch):
  """The search catches only the errors that mean "this sketch has no model" (MinicompError); anything else
  is a bug and stops the run."""
  import minicomp.search.strategies.tuna as T

  def buggy(*a, **k): raise TypeError("a bug")
  monkeypatch.setattr(T, "sketch_model", buggy)
  with pytest.raises(TypeError, match="a bug"):
    TunaStrategy(iterations=5, restarts=2).propose(_task(W.matmul(64, 64, 64)), 4, np.random.default_rng(0))


def _raises(self, values): raise ZeroDivisionError("a formula divides by zero")


@pytest.mark.parametrize("call", [lambda self, values: np.full(len(values), np.inf), _raises],
                         ids=["inf", "raises"])
def test_a_model_with_no_finite_cost_falls_back_too(monkeypatch, call):
  from minicomp.search.static.analytic import SketchModel
  monkeypatch.setattr(SketchModel, "__call__", call)
  task = _task(W.matmul(64, 64, 64))
  strat = TunaStrategy(iterations=5, restarts=2)
  cands = strat.propose(task, 3, np.random.default_rng(0))
  assert len(cands) == 3 and strat.stats["fallback_sketches"] == 1 and strat.stats["iterations"] == 0


# -- end to end

def test_compile_with_tuna_tunes_logs_and_resumes(tmp_path):
  model, feeds = zoo.residual_block(c=8, hw=8)
  log = str(tmp_path / "tuna.jsonl")
  cm = mc.compile(model, target="sm_86", trials=4, strategy="tuna", log_file=log, measurer="static",
                  measures_per_round=2, progress=False)
  np.testing.assert_allclose(cm.run(feeds, device="cpu")[0], run_ort(model, feeds)[0], rtol=1e-4, atol=1e-4)
  recs = [r for r in load_records(log) if r.strategy != "default"]
  assert len(recs) == 4 and {r.strategy for r in recs} == {"tuna"} and all(r.is_estimate for r in recs)
  cm = mc.compile(model, target="sm_86", trials=8, strategy="tuna", log_file=log, measurer="static",
                  measures_per_round=2, progress=False, seed=1)
  recs = [r for r in load_records(log) if r.strategy != "default"]
  assert len(recs) == 8 and {r.strategy for r in recs} == {"tuna"}
  assert len({(r.workload_key, r.steps_json) for r in recs}) == 8          # no program measured twice
  np.testing.assert_allclose(cm.run(feeds, device="cpu")[0], run_ort(model, feeds)[0], rtol=1e-4, atol=1e-4)
