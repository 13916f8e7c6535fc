"""Ansor's evolutionary strategy: proposals are valid, new, correct, and the model learns from them."""
import numpy as np
import pytest

import minicomp as mc
from minicomp import workloads as W
from minicomp.ir.dag import ComputeDAG
from minicomp.search.annotate import sample
from minicomp.search.strategies.ansor import AnsorStrategy
from minicomp.search.strategies.base import TuneTask
from minicomp.search.task_scheduler import tune
from minicomp.target import Target
from test_tune import HashMeasurer


def _task(wl, key="mm"):
  dag = ComputeDAG(wl.outputs)
  return TuneTask(key, dag, Target("sm_86"), 1, dag.flop_count(), "data_reuse", key)


def test_mutation_keeps_tile_products_dividing_the_extents():
  t = _task(W.matmul(64, 48, 32))
  (sk,) = t.sketches
  strat = AnsorStrategy(population=8, generations=1)
  rng = np.random.default_rng(0)
  p = sample(sk, rng, t.target)
  changed = 0
  for _ in range(200):
    values, unroll = strat._mutate(sk, p, rng)
    for g in sk.tiles:
      prod = int(np.prod([values[v] for v in g.vars]))
      assert g.extent % prod == 0 and values[g.vars[-1]] <= g.inner_limit
    changed += values != p.values or unroll != p.unroll
  assert changed > 150


def test_crossover_takes_whole_stages_from_the_parents():
  t = _task(W.matmul(64, 48, 32))
  (sk,) = t.sketches
  strat = AnsorStrategy()
  rng = np.random.default_rng(1)
  p, q = sample(sk, rng, t.target), sample(sk, rng, t.target)
  for _ in range(20):
    values, _ = strat._crossover(sk, p, q, rng)
    for g in sk.tiles:
      got = tuple(values[v] for v in g.vars)
      assert got in (tuple(p.values[v] for v in g.vars), tuple(q.values[v] for v in g.vars))


def test_ansor_rounds_propose_new_valid_programs_and_train_the_model():
  wl = W.matmul(64, 48, 32)
  t = _task(wl)
  strat = AnsorStrategy(population=12, generations=2, seed=0)
  meas = HashMeasurer()
  res = tune([t], strat, meas, trials=24, seed=0, measures_per_round=8)
  assert res.trials == 24 and len({s for _, s in meas.seen}) == 24
  assert strat.stats["trainings"] == res.rounds >= 3 and strat.stats["mutations"] > 0 and strat.model.fitted   # one per round
  # a sample of what it proposed: built and run against numpy
  ins = wl.random_inputs(2)
  for steps, _ in t.history[::8]:
    k = mc.build(mc.Schedule.from_json(t.dag, steps), "sm_86")
    np.testing.assert_allclose(k(*ins, device="cpu"), wl.reference(*ins), rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_resume_retrains_the_model_from_the_log(tmp_path):
  from minicomp import zoo
  m, _ = zoo.residual_block()
  path = str(tmp_path / "a.jsonl")
  mc.compile(m, "sm_86", trials=8, strategy="random", log_file=path, measurer=HashMeasurer(), measures_per_round=4)
  strat = AnsorStrategy(population=8, generations=1)
  meas = HashMeasurer()
  mc.compile(m, "sm_86", trials=12, strategy=strat, log_file=path, measurer=meas, measures_per_round=4)
  assert len(meas.seen) == 4
  assert strat.stats["trainings"] >= 2 and len(strat._data) == 12      # 8 resumed + 4 new


def test_model_accuracy_is_reported_on_each_new_round():
  t = _task(W.matmul(32, 32, 16))
  strat = AnsorStrategy(population=8, generations=1, seed=1)
  res = tune([t], strat, HashMeasurer(), trials=24, seed=0, measures_per_round=8)
  assert res.rounds >= 3 and len(strat.accuracy) == res.rounds - 1   # every round but the first (no model yet)
  assert all(0.0 <= a <= 1.0 and 0.0 <= r <= 1.0 for _, a, r in strat.accuracy)
