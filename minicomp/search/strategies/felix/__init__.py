"""Felix's search: gradient descent on the sketches' smoothed feature formulas, through the cost model.

Per round for a task (Felix, ASPLOS'24, Algorithm 1; its optimiser, ``python/tvm/felix/optim.py``):

1. per sketch, ``n_seeds`` starting points: random valid annotations (rejection sampling with the
   value checks and the resource formulas), ``use_measured`` of them replaced by the task's best
   measured programs of that sketch (Felix re-randomises every seed each round);
2. ``n_steps`` steps of Adam (``lr``, dropped to 0.2x after 30% of the steps, Felix's MultiStepLR)
   on the sketch's objective (``objective.py``: -score / s + lam x squared constraint violations,
   over y = log x), all seeds at once; the first round of a task runs ``n_steps``, later ones
   ``later_steps`` (Felix: a quarter). Every visited point is kept;
3. rounding (``round_points``): each tile group to the *nearest valid factorization* of its loop in
   log space, jointly over the group's variables (so products divide the extent and the innermost
   tile respects its limit, exactly the set ``annotate.draw_values`` samples), each choice (thread
   count, vector width) to its nearest candidate in log space; duplicates, non-finite points and
   points the value checks or resource formulas reject are dropped;
4. auto-unroll is rounded by trying every step of ``UNROLL_CHOICES`` per rounded point and keeping
   the best-predicted unmeasured one (one program per point: a 5-way choice is cheaper to enumerate
   than to round, and the descent's unroll variable only steers the other variables);
5. a sketch without formulas and without tile groups (the tensor-core sketch: a few choices) is not descended
   on: ``POINTWISE x n`` valid points of it are drawn and lowered (``_drawn``), one more lane of the ranking;
6. the points are ranked by the cost model's prediction on their (exact) formula features, or their lowered
   programs' features, and taken round robin over the seeds' trajectories (``_rank``); the first ``n`` that lower
   and pass the resource checks (``make_candidate``) and were never measured are proposed (lowering them stops
   after ``annotate.POPULATION_TIME_S``). If fewer than ``n`` are found, random valid programs fill the
   round (``sample_population``, bounded by the same time).

Until the cost model has been fitted (the first round of a run, or when every result so far
failed) there is nothing to descend on: the round is random valid programs (Ansor's first round
is random too, in effect). After measurement the model is retrained exactly as Ansor's
(``learned.py``), on the formula features of the measured programs.

What differs from the paper: box constraints are projected, not penalised; lam is relative to the
model's score spread instead of Felix's per-step gradient rescaling; tile groups are rounded
jointly to valid factorizations instead of rounding prime exponents independently (Felix can only
produce products of {2, 3, 5, 7} and drops invalid roundings); unroll is enumerated; floormod is
smoothed, not dropped (``smooth.py``); no sketch is removed (Felix drops the first sketch of
Conv/Dense as "overestimated"); the best measured programs seed part of the descent; a round is
spread over the seeds' trajectories instead of the top ``n`` of all points.
"""
from __future__ import annotations

import logging
import math
import time

import numpy as np

from minicomp.errors import MinicompError
from minicomp.search.annotate import (
  POPULATION_TIME_S,
  UNROLL_CHOICES,
  Candidate,
  check_values,
  draw_unroll,
  draw_values,
  factorizations,
  make_candidate,
  sample_population,
)
from minicomp.search.sketch_types import Sketch
from minicomp.search.strategies.base import TuneTask
from minicomp.search.strategies.learned import LearnedStrategy, Point
from minicomp.target import Target

log = logging.getLogger("minicomp")
_ROUND_CHUNK = 512                 # points per distance matrix when rounding (memory: chunk x options x vars)
POINTWISE = 4                      # points drawn per proposal of a round from a sketch without formulas (_drawn)


def round_values(sketch: Sketch, Y: np.ndarray) -> np.ndarray:
  """Integer values ``[P, len(sketch.params)]`` nearest to ``exp(Y)`` in log space: per tile group the
  nearest of all its valid factorizations (jointly over the group's variables), per choice the nearest
  candidate. ``Y`` must be finite."""
  names = list(sketch.params)
  idx = {v: i for i, v in enumerate(names)}
  Y = np.asarray(Y, np.float64).reshape(-1, len(names))
  out = np.ones((len(Y), len(names)), np.int64)
  for g in sketch.tiles:
    cols = [idx[v] for v in g.vars]
    opts = np.array(factorizations(g.extent, len(g.vars), g.inner_limit), np.int64).reshape(-1, len(cols))
    lopts = np.log(opts)
    for a in range(0, len(Y), _ROUND_CHUNK):
      y = Y[a:a + _ROUND_CHUNK, cols]
      d = ((y[:, None, :] - lopts[None]) ** 2).sum(-1)
      out[a:a + _ROUND_CHUNK][:, cols] = opts[d.argmin(1)]
  for ch in sketch.choices:
    cands = np.array(ch.candidates, np.int64)
    out[:, idx[ch.var]] = cands[np.abs(Y[:, idx[ch.var], None] - np.log(cands)[None]).argmin(1)]
  return out


def round_points(sketch: Sketch, Y: np.ndarray, target: Target, formulas=None,
                 return_index: bool = False) -> list[dict[str, int]] | tuple[list[dict[str, int]], np.ndarray]:
  """The distinct valid value dicts that the real points ``Y[P, len(sketch.params)]`` (log space) round
  to: ``round_values``, then the value checks (``check_values``) and, given the sketch's formulas, the
  resource pre-filter. Non-finite points are dropped. With ``return_index``, also the index in ``Y`` of
  the first point that rounds to each."""
  names = list(sketch.params)
  Y = np.asarray(Y, np.float64).reshape(-1, len(names))
  finite = np.flatnonzero(np.isfinite(Y).all(1))
  vals: list[dict[str, int]] = []
  first = np.zeros(0, np.int64)
  if len(finite):
    X, at = np.unique(round_values(sketch, Y[finite]), axis=0, return_index=True)
    vals, first = [dict(zip(names, map(int, row))) for row in X], finite[at]
    keep = [i for i, v in enumerate(vals) if check_values(sketch, v, target) is None]
    if formulas is not None and keep:
      keep = [i for i, ok in zip(keep, formulas.valid([vals[i] for i in keep], target)) if ok]
    vals, first = [vals[i] for i in keep], first[keep]
  return (vals, first) if return_index else vals


class FelixStrategy(LearnedStrategy):
  """Felix's gradient-descent search (module docstring). Defaults: 8 seeds per sketch, 200 steps on a
  task's first descent and 50 after, Adam lr 0.3 in log space, penalty weight 10."""
  name = "felix"

  def __init__(self, seed: int = 0, n_seeds: int = 8, n_steps: int = 200, later_steps: int | None = None,
               lr: float = 0.3, lam: float = 10.0, use_measured: float = 0.25, model=None, pretrain=None):
    super().__init__(seed, model, pretrain)
    self.n_seeds, self.n_steps = int(n_seeds), int(n_steps)
    self.later_steps = max(1, self.n_steps // 4) if later_steps is None else int(later_steps)
    self.lr, self.lam, self.use_measured = float(lr), float(lam), float(use_measured)
    self.stats.update({"descents": 0, "visited": 0, "rounded": 0, "from_descent": 0, "random": 0,
                       "rejected_after_prefilter": 0, "pointwise": 0})
    self._objectives: dict[tuple[str, int], object] = {}
    self._descents: dict[str, int] = {}     # task key -> descent rounds so far

  # -- the per-sketch objective
  def objective(self, task: TuneTask, k: int):
    """The compiled objective of sketch ``k`` of ``task`` (cached), or None when the sketch has no
    formulas (its symbolic program cannot be lowered) or they cannot be smoothed."""
    key = (task.key, k)
    if key not in self._objectives:
      from minicomp.search.strategies.felix.objective import SketchObjective
      obj, f = None, self._formulas(task, k)
      if f is not None:
        t0 = time.perf_counter()
        log.info("felix: smoothing and compiling the feature formulas of %s sketch %d (%d variables)",
                 task.name or task.key[:12], k, len(task.sketches[k].params))
        try:
          obj = SketchObjective(task.sketches[k], task.target, f)
        except MinicompError as e:   # a sketch Felix cannot differentiate is left to random sampling
          log.warning("felix: sketch %d of %s has no differentiable objective (%s: %s); it gets random programs",
                      k, task.name or task.key[:12], type(e).__name__, e)
        else:
          log.info("felix: objective of %s sketch %d ready in %.1f s", task.name or task.key[:12], k,
                   time.perf_counter() - t0)
      self._objectives[key] = obj
    return self._objectives[key]

  def _seeds(self, task: TuneTask, k: int, obj, rng: np.random.Generator) -> tuple[np.ndarray | None, float]:
    """Starting points ``[n_seeds, dim]`` for sketch ``k`` and the score spread ``s`` of random valid
    programs (None when the sketch yields no valid program)."""
    sk, n = task.sketches[k], self.n_seeds
    pool: list[dict] = []
    for _ in range(8):                                  # rejection sampling, a bounded number of times
      vals = [v for v in (draw_values(sk, rng) for _ in range(4 * n)) if check_values(sk, v, task.target) is None]
      if vals: pool += [v for v, ok in zip(vals, obj.formulas.valid(vals, task.target)) if ok]
      if len(pool) >= 4 * n: break
    pts = [Point(k, v, draw_unroll(sk, rng)) for v in pool]
    best = self._best_measured(task, min(n, round(self.use_measured * n)), k)
    if not pts and not best: return None, 1.0
    s = 1.0
    if len(pts) > 1:
      sc = self.model.predict(self._point_features(task, pts))
      self.stats["scored"] += len(pts)
      sc = sc[np.isfinite(sc)]
      if len(sc) > 1 and np.std(sc) > 1e-6: s = float(np.std(sc))
    start = best + pts[:n - len(best)]
    while len(start) < n: start.append(start[int(rng.integers(len(start)))])   # a fixed batch: one compilation
    Y = np.array([[math.log(p.values[v]) for v in sk.params] + [math.log2(max(p.unroll.values(), default=0) + 1)]
                  for p in start], np.float64)
    return Y, s

  # -- proposing
  def propose(self, task: TuneTask, n: int, rng: np.random.Generator) -> list[Candidate]:
    measured = set(task.measured)
    chosen: list[Candidate] = []
    if self.model.fitted:
      chosen = self._descend(task, n, rng, measured)
    if len(chosen) < n:
      extra = sample_population(task.sketches, n - len(chosen), rng, task.target,
                                exclude=measured | {c.key for c in chosen})
      self.stats["random"] += len(extra)
      chosen += extra
    return chosen[:n]

  def _descend(self, task: TuneTask, n: int, rng: np.random.Generator, measured: set[str]) -> list[Candidate]:
    rnd = self._descents.get(task.key, 0)
    steps = self.n_steps if rnd == 0 else self.later_steps
    found: dict[tuple, tuple] = {}     # config -> (sketch, values, lane: (sketch, seed), a drawn point's unroll)
    ran = False
    stop = time.perf_counter() + POPULATION_TIME_S      # the points of sketches without formulas are lowered
    for k, sk in enumerate(task.sketches):
      obj = self.objective(task, k)
      if obj is None:
        if sk.tiles: continue              # (a tiled sketch without formulas: left to the random fill)
        for v, u in self._drawn(task, k, n, rng, stop):      # its own lane: (k, -1)
          found.setdefault((k, tuple(v[p] for p in sk.params), tuple(sorted(u.items()))), (k, v, (k, -1), u))
        continue
      Y0, s = self._seeds(task, k, obj, rng)
      if Y0 is None: continue
      path, _ = obj.descend(Y0, self.model, steps, self.lr, self.lam, s)
      ran = True
      self.stats["descents"] += 1
      pts = path.reshape(-1, obj.dim)[:, :-1]                     # step-major: point i is seed i % n_seeds
      self.stats["visited"] += len(pts)
      vals, first = round_points(sk, pts, task.target, obj.formulas, return_index=True)
      for v, i in zip(vals, first):
        found.setdefault((k, tuple(v[p] for p in sk.params)), (k, v, (k, int(i) % len(Y0)), None))
    if ran: self._descents[task.key] = rnd + 1
    self.stats["rounded"] += len(found)
    chosen: list[Candidate] = []
    exclude = set(measured)
    stop = time.perf_counter() + POPULATION_TIME_S      # each point is lowered: bound them by time too
    for p in self._rank(task, list(found.values())):
      if len(chosen) >= n or time.perf_counter() > stop: break
      c = self._lower_new(task, p, exclude, self._concrete)
      if c is not None: chosen.append(c)
    for k, v, lane, u in found.values():     # the drawn points' programs are not kept past their round
      if u is not None: self._concrete.pop(Point(k, v, u).key, None)
    self.stats["from_descent"] += len(chosen)
    return chosen

  def _drawn(self, task: TuneTask, k: int, n: int, rng: np.random.Generator, stop: float) -> list[tuple[dict, dict]]:
    """Up to ``POINTWISE x n`` valid points of sketch ``k``, which has no formulas to descend on and no tile group to
    round (the tensor-core sketch: a few choices, ``sketch.py``), drawn at random and lowered (kept in
    ``_concrete``; not past ``stop``): the cost model ranks them on their lowered programs' features in ``_rank``,
    with the descents' points."""
    sk, out, seen = task.sketches[k], [], set()
    for _ in range(POINTWISE * n * 2):
      if len(out) >= POINTWISE * n or time.perf_counter() > stop: break
      p = Point(k, draw_values(sk, rng), draw_unroll(sk, rng))
      if p.key in seen or p.key in self._measured_points: continue
      seen.add(p.key)
      c = self._concrete.get(p.key)
      if c is None and check_values(sk, p.values, task.target) is None:
        c, _ = make_candidate(sk, p.values, p.unroll, task.target, k)
        if c is not None: self._concrete[p.key] = c
      if c is not None: out.append((p.values, p.unroll))
    self.stats["pointwise"] += len(out)
    return out

  def _rank(self, task: TuneTask, configs: list[tuple[int, dict, tuple, dict | None]]) -> list[Point]:
    """One point per rounded config (its best-predicted unmeasured unroll choice; a drawn point: its own), in
    measuring order: round robin over the seeds' trajectories (each config belongs to the first seed that reached it;
    the drawn points of a sketch are one lane), best prediction first within a trajectory, trajectories in the order
    of their best. A single basin that the model overrates then cannot take the whole round (Felix ranks all points
    together)."""
    variants, owner = [], []
    for i, (k, v, _, unroll) in enumerate(configs):
      sites = task.sketches[k].unroll
      for u in ([unroll] if unroll is not None else [{at: int(u) for at in sites}
                                                     for u in (UNROLL_CHOICES if sites else (0,))]):
        p = Point(k, v, u)
        if p.key in self._measured_points: continue
        variants.append(p); owner.append(i)
    if not variants: return []
    scores = self._scores(task, variants)     # (formula features; a sketch without formulas: its lowered points')
    best: dict[int, tuple[float, Point]] = {}
    for p, i, sc in zip(variants, owner, scores):
      if math.isfinite(sc) and (i not in best or sc > best[i][0]): best[i] = (float(sc), p)
    by_seed: dict[tuple, list[tuple[float, Point]]] = {}
    for i, sp in best.items(): by_seed.setdefault(configs[i][2], []).append(sp)
    lanes = sorted((sorted(v, key=lambda sp: -sp[0]) for v in by_seed.values()), key=lambda v: -v[0][0])
    out: list[Point] = []
    for depth in range(max(len(v) for v in lanes)):
      out += [v[depth][1] for v in lanes if depth < len(v)]
    return out


__all__ = ["FelixStrategy", "round_points", "round_values"]
