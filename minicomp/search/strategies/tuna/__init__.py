"""Tuna's search: evolution strategies on the static model, then the top-k programs measured.

Tuna ("Tuna: A Static Analysis Approach to Optimizing Deep Neural Networks", 2021) optimises tensor programs with compile-time analysis only: a static cost
model scores a program from its code, and the search is Evolution Strategies (Algorithm 4), a
black-box optimiser over real parameters ``theta``::

    sample eps_1 .. eps_n ~ N(0, I);  F_i = F(theta + sigma eps_i);  theta += alpha / (n sigma) sum_i F_i eps_i

Nothing is measured while it searches; the best programs under the model are taken at the end
(the paper reports its top-k). That is the mode to tune in minutes on a laptop.

minicomp's version, per task:

1. **Relaxed parameters.** Per sketch (``sketch.py``), ``theta`` is the natural log of every sketch
   variable (tile sizes and choices, in ``sketch.params`` order: Felix's ``y``). Every marked loop gets
   ``auto_unroll_max_step`` ``unroll`` (512, as Gensor's construction); with ``unroll=None`` the step is
   relaxed too, as one more coordinate ``log(1 + step)``. It is not by default: the analytic model's
   response to the step disagrees with the full model's (it rates 16 far above 0, which the full model
   rates the same, and puts 64 and up out of registers where ptxas fits them), and the ES, trusting it,
   chose 16 and lost 1.3-1.4x under the full model (h100) on conv 512 7x7, a ConvTranspose and conv 56x56x64.
2. **Rounding.** Each sample rounds to a valid point: every tile group jointly to its nearest valid
   factorization in log space and every choice to its nearest candidate (Felix's ``round_values``), a
   relaxed unroll coordinate to the nearest of ``UNROLL_CHOICES`` (one value for every marked loop).
3. **Objective.** The static model's analytic part (:class:`~minicomp.search.static.analytic.SketchModel`:
   the launch facts of the sketch's symbolic program as formulas of its variables, numpy over the
   whole population, no NVRTC), lower latency being better. A point the value checks
   (``check_values``) or the model's resource checks reject costs ``inf``. Costs are memoised per
   point.
4. **Update.** Mirrored (antithetic) samples, fitness ``-cost`` shaped by centred ranks (each sample's
   rank in its population mapped to [-0.5, 0.5], ties sharing their mean rank, ``inf`` ranking last),
   then Algorithm 4's plain update of ``theta`` (``evolution_strategies.py``; no Adam, no momentum), kept
   inside the box of its variables. ``restarts`` independent runs per sketch, from random valid points,
   step in lockstep (one model call per iteration scores every run's population).
5. **Archive.** Every distinct valid point any run visits is kept with its analytic cost.

``propose`` searches a task on its first call (``iterations`` iterations, ``time_limit_s`` seconds per
task, ``stats`` and ``task_stats`` say what it did), then returns the best unmeasured archived points
that lower and pass the resource checks (``make_candidate``), one per tiling first (points that differ
only in a vector width tie under the analytic model more often than under the full one, so they come
after the other tilings, as in Gensor's construction); later calls return the next best. When the
archive runs dry the ES runs again, from new random starts and the best measured points. The task
scheduler measures what is proposed with the run's measurer (the full, PTX-based static model without
a GPU, or GPU timings), so Tuna's "top-k measured" is ``trials=k``.

A sketch whose analytic model cannot be built (lowering its symbolic program raises), raises while it
scores, or gives no finite cost to any random draw gets random valid programs instead (``stats["fallback_sketches"]``), a
share of each round in proportion to the sketches that fall back.

Departures from the paper: the objective is the analytic model, not the PTX-based one (the full model
costs an NVRTC build per program; it measures the top-k instead); fitness is rank-shaped (standard ES
practice: the raw ``F_i`` of Algorithm 4 would make the step scale with latencies in seconds and let one
outlier dominate; ``shaping=False`` gives the raw update); sampling is mirrored; the search space is
Ansor's sketches instead of AutoTVM templates; ``alpha`` and ``sigma`` are fixed, not tuned by an outer
ES (the paper treats ES itself as a black box over them); the unroll step is fixed (step 1).
"""
from __future__ import annotations

import copy
import logging
import math
import time
from dataclasses import dataclass

import numpy as np

from minicomp.errors import MinicompError
from minicomp.search.annotate import (
  POPULATION_TIME_S,
  SAMPLE_TIME_S,
  UNROLL_CHOICES,
  AnnotationError,
  Candidate,
  check_values,
  draw_values,
  factorizations,
  make_candidate,
  sample,
  sample_population,
)
from minicomp.search.sketch_types import Sketch
from minicomp.search.static.analytic import UNROLL_DEFAULT, SketchModel, sketch_model
from minicomp.search.strategies.base import Strategy, TuneTask
from minicomp.search.strategies.tuna.evolution_strategies import ALPHA, ITERATIONS, POPULATION, SIGMA, ESRun, evolve
from minicomp.search.strategies.felix import round_values
from minicomp.target import Target

log = logging.getLogger("minicomp")
RESTARTS = 8             # independent runs per sketch
TIME_LIMIT_S = 10.0      # one search of one task, all sketches
START_DRAWS = 64         # random draws per try when looking for valid starts (8 tries)
_LOG_UNROLL = np.log1p(np.array(UNROLL_CHOICES, np.float64))


# ---------------------------------------------------------------------------------------------
# one sketch: the relaxed space, rounding, the analytic objective, the archive

class SketchSearch:
  """ES over one sketch (module docstring, steps 1-3 and 5). ``archive`` maps each valid point
  visited, ``(values tuple in sketch.params order, unroll)``, to its analytic cost in seconds.
  ``unroll``: the step of every marked loop, or None to search it."""

  def __init__(self, sketch: Sketch, target: Target, model: SketchModel | None = None,
               unroll: int | None = UNROLL_DEFAULT):
    self.sketch, self.target = sketch, target
    self.names = list(sketch.params)
    self.p = len(self.names)
    self.relax_unroll = unroll is None and bool(sketch.unroll)
    self.unrolls = UNROLL_CHOICES if self.relax_unroll else (UNROLL_DEFAULT if unroll is None else int(unroll),)
    base = model or sketch_model(sketch, target)
    self.models = {}
    for u in self.unrolls:       # the model reads its unroll limit from this attribute only (facts())
      self.models[u] = copy.copy(base)
      self.models[u].unroll = u
    self.dim = self.p + (1 if self.relax_unroll else 0)
    self.n_tile = sum(len(g.vars) for g in sketch.tiles)     # the tile sizes lead sketch.params
    idx = {v: i for i, v in enumerate(self.names)}
    lo, hi = np.zeros(self.dim), np.zeros(self.dim)
    for g in sketch.tiles:
      opts = np.array(factorizations(g.extent, len(g.vars), g.inner_limit), np.float64).reshape(-1, len(g.vars))
      for j, v in enumerate(g.vars): hi[idx[v]] = math.log(opts[:, j].max())
    for ch in sketch.choices:
      lo[idx[ch.var]], hi[idx[ch.var]] = math.log(min(ch.candidates)), math.log(max(ch.candidates))
    if self.relax_unroll: hi[-1] = _LOG_UNROLL[-1]
    self.lo, self.hi = lo, hi
    self.costs: dict[tuple, float] = {}       # every point scored (inf: invalid)
    self.archive: dict[tuple, float] = {}     # the valid ones
    self.evaluations = 0

  def decode(self, Y: np.ndarray) -> list[tuple]:
    """The point each row of ``Y`` [m, dim] rounds to: (values tuple, unroll)."""
    Y = np.asarray(Y, np.float64).reshape(-1, self.dim)
    X = round_values(self.sketch, Y[:, :self.p]) if self.p else np.zeros((len(Y), 0), np.int64)
    if self.relax_unroll:
      U = np.asarray(UNROLL_CHOICES)[np.abs(Y[:, -1:] - _LOG_UNROLL[None]).argmin(1)]
    else:
      U = np.full(len(Y), self.unrolls[0])
    return [(tuple(map(int, x)), int(u)) for x, u in zip(X, U)]

  def encode(self, point: tuple) -> np.ndarray:
    values, u = point
    y = [math.log(v) for v in values]
    return np.array(y + ([math.log1p(u)] if self.relax_unroll else []), np.float64)

  def score(self, points: list[tuple]) -> np.ndarray:
    """Analytic cost of each point (memoised); valid ones go to the archive."""
    todo = list(dict.fromkeys(p for p in points if p not in self.costs))
    by_unroll: dict[int, list[tuple]] = {}
    for p in todo:
      vals = dict(zip(self.names, p[0]))
      if check_values(self.sketch, vals, self.target) is not None: self.costs[p] = math.inf
      else: by_unroll.setdefault(p[1], []).append(p)
    for u, pts in by_unroll.items():
      out = self.models[u]([dict(zip(self.names, p[0])) for p in pts])
      self.evaluations += len(pts)
      for p, c in zip(pts, out):
        c = float(c)
        self.costs[p] = c if math.isfinite(c) and c > 0 else math.inf
        if self.costs[p] < math.inf: self.archive[p] = c
    return np.array([self.costs[p] for p in points])

  def cost(self, Y: np.ndarray) -> np.ndarray:
    """The ES objective: analytic cost of the points the rows of ``Y`` round to."""
    return self.score(self.decode(Y))

  def random_starts(self, rng: np.random.Generator, count: int) -> list[tuple]:
    """Up to ``count`` distinct random points the model scores finite (a bounded rejection sampling)."""
    found: list[tuple] = []
    for _ in range(8):
      pts = [(tuple(draw_values(self.sketch, rng)[v] for v in self.names),
              int(self.unrolls[int(rng.integers(len(self.unrolls)))])) for _ in range(START_DRAWS)]
      c = self.score(pts)
      found += [p for p, x in zip(pts, c) if math.isfinite(x) and p not in found]
      if len(found) >= count: break
    return found[:count]

  def run(self, rng: np.random.Generator, restarts: int, population: int, iterations: int, sigma: float,
          alpha: float, deadline: float | None, starts: list[tuple] = (), shaping: bool = True) -> ESRun | None:
    """``restarts`` ES runs from ``starts`` and then random valid points (None: no valid start)."""
    pts = list(starts)[:restarts]
    if len(pts) < restarts: pts += [p for p in self.random_starts(rng, restarts) if p not in pts][:restarts - len(pts)]
    if not pts: return None
    if self.dim == 0: return ESRun(np.zeros((1, 0)), np.zeros((1, 0)), self.score(pts[:1]), 0, 1)
    theta0 = np.array([self.encode(pts[i % len(pts)]) for i in range(restarts)])
    return evolve(self.cost, np.clip(theta0, self.lo, self.hi), rng, population, iterations, sigma, alpha,
                  self.lo, self.hi, deadline, shaping)


# ---------------------------------------------------------------------------------------------
# the strategy

@dataclass
class _TaskState:
  searches: list[SketchSearch | None]     # per sketch; None: no analytic model (random programs)
  reasons: list[str]
  done: set[tuple]                        # (sketch, point) already proposed or rejected
  tilings: set[tuple]                     # (sketch, tile sizes) already proposed
  rounds: int = 0


class TunaStrategy(Strategy):
  """Tuna's ES on the analytic static model (module docstring). Defaults: 8 runs per sketch, 32 mirrored
  samples per run and iteration, 40 iterations, sigma 0.3 and alpha 1.0 in natural-log units, at most
  10 s per task and search, rank shaping, unroll step 512 (None: searched too)."""
  name = "tuna"

  def __init__(self, seed: int = 0, population: int = POPULATION, iterations: int = ITERATIONS,
               sigma: float = SIGMA, alpha: float = ALPHA, restarts: int = RESTARTS,
               time_limit_s: float = TIME_LIMIT_S, shaping: bool = True, unroll: int | None = UNROLL_DEFAULT):
    # ``seed`` is accepted like every strategy's; the task scheduler's rng drives the search
    self.seed = seed
    self.population, self.iterations, self.restarts = max(2, int(population)), int(iterations), max(1, int(restarts))
    self.sigma, self.alpha, self.time_limit_s, self.shaping = float(sigma), float(alpha), float(time_limit_s), shaping
    self.unroll = unroll
    self.stats: dict[str, float] = {"searches": 0, "es_seconds": 0.0, "iterations": 0, "samples": 0,
                                    "evaluations": 0, "archived": 0, "proposed": 0, "rejected": 0, "random": 0,
                                    "fallback_sketches": 0, "measured": 0, "failed": 0}
    self.task_stats: dict[str, dict] = {}   # task key -> {"name", "seconds", "archived", "iterations", ...}
    self._tasks: dict[str, _TaskState] = {}
    self._points: dict[str, tuple[int, tuple]] = {}     # proposed program key -> (sketch, point)

  # -- searching
  def _state(self, task: TuneTask) -> _TaskState:
    if task.key not in self._tasks:
      searches, reasons = [], []
      for k, sk in enumerate(task.sketches):
        try:
          searches.append(SketchSearch(sk, task.target, unroll=self.unroll))
        except MinicompError as e:   # a sketch the analytic model cannot handle gets random programs
          searches.append(None)
          reasons.append(f"sketch {k}: no analytic model ({type(e).__name__}: {str(e)[:120]})")
      self._tasks[task.key] = _TaskState(searches, reasons, set(), set())
    return self._tasks[task.key]

  def search(self, task: TuneTask, rng: np.random.Generator) -> None:
    """One ES search of every sketch of ``task`` (``restarts`` runs each; after the first search half
    the runs start from the task's best measured points), within ``time_limit_s``."""
    st = self._state(task)
    t0 = time.perf_counter()
    deadline = t0 + self.time_limit_s
    before = sum(len(s.archive) for s in st.searches if s is not None)
    ts = self.task_stats.setdefault(task.key, {"name": task.name, "seconds": 0.0, "searches": 0, "iterations": 0,
                                               "samples": 0, "evaluations": 0, "archived": 0, "fallback": 0})
    live = [k for k, s in enumerate(st.searches) if s is not None]
    for i, k in enumerate(live):
      s = st.searches[k]
      now = time.perf_counter()
      own = now + max(0.0, deadline - now) / (len(live) - i)   # the time left, shared by the sketches left
      evals = s.evaluations
      why = f"sketch {k}: the analytic model gives no finite cost to {8 * START_DRAWS} random draws"
      try:
        res = s.run(rng, self.restarts, self.population, self.iterations, self.sigma, self.alpha, own,
                    self._measured_starts(task, k, self.restarts // 2) if st.rounds else (), self.shaping)
      except (MinicompError, ArithmeticError) as e:   # a model that fails on some points (a division by zero) gives random programs
        res, why = None, f"sketch {k}: the analytic model failed ({type(e).__name__}: {str(e)[:120]})"
      if res is None or not s.archive:
        st.searches[k] = None
        st.reasons.append(why)
        continue
      self.stats["iterations"] += res.iterations; ts["iterations"] += res.iterations
      self.stats["samples"] += res.samples; ts["samples"] += res.samples
      self.stats["evaluations"] += s.evaluations - evals; ts["evaluations"] += s.evaluations - evals
    fallback = sum(s is None for s in st.searches)
    self.stats["fallback_sketches"] += fallback - ts["fallback"]
    ts["fallback"] = fallback
    secs = time.perf_counter() - t0
    archived = sum(len(s.archive) for s in st.searches if s is not None)
    st.rounds += 1
    self.stats["searches"] += 1
    self.stats["es_seconds"] += secs
    self.stats["archived"] += archived - before
    ts["seconds"] += secs; ts["searches"] += 1; ts["archived"] = archived
    log.info("tuna: searched %s in %.1f s (%d sketches, %d without a model): %d points archived",
             task.name or task.key[:12], secs, len(st.searches), fallback, archived)
    for r in st.reasons: log.info("tuna: %s: %s", task.name or task.key[:12], r)
    st.reasons.clear()

  def _measured_starts(self, task: TuneTask, k: int, count: int) -> list[tuple]:
    """The points of sketch ``k`` of the task's best measured programs that this strategy proposed."""
    ranked = sorted((c, key) for key, c in task.measured.items() if c is not None and key in self._points)
    return [self._points[key][1] for _, key in ranked if self._points[key][0] == k][:count]

  # -- proposing
  def propose(self, task: TuneTask, n: int, rng: np.random.Generator) -> list[Candidate]:
    st = self._state(task)
    if st.rounds == 0: self.search(task, rng)
    exclude = set(task.measured)
    stop = time.perf_counter() + POPULATION_TIME_S      # each chosen point is lowered: bound them by time too
    fallback = [k for k, s in enumerate(st.searches) if s is None]
    n_random = n if len(fallback) == len(st.searches) else math.ceil(n * len(fallback) / len(st.searches))
    chosen = self._pick(task, st, n - n_random, exclude, stop)
    if len(chosen) < n - n_random and not self._left(st) and time.perf_counter() < stop:
      self.search(task, rng)                            # the archive ran dry: search again
      fallback = [k for k, s in enumerate(st.searches) if s is None]
      chosen += self._pick(task, st, n - n_random - len(chosen), exclude, stop)
    extra = self._random(task, fallback, n - len(chosen), rng, exclude, stop) if fallback else []
    if len(chosen) + len(extra) < n:
      extra += sample_population(task.sketches, n - len(chosen) - len(extra), rng, task.target, exclude=exclude,
                                 time_limit_s=max(1.0, stop - time.perf_counter()))
    self.stats["random"] += len(extra)
    self.stats["proposed"] += len(chosen)
    return chosen + extra

  def _left(self, st: _TaskState) -> bool:
    return any(p not in st.done for k, s in enumerate(st.searches) if s is not None for p in
               ((k, q) for q in s.archive))

  def _pick(self, task: TuneTask, st: _TaskState, n: int, exclude: set[str], stop: float) -> list[Candidate]:
    """The best ``n`` archived points (analytic cost) never proposed that lower to valid, unmeasured programs;
    tilings not proposed yet first, then points that differ from a proposed one only in a choice (a vector
    width) or the unroll step: the analytic model ties those more often than the full model does."""
    if n <= 0: return []
    ranked = sorted((c, k, p) for k, s in enumerate(st.searches) if s is not None
                    for p, c in s.archive.items() if (k, p) not in st.done)
    out: list[Candidate] = []
    later = []
    for pass_ in (0, 1):
      for _, k, p in (ranked if pass_ == 0 else later):
        if len(out) >= n or time.perf_counter() > stop: break
        s = st.searches[k]
        tiling = (k, p[0][:s.n_tile])
        if pass_ == 0 and tiling in st.tilings:
          later.append((None, k, p)); continue
        st.done.add((k, p))
        cand, _ = make_candidate(s.sketch, dict(zip(s.names, p[0])), {at: p[1] for at in s.sketch.unroll},
                                 task.target, k)
        if cand is None:
          self.stats["rejected"] += 1; continue
        if cand.key in exclude: continue
        exclude.add(cand.key)
        st.tilings.add(tiling)
        self._points[cand.key] = (k, p)
        out.append(cand)
    return out

  def _random(self, task: TuneTask, sketches: list[int], n: int, rng: np.random.Generator, exclude: set[str],
              stop: float) -> list[Candidate]:
    """Up to ``n`` random valid programs of the given sketches (those without an analytic model)."""
    out: list[Candidate] = []
    for _ in range(4 * max(n, 0)):
      left = stop - time.perf_counter()
      if len(out) >= n or left <= 0: break
      k = sketches[int(rng.integers(len(sketches)))]
      try: c = sample(task.sketches[k], rng, task.target, k, time_limit_s=min(SAMPLE_TIME_S, left))
      except AnnotationError: continue
      if c.key in exclude: continue
      exclude.add(c.key)
      out.append(c)
    return out

  def update(self, task: TuneTask, candidates: list[Candidate], costs: list[float | None]) -> None:
    self.stats["measured"] += len(costs)
    self.stats["failed"] += sum(c is None for c in costs)



__all__ = ["SketchSearch", "TunaStrategy"]
