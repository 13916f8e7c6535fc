"""The parts of a compiled model, as plain records: its inputs, the steps it runs (kernel calls and buffer
views), the index checks ``run`` makes, and the seconds compiling it took. They sit below everything that
builds, runs, saves and loads a model (compiler, CompiledModel, the device session, the saved format), so
none of those needs another to know what a model is made of."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class KernelCall:
  kernel: int                     # index into CompiledModel.kernels
  inputs: list[tuple[str, str]]   # ("value", graph value name) or ("const", weight name), in the kernel's input order
  outputs: list[str]              # graph value names, in the kernel's output order
  task: str = ""                  # workload key
  ops: list[str] = field(default_factory=list)
  flops: int = 0


@dataclass
class ViewStep:
  src: str
  dst: str
  shape: tuple[int, ...]
  op: str = "Reshape"


@dataclass
class IOSpec:
  name: str
  shape: tuple[int, ...]
  dtype: str                      # what the user feeds (float16 / bfloat16 for a half model: see ``boundary``)


@dataclass(frozen=True)
class IndexCheck:
  """Graph input ``input`` holds indices into an axis of ``size`` (``op`` node ``node``): ``run``
  raises FeedError on an index outside [-size, size), as onnxruntime does."""
  input: str
  size: int
  node: str
  op: str = "Gather"


@dataclass
class CompileStats:
  """Seconds spent per phase: frontend (import + folding), partition (+ tensor expressions),
  construct (Gensor's walks), estimate (the static model choosing between schedules),
  build (rule-based schedules + lowering + CUDA emission), nvrtc; ``constructed``: tasks whose
  schedule is Gensor's (constructed now or taken from the schedule cache), ``cached``: tasks whose schedule
  the cache held. ``build`` and ``nvrtc`` count every kernel built, also the candidates the
  schedule phase builds to compare them; ``phases`` is the wall time of each phase of
  ``minicomp.compiler.PHASES``, by name, in order."""
  frontend: float = 0.0
  partition: float = 0.0
  construct: float = 0.0
  estimate: float = 0.0
  build: float = 0.0
  nvrtc: float = 0.0
  tasks: int = 0
  calls: int = 0
  constructed: int = 0
  tensor_cores: int = 0            # tasks whose default schedule is a tensor-core one (graph/tensor_core_schedules.py)
  cached: int = 0                  # tasks whose default schedule came from the schedule cache
  seeded: int = 0                  # tasks whose construction ranked a like task's walk (compiler.Walked)
  phases: dict[str, float] = field(default_factory=dict)

  def add_phase(self, name: str, seconds: float) -> None:
    """Record a phase's wall time; import, fold, precision and layout count as frontend, partition and tasks as
    partition."""
    self.phases[name] = self.phases.get(name, 0.0) + seconds
    if name in ("import", "fold", "precision", "layout"): self.frontend += seconds
    elif name in ("partition", "tasks"): self.partition += seconds
