"""``tune_tasks``: the search entry point behind ``minicomp.compile(..., trials=N, log_file=...)``.

It turns the compiler's tasks into :class:`~minicomp.search.strategies.base.TuneTask` s, loads
the log (resume: every logged program counts as measured and is never measured again; the
strategy retrains from the logged results), tunes until the log holds ``trials`` measurements
for these tasks, and returns the best schedule (steps JSON) per task.

Costs from the static model (no GPU) and GPU timings are never compared with each other: a
resumed run only takes records of the kind its measurer produces.

A tuned schedule never replaces a better one: the default schedule of each task (``defaults``,
what ``compile`` builds without search) is measured once, logged as a record with strategy
``"default"`` (not counted as a trial), and a task's best record is returned only when it beats
its default (also when a log is applied with ``trials=0``). A log without default records
(written before this rule, or for other default rules) gets them measured by its next tuning
run; applied with ``trials=0`` before that, its best records apply as they are (nothing is
measured without trials).
"""
from __future__ import annotations

import logging
from collections.abc import Sequence

from minicomp.errors import MinicompError
from minicomp.search.strategies.base import RandomStrategy, Strategy, TuneTask
from minicomp.target import Target, as_target

log = logging.getLogger("minicomp")
STRATEGIES = ("ansor", "felix", "gensor", "random")


class TuneError(MinicompError):
  """Bad tuning options (unknown strategy, negative trials)."""


def make_strategy(name: str | Strategy, seed: int = 0) -> Strategy:
  if isinstance(name, Strategy): return name
  if name == "random": return RandomStrategy()
  if name == "ansor":
    from minicomp.search.strategies.ansor import AnsorStrategy
    return AnsorStrategy(seed=seed)
  if name == "felix":
    from minicomp.search.strategies.felix import FelixStrategy
    return FelixStrategy(seed=seed)
  if name == "gensor":
    from minicomp.search.strategies.gensor import GensorStrategy
    return GensorStrategy(seed=seed)
  raise TuneError(f"unknown search strategy {name!r}; known: {', '.join(STRATEGIES)}")


def target_key(tgt: Target) -> str:
  """How records name a target: the device when one was named, else the arch (its default device)."""
  return tgt.device_name or tgt.arch


def default_measurer(tgt: Target | None = None):
  """GPUMeasurer when a GPU of ``tgt``'s arch is usable (real timings of the kernels being tuned),
  else the static model (estimates): timings of the target's code JIT-compiled for another GPU
  would tune for the wrong machine."""
  from minicomp.codegen.driver import gpu_arch
  from minicomp.search.measure import GPUMeasurer, StaticMeasurer
  arch = gpu_arch()
  if arch is not None and (tgt is None or tgt.arch == arch): return GPUMeasurer()
  if arch is not None:
    log.info("the GPU here is %s and the target %s: tuning with the static model (estimates)", arch, tgt.arch)
  return StaticMeasurer()


DEFAULT = "default"   # the strategy name of a default schedule's record


def tune_tasks(tasks: Sequence, target: Target | str, trials: int = 0, strategy: str | Strategy = "ansor",
               log_file: str | None = None, seed: int = 0, measurer=None, measures_per_round: int = 64,
               time_budget_s: float | None = None, progress: bool = False,
               defaults: dict[str, str] | None = None) -> dict[str, str]:
  """Tune ``tasks`` (the compiler's ``graph.tasks.Task`` objects) and return {workload key: best steps JSON}
  for the tasks whose best record beats their default schedule (``defaults``: key -> steps JSON;
  without it every task's best record is returned)."""
  from minicomp.search.records import RecordLog, load_records
  from minicomp.search.task_scheduler import TuneProgress, tune
  if trials < 0: raise TuneError(f"trials must be >= 0, got {trials}")
  tgt = as_target(target)
  tkey = target_key(tgt)
  own = measurer is None and trials > 0
  if own: measurer = default_measurer(tgt)
  records = load_records(log_file, target=tkey) if log_file else []
  keys = {t.key for t in tasks}
  records = [r for r in records if r.workload_key in keys]
  defaults = dict(defaults or {})
  if measurer is not None: records = [r for r in records if r.is_estimate == measurer.is_estimate]
  baseline = _default_records(records, defaults)
  records = [r for r in records if r.strategy != DEFAULT]
  tt = [TuneTask(t.key, t.dag, tgt, t.weight, t.flops, t.kind, "+".join(t.ops)) for t in tasks]
  by_key = {t.key: t for t in tt}
  for r in records: by_key[r.workload_key].record(r.steps_json, r.cost_s if r.ok else None)
  if records: log.info("resumed %d records for %d tasks from %s", len(records), len({r.workload_key for r in records}), log_file)
  remaining = trials - len(records)
  try:
    if measurer is not None and (records or remaining > 0):
      baseline.update(_measure_defaults(tt, defaults, baseline, measurer, tkey, log_file, progress))
    for t in tt:
      if baseline.get(t.key) is not None: t.default_cost = baseline[t.key]
    if remaining > 0:
      strat = make_strategy(strategy, seed)
      if records and hasattr(strat, "resume"): strat.resume(tt)
      sink = RecordLog(log_file) if log_file else None
      shown = TuneProgress(trials, len(records), enabled=progress)
      try:
        tune(tt, strat, measurer, remaining, seed=seed, measures_per_round=measures_per_round,
             time_budget_s=time_budget_s, log=sink, strategy_name=getattr(strat, "name", str(strategy)),
             on_round=shown)
      finally:
        shown.close()
        if sink is not None: sink.close()
  finally:
    if own and hasattr(measurer, "close"): measurer.close()
  out = {}
  for t in tt:
    if t.best_steps is None: continue
    base = baseline.get(t.key)
    if t.key in defaults and base is not None and base <= t.best_cost:
      log.info("task %s: its default schedule (%.2f us) is at least as good as the best record (%.2f us): kept",
               t.name or t.key, base * 1e6, t.best_cost * 1e6)
      continue
    out[t.key] = t.best_steps
  return out


def _default_records(records, defaults: dict[str, str]) -> dict[str, float | None]:
  """Cost of each task's current default schedule, from the log's default records (None: it failed)."""
  from minicomp.search.records import canonical_steps
  want = {k: canonical_steps(v) for k, v in defaults.items()}
  return {r.workload_key: (r.cost_s if r.ok else None) for r in records
          if r.strategy == DEFAULT and want.get(r.workload_key) == canonical_steps(r.steps_json)}


def _measure_defaults(tasks, defaults: dict[str, str], known: dict, measurer, tkey: str, log_file: str | None,
                      progress: bool) -> dict[str, float | None]:
  """Measure the default schedules that have no record yet (one batch), log them, return their costs."""
  from minicomp.progress import say
  from minicomp.search.measure import MeasureInput
  from minicomp.search.records import Record, RecordLog
  todo = [t for t in tasks if t.key in defaults and t.key not in known]
  if not todo: return {}
  say(f"tuning: measuring the default schedules of {len(todo)} task(s) "
      f"({'static-model estimates' if measurer.is_estimate else 'on the GPU'})", progress)
  results = measurer.measure([MeasureInput(t.dag, defaults[t.key], t.target.device_name or t.target.arch,
                                           key=t.key[:12]) for t in todo])
  if log_file:
    sink = RecordLog(log_file)
    try:
      sink.append([Record.from_measure(t.key, tkey, defaults[t.key], r, strategy=DEFAULT) for t, r in zip(todo, results)])
    finally:
      sink.close()
  for t, r in zip(todo, results):
    if not r.ok: log.info("task %s: its default schedule could not be measured (%s)", t.name or t.key, r)
  return {t.key: (r.cost_s if r.ok else None) for t, r in zip(todo, results)}
