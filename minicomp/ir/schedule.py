"""The user-facing schedule: TVM-style primitives that append steps to a State.

::

    s = Schedule([D])
    i, j = s.axis(C)                       # loop names of stage C
    io, ii = s.split(C, i, 32)             # -> ("i.0", "i.1")
    s.bind(C, io, "blockIdx.x")
    AS = s.cache_read(A, "shared", [C])    # -> stage name "A.shared"
    s.compute_at(AS, C, ko)

Stages are named by their tensor (or tensor name); loops by name. Every primitive is
recorded as a step (``s.steps``), so ``Schedule.from_json(outputs, s.to_json())`` replays the
same schedule and lowers to the same program.
"""
from __future__ import annotations

from typing import Sequence

from minicomp.errors import ScheduleError
from minicomp.ir.expr import Expr
from minicomp.ir.dag import ComputeDAG
from minicomp.ir.state import State
from minicomp.ir import steps as S


def _name(x) -> str:
  if isinstance(x, str): return x
  n = getattr(x, "name", None)
  if isinstance(n, str): return n
  raise ScheduleError(f"expected a tensor, a stage name or a loop name, got {x!r}")


class Schedule:
  """A schedule for the computation that produces ``outputs`` (a State plus its steps)."""

  def __init__(self, outputs, state: State | None = None):
    self.dag = outputs if isinstance(outputs, ComputeDAG) else ComputeDAG(outputs)
    self.state = state if state is not None else State.from_dag(self.dag)

  # -- introspection
  @property
  def steps(self) -> list[S.Step]: return list(self.state.steps)
  def stage_names(self) -> list[str]: return [s.name for s in self.state.stages]
  def loops(self, t) -> list[str]:
    """Current loop names of a stage, outer to inner."""
    return list(self.state.stage(_name(t)).leaves)
  def axis(self, t) -> list[str]:
    """Loop names of the stage's spatial axes (as created: before any split)."""
    st = self.state.stage(_name(t))
    return [a.name for a in st.tensor.axes]
  def reduce_axis(self, t) -> list[str]:
    st = self.state.stage(_name(t))
    return [a.name for a in st.tensor.reduce_axes]
  def copy(self) -> "Schedule": return Schedule(self.dag, self.state.copy())
  def __str__(self) -> str: return str(self.state)

  def _do(self, step: S.Step):
    return S.apply_step(self.state, step)

  # -- loop transforms
  def split(self, t, loop, factors) -> tuple[str, ...]:
    """Split ``loop`` into ``len(factors) + 1`` loops; ``factors`` (an int, a variable, or a list) are the
    extents of the inner loops, outer to inner. The outermost loop takes ``ceil(extent / prod(factors))``;
    non-divisible extents are guarded. Returns the new loop names (outer to inner)."""
    fs = tuple(factors) if isinstance(factors, (list, tuple)) else (factors,)
    return self._do(S.SplitStep(_name(t), _name(loop), fs))

  def fuse(self, t, *loops) -> str:
    """Fuse adjacent loops into one; returns its name."""
    if len(loops) == 1 and isinstance(loops[0], (list, tuple)): loops = tuple(loops[0])
    return self._do(S.FuseStep(_name(t), tuple(_name(l) for l in loops)))

  def reorder(self, t, *loops) -> None:
    """Reorder loops among the positions they occupy."""
    if len(loops) == 1 and isinstance(loops[0], (list, tuple)): loops = tuple(loops[0])
    self._do(S.ReorderStep(_name(t), tuple(_name(l) for l in loops)))

  def tile(self, t, x, y, fx: int, fy: int) -> tuple[str, str, str, str]:
    """Split ``x`` and ``y`` by ``fx``/``fy`` and reorder to (xo, yo, xi, yi)."""
    xo, xi = self.split(t, x, fx)
    yo, yi = self.split(t, y, fy)
    self.reorder(t, xo, yo, xi, yi)
    return xo, yo, xi, yi

  def bind(self, t, loop, tag: str) -> None:
    """Bind a loop to ``blockIdx.[xyz]``, ``threadIdx.[xyz]`` or ``vthread``."""
    self._do(S.AnnotateStep(_name(t), _name(loop), tag))

  def unroll(self, t, loop) -> None: self._do(S.AnnotateStep(_name(t), _name(loop), "unroll"))
  def vectorize(self, t, loop) -> None: self._do(S.AnnotateStep(_name(t), _name(loop), "vectorize"))

  def pragma(self, t, loop, name: str, value: int) -> None:
    """``pragma(C, loop, "auto_unroll_max_step", 64)``: unroll inner loops up to that many iterations in total."""
    self._do(S.PragmaStep(_name(t), _name(loop), name, value))

  def cross_thread_reduce(self, t, loop, method: str = "shuffle") -> None:
    """Bind reduction ``loop`` to threadIdx.x and combine the threads' partial results
    (``"shuffle"``: warp shuffles, needs a block x-size multiple of 32, else falls back to the tree;
    ``"tree"``: shared-memory tree)."""
    self._do(S.CrossThreadReduceStep(_name(t), _name(loop), method))

  def rfactor(self, t, loop) -> str:
    """Factor the reduction over ``loop`` (one part of a two-way split of a reduce axis) into a new stage
    ``<t>.rf`` whose first axis is ``loop``; ``t`` then reduces over that axis. Returns the new stage name.

    ``R[i] = sum_k X[i, k]`` with ``k -> (ko, ki)`` and ``rfactor(R, ki)`` gives
    ``R.rf[ki, i] = sum_ko X[i, ko*f + ki]`` and ``R[i] = sum_ki R.rf[ki, i]``."""
    return self._do(S.RfactorStep(_name(t), _name(loop)))

  # -- compute locations
  def compute_at(self, t, target, loop) -> None:
    """Compute stage ``t`` inside ``loop`` of ``target`` (only the region that loop's body needs)."""
    self._do(S.ComputeAtStep(_name(t), _name(target), _name(loop)))

  def compute_inline(self, t) -> None: self._do(S.ComputeInlineStep(_name(t)))
  def compute_root(self, t) -> None: self._do(S.ComputeRootStep(_name(t)))

  # -- caches and storage
  def cache_read(self, t, scope: str, readers: Sequence) -> str:
    """Add a stage that copies ``t`` into ``scope`` memory ("shared" or "local") for ``readers``; returns its name."""
    return self._do(S.CacheReadStep(_name(t), scope, tuple(_name(r) for r in readers)))

  def cache_write(self, t, scope: str = "local") -> str:
    """Compute ``t`` into a ``scope`` buffer and copy it out; returns the cache stage name. Apply first."""
    return self._do(S.CacheWriteStep(_name(t), scope))

  def storage_align(self, t, axis: int, factor: int, offset: int) -> None:
    """Pad the stride of dimension ``axis`` of ``t``'s buffer to ``k*factor + offset`` elements."""
    self._do(S.StorageAlignStep(_name(t), axis, factor, offset))

  # -- serialisation
  def to_json(self) -> str: return S.steps_to_json(self.state.steps)

  @staticmethod
  def from_json(outputs, text) -> "Schedule":
    """Replay steps (JSON text or list) on a fresh state of ``outputs``."""
    s = Schedule(outputs)
    for k, st in enumerate(S.steps_from_json(text)): S.apply_step(s.state, st, k)
    return s

  def params(self) -> list[str]:
    """Names of the symbolic schedule parameters (variables used as split factors)."""
    out: list[str] = []
    for st in self.state.steps:
      for f in getattr(st, "factors", ()):
        if isinstance(f, Expr) and f.arg not in out: out.append(f.arg)
    return out

  def substitute(self, values: dict[str, int]) -> "Schedule":
    """The concrete schedule with each symbolic parameter replaced by ``values[name]``."""
    missing = [p for p in self.params() if p not in values]
    if missing: raise ScheduleError(f"substitute: no value for schedule parameter(s) {missing}")
    s = Schedule(self.dag)
    for k, st in enumerate(self.state.steps):
      if isinstance(st, S.SplitStep):
        st = S.SplitStep(st.stage, st.iter, tuple(values[f.arg] if isinstance(f, Expr) else f for f in st.factors))
      S.apply_step(s.state, st, k)
    return s

  def lower(self, name: str = "default"):
    from minicomp.ir.lower import lower
    return lower(self.state, name)
