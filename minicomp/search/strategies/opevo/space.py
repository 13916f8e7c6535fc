"""OpEvo's search space: typed parameters, the graphs their mutations walk, and the q-random walk.

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

A mutation of one parameter is a **q-random walk** (:func:`q_walk`): while ``U(0, 1) < q`` the value
moves to a uniformly chosen neighbour. :class:`Space` holds the union of a task's parameters and
OpEvo's operators on its points (uniform draw, fitness-proportional recombination, mutation, sketch
switch); :func:`read_point` reads a logged program's point back from its steps. The evolution loop
that uses them is ``opevo.py``.
"""
from __future__ import annotations

import functools
import json
import math

import networkx as nx
import numpy as np

from minicomp.search.annotate import UNROLL_CHOICES, factorizations, prime_factors
from minicomp.search.sketch_types import Sketch, TileGroup
from minicomp.search.strategies.learned import Point

MAX_GRAPH_NODES = 10000    # factor parameters with more nodes get neighbours on the fly (no networkx graph)


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

  def neighbours(self, x) -> tuple: return self.space.neighbours(x)

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

  def neighbours(self, x) -> tuple:
    """The options next to ``x`` by index (``step`` moves to one of them, uniformly)."""
    i = self._index[x]
    return tuple(self.options[j] for j in (i - 1, i + 1) if 0 <= j < len(self.options))

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

  def neighbours(self, x) -> tuple: return tuple(o for o in self.options if o != x)

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

  def neighbours(self, p: Point) -> list[Point]:
    """The points one walk step from ``p`` within its sketch: one parameter moved to a neighbour on its
    graph (a sketch switch, which draws the parameters the sketches do not share, is not one step)."""
    out = []
    for par in self.params[p.sketch_index]:
      for y in par.neighbours(par.get(p.values, p.unroll)):
        values, unroll = dict(p.values), dict(p.unroll)
        par.put(values, unroll, y)
        out.append(Point(p.sketch_index, values, unroll))
    return out

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


__all__ = ["MAX_GRAPH_NODES", "ChoiceParam", "DiscreteParam", "FactorParam", "FactorSpace", "Space", "factor_graph",
           "factor_moves", "factor_nodes", "factor_space", "q_walk", "read_point", "sketch_params"]
