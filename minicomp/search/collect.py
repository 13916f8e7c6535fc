"""``minicomp collect``: time a spread of programs on this machine's GPU, for calibrating the static model.

The tasks are workloads (``minicomp.workloads`` calls; by default :data:`STANDARD`, the tasks the shipped
calibration was fitted on) or the layers of a user's own ONNX model (``model=``: its heaviest tasks as
``compile`` makes them, ``compiler.model_tasks``). For each, the programs are Gensor's construction's best few
(the fast end, where a search chooses) and random valid programs drawn from the sketches (the spread), and on a
task the tensor cores take (half operands) compile's tensor-core template in its tile sizes and pipeline depths
first (what compile chooses from there). Each is
built for the GPU's arch, run once and checked against a numpy reference -- the workload's own (computed in
float32 from half inputs), or for a model's task its tensor expressions evaluated by :mod:`minicomp.ir.reference`
on the model's weights and random activations --, timed with CUDA events (the L2 flushed before every run; the
median), and analysed by the static model for the GPU's device entry; then it is appended to the timings dataset
(:mod:`.static.timings`; default: the cache folder's ``timings/<arch>.jsonl``), one line per program as it
finishes. A program already in the file (same task and steps) is not timed again, so a stopped collection
resumes where it stopped. ``minicomp calibrate`` then fits the static model to these timings.
"""
from __future__ import annotations

import datetime
import hashlib
import itertools
import logging
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from minicomp.errors import MinicompError, UsageError

log = logging.getLogger("minicomp")

STANDARD = (   # the shipped calibration's tasks that are workloads (its ConvTranspose and Conv3d are ONNX nodes)
  "conv2d(1, 64, 56, 56, 64, 3, 1, 1)",
  "conv2d(1, 512, 7, 7, 512, 3, 1, 1)",
  "depthwise_conv2d(1, 32, 112, 112, 3, 1, 1)",
  "matmul(1024, 1024, 1024)",
  "batch_matmul(12, 128, 128, 64)",
  "softmax(4096, 1024)",
)
MODEL_TASKS = 8           # a model's tasks collected by default: the heaviest (flops x calls)
CONSTRUCTED_SHARE = 4     # one program in this many from Gensor's construction, the rest random
RTOL = ATOL = 2e-3        # against numpy (float32 sums in another order: as the H100 timings were checked;
                          # half outputs: within their type's resolution, measure.results_agree)


@dataclass
class Collected:
  """What one collection did: programs timed now, already in the file, failed (not built, wrong or not run)."""
  path: Path
  gpu: str
  arch: str
  timed: int = 0
  skipped: int = 0
  wrong: int = 0
  failed: int = 0

  def __str__(self) -> str:
    return (f"{self.timed} programs timed on {self.gpu} ({self.arch}), {self.skipped} already there, "
            f"{self.wrong} wrong results, {self.failed} failed -> {self.path}")


def _digest(task: str, steps: str) -> str:
  return hashlib.sha256(f"{task}\0{steps}".encode()).hexdigest()[:16]


def programs(dag, name: str, target, per_task: int, seed: int) -> list[str]:
  """Up to ``per_task`` distinct schedules (steps JSON) of a task: on a task the tensor cores take, compile's
  tensor-core template in its configurations (up to half of them: ``tensor_core_variants``); then Gensor's best,
  then random ones."""
  from minicomp.graph.tensor_core_schedules import tensor_core_variants
  from minicomp.search.annotate import sample_population
  from minicomp.search.sketch import generate_sketches
  from minicomp.search.strategies.gensor import construct
  out = [s.to_json() for s in tensor_core_variants(dag, target)[:max(1, per_task // 2)]]
  try:
    res = construct(dag, target, seed=seed, keep=max(1, per_task // CONSTRUCTED_SHARE))
    out += [c.schedule.to_json() for c in res.candidates]
  except MinicompError as e:
    log.info("%s: Gensor's construction failed (%s); random programs only", name, e)
  rng = np.random.default_rng(seed)
  sketches = generate_sketches(dag, target)
  if sketches:
    out += [c.key for c in sample_population(sketches, per_task - len(out), rng, target, exclude=set(out))]
  return list(dict.fromkeys(out))[:per_task]


@dataclass
class _Task:
  """One task to collect: its name in the dataset, its workload call (None for a model's), DAG, inputs, reference."""
  name: str
  call: str | None
  dag: object
  args: list
  want: list


def _workload_tasks(wls, seed: int):
  """``wls``: (call, Workload) pairs; each with its inputs and its numpy reference, when its turn comes."""
  from minicomp.ir.dag import ComputeDAG
  from minicomp.ir.ops import HALF_DTYPES
  for call, wl in wls:
    args = wl.random_inputs(seed)
    want = wl.reference(*[a.astype(np.float32) if a.dtype.name in HALF_DTYPES else a for a in args])   # (not in half)
    yield _Task(wl.name, call, ComputeDAG(wl.outputs), args, list(want) if isinstance(want, (tuple, list)) else [want])


def model_task_name(task) -> str:
  """A model task's name in the dataset: readable, and the same for the same computation in any model."""
  return f"{task.label} [{task.key[:8]}]"


def _model_tasks(tasks, max_tasks: int, seed: int):
  """The heaviest ``max_tasks`` of a model's ``tasks`` (``compiler.model_tasks``), on its weights and random
  activations (normal floats), each with its reference when its turn comes; a task that takes an integer the model
  computes (indices: their valid range is the model's business) is skipped."""
  from minicomp.ir.ops import FLOAT_DTYPES, NP_DTYPE
  from minicomp.ir.reference import evaluate_dag
  rng = np.random.default_rng(seed)
  n = 0
  for task, consts in tasks:
    if n >= max_tasks: break
    phs = task.dag.placeholders
    ints = [p.name for p, c in zip(phs, consts) if c is None and p.dtype not in FLOAT_DTYPES]
    if ints:
      log.warning("%s: not collected: it reads %s, integers the model computes", task.label, ", ".join(ints))
      continue
    args = [c if c is not None else rng.standard_normal(p.shape).astype(NP_DTYPE[p.dtype]) for p, c in zip(phs, consts)]
    n += 1
    yield _Task(model_task_name(task), None, task.dag, args, evaluate_dag(task.dag, args))


def program_facts(kern, dev) -> dict:
  """What the timings format keeps of a built program: the static model's facts of each launch on device ``dev``,
  with the device's and minicomp's names (docs/static_model.md)."""
  from minicomp import __version__
  from minicomp.search.static.estimate import launch_facts
  return {"device": dev.name, "minicomp": __version__, "launches": [asdict(f) for f in launch_facts(kern, dev)]}


def collect(workloads=STANDARD, per_task: int = 32, seed: int = 0, out: str | Path | None = None,
            backend: str | None = None, min_total_s: float = 0.02, max_repeats: int = 50,
            progress: bool = True, model=None, input_shapes=None, precision: str | None = None,
            max_tasks: int = MODEL_TASKS) -> Collected:
  """Time programs of ``workloads`` (``minicomp.workloads`` calls) and of the ``max_tasks`` heaviest tasks of ONNX
  ``model`` (a path, bytes or ModelProto, with ``input_shapes`` and ``precision`` as ``compile`` takes them) on
  the GPU and append them to ``out`` (default: :func:`.static.timings.default_path` of the GPU's arch). Without a
  GPU: a NoGPUError saying so."""
  import minicomp as mc
  from minicomp import workloads as W
  from minicomp.codegen.driver import get_driver
  from minicomp.codegen.gpu_runtime import GpuModule, time_plan
  from minicomp.ir.schedule import Schedule
  from minicomp.progress import bar, check_interrupt
  from minicomp.search.measure import results_agree
  from minicomp.search.static import timings as T
  from minicomp.target import Target, resolve_gpu_target
  if per_task < 1: raise UsageError(f"per_task must be at least 1, not {per_task}")
  if model is not None and max_tasks < 1: raise UsageError(f"max_tasks (--tasks) must be at least 1, not {max_tasks}")
  wls = [(call, W.from_call(call)) for call in workloads or ()]     # (a bad call refused before the GPU is asked)
  drv = get_driver(backend)                    # (NoGPUError when there is none: collecting needs the GPU)
  gpu = drv.info().name
  arch, device = resolve_gpu_target("cuda")
  target = Target(device) if device else Target(arch)
  dev = target.device
  path = Path(out) if out is not None else T.default_path(arch)
  have = {_digest(r.task, r.steps) for r in T.read(path)} if path.exists() else set()
  done = Collected(path, gpu, arch)
  today = datetime.date.today().isoformat()
  tasks = _workload_tasks(wls, seed)
  if model is not None:     # (the model read and partitioned before any timing: a bad one is refused at once)
    from minicomp.compiler import model_tasks
    tasks = itertools.chain(tasks, _model_tasks(model_tasks(model, target, input_shapes, precision), max_tasks, seed))
  for job in tasks:
    todo = programs(job.dag, job.name, target, per_task, seed)
    with bar(len(todo), f"[minicomp] collect {job.name}", progress, unit="program") as shown:
      for steps in todo:
        check_interrupt()
        shown.update()
        if _digest(job.name, steps) in have:
          done.skipped += 1
          continue
        try:
          kern = mc.build(Schedule.from_json(job.dag, steps), target)
          got = kern.run(job.args, device=backend or "gpu")
          correct = results_agree(got, job.want, RTOL, ATOL)
          times = time_plan(GpuModule(kern.binary, drv), kern.plan, job.args, min_total_s, max_repeats)
          facts = program_facts(kern, dev)
        except MinicompError as e:
          log.info("%s: a program failed (%s)", job.name, e)
          done.failed += 1
          continue
        T.append(path, [T.Timing(job.name, job.call, arch, steps, gpu, today, float(np.median(times)), correct, facts)])
        have.add(_digest(job.name, steps))
        done.timed += 1
        done.wrong += not correct
  return done
