"""``minicomp.compile``: ONNX model -> CompiledModel.

Import (constant folding, op checks) -> partition into fused subgraphs -> one Task per
distinct subgraph (workload key) -> a schedule per task (Gensor construction, checked against the
rule-based schedule by the static model; or a tuning record) -> lower, emit CUDA C, NVRTC ->
CompiledModel with its launch order and weights.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from minicomp.codegen.kernel import Kernel, build
from minicomp.compiled_model import CompiledModel, IndexCheck, IOSpec, KernelCall, ViewStep
from minicomp.errors import CompileError, LoweringError, MinicompError, ScheduleError
from minicomp.frontend.onnx_import import load_onnx
from minicomp.graph.fold import fold_batchnorm
from minicomp.graph.partition import partition
from minicomp.graph.schedules import default_schedule
from minicomp.graph.subgraph import nodes_to_te
from minicomp.graph.tasks import Task, task_kind, workload_key
from minicomp.ir.dag import ComputeDAG
from minicomp.ir.te import Tensor
from minicomp.progress import bar
from minicomp.progress import say as progress_say
from minicomp.target import Target, as_target

log = logging.getLogger("minicomp")
SCHEDULES = ("gensor", "rules")
GENSOR_BUILDS = 3          # constructed candidates built and estimated per task (best by the analytic model first)
CONSTRUCT_SEED = 0


@dataclass
class CompileStats:
  """Seconds spent per phase: frontend (import + folding), partition (+ tensor expressions),
  construct (Gensor's walks), estimate (the static model choosing between schedules),
  build (rule-based schedules + lowering + CUDA emission), nvrtc; ``constructed``: tasks whose
  schedule is Gensor's."""
  frontend: float = 0.0
  partition: float = 0.0
  construct: float = 0.0
  estimate: float = 0.0
  build: float = 0.0
  nvrtc: float = 0.0
  tasks: int = 0
  calls: int = 0
  constructed: int = 0


def index_checks(g) -> list[IndexCheck]:
  """The graph inputs that are Gather / GatherElements indices, with the size of the axis they index."""
  out = []
  for n in g.nodes:
    if n.op_type not in ("Gather", "GatherElements") or len(n.inputs) < 2 or n.inputs[1] not in g.inputs: continue
    shape = g.values[n.inputs[0]].shape
    axis = int(n.attrs.get("axis", 0))
    if -len(shape) <= axis < len(shape): out.append(IndexCheck(n.inputs[1], int(shape[axis]), n.name, n.op_type))
  return out


def _build_default(task: Task, tgt: Target, name: str) -> tuple[Kernel, str]:
  """The task's default schedule, built, and its steps JSON. A tile may break a resource limit:
  back off to no shared-memory staging, then to the simplest schedule."""
  for opts in ({}, {"shared": False}, {"simple": True}):
    sched = default_schedule(task.dag, tgt, **opts)
    try:
      return build(sched, tgt, name=name), sched.to_json()
    except (ScheduleError, LoweringError) as e:
      if opts.get("simple"): raise
      log.info("task %s: default schedule %s rejected (%s); backing off", task.key, opts or "(full)", e)
  raise AssertionError("unreachable")


def _construct(task: Task, tgt: Target, name: str, rules: tuple[Kernel, str], stats: CompileStats,
               account) -> tuple[Kernel, str]:
  """Gensor's schedule for ``task`` when the static model estimates it faster than the rule-based
  one (``rules``: its kernel and steps), else the rule-based one. Construction that fails, finds
  nothing valid or does not build falls back to the rules, logged. The walk's seed is fixed
  (``CONSTRUCT_SEED``), not ``compile``'s: a task's default schedule depends on the task and the
  target only, so the default records of a tuning log stay valid across tuning seeds."""
  from minicomp.search.static.estimate import estimate
  from minicomp.search.strategies.gensor import construct
  t0 = time.perf_counter()
  try:
    res = construct(task.dag, tgt, seed=CONSTRUCT_SEED)
  except MinicompError as e:
    log.info("task %s: Gensor construction failed (%s); using the rule-based schedule", task.key, e)
    return rules
  finally:
    stats.construct += time.perf_counter() - t0
  if not res.candidates:
    log.info("task %s: Gensor construction found no valid schedule (%s); using the rule-based schedule", task.key,
             "; ".join(res.reasons[:3]) or "no sketch")
    return rules
  options: list[tuple[Kernel, str]] = []
  for c in res.candidates[:GENSOR_BUILDS]:
    t1 = time.perf_counter()
    try:
      kern = build(c.schedule, tgt, name=name)
    except (ScheduleError, LoweringError, CompileError) as e:
      log.info("task %s: a constructed schedule did not build (%s)", task.key, e)
      continue
    account(kern, time.perf_counter() - t1)
    options.append((kern, c.schedule.to_json()))
  if not options: return rules
  t1 = time.perf_counter()
  try:
    costs = [estimate(k, tgt).latency_s for k, _ in options + [rules]]
  except MinicompError as e:
    log.info("task %s: the static model could not compare the schedules (%s); using Gensor's best by its "
             "analytic model", task.key, e)
    return options[0]
  finally:
    stats.estimate += time.perf_counter() - t1
  best = int(min(range(len(costs)), key=lambda i: costs[i]))
  if best == len(options):
    log.info("task %s: the rule-based schedule (%.2f us, estimate) beats Gensor's (%.2f us): kept", task.key,
             costs[-1] * 1e6, min(costs[:-1]) * 1e6)
    return rules
  stats.constructed += 1
  return options[best]


def compile(model, target: str | Target = "sm_86", input_shapes: Mapping[str, Sequence[int]] | None = None,
            trials: int = 0, progress: bool = False, name: str | None = None, strategy: str = "ansor",
            log_file: str | None = None, seed: int = 0, measurer=None, measures_per_round: int = 64,
            time_budget_s: float | None = None, schedules: str = "gensor") -> CompiledModel:
  """Compile an ONNX model (ModelProto, path or bytes) for ``target``.

  ``input_shapes`` gives concrete shapes for dynamic input dims.

  Schedules: every task first gets a default schedule without measuring anything. With
  ``schedules="gensor"`` (the default) that is Gensor's construction
  (``minicomp.search.strategies.gensor``, a second or two per task), kept when the static model
  estimates it faster than the rule-based schedule of ``graph/schedules.py``;
  ``schedules="rules"`` uses the rule-based schedules alone (faster to compile, slower kernels).
  With ``trials=N`` the tasks are tuned (``minicomp.search.tune``) with ``strategy`` ("ansor",
  "felix", "gensor" or "random") until the log holds N measurements for them in total (so
  re-running a killed command resumes it), then each task is compiled with its best measured
  schedule. With ``log_file`` and ``trials=0`` the best record per task is applied without any
  search. Tasks without a valid record keep the default schedule, and so do tasks whose default schedule
  measures at least as fast as their best record (it is measured once and logged as a record
  with strategy "default"). Only records that replay to a valid schedule of their task count: the
  best valid one wins. ``measurer`` (a Measurer, ``"gpu"`` or ``"static"``) fixes the one measurement kind of
  the call, also with ``trials=0``: GPU timings when it measures on a GPU, else static-model estimates;
  by default the GPU when one of the target's arch is present, else the static model (every cost an
  estimate). Records of the other kind are ignored with a warning. ``progress=True`` shows progress on
  stderr: a line per phase, and bars over the kernels built and the tuning trials. Bad tuning
  arguments (``trials="4"``) raise ``TuneError`` before any work.
  """
  from minicomp.search.tune import check_options
  check_options(trials, seed, strategy, log_file, measurer, measures_per_round, time_budget_s)
  tgt = as_target(target)
  if schedules not in SCHEDULES:
    raise CompileError(f"unknown schedules={schedules!r}; known: {', '.join(SCHEDULES)}")
  say = lambda msg: progress_say(msg, progress)
  stats = CompileStats()
  t0 = time.perf_counter()
  g = fold_batchnorm(load_onnx(model, input_shapes))
  stats.frontend = time.perf_counter() - t0
  say(f"imported {g.name}: {len(g.nodes)} nodes after constant folding ({stats.frontend:.2f} s)")

  t0 = time.perf_counter()
  part = partition(g)
  tasks: dict[str, Task] = {}
  kernels: list[Kernel] = []
  kernel_of: dict[str, int] = {}
  steps: list = []
  weights: dict[str, np.ndarray] = {}
  consts: dict[str, np.ndarray] = {}
  plans = []
  for st in part.steps:
    if isinstance(st, tuple):
      _, node = st
      te_ = nodes_to_te(g, [node])
      out = te_.outputs[node.outputs[0]]
      steps.append(ViewStep(next(i for i in node.inputs if i and not (i in g.values and g.values[i].is_const)),
                            node.outputs[0], tuple(out.shape), node.op_type))
      continue
    te_ = nodes_to_te(g, st.nodes, st.outputs)
    outs = [o for o in st.outputs if isinstance(te_.outputs[o], Tensor)]
    for o in st.outputs:
      if not isinstance(te_.outputs[o], Tensor): consts[o] = np.asarray(te_.outputs[o])
    if not outs: continue
    dag = ComputeDAG([te_.outputs[o] for o in outs])
    key = workload_key(dag)
    ops = [n.op_type for n in st.nodes]
    if key in tasks: tasks[key].weight += 1
    else: tasks[key] = Task(key, dag, task_kind(dag), 1, ops, dag.flop_count())
    by_tensor = {t.name: v for v, t in te_.inputs.items()}
    ins = []
    for ph in dag.placeholders:
      if ph.name in te_.consts:
        wname = f"{len(steps)}:{ph.name}"
        weights[wname] = te_.consts[ph.name]
        ins.append(("const", wname))
      else:
        ins.append(("value", by_tensor[ph.name]))
    steps.append(KernelCall(-1, ins, outs, key, ops, dag.flop_count()))
    plans.append((steps[-1], key))
  stats.partition = time.perf_counter() - t0
  stats.tasks, stats.calls = len(tasks), len(plans)
  say(f"partitioned into {len(plans)} kernel calls, {len(tasks)} distinct tasks ({stats.partition:.2f} s)")

  def account(kern: Kernel, seconds: float) -> None:
    stats.build += kern.timings["lower_emit_s"] + (seconds - sum(kern.timings.values()))   # + scheduling
    stats.nvrtc += kern.timings["nvrtc_s"]

  defaults: dict[str, tuple[Kernel, str]] = {}   # key -> (default kernel, its steps JSON)
  what = "constructing schedules (Gensor)" if schedules == "gensor" else "default kernels"
  with bar(len(tasks), f"[minicomp] {what}", progress, unit="task") as shown:
    for k, (key, task) in enumerate(tasks.items()):
      shown.set_postfix_str("+".join(task.ops)[:40], refresh=False)
      t0 = time.perf_counter()
      defaults[key] = _build_default(task, tgt, f"task{k}")
      account(defaults[key][0], time.perf_counter() - t0)
      if schedules == "gensor":
        defaults[key] = _construct(task, tgt, f"task{k}", defaults[key], stats, account)
      shown.update()
  tuned: dict[str, str] = {}
  if trials or log_file:
    from minicomp.search.tune import tune_tasks
    tuned = tune_tasks(list(tasks.values()), tgt, trials=trials, strategy=strategy, log_file=log_file, seed=seed,
                       measurer=measurer, measures_per_round=measures_per_round, time_budget_s=time_budget_s,
                       progress=progress, defaults={key: d[1] for key, d in defaults.items()})
  with bar(len(tuned), "[minicomp] tuned kernels", progress and bool(tuned), unit="task") as shown:
    for k, (key, task) in enumerate(tasks.items()):
      t0 = time.perf_counter()
      kern = defaults[key][0]
      if key in tuned:
        from minicomp.ir.schedule import Schedule
        try:
          kern = build(Schedule.from_json(task.dag, tuned[key]), tgt, name=f"task{k}")
          account(kern, time.perf_counter() - t0)
        except (ScheduleError, LoweringError, CompileError) as e:
          log.warning("task %s: its best record no longer builds (%s); using the default schedule", key, e)
          tuned.pop(key)
        shown.update()
      kernel_of[key] = len(kernels)
      kernels.append(kern)
  say(f"{len(tasks)} kernels: {len(tuned)} tuned, {len(tasks) - len(tuned)} default schedules "
      f"({stats.constructed} constructed by Gensor; {stats.construct:.2f} s constructing, {stats.estimate:.2f} s "
      f"estimating, {stats.build + stats.nvrtc:.2f} s building, NVRTC {stats.nvrtc:.2f} s of it)")
  for call, key in plans: call.kernel = kernel_of[key]
  inputs = [IOSpec(n, tuple(g.values[n].shape), g.boundary.get(n, g.values[n].dtype)) for n in g.inputs]
  for o in g.outputs:   # outputs that are folded constants
    if o in g.values and g.values[o].is_const: consts[o] = g.values[o].const
  cm = CompiledModel(tgt, inputs, list(g.outputs), kernels, steps, weights, consts, name or g.name,
                     boundary=g.boundary, index_checks=index_checks(g))
  cm.tasks = list(tasks.values())
  cm.stats = stats
  return cm
