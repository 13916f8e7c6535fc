"""``tune_tasks``: the search entry point behind ``minicomp.compile(..., trials=N, log_file=...)``.

It turns the compiler's tasks into :class:`~minicomp.search.strategies.base.TuneTask` s, loads
the log (resume: every logged program counts as measured and is never measured again; the
strategy retrains from the logged results), tunes until the log holds ``trials`` measurements
for these tasks, and returns the best schedule (steps JSON) per task.

One measurement kind per call: GPU timings when the call measures on a GPU (``measurer`` a GPU
measurer or ``"gpu"``, or none given and a GPU of the target's arch is here), else static-model
estimates (``"static"``, the static measurer, or no such GPU). Records of the other kind are
ignored, with a warning, also with ``trials=0``: the two never meet in one comparison.

The best *valid* record wins: a resumed record counts as a task's best only after its steps
replay on the task's DAG to a valid schedule (:func:`~minicomp.search.records.replay_error`); one
that does not is skipped with a warning naming its ``file:line`` and the next best is tried.

A tuned schedule never replaces a better one: the default schedule of each task (``defaults``,
what ``compile`` builds without search) is measured once, logged as a record with strategy
``"default"`` (not counted as a trial), and a task's best record is returned only when it beats
its default (also when a log is applied with ``trials=0``). A log without default records
(written before this rule, or for other default rules) gets them measured by its next tuning
run; applied with ``trials=0`` before that, its best records apply as they are (nothing is
measured without trials).

The search starts where the default is: Gensor's construction is made again for each task (the seed
``compile`` uses, so the same programs). A default among them is handed to the strategy with its
measured cost in the task's first round (a learned model trains on it, evolution and walks start from
it) without being a trial; the other constructed programs are measured first in that round, those
``compile`` did not compare before those it did. Tasks whose default takes the most time
(weight x cost) get their first round first, so a budget smaller than the number of tasks goes where it
can save the most.
"""
from __future__ import annotations

import importlib
import logging
import math
import numbers
import os
from collections.abc import Sequence

from minicomp.errors import TuneError
from minicomp.search.strategies.base import RandomStrategy, Strategy, TuneTask
from minicomp.target import Target, as_target

log = logging.getLogger("minicomp")
STRATEGIES = ("ansor", "felix", "felix-pre", "gensor", "opevo", "tuna", "random")
MEASURERS = ("gpu", "static")     # measurer= by name: the measurement kind (and, with trials, the measurer)
MAX_WARNINGS = 10                 # invalid records warned about one by one


def _what(x) -> str: return f"{x!r:.60} ({type(x).__name__})"
def _is_int(x) -> bool: return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def check_options(trials=0, seed=0, strategy="ansor", log_file=None, measurer=None, measures_per_round=64,
                  time_budget_s=None, cluster=None) -> None:
  """Raise :class:`TuneError` naming the first bad tuning argument, before any work (not from deep inside)."""
  if not _is_int(trials) or trials < 0: raise TuneError(f"trials must be a non-negative int, got {_what(trials)}")
  if not _is_int(seed) or seed < 0: raise TuneError(f"seed must be a non-negative int, got {_what(seed)}")
  if not _is_int(measures_per_round) or measures_per_round < 1:
    raise TuneError(f"measures_per_round must be a positive int, got {_what(measures_per_round)}")
  if time_budget_s is not None and (isinstance(time_budget_s, bool) or not isinstance(time_budget_s, (int, float))
                                    or not math.isfinite(time_budget_s) or time_budget_s <= 0):
    raise TuneError(f"time_budget_s must be None or a positive number of seconds, got {_what(time_budget_s)}")
  if not isinstance(strategy, Strategy) and strategy not in STRATEGIES:
    raise TuneError(f"unknown search strategy {strategy!r}; known: {', '.join(STRATEGIES)} (or a Strategy object)")
  if log_file is not None and not isinstance(log_file, (str, os.PathLike)):
    raise TuneError(f"log_file must be None or a path, got {_what(log_file)}")
  named = isinstance(measurer, str) and measurer in MEASURERS
  if not (measurer is None or named or not isinstance(measurer, str) and hasattr(measurer, "measure")
          and hasattr(measurer, "is_estimate")):
    raise TuneError(f"measurer must be None, {' or '.join(map(repr, MEASURERS))} or a Measurer, got {_what(measurer)}")
  if cluster is not None:
    if not isinstance(cluster, str) and not hasattr(cluster, "measurer"):
      raise TuneError(f"cluster must be None, an address ('ray://HOST:PORT', 'HOST:PORT', 'auto') or a Cluster, "
                      f"got {_what(cluster)}")
    if measurer is not None and not isinstance(measurer, str):
      raise TuneError("pass cluster= or a Measurer object, not both: the cluster makes the measurer "
                      "(measurer='gpu' or 'static' picks its kind)")


def _lazy(module: str, cls: str, **fixed):
  """A constructor of ``minicomp.search.strategies.<module>.<cls>``, imported when first asked for (Felix and
  the learned strategies import JAX)."""
  def make(seed: int, **options) -> Strategy:
    return getattr(importlib.import_module(f"minicomp.search.strategies.{module}"), cls)(seed=seed, **fixed, **options)
  return make


# the strategies by name; ``felix-pre`` is Felix whose cost model starts trained on the shipped data
_FACTORIES = {
  "ansor": _lazy("ansor", "AnsorStrategy"), "felix": _lazy("felix", "FelixStrategy"),
  "felix-pre": _lazy("felix", "FelixStrategy", pretrain=True), "gensor": _lazy("gensor", "GensorStrategy"),
  "opevo": _lazy("opevo", "OpEvoStrategy"), "tuna": _lazy("tuna", "TunaStrategy"),
  "random": lambda seed, **options: RandomStrategy(**options),
}
assert tuple(_FACTORIES) == STRATEGIES


def make_strategy(name: str | Strategy, seed: int = 0, **options) -> Strategy:
  """The strategy called ``name`` (a Strategy object is returned as it is), seeded with ``seed``;
  ``options`` go to its constructor (``make_strategy("opevo", 0, prescreen=True)``): the one factory
  ``compile``, the command line and the benchmarks share."""
  if isinstance(name, Strategy): return name
  if name not in _FACTORIES: raise TuneError(f"unknown search strategy {name!r}; known: {', '.join(STRATEGIES)}")
  return _FACTORIES[name](seed, **options)


def target_key(tgt: Target) -> str:
  """How records name a target: the device when one was named, else the arch (its default device)."""
  return tgt.device_name or tgt.arch


def _gpu_here(tgt: Target | None) -> bool:
  """A GPU of ``tgt``'s arch is usable here: timings of the target's code JIT-compiled for another GPU
  would tune for the wrong machine."""
  from minicomp.codegen.driver import gpu_arch
  arch = gpu_arch()
  if arch is not None and tgt is not None and tgt.arch != arch:
    log.info("the GPU here is %s and the target %s: tuning with the static model (estimates)", arch, tgt.arch)
  return arch is not None and (tgt is None or tgt.arch == arch)


def default_measurer(tgt: Target | None = None):
  """GPUMeasurer when a GPU of ``tgt``'s arch is usable (real timings of the kernels being tuned), else the
  static model (estimates)."""
  from minicomp.search.measure import GPUMeasurer, StaticMeasurer
  return GPUMeasurer() if _gpu_here(tgt) else StaticMeasurer()


def measures_estimates(measurer, tgt: Target, cluster=None) -> bool:
  """The one measurement kind a call uses (True: static-model estimates, False: GPU timings), from
  ``measurer`` (an object, "static" or "gpu") or, without one, whether a GPU of the target's arch is here
  (on ``cluster``: whether one of its nodes offers a GPU and the target's arch)."""
  if measurer is None: return not (cluster.gpu_nodes(tgt.arch) if cluster is not None else _gpu_here(tgt))
  if isinstance(measurer, str): return measurer == "static"
  return bool(measurer.is_estimate)


def _kind(is_estimate: bool) -> str: return "static-model estimates" if is_estimate else "GPU timings"


DEFAULT = "default"   # the strategy name of a default schedule's record


def tune_tasks(tasks: Sequence, target: Target | str, trials: int = 0, strategy: str | Strategy = "ansor",
               log_file: str | None = None, seed: int = 0, measurer=None, measures_per_round: int = 64,
               time_budget_s: float | None = None, progress: bool = False,
               defaults: dict[str, str] | None = None, cluster=None) -> dict[str, str]:
  """Tune ``tasks`` (the compiler's ``graph.tasks.Task`` objects) and return {workload key: best steps JSON}
  for the tasks whose best valid record beats their default schedule (``defaults``: key -> steps JSON;
  without it every task's best valid record is returned). ``measurer``: a Measurer, "gpu", "static" or
  None (the GPU when one of the target's arch is here, else the static model); it also picks which
  records of the log count (the module docstring). ``cluster``: a Ray cluster whose nodes measure (a connected
  :class:`~minicomp.search.cluster.Cluster` or an address, as ``compile``'s); the log is still written here only."""
  from minicomp.search.records import RecordLog, load_records
  from minicomp.search.task_scheduler import TuneProgress, tune
  check_options(trials, seed, strategy, log_file, measurer, measures_per_round, time_budget_s, cluster)
  if isinstance(cluster, str):                 # an address: connected for this call
    from minicomp.search.cluster import connected
    with connected(cluster if trials else None) as c:
      return tune_tasks(tasks, target, trials, strategy, log_file, seed, measurer, measures_per_round, time_budget_s,
                        progress, defaults, cluster=c)
  tgt = as_target(target)
  tkey = target_key(tgt)
  is_estimate = measures_estimates(measurer, tgt, cluster)
  own = (measurer is None or isinstance(measurer, str)) and trials > 0
  if own and cluster is not None:
    measurer = cluster.measurer(is_estimate, tgt.arch)
  elif own:
    from minicomp.search.measure import GPUMeasurer, StaticMeasurer
    measurer = StaticMeasurer() if is_estimate else GPUMeasurer()
  elif isinstance(measurer, str): measurer = None          # trials=0: the name only picks the kind of records
  records = load_records(log_file, target=tkey) if log_file else []
  keys = {t.key for t in tasks}
  records = [r for r in records if r.workload_key in keys]
  other = sum(r.is_estimate != is_estimate for r in records)
  if other:
    log.warning("%s: ignoring %d record(s) of %s: this run compares %s only (pass measurer=%r to use them)",
                log_file, other, _kind(not is_estimate), _kind(is_estimate), "gpu" if is_estimate else "static")
  records = [r for r in records if r.is_estimate == is_estimate]
  defaults = dict(defaults or {})
  baseline = _default_records(records, defaults)
  # proposal order (trial numbers; a log holds finishing order): equal costs resolve as they did in the run
  records = sorted((r for r in records if r.strategy != DEFAULT), key=lambda r: r.trial)
  tt = [TuneTask(t.key, t.dag, tgt, t.weight, t.flops, t.kind, t.label) for t in tasks]
  by_key = {t.key: t for t in tt}
  invalid = _invalid_bests(records, by_key)
  for r in records: by_key[r.workload_key].record(r.steps_json, r.cost_s if r.ok and id(r) not in invalid else None)
  if records: log.info("resumed %d records for %d tasks from %s", len(records), len({r.workload_key for r in records}), log_file)
  remaining = trials - len(records)
  first_trial = max([len(records)] + [r.trial + 1 for r in records])
  strat = make_strategy(strategy, seed) if remaining > 0 else None
  if strat is not None: strat.prepare()              # its imports before any measurement
  try:
    if measurer is not None and (records or remaining > 0):
      baseline.update(_measure_defaults(tt, defaults, baseline, measurer, tkey, log_file, progress))
    for t in tt:
      if baseline.get(t.key) is not None: t.default_cost = baseline[t.key]
    if remaining > 0 and defaults: _start_at_defaults([t for t in tt if not t.trials], defaults, progress)
    if remaining > 0:
      if records and hasattr(strat, "resume"): strat.resume(tt)
      sink = RecordLog(log_file) if log_file else None
      shown = TuneProgress(trials, len(records), enabled=progress, status=cluster.status if cluster else None)
      try:
        tune(tt, strat, measurer, remaining, seed=seed, measures_per_round=measures_per_round,
             time_budget_s=time_budget_s, log=sink, strategy_name=getattr(strat, "name", str(strategy)),
             on_round=shown, first_trial=first_trial)
      finally:
        shown.close()
        if sink is not None: sink.close()
        if cluster is not None: cluster.watch()       # says so if nodes were lost in the last round
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


def _start_at_defaults(tasks: list[TuneTask], defaults: dict[str, str], progress: bool) -> None:
  """Where each task's search starts: Gensor's construction as ``compile`` made it (same seed, so the same
  candidates). The default among them is a seed (measured: its cost goes to the strategy); the others are
  the first round's start programs, first those the analytic model cannot separate from it (``gensor.compared``,
  which ``schedules="compare"`` ranks: built and measured they may be faster, as they may on a GPU), then the rest."""
  from minicomp.errors import MinicompError
  from minicomp.progress import bar, check_interrupt
  from minicomp.search.records import canonical_steps
  from minicomp.search.strategies.gensor import CONSTRUCT_SEED, compared, construct
  with bar(len(tasks), "[minicomp] tuning: starting from the defaults", progress, unit="task") as shown:
    for t in tasks:
      check_interrupt()
      try:
        res = construct(t.dag, t.target, seed=CONSTRUCT_SEED, sketches=t.sketches)
      except MinicompError as e:
        log.info("task %s: no constructed programs to start from (%s)", t.name or t.key, e)
        res = None
      if res is not None:
        want, seen = canonical_steps(defaults[t.key]) if t.key in defaults else None, {c.key for c in compared(res)}
        compared_first, rest = [], []
        for c in res.candidates:
          if canonical_steps(c.key) == want:
            if math.isfinite(t.default_cost): t.seeds.append((c, t.default_cost))
          else:
            (compared_first if c.key in seen else rest).append(c)
        t.starts = compared_first + rest
      shown.update()


def _invalid_bests(records, by_key: dict[str, TuneTask]) -> set[int]:
  """``id`` of each successful record that would be its task's best but does not replay to a valid schedule
  (each warned about, naming its file and line): per task, records are checked cheapest first until one
  is valid, so a log of valid records costs one replay per task."""
  from minicomp.search.records import replay_error
  bad: set[int] = set()
  for key, t in by_key.items():
    for r in sorted((r for r in records if r.workload_key == key and r.ok), key=lambda r: r.cost_s):
      why = replay_error(r.steps_json, t.dag, t.target)
      if why is None: break
      bad.add(id(r))
      if len(bad) <= MAX_WARNINGS:
        log.warning("%s: skipping a record of task %s that does not replay to a valid schedule: %s",
                    r.where or "a record", t.name or key, why)
  if len(bad) > MAX_WARNINGS: log.warning("skipped %d records that do not replay in all", len(bad))
  return bad


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
      sink.append([Record.from_measure(t.key, tkey, defaults[t.key], r, strategy=DEFAULT, task=t.name)
                   for t, r in zip(todo, results)])
    finally:
      sink.close()
  for t, r in zip(todo, results):
    if not r.ok: log.info("task %s: its default schedule could not be measured (%s)", t.name or t.key, r)
  return {t.key: (r.cost_s if r.ok else None) for t, r in zip(todo, results)}
