"""Ansor's search: evolutionary search over annotated sketches, guided by a learned cost model.

Per round for a task (TVM's ``sketch_policy.cc``: initial population, mutations, evolutionary search;
defaults are Ansor's):

1. an initial population of ``population`` valid random annotations of the task's sketches
   (never a program already measured), plus the best measured programs of the task
   (``use_measured_ratio`` of the population, by cost);
2. ``generations`` rounds of evolution: every program is scored by the cost model (its features,
   ``features.py``; the model, ``cost_model.py``); parents are drawn with
   probability proportional to their score (shifted to be positive); a child is a mutation
   (probability ``mutation_prob``: tile size 0.90 -- move a prime factor between two levels of
   one split; annotation 0.10 -- redraw one auto-unroll step, thread count or vector width)
   or else a node-based crossover of two parents of the same sketch (each stage's variables
   from one parent), and is kept only if it is valid; every unmeasured program seen is kept
   with its score;
3. the ``n`` to measure: the best ``n - n_random`` by score and ``n_random = eps_greedy x n``
   random programs of the initial population (epsilon-greedy).

After measurement the cost model is retrained on every result so far (throughput normalised per
task; failures count as zero throughput). Before that, the new results are held-back data for
the model that chose them: its pairwise accuracy and recall@k on them are logged (INFO) and kept
in ``accuracy``.

Scoring a population of 2048 by lowering each candidate would take many minutes in Python, so
candidates are *points* (sketch, variable values) until they are chosen: their features and
resource use come from the sketch's formulas (``formulas.py``: the symbolic program's features
evaluated with numpy for the whole population at once), which also serve as the validity
pre-filter. Only the programs picked for measurement are lowered and checked exactly. Sketches
whose symbolic program cannot be lowered fall back to lowering each candidate.

Each round is bounded by time as well as by tries: the initial sampling and the generations stop
after ``time_limit_s`` (default ``EVOLUTION_TIME_S``; the population drawn so far is still scored
once), and choosing the programs to measure, each lowered and checked exactly, stops after
``annotate.POPULATION_TIME_S``. The bounds matter only where candidates are lowered one by one (a
sketch without formulas, or a pre-filter that passes programs the exact check rejects): with
formulas a default round takes 10-30 s. A round that finds nothing proposes nothing, and the task
scheduler retires the task.

Departures from Ansor: crossover exists (Ansor's code has a TODO); compute-location mutation is
not needed on GPU (Ansor disables it there too); features are the formula values (equal to the
lowered program's where every split divides; see ``formulas.py``).

The cost model, its features and its retraining are shared with Felix (``learned.py``).
"""
from __future__ import annotations

import math
import time

import numpy as np

from minicomp.search.annotate import (
  POPULATION_TIME_S,
  UNROLL_CHOICES,
  Candidate,
  draw_unroll,
  draw_values,
  prime_factors,
)
from minicomp.search.strategies.base import TuneTask
from minicomp.search.strategies.learned import MIN_TRAIN_STEPS, LearnedStrategy, Point

__all__ = ["EVOLUTION_TIME_S", "MIN_TRAIN_STEPS", "AnsorStrategy", "Point"]

EVOLUTION_TIME_S = 120.0     # wall-clock bound of one round's sampling and evolution (module docstring)


class AnsorStrategy(LearnedStrategy):
  name = "ansor"

  def __init__(self, seed: int = 0, population: int = 2048, generations: int = 4, mutation_prob: float = 0.85,
               eps_greedy: float = 0.05, use_measured_ratio: float = 0.2, model=None,
               time_limit_s: float | None = EVOLUTION_TIME_S, pretrain=None):
    super().__init__(seed, model, pretrain)
    self.population, self.generations, self.time_limit_s = population, generations, time_limit_s
    self.mutation_prob, self.eps_greedy, self.use_measured_ratio = mutation_prob, eps_greedy, use_measured_ratio
    self.stats.update({"mutations": 0, "crossovers": 0, "invalid_children": 0, "rejected_after_prefilter": 0,
                       "timeouts": 0})

  # -- proposing
  def _random_points(self, task: TuneTask, n: int, rng: np.random.Generator) -> list[Point]:
    sketches = task.sketches
    pts = []
    for _ in range(n):
      k = int(rng.integers(len(sketches)))
      pts.append(Point(k, draw_values(sketches[k], rng), draw_unroll(sketches[k], rng)))
    return pts

  def propose(self, task: TuneTask, n: int, rng: np.random.Generator) -> list[Candidate]:
    measured = set(task.measured)
    deadline = None if self.time_limit_s is None else time.perf_counter() + self.time_limit_s
    expired = lambda: deadline is not None and time.perf_counter() > deadline   # noqa: E731
    init: list[Point] = []
    for _ in range(4):                                  # invalid draws are dropped: draw again, a few times
      pts = self._random_points(task, self.population - len(init), rng)
      seen = {p.key for p in init}
      init += [p for p, ok in zip(pts, self._valid(task, pts, deadline)) if ok and p.key not in seen]
      init = list({p.key: p for p in init}.values())
      if len(init) >= self.population or expired(): break
    pop = init + self._best_measured(task, int(self.use_measured_ratio * self.population))
    if not pop: return []
    keep: dict[tuple, tuple[float, Point]] = {}
    for gen in range(self.generations + 1):
      scores = self._scores(task, pop)
      for p, sc in zip(pop, scores):
        if p.key not in self._measured_points and math.isfinite(sc): keep[p.key] = (float(sc), p)
      if gen == self.generations: break
      if expired():
        self.stats["timeouts"] += 1; break
      pop = self._next_generation(task, pop, scores, rng, deadline)
      if not pop: break
    best = [p for _, p in sorted(keep.values(), key=lambda sp: -sp[0])]
    n_random = int(self.eps_greedy * n)
    chosen: list[Candidate] = []
    exclude = set(measured)
    stop = time.perf_counter() + POPULATION_TIME_S      # each take lowers a program: bound them too

    def take(p: Point) -> bool:
      """False when the time for choosing is spent."""
      if time.perf_counter() > stop: return False
      c = self._lower_new(task, p, exclude, self._concrete)
      if c is not None: chosen.append(c)
      return True
    for p in best:
      if len(chosen) >= n - n_random or not take(p): break
    for k in rng.permutation(len(init)):
      if len(chosen) >= n or not take(init[int(k)]): break
    for p in best:                                      # fill up if the random pool ran short
      if len(chosen) >= n or not take(p): break
    if time.perf_counter() > stop: self.stats["timeouts"] += 1
    return chosen[:n]

  def _next_generation(self, task: TuneTask, pop: list[Point], scores: np.ndarray,
                       rng: np.random.Generator, deadline: float | None = None) -> list[Point]:
    ok = np.isfinite(scores)
    if not ok.any(): w = np.ones(len(pop))
    else:
      s = np.where(ok, scores, np.nanmin(np.where(ok, scores, np.nan)))
      w = s - s.min() + 1e-3 * (s.max() - s.min() + 1e-9)
    w = w / w.sum()
    by_sketch: dict[int, list[int]] = {}
    for i, p in enumerate(pop): by_sketch.setdefault(p.sketch_index, []).append(i)
    children: dict[tuple, Point] = {}
    for _ in range(2 * len(pop)):
      if len(children) >= len(pop): break
      p = pop[int(rng.choice(len(pop), p=w))]
      sk = task.sketches[p.sketch_index]
      if rng.random() < self.mutation_prob:
        values, unroll = self._mutate(sk, p, rng)
        self.stats["mutations"] += 1
      else:
        mates = by_sketch[p.sketch_index]
        values, unroll = self._crossover(sk, p, pop[mates[int(rng.integers(len(mates)))]], rng)
        self.stats["crossovers"] += 1
      c = Point(p.sketch_index, values, unroll)
      children.setdefault(c.key, c)
    kids = list(children.values())
    valid = self._valid(task, kids, deadline) if kids else np.zeros(0, bool)
    self.stats["invalid_children"] += int((~valid).sum())
    return [c for c, v in zip(kids, valid) if v]

  def _mutate(self, sk, p, rng: np.random.Generator) -> tuple[dict, dict]:
    values, unroll = dict(p.values), dict(p.unroll)
    groups = [g for g in sk.tiles if g.extent > 1]
    if groups and rng.random() < 0.9:
      g = groups[int(rng.integers(len(groups)))]
      lengths = [g.extent // math.prod(values[v] for v in g.vars)] + [values[v] for v in g.vars]
      order = [int(i) for i in rng.permutation(len(lengths))]
      src = next((i for i in order if lengths[i] > 1), None)
      if src is not None:
        dst = order[(order.index(src) + 1) % len(order)]
        f = prime_factors(lengths[src])
        f = f[int(rng.integers(len(f)))]
        lengths[src] //= f; lengths[dst] *= f
        if lengths[-1] <= g.inner_limit: values.update(zip(g.vars, lengths[1:]))
      return values, unroll
    opts = [("unroll", at) for at in sk.unroll] + [("choice", c) for c in sk.choices]
    if opts:
      kind, what = opts[int(rng.integers(len(opts)))]
      if kind == "unroll": unroll[what] = int(UNROLL_CHOICES[int(rng.integers(len(UNROLL_CHOICES)))])
      else: values[what.var] = int(what.candidates[int(rng.integers(len(what.candidates)))])
    return values, unroll

  def _crossover(self, sk, p, q, rng: np.random.Generator) -> tuple[dict, dict]:
    """Node-based crossover: each stage takes all its variables (tiles and choices) from one parent."""
    values, unroll = dict(p.values), dict(p.unroll)
    stages = sorted({g.stage for g in sk.tiles})
    for st in stages:
      if rng.random() < 0.5: continue
      for g in sk.tiles:
        if g.stage == st: values.update({v: q.values[v] for v in g.vars if v in q.values})
      for at in sk.unroll:
        if at[0] == st and at in q.unroll: unroll[at] = q.unroll[at]
    for c in sk.choices:
      if rng.random() < 0.5 and c.var in q.values: values[c.var] = q.values[c.var]
    return values, unroll
