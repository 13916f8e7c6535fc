"""OpEvo: evolution with topology-aware mutation (q-random walks), and no cost model.

OpEvo (Gao et al., AAAI'21; papers/opevo.txt; REFERENCE.md 4) evolves a population of measured
configurations. Fitness is throughput, here ``1 / cost``; a failed trial has fitness 0. The top
``parents`` (lambda) configurations by fitness recombine: each parameter of a child comes from a
parent drawn in proportion to fitness, independently per parameter, so failed trials never pass
anything on. The child is then mutated by a **q-random walk** on a graph over the parameter's values.
While ``U(0, 1) < q`` the value moves to a uniformly chosen neighbour, so the number of steps is
geometric (``P(k) = (1 - q) q^k``, mean ``q / (1 - q)``) and values near the parent's are likelier
than far ones. No configuration is measured twice: a child already measured, or already in the
batch, is mutated again. OpEvo trains no model. It spends its time measuring.

Parameters: OpEvo's three types, mapped onto a task's sketches (``sketch.py``).

* ``factor``: a tile group with k variables over a loop of extent E is the ordered
  (k + 1)-way factorization ``(E / prod, v1, ..., vk)``. The outermost level is included, and
  ``vk <= inner_limit``. Its graph (:func:`factor_graph`, networkx, built lazily and cached per
  (E, k + 1, inner_limit)) has the valid factorizations as nodes. Two nodes share an edge when
  moving one prime factor from one level to another turns one into the other, so the product is
  kept. The nodes are exactly ``annotate.factorizations``, so a uniform draw is ``draw_values``'s.
  Sizes for the benchmark tasks: at most 966 nodes and 6,920 edges (extent 1024 in 5 levels), built
  in about 11 ms. 2^20 in 5 levels has 8,246 nodes (0.13 s). Above ``MAX_GRAPH_NODES`` nodes no
  graph is built, and neighbours are computed on the fly with the same topology. For example,
  802816 = 2^14 7^2 in 5 levels has 36,216 nodes and would take 0.8 s to build.
* ``discrete``: ``auto_unroll_max_step`` per attach point (``UNROLL_CHOICES``), and every sketch
  choice with numeric candidates (thread counts, vector widths). A step moves one index up or
  down, and is forced inward at the ends.
* ``choice``: which sketch of the task, when it has more than one. A step jumps to a uniformly
  random other value. A sketch choice with non-numeric candidates would be a ``choice`` too, but
  minicomp's sketches have none.

**Sketches and parameters.** OpEvo has one fixed set of parameters, and minicomp's sketches of a
task each have their own. The search space is their union. A parameter is named by its variables
and domain, so a tile group that two sketches share is one parameter. A configuration has values
for the parameters of its own sketch only. In recombination, the child's sketch is inherited
like any parameter. If the donor drawn for one of its parameters belongs to a sketch without that
parameter, the value comes from a donor drawn in proportion to fitness among the parents that
have it (the parent that gave the sketch is always one). When a mutation changes the sketch, the
parameters the new sketch shares keep their values and the others get fresh uniform draws.

**A round** (``propose(task, n)``) produces offspring in batches of ``offspring`` until ``n``
valid, never-measured candidates are found. Every batch comes from the same population, because
no result comes back within a round; ``measures_per_round=offspring`` gives OpEvo's generations
exactly. If the task has fewer than ``parents`` results, or its best fitness is 0, the children
are uniform random valid draws (OpEvo's reset). Otherwise they are recombined and mutated.
Validity is checked in two stages. First comes the pre-filter: ``check_values`` and the sketch's
resource formulas, or lowering where a sketch has no formulas. Then ``make_candidate`` lowers and
checks the candidate exactly. Only valid candidates whose program was never measured are returned.
A child is mutated again when it fails. If it is already measured or in the batch, the walk goes
on from it, as in OpEvo. If it is invalid, a fresh walk starts from the recombined child, so
children follow the q-random-walk distribution restricted to valid configurations. After
``REMUTATIONS`` failed re-mutations the child is dropped. A round that finds nothing proposes
nothing, and the task scheduler retires the task (a tiny space all measured). Each round is
bounded by ``time_limit_s``.

**prescreen** (off by default): generate ``prescreen x n`` offspring (``True``: 8x), and propose the
``n`` that the learned cost model (``learned.py``, Ansor's model and features) predicts best.
Only with prescreen is a model trained (after each round, and from the log on resume). Until it
is fitted, the first ``n`` are taken.

**Resume.** A log holds each program's steps and cost, but not its variable values.
:func:`read_point` matches the steps against each sketch's symbolic steps and reads back the
split factors and auto-unroll pragmas. So every logged program of this task's sketches joins the
population with its fitness, whichever sketch-based strategy measured it. A program that matches
no sketch still counts as measured (``task.measured``) but joins no population. Values outside
OpEvo's domains (an unroll step not in ``UNROLL_CHOICES``) are treated the same way.

Departures from OpEvo's code (NNI ``opevo.py``):

* fitness is ``1 / cost`` (OpEvo: the trial's reported metric, FLOPS in its experiments). "No
  parents yet" means best fitness 0, not < 1e-3.
* invalid configurations are never measured. OpEvo measures them and gives them fitness 0.
* a random reset that is invalid, or already measured, is replaced by another draw. OpEvo mutates
  a duplicate reset. REFERENCE.md says resets are always mutated, but the code mutates a reset
  only while it is a duplicate, and so does this.
* re-mutation is bounded (``REMUTATIONS``). OpEvo loops until the child is new.
* a parameter with one value, or a factor of extent 1, ends its walk at once. OpEvo's factor step
  fails on a product of 1.
* ``walk="one"``: one q-random walk for the whole configuration, each step on a parameter drawn
  uniformly. The number of steps per child is then geometric, instead of geometric per
  parameter. The default ``walk="each"`` is the paper's and the code's: every parameter walks
  independently.
* defaults ``parents=8, offspring=8, q=0.5`` are those of OpEvo's shipped experiments. Its tuner's
  defaults are 20 / 20 / 0.5.
"""
from __future__ import annotations

import functools
import json
import math
import time

import networkx as nx
import numpy as np

from minicomp.search.annotate import (
  POPULATION_TIME_S,
  UNROLL_CHOICES,
  Candidate,
  factorizations,
  make_candidate,
  prime_factors,
)
from minicomp.search.sketch import Sketch, TileGroup
from minicomp.search.strategies.base import TuneTask
from minicomp.search.strategies.learned import LearnedStrategy, Point

MAX_GRAPH_NODES = 10000    # factor parameters with more nodes get neighbours on the fly (no networkx graph)
REMUTATIONS = 32           # re-mutations of one child, at most, before it is dropped
RANDOM_ROUNDS = 16         # rounds of random draws per batch of reset children, at most
DEFAULT_PRESCREEN = 8      # offspring generated per proposed one with prescreen=True
WALKS = ("each", "one")


# ---------------------------------------------------------------------------------------------
# factor parameters: the graph of ordered factorizations

def factor_moves(x: tuple[int, ...], primes: tuple[int, ...], inner_limit: int) -> list[tuple[int, ...]]:
  """The factorizations one move from ``x``: a prime ``p`` moves from level ``i`` to level ``j != i``,
  keeping the innermost level (the last) at most ``inner_limit``."""
  out = []
  for i, xi in enumerate(x):
    for p in primes:
      if xi % p: continue
      for j in range(len(x)):
        if j == i: continue
        y = list(x)
        y[i] //= p
        y[j] *= p
        if y[-1] <= inner_limit: out.append(tuple(y))
  return out


@functools.lru_cache(maxsize=1024)
def factor_nodes(extent: int, parts: int, inner_limit: int = 64) -> tuple[tuple[int, ...], ...]:
  """The ordered ``parts``-way factorizations ``(extent / prod, v1, .., v_{parts-1})`` of ``extent`` with
  ``v_{parts-1} <= inner_limit``: ``annotate.factorizations(extent, parts - 1, inner_limit)`` with the
  outermost level prepended."""
  return tuple((extent // math.prod(t),) + t for t in factorizations(extent, parts - 1, inner_limit))


@functools.lru_cache(maxsize=256)
def factor_graph(extent: int, parts: int, inner_limit: int = 64) -> nx.Graph:
  """OpEvo's topology of a factor parameter: the nodes of :func:`factor_nodes`, and an edge between two
  of them whenever moving one prime factor between two levels turns one into the other. Connected:
  every node reaches ``(extent, 1, .., 1)`` by moving its factors to level 0, which never raises the
  innermost level."""
  nodes = factor_nodes(extent, parts, inner_limit)
  primes = tuple(sorted(set(prime_factors(extent))))
  g = nx.Graph()
  g.add_nodes_from(nodes)
  g.add_edges_from((x, y) for x in nodes for y in factor_moves(x, primes, inner_limit) if x < y)
  return g


class FactorSpace:
  """The values of one factor parameter and their neighbours: the adjacency of :func:`factor_graph`,
  or (more than ``MAX_GRAPH_NODES`` nodes) :func:`factor_moves` computed on the fly; memoised per node."""

  def __init__(self, extent: int, parts: int, inner_limit: int):
    self.extent, self.parts, self.inner_limit = extent, parts, inner_limit
    self.nodes = factor_nodes(extent, parts, inner_limit)
    self.primes = tuple(sorted(set(prime_factors(extent))))
    self.graph = factor_graph(extent, parts, inner_limit) if len(self.nodes) <= MAX_GRAPH_NODES else None
    self._set = frozenset(self.nodes)
    self._nbrs: dict[tuple, tuple] = {}

  def __contains__(self, x) -> bool: return x in self._set

  def neighbours(self, x: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    nb = self._nbrs.get(x)
    if nb is None:
      nb = tuple(self.graph.adj[x]) if self.graph is not None else tuple(factor_moves(x, self.primes, self.inner_limit))
      self._nbrs[x] = nb
    return nb


@functools.lru_cache(maxsize=1024)
def factor_space(extent: int, parts: int, inner_limit: int = 64) -> FactorSpace:
  return FactorSpace(extent, parts, inner_limit)


# ---------------------------------------------------------------------------------------------
# parameters: read from / written to a point's values (tile sizes, choices) and unroll dict

class FactorParam:
  """A tile group as OpEvo's ``factor`` parameter; its value is ``(outer, v1, .., vk)``."""
  kind = "factor"

  def __init__(self, g: TileGroup):
    self.group = g
    self.key = ("factor", g.vars, g.extent, g.inner_limit)
    self.space = factor_space(g.extent, len(g.vars) + 1, g.inner_limit)

  @property
  def size(self) -> int: return len(self.space.nodes)

  def get(self, values: dict, unroll: dict) -> tuple[int, ...]:
    inner = tuple(values[v] for v in self.group.vars)
    return (self.group.extent // max(1, math.prod(inner)),) + inner

  def put(self, values: dict, unroll: dict, x: tuple[int, ...]) -> None: values.update(zip(self.group.vars, x[1:]))
  def contains(self, x) -> bool: return x in self.space
  def draw(self, rng: np.random.Generator): return self.space.nodes[int(rng.integers(len(self.space.nodes)))]

  def step(self, x, rng: np.random.Generator):
    """A uniformly chosen neighbour of ``x`` (None: ``x`` has none)."""
    nb = self.space.neighbours(x)
    return nb[int(rng.integers(len(nb)))] if nb else None


class DiscreteParam:
  """OpEvo's ``discrete`` parameter: sorted numeric options, neighbours by index +-1. ``var`` names a
  sketch choice in the values; ``at`` an auto-unroll attach point in the unroll dict."""
  kind = "discrete"

  def __init__(self, options, var: str | None = None, at: tuple[str, str] | None = None):
    self.options = tuple(sorted(options))
    self.var, self.at = var, at
    self.key = ("discrete", var, self.options) if var is not None else ("unroll", at, self.options)
    self._index = {o: i for i, o in enumerate(self.options)}

  @property
  def size(self) -> int: return len(self.options)

  def get(self, values: dict, unroll: dict): return values[self.var] if self.var is not None else unroll.get(self.at, 0)

  def put(self, values: dict, unroll: dict, x) -> None:
    if self.var is not None: values[self.var] = x
    else: unroll[self.at] = x

  def contains(self, x) -> bool: return x in self._index
  def draw(self, rng: np.random.Generator): return self.options[int(rng.integers(len(self.options)))]

  def step(self, x, rng: np.random.Generator):
    n = len(self.options)
    if n < 2: return None
    i = self._index[x]
    j = 1 if i == 0 else n - 2 if i == n - 1 else i + (1 if rng.random() < 0.5 else -1)
    return self.options[j]


class ChoiceParam(DiscreteParam):
  """OpEvo's ``choice`` parameter: categorical, every other value is a neighbour. ``var`` None with
  ``at`` None is the sketch index (read from and written to the point, not its values)."""
  kind = "choice"

  def __init__(self, options, var: str | None = None):
    self.options, self.var, self.at = tuple(options), var, None
    self.key = ("choice", var, self.options)
    self._index = {o: i for i, o in enumerate(self.options)}

  def step(self, x, rng: np.random.Generator):
    n = len(self.options)
    if n < 2: return None
    j = int(rng.integers(n - 1))
    return self.options[j + (j >= self._index[x])]


def sketch_params(sketch: Sketch) -> list:
  """OpEvo's parameters of one sketch: a factor per tile group, a discrete (numeric candidates) or
  choice (other candidates) per sketch choice, a discrete per auto-unroll attach point."""
  out: list = [FactorParam(g) for g in sketch.tiles]
  for c in sketch.choices:
    numeric = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in c.candidates)
    out.append(DiscreteParam(c.candidates, var=c.var) if numeric else ChoiceParam(c.candidates, var=c.var))
  out += [DiscreteParam(UNROLL_CHOICES, at=at) for at in sketch.unroll]
  return out


def q_walk(param, x, q: float, rng: np.random.Generator) -> tuple[object, int]:
  """OpEvo's mutation of one parameter: ``while U(0, 1) < q`` step to a uniform neighbour. Returns the
  value and the number of steps taken (geometric: ``P(k) = (1 - q) q^k``, unless ``x`` has no neighbour)."""
  steps = 0
  while rng.random() < q:
    y = param.step(x, rng)
    if y is None: break
    x, steps = y, steps + 1
  return x, steps


# ---------------------------------------------------------------------------------------------
# the search space of one task

class Space:
  """The union of the parameters of a task's sketches, and OpEvo's operators on points of it."""

  def __init__(self, sketches: list[Sketch]):
    self.sketches = list(sketches)
    self.params = [sketch_params(sk) for sk in self.sketches]
    self.keys = [{p.key for p in ps} for ps in self.params]
    self.sketch = ChoiceParam(tuple(range(len(self.sketches))))
    self._steps: dict[int, list] = {}

  def symbolic_steps(self, k: int) -> list:
    if k not in self._steps: self._steps[k] = json.loads(self.sketches[k].schedule.to_json())
    return self._steps[k]

  def random(self, rng: np.random.Generator) -> Point:
    """A uniform sketch, then a uniform value of each of its parameters (``draw_values``' distribution)."""
    k = int(rng.integers(len(self.sketches)))
    values, unroll = {}, {}
    for p in self.params[k]: p.put(values, unroll, p.draw(rng))
    return Point(k, values, unroll)

  def switch(self, p: Point, k: int, rng: np.random.Generator) -> Point:
    """``p`` moved to sketch ``k``: the parameters both sketches have keep their values, the others are drawn."""
    if k == p.sketch_index: return p
    shared = self.keys[p.sketch_index]
    values, unroll = {}, {}
    for par in self.params[k]:
      par.put(values, unroll, par.get(p.values, p.unroll) if par.key in shared else par.draw(rng))
    return Point(k, values, unroll)

  def recombine(self, parents: list[Point], fitness, rng: np.random.Generator) -> Point:
    """A child of ``parents`` (fitness > 0 somewhere): its sketch and each of its parameters from a parent
    drawn in proportion to ``fitness``; a parameter the drawn parent's sketch lacks comes from a parent drawn
    in proportion to fitness among those that have it."""
    w = np.asarray(fitness, float)
    prob = w / w.sum()
    k = parents[int(rng.choice(len(parents), p=prob))].sketch_index
    ps = self.params[k]
    donors = rng.choice(len(parents), size=len(ps), p=prob)
    values, unroll = {}, {}
    for par, d in zip(ps, donors):
      d = int(d)
      if par.key not in self.keys[parents[d].sketch_index]:
        have = np.array([par.key in self.keys[q.sketch_index] for q in parents]) & (w > 0)
        sub = np.where(have, w, 0.0)
        d = int(rng.choice(len(parents), p=sub / sub.sum()))
      src = parents[d]
      par.put(values, unroll, par.get(src.values, src.unroll))
    return Point(k, values, unroll)

  def mutate(self, p: Point, q: float, rng: np.random.Generator, walk: str = "each") -> tuple[Point, int]:
    """``p`` after q-random walks (``walk="each"``: one walk per parameter, the sketch first; ``"one"``: one
    walk, each step on a parameter drawn uniformly among those with a neighbour); and the steps taken."""
    k, steps = p.sketch_index, 0
    if walk == "each":
      if len(self.sketches) > 1:
        k, steps = q_walk(self.sketch, k, q, rng)
        p = self.switch(p, k, rng)
      values, unroll = dict(p.values), dict(p.unroll)
      for par in self.params[k]:
        x, s = q_walk(par, par.get(values, unroll), q, rng)
        par.put(values, unroll, x)
        steps += s
      return Point(k, values, unroll), steps
    values, unroll = dict(p.values), dict(p.unroll)
    while rng.random() < q:
      opts = ([self.sketch] if len(self.sketches) > 1 else []) + [par for par in self.params[k] if par.size > 1]
      if not opts: break
      par = opts[int(rng.integers(len(opts)))]
      if par is self.sketch:
        nxt = self.switch(Point(k, values, unroll), int(par.step(k, rng)), rng)
        k, values, unroll = nxt.sketch_index, dict(nxt.values), dict(nxt.unroll)
      else:
        par.put(values, unroll, par.step(par.get(values, unroll), rng))
      steps += 1
    return Point(k, values, unroll), steps

  def recover(self, steps_json: str | list) -> Point | None:
    """The point of a logged program (its steps), or None when it is no concretisation of a sketch within
    OpEvo's domains."""
    got = json.loads(steps_json) if isinstance(steps_json, str) else steps_json
    for k, sk in enumerate(self.sketches):
      vu = read_point(sk, got, self.symbolic_steps(k))
      if vu is None: continue
      values, unroll = vu
      if all(par.contains(par.get(values, unroll)) for par in self.params[k]): return Point(k, values, unroll)
    return None


def read_point(sketch: Sketch, steps_json: str | list, symbolic: list | None = None) -> tuple[dict, dict] | None:
  """(values, unroll) such that ``annotate.concretize(sketch, values, unroll)`` has the steps ``steps_json``,
  or None: the steps must be the sketch's with an integer for every variable factor (the same integer for
  every use of a variable), followed by ``auto_unroll_max_step`` pragmas on the sketch's attach points."""
  got = json.loads(steps_json) if isinstance(steps_json, str) else steps_json
  sym = symbolic if symbolic is not None else json.loads(sketch.schedule.to_json())
  if len(got) < len(sym): return None
  values: dict[str, int] = {}
  for a, b in zip(sym, got):
    if a.keys() != b.keys(): return None
    for name, va in a.items():
      vb = b[name]
      if name != "factors":
        if va != vb: return None
        continue
      if not isinstance(vb, list) or len(va) != len(vb): return None
      for fa, fb in zip(va, vb):
        if isinstance(fa, dict):
          if not isinstance(fb, int) or isinstance(fb, bool) or values.setdefault(fa["var"], fb) != fb: return None
        elif fa != fb: return None
  unroll = {at: 0 for at in sketch.unroll}
  for b in got[len(sym):]:
    at = (b.get("stage"), b.get("iter"))
    if b.get("step") != "pragma" or b.get("pragma") != "auto_unroll_max_step" or at not in unroll: return None
    unroll[at] = b.get("value")
  if set(values) != set(sketch.schedule.params()): return None
  return values, unroll


# ---------------------------------------------------------------------------------------------
# the strategy

class OpEvoStrategy(LearnedStrategy):
  """OpEvo (module docstring). ``parents`` (lambda), ``offspring`` (rho, children per batch), ``q`` (the
  mutation rate: the walk's continue probability), ``prescreen`` (None/False: off; True: 8; an int >= 2:
  offspring generated per proposed candidate, ranked by the learned cost model), ``walk`` ("each": a
  walk per parameter, OpEvo's; "one": one walk per child), ``time_limit_s`` (bound of one round)."""
  name = "opevo"

  def __init__(self, seed: int = 0, parents: int = 8, offspring: int = 8, q: float = 0.5, prescreen=None,
               walk: str = "each", model=None, time_limit_s: float | None = POPULATION_TIME_S):
    super().__init__(seed, model)
    if not (isinstance(parents, int) and parents >= 1):
      raise ValueError(f"parents must be an int >= 1, got {parents!r}")
    if not (isinstance(offspring, int) and offspring >= 1):
      raise ValueError(f"offspring must be an int >= 1, got {offspring!r}")
    if not (isinstance(q, (int, float)) and 0 <= q < 1): raise ValueError(f"q must be in [0, 1), got {q!r}")
    if walk not in WALKS: raise ValueError(f"walk must be one of {WALKS}, got {walk!r}")
    if prescreen is None or prescreen is False: factor = 1
    elif prescreen is True: factor = DEFAULT_PRESCREEN
    elif isinstance(prescreen, int) and prescreen >= 2: factor = prescreen
    else: raise ValueError(f"prescreen must be None, a bool or an int >= 2, got {prescreen!r}")
    self.parents, self.offspring, self.q, self.walk, self.prescreen = parents, offspring, float(q), walk, factor
    self.time_limit_s = time_limit_s
    self.stats.update({"mutations": 0, "steps": 0, "invalid": 0, "remutations": 0, "given_up": 0, "random": 0,
                       "recovered": 0, "not_recovered": 0, "rejected_after_prefilter": 0})
    self._spaces: dict[str, Space] = {}
    self._pop: dict[str, dict[str, tuple[Point, float]]] = {}   # task -> program key -> (point, fitness)
    self._done: dict[str, set[tuple]] = {}                         # task -> point keys never to propose again
    self._synced: dict[str, int] = {}                              # task -> history entries looked at

  # -- the population
  def space(self, task: TuneTask) -> Space:
    if task.key not in self._spaces: self._spaces[task.key] = Space(task.sketches)
    return self._spaces[task.key]

  def population(self, task: TuneTask) -> list[tuple[Point, float]]:
    """(point, fitness) of the task's measured programs, fittest first (ties: in measurement order)."""
    self._sync(task)
    return sorted(self._pop.get(task.key, {}).values(), key=lambda pf: -pf[1])

  def _add(self, task: TuneTask, program: str, p: Point, cost: float | None) -> None:
    fitness = 1.0 / cost if cost is not None and cost > 0 and math.isfinite(cost) else 0.0
    self._pop.setdefault(task.key, {})[program] = (p, fitness)
    self._done.setdefault(task.key, set()).add(p.key)

  def _sync(self, task: TuneTask) -> None:
    """Take in the task's history not seen yet (a resumed log): each program's point read back from its steps."""
    start = self._synced.get(task.key, 0)
    if start >= len(task.history): return
    pop = self._pop.setdefault(task.key, {})
    for steps, cost in task.history[start:]:
      if steps in pop: continue
      try: p = self.space(task).recover(steps)
      except (ValueError, TypeError, KeyError, AttributeError): p = None   # a malformed log line: not ours
      if p is None:
        self.stats["not_recovered"] += 1; continue
      self.stats["recovered"] += 1
      self._add(task, steps, p, cost)
    self._synced[task.key] = len(task.history)

  def resume(self, tasks: list[TuneTask]) -> None:
    """Seed each task's population from its logged history; with prescreen, also retrain the model."""
    for t in tasks: self._sync(t)
    if self.prescreen > 1: super().resume(tasks)

  def update(self, task: TuneTask, candidates: list[Candidate], costs: list[float | None]) -> None:
    for c, cost in zip(candidates, costs):
      self._add(task, c.key, Point(c.sketch_index, dict(c.values), dict(c.unroll)), cost)
    if self.prescreen > 1: super().update(task, candidates, costs)   # only prescreen needs the model

  # -- validity
  def _lower(self, task: TuneTask, p: Point, exclude: set[str]) -> Candidate | None:
    """``p`` lowered and checked exactly, unless invalid or its program is in ``exclude`` (then never again)."""
    c = self._concrete.get(p.key)
    if c is None: c, _ = make_candidate(task.sketches[p.sketch_index], p.values, p.unroll, task.target, p.sketch_index)
    if c is None: self.stats["rejected_after_prefilter"] += 1
    if c is None or c.key in exclude:
      self._done.setdefault(task.key, set()).add(p.key)
      return None
    exclude.add(c.key)
    return c

  # -- offspring
  def _random(self, task: TuneTask, space: Space, count: int, seen: set, rng: np.random.Generator,
              deadline: float | None) -> list[Point]:
    """Up to ``count`` uniform random valid points not in ``seen`` (OpEvo's reset)."""
    out: list[Point] = []
    for _ in range(RANDOM_ROUNDS):
      pts = [space.random(rng) for _ in range(32 * (count - len(out)))]
      for p, ok in zip(pts, self._valid(task, pts, deadline)):
        if len(out) >= count: break
        if ok and p.key not in seen:
          seen.add(p.key); out.append(p)
      if len(out) >= count or (deadline is not None and time.perf_counter() > deadline): break
    self.stats["random"] += len(out)
    return out

  def offspring_batch(self, task: TuneTask, count: int, rng: np.random.Generator, seen: set | None = None,
                      deadline: float | None = None) -> list[Point]:
    """Up to ``count`` children of the task's population, valid by the pre-filter and not in ``seen`` (the
    measured points when None; each child returned is added): random resets while the task has fewer than
    ``parents`` results or none succeeded, else recombined and mutated (module docstring)."""
    space = self.space(task)
    ranked = self.population(task)
    if seen is None: seen = set(self._done.get(task.key, ()))
    if len(ranked) < self.parents or ranked[0][1] <= 0: return self._random(task, space, count, seen, rng, deadline)
    parents = [p for p, _ in ranked[:self.parents]]
    fitness = np.array([f for _, f in ranked[:self.parents]])
    starts = [space.recombine(parents, fitness, rng) for _ in range(count)]
    kids = []
    for s in starts:
      kid, steps = space.mutate(s, self.q, rng, self.walk)
      kids.append(kid)
      self.stats["mutations"] += 1; self.stats["steps"] += steps
    out: list[Point] = []
    pending = list(range(count))
    for attempt in range(REMUTATIONS + 1):
      valid = self._valid(task, [kids[i] for i in pending], deadline)
      still = []
      for i, ok in zip(pending, valid):
        if ok and kids[i].key not in seen:
          seen.add(kids[i].key); out.append(kids[i]); continue
        if not ok: self.stats["invalid"] += 1
        if attempt == REMUTATIONS or (deadline is not None and time.perf_counter() > deadline):
          self.stats["given_up"] += 1; continue
        # measured or in the batch: walk on from it (OpEvo); invalid: a fresh walk from the recombined child
        kids[i], steps = space.mutate(kids[i] if ok else starts[i], self.q, rng, self.walk)
        self.stats["remutations"] += 1; self.stats["steps"] += steps
        still.append(i)
      pending = still
      if not pending: break
    return out

  def _rank(self, task: TuneTask, points: list[Point]) -> list[Point]:
    """``points`` best predicted first (the learned model, ``LearnedStrategy._scores``)."""
    scores = self._scores(task, points)
    return [points[int(i)] for i in np.argsort(-scores, kind="stable")]

  def propose(self, task: TuneTask, n: int, rng: np.random.Generator) -> list[Candidate]:
    self._concrete.clear()
    deadline = None if self.time_limit_s is None else time.perf_counter() + self.time_limit_s
    expired = lambda: deadline is not None and time.perf_counter() > deadline   # noqa: E731
    seen = set(self._done.get(task.key, ()))
    exclude = set(task.measured)
    chosen: list[Candidate] = []
    while len(chosen) < n and not expired():
      need = n - len(chosen)
      pool: list[Point] = []
      while len(pool) < need * self.prescreen and not expired():
        kids = self.offspring_batch(task, min(self.offspring, need * self.prescreen - len(pool)), rng, seen, deadline)
        if not kids: break
        pool += kids
      if not pool: break
      if self.prescreen > 1 and self.model.fitted: pool = self._rank(task, pool)
      got = 0
      for p in pool:
        if got >= need: break
        c = self._lower(task, p, exclude)
        if c is not None: chosen.append(c); got += 1
      if got == 0: break
    return chosen[:n]


__all__ = ["MAX_GRAPH_NODES", "ChoiceParam", "DiscreteParam", "FactorParam", "FactorSpace", "OpEvoStrategy", "Space",
           "factor_graph", "factor_moves", "factor_nodes", "factor_space", "q_walk", "read_point", "sketch_params"]
