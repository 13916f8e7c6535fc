"""CompiledModel: the kernels of a model, the order to launch them, and its weights.

``run(feeds)`` validates the feeds (names, shapes, dtypes) and launches every kernel in order —
on the GPU when there is one, else on the CPU simulator. Intermediates live in a byte pool
planned at construction: a buffer is reused once the value in it is dead. On a GPU the model is
device-resident (:mod:`minicomp.codegen.resident`): weights are uploaded once, the pool lives on
the device, only graph inputs go up and graph outputs come down; ``run(..., cuda_graph=True)``
replays a captured CUDA graph; ``benchmark(feeds)`` times it with CUDA events. ``save(path)`` and
``minicomp.load(path)`` live in :mod:`minicomp.saved_model` and :mod:`minicomp.saved_model_load` (a folder,
checked before it is used).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np

from minicomp.codegen.kernel import Kernel, host_zeros, random_input
from minicomp.errors import FeedError, RuntimeLaunchError
from minicomp.ir.ops import NP_DTYPE
from minicomp.target import Target, as_target

from minicomp.model_parts import CompileStats, IndexCheck, IOSpec, KernelCall, ViewStep

if TYPE_CHECKING:
  from minicomp.graph.tasks import Task


@dataclass
class ModelEstimate:
  """Static-model estimate of a whole model run: always an estimate, never a measurement."""
  device: str
  calls: list   # (KernelCall, Estimate) in launch order
  is_estimate: bool = True
  model: str = "static model"

  @property
  def latency_s(self) -> float: return sum(e.latency_s for _, e in self.calls)

  def __str__(self) -> str:
    rows = [f"estimated latency on {self.device} ({self.model}, no GPU measurement): {self.latency_s * 1e6:.1f} us "
            f"over {len(self.calls)} kernel calls"]
    for k, (c, e) in enumerate(self.calls):
      bound = "/".join(l.bound for l in e.launches)
      rows.append(f"  {k:3d} {'+'.join(c.ops):<32s} ~{e.latency_s * 1e6:9.2f} us  ({bound}-bound)")
    return "\n".join(rows)


class CompiledModel:
  """A compiled ONNX model. ``run({"input": x})`` returns the outputs in graph order."""

  def __init__(self, target: Target, inputs: list[IOSpec], outputs: list[str], kernels: list[Kernel], steps: list,
               weights: dict[str, np.ndarray], consts: dict[str, np.ndarray] | None = None, name: str = "model",
               boundary: Mapping[str, str] | None = None, index_checks: Sequence[IndexCheck] = (),
               tasks: Sequence[Task] = (), stats: CompileStats | None = None):
    """``boundary``: graph inputs / outputs the user sees in a half type (float16, bfloat16) while
    the kernels compute them in float32 (``precision="fp32"``, :mod:`minicomp.frontend.precision`); ``index_checks``: the
    graph inputs ``run`` range-checks (:class:`IndexCheck`). ``tasks`` (the distinct
    :class:`~minicomp.graph.tasks.Task` of the kernels, in kernel order) and ``stats`` (seconds per
    compile phase) come from ``minicomp.compile``; a model loaded from a folder has neither (``[]``, None)."""
    self.target, self.inputs, self.output_names, self.kernels = target, inputs, outputs, kernels
    self.steps, self.weights, self.consts, self.name = steps, weights, dict(consts or {}), name
    self.boundary, self.index_checks = dict(boundary or {}), list(index_checks)
    self.tasks: list[Task] = list(tasks)
    self.stats: CompileStats | None = stats
    self._plan_buffers()
    self._sessions: dict[str, object] = {}   # GPU backend name -> DeviceSession (device-resident state)

  def _plan_buffers(self) -> None:
    """Assign every intermediate value a slot of a reusable byte pool: a slot is free again after
    the last read of the value in it (a view extends the life of the buffer it relabels).
    Graph outputs get fresh arrays, returned to the caller."""
    root: dict[str, str] = {}                       # value -> the kernel-produced value whose buffer it is
    spec: dict[str, tuple[tuple[int, ...], str]] = {}
    born: dict[str, int] = {}
    last: dict[str, int] = {}
    for k, st in enumerate(self.steps):
      if isinstance(st, ViewStep):
        r = root.get(st.src, st.src)
        root[st.dst] = r
        last[r] = k
        continue
      for kind, n in st.inputs:
        if kind == "value": last[root.get(n, n)] = k
      plan = self.kernels[st.kernel].plan
      for name, b in zip(st.outputs, plan.outputs):
        root[name] = name; spec[name] = (b.shape, b.dtype); born[name] = k; last.setdefault(name, k)
    pinned = {root.get(o, o) for o in self.output_names}
    slots: list[int] = []                           # slot sizes in bytes
    free: list[int] = []
    self._slot: dict[str, int] = {}
    ending: dict[int, list[str]] = {}
    for v in sorted(born, key=born.get):
      k = born[v]
      for step in sorted(s_ for s_ in list(ending) if s_ < k):
        free.extend(self._slot[x] for x in ending.pop(step))
      if v in pinned: continue
      shape, dt = spec[v]
      need = int(np.prod(shape)) * np.dtype(NP_DTYPE[dt]).itemsize
      fit = [s_ for s_ in free if slots[s_] >= need]
      if fit:
        s_ = min(fit, key=lambda x: slots[x]); free.remove(s_)
      else:
        s_ = len(slots); slots.append(need)
      self._slot[v] = s_
      ending.setdefault(last[v], []).append(v)
    self._root, self._spec, self._slot_bytes = root, spec, slots
    self._last_use = {v: last[v] for v in last}

  @property
  def pool_bytes(self) -> int:
    """Bytes of the intermediate-buffer pool (after reuse); compare with :attr:`unplanned_bytes`."""
    return sum(self._slot_bytes)

  @property
  def unplanned_bytes(self) -> int:
    """Bytes all intermediates would take without reuse."""
    return sum(int(np.prod(s)) * np.dtype(NP_DTYPE[d]).itemsize for v, (s, d) in self._spec.items() if v in self._slot)

  # -- running
  def _check_feeds(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    if not isinstance(feeds, Mapping): raise FeedError(f"feeds must be a dict of input name -> array, got {type(feeds).__name__}")
    want = {i.name: i for i in self.inputs}
    missing = [n for n in want if n not in feeds]
    unknown = [n for n in feeds if n not in want]
    if missing or unknown:
      raise FeedError(f"feeds: missing inputs {missing}, unknown inputs {unknown}; the model's inputs are "
                      + ", ".join(f"{i.name} {list(i.shape)} {i.dtype}" for i in self.inputs))
    env = {}
    for n, spec in want.items():
      a = np.asarray(feeds[n])
      if a.shape != spec.shape: raise FeedError(f"input {n!r}: expected shape {list(spec.shape)}, got {list(a.shape)}")
      if a.dtype != np.dtype(NP_DTYPE[spec.dtype]):
        raise FeedError(f"input {n!r}: expected dtype {spec.dtype}, got {a.dtype} (convert with .astype(np.{spec.dtype}))")
      if n in self.boundary: a = a.astype(np.float32)                   # a half input, computed in float32
      env[n] = a if a.flags.c_contiguous else np.ascontiguousarray(a)   # (keeps 0-d arrays 0-d)
    return env

  def kernel_dtype(self, name: str) -> str:
    """The dtype the kernels use for graph input ``name`` (float32 for a half input)."""
    return "float32" if name in self.boundary else next(i.dtype for i in self.inputs if i.name == name)

  def _check_indices(self, env: Mapping[str, np.ndarray]) -> None:
    for c in self.index_checks:
      a = env[c.input]
      bad = (a < -c.size) | (a >= c.size)
      if bad.any():
        raise FeedError(f"input {c.input!r}: index {int(a[bad].reshape(-1)[0])} is out of range for {c.op} node "
                        f"{c.node!r} (an axis of {c.size}: indices must be in [{-c.size}, {c.size - 1}]); "
                        "run(..., check_indices=False) skips this check (out-of-range indices are then clamped)")

  def _outputs(self, outs: list[np.ndarray]) -> list[np.ndarray]:
    """Graph outputs as the user sees them: half outputs rounded from float32 to their type."""
    return [o.astype(NP_DTYPE[self.boundary[n]]) if n in self.boundary else o for n, o in zip(self.output_names, outs)]

  def run(self, feeds: Mapping[str, np.ndarray], device: str | None = None, cuda_graph: bool = False,
          check_indices: bool = True) -> list[np.ndarray]:
    """Run the model; returns one array per graph output, in graph-output order.

    ``device``: None (the GPU when one is usable, else the CPU simulator), ``"cpu"``, ``"gpu"``
    (the default GPU backend), ``"cuda"`` or ``"pycuda"``. On a GPU the first run uploads the
    weights and allocates the buffers; later runs copy only inputs up and outputs down.
    ``cuda_graph=True`` (GPU only) captures the launch sequence once and replays it.
    ``check_indices``: raise FeedError on out-of-range Gather indices fed as graph inputs (ONNX's
    rule, checked on the host); False skips the check and the kernels clamp them into the axis.
    """
    from minicomp.codegen.driver import backend_for
    env = self._check_feeds(feeds)
    if check_indices: self._check_indices(env)
    backend = backend_for(device)
    if backend is not None: return self._outputs(self.session(backend).run(env, cuda_graph))
    if cuda_graph: raise RuntimeLaunchError("cuda_graph=True needs a GPU; this run is on the CPU simulator")
    env.update(self.consts)
    pool = [host_zeros((n,), "uint8", f"intermediate buffer {k}") for k, n in enumerate(self._slot_bytes)]

    def view_of(v: str) -> np.ndarray:
      shape, dt = self._spec[v]
      n = int(np.prod(shape)) * np.dtype(NP_DTYPE[dt]).itemsize
      return pool[self._slot[v]][:n].view(NP_DTYPE[dt]).reshape(shape)
    for st in self.steps:
      if isinstance(st, ViewStep):
        env[st.dst] = env[st.src].reshape(st.shape)
        continue
      args = [env[n] if kind == "value" else self.weights[n] for kind, n in st.inputs]
      outs = self.kernels[st.kernel].run(args, device="cpu", out=[view_of(n) if n in self._slot else None for n in st.outputs])
      for name, arr in zip(st.outputs, outs): env[name] = arr
    return self._outputs([np.array(env[o]) for o in self.output_names])

  def session(self, backend: str | None = None):
    """The model's :class:`~minicomp.codegen.resident.DeviceSession` on ``backend`` (default
    backend), opened on first use: weights uploaded, buffers allocated."""
    from minicomp.codegen.driver import default_backend, get_driver
    from minicomp.codegen.resident import DeviceSession
    name = backend or default_backend()
    if name not in self._sessions: self._sessions[name] = DeviceSession(self, get_driver(name))
    return self._sessions[name]

  def release_device(self) -> None:
    """Free the model's GPU memory now (weights, pool, graphs); the next GPU run uploads again.
    Dropping the model frees it too."""
    for s in self._sessions.values(): s.close()
    self._sessions.clear()

  def random_feeds(self, seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs of the right shapes and dtypes: N(0, 1) floats, zeros for integers and bools (safe indices)."""
    rng = np.random.default_rng(seed)
    return {i.name: random_input(rng, i.shape, self.kernel_dtype(i.name)).astype(NP_DTYPE[i.dtype]) for i in self.inputs}

  def benchmark(self, feeds: Mapping[str, np.ndarray] | None = None, repeat: int = 50, warmup: int = 5,
                flush_l2: bool = True, cuda_graph: bool = False, device: str | None = "gpu"):
    """Measure the model on the GPU with CUDA events: end-to-end and per kernel call (median and
    min over ``repeat`` runs after ``warmup``), the L2 flushed before each run when ``flush_l2``.
    ``feeds`` default to :meth:`random_feeds`. Returns a
    :class:`~minicomp.codegen.resident.BenchmarkResult`; ``print`` it for the table.

    Raises :class:`~minicomp.codegen.driver.NoGPUError` without a usable GPU: its message says
    why, and that :meth:`estimate` gives the static model's estimate instead (no GPU needed).
    """
    from minicomp.codegen.driver import NoGPUError, backend_for, get_driver
    if repeat < 1 or warmup < 0: raise RuntimeLaunchError(f"benchmark needs repeat >= 1 and warmup >= 0, got {repeat}, {warmup}")
    try:
      backend = backend_for(device)
      if backend is not None: get_driver(backend)
    except NoGPUError as e:
      raise NoGPUError(f"{e.reason.rstrip('.')}. Without a GPU, mod.estimate() gives the static model's latency "
                       "ESTIMATE instead (`minicomp bench` prints it)", reason=e.reason) from None
    if backend is None: raise RuntimeLaunchError("benchmark times the model on a GPU; device='cpu' is the simulator, "
                                                 "whose times say nothing about a GPU (use mod.estimate())")
    env = self._check_feeds(feeds if feeds is not None else self.random_feeds())
    return self.session(backend).benchmark(env, repeat, warmup, flush_l2, cuda_graph)

  # -- reporting
  @property
  def calls(self) -> list[KernelCall]:
    return [s for s in self.steps if isinstance(s, KernelCall)]

  def summary(self) -> str:
    """One row per kernel call: fused ops, output shapes, FLOPs, the float types its arrays are stored in and its
    arithmetic is computed in (``fp16/fp32``: half arrays, float math; ``fp16/fp32 tensor cores``: products on
    the tensor cores, accumulated in float32), launch config, registers."""
    rows = [("#", "task", "ops", "outputs", "MFLOP", "stored/computed", "launches (grid x block)", "regs", "smem B")]
    for k, c in enumerate(self.calls):
      kern = self.kernels[c.kernel]
      res = [kern.binary.resources.get(l.kernel) for l in kern.plan.launches]
      shapes = ", ".join(str(list(b.shape)) for b in kern.plan.outputs)
      launches = "; ".join(f"{l.grid}x{l.block}" for l in kern.plan.launches)
      regs = "/".join(str(r.registers) if r else "?" for r in res)
      smem = "/".join(str(r.shared_bytes) if r else "?" for r in res)
      rows.append((str(k), c.task, "+".join(c.ops), shapes, f"{c.flops / 1e6:.2f}", _types(kern), launches, regs, smem))
    n_views = len(self.steps) - len(self.calls)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(x.ljust(w) for x, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    head = (f"{self.name}: {len(self.calls)} kernel calls ({len(self.kernels)} distinct kernels), {n_views} views, "
            f"target {self.target.arch}; intermediates {self.pool_bytes / 1e6:.2f} MB pooled "
            f"({self.unplanned_bytes / 1e6:.2f} MB without reuse)")
    return head + "\n" + "\n".join(lines)

  def estimate(self, device: str | Target | None = None, progress: bool = False) -> "ModelEstimate":
    """End-to-end latency ESTIMATE of one run from the static model (no GPU): the sum over the
    kernel calls of each call's estimated latency, with the per-call estimates (``.calls``).
    ``device``: a named device or an arch (default: the compile target's device). ``progress``:
    a bar over the distinct kernels on stderr."""
    from minicomp.progress import bar
    from minicomp.search.static.estimate import analyse, estimate
    tgt = as_target(device) if device is not None else self.target
    per_kernel, counted = {}, set()
    used = sorted({c.kernel for c in self.calls})
    with bar(len(used), f"[minicomp] estimate on {tgt.device.name}", progress, unit="kernel") as shown:
      analyse([self.kernels[k] for k in used], tgt.device,                        # (over the cores first)
              on_done=lambda k: (counted.add(id(k)), shown.update()))
      for c in self.calls:
        if c.kernel not in per_kernel:
          shown.set_postfix_str("+".join(c.ops)[:40], refresh=False)
          per_kernel[c.kernel] = estimate(self.kernels[c.kernel], tgt)
          if id(self.kernels[c.kernel]) not in counted: shown.update()
    calls = [(c, per_kernel[c.kernel]) for c in self.calls]
    return ModelEstimate(tgt.device.name, calls, model=calls[0][1].model if calls else "static model")

  def __repr__(self) -> str:
    return f"CompiledModel({self.name}, {len(self.calls)} kernel calls, target={self.target.arch})"

  # -- persistence (minicomp.saved_model)
  def save(self, path: str | Path) -> Path:
    """Write the model to folder ``path`` (atomically; see :mod:`minicomp.saved_model`); returns the path."""
    from minicomp.saved_model import save
    return save(self, path)


_SHORT = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "float64": "fp64"}


def _types(kern) -> str:
  """A kernel's float storage types and the type it computes in (half types compute in float32: codegen/cuda.py),
  e.g. ``fp16/fp32``, ``fp16+fp32/fp32``; ``-`` for a kernel without floats."""
  stored = sorted({b.dtype for b in kern.plan.inputs + kern.plan.outputs if b.dtype in _SHORT}, key=list(_SHORT).index)
  if not stored: return "-"
  src = getattr(kern, "source", "") or ""
  if "mc_mma_m16n8k8_tf32" in src: computed = "tf32 tensor cores"      # (products of TF32-rounded floats)
  elif "mc_mma_" in src: computed = "fp32 tensor cores"                  # (half products, float32 sums)
  else: computed = "fp64" if "float64" in stored else "fp32"
  return "+".join(_SHORT[t] for t in stored) + "/" + computed
