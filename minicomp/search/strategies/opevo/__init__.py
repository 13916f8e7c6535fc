"""OpEvo: evolution with topology-aware mutation (q-random walks), and no cost model.

OpEvo (Gao et al., AAAI'21; its code in Microsoft NNI, ``opevo/src/algorithms/opevo.py``) evolves a population of measured
configurations. Fitness is throughput, here ``1 / cost``; a failed trial has fitness 0. The top
``parents`` (lambda) configurations by fitness recombine: each parameter of a child comes from a
parent drawn in proportion to fitness, independently per parameter, so failed trials never pass
anything on. The child is then mutated by a **q-random walk** on a graph over the parameter's values.
While ``U(0, 1) < q`` the value moves to a uniformly chosen neighbour, so the number of steps is
geometric (``P(k) = (1 - q) q^k``, mean ``q / (1 - q)``) and values near the parent's are likelier
than far ones. No configuration is measured twice: a child already measured, or already in the
batch, is mutated again. OpEvo trains no model. It spends its time measuring.

The parameters (OpEvo's three types, mapped onto a task's sketches), their graphs and the walk are in
``opevo_space.py``: a configuration has values for the parameters of its own sketch, and the search
space is the union over the task's sketches.

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
:func:`~minicomp.search.strategies.opevo.space.read_point` matches the steps against each sketch's
symbolic steps and reads back the split factors and auto-unroll pragmas. So every logged program of
this task's sketches joins the population with its fitness, whichever sketch-based strategy measured
it. A program that matches no sketch still counts as measured (``task.measured``) but joins no
population. Values outside OpEvo's domains (an unroll step not in ``UNROLL_CHOICES``) are treated the
same way.

Departures from OpEvo's code (NNI ``opevo.py``):

* fitness is ``1 / cost`` (OpEvo: the trial's reported metric, FLOPS in its experiments). "No
  parents yet" means best fitness 0, not < 1e-3.
* invalid configurations are never measured. OpEvo measures them and gives them fitness 0.
* a random reset that is invalid, or already measured, is replaced by another draw. OpEvo mutates
  a duplicate reset: NNI's tuner reads as if resets are always mutated, but its code mutates a
  reset only while it is a duplicate, and so does this.
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

import math
import time

import numpy as np

from minicomp.search.annotate import POPULATION_TIME_S, Candidate, make_candidate
from minicomp.search.strategies.base import TuneTask
from minicomp.search.strategies.learned import LearnedStrategy, Point
from minicomp.search.strategies.opevo.space import Space

REMUTATIONS = 32           # re-mutations of one child, at most, before it is dropped
RANDOM_ROUNDS = 16         # rounds of random draws per batch of reset children, at most
DEFAULT_PRESCREEN = 8      # offspring generated per proposed one with prescreen=True
WALKS = ("each", "one")


class OpEvoStrategy(LearnedStrategy):
  """OpEvo (module docstring). ``parents`` (lambda), ``offspring`` (rho, children per batch), ``q`` (the
  mutation rate: the walk's continue probability), ``prescreen`` (None/False: off; True: 8; an int >= 2:
  offspring generated per proposed candidate, ranked by the learned cost model), ``walk`` ("each": a
  walk per parameter, OpEvo's; "one": one walk per child), ``time_limit_s`` (bound of one round)."""
  name = "opevo"

  def __init__(self, seed: int = 0, parents: int = 8, offspring: int = 8, q: float = 0.5, prescreen=None,
               walk: str = "each", model=None, time_limit_s: float | None = POPULATION_TIME_S, pretrain=None):
    super().__init__(seed, model, pretrain)
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


__all__ = ["OpEvoStrategy"]
