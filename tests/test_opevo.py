"""OpEvo (search/strategies/opevo/__init__.py, opevo_space.py): the factor graphs, the q-random walk, fitness-proportional
inheritance, valid never-measured proposals, points read back from logged steps, and a tuned model
that matches onnxruntime and resumes from its log."""
import hashlib
import math

import networkx as nx
import numpy as np
import pytest
from onnx import helper
from onnx_harness import make_model, run_ort

import minicomp as mc
from minicomp import workloads as W
from minicomp.ir.dag import ComputeDAG
from minicomp.search import annotate
from minicomp.search.annotate import UNROLL_CHOICES, check_values, concretize, make_candidate, prime_factors
from minicomp.search.records import load_records
from minicomp.search.strategies.opevo import space as opevo_space
from minicomp.search.strategies.base import TuneTask
from minicomp.search.strategies.learned import Point
from minicomp.search.sketch_types import TileGroup
from minicomp.search.strategies.opevo import OpEvoStrategy
from minicomp.search.strategies.opevo.space import (ChoiceParam, DiscreteParam, FactorParam, FactorSpace, Space,
                                                    factor_graph, q_walk, read_point)
from minicomp.target import Target

TGT = Target("sm_86")
CHI2_999 = {6: 22.458}          # chi-square quantile 0.999 by degrees of freedom


def _task(wl, key="t"):
  dag = ComputeDAG(wl.outputs)
  return TuneTask(key, dag, TGT, 1, dag.flop_count(), "data_reuse", key)


def _fake_cost(steps_json: str) -> float | None:
  """A deterministic stand-in for a measurement: a cost from a hash of the program; every 7th fails."""
  h = int(hashlib.sha256(steps_json.encode()).hexdigest()[:8], 16)
  return None if h % 7 == 0 else 1e-6 * (1 + h % 1000)


# -- the factor graph

def _one_prime_apart(x, y, primes) -> bool:
  """y is x with one prime factor moved from one level to another."""
  diff = [i for i in range(len(x)) if x[i] != y[i]]
  if len(diff) != 2: return False
  i, j = diff if x[diff[0]] > y[diff[0]] else diff[::-1]          # x[i] shrinks, x[j] grows
  p = x[i] // y[i]
  return p in primes and x[i] == y[i] * p and y[j] == x[j] * p


@pytest.mark.parametrize("extent,parts,limit", [(8, 3, 64), (1, 5, 64), (12, 5, 4), (56, 5, 64), (64, 3, 8),
                                                (360, 4, 16), (1024, 5, 64)])
def test_factor_graph_nodes_are_the_factorizations_and_edges_move_one_prime(extent, parts, limit):
  g = factor_graph(extent, parts, limit)
  want = {(extent // math.prod(t),) + t for t in annotate.factorizations(extent, parts - 1, limit)}
  assert set(g.nodes) == want and g.number_of_nodes() == len(annotate.factorizations(extent, parts - 1, limit))
  assert nx.is_connected(g)
  primes = set(prime_factors(extent))
  for x, y in g.edges:
    assert math.prod(x) == math.prod(y) == extent and _one_prime_apart(x, y, primes)
  nodes = sorted(g.nodes)
  if len(nodes) <= 400:                                            # every such pair is an edge (brute force)
    for x in nodes:
      assert set(g.adj[x]) == {y for y in nodes if _one_prime_apart(x, y, primes)}
  if g.number_of_nodes() > 1: assert g.number_of_edges() > 0


def test_neighbours_on_the_fly_equal_the_graph(monkeypatch):
  with_graph = FactorSpace(360, 5, 16)
  monkeypatch.setattr(opevo_space, "MAX_GRAPH_NODES", 0)
  without = FactorSpace(360, 5, 16)
  assert with_graph.graph is not None and without.graph is None
  for x in with_graph.nodes: assert sorted(without.neighbours(x)) == sorted(with_graph.neighbours(x))


# -- the q-random walk

@pytest.mark.parametrize("q", [0.5, 0.75])
def test_q_walk_length_is_geometric(q):
  par = DiscreteParam(range(1001))                                 # never at an end within these walks' reach
  rng = np.random.default_rng(0)
  N = 20000
  steps = np.array([q_walk(par, 500, q, rng)[1] for _ in range(N)])
  se = math.sqrt(q) / (1 - q) / math.sqrt(N)                      # sd of a geometric over sqrt(N)
  assert abs(steps.mean() - q / (1 - q)) < 4 * se
  K = 6                                                            # P(k) = (1 - q) q^k for k < K, and the tail
  obs = np.array([np.sum(steps == k) for k in range(K)] + [np.sum(steps >= K)])
  exp = N * np.array([(1 - q) * q ** k for k in range(K)] + [q ** K])
  assert ((obs - exp) ** 2 / exp).sum() < CHI2_999[K]


def test_walk_steps_go_to_neighbours_and_ends_are_forced():
  rng = np.random.default_rng(1)
  par = DiscreteParam((16, 0, 1024, 64, 512))
  assert par.options == (0, 16, 64, 512, 1024)
  assert all(par.step(0, rng) == 16 for _ in range(20)) and all(par.step(1024, rng) == 512 for _ in range(20))
  assert {par.step(64, rng) for _ in range(50)} == {16, 512}
  ch = ChoiceParam(("a", "b", "c"))
  assert {ch.step("b", rng) for _ in range(60)} == {"a", "c"}
  assert DiscreteParam((4,)).step(4, rng) is None and q_walk(DiscreteParam((4,)), 4, 0.99, rng) == (4, 0)
  sp = FactorSpace(56, 5, 64)
  par = FactorParam(TileGroup("C", "i", 56, ("a", "b", "c", "d"), "spatial"))
  for _ in range(200):
    x = sp.nodes[int(rng.integers(len(sp.nodes)))]
    y, _ = q_walk(par, x, 0.9, rng)
    assert y in sp and math.prod(y) == 56


def test_neighbours_are_what_one_walk_step_reaches():
  """Space.neighbours(p): every point one step of any parameter's walk reaches, and nothing else."""
  space = Space(_task(W.conv2d(1, 16, 14, 14, 32, 3, 1, 1)).sketches)
  rng = np.random.default_rng(5)
  for _ in range(3):
    p = space.random(rng)
    nbrs = {q.key for q in space.neighbours(p)}
    assert len(nbrs) == len(space.neighbours(p)) and p.key not in nbrs
    reached = set()
    for par in space.params[p.sketch_index]:
      x = par.get(p.values, p.unroll)
      for _ in range(400 if isinstance(par, FactorParam) else 50):
        y = par.step(x, rng)
        if y is None: continue
        values, unroll = dict(p.values), dict(p.unroll)
        par.put(values, unroll, y)
        reached.add(Point(p.sketch_index, values, unroll).key)
      if isinstance(par, FactorParam):                        # a neighbour keeps the product, one prime apart
        assert all(math.prod(y) == par.group.extent and _one_prime_apart(x, y, par.space.primes)
                   for y in par.neighbours(x))
    assert reached == nbrs


@pytest.mark.parametrize("walk", ["each", "one"])
def test_mutation_steps_per_child(walk):
  """walk="one": one geometric walk per child; "each": one per parameter with a neighbour (their sum)."""
  space = Space(_task(W.matmul(64, 64, 64)).sketches)
  movable = sum(p.size > 1 for p in space.params[0])
  q, N = 0.5, 4000
  rng = np.random.default_rng(2)
  p0 = space.random(rng)
  steps = np.array([space.mutate(p0, q, rng, walk)[1] for _ in range(N)])
  m = q / (1 - q) * (movable if walk == "each" else 1)
  sd = math.sqrt(q * (movable if walk == "each" else 1)) / (1 - q)
  assert abs(steps.mean() - m) < 4 * sd / math.sqrt(N)


# -- recombination

def test_parents_donate_in_proportion_to_fitness():
  space = Space(_task(W.matmul(64, 64, 64)).sketches)
  factors = [p for p in space.params[0] if p.kind == "factor"]
  fit = np.array([4.0, 3.0, 2.0, 1.0, 0.0])                      # the last one failed
  rng = np.random.default_rng(3)
  parents = []
  for j in range(len(fit)):                                        # distinct tiles per parent: the donor is known
    values, unroll = {}, {}
    for par in space.params[0]: par.put(values, unroll, par.draw(rng))
    for par in factors: par.put(values, unroll, par.space.nodes[3 * j])
    parents.append(Point(0, values, unroll))
  counts = np.zeros(len(fit))
  for _ in range(3000):
    child = space.recombine(parents, fit, rng)
    for par in factors:
      x = par.get(child.values, child.unroll)
      counts[[par.get(p.values, p.unroll) for p in parents].index(x)] += 1
  total = counts.sum()
  assert counts[-1] == 0                                           # a failed trial never donates
  p = fit / fit.sum()
  assert np.all(np.abs(counts / total - p) < 4.5 * np.sqrt(p * (1 - p) / total) + 1e-12)


def test_recombination_across_sketches_takes_each_parameter_from_a_parent_that_has_it():
  space = Space(_task(W.matmul(4, 4, 512)).sketches)
  assert len(space.sketches) == 2
  rng = np.random.default_rng(4)
  parents = [space.switch(space.random(rng), k, rng) for k in (0, 1, 1, 0, 0)]
  (threads,) = space.params[0]                                     # the cross-thread sketch: one thread count
  for p, t in zip([parents[0], parents[3], parents[4]], threads.options): threads.put(p.values, p.unroll, t)
  fit = np.array([1.0, 2.0, 3.0, 0.5, 0.0])                       # the last one (sketch 0) failed
  seen = set()
  for _ in range(400):
    c = space.recombine(parents, fit, rng)
    seen.add(c.sketch_index)
    assert set(c.values) == set(space.sketches[c.sketch_index].params)
    for par in space.params[c.sketch_index]:
      assert par.get(c.values, c.unroll) in [par.get(p.values, p.unroll) for p, f in zip(parents, fit)
                                             if p.sketch_index == c.sketch_index and f > 0]
  assert seen == {0, 1}
  moved = space.switch(parents[1], 0, rng)                        # a sketch change: fresh values for the new sketch
  assert set(moved.values) == set(space.sketches[0].params) and moved.sketch_index == 0


# -- proposals

@pytest.mark.parametrize("make,walk", [(lambda: W.conv2d(1, 16, 14, 14, 32, 3, 1, 1), "each"),
                                       (lambda: W.matmul(64, 64, 64), "one"),
                                       (lambda: W.matmul(4, 4, 512), "each")])
def test_every_proposal_is_valid_and_never_measured(make, walk):
  task = _task(make())
  strat = OpEvoStrategy(seed=0, parents=8, offspring=8, walk=walk)
  rng = np.random.default_rng(5)
  for rnd in range(3):
    before = set(task.measured)
    cands = strat.propose(task, 12, rng)
    assert len(cands) == 12 and len({c.key for c in cands}) == 12 and not {c.key for c in cands} & before
    for c in cands:
      sk = task.sketches[c.sketch_index]
      again, why = make_candidate(sk, c.values, c.unroll, TGT, c.sketch_index)
      assert again is not None, why
      assert again.key == c.key == concretize(sk, c.values, c.unroll).to_json()
    costs = [_fake_cost(c.key) for c in cands]
    for c, cost in zip(cands, costs): task.record(c.key, cost)
    strat.update(task, cands, costs)
  kids = strat.offspring_batch(task, 8, rng)                       # children pass the pre-filter and are new
  assert kids and not {p.key for p in kids} & strat._done[task.key]
  assert all(check_values(task.sketches[p.sketch_index], p.values, TGT) is None for p in kids)
  assert strat.stats["random"] == 12 and strat.stats["mutations"] >= 24     # the first round random, then evolution
  assert strat.stats["steps"] > 0
  assert strat.stats["trainings"] == 0 and strat._model is None             # no cost model without prescreen


def test_a_tiny_space_runs_dry_instead_of_looping():
  task = _task(W.softmax(8, 64))                                   # one choice of 3 thread counts: 3 programs
  strat = OpEvoStrategy(parents=2)
  rng = np.random.default_rng(6)
  got = []
  for _ in range(4):
    cands = strat.propose(task, 4, rng)
    for c in cands: task.record(c.key, 1e-6 * (1 + len(got)))
    strat.update(task, cands, [1e-6] * len(cands))
    got += cands
  space = strat.space(task)
  size = math.prod(p.size for p in space.params[0])
  assert len(got) == len({c.key for c in got}) == size and strat.propose(task, 4, rng) == []


def test_prescreen_ranks_offspring_with_the_cost_model():
  task = _task(W.matmul(64, 64, 64))
  strat = OpEvoStrategy(prescreen=4)
  rng = np.random.default_rng(7)
  for _ in range(2):
    cands = strat.propose(task, 8, rng)
    costs = [_fake_cost(c.key) for c in cands]
    for c, cost in zip(cands, costs): task.record(c.key, cost)
    strat.update(task, cands, costs)
  assert strat.stats["trainings"] == 2 and strat.model.fitted
  cands = strat.propose(task, 8, rng)
  assert len(cands) == 8 and strat.stats["scored"] >= 8 * 4 - 8 and not {c.key for c in cands} & set(task.measured)
  with pytest.raises(ValueError, match="prescreen"): OpEvoStrategy(prescreen=1)
  with pytest.raises(ValueError, match="q must"): OpEvoStrategy(q=1.0)


# -- resume: points read back from logged steps

def test_points_are_read_back_from_their_steps():
  for wl in (W.matmul(4, 4, 512), W.conv2d(1, 8, 10, 10, 16, 3, 1, 1)):
    task = _task(wl)
    space = Space(task.sketches)
    rng = np.random.default_rng(8)
    for k, sk in enumerate(task.sketches):
      for _ in range(5):
        c = annotate.sample(sk, rng, TGT, k)
        p = space.recover(c.key)
        assert p is not None and p.key == Point(k, c.values, c.unroll).key
  sk = task.sketches[0]
  c = annotate.sample(sk, rng, TGT, 0)
  odd = concretize(sk, c.values, {at: 7 for at in sk.unroll})     # an unroll step outside OpEvo's domain
  assert read_point(sk, odd.to_json()) == (c.values, {at: 7 for at in sk.unroll})
  assert space.recover(odd.to_json()) is None
  fixed = odd.to_json().replace('"value": 7', '"value": 16')
  assert 7 not in UNROLL_CHOICES and space.recover(fixed).key == Point(0, c.values, {at: 16 for at in sk.unroll}).key
  from minicomp.graph.schedules import default_schedule
  assert space.recover(default_schedule(task.dag, TGT).to_json()) is None


def _conv_model():
  """Conv 8->16, 3x3, pad 1 on 10x10, ReLU: one task."""
  rng = np.random.default_rng(9)
  x = rng.standard_normal((1, 8, 10, 10)).astype(np.float32)
  w = (rng.standard_normal((16, 8, 3, 3)) * 0.1).astype(np.float32)
  nodes = [helper.make_node("Conv", ["x", "w"], ["t"], kernel_shape=[3, 3], pads=[1] * 4),
           helper.make_node("Relu", ["t"], ["y"])]
  return make_model(nodes, {"x": x}, ["y"], {"w": w}), {"x": x}


def test_compile_with_opevo_tunes_logs_and_resumes(tmp_path):
  model, feeds = _conv_model()
  log = str(tmp_path / "opevo.jsonl")
  cm = mc.compile(model, target="sm_86", trials=16, strategy="opevo", log_file=log, measurer="static",
                  measures_per_round=8, progress=False)
  np.testing.assert_allclose(cm.run(feeds, device="cpu")[0], run_ort(model, feeds)[0], rtol=1e-4, atol=1e-4)
  recs = [r for r in load_records(log) if r.strategy != "default"]
  assert len(recs) == 16 and {r.strategy for r in recs} == {"opevo"} and all(r.is_estimate for r in recs)
  strat = OpEvoStrategy(seed=1)                                    # resumed: the log seeds the population
  cm = mc.compile(model, target="sm_86", trials=24, strategy=strat, log_file=log, measurer="static",
                  measures_per_round=8, progress=False, seed=1)
  recs = [r for r in load_records(log) if r.strategy != "default"]
  assert len(recs) == 24 and {r.strategy for r in recs} == {"opevo"}
  assert len({(r.workload_key, r.steps_json) for r in recs}) == 24          # no program measured twice
  assert strat.stats["recovered"] == 16 and strat.stats["not_recovered"] == 0
  assert strat.stats["random"] == 0 and strat.stats["mutations"] >= 8        # evolved from the logged population
  np.testing.assert_allclose(cm.run(feeds, device="cpu")[0], run_ort(model, feeds)[0], rtol=1e-4, atol=1e-4)


def test_without_a_successful_parent_children_are_random_resets():
  task = _task(W.matmul(64, 64, 64))
  strat = OpEvoStrategy(parents=4)
  rng = np.random.default_rng(10)
  cands = strat.propose(task, 6, rng)
  for c in cands: task.record(c.key, None)                         # every trial failed: fitness 0
  strat.update(task, cands, [None] * len(cands))
  assert [f for _, f in strat.population(task)] == [0.0] * 6
  kids = strat.offspring_batch(task, 5, rng)
  assert len(kids) == 5 and strat.stats["random"] == 6 + 5 and strat.stats["mutations"] == 0
