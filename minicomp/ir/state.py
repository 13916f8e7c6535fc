"""Schedule state: the stages of a ComputeDAG with their loops, as transformed by steps.

A :class:`State` is the ComputeDAG plus an ordered list of steps (``minicomp.ir.steps``);
each stage keeps its root axes, the split / fuse relations that derive its leaf loops, the
leaf order, loop annotations (bindings, unroll, vectorize) and where it is computed.
Loop extents are *not* stored: they follow from the root extents (which bound inference
may shrink for a stage computed inside another) and the split factors, so a split of a
stage whose extent is only known after ``compute_at`` is well defined, and symbolic
factors give symbolic extents.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Union

from minicomp.errors import ScheduleError
from minicomp.ir.expr import Expr, as_expr, const, Op
from minicomp.ir.simplify import simplify
from minicomp.ir.te import Tensor

THREAD_TAGS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")
BLOCK_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
ANNOTATIONS = ("none", "unroll", "vectorize", "vthread") + BLOCK_TAGS + THREAD_TAGS
Factor = Union[int, Expr]


@dataclass(frozen=True)
class Split:
  parent: str
  children: tuple[str, ...]
  factors: tuple[Factor, ...]   # extents of children[1:], outer to inner


@dataclass(frozen=True)
class Fuse:
  parents: tuple[str, ...]
  child: str


@dataclass(frozen=True)
class Attach:
  kind: str                      # "root" | "inline" | "at"
  stage: str | None = None
  iter: str | None = None

  def __str__(self):
    return self.kind if self.kind != "at" else f"at {self.stage}.{self.iter}"


ROOT, INLINE = Attach("root"), Attach("inline")


@dataclass(frozen=True)
class Stage:
  """One tensor's loop structure inside a State."""
  name: str
  tensor: Tensor
  root: tuple[str, ...]                         # spatial axes then reduce axes
  kinds: tuple[tuple[str, str], ...]           # (iter name, "spatial" | "reduce") for every iter ever made
  leaves: tuple[str, ...]
  relations: tuple[Split | Fuse, ...] = ()
  annotations: tuple[tuple[str, str], ...] = ()
  attach: Attach = ROOT
  scope: str | None = None                      # None: inferred at lowering (global / shared / local)
  auto_unroll_max_step: int = 0
  storage_align: tuple[tuple[int, int, int], ...] = ()   # (axis, factor, offset)
  cross_thread: tuple[tuple[str, str], ...] = ()         # (reduce iter, "shuffle" | "tree")
  tensorize: tuple[tuple[str, str], ...] = ()            # (iter, tensor-core intrinsic): the loops from it inward
  pipeline: tuple[tuple[str, int], ...] = ()             # (iter, stages): the shared fetches at it run ahead

  @property
  def is_placeholder(self) -> bool: return self.tensor.is_placeholder

  def kind(self, it: str) -> str: return dict(self.kinds)[it]

  def annotation(self, it: str) -> str: return dict(self.annotations).get(it, "none")

  def root_extents(self) -> dict[str, Expr]:
    t = self.tensor
    out = {a.name: a.extent for a in t.axes}
    out.update({a.name: a.extent for a in t.reduce_axes})
    return out

  def leaf_extents(self, root_extents: dict[str, Expr] | None = None) -> dict[str, Expr]:
    """Extent of every iter (root and derived) given the root extents."""
    ext = dict(root_extents or self.root_extents())
    for r in self.relations:
      if isinstance(r, Split):
        prod = const(1)
        for f in r.factors: prod = prod * as_expr(f)
        prod = simplify(prod)
        ext[r.children[0]] = simplify((ext[r.parent] + prod - 1) // prod)
        for c, f in zip(r.children[1:], r.factors): ext[c] = as_expr(f)
      else:
        p = const(1)
        for a in r.parents: p = p * ext[a]
        ext[r.child] = simplify(p)
    return ext


@dataclass
class State:
  """Stages in topological order plus the steps that made them."""
  stages: list[Stage]
  outputs: tuple[str, ...]
  steps: list = field(default_factory=list)

  @staticmethod
  def from_dag(dag) -> "State":
    stages = []
    for t in dag.tensors:
      root = tuple(a.name for a in t.axes) + tuple(a.name for a in t.reduce_axes)
      kinds = tuple((a.name, "spatial") for a in t.axes) + tuple((a.name, "reduce") for a in t.reduce_axes)
      stages.append(Stage(t.name, t, root, kinds, root))
    return State(stages, tuple(t.name for t in dag.outputs))

  def copy(self) -> "State":
    return State(list(self.stages), self.outputs, list(self.steps))

  # -- lookup
  def index(self, name: str) -> int:
    for i, s in enumerate(self.stages):
      if s.name == name: return i
    raise ScheduleError(f"no stage named {name!r}; stages: {[s.name for s in self.stages]}")

  def stage(self, name: str) -> Stage: return self.stages[self.index(name)]

  def set_stage(self, st: Stage) -> None: self.stages[self.index(st.name)] = st

  def tensor(self, name: str) -> Tensor: return self.stage(name).tensor

  def consumers(self, name: str) -> list[str]:
    """Stages whose body reads ``name``."""
    return [s.name for s in self.stages if not s.is_placeholder and name in {t.name for t in s.tensor.inputs}]

  def producers(self, name: str) -> list[str]:
    return [t.name for t in self.stage(name).tensor.inputs]

  def reaches(self, src: str, dst: str) -> bool:
    """True when ``dst`` (transitively) consumes ``src``."""
    todo, seen = [src], set()
    while todo:
      n = todo.pop()
      for c in self.consumers(n):
        if c == dst: return True
        if c not in seen: seen.add(c); todo.append(c)
    return False

  def __str__(self) -> str:
    return self.format()

  def format(self, extents: dict[str, dict[str, Expr]] | None = None) -> str:
    """Readable loop structure, one stage per block (the Ansor-style state print). A loop's extent is taken from
    ``extents`` (``{stage: {loop: extent}}``, lowering's bound inference: ``Schedule.__str__``) where it has one,
    else the extent as scheduled (a stage computed inside another: over its whole shape)."""
    lines = []
    for s in self.stages:
      if s.is_placeholder: lines.append(f"Placeholder: {s.name}"); continue
      ext = {**s.leaf_extents(), **(extents or {}).get(s.name, {})}
      head = f"Stage {s.name}" + ("" if s.attach == ROOT else f" ({s.attach})") + (f" scope={s.scope}" if s.scope else "")
      lines.append(head)
      for d, it in enumerate(s.leaves):
        ann, mma, pipe = s.annotation(it), dict(s.tensorize).get(it), dict(s.pipeline).get(it)
        lines.append("  " * (d + 1) + f"for {it} in 0..{ext[it]}" + ("" if ann == "none" else f"  @{ann}")
                     + (f"  @mma.sync {mma}" if mma else "") + (f"  @pipeline {pipe} stages" if pipe is not None else ""))
    return "\n".join(lines)


def unique_name(existing, base: str) -> str:
  if base not in existing: return base
  k = 1
  while f"{base}.{k}" in existing: k += 1
  return f"{base}.{k}"


def is_ancestor_iter(stage: Stage, it: str) -> bool:
  return it in stage.leaves


def check_positive_factor(f, where: str) -> Factor:
  if isinstance(f, bool): raise ScheduleError(f"{where}: split factor must be a positive int or a variable, got {f!r}")
  if isinstance(f, int):
    if f <= 0: raise ScheduleError(f"{where}: split factor must be positive, got {f}")
    return f
  if isinstance(f, Expr):
    if f.op is Op.CONST:
      return check_positive_factor(int(f.arg), where)
    if f.op is not Op.VAR: raise ScheduleError(f"{where}: a symbolic split factor must be a variable, got {f}")
    return f
  raise ScheduleError(f"{where}: split factor must be a positive int or a variable, got {f!r}")


__all__ = ["State", "Stage", "Split", "Fuse", "Attach", "ROOT", "INLINE", "THREAD_TAGS", "BLOCK_TAGS", "ANNOTATIONS",
           "unique_name", "check_positive_factor", "replace"]
