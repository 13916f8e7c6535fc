"""``minicomp collect``: time a spread of programs on this machine's GPU, for calibrating the static model.

For each workload (a ``minicomp.workloads`` call; by default :data:`STANDARD`, the tasks the shipped
calibration was fitted on), the programs are Gensor's construction's best few (the fast end, where a
search chooses) and random valid programs drawn from the sketches (the spread). Each is built for the GPU's
arch, run once and checked against the workload's numpy reference (computed in float32 from half inputs), timed
with CUDA events (the L2 flushed before every run; the median), and analysed by the static model for the GPU's
device entry; then it is appended to the timings dataset (:mod:`.static.timings`; default: the cache folder's
``timings/<arch>.jsonl``), one line per program as it finishes. A program already in the file (same task
and steps) is not timed again, so a stopped collection resumes where it stopped. ``minicomp calibrate``
then fits the static model to these timings.
"""
from __future__ import annotations

import datetime
import hashlib
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


def programs(wl, target, per_task: int, seed: int) -> list[str]:
  """Up to ``per_task`` distinct schedules (steps JSON) of a workload: Gensor's best first, then random ones."""
  from minicomp.ir.dag import ComputeDAG
  from minicomp.search.annotate import sample_population
  from minicomp.search.sketch import generate_sketches
  from minicomp.search.strategies.gensor import construct
  dag = ComputeDAG(wl.outputs)
  out: list[str] = []
  try:
    res = construct(dag, target, seed=seed, keep=max(1, per_task // CONSTRUCTED_SHARE))
    out += [c.schedule.to_json() for c in res.candidates]
  except MinicompError as e:
    log.info("%s: Gensor's construction failed (%s); random programs only", wl.name, e)
  rng = np.random.default_rng(seed)
  sketches = generate_sketches(dag, target)
  if sketches:
    out += [c.key for c in sample_population(sketches, per_task - len(out), rng, target, exclude=set(out))]
  return list(dict.fromkeys(out))[:per_task]


def program_facts(kern, dev) -> dict:
  """What the timings format keeps of a built program: the static model's facts of each launch on device ``dev``,
  with the device's and minicomp's names (docs/static_model.md)."""
  from minicomp import __version__
  from minicomp.search.static.estimate import launch_facts
  return {"device": dev.name, "minicomp": __version__, "launches": [asdict(f) for f in launch_facts(kern, dev)]}


def collect(workloads=STANDARD, per_task: int = 32, seed: int = 0, out: str | Path | None = None,
            backend: str | None = None, min_total_s: float = 0.02, max_repeats: int = 50,
            progress: bool = True) -> Collected:
  """Time programs of ``workloads`` (``minicomp.workloads`` calls) on the GPU and append them to ``out``
  (default: :func:`.static.timings.default_path` of the GPU's arch). Without a GPU: a NoGPUError saying so."""
  import minicomp as mc
  from minicomp import workloads as W
  from minicomp.codegen.driver import get_driver
  from minicomp.codegen.gpu_runtime import GpuModule, time_plan
  from minicomp.ir.schedule import Schedule
  from minicomp.progress import bar, check_interrupt
  from minicomp.ir.ops import HALF_DTYPES
  from minicomp.search.measure import results_agree
  from minicomp.search.static import timings as T
  from minicomp.target import Target, resolve_gpu_target
  if per_task < 1: raise UsageError(f"per_task must be at least 1, not {per_task}")
  drv = get_driver(backend)                    # (NoGPUError when there is none: collecting needs the GPU)
  gpu = drv.info().name
  arch, device = resolve_gpu_target("cuda")
  target = Target(device) if device else Target(arch)
  dev = target.device
  path = Path(out) if out is not None else T.default_path(arch)
  have = {_digest(r.task, r.steps) for r in T.read(path)} if path.exists() else set()
  wls = [(call, W.from_call(call)) for call in workloads]
  done = Collected(path, gpu, arch)
  today = datetime.date.today().isoformat()
  for call, wl in wls:
    todo = programs(wl, target, per_task, seed)
    args = wl.random_inputs(seed)
    want = wl.reference(*[a.astype(np.float32) if a.dtype.name in HALF_DTYPES else a for a in args])   # (not in half)
    want = list(want) if isinstance(want, (tuple, list)) else [want]
    with bar(len(todo), f"[minicomp] collect {wl.name}", progress, unit="program") as shown:
      for steps in todo:
        check_interrupt()
        shown.update()
        if _digest(wl.name, steps) in have:
          done.skipped += 1
          continue
        try:
          kern = mc.build(Schedule.from_json(wl.outputs, steps), target)
          got = kern.run(args, device=backend or "gpu")
          correct = results_agree(got, want, RTOL, ATOL)
          times = time_plan(GpuModule(kern.binary, drv), kern.plan, args, min_total_s, max_repeats)
          facts = program_facts(kern, dev)
        except MinicompError as e:
          log.info("%s: a program failed (%s)", wl.name, e)
          done.failed += 1
          continue
        T.append(path, [T.Timing(wl.name, call, arch, steps, gpu, today, float(np.median(times)), correct, facts)])
        have.add(_digest(wl.name, steps))
        done.timed += 1
        done.wrong += not correct
  return done


__all__ = ["STANDARD", "Collected", "collect", "program_facts", "programs"]
