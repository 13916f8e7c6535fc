"""``build``: schedule -> lowered program -> CUDA C -> NVRTC binary, wrapped in a callable Kernel.

A Kernel carries only what running needs — the CUDA source, the NVRTC binary and a
:class:`LaunchPlan` (buffers and launches) — so it can be saved and loaded without the
schedule, and pickled (the live GPU module, simulator handle and lock are left out and made
again on first use). ``Kernel.__call__`` runs on a GPU when one is usable
(:mod:`minicomp.codegen.driver`), else on the CPU simulator (the same CUDA C text);
``device="cpu"`` / ``"gpu"`` / ``"cuda"`` / ``"pycuda"`` forces one.
"""
from __future__ import annotations

import math
import threading
import time
from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np

from minicomp.codegen.cuda import C_TYPE, dynamic_shared_bytes, emit_cuda
from minicomp.codegen.nvrtc import CudaBinary, Resources, compile_cuda
from minicomp.codegen.verify import check_resources
from minicomp.errors import RuntimeLaunchError
from minicomp.ir.loop import Program
from minicomp.ir.lower import lower, renamed
from minicomp.ir.ops import NP_DTYPE
from minicomp.target import Target, as_target

def random_input(rng: np.random.Generator, shape: Sequence[int], dtype: str) -> np.ndarray:
  """A test input: N(0, 1) for float dtypes, zeros for integers and bools (always valid indices)."""
  dt = np.dtype(NP_DTYPE[dtype])
  return rng.standard_normal(tuple(shape)).astype(dt) if dt.kind == "f" else np.zeros(tuple(shape), dt)


def host_zeros(shape: Sequence[int], dtype: str, what: str) -> np.ndarray:
  """A zeroed host array; not enough memory is a RuntimeLaunchError naming ``what`` and the size."""
  dt = np.dtype(NP_DTYPE.get(dtype, dtype))
  try:
    return np.zeros(tuple(shape), dt)
  except MemoryError:
    gib = math.prod(shape) * dt.itemsize / 2**30
    raise RuntimeLaunchError(f"{what}: not enough host memory for {list(shape)} {dtype} ({gib:.1f} GiB)") from None


@dataclass(frozen=True)
class BufferSpec:
  name: str
  shape: tuple[int, ...]
  dtype: str


@dataclass(frozen=True)
class Launch:
  kernel: str
  grid: tuple[int, int, int]
  block: tuple[int, int, int]
  params: tuple[str, ...]          # buffer names, in parameter order
  written: tuple[str, ...]         # the params the kernel writes (the others are const)
  shared_bytes: int = 0            # dynamic shared memory per block (codegen/cuda.py dynamic_shared_bytes)


@dataclass(frozen=True)
class LaunchPlan:
  """Everything needed to run a compiled program: its buffers and its launches, in order."""
  inputs: tuple[BufferSpec, ...]
  outputs: tuple[BufferSpec, ...]
  temps: tuple[BufferSpec, ...]
  launches: tuple[Launch, ...]

  @staticmethod
  def from_program(p: Program) -> "LaunchPlan":
    spec = lambda b: BufferSpec(b.name, tuple(p.shapes[b.name]), b.dtype)
    ls = tuple(Launch(k.name, tuple(k.grid), tuple(k.block), tuple(b.name for b in k.params),
                      tuple(b.name for b in k.params if b.name in k.written), dynamic_shared_bytes(k))
               for k in p.kernels)
    return LaunchPlan(tuple(map(spec, p.inputs)), tuple(map(spec, p.outputs)), tuple(map(spec, p.temps)), ls)

  def to_dict(self) -> dict:
    """As JSON (a launch without dynamic shared memory has no ``shared_bytes``, as before it existed)."""
    d = asdict(self)
    for l in d["launches"]:
      if not l["shared_bytes"]: del l["shared_bytes"]
    return d

  @staticmethod
  def from_dict(d: dict) -> "LaunchPlan":
    bs = lambda xs: tuple(BufferSpec(x["name"], tuple(x["shape"]), x["dtype"]) for x in xs)
    ls = tuple(Launch(x["kernel"], tuple(x["grid"]), tuple(x["block"]), tuple(x["params"]), tuple(x["written"]),
                      x.get("shared_bytes", 0)) for x in d["launches"])
    return LaunchPlan(bs(d["inputs"]), bs(d["outputs"]), bs(d["temps"]), ls)


class Kernel:
  """A compiled schedule: CUDA source, NVRTC binary, resources, and a numpy call."""

  def __init__(self, plan: LaunchPlan, source: str, binary: CudaBinary, target: Target, program: Program | None = None,
               timings: dict[str, float] | None = None, saved_facts: tuple | None = None):
    """``saved_facts``: (device name, the static model's LaunchFacts per launch) for a kernel loaded from
    disk, which has no ``program`` to analyse (:mod:`minicomp.saved_model` keeps them for the target's device)."""
    self.plan, self.source, self.binary, self.target, self.program = plan, source, binary, target, program
    self.saved_facts = saved_facts
    self._sim = None
    self._gpu: dict[str, object] = {}     # backend name -> GpuModule
    self._lock = threading.Lock()
    self.timings: dict[str, float] = dict(timings or {})   # build phases, seconds: lower_emit_s, nvrtc_s

  def __getstate__(self) -> dict:
    """Plain data only: the plan, source, binary, target, program and timings (no live handles)."""
    st = dict(self.__dict__)
    st["_sim"], st["_gpu"], st["_lock"] = None, {}, None
    return st

  def __setstate__(self, st: dict) -> None:
    self.__dict__.update(st)
    self._lock = threading.Lock()

  def gpu_module(self, backend: str | None = None):
    """This kernel's binary loaded on the GPU of ``backend`` (default backend), loaded once."""
    from minicomp.codegen.driver import default_backend, get_driver
    from minicomp.codegen.gpu_runtime import GpuModule
    name = backend or default_backend()
    if name not in self._gpu: self._gpu[name] = GpuModule(self.binary, get_driver(name))
    return self._gpu[name]

  @property
  def resources(self) -> Resources | dict[str, Resources]:
    """ptxas figures: one Resources for a single-kernel program, else a dict by kernel name."""
    r = {l.kernel: self.binary.resources.get(l.kernel, Resources()) for l in self.plan.launches}
    return next(iter(r.values())) if len(r) == 1 else r

  @property
  def launches(self) -> list[tuple[str, tuple[int, int, int], tuple[int, int, int]]]:
    """(kernel name, grid, block) of every launch, in order."""
    return [(l.kernel, l.grid, l.block) for l in self.plan.launches]

  @property
  def ptx(self) -> str: return self.binary.ptx

  def __repr__(self) -> str:
    ls = ", ".join(f"{n}<<<{g}, {b}>>>" for n, g, b in self.launches)
    return f"Kernel({self.target.arch}: {ls})"

  # -- running
  def _check_inputs(self, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    ins = self.plan.inputs
    if len(args) != len(ins):
      raise RuntimeLaunchError(f"kernel takes {len(ins)} inputs ({', '.join(b.name for b in ins)}), got {len(args)}")
    out = []
    for a, b in zip(args, ins):
      a = np.asarray(a)
      if a.shape != b.shape: raise RuntimeLaunchError(f"input {b.name}: expected shape {b.shape}, got {a.shape}")
      want = NP_DTYPE[b.dtype]
      if a.dtype != want: raise RuntimeLaunchError(f"input {b.name}: expected dtype {np.dtype(want).name}, got {a.dtype}")
      out.append(a if a.flags.c_contiguous else np.ascontiguousarray(a))   # (keeps 0-d arrays 0-d)
    return out

  def __call__(self, *args: np.ndarray, device: str | None = None):
    """Run on ``args`` (one numpy array per placeholder, in DAG order); returns the output(s)."""
    outs = self.run(list(args), device=device)
    return outs[0] if len(outs) == 1 else tuple(outs)

  def run(self, args: Sequence[np.ndarray], device: str | None = None,
          out: Sequence[np.ndarray | None] | None = None) -> list[np.ndarray]:
    """Like ``__call__`` but always returns a list of outputs; ``out`` may give preallocated
    (C-contiguous, right shape and dtype) arrays to write outputs into.

    ``device``: None (the GPU when one is usable, else the CPU simulator), ``"cpu"``, ``"gpu"``
    (the default GPU backend), ``"cuda"`` or ``"pycuda"`` (that backend). On a GPU the inputs are
    copied up, the launches queued on one stream and the outputs copied down once."""
    from minicomp.codegen.driver import backend_for
    ins = self._check_inputs(args)
    backend = backend_for(device)
    p = self.plan
    bufs: dict[str, np.ndarray] = {b.name: a for b, a in zip(p.inputs, ins)}
    for k, b in enumerate(p.outputs):
      o = out[k] if out is not None and k < len(out) else None
      if o is not None and (o.shape != b.shape or o.dtype != np.dtype(NP_DTYPE[b.dtype]) or not o.flags.c_contiguous):
        raise RuntimeLaunchError(f"out[{k}] for {b.name}: expected a C-contiguous {b.dtype} array of shape {b.shape}")
      bufs[b.name] = o if o is not None else host_zeros(b.shape, b.dtype, f"output {b.name}")
    if backend is not None:
      from minicomp.codegen.gpu_runtime import run_plan
      with self._lock: mod = self.gpu_module(backend)
      run_plan(mod, p, ins, [bufs[b.name] for b in p.outputs])
      return [bufs[b.name] for b in p.outputs]
    for b in p.temps: bufs[b.name] = host_zeros(b.shape, b.dtype, f"temporary {b.name}")
    with self._lock:
      sim = self.simulator()
      for l in p.launches: sim.launch(l.kernel, l.grid, l.block, [bufs[n] for n in l.params])
    return [bufs[b.name] for b in p.outputs]

  def simulator(self):
    """The CPU simulator module of this kernel's source (built on first use, cached on disk)."""
    if self._sim is None:
      from minicomp.codegen.simulator import build_simulator
      dtypes = {b.name: b.dtype for b in self.plan.inputs + self.plan.outputs + self.plan.temps}
      spec = {l.kernel: [("" if n in l.written else "const ") + C_TYPE[dtypes[n]] + "*" for n in l.params]
              for l in self.plan.launches}
      self._sim = build_simulator(self.source, spec)
    return self._sim


def lower_checked(schedule, target: Target, name: str) -> Program:
  """``schedule`` lowered to a loop nest and checked against ``target``'s limits (ScheduleError naming the step)."""
  state = schedule.state if hasattr(schedule, "state") else schedule
  prog = lower(state, name)
  check_resources(state, prog, target)
  return prog


# NVRTC's options for every kernel minicomp emits, before the caller's. ``--minimal`` leaves out the texture,
# surface and runtime-API declarations NVRTC otherwise parses before each program, which the emitted CUDA C never
# uses: the same PTX and CUBIN, byte for byte (570 kernels of the test suite: fp32, fp16, bf16, tensor cores, dp4a;
# NVRTC 12.9, 2026-12-01), and 16 ms less per call on 2 cores (52 -> 36 ms for a one-line kernel).
KERNEL_OPTIONS = ("--minimal",)


def kernel_of(prog: Program, source: str, target: Target, options: Sequence[str] = (), lower_emit_s: float = 0.0) -> Kernel:
  """The Kernel of a lowered program and its CUDA C: NVRTC's binary (with :data:`KERNEL_OPTIONS`) and the launch
  plan."""
  t0 = time.perf_counter()
  binary = compile_cuda(source, target, (*KERNEL_OPTIONS, *options))
  return Kernel(LaunchPlan.from_program(prog), source, binary, target, prog,
                {"lower_emit_s": lower_emit_s, "nvrtc_s": time.perf_counter() - t0})


def build(schedule, target: str | Target = "sm_86", name: str = "default", options: Sequence[str] = ()) -> Kernel:
  """Lower ``schedule``, check it against ``target``'s limits, emit CUDA C and compile it with NVRTC.

  Raises ScheduleError for schedules that break a resource limit (naming the step) and
  NVRTCError when NVRTC rejects the source.
  """
  tgt = as_target(target)
  t0 = time.perf_counter()
  prog = lower_checked(schedule, tgt, name)
  src = emit_cuda(prog)
  return kernel_of(prog, src, tgt, options, time.perf_counter() - t0)


class Builds:
  """Each schedule built once, stage by stage, by kernel name and steps: :meth:`program` (lowered and
  checked), :meth:`source` (its CUDA C) and :meth:`kernel` (NVRTC's binary). ``compile`` builds the
  schedules it compares and the ones it keeps through one of these, so its lower, emit and nvrtc phases
  build every task's chosen schedule the same way, and nothing is built twice. ``seconds`` holds the time
  spent lowering + emitting and in NVRTC; a failed build is not kept (it raises again if asked again)."""

  def __init__(self, target: Target):
    self.target = target
    self._programs: dict[tuple, Program] = {}
    self._sources: dict[tuple, str] = {}
    self._kernels: dict[tuple, Kernel] = {}
    self.seconds = {"lower_emit": 0.0, "nvrtc": 0.0}

  @staticmethod
  def _key(schedule, name: str) -> tuple:
    return name, schedule.to_json()

  def program(self, schedule, name: str, lowered: Program | None = None) -> Program:
    """``lowered``: the schedule's program, lowered and checked already under any name (a search's candidate
    carries it), taken instead of lowering again. Either way the program is kept on disk too
    (:mod:`.program_cache`), and one found there is not lowered again."""
    return self._program(self._key(schedule, name), schedule, lowered)

  def source(self, schedule, name: str, lowered: Program | None = None) -> str:
    return self._source(self._key(schedule, name), schedule, lowered)

  def kernel(self, schedule, name: str, lowered: Program | None = None) -> Kernel:
    k = self._key(schedule, name)
    if k not in self._kernels:
      src = self._source(k, schedule, lowered)
      t0 = time.perf_counter()
      try: self._kernels[k] = kernel_of(self._programs[k], src, self.target)
      finally: self.seconds["nvrtc"] += time.perf_counter() - t0
    return self._kernels[k]

  def _program(self, k: tuple, schedule, lowered: Program | None) -> Program:
    from minicomp.codegen import program_cache
    if k not in self._programs:
      name, steps = k
      t0 = time.perf_counter()
      try:
        disk = program_cache.key(schedule, steps, name, self.target)
        prog = None if lowered is not None else program_cache.get(disk)
        if prog is None:
          prog = renamed(lowered, name) if lowered is not None else lower_checked(schedule, self.target, name)
          program_cache.put(disk, prog)
        self._programs[k] = prog
      finally: self.seconds["lower_emit"] += time.perf_counter() - t0
    return self._programs[k]

  def _source(self, k: tuple, schedule, lowered: Program | None) -> str:
    if k not in self._sources:
      prog = self._program(k, schedule, lowered)
      t0 = time.perf_counter()
      self._sources[k] = emit_cuda(prog)
      self.seconds["lower_emit"] += time.perf_counter() - t0
    return self._sources[k]
