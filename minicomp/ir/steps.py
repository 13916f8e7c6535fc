"""Schedule steps as data: each is a frozen dataclass that applies to a State and round-trips JSON.

Stages and loops are named (``"C"``, ``"i.0"``), so a step list reads like a script and
replays on a fresh State from the same ComputeDAG to the same program, byte for byte.
Symbolic split factors serialise as ``{"var": name}``.

(Over 400 lines: it is the whole step vocabulary, one small class per primitive, each with its checks; a
reader looks a step up here by its JSON ``kind``.)
"""
from __future__ import annotations

import json
from dataclasses import dataclass, fields, replace
from typing import Any, ClassVar

from minicomp.errors import ScheduleError
from minicomp.ir.expr import Expr, var
from minicomp.ir.mma import INTRINSICS
from minicomp.ir.ops import HALF_DTYPES, Op
from minicomp.ir.state import (ANNOTATIONS, BLOCK_TAGS, INLINE, ROOT, THREAD_TAGS, Attach, Fuse, Split, State,
                               check_positive_factor, unique_name)
from minicomp.ir.te import Tensor

STEP_TYPES: dict[str, type["Step"]] = {}


def register(cls):
  STEP_TYPES[cls.kind] = cls
  return cls


def _factor_json(f):
  return {"var": f.arg} if isinstance(f, Expr) else f


def _factor_from_json(f):
  return var(f["var"]) if isinstance(f, dict) else f


@dataclass(frozen=True)
class Step:
  kind: ClassVar[str] = ""

  def apply(self, s: State) -> Any: raise NotImplementedError

  def to_json(self) -> dict:
    d = {"step": self.kind}
    for f in fields(self):
      v = getattr(self, f.name)
      if f.name == "factors": v = [_factor_json(x) for x in v]
      elif f.name == "stages": v = _factor_json(v)
      elif isinstance(v, tuple): v = list(v)
      d[f.name] = v
    return d

  @staticmethod
  def from_json(d: dict) -> "Step":
    d = dict(d)
    cls = STEP_TYPES.get(d.pop("step", None))
    if cls is None: raise ScheduleError(f"unknown step in JSON: {d}")
    kw = {}
    for f in fields(cls):
      v = d[f.name]
      if f.name == "factors": v = tuple(_factor_from_json(x) for x in v)
      elif f.name == "stages": v = _factor_from_json(v)
      elif isinstance(v, list): v = tuple(v)
      kw[f.name] = v
    return cls(**kw)

  def __str__(self) -> str: return json.dumps(self.to_json())


def _loop(s: State, stage: str, it: str, what: str):
  st = s.stage(stage)
  if st.is_placeholder: raise ScheduleError(f"{what}: {stage!r} is a placeholder; it has no loops")
  if st.attach == INLINE: raise ScheduleError(f"{what}: stage {stage!r} is inlined; it has no loops")
  if it not in st.leaves: raise ScheduleError(f"{what}: {stage!r} has no loop {it!r}; its loops are {list(st.leaves)}")
  return st


@register
@dataclass(frozen=True)
class SplitStep(Step):
  """Split loop ``iter`` into ``len(factors) + 1`` loops; ``factors`` are the inner extents, outer to inner."""
  kind: ClassVar[str] = "split"
  stage: str
  iter: str
  factors: tuple

  def apply(self, s: State):
    st = _loop(s, self.stage, self.iter, "split")
    if not self.factors: raise ScheduleError(f"split {self.stage}.{self.iter}: needs at least one factor")
    fs = tuple(check_positive_factor(f, f"split {self.stage}.{self.iter}") for f in self.factors)
    if st.annotation(self.iter) != "none":
      raise ScheduleError(f"split {self.stage}.{self.iter}: the loop is already annotated {st.annotation(self.iter)!r}")
    names = set(dict(st.kinds))
    children = []
    for k in range(len(fs) + 1):
      n = unique_name(names, f"{self.iter}.{k}"); names.add(n); children.append(n)
    kind = st.kind(self.iter)
    pos = st.leaves.index(self.iter)
    s.set_stage(replace(st, leaves=st.leaves[:pos] + tuple(children) + st.leaves[pos + 1:],
                        relations=st.relations + (Split(self.iter, tuple(children), fs),),
                        kinds=st.kinds + tuple((c, kind) for c in children)))
    _move_attach(s, self.stage, {self.iter: children[-1]})
    return tuple(children)


@register
@dataclass(frozen=True)
class FuseStep(Step):
  """Fuse adjacent loops (outer to inner) into one."""
  kind: ClassVar[str] = "fuse"
  stage: str
  iters: tuple

  def apply(self, s: State):
    if not self.iters: raise ScheduleError(f"fuse {self.stage}: needs at least one loop")
    st = None
    for it in self.iters: st = _loop(s, self.stage, it, "fuse")
    pos = [st.leaves.index(it) for it in self.iters]
    if pos != list(range(pos[0], pos[0] + len(pos))):
      raise ScheduleError(f"fuse {self.stage} {list(self.iters)}: loops must be adjacent and in order; order is {list(st.leaves)}")
    kinds = {st.kind(it) for it in self.iters}
    if len(kinds) > 1: raise ScheduleError(f"fuse {self.stage} {list(self.iters)}: cannot fuse spatial with reduce loops")
    for it in self.iters:
      if st.annotation(it) != "none": raise ScheduleError(f"fuse {self.stage}.{it}: loop is annotated {st.annotation(it)!r}")
    if len(self.iters) == 1: return self.iters[0]
    child = unique_name(set(dict(st.kinds)), ".".join(self.iters) + ".fused")
    s.set_stage(replace(st, leaves=st.leaves[:pos[0]] + (child,) + st.leaves[pos[-1] + 1:],
                        relations=st.relations + (Fuse(tuple(self.iters), child),),
                        kinds=st.kinds + ((child, kinds.pop()),)))
    _move_attach(s, self.stage, {it: child for it in self.iters})
    return child


@register
@dataclass(frozen=True)
class ReorderStep(Step):
  """Reorder the given loops among the positions they occupy (others stay in place)."""
  kind: ClassVar[str] = "reorder"
  stage: str
  order: tuple

  def apply(self, s: State):
    st = None
    for it in self.order: st = _loop(s, self.stage, it, "reorder")
    if st is None: return
    if len(set(self.order)) != len(self.order): raise ScheduleError(f"reorder {self.stage}: repeated loop in {list(self.order)}")
    slots = sorted(st.leaves.index(it) for it in self.order)
    leaves = list(st.leaves)
    for p, it in zip(slots, self.order): leaves[p] = it
    s.set_stage(replace(st, leaves=tuple(leaves)))


@register
@dataclass(frozen=True)
class AnnotateStep(Step):
  """Bind a loop to a GPU index (blockIdx.*, threadIdx.*, vthread) or mark it unroll / vectorize."""
  kind: ClassVar[str] = "annotate"
  stage: str
  iter: str
  annotation: str

  def apply(self, s: State):
    st = _loop(s, self.stage, self.iter, "annotate")
    a = self.annotation
    if a not in ANNOTATIONS: raise ScheduleError(f"annotate {self.stage}.{self.iter}: unknown annotation {a!r}; use one of {ANNOTATIONS}")
    if st.kind(self.iter) == "reduce" and (a in BLOCK_TAGS or a in THREAD_TAGS or a == "vthread"):
      raise ScheduleError(f"bind {self.stage}.{self.iter} -> {a}: {self.iter!r} is a reduction loop; binding it to a GPU "
                          "index needs a cross-thread reduction: use cross_thread_reduce(stage, loop) instead")
    if a in BLOCK_TAGS + THREAD_TAGS:
      for other, b in st.annotations:
        if b == a and other != self.iter: raise ScheduleError(f"bind {self.stage}.{self.iter} -> {a}: {other!r} is already bound to {a}")
    anns = tuple((k, v) for k, v in st.annotations if k != self.iter) + ((self.iter, a),)
    s.set_stage(replace(st, annotations=anns))


@register
@dataclass(frozen=True)
class CrossThreadReduceStep(Step):
  """Bind a reduction loop to threadIdx.x: threads reduce partial results together (warp shuffle or shared-memory tree)."""
  kind: ClassVar[str] = "cross_thread_reduce"
  stage: str
  iter: str
  method: str = "shuffle"

  def apply(self, s: State):
    st = _loop(s, self.stage, self.iter, "cross_thread_reduce")
    if st.kind(self.iter) != "reduce": raise ScheduleError(f"cross_thread_reduce {self.stage}.{self.iter}: not a reduction loop")
    if self.method not in ("shuffle", "tree"): raise ScheduleError(f"cross_thread_reduce: method must be 'shuffle' or 'tree', got {self.method!r}")
    if st.cross_thread: raise ScheduleError(f"cross_thread_reduce {self.stage}: already has a cross-thread reduction")
    if any(b == "threadIdx.x" for _, b in st.annotations): raise ScheduleError(f"cross_thread_reduce {self.stage}: threadIdx.x already bound")
    s.set_stage(replace(st, annotations=st.annotations + ((self.iter, "threadIdx.x"),),
                        cross_thread=((self.iter, self.method),)))


@register
@dataclass(frozen=True)
class PragmaStep(Step):
  """``auto_unroll_max_step``: unroll inner loops whose total trip count is at most ``value``."""
  kind: ClassVar[str] = "pragma"
  stage: str
  iter: str
  pragma: str
  value: int

  def apply(self, s: State):
    st = _loop(s, self.stage, self.iter, "pragma")
    if self.pragma != "auto_unroll_max_step": raise ScheduleError(f"pragma {self.pragma!r} unknown; known: auto_unroll_max_step")
    if not isinstance(self.value, int) or self.value < 0: raise ScheduleError(f"pragma auto_unroll_max_step: value must be an int >= 0, got {self.value!r}")
    s.set_stage(replace(st, auto_unroll_max_step=self.value))


@register
@dataclass(frozen=True)
class TensorizeStep(Step):
  """Compute the loops of a sum reduction from ``iter`` inward with a warp's tensor-core ``mma.sync``
  (``intrinsic``, a name of ``codegen/tensor_core.INTRINSICS``). Lowering checks the loops' shape and the lanes
  (``minicomp/ir/mma.py``)."""
  kind: ClassVar[str] = "tensorize"
  stage: str
  iter: str
  intrinsic: str

  def apply(self, s: State):
    st = _loop(s, self.stage, self.iter, "tensorize")
    where = f"tensorize {self.stage}.{self.iter}"
    intr = INTRINSICS.get(self.intrinsic)
    if intr is None: raise ScheduleError(f"{where}: no tensor-core intrinsic {self.intrinsic!r}; use one of {sorted(INTRINSICS)}")
    red = st.tensor.reduce
    if red is None or red.combiner != "sum": raise ScheduleError(f"{where}: {self.stage!r} is not a sum reduction")
    if st.cross_thread: raise ScheduleError(f"{where}: {self.stage!r} has a cross-thread reduction")
    if st.tensorize: raise ScheduleError(f"{where}: {self.stage!r} is already tensorized at {st.tensorize[0][0]!r}")
    inner = st.leaves[st.leaves.index(self.iter):]
    kinds = sorted(st.kind(x) for x in inner)
    if kinds != ["reduce", "spatial", "spatial"]:
      raise ScheduleError(f"{where}: the loops from {self.iter!r} inward must be two spatial loops of extent 2 (the "
                          f"accumulator's row and column pairs) and one reduction loop of extent {intr.k}; they are {list(inner)}")
    bad = [x for x in inner if st.annotation(x) != "none"]
    if bad: raise ScheduleError(f"{where}: loop {bad[0]!r} is annotated {st.annotation(bad[0])!r}; the tensorized loops are the instruction's")
    s.set_stage(replace(st, tensorize=((self.iter, self.intrinsic),)))


@register
@dataclass(frozen=True)
class PipelineStep(Step):
  """Fetch the shared-memory stages computed at loop ``iter`` of ``stage`` ``stages - 1`` iterations ahead, into
  ``stages`` buffers, with asynchronous copies (``cp.async``, sm_80+), so that an iteration's arithmetic overlaps
  the next tiles' loads. Lowering builds the prologue, the slots and the waits (``minicomp/ir/nest.py``). ``stages``
  may be a variable (a sketch's choice; ``Schedule.substitute`` gives it its value)."""
  kind: ClassVar[str] = "pipeline"
  stage: str
  iter: str
  stages: Any

  def apply(self, s: State):
    st = _loop(s, self.stage, self.iter, "pipeline")
    where = f"pipeline {self.stage}.{self.iter}"
    symbolic = isinstance(self.stages, Expr) and self.stages.op is Op.VAR
    if not symbolic and (not isinstance(self.stages, int) or isinstance(self.stages, bool) or not 2 <= self.stages <= 8):
      raise ScheduleError(f"{where}: stages must be an int from 2 to 8 (buffers per shared tile) or a variable, got "
                          f"{self.stages!r}")
    if st.annotation(self.iter) != "none":
      raise ScheduleError(f"{where}: loop {self.iter!r} is annotated {st.annotation(self.iter)!r}; a pipelined loop "
                          "runs its iterations in order")
    if st.kind(self.iter) != "reduce":
      raise ScheduleError(f"{where}: {self.iter!r} is a spatial loop; pipeline the reduction loop whose iterations "
                          "fetch the shared tiles")
    fetched = [o.name for o in s.stages if o.attach == Attach("at", self.stage, self.iter) and o.scope == "shared"]
    if not fetched:
      raise ScheduleError(f"{where}: no shared-memory stage is computed at {self.iter!r} (cache_read one to "
                          "'shared' and compute_at it there first)")
    s.set_stage(replace(st, pipeline=tuple(p for p in st.pipeline if p[0] != self.iter) + ((self.iter, self.stages),)))


def _check_attachable(s: State, name: str, what: str, output_into: str | None = None):
  """The stage ``name`` if it may leave the root: not a placeholder, and not an output -- except, with
  ``output_into``, an output computed inside the stage of that name, which must have its shape (lowering checks
  that it reads the output elementwise and is its only reader: ``lower._check_output_at``)."""
  st = s.stage(name)
  if st.is_placeholder: raise ScheduleError(f"{what}: {name!r} is a placeholder")
  if name in s.outputs:
    if output_into is None or st.tensor.reduce_axes or s.stage(output_into).tensor.shape != st.tensor.shape:
      raise ScheduleError(f"{what}: {name!r} is an output of the DAG; it stays at root, or is computed inside the "
                          "one stage of its shape that reads it elementwise")
  return st


@register
@dataclass(frozen=True)
class ComputeAtStep(Step):
  """Compute ``stage`` inside loop ``iter`` of ``target`` (which must consume it, directly or not)."""
  kind: ClassVar[str] = "compute_at"
  stage: str
  target: str
  iter: str

  def apply(self, s: State):
    st = _check_attachable(s, self.stage, f"compute_at {self.stage} -> {self.target}.{self.iter}", self.target)
    if not s.reaches(self.stage, self.target):
      raise ScheduleError(f"compute_at {self.stage} -> {self.target}.{self.iter}: {self.target!r} does not consume "
                          f"{self.stage!r}, so it is not an ancestor in the loop tree")
    _loop(s, self.target, self.iter, f"compute_at {self.stage}")
    s.set_stage(replace(st, attach=Attach("at", self.target, self.iter)))


@register
@dataclass(frozen=True)
class ComputeInlineStep(Step):
  """Substitute the stage's expression into its consumers (no loops of its own)."""
  kind: ClassVar[str] = "compute_inline"
  stage: str

  def apply(self, s: State):
    st = _check_attachable(s, self.stage, f"compute_inline {self.stage}")
    if st.tensor.reduce_axes: raise ScheduleError(f"compute_inline {self.stage}: a reduction cannot be inlined")
    for o in s.stages:
      if o.attach.kind == "at" and o.attach.stage == self.stage:
        raise ScheduleError(f"compute_inline {self.stage}: stage {o.name!r} is computed at it")
    s.set_stage(replace(st, attach=INLINE))


@register
@dataclass(frozen=True)
class ComputeRootStep(Step):
  """Compute the stage at the top level (its own kernel)."""
  kind: ClassVar[str] = "compute_root"
  stage: str

  def apply(self, s: State):
    st = s.stage(self.stage)
    if st.is_placeholder: raise ScheduleError(f"compute_root: {self.stage!r} is a placeholder")
    s.set_stage(replace(st, attach=ROOT))


def _copy_tensor(name: str, src: Tensor) -> Tensor:
  from minicomp.ir.te import compute
  return compute(src.shape, lambda *ax: src[ax], name=name)


@register
@dataclass(frozen=True)
class CacheReadStep(Step):
  """Add a stage ``<tensor>.<scope>`` that copies ``tensor``; ``readers`` read the copy instead."""
  kind: ClassVar[str] = "cache_read"
  tensor: str
  scope: str
  readers: tuple

  def apply(self, s: State):
    what = f"cache_read {self.tensor} -> {self.scope}"
    if self.scope not in ("shared", "local"): raise ScheduleError(f"{what}: scope must be 'shared' or 'local'")
    src = s.stage(self.tensor)
    if not self.readers: raise ScheduleError(f"{what}: needs at least one reader")
    for r in self.readers:
      if r not in s.consumers(self.tensor): raise ScheduleError(f"{what}: {r!r} does not read {self.tensor!r}")
    name = unique_name({x.name for x in s.stages}, f"{self.tensor}.{self.scope}")
    new_t = _copy_tensor(name, src.tensor)
    from minicomp.ir.state import Stage
    root = tuple(a.name for a in new_t.axes)
    new_st = Stage(name, new_t, root, tuple((a, "spatial") for a in root), root, scope=self.scope)
    for r in self.readers: _rewrite_reads(s, r, self.tensor, new_t)
    s.stages.insert(s.index(self.tensor) + 1, new_st)
    return name


@register
@dataclass(frozen=True)
class CacheWriteStep(Step):
  """Compute ``stage`` into a ``<stage>.<scope>`` buffer; ``stage`` becomes a copy out of it. Apply before other steps on the stage."""
  kind: ClassVar[str] = "cache_write"
  stage: str
  scope: str

  def apply(self, s: State):
    what = f"cache_write {self.stage} -> {self.scope}"
    if self.scope not in ("local", "shared"): raise ScheduleError(f"{what}: scope must be 'local' or 'shared'")
    st = s.stage(self.stage)
    if st.is_placeholder: raise ScheduleError(f"{what}: {self.stage!r} is a placeholder")
    if st.relations or st.annotations or st.attach != ROOT:
      raise ScheduleError(f"{what}: apply cache_write before any other step on {self.stage!r}")
    from minicomp.ir.state import Stage
    from minicomp.ir.te import Tensor as T
    name = unique_name({x.name for x in s.stages}, f"{self.stage}.{self.scope}")
    old = st.tensor
    cache_t = T(name, old.shape, old.dtype, old.axes, old.body, old.tag)
    copy_t = _copy_tensor(self.stage, cache_t)
    cache_st = Stage(name, cache_t, st.root, st.kinds, st.leaves, scope=self.scope)
    root = tuple(a.name for a in copy_t.axes)
    s.set_stage(Stage(self.stage, copy_t, root, tuple((a, "spatial") for a in root), root))
    s.stages.insert(s.index(self.stage), cache_st)
    return name


@register
@dataclass(frozen=True)
class StorageAlignStep(Step):
  """Pad the row stride of the stage's buffer at ``axis`` to ``k*factor + offset`` elements (avoids bank conflicts)."""
  kind: ClassVar[str] = "storage_align"
  stage: str
  axis: int
  factor: int
  offset: int

  def apply(self, s: State):
    st = s.stage(self.stage)
    what = f"storage_align {self.stage} axis={self.axis}"
    if st.is_placeholder: raise ScheduleError(f"{what}: placeholder")
    if not 0 <= self.axis < len(st.tensor.shape) - 1: raise ScheduleError(f"{what}: axis must be in [0, {len(st.tensor.shape) - 1})")
    if self.factor <= 0 or not 0 <= self.offset < self.factor: raise ScheduleError(f"{what}: need factor > 0 and 0 <= offset < factor")
    s.set_stage(replace(st, storage_align=tuple(a for a in st.storage_align if a[0] != self.axis) + ((self.axis, self.factor, self.offset),)))


@register
@dataclass(frozen=True)
class RfactorStep(Step):
  """Factor a split reduction: ``iter`` (one part of a split reduce loop) becomes a spatial axis of a new
  stage ``<stage>.rf`` that reduces over the other part; ``stage`` then reduces over ``iter`` by reading it.
  Apply right after the split, before other steps on the stage."""
  kind: ClassVar[str] = "rfactor"
  stage: str
  iter: str

  def apply(self, s: State):
    from minicomp.ir.expr import IterVar, ReduceArg, const as c_, select
    from minicomp.ir.rewrite import substitute
    from minicomp.ir.state import Stage
    from minicomp.ir.te import reduce_identity
    st = _loop(s, self.stage, self.iter, "rfactor")
    what = f"rfactor {self.stage}.{self.iter}"
    t = st.tensor
    if t.reduce is None or st.kind(self.iter) != "reduce": raise ScheduleError(f"{what}: {self.iter!r} is not a reduction loop")
    splits = [r for r in st.relations if isinstance(r, Split) and self.iter in r.children]
    if len(st.relations) != 1 or not splits or len(splits[0].children) != 2 or st.annotations or st.attach != ROOT:
      raise ScheduleError(f"{what}: rfactor needs exactly one two-way split of a reduce axis and no other step on "
                          f"{self.stage!r} before it (relations: {st.relations})")
    sp = splits[0]
    if not isinstance(sp.factors[0], int): raise ScheduleError(f"{what}: the split factor must be concrete")
    f = sp.factors[0]
    red = t.reduce
    k_ax = next(a for a in red.axes if a.name == sp.parent)
    K = int(k_ax.extent.arg)
    outer_n = -(-K // f)
    is_inner = self.iter == sp.children[1]
    rf_ext, rest_ext = (f, outer_n) if is_inner else (outer_n, f)
    rf_var = IterVar(var(self.iter), c_(rf_ext), "spatial")
    rest = IterVar(var(sp.children[0] if is_inner else sp.children[1]), c_(rest_ext), "reduce")
    ko, ki = (rest, rf_var) if is_inner else (rf_var, rest)
    kval = ko.var * f + ki.var
    body = substitute(t.body.src[0], {k_ax.name: kval})
    if K % f: body = select(kval < K, body, reduce_identity(red.combiner, t.dtype))
    axes_rf = (rf_var,) + t.axes
    others = tuple(a for a in red.axes if a.name != k_ax.name)
    rf_dtype = t.dtype
    if t.dtype in HALF_DTYPES:     # a half sum's partials are float, as it accumulates; a product's factors widened
      rf_dtype = "float32"         # (the same float arithmetic, in the form a tensorized update takes)
      wide = lambda e: e if e.dtype == rf_dtype else Expr.make(Op.CAST, rf_dtype, (e,))   # noqa: E731
      body = Expr.make(Op.MUL, rf_dtype, tuple(map(wide, body.src))) if body.op is Op.MUL else wide(body)
    rf_body = Expr.make(Op.REDUCE, rf_dtype, (body,), ReduceArg(red.combiner, (rest,) + others))
    names = {x.name for x in s.stages}
    rf_name = unique_name(names, f"{self.stage}.rf")
    rf_t = Tensor(rf_name, (rf_ext,) + t.shape, rf_dtype, axes_rf, rf_body, t.tag)
    r = IterVar(var(self.iter), c_(rf_ext), "reduce")
    new_body = Expr.make(Op.REDUCE, t.dtype, (rf_t[(r,) + tuple(a.var for a in t.axes)],), ReduceArg(red.combiner, (r,), red.init))
    new_t = Tensor(t.name, t.shape, t.dtype, t.axes, new_body, t.tag)
    root = tuple(a.name for a in t.axes) + (self.iter,)
    s.set_stage(Stage(self.stage, new_t, root, tuple((a.name, "spatial") for a in t.axes) + ((self.iter, "reduce"),), root))
    rf_root = tuple(a.name for a in axes_rf) + tuple(a.name for a in (rest,) + others)
    rf_kinds = tuple((a.name, "spatial") for a in axes_rf) + tuple((a.name, "reduce") for a in (rest,) + others)
    s.stages.insert(s.index(self.stage), Stage(rf_name, rf_t, rf_root, rf_kinds, rf_root))
    return rf_name


def _move_attach(s: State, stage: str, moved: dict[str, str]) -> None:
  """Stages computed at a loop that was split / fused follow it (to the innermost part: same position)."""
  for o in list(s.stages):
    if o.attach.kind == "at" and o.attach.stage == stage and o.attach.iter in moved:
      s.set_stage(replace(o, attach=Attach("at", stage, moved[o.attach.iter])))


def _rewrite_reads(s: State, reader: str, old: str, new_t: Tensor) -> None:
  from minicomp.ir.rewrite import map_loads
  st = s.stage(reader)
  t = st.tensor
  body = map_loads(t.body, lambda n: Expr.make(Op.LOAD, n.dtype, n.src, new_t) if n.arg.name == old else n)
  nt = Tensor(t.name, t.shape, t.dtype, t.axes, body, t.tag)
  s.set_stage(replace(st, tensor=nt))


def apply_step(s: State, step: Step, index: int | None = None):
  """Apply ``step`` to ``s`` (in place), record it, and return what the step returns (new loop / stage names)."""
  try:
    out = step.apply(s)
  except ScheduleError as e:
    at = f"step {index if index is not None else len(s.steps)} {step}"
    raise ScheduleError(f"{at}: {e}") from None
  s.steps.append(step)
  return out


def steps_to_json(steps) -> str:
  return json.dumps([st.to_json() for st in steps], indent=1)


def steps_from_json(text: str | list) -> list[Step]:
  """The steps of ``text`` (what :meth:`Schedule.to_json` writes, or its parsed list); text that is not a
  JSON list of step objects with their fields is a ScheduleError naming the step."""
  try:
    data = json.loads(text) if isinstance(text, str) else text
  except ValueError as e:
    raise ScheduleError(f"schedule steps are not JSON: {e}") from None
  if not isinstance(data, list): raise ScheduleError(f"schedule steps must be a JSON list, got {type(data).__name__}")
  out = []
  for k, d in enumerate(data):
    if not isinstance(d, dict): raise ScheduleError(f"step {k} is not a JSON object: {str(d)[:80]}")
    try:
      out.append(Step.from_json(d))
    except (KeyError, TypeError, ValueError) as e:
      raise ScheduleError(f"step {k} {json.dumps(d)[:120]}: a missing or malformed field ({type(e).__name__}: {e})") from None
  return out
