"""The task scheduler: which task to tune next, and the tuning loop around the strategies.

Allocation follows Ansor's gradient scheduler (TVM's ``auto_scheduler/task_scheduler.py``; the objective is the
end-to-end latency ``sum_i w_i * c_i``, ``w_i`` the number of times task ``i`` runs in the
model, ``c_i`` its best latency so far). After one round-robin warm-up round, each round goes
to the task with the most negative

    grad_i = w_i * (alpha * backward_i + (1 - alpha) * forward_i)

where ``backward_i = (c_i(t-1) - c_i(t-1-window)) / window`` (the recent improvement per round)
and ``forward_i = min(c_i - c_i / t_i, beta * flops_i / max_j(flops_j / c_j)) - c_i`` over the
tasks ``j`` of ``i``'s similarity group (same kind, flops within a factor of 1.618): the
optimistic guess that more trials keep improving ``i`` at its own rate, capped by what a similar
task achieves. Ties (all gradients equal) pick a random task; a task whose strategy proposes
nothing new is dead. Defaults: alpha 0.2, beta 2, window 3 (Ansor's). Ansor's paper mentions
epsilon-greedy task selection, its code has none; here ``eps`` (default 0.05) picks a random
live task in that fraction of rounds.

Each round: the strategy proposes up to ``measures_per_round`` unmeasured candidates, the
measurer measures them (costs or typed failures), each result is appended to the log (if any) as
soon as it comes back (a kill mid-round loses only the candidates in flight), and the strategy
gets the results. The loop stops at the trial budget, the time budget, or when every task is dead.

Resuming (tasks that already hold logged trials): the warm-up round goes only to the tasks without
any, in order, so a run killed during warm-up does not start over at task 0; trial numbers go on
from ``first_trial`` (the numbers of candidates lost in flight stay unused).
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from minicomp.progress import check_interrupt
from minicomp.search.measure import MeasureInput, Measurer
from minicomp.search.strategies.base import Strategy, TuneTask

ALPHA, BETA, WINDOW, EPS = 0.2, 2.0, 3, 0.05
SIMILAR = 1.618


@dataclass
class RoundInfo:
  """What one round did (passed to progress callbacks)."""
  round: int
  task: TuneTask
  measured: int
  failed: int
  trials_used: int
  elapsed_s: float
  objective_s: float                 # sum over tasks of weight x min(best, default) (inf until every task has one)
  is_estimate: bool


@dataclass
class TuneResult:
  tasks: list[TuneTask]
  trials: int
  rounds: int
  elapsed_s: float
  is_estimate: bool
  curve: list[tuple[int, float, float]] = field(default_factory=list)   # (trials, seconds, objective)

  @property
  def objective_s(self) -> float: return objective(self.tasks)


def objective(tasks: Sequence[TuneTask]) -> float:
  """The end-to-end latency the tasks would give now: each task's best trial or its default, whichever is faster."""
  return sum(t.weight * min(t.best_cost, t.default_cost) for t in tasks)


def _group(t: TuneTask) -> tuple[str, int]:
  return t.kind, int(math.log(t.flops + 1, SIMILAR))


def pick_task(tasks: Sequence[TuneTask], best_hist: dict[str, list[float]], alive: set[str],
              rng: np.random.Generator, eps: float = EPS) -> TuneTask | None:
  """The next task to tune (the gradient rule of the module docstring)."""
  live = [t for t in tasks if t.key in alive]
  if not live: return None
  if rng.random() < eps: return live[int(rng.integers(len(live)))]
  grads = []
  for t in live:
    c = t.best_cost
    if not math.isfinite(c):
      grads.append(-math.inf); continue                 # no valid program yet: most urgent
    hist = best_hist.get(t.key, [])
    backward = (hist[-1] - hist[-1 - WINDOW]) / WINDOW if len(hist) > WINDOW else 0.0
    peers = [u for u in tasks if _group(u) == _group(t) and math.isfinite(u.best_cost) and u.best_cost > 0]
    speed = max((u.flops / u.best_cost for u in peers), default=0.0)
    optimistic = BETA * t.flops / speed if speed > 0 and t.flops else 1e30 * BETA
    rounds = max(1, len(hist))
    forward = min(c - c / rounds, optimistic) - c
    grads.append(t.weight * (ALPHA * backward + (1 - ALPHA) * forward))
  g = np.asarray(grads)
  if np.all(g == g[0]): return live[int(rng.integers(len(live)))]
  return live[int(np.argmin(g))]


def tune(tasks: Sequence[TuneTask], strategy: Strategy | Callable[[], Strategy], measurer: Measurer, trials: int,
         seed: int = 0, measures_per_round: int = 64, time_budget_s: float | None = None, log=None,
         strategy_name: str = "", on_round: Callable[[RoundInfo], None] | None = None,
         first_trial: int = 0) -> TuneResult:
  """Tune ``tasks`` with ``strategy`` for up to ``trials`` measurements in total.

  ``log`` is a :class:`~minicomp.search.records.RecordLog` (or None): every measured candidate
  is appended as soon as it is measured (in finishing order), numbered from ``first_trial`` in
  proposal order, so the numbers do not depend on which worker finished first. ``on_round`` is
  called after each round (:class:`TuneProgress` draws a progress bar)."""
  from minicomp.search.measure import measure_iter
  from minicomp.search.records import Record
  rng = np.random.default_rng(seed)
  t0 = time.perf_counter()
  tasks = list(tasks)
  alive = {t.key for t in tasks}
  best_hist: dict[str, list[float]] = {t.key: [t.best_cost] if t.trials else [] for t in tasks}
  per_round = max(1, min(measures_per_round, trials // max(1, len(tasks)))) if trials else 0
  used, rounds, curve = 0, 0, []
  # a resumed run warms up only the tasks never measured; the ones whose default takes the most time first
  # (a budget smaller than the task count goes where it can save the most)
  warmup = sorted((t for t in tasks if not t.trials),
                  key=lambda t: -t.weight * t.default_cost if math.isfinite(t.default_cost) else 0.0)
  while used < trials and alive:
    check_interrupt()
    if time_budget_s is not None and time.perf_counter() - t0 > time_budget_s: break
    first = bool(warmup)
    task = warmup.pop(0) if warmup else pick_task(tasks, best_hist, alive, rng)
    if task is None: break
    if task.key not in alive: continue
    n = min(per_round, trials - used)
    cands = _first_round(task, strategy, n) if first else []
    if len(cands) < n:
      taken = {c.key for c in cands}
      cands += [c for c in strategy.propose(task, n - len(cands), rng) if c.key not in taken]
    if not cands:
      alive.discard(task.key); continue
    inputs = [MeasureInput(task.dag, c.key, task.target.device_name or task.target.arch, key=task.key[:12])
              for c in cands]
    results: list = [None] * len(cands)
    for i, r in measure_iter(measurer, inputs):
      results[i] = r
      if log is not None:
        log.append(Record.from_measure(task.key, _target_key(task), cands[i].key, r,
                                       strategy=strategy_name or strategy.name, trial=first_trial + used + i,
                                       task=task.name))
      check_interrupt()                       # (after logging: a measured candidate is never lost)
    if any(r is None for r in results):
      from minicomp.search.measure import MeasureError
      got = sum(r is not None for r in results)
      raise MeasureError(f"the measurer returned {got} results for {len(cands)} candidates")
    costs = [r.cost_s if r.ok else None for r in results]
    for c, cost in zip(cands, costs): task.record(c.key, cost)
    strategy.update(task, cands, costs)
    used += len(cands)
    rounds += 1
    best_hist[task.key].append(task.best_cost)
    obj = objective(tasks)
    curve.append((used, time.perf_counter() - t0, obj))
    if on_round is not None:
      on_round(RoundInfo(rounds, task, len(cands), sum(c is None for c in costs), used, time.perf_counter() - t0, obj,
                         measurer.is_estimate))
  return TuneResult(tasks, used, rounds, time.perf_counter() - t0, measurer.is_estimate, curve)


def _first_round(task: TuneTask, strategy: Strategy, n: int) -> list:
  """A task's first round starts where its default is: its seeds (measured already) go to the strategy with
  their costs, and its start programs not measured yet come first in the round (at most ``n``)."""
  seeds = [(c, cost) for c, cost in task.seeds if c.key not in task.measured]
  if seeds:
    for c, cost in seeds: task.measured[c.key] = cost       # known: never proposed, nor counted as trials
    strategy.update(task, [c for c, _ in seeds], [cost for _, cost in seeds])
  return [c for c in task.starts if c.key not in task.measured][:n]


def _target_key(task: TuneTask) -> str:
  return task.target.device_name or task.target.arch


class TuneProgress:
  """The ``on_round`` callback behind ``progress=True``: a bar over the trial budget (count, rate,
  time left) whose text shows the round, the task just tuned and its best, and the end-to-end
  objective, each labelled an estimate when the measurer is the static model, and what ``status()`` says (a
  cluster's nodes and throughput; called each round, also without a bar). ``close()`` when done."""

  def __init__(self, total_trials: int, done: int = 0, enabled: bool = True, status: Callable[[], str] | None = None):
    from minicomp.progress import bar
    self.bar = bar(total_trials, "[minicomp] tuning", enabled, unit="trial", initial=min(done, total_trials))
    self.status = status

  def __call__(self, info: RoundInfo) -> None:
    est = " (estimate)" if info.is_estimate else ""
    obj = info.objective_s
    self.bar.set_postfix_str(f"round {info.round}, {info.task.name or info.task.key[:12]} best "
                             f"{info.task.best_cost * 1e6:.2f} us{est}, end-to-end "
                             f"{'n/a' if not math.isfinite(obj) else f'{obj * 1e6:.2f} us'}{est}, "
                             f"{info.failed} failed" + (f", {self.status()}" if self.status else ""), refresh=False)
    self.bar.update(info.measured)

  def close(self) -> None: self.bar.close()
