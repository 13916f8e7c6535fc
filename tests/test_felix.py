"""Felix's gradient-descent strategy: the objective descends, rounding only yields valid programs,
what it proposes computes the right thing, and it tunes, records and resumes through the public entry."""
import copy
import logging
import math
from types import SimpleNamespace

import numpy as np
import pytest
from test_tune import HashMeasurer

import minicomp as mc
from minicomp import workloads as W
from minicomp.ir.dag import ComputeDAG
from minicomp.search.annotate import (
  check_values,
  draw_unroll,
  draw_values,
  make_candidate,
)
from minicomp.search.strategies.base import TuneTask
from minicomp.search.strategies.felix import FelixStrategy, round_points, round_values
from minicomp.target import Target

jax = pytest.importorskip("jax")
TGT = Target("sm_86")
WL = W.matmul(64, 64, 32)


def _task(wl, key="mm"):
  dag = ComputeDAG(wl.outputs)
  return TuneTask(key, dag, TGT, 1, dag.flop_count(), "data_reuse", key)


def _valid_draws(sk, formulas, n, rng):
  out = []
  while len(out) < n:
    vals = [v for v in (draw_values(sk, rng) for _ in range(4 * n)) if check_values(sk, v, TGT) is None]
    out += [v for v, ok in zip(vals, formulas.valid(vals, TGT)) if ok]
  return out[:n]


@pytest.fixture(scope="module")
def mm():
  """matmul 64x64x32: its sketch, formulas, objective, and a cost model fitted on random programs
  with random costs (what the descent follows does not matter here, only that it is fixed)."""
  from minicomp.search.cost_model import MLPCostModel
  from minicomp.search.features import N_FEATURES
  from minicomp.search.features.formulas import SketchFormulas
  from minicomp.search.strategies.felix.objective import SketchObjective
  task = _task(WL)
  (sk,) = task.sketches
  f = SketchFormulas(sk)
  obj = SketchObjective(sk, TGT, f)
  rng = np.random.default_rng(0)
  vals = _valid_draws(sk, f, 64, rng)
  unroll = [draw_unroll(sk, rng) for _ in vals]
  X = f.features(vals, unroll)
  model = MLPCostModel(N_FEATURES, loss="rank", seed=0, batch=128, lr=1e-3, epochs=60)
  model.fit(list(X), list(rng.uniform(1e-6, 2e-6, len(X))), ["mm"] * len(X))
  scores = model.predict(list(X))
  Y = np.array([[math.log(v[p]) for p in sk.params] + [math.log2(max(u.values()) + 1)] for v, u in zip(vals, unroll)])
  return SimpleNamespace(task=task, sk=sk, f=f, obj=obj, model=model, Y=Y, scores=scores, s=float(np.std(scores)))


def test_objective_is_the_model_score_at_valid_points(mm):
  got = mm.obj.value(mm.Y[:16], mm.model, mm.s, lam=10.0)                     # valid: no penalty
  err = np.abs(got + mm.scores[:16] / mm.s)                  # smoothed vs exact formulas (tests/test_smooth.py)
  assert np.median(err) < 1e-4 and err.max() < 0.05
  bad = mm.Y[:1].copy()
  i, j = (mm.sk.params.index(v) for v in mm.sk.threads["C"])
  bad[0, [i, j]] = math.log(64)                                                    # 4096 threads per block
  assert mm.obj.value(bad, mm.model, mm.s, lam=10.0)[0] > mm.obj.value(bad, mm.model, mm.s, lam=0.0)[0] + 1


def test_gradient_steps_decrease_the_objective(mm):
  import jax.numpy as jnp
  params, inv = mm.model.params, jnp.asarray(1.0 / mm.model.scale, jnp.float32)
  Y = jnp.asarray(mm.obj.clip(mm.Y[8:16] + 0.3), jnp.float32)                  # off the integer points
  _, g = mm.obj.value_and_grad(Y, params, inv, mm.s, 10.0)                      # forward mode ...
  g_rev = jax.grad(lambda Y: mm.obj.values(Y, params, inv, mm.s, 10.0).sum())(Y)   # ... equals reverse mode
  np.testing.assert_allclose(np.asarray(g), np.asarray(g_rev), rtol=2e-3, atol=2e-3 * float(jnp.abs(g_rev).max()))
  path, vals = mm.obj.descend(mm.Y[8:16], mm.model, 40, lr=0.3, lam=10.0, s=mm.s)
  assert path.shape == (41, 8, mm.obj.dim) and vals.shape == (40, 8)
  final = mm.obj.value(path[-1], mm.model, mm.s, 10.0)
  assert final.mean() < vals[0].mean() - 0.5                                    # half a score spread better
  # (a start already at a local minimum of the smoothed objective cannot improve: Adam's first steps leave it)
  assert (vals.min(0) < vals[0]).sum() >= 7 and (final < vals[0]).sum() >= 6
  assert (path >= mm.obj.lo - 1e-6).all() and (path <= mm.obj.hi + 1e-6).all()  # the box is projected


def _real_points(rng, names, n):
  """Points anywhere in log space, in and out of range (negative, past the extents), plus inf/NaN."""
  Y = rng.uniform(-2.0, 6.0, (n, len(names)))
  Y[:5] = np.nan
  Y[5:10, 0] = np.inf
  return Y


def _check_groups(sk, v):
  for g in sk.tiles:
    prod = math.prod(v[x] for x in g.vars)
    assert g.extent % prod == 0 and v[g.vars[-1]] <= g.inner_limit, (g, v)
  for ch in sk.choices: assert v[ch.var] in ch.candidates


def test_rounding_yields_only_valid_programs(mm):
  rng = np.random.default_rng(1)
  Y = _real_points(rng, mm.sk.params, 400)
  raw = round_values(mm.sk, Y[10:])                                              # every finite point rounds
  for row in raw: _check_groups(mm.sk, dict(zip(mm.sk.params, map(int, row))))
  vals = round_points(mm.sk, Y, TGT, mm.f)
  assert len(vals) >= 20 and len({tuple(sorted(v.items())) for v in vals}) == len(vals)
  for v in vals:
    _check_groups(mm.sk, v)
    assert check_values(mm.sk, v, TGT) is None
  for v in vals:
    c, why = make_candidate(mm.sk, v, {at: 64 for at in mm.sk.unroll}, TGT)
    assert c is not None, why
  same, first = round_points(mm.sk, Y, TGT, mm.f, return_index=True)              # where each came from
  assert same == vals and all(round_points(mm.sk, Y[i:i + 1], TGT, mm.f) == [v] for v, i in zip(vals, first))
  # a point that is already valid rounds to itself
  assert round_points(mm.sk, mm.Y[:1, :-1], TGT, mm.f) == [dict(zip(mm.sk.params, np.exp(mm.Y[0, :-1]).round().astype(int)))]


def test_rounding_conv_tile_groups_of_extent_1_and_3():
  (sk,) = _task(W.conv2d(1, 8, 8, 8, 16, 3, 1, 1), "conv").sketches
  assert {g.extent for g in sk.tiles} >= {1, 3}
  vals = round_points(sk, _real_points(np.random.default_rng(2), sk.params, 300), TGT)
  assert len(vals) >= 20
  for v in vals:
    _check_groups(sk, v)
    c, why = make_candidate(sk, v, {}, TGT)
    assert c is not None, why


def test_proposals_come_from_the_descent_and_compute_the_right_thing(mm):
  strat = FelixStrategy(seed=0, n_seeds=4, n_steps=24, model=copy.deepcopy(mm.model))   # update() retrains it
  task = _task(WL)
  strat._formula_cache[(task.key, 0)] = mm.f                                     # reuse the compiled pieces
  strat._objectives[(task.key, 0)] = mm.obj
  cands = strat.propose(task, 4, np.random.default_rng(3))
  assert len(cands) == 4 and strat.stats["from_descent"] == 4 and strat.stats["random"] == 0
  assert strat.stats["visited"] == 4 * 25 and strat.stats["descents"] == 1
  assert len({c.key for c in cands}) == 4
  ins = WL.random_inputs(4)
  for c in cands:
    k = mc.build(c.schedule, "sm_86")
    np.testing.assert_allclose(k(*ins, device="cpu"), WL.reference(*ins), rtol=1e-4, atol=1e-4)
  # a measured program is never proposed again, and later rounds take fewer steps
  for c in cands: task.record(c.key, 1e-6)
  strat.update(task, cands, [1e-6, 2e-6, 3e-6, None])
  again = strat.propose(task, 4, np.random.default_rng(3))
  assert not {c.key for c in again} & {c.key for c in cands}
  assert strat.stats["visited"] == 4 * 25 + 4 * (24 // 4 + 1)


def test_tune_with_felix_through_the_public_entry_records_and_resumes(tmp_path, caplog):
  from minicomp.graph.tasks import Task, task_kind, workload_key
  from minicomp.search.records import load_records
  from minicomp.search.tune import make_strategy, tune_tasks
  assert isinstance(make_strategy("felix"), FelixStrategy)
  wl = W.matmul(32, 32, 16)
  dag = ComputeDAG(wl.outputs)
  task = Task(workload_key(dag), dag, task_kind(dag), 1, ["MatMul"], dag.flop_count())
  path = str(tmp_path / "felix.jsonl")
  meas = HashMeasurer()
  best = tune_tasks([task], "sm_86", trials=8, strategy="felix", log_file=path, measurer=meas, measures_per_round=8)
  assert len(meas.seen) == 8 and set(best) == {task.key}
  with caplog.at_level(logging.INFO, logger="minicomp"):     # resume: retrained from the log, then a descent
    best = tune_tasks([task], "sm_86", trials=16, strategy="felix", log_file=path, measurer=meas, measures_per_round=8)
  assert "felix: objective of" in caplog.text
  recs = load_records(path)
  assert len(recs) == 16 == len(meas.seen) and len({s for _, s in meas.seen}) == 16
  assert {r.strategy for r in recs} == {"felix"}
  ok = [r for r in recs if r.ok]
  assert best[task.key] == min(ok, key=lambda r: r.cost_s).steps_json
  ins = wl.random_inputs(5)
  k = mc.build(mc.Schedule.from_json(dag, best[task.key]), "sm_86")
  np.testing.assert_allclose(k(*ins, device="cpu"), wl.reference(*ins), rtol=1e-4, atol=1e-4)


def test_register_estimate_is_a_resource_formula(mm):
  """The penalised register estimate is the 32-bit words of the thread's local buffers, equal to what
  the concretely lowered program allocates, with a limit below the target's registers per thread."""
  from minicomp.ir.evaluate import evaluate
  from minicomp.search.strategies.felix.objective import REG_RESERVE, resource_formulas
  exprs, limits = resource_formulas(mm.f, TGT)
  assert TGT.max_registers_per_thread - REG_RESERVE in limits
  reg = exprs[limits.index(TGT.max_registers_per_thread - REG_RESERVE)]
  for v in _valid_draws(mm.sk, mm.f, 6, np.random.default_rng(4)):
    cand, _ = make_candidate(mm.sk, v, {}, TGT)
    words = sum(int(b.size.arg if hasattr(b.size, "arg") else b.size) for k in cand.program.kernels
                for b in k.allocs if b.scope == "local")
    assert int(evaluate(reg, v)) == words


def test_a_sketch_without_formulas_is_drawn_and_ranked_by_the_cost_model():
  """The tensor-core sketch of a half matmul lowers only point by point (no formulas to descend on): Felix draws
  valid points of it, scores their lowered programs with the cost model beside its descents' points, and proposes
  the best-scored one first of that sketch; the program computes the right thing."""
  from minicomp.search.cost_model import MLPCostModel
  from minicomp.search.features import N_FEATURES
  wl = W.matmul(64, 64, 64, dtype="float16")
  task = _task(wl, "hmm")
  tc = next(k for k, sk in enumerate(task.sketches) if "tensor_core_tiling" in sk.rules)
  strat = FelixStrategy(seed=0, n_seeds=2, n_steps=8)
  assert strat.objective(task, tc) is None and strat.objective(task, 1 - tc) is not None
  rng = np.random.default_rng(0)
  drawn = [c for c in (make_candidate(task.sketches[k], draw_values(task.sketches[k], rng),
                                      draw_unroll(task.sketches[k], rng), TGT, k)[0] for k in (0, 1) * 16) if c]
  model = MLPCostModel(N_FEATURES, loss="rank", seed=0, batch=128, lr=1e-3, epochs=30)
  model.fit([strat.features(c) for c in drawn], list(rng.uniform(1e-6, 2e-6, len(drawn))), ["hmm"] * len(drawn))
  strat._model = model
  drawn, real = [], strat._drawn
  strat._drawn = lambda *a: drawn.extend(real(*a)) or drawn
  cands = strat.propose(task, 6, np.random.default_rng(1))
  assert strat.stats["pointwise"] == len(drawn) > 0 and strat.stats["random"] == 0
  mine = [c for c in cands if c.sketch_index == tc]
  assert mine
  pool = [make_candidate(task.sketches[tc], v, u, TGT, tc)[0] for v, u in drawn]
  scores = model.predict([strat.features(c) for c in pool])
  assert mine[0].key == pool[int(np.argmax(scores))].key
  assert not any(key[0] == tc for key in strat._concrete)     # (their programs are not kept past the round)
  ins = wl.random_inputs(5)
  got = mc.build(mine[0].schedule, "sm_86")(*ins, device="cpu")
  np.testing.assert_allclose(np.asarray(got, np.float32), wl.reference(*ins).astype(np.float32), rtol=2e-2, atol=2e-2)
