"""Ansor's search: evolutionary search over annotated sketches, guided by a learned cost model.

Per round for a task (REFERENCE.md 1.3-1.5; defaults are Ansor's):

1. an initial population of ``population`` valid random annotations of the task's sketches
   (never a program already measured), plus the best measured programs of the task
   (``use_measured_ratio`` of the population, by cost);
2. ``generations`` rounds of evolution: every program is scored by the cost model (features of
   its lowered program, ``features.py``; the model, ``cost_model.py``); parents are drawn with
   probability proportional to their score (shifted to be positive); a child is a mutation
   (probability ``mutation_prob``: tile size 0.90 -- move a prime factor between two levels of
   one split; annotation 0.10 -- redraw one auto-unroll step, thread count or vector width)
   or else a node-based crossover of two parents of the same sketch (each stage's variables
   from one parent), and is kept only if it is valid; the best unmeasured programs seen are
   kept (``2 x n``);
3. the ``n`` to measure: the best ``n - n_random`` by score and ``n_random = eps_greedy x n``
   random programs of the initial population (epsilon-greedy).

After measurement the cost model is retrained on every result so far (throughput normalised per
task; failures count as zero throughput). Before that, the new results are held-back data for
the model that chose them: its pairwise accuracy and recall@k on them are logged (INFO) and kept
in ``accuracy``.

Departures from Ansor: crossover exists (Ansor's code has a TODO); compute-location mutation is
not needed on GPU (Ansor disables it there too); the programs' features are cached by program
key, so a program scored in several generations is lowered once.
"""
from __future__ import annotations

import logging
import math

import numpy as np

from minicomp.search.annotate import UNROLL_CHOICES, Candidate, make_candidate, sample_population
from minicomp.search.strategies.base import Strategy, TuneTask


log = logging.getLogger("minicomp")
MIN_TRAIN_STEPS = 300            # optimiser steps per retraining at least (early stopping still applies)


def _prime_factors(n: int) -> list[int]:
  out, d = [], 2
  while d * d <= n:
    while n % d == 0: out.append(d); n //= d
    d += 1
  if n > 1: out.append(n)
  return out


class AnsorStrategy(Strategy):
  name = "ansor"

  def __init__(self, seed: int = 0, population: int = 2048, generations: int = 4, mutation_prob: float = 0.85,
               eps_greedy: float = 0.05, use_measured_ratio: float = 0.2, model=None):
    self.population, self.generations = population, generations
    self.mutation_prob, self.eps_greedy, self.use_measured_ratio = mutation_prob, eps_greedy, use_measured_ratio
    self.seed = seed
    self._model = model
    self._features: dict[str, np.ndarray] = {}
    self._data: list[tuple[np.ndarray, float | None, str]] = []
    self._values_of: dict[str, dict] = {}       # measured program key -> its variable values (for evolution)
    self._sketch_of: dict[str, int] = {}
    self._unroll_of: dict[str, dict] = {}
    self.accuracy: list[tuple[str, float, float]] = []   # (task, pairwise accuracy, recall@k) on each new round
    self.stats = {"scored": 0, "mutations": 0, "crossovers": 0, "invalid_children": 0, "trainings": 0}

  # -- the model
  @property
  def model(self):
    """The learned cost model, shared by all tasks (Ansor). Ranking loss, batches of 128: the
    cost-model tests found the MLP underfits the few hundred programs of early rounds with
    Ansor's batch of 512, and the weighted-MSE loss cannot rank programs whose statement rows
    differ in number (minicomp's sketches vary in how many stores they have)."""
    if self._model is None:
      from minicomp.search.cost_model import MLPCostModel
      from minicomp.search.features import N_FEATURES
      self._model = MLPCostModel(N_FEATURES, loss="rank", seed=self.seed, batch=128, lr=1e-3)
    return self._model

  def features(self, c: Candidate) -> np.ndarray:
    f = self._features.get(c.key)
    if f is None:
      from minicomp.search.features import extract_features
      prog = c.program if c.program is not None else c.schedule.lower()
      try: f = extract_features(prog)
      except Exception:  # noqa: BLE001 -- a program the extractor cannot take scores -inf, never stops the search
        f = np.zeros((0, 1), np.float32)
      self._features[c.key] = f
    return f

  def _scores(self, cands: list[Candidate]) -> np.ndarray:
    self.stats["scored"] += len(cands)
    return np.asarray(self.model.predict([self.features(c) for c in cands]), float)

  # -- proposing
  def propose(self, task: TuneTask, n: int, rng: np.random.Generator) -> list[Candidate]:
    sketches = task.sketches
    measured = set(task.measured)
    init = sample_population(sketches, self.population, rng, task.target, exclude=measured)
    best_measured = self._best_measured(task, int(self.use_measured_ratio * self.population))
    pop = init + best_measured
    if not pop: return []
    keep: dict[str, tuple[float, Candidate]] = {}
    for gen in range(self.generations + 1):
      scores = self._scores(pop)
      for c, s in zip(pop, scores):
        if c.key not in measured and math.isfinite(s): keep[c.key] = (float(s), c)
      if gen == self.generations: break
      pop = self._next_generation(task, pop, scores, rng)
      if not pop: break
    best = sorted(keep.values(), key=lambda sc: -sc[0])[:2 * n]
    n_random = int(self.eps_greedy * n)
    chosen, seen = [], set()
    for _, c in best[:max(0, n - n_random)]:
      chosen.append(c); seen.add(c.key)
    pool = [c for c in init if c.key not in seen and c.key not in measured]
    for k in rng.permutation(len(pool))[:n - len(chosen)]:
      chosen.append(pool[int(k)]); seen.add(pool[int(k)].key)
    for _, c in best[max(0, n - n_random):]:           # fill up if the random pool ran short
      if len(chosen) >= n: break
      if c.key not in seen: chosen.append(c); seen.add(c.key)
    return chosen[:n]

  def _best_measured(self, task: TuneTask, k: int) -> list[Candidate]:
    if k <= 0: return []
    from minicomp.ir.schedule import Schedule
    ok = sorted(((c, s) for s, c in task.measured.items() if c is not None), key=lambda cs: cs[0])[:k]
    out = []
    for _, steps in ok:
      s = Schedule.from_json(task.dag, steps)
      out.append(Candidate(s, self._values_of.get(steps, {}), self._sketch_of.get(steps, -1),
                           self._unroll_of.get(steps, {})))
    return out

  def _next_generation(self, task: TuneTask, pop: list[Candidate], scores: np.ndarray,
                       rng: np.random.Generator) -> list[Candidate]:
    ok = np.isfinite(scores)
    if not ok.any(): w = np.ones(len(pop))
    else:
      s = np.where(ok, scores, np.nanmin(np.where(ok, scores, np.nan)))
      w = s - s.min() + 1e-3 * (s.max() - s.min() + 1e-9)
    w = w / w.sum()
    by_sketch: dict[int, list[int]] = {}
    for i, c in enumerate(pop):
      if c.sketch_index >= 0 and c.values: by_sketch.setdefault(c.sketch_index, []).append(i)
    out, seen = [], set()
    tries = 0
    while len(out) < len(pop) and tries < 4 * len(pop):
      tries += 1
      p = pop[int(rng.choice(len(pop), p=w))]
      if p.sketch_index < 0 or not p.values: continue
      sk = task.sketches[p.sketch_index]
      if rng.random() < self.mutation_prob:
        values, unroll = self._mutate(sk, p, rng)
        self.stats["mutations"] += 1
      else:
        mates = by_sketch.get(p.sketch_index, [])
        q = pop[mates[int(rng.integers(len(mates)))]] if mates else p
        values, unroll = self._crossover(sk, p, q, rng)
        self.stats["crossovers"] += 1
      child, _ = make_candidate(sk, values, unroll, task.target, p.sketch_index)
      if child is None:
        self.stats["invalid_children"] += 1; continue
      if child.key in seen: continue
      seen.add(child.key)
      out.append(child)
    return out

  def _mutate(self, sk, p: Candidate, rng: np.random.Generator) -> tuple[dict, dict]:
    values, unroll = dict(p.values), dict(p.unroll)
    groups = [g for g in sk.tiles if g.extent > 1]
    if groups and rng.random() < 0.9:
      g = groups[int(rng.integers(len(groups)))]
      lengths = [g.extent // math.prod(values[v] for v in g.vars)] + [values[v] for v in g.vars]
      order = [int(i) for i in rng.permutation(len(lengths))]
      src = next((i for i in order if lengths[i] > 1), None)
      if src is not None:
        dst = order[(order.index(src) + 1) % len(order)]
        f = _prime_factors(lengths[src])
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

  def _crossover(self, sk, p: Candidate, q: Candidate, rng: np.random.Generator) -> tuple[dict, dict]:
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

  # -- learning
  def update(self, task: TuneTask, candidates: list[Candidate], costs: list[float | None]) -> None:
    if self.model.fitted and len(candidates) > 1:
      # the round's results are held-back data for the model trained before it: how well did it rank them?
      from minicomp.search.cost_model import evaluate
      ev = evaluate(self._scores(candidates), costs, [task.key] * len(costs), k=min(8, len(costs)))
      self.accuracy.append((task.key, ev["pairwise_accuracy"], ev["recall_at_k"]))
      log.info("cost model on the new round of %s: pairwise accuracy %.2f, recall@%d %.2f", task.name or task.key,
               ev["pairwise_accuracy"], min(8, len(costs)), ev["recall_at_k"])
    for c, cost in zip(candidates, costs):
      self._data.append((self.features(c), cost, task.key))
      self._values_of[c.key], self._sketch_of[c.key], self._unroll_of[c.key] = c.values, c.sketch_index, c.unroll
    self._train()

  def resume(self, tasks: list[TuneTask]) -> None:
    """Retrain the cost model from the tasks' logged history (programs rebuilt from their steps)."""
    from minicomp.ir.schedule import Schedule
    for t in tasks:
      for steps, cost in t.history:
        try: prog = Schedule.from_json(t.dag, steps).lower()
        except Exception:  # noqa: BLE001 -- a logged program this version cannot lower: skip it
          continue
        c = Candidate(Schedule.from_json(t.dag, steps), {}, -1, {}, prog)
        self._data.append((self.features(c), cost, t.key))
    if self._data: self._train()

  def _train(self) -> None:
    rows = [d[0] for d in self._data]
    m = self.model
    steps_per_epoch = max(1, math.ceil(len(rows) / max(1, m.batch)))
    m.epochs = int(min(200, max(30, math.ceil(MIN_TRAIN_STEPS / steps_per_epoch))))   # enough steps on small data
    m.fit(rows, [d[1] for d in self._data], [d[2] for d in self._data])
    self.stats["trainings"] += 1
