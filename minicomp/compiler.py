"""``minicomp.compile``: ONNX model -> CompiledModel, as one flat list of named phases (``PHASES``)::

    import -> fold -> precision -> layout -> partition -> tasks -> schedule -> lower -> emit -> nvrtc -> link

Each phase is a small function ``CompileState -> CompileState`` below, filling in its fields of the
state (:mod:`minicomp.pipeline` holds the state, each phase's output as text for ``dump_after=``, and
the loop that runs the list). The schedule of a task is Gensor's construction, checked against the
rule-based schedule by the static model, or a tuning record. docs/architecture.md draws the picture.
"""
from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from minicomp.codegen.kernel import Builds, Kernel
from minicomp.compiled_model import CompiledModel
from minicomp.errors import CompileError, LoweringError, MinicompError, MissingDependencyError, ScheduleError
from minicomp.frontend.graph import Graph
from minicomp.frontend.precision import apply_precision, check_precision
from minicomp.graph.fold import fold_batchnorm
from minicomp.graph.horizontal import merge_sibling_matmuls
from minicomp.graph.layout import channels_last_weights
from minicomp.graph.partition import partition
from minicomp.graph.schedules import default_schedule
from minicomp.graph.subgraph import nodes_to_te
from minicomp.graph.tasks import Task, task_kind, workload_key
from minicomp.ir.dag import ComputeDAG
from minicomp.ir.schedule import Schedule
from minicomp.ir.te import Tensor
from minicomp.model_parts import CompileStats, IndexCheck, IOSpec, KernelCall, ViewStep
from minicomp.pipeline import (CompileOptions, CompileState, Dumper, Phase, TaskBuild, dump_phases,
                               emit_text, graph_text, link_text, lower_text, nvrtc_text, partition_text, run_phases,
                               schedule_text, tasks_text)
from minicomp.progress import bar, check_interrupt, say
from minicomp.schedule_cache import ScheduleCache, rename_stages
from minicomp.search.cluster import connected
from minicomp.search.static.calibration import active as active_calibration
from minicomp.target import Target, as_target

log = logging.getLogger("minicomp")
SCHEDULES = ("gensor", "compare", "rules")
SCHEDULE_ALIASES = {"quick": "gensor"}     # (schedules="quick" of 2026-12-01: what the default now does)


def index_checks(g) -> list[IndexCheck]:
  """The graph inputs that are Gather / GatherElements indices, with the size of the axis they index."""
  out = []
  for n in g.nodes:
    if n.op_type not in ("Gather", "GatherElements") or len(n.inputs) < 2 or n.inputs[1] not in g.inputs: continue
    shape = g.values[n.inputs[0]].shape
    axis = int(n.attrs.get("axis", 0))
    if -len(shape) <= axis < len(shape): out.append(IndexCheck(n.inputs[1], int(shape[axis]), n.name, n.op_type))
  return out


Built = tuple[Kernel, Schedule, str]   # a schedule built whole while choosing it, and where it comes from
BUILD_ERRORS = (ScheduleError, LoweringError, CompileError)   # a schedule that does not build


def build_rule_based(dag, built: Builds, name: str, key: str = "") -> Built:
  """``dag``'s rule-based schedule, built. A tile may break a resource limit:
  back off to no shared-memory staging, then to the simplest schedule."""
  for opts in ({}, {"shared": False}, {"simple": True}):
    sched = default_schedule(dag, built.target, **opts)
    try:
      return built.kernel(sched, name), sched, "rules"
    except (ScheduleError, LoweringError) as e:
      if opts.get("simple"): raise
      log.info("task %s: default schedule %s rejected (%s); backing off", key, opts or "(full)", e)
  raise AssertionError("unreachable")


# Tasks of these ops never keep the rule-based schedule: research/compile_choice.py (118 tasks of 9 models, sm_86
# and h100) found it 2.8x (at best) to 8.9x (median) slower than Gensor's there, so it is built only if Gensor's fail
RULES_NEVER_WIN = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm", "QLinearConv", "QLinearMatMul", "ConvInteger",
                             "MatMulInteger"})


class Walked:
  """The walk a group of tasks shares (:func:`choose_defaults`): the domain (``gensor.domain``) of the first task
  whose construction walked, and its best states (``Construction.states``)."""

  def __init__(self):
    self.domain: tuple | None = None
    self.states: list[tuple[int, dict]] = []


def _construct(task: Task, built: Builds, name: str, rules: Callable[[], Built], stats: CompileStats,
               tensor_cores: str = "half", compare: bool = False, walked: Walked | None = None,
               always: bool = False) -> Built:
  """Gensor's schedule for ``task`` (the analytic model's first candidate; with ``compare``, of the candidates
  ``gensor.compared`` picks, the first by :func:`rank_constructed` that builds), or a tensor-core one
  (:func:`_tensor_core_options`, ``tensor_cores``: "half", "tf32" or "off"), whichever the static model estimates
  fastest, unless the rule-based one (``rules()`` builds it) is faster still; for a task of
  :data:`RULES_NEVER_WIN` ops the rule-based one is not compared. Construction that fails, finds nothing valid or
  does not build falls back to the rules, logged. The walk's seed is fixed (``CONSTRUCT_SEED``), not ``compile``'s:
  a task's default schedule depends on the task, the target and (through ``walked``) the first task of its walk
  domain compiled with it, not on the tuning seed, so the default records of a tuning log stay valid across seeds.
  Without ``compare`` (``schedules="gensor"``, the default) no ranking copies are built or estimated;
  ``schedules="compare"`` builds them (research/quick_choice.py: what comparing buys and costs).
  ``walked``: the walk of a task of the same domain, whose best states this task ranks instead of walking (or,
  where it holds none yet, where this task's walk is kept for the next). ``always``: where the task has tensor-core
  schedules, the fastest of them by the static model, nothing else built (``MINICOMP_TENSOR_CORES=always``). A
  tensor-core schedule estimated faster than any FP32-pipe kernel could be is kept without constructing one
  (:func:`_below_fp32_floor`)."""
  from minicomp.search.static.estimate import estimate
  tgt = built.target
  tensor = _tensor_core_options(task, built, name, tensor_cores)
  if always and tensor:
    options = list(tensor)
  else:
    fast = _below_fp32_floor(task, tensor, tgt, stats)
    if fast is not None: return _kept(fast, stats)
    options = _constructed(task, built, name, compare, walked, stats)
    if not options and not tensor: return rules()
    options += tensor
    if not set(task.ops) & RULES_NEVER_WIN or len(options) == len(tensor): options.append(rules())
  if len(options) == 1: return _kept(options[0], stats)
  t1 = time.perf_counter()
  try:
    costs = [estimate(k, tgt).latency_s for k, _, _ in options]
  except MinicompError as e:
    log.info("task %s: the static model could not compare the schedules (%s); using Gensor's first by its "
             "ranking", task.key, e)
    return _kept(options[0], stats)
  finally:
    stats.estimate += time.perf_counter() - t1
  best = min(range(len(costs)), key=lambda i: costs[i])
  if options[best][2] == "rules" and len(costs) > 1:
    log.info("task %s: the rule-based schedule (%.2f us, estimate) beats Gensor's (%.2f us): kept", task.key,
             costs[best] * 1e6, min(costs[:-1]) * 1e6)
  return _kept(options[best], stats)


def _below_fp32_floor(task: Task, tensor: list[Built], target: Target, stats: CompileStats) -> Built | None:
  """The fastest of ``tensor`` by the static model where it is estimated below ``model.fp32_floor`` of the task's
  multiply-adds: no FP32-pipe schedule, Gensor's or the rules', could be estimated faster, so neither is constructed
  or built (a ResNet's or a BERT's half-precision layers on the H100); else None."""
  if not tensor: return None
  from minicomp.search.static.estimate import estimate
  from minicomp.search.static.model import fp32_floor
  (r,) = [t for t in task.dag.tensors if t.reduce_axes]     # (tensor-core schedules exist for one reduction only)
  if not r.dtype.startswith("float"): return None          # (integer FP32-pipe kernels take 4 products a dp4a)
  products = math.prod(int(d) for d in r.shape) * math.prod(int(a.extent.arg) for a in r.reduce_axes)
  t0 = time.perf_counter()
  try:
    costs = [estimate(k, target).latency_s for k, _, _ in tensor]
  except MinicompError:
    return None                                 # (_construct compares them with the others, and says so)
  finally:
    stats.estimate += time.perf_counter() - t0
  best = min(range(len(costs)), key=costs.__getitem__)
  floor = fp32_floor(products, target.device)
  if costs[best] >= floor: return None
  log.info("task %s: a tensor-core schedule (%.2f us, estimate) beats any FP32-pipe one (at least %.2f us): kept "
           "without construction", task.key, costs[best] * 1e6, floor * 1e6)
  return tensor[best]


def _constructed(task: Task, built: Builds, name: str, compare: bool, walked: Walked | None,
                 stats: CompileStats) -> list[Built]:
  """Gensor's schedule for ``task`` as :func:`_construct` compares it, built ([] where construction fails, finds
  nothing valid or nothing that builds: logged)."""
  from minicomp.search.strategies.gensor import COMPARE
  t0 = time.perf_counter()
  try:
    sketches, res, seeded = construct_task(task, built.target, COMPARE if compare else 1, walked)   # (no more)
    stats.seeded += seeded
  except MinicompError as e:
    log.info("task %s: Gensor construction failed (%s); using the rule-based schedule", task.key, e)
    res = None
  finally:
    stats.construct += time.perf_counter() - t0
  if res is not None and not res.candidates:
    log.info("task %s: Gensor construction found no valid schedule (%s); using the rule-based schedule", task.key,
             "; ".join(res.reasons[:3]) or "no sketch")
  ranked = [] if res is None else kept_order(res, sketches, built, name, compare, stats, task.key)
  for c in ranked:
    try:
      return [(built.kernel(c.schedule, name, c.program), c.schedule, "gensor")]   # (lowered by construct)
    except BUILD_ERRORS as e:
      log.info("task %s: a constructed schedule did not build (%s)", task.key, e)
  return []


def construct_task(task: Task, target: Target, keep: int, walked: Walked | None = None,
                   seed: int | None = None) -> tuple[list, object, bool]:
  """Gensor's construction of ``task`` as ``compile`` makes it: over :func:`constructed_sketches`, from the fixed
  seed (or ``seed``), ``keep`` candidates; where ``walked`` holds the walk of a task of the same domain, ranking its
  best states instead of walking (else the walk is kept there for the next task, where it holds none). (sketches,
  construction, whether it ranked ``walked``'s states.)"""
  from minicomp.search.strategies.gensor import CONSTRUCT_SEED, construct, domain
  sketches = constructed_sketches(task.dag, target)
  dom = domain(sketches) if walked is not None else None
  seeded = dom is not None and walked.domain == dom
  res = construct(task.dag, target, seed=CONSTRUCT_SEED if seed is None else seed, sketches=sketches, keep=keep,
                  seeded=walked.states if seeded else None)
  if walked is not None and walked.domain is None and res.candidates:
    walked.domain, walked.states = dom, res.states
  return sketches, res, seeded and bool(res.candidates)


def kept_order(res, sketches: list, built: Builds, name: str, compare: bool, stats: CompileStats | None = None,
               key: str = "") -> list:
  """The candidates of Gensor's construction ``res`` in the order ``compile`` tries to build them: the analytic
  model's first alone, or with ``compare`` (``schedules="compare"``) those it cannot separate
  (``gensor.compared``), ranked by :func:`rank_constructed`."""
  from minicomp.search.strategies.gensor import COMPARE, compared
  if not compare: return compared(res, 1)
  return rank_constructed(compared(res, COMPARE), sketches, built, name, stats, key)


def rank_constructed(cands: list, sketches: list, built: Builds, name: str, stats: CompileStats | None = None,
                     key: str = "") -> list:
  """``cands`` (Gensor's compared candidates of task ``key``, the analytic model's order; ``sketches``: the list
  their ``sketch_index`` points into) fastest first by the full static model's estimates of their ranking copies
  (``gensor.ranking_copy``: unrolled less, built in a fraction of the time), built through ``built`` under kernel
  name ``name``; a candidate whose copy does not build or estimate goes last, in the analytic model's order."""
  from minicomp.search.static.estimate import estimate
  from minicomp.search.strategies.gensor import ranking_copy
  if len(cands) < 2: return cands
  costs = []
  for c in cands:
    try:
      copy = ranking_copy(c, sketches, built.target)
      k = built.kernel(copy.schedule, name, copy.program) if copy is not None else None
    except BUILD_ERRORS as e:
      log.info("task %s: the ranking copy of a constructed schedule did not build (%s)", key, e)
      k = None
    t0 = time.perf_counter()
    try: costs.append(estimate(k, built.target).latency_s if k is not None else math.inf)
    except MinicompError as e:
      log.info("task %s: the static model could not rank a constructed schedule (%s)", key, e)
      costs.append(math.inf)
    finally:
      if stats is not None: stats.estimate += time.perf_counter() - t0
  return [cands[i] for i in sorted(range(len(cands)), key=lambda i: costs[i])]


# Gensor's walks over the tensor-core sketch (its analytic model lowers one program per point: PointwiseModel) are
# for tuning; at trials=0 the template (_tensor_core_options) is the tensor-core offer. With the sketch, the static
# model prefers Gensor's constructions to the template on every tensor-core task of ResNet-18 and BERT-tiny in fp16
# (h100: 281.7 -> 273.7 and 115.6 -> 113.9 us*, 2026-11-30), but those convolutions' taps are not pipelined, which the
# GPU rewarded (H200: 33 -> 20 us) and the model does not see. Timed on an H200 (2026-11-30,
# research/tc_choice_check.py, benchmarks/README.md): ResNet-18 (64 x 64, fp16) runs its seven tensor-core
# convolutions in 153 us with Gensor's constructions and 116 us with the template; BERT-tiny's eight matmuls in 77
# against 81 us. Not the default.
CONSTRUCT_TENSOR_CORE_SKETCH = False
TENSOR_CORE_RULE = "tensor_core_tiling"
# The split-reduction sketch (sketch_rules.SplitReduction: split-K for small outputs of long reductions) is for tuning
# too. At trials=0, with it (2026-11-30, static-model estimates, one process): ResNet-18 at 64 x 64 554.1 -> 414.2 us*
# on sm_86, but only 273.7 -> 260.5 on h100, whose model is calibrated on real H200 timings, for a compile 12.5 ->
# 21.5 s (the walks of a second sketch, two-kernel candidates); BERT-tiny and the 224 x 224 ResNets have no output
# small enough. No GPU has timed its kernels: not the default until one does.
CONSTRUCT_SPLIT_SKETCH = False


def constructed_sketches(dag, target: Target) -> list:
  """The sketches compile's construction walks (trials=0): all of ``dag``'s but the tensor-core one and the
  split-reduction ones (:data:`CONSTRUCT_TENSOR_CORE_SKETCH`, :data:`CONSTRUCT_SPLIT_SKETCH`)."""
  from minicomp.search.sketch import generate_sketches
  from minicomp.search.sketch_rules import SplitReduction
  return [sk for sk in generate_sketches(dag, target)
          if (CONSTRUCT_TENSOR_CORE_SKETCH or TENSOR_CORE_RULE not in sk.rules)
          and (CONSTRUCT_SPLIT_SKETCH or not any(r.startswith(SplitReduction.name) for r in sk.rules))]


# Tasks offered tensor-core schedules: matmuls, and convolutions whose weights graph/layout.py stored channels-last
# (tensor_core_schedules refuses a convolution whose k-step is not contiguous in an operand: in ONNX's weight order
# the template lost to Gensor's kernels, conv 3x3 56x56x64 fp16 on an A100 56 against 35 us by the static model).
# The int8 ones (mma.sync m16n8k32 over dot4 sums) compute the right thing on an H200 (the gpu-marked tests,
# 2026-11-30) but ran 1.0-4.9x slower there than the dp4a kernels the static model judged a little slower (BERT-tiny
# int8 QDQ: 283 against 162 us end to end; research/tc_choice_check.py --precision int8-qdq): compile does not offer
# them until their fragments are fetched as the half ones are (ldmatrix). Schedule.tensorize still takes them.
INT8_TENSOR_CORE_OPS = frozenset({"MatMulInteger", "QLinearMatMul", "ConvInteger", "QLinearConv"})
INT8_TENSOR_CORE_TEMPLATE = False
TENSOR_CORE_OPS = frozenset({"MatMul", "Gemm", "Conv"}) | INT8_TENSOR_CORE_OPS


def _tensor_core_options(task: Task, built: Builds, name: str, tensor_cores: str) -> list[Built]:
  """The task's tensor-core schedules (``graph/tensor_core_schedules.py``: half-precision matmul-like tasks on a
  target with mma.sync; float32 ones too on TF32 with ``tensor_cores="tf32"``; none with "off"; tasks of
  :data:`TENSOR_CORE_OPS` but ConvTranspose, and int8 ones only with :data:`INT8_TENSOR_CORE_TEMPLATE`), built;
  the ones that do not build are dropped, logged. Of the template's tiles only the analytic model's first is built
  (:func:`_first_tile`); a split-K schedule always is."""
  from minicomp.graph.tensor_core_schedules import is_split_k, tensor_core_schedules
  if tensor_cores == "off": return []
  if not set(task.ops) & TENSOR_CORE_OPS or "ConvTranspose" in task.ops: return []
  if set(task.ops) & INT8_TENSOR_CORE_OPS and not INT8_TENSOR_CORE_TEMPLATE: return []
  scheds = tensor_core_schedules(task.dag, built.target, tf32=tensor_cores == "tf32")
  tiles = [s for s in scheds if not is_split_k(s)]
  todo = _first_tile(task, tiles, built.target, name) + [(s, None) for s in scheds if is_split_k(s)]
  out: list[Built] = []
  for sched, lowered in todo:
    try:
      out.append((built.kernel(sched, name, lowered), sched, "tensor cores"))
    except BUILD_ERRORS as e:
      log.info("task %s: a tensor-core schedule did not build (%s)", task.key, e)
  return out


def _first_tile(task: Task, tiles: list, target: Target, name: str) -> list[tuple]:
  """[(schedule, its program lowered and checked)] of the template's tiles the analytic model estimates fastest
  (no NVRTC build, no footprint enumeration: a tenth of the full model's time); every tile, not lowered yet, where
  the analytic model cannot cost one. On 116 tasks of six half and TF32 models for the H100 and sm_86 (2026-12-03,
  research/tc_candidate_choice.py) the full model kept the same kernel, or one within 0.4%, for 40% fewer builds
  (the analytic first alone, without split-K built too, lost up to 13% on 12 tasks)."""
  if len(tiles) < 2: return [(s, None) for s in tiles]
  from minicomp.codegen.kernel import lower_checked
  from minicomp.search.static.analytic import schedule_seconds
  lowered = []
  for s in tiles:
    try:
      lowered.append((s, lower_checked(s, target, name)))
    except BUILD_ERRORS as e:
      log.info("task %s: a tensor-core schedule did not build (%s)", task.key, e)
  try:
    secs = [schedule_seconds(s, target, prog) for s, prog in lowered]
  except MinicompError as e:
    log.info("task %s: the analytic model could not rank the tensor-core tiles (%s); building each", task.key, e)
    return lowered
  return [lowered[min(range(len(secs)), key=secs.__getitem__)]] if lowered else []


def _kept(b: Built, stats: CompileStats) -> Built:
  stats.constructed += b[2] == "gensor"
  stats.tensor_cores += b[2] == "tensor cores"
  return b


def onnx_loader():
  """``load_onnx``, imported on first use: ``import minicomp`` needs no onnx, compiling an ONNX model does."""
  try:
    from minicomp.frontend.onnx_import import load_onnx
  except ModuleNotFoundError as e:
    if (e.name or "").partition(".")[0] != "onnx": raise
    raise MissingDependencyError("reading an ONNX model needs the onnx package, which is not installed: "
                                 "pip install onnx") from None
  return load_onnx


def _fall_back(b: TaskBuild, e: MinicompError) -> None:
  log.warning("task %s: its best record no longer builds (%s); using the default schedule", b.task.key, e)
  b.fall_back()


def choose_default(task: Task, target: Target, name: str, mode: str, built: Builds | None = None,
                   walked: Walked | None = None) -> tuple[str, str, CompileStats, tuple | None]:
  """One task's default schedule (its steps and where they come from: "gensor", "tensor cores" or "rules"; ``mode``:
  :func:`_mode`'s), the seconds
  choosing took, and the static model's analysis of the chosen kernel where choosing made one (its
  :mod:`~minicomp.search.static.cache` entry, which a worker of ``jobs`` hands to the main process for
  ``estimate()`` and ``save``); the same in this process and in a worker."""
  from minicomp.search.static import cache
  stats = CompileStats()
  own, built = built is None, built or Builds(target)
  rules = lambda: build_rule_based(task.dag, built, name, task.key)   # noqa: E731 -- (built when needed)
  kernel, sched, origin = _construct(task, built, name, rules, stats, _TENSOR_CORES[mode], mode.startswith("compare"),
                                     walked, mode.endswith(ALWAYS)) if mode in _TENSOR_CORES else rules()
  if own: stats.build, stats.nvrtc = built.seconds["lower_emit"], built.seconds["nvrtc"]
  key = cache.key(kernel, target.device)
  facts = cache.peek(key)
  return sched.to_json(), origin, stats, (key, facts) if facts is not None else None


def choose_defaults(group: list[tuple[Task, str]], target: Target, mode: str, built: Builds | None = None) -> list:
  """:func:`choose_default` of each (task, kernel name) of ``group``, in order, the tasks sharing one walk
  (:class:`Walked`): the first whose construction walks hands its best states to the others of its domain, which
  rank them by their own analytic model instead of walking (:func:`_same_walks` groups the tasks: a convolution with
  and without its residual add, say). In ResNet-18 7 of 21 tasks (64x64, sm_86, 2026-12-02: the same analytic cost
  as their own walks' first candidates on all 7, the same kernel on 6; docs/search.md)."""
  walked = Walked()
  return [choose_default(t, target, name, mode, built, walked) for t, name in group]


def _same_walks(todo: list[TaskBuild]) -> list[list[TaskBuild]]:
  """``todo`` in groups whose walks are likely the same (:func:`walk_key`), each in ``todo``'s order, the groups in
  the order of their first task."""
  groups: dict = {}
  for b in todo:
    k = walk_key(b.task)
    groups.setdefault(id(b) if k is None else k, []).append(b)
  return list(groups.values())


def walk_key(task: Task) -> tuple | None:
  """The shapes and types of ``task``'s reductions, which tasks of the same walk domain share (``gensor.domain``,
  checked where the walk is shared: it needs the sketches, which the worker makes); None for a task whose walk is
  short (no op of :data:`RULES_NEVER_WIN`) or that has no reduction."""
  if not set(task.ops) & RULES_NEVER_WIN: return None
  red = tuple((t.shape, t.dtype, tuple(int(a.extent.arg) for a in t.reduce_axes), tuple(x.shape for x in t.inputs))
              for t in task.dag.tensors if not t.is_placeholder and t.reduce_axes)
  return red or None


def _choose_defaults(todo: list[TaskBuild], target: Target, opts, stats: CompileStats, built: Builds, shown):
  """(task build, (steps, origin)) for every task of ``todo``, in order, chosen in the groups of :func:`_same_walks`
  (:func:`choose_defaults`), the longest first (:func:`_expected_work`). With ``opts.jobs`` > 1 and several groups,
  ``opts.jobs - 1`` worker processes (:func:`~minicomp.search.workers.own_work_pool`) and this one take the next
  group whenever they are free (:func:`~minicomp.search.workers.share_work`): this process works instead of
  waiting, and one worker fewer starts (a worker's start, importing minicomp and starting its NVRTC child, costs
  ~0.5 CPU s, a sixth of BERT-tiny's compile on two cores; benchmarks/README.md). Where the pool breaks (a worker
  killed, by the out-of-memory killer say), the groups it held are chosen here, with a warning."""
  def account(s: CompileStats) -> None:
    stats.construct += s.construct; stats.estimate += s.estimate; stats.constructed += s.constructed
    stats.tensor_cores += s.tensor_cores; stats.seeded += s.seeded
    built.seconds["lower_emit"] += s.build; built.seconds["nvrtc"] += s.nvrtc     # (a worker's builds; 0 here)

  def chosen(b: TaskBuild, steps: str, origin: str) -> None:
    done[id(b)] = (steps, origin)
    shown.set_postfix_str("+".join(b.task.ops)[:40], refresh=False)
    shown.update()

  def here(g: list[TaskBuild]) -> None:
    check_interrupt()
    for b, (steps, origin, s, _) in zip(g, choose_defaults([(b.task, b.name) for b in g], target, _mode(opts), built)):
      account(s)
      chosen(b, steps, origin)

  def from_worker(g: list[TaskBuild], results: list) -> None:
    for b, (steps, origin, s, analysed) in zip(g, results):
      account(s)
      if analysed is not None: cache.put(*analysed)
      chosen(b, steps, origin)

  from minicomp.search.static import cache
  from minicomp.search.workers import own_work_pool, share_work
  done: dict[int, tuple[str, str]] = {}
  groups = sorted(_same_walks(todo), key=lambda g: _expected_work(g[0].task), reverse=True)
  pool = own_work_pool(opts.jobs, "choosing schedules") if opts.jobs > 1 and len(groups) > 1 else None
  if pool is None:
    for g in groups: here(g)
    return [(b, done[id(b)]) for b in todo]
  submit = lambda g: pool.submit(choose_defaults, [(b.task, b.name) for b in g], target, _mode(opts))  # noqa: E731
  returned, error = share_work(groups, opts.jobs - 1, here, submit, from_worker)
  if returned:
    log.warning("choosing schedules: a worker process died (%s); the %d tasks it held were chosen in this process",
                error, sum(len(g) for g in returned))
  return [(b, done[id(b)]) for b in todo]


def _expected_work(task: Task) -> tuple[bool, int, int]:
  """How long choosing ``task``'s schedule will take, to order the pool's work: a convolution's or matmul's
  (:data:`RULES_NEVER_WIN`: the longest walks, several builds) far longer than the rest; among them, NVVM's time
  (most of it) grows faster than the unrolled reduction the kernel runs (the longest reduction of the task's
  stages, up to the construction's unroll); then the flops. On BERT-tiny's 11 tasks, their serial times measured
  and scheduled on two workers (2026-11-30), this order takes 1.0x the ideal time, the model's order 1.4x: its
  512-long reduction, 40% of the work, came last."""
  from minicomp.search.static.analytic import UNROLL_DEFAULT
  longest = max((math.prod(int(a.extent.arg) for a in t.reduce_axes) for t in task.dag.tensors if not t.is_placeholder),
                default=1)
  return bool(set(task.ops) & RULES_NEVER_WIN), min(longest, UNROLL_DEFAULT), task.flops


ALWAYS = "-tensor-cores-always"   # a mode's suffix under MINICOMP_TENSOR_CORES=always (_mode)
_TENSOR_CORES = {f"{s}{t}{a}": tc for s in ("gensor", "compare")   # Gensor's modes (_mode) -> tensor cores
                 for t, tc in (("", "half"), ("+tf32", "tf32"), ("-fp32-pipes", "off"))
                 for a in ("", ALWAYS) if not (a and tc == "off")}


def _mode(opts) -> str:
  """How default schedules are chosen, which the schedule cache keys its choices by: "rules", "gensor" (Gensor's
  candidates, and tensor-core ones for half matmuls), "gensor+tf32" (``precision="tf32"``: also for float32
  matmuls, on TF32) or "gensor-fp32-pipes" (``MINICOMP_TENSOR_CORES=0``: no tensor-core candidates); with
  ``schedules="compare"`` the same three named "compare", "compare+tf32", "compare-fp32-pipes".
  ``MINICOMP_TENSOR_CORES=always`` adds :data:`ALWAYS` to the first two of each: a task the tensor cores take keeps
  one of their schedules, whatever the static model estimates for the FP32 pipes."""
  from minicomp.codegen.cache import switched_on
  if opts.schedules == "rules": return opts.schedules
  if not switched_on("MINICOMP_TENSOR_CORES"): return f"{opts.schedules}-fp32-pipes"
  always = ALWAYS if os.environ.get("MINICOMP_TENSOR_CORES", "").strip().lower() == "always" else ""
  return f"{opts.schedules}{'+tf32' if opts.precision == 'tf32' else ''}{always}"


def _from_cache(b: TaskBuild, cache: ScheduleCache, built: Builds, tkey: str, stats: CompileStats, mode: str) -> bool:
  """The task's schedule from the schedule cache, built; False when there is none or it no longer builds."""
  hit = cache.get(b.task.key, tkey, mode)
  if hit is None: return False
  names = [t.name for t in b.task.dag.tensors]
  rename = {a: n for a, n in zip(hit.stages, names) if a != n} if len(hit.stages) == len(names) else {}
  try:
    sched = Schedule.from_json(b.task.dag, rename_stages(hit.steps, rename))
    built.kernel(sched, b.name)
  except BUILD_ERRORS as e:
    log.info("task %s: its cached schedule no longer builds (%s); choosing again", b.task.key, e)
    return False
  b.schedule, b.origin = sched, hit.origin
  stats.cached += 1
  stats.constructed += hit.origin == "gensor"
  stats.tensor_cores += hit.origin == "tensor cores"
  return True


def _timed(st: CompileState) -> None:
  """The seconds every build took so far, into the compile's statistics."""
  st.stats.build, st.stats.nvrtc = st.built.seconds["lower_emit"], st.built.seconds["nvrtc"]


# ---- the phases, in order: each fills in its fields of the CompileState

def import_onnx(st: CompileState) -> CompileState:
  """ONNX -> Graph: read and check the model, infer shapes, fold constants (frontend/onnx_import.py)."""
  st.graph = onnx_loader()(st.model, st.options.input_shapes)
  return st


def rewrite_graph(g: Graph) -> Graph:
  """The rewrites that change no result: each BatchNormalization folded into the Conv before it (graph/fold.py),
  sibling matmuls merged (graph/horizontal.py). ``minicomp info`` lists the kernels of the graph they make."""
  return merge_sibling_matmuls(fold_batchnorm(g))


def fold_graph(st: CompileState) -> CompileState:
  """Graph -> Graph: :func:`rewrite_graph`."""
  st.graph = rewrite_graph(st.graph)
  return st


def set_precision(st: CompileState) -> CompileState:
  """Graph -> Graph: the float types it is computed in: its own, float32, or autocast to a half type
  (frontend/precision.py)."""
  st.graph = apply_precision(st.graph, st.options.precision)
  return st


def choose_layouts(st: CompileState) -> CompileState:
  """Graph -> Graph: the constant weights of the convolutions the tensor cores can take stored channels-last
  (graph/layout.py), in the modes that offer tensor-core schedules; otherwise unchanged."""
  tc = _TENSOR_CORES.get(_mode(st.options), "off")
  if tc != "off": st.graph = channels_last_weights(st.graph, st.target, tf32=tc == "tf32")
  return st


def partition_graph(st: CompileState) -> CompileState:
  """Graph -> fused groups (one kernel each) and views, in execution order (graph/partition.py)."""
  st.partition = partition(st.graph)
  return st


def make_tasks(st: CompileState) -> CompileState:
  """Groups -> tensor expressions (graph/subgraph.py) -> Tasks, one per distinct workload key (graph/tasks.py);
  and the launch order: a KernelCall per group, with its weights, and a ViewStep per view."""
  g = st.graph
  for step in st.partition.steps:
    if isinstance(step, tuple):
      _, node = step
      out = nodes_to_te(g, [node]).outputs[node.outputs[0]]
      st.steps.append(ViewStep(next(i for i in node.inputs if i and not (i in g.values and g.values[i].is_const)),
                               node.outputs[0], tuple(out.shape), node.op_type))
      continue
    te_ = nodes_to_te(g, step.nodes, step.outputs)
    outs = [o for o in step.outputs if isinstance(te_.outputs[o], Tensor)]
    for o in step.outputs:
      if not isinstance(te_.outputs[o], Tensor): st.consts[o] = np.asarray(te_.outputs[o])
    if not outs: continue
    dag = ComputeDAG([te_.outputs[o] for o in outs])
    key = workload_key(dag)
    ops = [n.op_type for n in step.nodes]
    if key in st.tasks: st.tasks[key].weight += 1
    else: st.tasks[key] = Task(key, dag, task_kind(dag), 1, ops, dag.flop_count())
    by_tensor = {t.name: v for v, t in te_.inputs.items()}
    ins = []
    for ph in dag.placeholders:
      if ph.name in te_.consts:
        wname = f"{len(st.steps)}:{ph.name}"
        st.weights[wname] = te_.consts[ph.name]
        ins.append(("const", wname))
      else:
        ins.append(("value", by_tensor[ph.name]))
    st.steps.append(KernelCall(-1, ins, outs, key, ops, dag.flop_count()))
    st.calls.append((st.steps[-1], key))
  st.stats.tasks, st.stats.calls = len(st.tasks), len(st.calls)
  return st


def choose_schedules(st: CompileState) -> CompileState:
  """Task -> Schedule: every task's default schedule, then its best tuning record where there is one
  (``trials`` / ``log_file``: :func:`minicomp.search.tune.tune_tasks`). The default is Gensor's construction
  where the static model estimates it faster than the rule-based schedule of graph/schedules.py
  (``schedules="gensor"``), else the rule-based one. Comparing them means building them (through
  ``st.built``, which the next phases build the chosen schedules through, so none is built twice)."""
  opts, stats = st.options, st.stats
  st.built = Builds(st.target)
  cache = ScheduleCache() if opts.schedules != "rules" else None
  tkey = st.target.device_name or st.target.arch
  cal = active_calibration(st.target.device)
  if cal is not None: tkey += f"+calibration:{cal.digest}"     # (choices made under another calibration are not reused)
  what = "constructing schedules (Gensor)" if opts.schedules != "rules" else "default kernels"
  with bar(len(st.tasks), f"[minicomp] {what}", opts.progress, unit="task") as shown:
    for k, (key, task) in enumerate(st.tasks.items()):
      shown.set_postfix_str("+".join(task.ops)[:40], refresh=False)
      b = st.builds[key] = TaskBuild(task, f"task{k}")
      if cache is not None and _from_cache(b, cache, st.built, tkey, stats, _mode(opts)): shown.update()
    todo = [b for b in st.builds.values() if b.schedule is None]
    for b, (steps, origin) in _choose_defaults(todo, st.target, opts, stats, st.built, shown):
      b.schedule, b.origin = Schedule.from_json(b.task.dag, steps), origin
      if cache is not None:
        cache.put(b.task.key, tkey, _mode(opts), steps, origin, [t.name for t in b.task.dag.tensors])
    for b in st.builds.values(): b.default = (b.schedule, b.origin)
  if opts.trials or opts.log_file:
    from minicomp.search.tune import tune_tasks
    tuned = tune_tasks(list(st.tasks.values()), st.target, trials=opts.trials, strategy=opts.strategy,
                       log_file=opts.log_file, seed=opts.seed, measurer=opts.measurer,
                       measures_per_round=opts.measures_per_round, time_budget_s=opts.time_budget_s,
                       progress=opts.progress, cluster=opts.cluster,
                       defaults={key: b.schedule.to_json() for key, b in st.builds.items()})
    for key, b in st.builds.items():
      if key not in tuned: continue
      try:
        b.schedule, b.origin = Schedule.from_json(b.task.dag, tuned[key]), "tuned"
      except BUILD_ERRORS as e:
        _fall_back(b, e)
  _timed(st)
  return st


def lower_tasks(st: CompileState) -> CompileState:
  """Schedule -> loop-nest Program (ir/lower.py), checked against the target's limits (codegen/verify.py)."""
  for b in st.builds.values():
    try:
      b.program = st.built.program(b.schedule, b.name)
    except BUILD_ERRORS as e:
      _fall_back(b, e)
      b.program = st.built.program(b.schedule, b.name)
  _timed(st)
  return st


def emit_tasks(st: CompileState) -> CompileState:
  """Program -> CUDA C (codegen/cuda.py)."""
  for b in st.builds.values(): b.source = st.built.source(b.schedule, b.name)
  _timed(st)
  return st


def nvrtc_tasks(st: CompileState) -> CompileState:
  """CUDA C -> PTX and CUBIN with ptxas's resource usage (codegen/nvrtc.py), wrapped in a Kernel with its
  launch plan (codegen/kernel.py)."""
  tuned = [b for b in st.builds.values() if b.origin == "tuned"]
  with bar(len(tuned), "[minicomp] tuned kernels", st.options.progress and bool(tuned), unit="task") as shown:
    for b in st.builds.values():
      try:
        b.kernel = st.built.kernel(b.schedule, b.name)
      except BUILD_ERRORS as e:
        _fall_back(b, e)
        b.program, b.source = st.built.program(b.schedule, b.name), st.built.source(b.schedule, b.name)
        b.kernel = st.built.kernel(b.schedule, b.name)
      if b in tuned: shown.update()
  _timed(st)
  return st


def link_model(st: CompileState) -> CompileState:
  """Kernels + launch order + weights -> CompiledModel: each call gets its task's kernel; the model's
  inputs, outputs, folded constant outputs and index checks (compiled_model.py plans the buffer pool)."""
  g = st.graph
  kernel_of = {key: k for k, key in enumerate(st.builds)}
  for call, key in st.calls: call.kernel = kernel_of[key]
  inputs = [IOSpec(n, tuple(g.values[n].shape), g.boundary.get(n, g.values[n].dtype)) for n in g.inputs]
  for o in g.outputs:   # outputs that are folded constants
    if o in g.values and g.values[o].is_const: st.consts[o] = g.values[o].const
  st.compiled = CompiledModel(st.target, inputs, list(g.outputs), [b.kernel for b in st.builds.values()], st.steps,
                              st.weights, st.consts, st.options.name or g.name, boundary=g.boundary,
                              index_checks=index_checks(g), tasks=list(st.tasks.values()), stats=st.stats)
  return st


def _jobs(jobs: int | None) -> int:
  """``jobs``, else ``$MINICOMP_JOBS``, else the cores; a CompileError for anything but a positive int."""
  from minicomp.search.workers import default_jobs
  if jobs is None:
    try: jobs = default_jobs()
    except ValueError as e: raise CompileError(str(e)) from None
  if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
    raise CompileError(f"jobs must be a positive int, got {jobs!r}")
  return jobs


PHASES: tuple[Phase, ...] = (
  Phase("import", import_onnx, graph_text),               # ONNX model -> Graph
  Phase("fold", fold_graph, graph_text),                  # Graph -> Graph (BatchNorm folded into Conv)
  Phase("precision", set_precision, graph_text),          # Graph -> Graph (its float types: precision=)
  Phase("layout", choose_layouts, graph_text),            # Graph -> Graph (conv weights channels-last for tensor cores)
  Phase("partition", partition_graph, partition_text),    # Graph -> fused groups and views
  Phase("tasks", make_tasks, tasks_text),                 # groups -> Tasks (ComputeDAGs) + launch order
  Phase("schedule", choose_schedules, schedule_text),     # Task -> Schedule (Gensor, rules or a tuning record)
  Phase("lower", lower_tasks, lower_text),                # Schedule -> loop-nest Program
  Phase("emit", emit_tasks, emit_text, ".cu"),            # Program -> CUDA C
  Phase("nvrtc", nvrtc_tasks, nvrtc_text),                # CUDA C -> PTX / CUBIN + ptxas resources -> Kernel
  Phase("link", link_model, link_text),                   # Kernels + launch order + weights -> CompiledModel
)
PHASE_NAMES = tuple(p.name for p in PHASES)


def _kernels_line(st: CompileState) -> str:
  s, tuned = st.stats, sum(b.origin == "tuned" for b in st.builds.values())
  return (f"{len(st.builds)} kernels: {tuned} tuned, {len(st.builds) - tuned} default schedules "
          f"({s.constructed} constructed by Gensor" + (f" ({s.seeded} from a like task's walk)" if s.seeded else "")
          + ", " + (f"{s.tensor_cores} on tensor cores, " if s.tensor_cores else "")
          + f"{s.cached} from the schedule cache; {s.construct:.2f} s constructing, {s.estimate:.2f} s "
          f"estimating, {s.build + s.nvrtc:.2f} s building, NVRTC {s.nvrtc:.2f} s of it)")


PROGRESS = {   # the line ``progress=True`` prints after a phase
  "precision": lambda st: (f"imported {st.graph.name}: {len(st.graph.nodes)} nodes after constant folding"
                           + (f", precision {st.options.precision}" if st.options.precision else "")
                           + f" ({st.stats.frontend:.2f} s)"),
  "tasks": lambda st: (f"partitioned into {len(st.calls)} kernel calls, {len(st.tasks)} distinct tasks "
                       f"({st.stats.partition:.2f} s)"),
  "nvrtc": _kernels_line,
}


def compile(model, target: str | Target = "sm_86", input_shapes: Mapping[str, Sequence[int]] | None = None,
            trials: int = 0, progress: bool | None = None, name: str | None = None, strategy: str = "ansor",
            log_file: str | None = None, seed: int = 0, measurer=None, measures_per_round: int = 64,
            time_budget_s: float | None = None, schedules: str = "gensor",
            dump_after: str | Sequence[str] | None = None, dump_dir: str | Path | None = None,
            jobs: int | None = None, precision: str | None = None, cluster=None) -> CompiledModel:
  """Compile an ONNX model (ModelProto, path or bytes) for ``target``: run :data:`PHASES` in order.

  ``input_shapes`` gives concrete shapes for dynamic input dims: by input (``{"x": (1, 3, 224, 224)}``) or
  by the name of a symbolic dim (``{"batch": 1}``).

  Schedules: every task first gets a default schedule without measuring anything. With
  ``schedules="gensor"`` (the default) that is Gensor's construction
  (``minicomp.search.strategies.gensor``, about a second per task): its analytic model's first candidate, kept
  unless the static model estimates a tensor-core or the rule-based schedule faster;
  ``schedules="compare"`` also builds the candidates that model cannot separate and keeps the one the full static
  model estimates fastest: 1.3-1.9x the compile time, kernels 0-6% faster by the static model (docs/search.md);
  ``schedules="rules"`` uses the rule-based schedules alone (fastest to compile, slowest kernels); ``"quick"`` is
  the default's former name.
  With ``trials=N`` the tasks are tuned (``minicomp.search.tune``) with ``strategy`` ("ansor",
  "felix", "felix-pre", "gensor", "opevo", "tuna" or "random", or a Strategy object) until the log holds N measurements for them in total (so
  re-running a killed command resumes it), then each task is compiled with its best measured
  schedule. With ``log_file`` and ``trials=0`` the best record per task is applied without any
  search. Tasks without a valid record keep the default schedule, and so do tasks whose default schedule
  measures at least as fast as their best record (it is measured once and logged as a record
  with strategy "default"). Only records that replay to a valid schedule of their task count: the
  best valid one wins. ``measurer`` (a Measurer, ``"gpu"`` or ``"static"``) fixes the one measurement kind of
  the call, also with ``trials=0``: GPU timings when it measures on a GPU, else static-model estimates;
  by default the GPU when one of the target's arch is present, else the static model (every cost an
  estimate). Records of the other kind are ignored with a warning. ``progress=True`` shows progress on
  stderr: a line per phase, and bars over the kernels built and the tuning trials; ``progress=None`` (the
  default) one line when the compile is done (what it built, in how many seconds); ``False`` nothing. Bad tuning
  arguments (``trials="4"``) raise ``TuneError`` before any work.

  ``jobs``: processes that choose default schedules at once (default ``$MINICOMP_JOBS``, else one per
  core): this one and ``jobs - 1`` workers of the shared pool, which skip the main script (a script that
  registers sketch rules or schedule steps of its own and compiles outside ``if __name__ == "__main__":`` is
  compiled in one process instead, said in the log); the kernels are the same for any ``jobs``.

  ``precision``: the float types the model is computed in. None (the default): its own (a float16 or bfloat16
  model's kernels load and store its type and compute in float32, accumulating in float32); ``"fp32"``: float32
  throughout (a half model's inputs and outputs keep their type); ``"tf32"``: float32, and the MatMul / Gemm /
  Conv layers may run on the tensor cores with their operands rounded to TF32 (10 mantissa bits, as PyTorch's
  ``allow_tf32``; docs/tensor_cores.md); ``"fp16"`` / ``"bf16"``: autocast an fp32
  model as ``torch.autocast`` does (matmuls and convolutions in the half type, exp, log, pow, sums, softmax and
  the norms in float32, every other op in the widest type of its inputs; the model's inputs and outputs keep
  their types). See docs/precision.md.

  ``cluster``: tune on a Ray cluster (``"ray://HOST:PORT"``, ``"HOST:PORT"``, ``"auto"``, or a
  :class:`~minicomp.search.cluster.Cluster`): the candidates are built and measured on its nodes (static-model
  estimates on CPU tasks; GPU timings on nodes offering a GPU and the target's arch as a resource), the log is
  written here. Connected only with ``trials`` > 0, before any other work: an unreachable cluster is a
  ``ClusterError`` at once. See docs/cluster.md.

  ``dump_after``: a phase name of :data:`PHASE_NAMES` (``"lower"``), several (a list, or comma-separated),
  or ``"all"``: after each, its output is printed as text to stderr: the graph (import, fold), the fused
  groups (partition), the tasks with their tensor expressions (tasks), and per task its schedule's steps
  and loops (schedule), its loop nest (lower), its CUDA C (emit), ptxas's registers, shared memory and
  spills per kernel (nvrtc); finally the model's summary (link). ``dump_dir``: write them to files there
  instead, one per phase and task (``08-lower-task0.txt``, ``09-emit-task0.cu``); every phase when
  ``dump_after`` is not given. An unknown phase is a ``CompileError`` naming the phases, before any work.
  """
  from minicomp.search.tune import check_options
  check_options(trials, seed, strategy, log_file, measurer, measures_per_round, time_budget_s, cluster)
  tgt = as_target(target)
  check_precision(precision)
  schedules = SCHEDULE_ALIASES.get(schedules, schedules)
  if schedules not in SCHEDULES:
    raise CompileError(f"unknown schedules={schedules!r}; known: {', '.join(SCHEDULES)}")
  dumps = dump_phases("all" if dump_after is None and dump_dir is not None else dump_after, PHASE_NAMES)
  dump = Dumper(dumps, dump_dir) if dumps else None
  t0 = time.perf_counter()
  with connected(cluster if trials else None) as clus:
    opts = CompileOptions(input_shapes=input_shapes, schedules=schedules, trials=trials, strategy=strategy,
                          log_file=log_file, seed=seed, measurer=measurer, measures_per_round=measures_per_round,
                          time_budget_s=time_budget_s, progress=bool(progress), name=name, jobs=_jobs(jobs),
                          precision=precision, cluster=clus)
    st = run_phases(PHASES, CompileState(model, tgt, opts), dump, PROGRESS)
  if progress is None:
    say(f"compiled {st.compiled.name} for {tgt} in {time.perf_counter() - t0:.1f} s: {len(st.calls)} kernel calls, "
        + _kernels_line(st))
  return st.compiled


def model_tasks(model, target: str | Target = "sm_86", input_shapes: Mapping[str, Sequence[int]] | None = None,
                precision: str | None = None) -> list[tuple[Task, list[np.ndarray | None]]]:
  """The distinct tasks of an ONNX model as ``compile`` makes them (its phases up to "tasks", nothing scheduled or
  built), each with the constant inputs of its first kernel call: per placeholder of ``task.dag``, in order, the
  weight array it is called with, or None for a value the model computes (or takes as input). Heaviest first
  (flops x calls)."""
  check_precision(precision)
  opts = CompileOptions(input_shapes=input_shapes, precision=precision)
  upto = PHASES[:PHASE_NAMES.index("tasks") + 1]
  st = run_phases(upto, CompileState(model, as_target(target), opts))
  first: dict[str, KernelCall] = {}
  for call, key in st.calls: first.setdefault(key, call)
  out = [(t, [st.weights[name] if kind == "const" else None for kind, name in first[key].inputs])
         for key, t in st.tasks.items()]
  return sorted(out, key=lambda tc: -tc[0].flops * tc[0].weight)
