"""``build``: schedule -> lowered program -> CUDA C -> NVRTC binary, wrapped in a callable Kernel.

``Kernel.__call__`` runs on a GPU when pycuda and a device are present, else on the CPU
simulator (the same CUDA C text); ``device="gpu"`` / ``device="cpu"`` forces one.
"""
from __future__ import annotations

import threading
from typing import Sequence

import numpy as np

from minicomp.codegen.cuda import C_TYPE, emit_cuda
from minicomp.codegen.nvrtc import CudaBinary, Resources, compile_cuda
from minicomp.codegen.verify import check_resources
from minicomp.errors import RuntimeLaunchError
from minicomp.ir.loop import Program
from minicomp.ir.lower import lower
from minicomp.target import Target, as_target

NP_DTYPE = {"float32": np.float32, "float64": np.float64, "int32": np.int32, "int64": np.int64, "bool": np.bool_,
            "float16": np.float16}


class Kernel:
  """A compiled schedule: CUDA source, NVRTC binary, resources, and a numpy call."""

  def __init__(self, program: Program, source: str, binary: CudaBinary, target: Target):
    self.program, self.source, self.binary, self.target = program, source, binary, target
    self._sim = None
    self._gpu = None
    self._lock = threading.Lock()

  @property
  def resources(self) -> Resources | dict[str, Resources]:
    """ptxas figures: one Resources for a single-kernel program, else a dict by kernel name."""
    r = {k.name: self.binary.resources.get(k.name, Resources()) for k in self.program.kernels}
    return next(iter(r.values())) if len(r) == 1 else r

  @property
  def launches(self) -> list[tuple[str, tuple[int, int, int], tuple[int, int, int]]]:
    """(kernel name, grid, block) of every launch, in order."""
    return [(k.name, k.grid, k.block) for k in self.program.kernels]

  @property
  def ptx(self) -> str: return self.binary.ptx

  def __repr__(self) -> str:
    ls = ", ".join(f"{n}<<<{g}, {b}>>>" for n, g, b in self.launches)
    return f"Kernel({self.target.arch}: {ls})"

  # -- running
  def _check_inputs(self, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    p = self.program
    if len(args) != len(p.inputs):
      raise RuntimeLaunchError(f"kernel takes {len(p.inputs)} inputs ({', '.join(b.name for b in p.inputs)}), got {len(args)}")
    out = []
    for a, b in zip(args, p.inputs):
      shape = p.shapes[b.name]
      a = np.asarray(a)
      if a.shape != shape: raise RuntimeLaunchError(f"input {b.name}: expected shape {shape}, got {a.shape}")
      want = NP_DTYPE[b.dtype]
      if a.dtype != want: raise RuntimeLaunchError(f"input {b.name}: expected dtype {np.dtype(want).name}, got {a.dtype}")
      out.append(np.ascontiguousarray(a))
    return out

  def __call__(self, *args: np.ndarray, device: str | None = None):
    """Run on ``args`` (one numpy array per placeholder, in DAG order); returns the output(s)."""
    from minicomp.codegen.gpu_runtime import gpu_available
    ins = self._check_inputs(args)
    p = self.program
    if device not in (None, "cpu", "gpu"): raise RuntimeLaunchError(f"device must be 'cpu', 'gpu' or None, got {device!r}")
    use_gpu = device == "gpu" or (device is None and gpu_available())
    if device == "gpu" and not gpu_available(): raise RuntimeLaunchError("device='gpu' but no CUDA GPU / pycuda is available")
    bufs: dict[str, np.ndarray] = {b.name: a for b, a in zip(p.inputs, ins)}
    for b in p.outputs + p.temps:
      bufs[b.name] = np.zeros(p.shapes[b.name], NP_DTYPE[b.dtype])
    with self._lock:
      if use_gpu:
        from minicomp.codegen.gpu_runtime import GpuModule
        if self._gpu is None: self._gpu = GpuModule(self.binary)
        for k in p.kernels: self._gpu.launch(k.name, k.grid, k.block, 0, [bufs[b.name] for b in k.params])
      else:
        sim = self.simulator()
        for k in p.kernels: sim.launch(k.name, k.grid, k.block, [bufs[b.name] for b in k.params])
    outs = [bufs[b.name] for b in p.outputs]
    return outs[0] if len(outs) == 1 else tuple(outs)

  def simulator(self):
    """The CPU simulator module of this kernel's source (built on first use, cached on disk)."""
    if self._sim is None:
      from minicomp.codegen.simulator import build_simulator
      spec = {k.name: [("" if b.name in k.written else "const ") + C_TYPE[b.dtype] + "*" for b in k.params]
              for k in self.program.kernels}
      self._sim = build_simulator(self.source, spec)
    return self._sim


def build(schedule, target: str | Target = "sm_86", name: str = "default", options: Sequence[str] = ()) -> Kernel:
  """Lower ``schedule``, check it against ``target``'s limits, emit CUDA C and compile it with NVRTC.

  Raises ScheduleError for schedules that break a resource limit (naming the step) and
  NVRTCError when NVRTC rejects the source.
  """
  tgt = as_target(target)
  state = schedule.state if hasattr(schedule, "state") else schedule
  prog = lower(state, name)
  check_resources(state, prog, tgt)
  src = emit_cuda(prog)
  binary = compile_cuda(src, tgt, options)
  return Kernel(prog, src, binary, tgt)
