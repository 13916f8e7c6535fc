"""The compiler's plumbing: the state its phases hand on, the phase record, and each phase's output as text.

:mod:`minicomp.compiler` lists the phases (``PHASES``) and runs them in order on one
:class:`CompileState`: each phase is a function ``state -> state`` that reads the fields earlier
phases filled in and fills in its own. After a phase, :func:`run_phases` records its wall time
(``CompileStats.phases``) and, when asked (``compile(dump_after=...)``), prints the phase's output
as text: the graph, the fused groups, the tasks and their tensor expressions, each task's schedule,
loop nest, CUDA C and ptxas resource usage, and finally the compiled model's summary.
"""
from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from minicomp.errors import CompileError
from minicomp.model_parts import CompileStats, KernelCall
from minicomp.target import Target

if TYPE_CHECKING:
  from minicomp.codegen.kernel import Builds, Kernel
  from minicomp.compiled_model import CompiledModel
  from minicomp.frontend.graph import Graph
  from minicomp.graph.partition import Partition
  from minicomp.graph.tasks import Task
  from minicomp.ir.loop import Program
  from minicomp.ir.schedule import Schedule


@dataclass(frozen=True)
class CompileOptions:
  """The arguments of ``minicomp.compile`` that the phases read (see its docstring)."""
  input_shapes: Mapping[str, Sequence[int]] | None = None
  schedules: str = "gensor"
  trials: int = 0
  strategy: str = "ansor"
  log_file: str | None = None
  seed: int = 0
  measurer: Any = None
  measures_per_round: int = 64
  time_budget_s: float | None = None
  progress: bool = False
  name: str | None = None
  jobs: int = 1                    # processes choosing default schedules (compile's ``jobs``, resolved)
  precision: str | None = None     # None: the model's own float types; "fp32", "fp16", "bf16" (frontend/precision.py)
  cluster: Any = None              # a connected search.cluster.Cluster the tuning measures on, or None


@dataclass
class TaskBuild:
  """One task on its way to a kernel: schedule -> lower -> emit -> nvrtc, each phase filling its field
  for every task through the compile's :class:`~minicomp.codegen.kernel.Builds` (so the schedules the
  schedule phase built to compare them are not built again). A tuned schedule that no longer builds
  falls back to the task's default (``default``)."""
  task: Task
  name: str                                  # kernel name prefix: task0, task1, ... in task order
  schedule: Schedule | None = None           # schedule: the chosen schedule
  origin: str = ""                           # schedule: "rules", "gensor" or "tuned"
  default: tuple[Schedule, str] | None = None   # schedule: the default schedule and its origin
  program: Program | None = None             # lower: the loop nest
  source: str | None = None                  # emit: the CUDA C
  kernel: Kernel | None = None               # nvrtc: source + binary + launch plan

  def fall_back(self) -> None:
    """Back to the default schedule (a tuned one failed to build)."""
    assert self.default is not None
    self.schedule, self.origin = self.default


@dataclass
class CompileState:
  """What the phases hand on: ``model``, ``target`` and ``options`` go in, each phase fills its fields."""
  model: Any                                 # the ONNX model: a ModelProto, a path or bytes
  target: Target
  options: CompileOptions
  stats: CompileStats = field(default_factory=CompileStats)
  graph: Graph | None = None                 # import, fold: the model as a graph of ONNX nodes
  partition: Partition | None = None         # partition: fused groups and views, in execution order
  tasks: dict[str, Task] = field(default_factory=dict)       # tasks: distinct ComputeDAGs by workload key
  steps: list = field(default_factory=list)  # tasks: KernelCall / ViewStep in launch order
  calls: list[tuple[KernelCall, str]] = field(default_factory=list)   # tasks: each kernel call, its task key
  weights: dict[str, np.ndarray] = field(default_factory=dict)        # tasks: constant kernel inputs
  consts: dict[str, np.ndarray] = field(default_factory=dict)         # tasks: values folded to constants
  builds: dict[str, TaskBuild] = field(default_factory=dict)          # schedule .. nvrtc: by task key
  built: Builds | None = None                # schedule .. nvrtc: every schedule built, once
  compiled: CompiledModel | None = None      # link


Text = list[tuple[str, str]]   # (part: "" for the whole model or a task's name, text)


@dataclass(frozen=True)
class Phase:
  """A named compiler phase: ``run`` fills in its part of the state; ``text`` shows what it made."""
  name: str
  run: Callable[[CompileState], CompileState]
  text: Callable[[CompileState], Text]
  ext: str = ".txt"                          # file suffix of its dumps


# ---- each phase's output as text

def _short(v) -> str:
  if isinstance(v, np.ndarray): return f"array{list(v.shape)}"
  s = repr(v)
  return s if len(s) <= 60 else s[:57] + "..."


def graph_text(st: CompileState) -> Text:
  """The graph: inputs, one line per node (inputs, outputs with shapes, attributes), outputs."""
  g = st.graph
  val = lambda n: f"{n}: {g.values[n].dtype}{list(g.values[n].shape)}" if n in g.values else n
  def arg(n: str) -> str:
    v = g.values.get(n) if n else None
    if v is None or not v.is_const: return n
    return f"{n} (const {list(v.shape)}" + (f", stored as axes {list(v.layout)})" if v.layout else ")")
  consts = sum(v.is_const for v in g.values.values())
  lines = [f"graph {g.name}: opset {g.opset}, {len(g.nodes)} nodes, {consts} constant values"]
  lines += [f"input {val(n)}" for n in g.inputs]
  for n in g.nodes:
    attrs = "  {" + ", ".join(f"{k}={_short(v)}" for k, v in n.attrs.items()) + "}" if n.attrs else ""
    lines.append(f"{n.name}: {n.op_type}({', '.join(map(arg, n.inputs))}) -> {', '.join(map(val, n.outputs))}{attrs}")
  lines += [f"output {val(n)}" for n in g.outputs]
  return [("", "\n".join(lines))]


def partition_text(st: CompileState) -> Text:
  """The fused groups (one kernel each) and views, in execution order."""
  p = st.partition
  lines = [f"{len(p.groups)} fused groups (kernels), {len(p.steps) - len(p.groups)} views"]
  k = 0
  for s in p.steps:
    if isinstance(s, tuple):
      node = s[1]
      lines.append(f"view {node.op_type} {node.name}: {', '.join(i for i in node.inputs if i)} -> {node.outputs[0]}")
      continue
    anchor = f"  anchor {s.anchor.op_type} {s.anchor.name}" if s.anchor is not None else ""
    lines.append(f"group {k}: {'+'.join(n.op_type for n in s.nodes)}{anchor}  reads {', '.join(s.inputs) or '-'}"
                 f"  -> {', '.join(s.outputs)}")
    k += 1
  return [("", "\n".join(lines))]


def tasks_text(st: CompileState) -> Text:
  """Each distinct task (workload key, kind, weight, ops, FLOPs, tensor expressions) and the launch order."""
  names = {key: f"task{k}" for k, key in enumerate(st.tasks)}
  lines = [f"{len(st.calls)} kernel calls of {len(st.tasks)} distinct tasks"]
  for key, t in st.tasks.items():
    lines.append(f"{names[key]}: key {key}  kind {t.kind}  weight {t.weight}  ops {'+'.join(t.ops)}  flops {t.flops}")
    for x in t.dag.tensors:
      if x.is_placeholder: lines.append(f"  {x.name}: {x.dtype}{list(x.shape)}  (input)"); continue
      axes = ", ".join(a.name for a in x.axes)
      lines.append(f"  {x.name}[{axes}]: {x.dtype}{list(x.shape)} = {x.body!r}")
  order = [f"{names[key]}" for _, key in st.calls]
  lines.append("launch order: " + " ".join(order))
  return [("", "\n".join(lines))]


def _per_task(st: CompileState, show: Callable[[TaskBuild], str]) -> Text:
  return [(b.name, show(b)) for b in st.builds.values()]


def schedule_text(st: CompileState) -> Text:
  """Each task's chosen schedule: where it comes from, its steps and the loop structure they make."""
  def show(b: TaskBuild) -> str:
    head = f"{b.name} ({'+'.join(b.task.ops)}): {b.origin} schedule, {len(b.schedule.steps)} steps"
    return head + "\n" + str(b.schedule.state)
  return _per_task(st, show)


def lower_text(st: CompileState) -> Text:
  """Each task's lowered loop nest (:func:`minicomp.ir.loop_text.program_text`)."""
  from minicomp.ir.loop_text import program_text
  return _per_task(st, lambda b: program_text(b.program))


def emit_text(st: CompileState) -> Text:
  """Each task's CUDA C."""
  return _per_task(st, lambda b: b.source)


def nvrtc_text(st: CompileState) -> Text:
  """What ptxas reports for each kernel of each task: registers, shared memory, spills, stack."""
  def show(b: TaskBuild) -> str:
    bi = b.kernel.binary
    lines = [f"{b.name}: {bi.arch}, PTX {len(bi.ptx)} chars, CUBIN {len(bi.cubin)} bytes"]
    for l in b.kernel.plan.launches:
      r = bi.resources.get(l.kernel)
      if r is None: lines.append(f"  {l.kernel}: no ptxas report"); continue
      lines.append(f"  {l.kernel}: registers {r.registers}, shared {r.shared_bytes} B, "
                   f"spill stores {r.spill_stores} B, spill loads {r.spill_loads} B, stack {r.stack_bytes} B, "
                   f"barriers {r.barriers}"
                   f"  grid={l.grid} block={l.block}")
    lines += [f"  {w}" for w in bi.warnings]
    return "\n".join(lines)
  return _per_task(st, show)


def link_text(st: CompileState) -> Text:
  """The compiled model's summary: one row per kernel call."""
  return [("", st.compiled.summary())]


# ---- running the phases, dumping their output

def dump_phases(dump_after: str | Sequence[str] | None, names: Sequence[str]) -> tuple[str, ...]:
  """The phase names of ``dump_after`` (a name, comma-separated names, a list of them, or "all"),
  checked: an unknown name is a CompileError listing the phases."""
  if dump_after is None: return ()
  items = [dump_after] if isinstance(dump_after, str) else dump_after
  if not isinstance(items, (list, tuple)) or not all(isinstance(x, str) for x in items):
    raise CompileError(f"dump_after must be a phase name or a list of them, got {dump_after!r}; "
                       f"the phases: {', '.join(names)} (or all)")
  out: list[str] = []
  for item in items:
    for n in (x.strip() for x in item.split(",")):
      if n == "all": out += [x for x in names if x not in out]
      elif n in names:
        if n not in out: out.append(n)
      else:
        raise CompileError(f"unknown phase {n!r} in dump_after; the phases, in order: {', '.join(names)} (or all)")
  return tuple(x for x in names if x in out)


class Dumper:
  """Prints the output of the chosen phases to stderr, or writes it under ``directory``: one file per phase
  and task, named ``NN-phase.txt`` or ``NN-phase-taskK.txt`` (``.cu`` for emit), NN the phase's position."""

  def __init__(self, phases: Sequence[str], directory: str | Path | None = None):
    if directory is not None and not isinstance(directory, (str, os.PathLike)):
      raise CompileError(f"dump_dir must be a folder path, got {type(directory).__name__}")
    self.phases, self.directory = set(phases), None if directory is None else Path(directory)
    if self.directory is not None:
      try:
        self.directory.mkdir(parents=True, exist_ok=True)
      except OSError as e:
        raise CompileError(f"dump_dir {str(self.directory)!r}: {e.strerror or e}") from None

  def __call__(self, index: int, phase: Phase, st: CompileState) -> None:
    if phase.name not in self.phases: return
    for part, text in phase.text(st):
      if self.directory is not None:
        stem = f"{index:02d}-{phase.name}" + (f"-{part}" if part else "")
        (self.directory / (stem + phase.ext)).write_text(text + "\n")
      else:
        print(f"===== minicomp: after {phase.name}" + (f": {part}" if part else "") + " =====", file=sys.stderr)
        print(text, file=sys.stderr)


def run_phases(phases: Sequence[Phase], st: CompileState,
               dump: Callable[[int, Phase, CompileState], None] | None = None,
               progress: Mapping[str, Callable[[CompileState], str]] | None = None) -> CompileState:
  """Run ``phases`` in order on ``st``: time each (``st.stats.add_phase``), print the phase's ``progress``
  line (when ``st.options.progress``), then call ``dump``."""
  from minicomp.progress import say
  for k, ph in enumerate(phases, 1):
    t0 = time.perf_counter()
    st = ph.run(st)
    st.stats.add_phase(ph.name, time.perf_counter() - t0)
    if progress and ph.name in progress: say(progress[ph.name](st), st.options.progress)
    if dump is not None: dump(k, ph, st)
  return st
