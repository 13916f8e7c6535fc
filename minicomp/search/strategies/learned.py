"""What the model-guided strategies share: one cost model, trained on every measured program.

Ansor's evolution and Felix's gradient descent rank candidates with the same MLP, fed the same
features and retrained the same way after every round; this file holds that part once, so the two
cannot drift apart (a model trained on one feature definition and queried with another ranks
noise).

* Candidates are *points* (sketch, variable values, auto-unroll) until they are chosen: their
  features come from the sketch's formulas (``formulas.py``), batched per sketch. Sketches whose
  symbolic program cannot be lowered fall back to lowering each candidate.
* After each round the new results are held-back data for the model that chose them: its pairwise
  accuracy and recall@k on them are logged (INFO) and kept in ``accuracy``; then the model is
  retrained from scratch on every result so far (throughput normalised per task, failures count
  as zero throughput; ``cost_model.py``).
* ``pretrain=`` (``pretrain.py``): programs of other tasks with their costs, kept in the training data
  from the start, so the model is trained before the first round (Felix pre-trains on TenSet) and
  the first round is already model-guided instead of random.
* ``resume`` retrains from a log: logged programs carry no variable values, so their features come
  from lowering them.
"""
from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field

import numpy as np

from minicomp.errors import MinicompError
from minicomp.search.annotate import Candidate
from minicomp.search.strategies.base import Strategy, TuneTask

log = logging.getLogger("minicomp")
MIN_TRAIN_STEPS = 300            # optimiser steps per retraining at least (early stopping still applies)


@dataclass(frozen=True, eq=False)
class Point:
  """A candidate before it is lowered: the sketch and the values of its variables."""
  sketch_index: int
  values: dict
  unroll: dict = field(default_factory=dict)

  @property
  def key(self) -> tuple:
    return (self.sketch_index, tuple(sorted(self.values.items())), tuple(sorted(self.unroll.items())))


class LearnedStrategy(Strategy):
  """Base of the strategies that rank candidates with the learned cost model (``model``)."""

  def __init__(self, seed: int = 0, model=None, pretrain=None):
    from minicomp.search.cost_model.pretrain import resolve
    self.seed = seed
    self._model = model
    self._features: dict[str, np.ndarray] = {}
    self.pretrain = resolve(pretrain)                   # None, or the PretrainData the model starts from
    self._data: list[tuple[np.ndarray, float | None, str]] = []
    if self.pretrain is not None:
      from minicomp.search.features import N_FEATURES
      self.name = f"{type(self).name}-pre"             # what records and reports call it: "felix-pre"
      self._data = self.pretrain.rows(getattr(model, "n_features", N_FEATURES))
    self._warm = False                                  # trained on the pre-training data already
    self.accuracy: list[tuple[str, float, float]] = []   # (task, pairwise accuracy, recall@k) on each new round
    self.stats: dict[str, int] = {"scored": 0, "trainings": 0}
    self._formula_cache: dict[tuple[str, int], object] = {}
    self._point_of: dict[str, Point] = {}              # measured program key -> its point
    self._measured_points: set[tuple] = set()
    self._concrete: dict[tuple, Candidate] = {}        # points the pre-filter lowered (sketches without formulas)

  def prepare(self) -> None:
    import jax.numpy  # noqa: F401 -- the model's training and prediction (and Felix's objective) run on JAX

    import minicomp.search.cost_model  # noqa: F401

  # -- the model
  @property
  def model(self):
    """The learned cost model, shared by all tasks (Ansor). Ranking loss, batches of 128: the
    cost-model tests found the MLP underfits the few hundred programs of early rounds with
    Ansor's batch of 512, and the weighted-MSE loss cannot rank programs whose statement rows
    differ in number (minicomp's sketches vary in how many stores they have). With pre-training data,
    the first use trains it on that data."""
    if self._model is None:
      from minicomp.search.cost_model import MLPCostModel
      from minicomp.search.features import N_FEATURES
      self._model = MLPCostModel(N_FEATURES, loss="rank", seed=self.seed, batch=128, lr=1e-3)
    if not self._warm and self.pretrain is not None and self._data and not self._model.fitted:
      self._warm = True
      log.info("training the cost model on %d pre-training programs of %d tasks", len(self._data),
               len({d[2] for d in self._data}))
      self._train()
    return self._model

  # -- features
  def features(self, c: Candidate) -> np.ndarray:
    """Features of a concrete candidate by lowering it (the fallback path; cached by program key)."""
    f = self._features.get(c.key)
    if f is None:
      from minicomp.search.features import extract_features
      prog = c.program if c.program is not None else c.schedule.lower()
      try: f = extract_features(prog)
      except MinicompError:   # a program the extractor cannot take scores -inf, never stops the search
        f = np.zeros((0, 1), np.float32)
      self._features[c.key] = f
    return f

  def _formulas(self, task: TuneTask, k: int):
    key = (task.key, k)
    if key not in self._formula_cache:
      from minicomp.search.features.formulas import formulas_or_none
      self._formula_cache[key] = formulas_or_none(task.sketches[k])
    return self._formula_cache[key]

  def _point_features(self, task: TuneTask, points: list[Point]) -> list[np.ndarray | None]:
    """Feature matrices of points (formulas, batched per sketch); None where the sketch has none."""
    out: list[np.ndarray | None] = [None] * len(points)
    by_sketch: dict[int, list[int]] = {}
    for i, p in enumerate(points): by_sketch.setdefault(p.sketch_index, []).append(i)
    for k, idx in by_sketch.items():
      f = self._formulas(task, k) if k >= 0 else None
      if f is None: continue
      X = f.features([points[i].values for i in idx], [points[i].unroll for i in idx])
      for j, i in enumerate(idx): out[i] = X[j]
    return out

  def _candidate_features(self, task: TuneTask, cands: list[Candidate]) -> list[np.ndarray]:
    """Features of measured candidates, by the same definition the scoring used (formulas where
    the sketch has them, else the lowered program)."""
    pts = [Point(c.sketch_index, c.values, c.unroll) for c in cands]
    feats = self._point_features(task, pts) if all(c.sketch_index >= 0 for c in cands) else [None] * len(cands)
    return [f if f is not None else self.features(c) for f, c in zip(feats, cands)]

  def _scores(self, task: TuneTask, points: list[Point]) -> np.ndarray:
    """The cost model's scores of ``points`` (higher is better): formula features where the sketch has
    them, else the lowered program's (a point that does not lower scores as an empty program)."""
    from minicomp.search.annotate import make_candidate
    self.stats["scored"] += len(points)
    feats = self._point_features(task, points)
    for i, p in enumerate(points):
      if feats[i] is None:
        c = self._concrete.get(p.key) or make_candidate(task.sketches[p.sketch_index], p.values, p.unroll,
                                                        task.target, p.sketch_index)[0]
        feats[i] = self.features(c) if c is not None else np.zeros((0, 1), np.float32)
    return np.asarray(self.model.predict(feats), float)

  # -- validity
  def _valid(self, task: TuneTask, points: list[Point], deadline: float | None = None) -> np.ndarray:
    """Pre-filter (value checks + resource formulas); sketches without formulas are lowered per point
    (kept in ``_concrete``) until ``deadline`` (a ``time.perf_counter()`` value; the points left are then
    counted invalid)."""
    from minicomp.search.annotate import check_values, make_candidate
    ok = np.array([check_values(task.sketches[p.sketch_index], p.values, task.target) is None for p in points], bool)
    by_sketch: dict[int, list[int]] = {}
    for i, p in enumerate(points):
      if ok[i]: by_sketch.setdefault(p.sketch_index, []).append(i)
    for k, idx in by_sketch.items():
      f = self._formulas(task, k)
      if f is not None:
        ok[idx] = f.valid([points[i].values for i in idx], task.target)
        continue
      for i in idx:
        if deadline is not None and time.perf_counter() > deadline:
          ok[i] = False; continue
        c, _ = make_candidate(task.sketches[k], points[i].values, points[i].unroll, task.target, k)
        ok[i] = c is not None
        if c is not None: self._concrete[points[i].key] = c
    return ok

  # -- learning
  def update(self, task: TuneTask, candidates: list[Candidate], costs: list[float | None]) -> None:
    feats = self._candidate_features(task, candidates)
    if self.model.fitted and len(candidates) > 1:
      # the round's results are held-back data for the model trained before it: how well did it rank them?
      from minicomp.search.cost_model import evaluate
      ev = evaluate(self.model.predict(feats), costs, [task.key] * len(costs), k=min(8, len(costs)))
      self.accuracy.append((task.key, ev["pairwise_accuracy"], ev["recall_at_k"]))
      log.info("cost model on the new round of %s: pairwise accuracy %.2f, recall@%d %.2f", task.name or task.key,
               ev["pairwise_accuracy"], min(8, len(costs)), ev["recall_at_k"])
    for c, f, cost in zip(candidates, feats, costs):
      self._data.append((f, cost, task.key))
      pt = Point(c.sketch_index, c.values, c.unroll)
      self._point_of[c.key] = pt
      self._measured_points.add(pt.key)
    self._train()

  def resume(self, tasks: list[TuneTask]) -> None:
    """Retrain the cost model from the tasks' logged history (programs rebuilt from their steps)."""
    from minicomp.ir.schedule import Schedule
    for t in tasks:
      for steps, cost in t.history:
        try: prog = Schedule.from_json(t.dag, steps).lower()
        except MinicompError as e:   # a logged program this version cannot lower: skip it
          log.debug("resume: skipping a logged program of %s that no longer lowers (%s)", t.name or t.key, e)
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

  def _lower_new(self, task: TuneTask, p: Point, exclude: set[str], cache: dict | None = None) -> Candidate | None:
    """Point ``p`` lowered and checked exactly (the formulas only pre-filter; ``cache``: points already
    lowered), or None when it is invalid (counted in ``stats``) or its program is in ``exclude``. A
    returned candidate's program key is added to ``exclude``, so a round never proposes one twice."""
    from minicomp.search.annotate import make_candidate
    c = cache.get(p.key) if cache is not None else None
    if c is None:
      c, _ = make_candidate(task.sketches[p.sketch_index], p.values, p.unroll, task.target, p.sketch_index)
    if c is None:
      self.stats["rejected_after_prefilter"] = self.stats.get("rejected_after_prefilter", 0) + 1
      return None
    if c.key in exclude: return None
    exclude.add(c.key)
    return c

  def _best_measured(self, task: TuneTask, k: int, sketch_index: int | None = None) -> list[Point]:
    """The points of the ``k`` best measured programs of ``task`` (of one sketch if given)."""
    if k <= 0: return []
    ok = sorted(((c, s) for s, c in task.measured.items() if c is not None and s in self._point_of
                 and (sketch_index is None or self._point_of[s].sketch_index == sketch_index)), key=lambda cs: cs[0])
    return [self._point_of[s] for _, s in ok[:k]]
