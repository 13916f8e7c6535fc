"""The strategy plug point: a search strategy proposes candidates for one task at a time.

The task scheduler (``task_scheduler.py``) owns the loop: it picks a task, asks the task's
strategy for ``n`` new candidates, measures them, records them, and hands the results back
with :meth:`Strategy.update`. A strategy never measures and never sees other tasks' budgets,
so Ansor's evolution, Felix's gradient descent, OpEvo, Gensor and Tuna plug in as siblings.

A :class:`TuneTask` is what a strategy may look at: the task's DAG and target, its sketches,
and what has been measured for it (program key -> cost), so it never proposes a program twice.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from minicomp.ir.dag import ComputeDAG
from minicomp.search.annotate import Candidate, sample_population
from minicomp.search.sketch import generate_sketches
from minicomp.search.sketch_types import Sketch
from minicomp.target import Target


@dataclass
class TuneTask:
  """One task being tuned: its computation, target, sketches and measurement history."""
  key: str
  dag: ComputeDAG
  target: Target
  weight: int = 1
  flops: int = 0
  kind: str = ""
  name: str = ""
  measured: dict[str, float | None] = field(default_factory=dict)   # program key (steps JSON) -> cost (None: failed)
  history: list[tuple[str, float | None]] = field(default_factory=list)
  best_cost: float = math.inf
  best_steps: str | None = None
  default_cost: float = math.inf          # the task's default schedule (not a trial): what tuning must beat
  # where the search starts (tune_tasks: Gensor's construction, as compile made it): programs measured
  # already (the default), handed to the strategy with their costs in the task's first round, not trials;
  # and programs that round measures ahead of the strategy's own proposals
  seeds: list[tuple[Candidate, float]] = field(default_factory=list)
  starts: list[Candidate] = field(default_factory=list)
  _sketches: list[Sketch] | None = None

  @property
  def sketches(self) -> list[Sketch]:
    if self._sketches is None: self._sketches = generate_sketches(self.dag, self.target)
    return self._sketches

  def record(self, steps_json: str, cost: float | None) -> None:
    self.measured[steps_json] = cost
    self.history.append((steps_json, cost))
    if cost is not None and cost < self.best_cost: self.best_cost, self.best_steps = cost, steps_json

  @property
  def trials(self) -> int: return len(self.history)


class Strategy:
  """Interface: ``propose(task, n, rng)`` -> up to ``n`` unmeasured, valid candidates;
  ``update(task, candidates, costs)`` after they were measured (costs None for failures)."""
  name = "strategy"

  def propose(self, task: TuneTask, n: int, rng: np.random.Generator) -> list[Candidate]:
    raise NotImplementedError

  def update(self, task: TuneTask, candidates: list[Candidate], costs: list[float | None]) -> None:
    pass

  def prepare(self) -> None:
    """Import what the search needs (JAX for a learned model) before the first trial, not in the middle of
    a run: an interrupt that lands inside a native library's import can crash the process."""


class RandomStrategy(Strategy):
  """Uniform random samples of the sketches (Ansor's init population, no cost model): the
  baseline every other strategy must beat."""
  name = "random"

  def propose(self, task: TuneTask, n: int, rng: np.random.Generator) -> list[Candidate]:
    return sample_population(task.sketches, n, rng, task.target, exclude=set(task.measured))
