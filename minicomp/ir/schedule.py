"""The user-facing schedule: TVM-style primitives that append steps to a State.

(Over 400 lines for its docstrings: every primitive carries a numpydoc docstring with a before / after
example that tests/test_schedule_docs.py runs; the code is some 150 lines.)

>>> import minicomp as mc
>>> A = mc.placeholder((64, 64), name="A")
>>> B = mc.placeholder((64, 64), name="B")
>>> k = mc.reduce_axis(64, name="k")
>>> C = mc.compute((64, 64), lambda i, j: mc.sum(A[i, k] * B[k, j], axis=k), name="C")
>>> s = mc.Schedule([C])
>>> i, j = s.axis(C)                       # loop names of stage C
>>> io, ii = s.split(C, i, 16)             # -> ("i.0", "i.1")
>>> s.bind(C, io, "blockIdx.x")
>>> ko, ki = s.split(C, "k", 8)            # -> ("k.0", "k.1")
>>> AS = s.cache_read(A, "shared", [C])    # -> stage name "A.shared"
>>> s.compute_at(AS, C, ko)
>>> print(s)                               # A.shared: the 1 x 8 slice of A one (i, j, k.0) reads
Placeholder: A
Stage A.shared (at C.k.0) scope=shared
  for ax0 in 0..1
    for ax1 in 0..8
Placeholder: B
Stage C
  for i.0 in 0..4  @blockIdx.x
    for i.1 in 0..16
      for j in 0..64
        for k.0 in 0..8
          for k.1 in 0..8

Stages are named by their tensor (or tensor name); loops by name. Every primitive is
recorded as a step (``s.steps``), so ``Schedule.from_json(outputs, s.to_json())`` replays the
same schedule and lowers to the same program:

>>> mc.Schedule.from_json([C], s.to_json()).to_json() == s.to_json()
True

The printed schedule (``print(s)``) lists each stage's loops outer to inner with their extents and
annotations, the extents after bound inference: a stage computed inside another covers the region one
iteration of its attach loop needs, as lowering builds it. ``str(s.state)`` prints the extents as
scheduled (such a stage over its whole shape), and so does ``print(s)`` for a schedule that cannot be
lowered yet.
"""
from __future__ import annotations

from typing import Sequence

from minicomp.errors import MinicompError, ScheduleError
from minicomp.ir.expr import Expr
from minicomp.ir.dag import ComputeDAG
from minicomp.ir.lower import inferred_extents
from minicomp.ir.state import State
from minicomp.ir import steps as S


def _name(x) -> str:
  if isinstance(x, str): return x
  n = getattr(x, "name", None)
  if isinstance(n, str): return n
  raise ScheduleError(f"expected a tensor, a stage name or a loop name, got {x!r}")


class Schedule:
  """A schedule for the computation that produces ``outputs`` (a State plus its steps).

  Every primitive takes the stage first, as its tensor or its name, and loops by name (or an object
  with a ``name``). It changes ``self.state`` in place, records one step (``tile`` records three), and
  returns the new loop or stage names it creates, if any. An illegal primitive raises
  :class:`~minicomp.errors.ScheduleError`; when the step itself does not apply, the message starts with
  the step's index and JSON (``step 2 {"step": "split", ...}: ...``) and the state is left as it was.

  Parameters
  ----------
  outputs : list of Tensor or ComputeDAG
      The tensors to compute (their DAG is built from them), or a ComputeDAG.
  state : State, optional
      The state to continue from; a fresh one of the DAG (every stage at root, no steps) by default.
  """

  def __init__(self, outputs, state: State | None = None):
    self.dag = outputs if isinstance(outputs, ComputeDAG) else ComputeDAG(outputs)
    self.state = state if state is not None else State.from_dag(self.dag)

  # -- introspection
  @property
  def steps(self) -> list[S.Step]:
    """The recorded steps, in order (a copy of ``self.state.steps``)."""
    return list(self.state.steps)
  def stage_names(self) -> list[str]:
    """Names of all stages (placeholders included), in topological order."""
    return [s.name for s in self.state.stages]
  def loops(self, t) -> list[str]:
    """Current loop names of a stage, outer to inner.

    Parameters
    ----------
    t : Tensor or str
        The stage.

    Returns
    -------
    list of str
        Its loops after the steps so far (:meth:`axis` gives the original spatial axes).

    Raises
    ------
    ScheduleError
        If there is no stage ``t``.

    Examples
    --------
    >>> import minicomp as mc
    >>> A = mc.placeholder((64, 32), name="A")
    >>> B = mc.compute((64, 32), lambda i, j: A[i, j] * 2, name="B")
    >>> s = mc.Schedule([B])
    >>> s.split(B, "i", 16)
    ('i.0', 'i.1')
    >>> s.loops(B), s.axis(B)
    (['i.0', 'i.1', 'j'], ['i', 'j'])
    """
    return list(self.state.stage(_name(t)).leaves)
  def axis(self, t) -> list[str]:
    """Loop names of the stage's spatial axes (as created: before any split)."""
    st = self.state.stage(_name(t))
    return [a.name for a in st.tensor.axes]
  def reduce_axis(self, t) -> list[str]:
    """Loop names of the stage's reduction axes (as created: before any split); empty if it is no reduction."""
    st = self.state.stage(_name(t))
    return [a.name for a in st.tensor.reduce_axes]
  def copy(self) -> "Schedule":
    """An independent schedule with the same stages and steps (later primitives on either leave the other alone)."""
    return Schedule(self.dag, self.state.copy())
  def __str__(self) -> str:
    """The printed state: each stage's loops, outer to inner, with extents and annotations. The extents are
    bound inference's, as lowering builds the loops (a stage computed inside another over the region one iteration
    of its attach loop needs); a schedule that cannot be lowered yet prints its extents as scheduled."""
    try: extents = inferred_extents(self.state)
    except MinicompError: extents = None
    return self.state.format(extents)

  def _do(self, step: S.Step):
    return S.apply_step(self.state, step)

  # -- loop transforms
  def split(self, t, loop, factors) -> tuple[str, ...]:
    """Split a loop into ``len(factors) + 1`` nested loops.

    ``factors`` are the extents of the new inner loops, outer to inner; the outermost new loop takes
    ``ceil(extent / prod(factors))`` iterations, and lowering guards the tail when the extent does not
    divide. A factor may be a variable (``mc.var("f")``): the schedule is then symbolic (see :meth:`params`,
    :meth:`substitute`). The new loops are named ``<loop>.0``, ``<loop>.1``, ... (made unique), keep the
    kind of ``loop`` (spatial or reduce) and take its place; a stage computed at ``loop`` moves to the
    innermost one.

    Parameters
    ----------
    t : Tensor or str
        The stage.
    loop : str
        One of its current loops (see :meth:`loops`).
    factors : int, Expr or sequence of them
        The inner extents, outer to inner: positive ints or variables.

    Returns
    -------
    tuple of str
        The new loop names, outer to inner.

    Raises
    ------
    ScheduleError
        If ``t`` is a placeholder or inlined, has no loop ``loop``, ``loop`` is already annotated (bound,
        unrolled, ...), or ``factors`` is empty or holds a factor that is neither a positive int nor a variable.

    Examples
    --------
    >>> import minicomp as mc
    >>> A = mc.placeholder((64, 32), name="A")
    >>> B = mc.compute((64, 32), lambda i, j: A[i, j] * 2, name="B")
    >>> s = mc.Schedule([B])
    >>> print(s)
    Placeholder: A
    Stage B
      for i in 0..64
        for j in 0..32
    >>> s.split(B, "i", 16)
    ('i.0', 'i.1')
    >>> print(s)
    Placeholder: A
    Stage B
      for i.0 in 0..4
        for i.1 in 0..16
          for j in 0..32
    >>> s.split(B, "j", [4, 2])
    ('j.0', 'j.1', 'j.2')
    >>> s.loops(B)
    ['i.0', 'i.1', 'j.0', 'j.1', 'j.2']
    """
    fs = tuple(factors) if isinstance(factors, (list, tuple)) else (factors,)
    return self._do(S.SplitStep(_name(t), _name(loop), fs))

  def fuse(self, t, *loops) -> str:
    """Fuse adjacent loops into one.

    The loops must be adjacent, given outer to inner, of one kind (all spatial or all reduce) and not
    annotated. The fused loop, named ``<a>.<b>...fused``, takes their place with the product of their
    extents; stages computed at any of them move to it. Fusing a single loop is a no-op that returns it.

    Parameters
    ----------
    t : Tensor or str
        The stage.
    *loops : str, or one list of str
        The loops to fuse, outer to inner.

    Returns
    -------
    str
        The fused loop's name.

    Raises
    ------
    ScheduleError
        If no loop is given, ``t`` is a placeholder or inlined or lacks one of the loops, the loops are not
        adjacent and in order, they mix spatial and reduce loops, or one is annotated.

    Examples
    --------
    >>> import minicomp as mc
    >>> A = mc.placeholder((64, 32), name="A")
    >>> B = mc.compute((64, 32), lambda i, j: A[i, j] * 2, name="B")
    >>> s = mc.Schedule([B])
    >>> print(s)
    Placeholder: A
    Stage B
      for i in 0..64
        for j in 0..32
    >>> s.fuse(B, "i", "j")
    'i.j.fused'
    >>> print(s)
    Placeholder: A
    Stage B
      for i.j.fused in 0..2048
    """
    if len(loops) == 1 and isinstance(loops[0], (list, tuple)): loops = tuple(loops[0])
    return self._do(S.FuseStep(_name(t), tuple(_name(l) for l in loops)))

  def reorder(self, t, *loops) -> None:
    """Reorder loops among the positions they occupy.

    The given loops are placed, in the given order, into the positions they occupy together; loops not
    named stay where they are. Annotations and attached stages go with their loops.

    Parameters
    ----------
    t : Tensor or str
        The stage.
    *loops : str, or one list of str
        Some of its current loops, in the new order.

    Returns
    -------
    None

    Raises
    ------
    ScheduleError
        If ``t`` is a placeholder or inlined, lacks one of the loops, or a loop is named twice.

    Examples
    --------
    >>> import minicomp as mc
    >>> A = mc.placeholder((64, 32), name="A")
    >>> B = mc.compute((64, 32), lambda i, j: A[i, j] * 2, name="B")
    >>> s = mc.Schedule([B])
    >>> print(s)
    Placeholder: A
    Stage B
      for i in 0..64
        for j in 0..32
    >>> s.reorder(B, "j", "i")
    >>> print(s)
    Placeholder: A
    Stage B
      for j in 0..32
        for i in 0..64
    """
    if len(loops) == 1 and isinstance(loops[0], (list, tuple)): loops = tuple(loops[0])
    self._do(S.ReorderStep(_name(t), tuple(_name(l) for l in loops)))

  def tile(self, t, x, y, fx: int, fy: int) -> tuple[str, str, str, str]:
    """Tile two loops: split ``x`` by ``fx`` and ``y`` by ``fy``, then reorder to ``(xo, yo, xi, yi)``.

    A shorthand that records three steps: ``split(t, x, fx)``, ``split(t, y, fy)`` and
    ``reorder(t, xo, yo, xi, yi)`` (the four loops take the positions they occupy after the splits).

    Parameters
    ----------
    t : Tensor or str
        The stage.
    x, y : str
        Two of its current loops, normally adjacent with ``x`` outside ``y``.
    fx, fy : int or Expr
        The inner extents of ``x`` and ``y`` (positive ints or variables, as for :meth:`split`).

    Returns
    -------
    tuple of str
        ``(xo, yo, xi, yi)``.

    Raises
    ------
    ScheduleError
        As :meth:`split` for either split (when the second one fails, the first stays applied).

    Examples
    --------
    >>> import minicomp as mc
    >>> A = mc.placeholder((64, 32), name="A")
    >>> B = mc.compute((64, 32), lambda i, j: A[i, j] * 2, name="B")
    >>> s = mc.Schedule([B])
    >>> print(s)
    Placeholder: A
    Stage B
      for i in 0..64
        for j in 0..32
    >>> s.tile(B, "i", "j", 16, 8)
    ('i.0', 'j.0', 'i.1', 'j.1')
    >>> print(s)
    Placeholder: A
    Stage B
      for i.0 in 0..4
        for j.0 in 0..4
          for i.1 in 0..16
            for j.1 in 0..8
    """
    xo, xi = self.split(t, x, fx)
    yo, yi = self.split(t, y, fy)
    self.reorder(t, xo, yo, xi, yi)
    return xo, yo, xi, yi

  def bind(self, t, loop, tag: str) -> None:
    """Bind a loop to a GPU index: ``blockIdx.[xyz]``, ``threadIdx.[xyz]`` or ``vthread``.

    The loop's iterations become the blocks or threads of the kernel along that index (``vthread``: virtual
    threads, interleaved in each thread). This is the annotate step, so ``tag`` may also be ``"unroll"``,
    ``"vectorize"`` (see :meth:`unroll`, :meth:`vectorize`) or ``"none"``; a new tag replaces the loop's
    old one. Reduction loops cannot be bound: use :meth:`cross_thread_reduce`.

    Parameters
    ----------
    t : Tensor or str
        The stage.
    loop : str
        One of its current loops.
    tag : str
        ``"blockIdx.x"``, ``"blockIdx.y"``, ``"blockIdx.z"``, ``"threadIdx.x"``, ``"threadIdx.y"``,
        ``"threadIdx.z"`` or ``"vthread"``.

    Returns
    -------
    None

    Raises
    ------
    ScheduleError
        If ``t`` is a placeholder or inlined or has no loop ``loop``, ``tag`` is unknown, ``loop`` is a
        reduction loop and ``tag`` a GPU index, or another loop of ``t`` is already bound to ``tag``.

    Examples
    --------
    >>> import minicomp as mc
    >>> A = mc.placeholder((64, 32), name="A")
    >>> B = mc.compute((64, 32), lambda i, j: A[i, j] * 2, name="B")
    >>> s = mc.Schedule([B])
    >>> io, ii = s.split(B, "i", 16)
    >>> print(s)
    Placeholder: A
    Stage B
      for i.0 in 0..4
        for i.1 in 0..16
          for j in 0..32
    >>> s.bind(B, io, "blockIdx.x")
    >>> s.bind(B, ii, "threadIdx.x")
    >>> print(s)
    Placeholder: A
    Stage B
      for i.0 in 0..4  @blockIdx.x
        for i.1 in 0..16  @threadIdx.x
          for j in 0..32
    >>> s.bind(B, "j", "threadIdx.x")
    Traceback (most recent call last):
    ...
    minicomp.errors.ScheduleError: step 3 {...}: bind B.j -> threadIdx.x: 'i.1' is already bound to threadIdx.x
    """
    self._do(S.AnnotateStep(_name(t), _name(loop), tag))

  def unroll(self, t, loop) -> None:
    """Mark a loop to be unrolled.

    The CUDA emitter puts ``#pragma unroll`` before the loop. Records an annotate step, like :meth:`bind`;
    a later annotation of the same loop replaces it.

    Parameters
    ----------
    t : Tensor or str
        The stage.
    loop : str
        One of its current loops (spatial or reduce).

    Returns
    -------
    None

    Raises
    ------
    ScheduleError
        If ``t`` is a placeholder or inlined, or has no loop ``loop``.

    Examples
    --------
    >>> import minicomp as mc
    >>> A = mc.placeholder((64, 32), name="A")
    >>> B = mc.compute((64, 32), lambda i, j: A[i, j] * 2, name="B")
    >>> s = mc.Schedule([B])
    >>> jo, ji = s.split(B, "j", 4)
    >>> print(s)
    Placeholder: A
    Stage B
      for i in 0..64
        for j.0 in 0..8
          for j.1 in 0..4
    >>> s.unroll(B, ji)
    >>> print(s)
    Placeholder: A
    Stage B
      for i in 0..64
        for j.0 in 0..8
          for j.1 in 0..4  @unroll
    """
    self._do(S.AnnotateStep(_name(t), _name(loop), "unroll"))

  def vectorize(self, t, loop) -> None:
    """Mark a loop to be vectorized.

    Meant for the innermost loop: when its extent is 2 or 4, its body is one float32 store outside local
    memory, and every access that uses the loop is float32, contiguous and aligned in it, the CUDA emitter
    writes ``float2`` / ``float4`` loads and stores; otherwise an unrolled scalar loop. Records an annotate
    step, like :meth:`bind`.

    Parameters
    ----------
    t : Tensor or str
        The stage.
    loop : str
        One of its current loops.

    Returns
    -------
    None

    Raises
    ------
    ScheduleError
        If ``t`` is a placeholder or inlined, or has no loop ``loop``.

    Examples
    --------
    >>> import minicomp as mc
    >>> A = mc.placeholder((64, 32), name="A")
    >>> B = mc.compute((64, 32), lambda i, j: A[i, j] * 2, name="B")
    >>> s = mc.Schedule([B])
    >>> jo, ji = s.split(B, "j", 4)
    >>> print(s)
    Placeholder: A
    Stage B
      for i in 0..64
        for j.0 in 0..8
          for j.1 in 0..4
    >>> s.vectorize(B, ji)
    >>> print(s)
    Placeholder: A
    Stage B
      for i in 0..64
        for j.0 in 0..8
          for j.1 in 0..4  @vectorize
    """
    self._do(S.AnnotateStep(_name(t), _name(loop), "vectorize"))

  def pragma(self, t, loop, name: str, value: int) -> None:
    """Set a pragma on a stage; the only one is ``"auto_unroll_max_step"``.

    ``pragma(C, loop, "auto_unroll_max_step", n)`` unrolls ``C``'s innermost unannotated loops, from the
    inside out, while they have constant extents whose product stays at most ``n`` (0: off), up to the first
    loop that holds a block barrier (a shared stage computed in it: docs/lowering.md). ``loop`` must
    be a loop of the stage (it marks where the pragma was placed), but the value applies to the whole stage;
    a later pragma replaces it. The printed state does not show it; the lowered kernel carries it.

    Parameters
    ----------
    t : Tensor or str
        The stage.
    loop : str
        One of its current loops.
    name : str
        ``"auto_unroll_max_step"``.
    value : int
        The largest total trip count to unroll, ``>= 0``.

    Returns
    -------
    None

    Raises
    ------
    ScheduleError
        If ``t`` is a placeholder or inlined or has no loop ``loop``, ``name`` is unknown, or ``value`` is
        not an int ``>= 0``.

    Examples
    --------
    >>> import minicomp as mc
    >>> A = mc.placeholder((64, 32), name="A")
    >>> B = mc.compute((64, 32), lambda i, j: A[i, j] * 2, name="B")
    >>> s = mc.Schedule([B])
    >>> print(s)
    Placeholder: A
    Stage B
      for i in 0..64
        for j in 0..32
    >>> s.pragma(B, "i", "auto_unroll_max_step", 64)
    >>> print(s)                       # unchanged: the printed state does not show pragmas
    Placeholder: A
    Stage B
      for i in 0..64
        for j in 0..32
    >>> s.state.stage("B").auto_unroll_max_step, s.lower().kernels[0].auto_unroll_max_step
    (64, 64)
    """
    self._do(S.PragmaStep(_name(t), _name(loop), name, value))

  def cross_thread_reduce(self, t, loop, method: str = "shuffle") -> None:
    """Bind a reduction loop to ``threadIdx.x`` and combine the threads' partial results.

    Each thread reduces its share of the other reduction loops, then the threads of the block combine their
    partial results: with ``"shuffle"``, warp shuffles (this needs a block x-size that is a multiple of 32;
    otherwise lowering falls back to the tree), with ``"tree"``, a tree in shared memory. A stage has at
    most one cross-thread reduction.

    Parameters
    ----------
    t : Tensor or str
        The stage (a reduction).
    loop : str
        One of its current reduction loops.
    method : {"shuffle", "tree"}
        How the partial results are combined.

    Returns
    -------
    None

    Raises
    ------
    ScheduleError
        If ``t`` is a placeholder or inlined or has no loop ``loop``, ``loop`` is not a reduction loop,
        ``method`` is unknown, ``t`` already has a cross-thread reduction, or a loop of ``t`` is already
        bound to ``threadIdx.x``.

    Examples
    --------
    >>> import minicomp as mc
    >>> X = mc.placeholder((16, 64), name="X")
    >>> k = mc.reduce_axis(64, name="k")
    >>> R = mc.compute((16,), lambda i: mc.sum(X[i, k], axis=k), name="R")
    >>> s = mc.Schedule([R])
    >>> s.bind(R, "i", "blockIdx.x")
    >>> print(s)
    Placeholder: X
    Stage R
      for i in 0..16  @blockIdx.x
        for k in 0..64
    >>> s.cross_thread_reduce(R, "k")
    >>> print(s)
    Placeholder: X
    Stage R
      for i in 0..16  @blockIdx.x
        for k in 0..64  @threadIdx.x
    """
    self._do(S.CrossThreadReduceStep(_name(t), _name(loop), method))

  def tensorize(self, t, loop, intrinsic: str) -> None:
    """Compute the loops of a sum reduction from ``loop`` inward with a warp's tensor-core ``mma.sync``.

    The loops from ``loop`` inward must be two spatial loops of extent 2 and one reduction loop of the
    intrinsic's k (16 for ``"m16n8k16_f16"`` / ``"m16n8k16_bf16"``, 8 for ``"m16n8k8_f16"`` / ``"m16n8k8_tf32"``, 32 for
    the 8-bit integer ``"m16n8k32_s8s8"`` and its u8 variants),
    of a stage held in registers (``cache_write(C, "local")``) inside loops whose threadIdx.x extent is a multiple
    of 32. Each warp computes 16 x 8 accumulator elements per instruction, four per lane: lane
    ``threadIdx.x % 32`` = 4 g + t holds rows (g, r) and columns (t, c) for r, c in {0, 1}, so the row operand may
    depend on the lane only through g and the column operand only through t (lowering checks it:
    ``minicomp/ir/mma.py``; docs/tensor_cores.md shows a matmul schedule). The operands are rounded to the
    intrinsic's type (fp16, bf16 or tf32) and the products accumulated in float32; 8-bit integer operands must be
    values of their type (reads of int8 / uint8 tensors, widened), their products summed in int32.

    Parameters
    ----------
    t : Tensor or str
        The stage (a sum reduction, usually the ``cache_write`` stage of a matmul or convolution).
    loop : str
        The outermost of its three innermost loops.
    intrinsic : str
        A name of ``minicomp.ir.mma.INTRINSICS``.

    Returns
    -------
    None

    Raises
    ------
    ScheduleError
        If ``t`` is not a sum reduction, the intrinsic is unknown, the loops from ``loop`` inward are not two
        spatial loops and one reduction loop, one of them is annotated, or ``t`` is already tensorized or has a
        cross-thread reduction. Lowering raises it for extents that do not fit the intrinsic, guards inside
        the loops or around them that depend on the thread, and operands whose lanes do not fit the fragments.

    Examples
    --------
    >>> import minicomp as mc
    >>> A = mc.placeholder((16, 32), "float16", name="A")
    >>> B = mc.placeholder((32, 8), "float16", name="B")
    >>> k = mc.reduce_axis(32, name="k")
    >>> C = mc.compute((16, 8), lambda i, j: mc.sum(A[i, k] * B[k, j], axis=k), name="C")
    >>> s = mc.Schedule([C])
    >>> CL = s.cache_write(C, "local")
    >>> i0, i1 = s.split(C, "ax0", 2)
    >>> j0, j1 = s.split(C, "ax1", 2)
    >>> s.reorder(C, i0, j0, i1, j1)
    >>> s.bind(C, s.fuse(C, i0, j0), "threadIdx.x")
    >>> s.compute_at(CL, C, "ax0.0.ax1.0.fused")
    >>> k0, k1 = s.split(CL, "k", 16)
    >>> s.reorder(CL, k0, "i", "j", k1)
    >>> print(s)
    Placeholder: A
    Placeholder: B
    Stage C.local (at C.ax0.0.ax1.0.fused) scope=local
      for k.0 in 0..2
        for i in 0..2
          for j in 0..2
            for k.1 in 0..16
    Stage C
      for ax0.0.ax1.0.fused in 0..32  @threadIdx.x
        for ax0.1 in 0..2
          for ax1.1 in 0..2
    >>> s.tensorize(CL, "i", "m16n8k16_f16")
    >>> print(s)
    Placeholder: A
    Placeholder: B
    Stage C.local (at C.ax0.0.ax1.0.fused) scope=local
      for k.0 in 0..2
        for i in 0..2  @mma.sync m16n8k16_f16
          for j in 0..2
            for k.1 in 0..16
    Stage C
      for ax0.0.ax1.0.fused in 0..32  @threadIdx.x
        for ax0.1 in 0..2
          for ax1.1 in 0..2

    One warp (32 threads: lane ``4 g + t`` = ``ax0.0 * 4 + ax1.0``) computes C; ``C.local``'s loops ``i`` and ``j``
    cover the lane's 2 x 2 box (rows ``2 g + r``, columns ``2 t + c``), as bound inference sizes them and
    ``print(s)`` shows: the lane's part of the warp's 16 x 8 tile.
    """
    self._do(S.TensorizeStep(_name(t), _name(loop), intrinsic))

  def pipeline(self, t, loop, stages: int = 2) -> None:
    """Fetch the shared-memory tiles of reduction loop ``loop`` ahead, asynchronously, in ``stages`` buffers.

    The shared-memory stages computed at ``loop`` (``cache_read(..., "shared")`` + ``compute_at``) get ``stages``
    buffers each. Before the loop, the tiles of its first ``stages - 1`` iterations are fetched; iteration ``k``
    waits for its own tile, synchronises the block once, starts fetching the tile of iteration
    ``k + stages - 1`` into the buffer iteration ``k - 1`` used, and computes on its tile while that copy is in
    flight. The copies are ``cp.async`` (sm_80+; the build refuses older targets): 4, 8 or 16 bytes at once,
    global to shared without passing through registers, so a vectorized fetch of 16-byte-aligned rows is one
    instruction per thread and 16 bytes. A copy the emitter cannot write that way (a padding select, a converting
    fetch) stays a plain store, which the buffers keep correct. docs/tensor_cores.md shows the emitted loop.

    Parameters
    ----------
    t : Tensor or str
        The stage whose loop fetches the tiles (a reduction: the ``cache_write`` stage of a matmul).
    loop : str
        Its reduction loop at which the shared-memory stages are computed.
    stages : int or Expr
        Buffers per tile, 2 to 8 (2: double buffering), or a variable (``mc.var``: a schedule parameter that
        :meth:`substitute` sets). Shared memory grows by that factor.

    Returns
    -------
    None

    Raises
    ------
    ScheduleError
        If ``loop`` is not a reduction loop of ``t``, is annotated, no shared-memory stage is computed at it, or
        ``stages`` is out of range. Lowering raises it if a later step moved the loop or the stages away.

    Examples
    --------
    >>> import minicomp as mc
    >>> A = mc.placeholder((64, 64), name="A")
    >>> B = mc.placeholder((64, 64), name="B")
    >>> k = mc.reduce_axis(64, name="k")
    >>> C = mc.compute((64, 64), lambda i, j: mc.sum(A[i, k] * B[k, j], axis=k), name="C")
    >>> s = mc.Schedule([C])
    >>> ko, ki = s.split(C, "k", 8)
    >>> AS = s.cache_read(A, "shared", [C])
    >>> s.compute_at(AS, C, ko)
    >>> print(s)
    Placeholder: A
    Stage A.shared (at C.k.0) scope=shared
      for ax0 in 0..1
        for ax1 in 0..8
    Placeholder: B
    Stage C
      for i in 0..64
        for j in 0..64
          for k.0 in 0..8
            for k.1 in 0..8
    >>> s.pipeline(C, ko, 3)
    >>> print(s)
    Placeholder: A
    Stage A.shared (at C.k.0) scope=shared
      for ax0 in 0..1
        for ax1 in 0..8
    Placeholder: B
    Stage C
      for i in 0..64
        for j in 0..64
          for k.0 in 0..8  @pipeline 3 stages
            for k.1 in 0..8
    >>> s.lower().kernels[0].allocs    # three tiles of one row of 8
    [Buffer(A_shared, float32, shared, 24)]
    """
    self._do(S.PipelineStep(_name(t), _name(loop), stages))

  def rfactor(self, t, loop) -> str:
    """Factor a split reduction into a new stage ``<t>.rf`` that keeps ``loop`` as a spatial axis.

    ``loop`` is one part of a two-way split of a reduce axis (by a concrete factor). The new stage, placed
    before ``t``, has ``loop`` as its first axis followed by ``t``'s axes, and reduces over the other part of
    the split (and ``t``'s other reduce axes); ``t`` then only reduces ``<t>.rf`` over ``loop``.
    ``R[i] = sum_k X[i, k]`` with ``k -> (ko, ki)`` and ``rfactor(R, ki)`` gives
    ``R.rf[ki, i] = sum_ko X[i, ko*f + ki]`` and ``R[i] = sum_ki R.rf[ki, i]``; when the factor does not
    divide the extent, the out-of-range terms read as the reduction's identity. Apply it right after the
    split: the split must be the only step on ``t`` so far.

    Parameters
    ----------
    t : Tensor or str
        The stage (a reduction).
    loop : str
        The inner or outer part of its one split reduce axis.

    Returns
    -------
    str
        The name of the new stage (``"<t>.rf"``, made unique).

    Raises
    ------
    ScheduleError
        If ``t`` is a placeholder or inlined or has no loop ``loop``, ``loop`` is not a reduction loop,
        anything but one two-way split of a reduce axis was applied to ``t`` before (another split, a fuse,
        an annotation, a compute location), or the split factor is a variable.

    Examples
    --------
    >>> import minicomp as mc
    >>> X = mc.placeholder((16, 64), name="X")
    >>> k = mc.reduce_axis(64, name="k")
    >>> R = mc.compute((16,), lambda i: mc.sum(X[i, k], axis=k), name="R")
    >>> s = mc.Schedule([R])
    >>> s.split(R, "k", 16)
    ('k.0', 'k.1')
    >>> print(s)
    Placeholder: X
    Stage R
      for i in 0..16
        for k.0 in 0..4
          for k.1 in 0..16
    >>> s.rfactor(R, "k.1")
    'R.rf'
    >>> print(s)
    Placeholder: X
    Stage R.rf
      for k.1 in 0..16
        for i in 0..16
          for k.0 in 0..4
    Stage R
      for i in 0..16
        for k.1 in 0..16
    """
    return self._do(S.RfactorStep(_name(t), _name(loop)))

  # -- compute locations
  def compute_at(self, t, target, loop) -> None:
    """Compute a stage inside a loop of one of its consumers.

    At each iteration of ``loop``, ``t`` computes only the region of it that the loop's body needs; the
    region (and with it the buffer, which becomes shared or local memory inside a kernel) is inferred at
    lowering, so the printed state still shows ``t``'s full extents, marked ``(at <target>.<loop>)``. When
    ``loop`` is later split or fused, ``t`` follows it (to the innermost part).

    An output of the DAG may be computed inside the one stage that reads it, when that stage has its shape and
    reads it elementwise (an LSTM cell's ``c`` inside its ``h = o * tanh(c)``): each thread then stores the output
    elements its iterations read, straight to the output, so the two outputs take one kernel. ``loop`` must be
    inside ``target``'s thread loops (checked at lowering, as the elementwise reads are).

    Parameters
    ----------
    t : Tensor or str
        The stage to move: computed; an output of the DAG only as above.
    target : Tensor or str
        A stage that reads ``t``, directly or through other stages.
    loop : str
        One of ``target``'s current loops.

    Returns
    -------
    None

    Raises
    ------
    ScheduleError
        If ``t`` is a placeholder or an output (but as above), ``target`` does not consume ``t``, or ``target`` is a
        placeholder or inlined or has no loop ``loop``.

    Examples
    --------
    >>> import minicomp as mc
    >>> A = mc.placeholder((64, 32), name="A")
    >>> B = mc.compute((64, 32), lambda i, j: A[i, j] * 2, name="B")
    >>> C = mc.compute((64, 32), lambda i, j: B[i, j] + 1, name="C")
    >>> s = mc.Schedule([C])
    >>> print(s)
    Placeholder: A
    Stage B
      for i in 0..64
        for j in 0..32
    Stage C
      for i in 0..64
        for j in 0..32
    >>> s.compute_at(B, C, "i")
    >>> print(s)                       # B's loops as lowering builds them: one row per iteration of C's i
    Placeholder: A
    Stage B (at C.i)
      for i in 0..1
        for j in 0..32
    Stage C
      for i in 0..64
        for j in 0..32
    >>> s.lower().kernels[0].allocs    # one row of B per iteration of C's i
    [Buffer(B, float32, local, 32)]
    """
    self._do(S.ComputeAtStep(_name(t), _name(target), _name(loop)))

  def compute_inline(self, t) -> None:
    """Inline a stage: substitute its expression into its consumers.

    The stage gets no loops and no buffer of its own (the printed state marks it ``(inline)``); its
    consumers recompute it at each use.

    Parameters
    ----------
    t : Tensor or str
        A computed stage that is no reduction and not an output of the DAG.

    Returns
    -------
    None

    Raises
    ------
    ScheduleError
        If ``t`` is a placeholder, an output or a reduction, or another stage is computed at one of its loops.

    Examples
    --------
    >>> import minicomp as mc
    >>> A = mc.placeholder((64, 32), name="A")
    >>> B = mc.compute((64, 32), lambda i, j: A[i, j] * 2, name="B")
    >>> C = mc.compute((64, 32), lambda i, j: B[i, j] + 1, name="C")
    >>> s = mc.Schedule([C])
    >>> print(s)
    Placeholder: A
    Stage B
      for i in 0..64
        for j in 0..32
    Stage C
      for i in 0..64
        for j in 0..32
    >>> s.compute_inline(B)
    >>> print(s)
    Placeholder: A
    Stage B (inline)
      for i in 0..64
        for j in 0..32
    Stage C
      for i in 0..64
        for j in 0..32
    >>> s.split(B, "i", 4)
    Traceback (most recent call last):
    ...
    minicomp.errors.ScheduleError: step 1 {...}: split: stage 'B' is inlined; it has no loops
    """
    self._do(S.ComputeInlineStep(_name(t)))

  def compute_root(self, t) -> None:
    """Compute a stage at the top level: its own loop nest, into a global buffer.

    This is where every stage starts; ``compute_root`` undoes a :meth:`compute_at` or
    :meth:`compute_inline`.

    Parameters
    ----------
    t : Tensor or str
        A computed stage.

    Returns
    -------
    None

    Raises
    ------
    ScheduleError
        If ``t`` is a placeholder.

    Examples
    --------
    >>> import minicomp as mc
    >>> A = mc.placeholder((64, 32), name="A")
    >>> B = mc.compute((64, 32), lambda i, j: A[i, j] * 2, name="B")
    >>> C = mc.compute((64, 32), lambda i, j: B[i, j] + 1, name="C")
    >>> s = mc.Schedule([C])
    >>> s.compute_at(B, C, "j")
    >>> print(s)
    Placeholder: A
    Stage B (at C.j)
      for i in 0..1
        for j in 0..1
    Stage C
      for i in 0..64
        for j in 0..32
    >>> s.compute_root(B)
    >>> print(s)
    Placeholder: A
    Stage B
      for i in 0..64
        for j in 0..32
    Stage C
      for i in 0..64
        for j in 0..32
    """
    self._do(S.ComputeRootStep(_name(t)))

  # -- caches and storage
  def cache_read(self, t, scope: str, readers: Sequence) -> str:
    """Add a stage that copies ``t`` into ``scope`` memory, and make ``readers`` read the copy.

    The new stage ``<t>.<scope>`` (made unique) comes right after ``t``, has loops ``ax0``, ``ax1``, ...
    over ``t``'s shape and starts at root; move it into a reader with :meth:`compute_at` so that each
    iteration copies only the tile that reader needs. Readers not listed keep reading ``t``.

    Parameters
    ----------
    t : Tensor or str
        The tensor to cache (a placeholder or a computed stage).
    scope : {"shared", "local"}
        The memory of the copy.
    readers : sequence of Tensor or str
        Stages that read ``t`` directly.

    Returns
    -------
    str
        The new stage's name.

    Raises
    ------
    ScheduleError
        If ``scope`` is unknown, ``t`` is no stage, ``readers`` is empty, or a reader does not read ``t``.

    Examples
    --------
    >>> import minicomp as mc
    >>> A = mc.placeholder((64, 64), name="A")
    >>> B = mc.placeholder((64, 64), name="B")
    >>> k = mc.reduce_axis(64, name="k")
    >>> C = mc.compute((64, 64), lambda i, j: mc.sum(A[i, k] * B[k, j], axis=k), name="C")
    >>> s = mc.Schedule([C])
    >>> print(s)
    Placeholder: A
    Placeholder: B
    Stage C
      for i in 0..64
        for j in 0..64
          for k in 0..64
    >>> s.cache_read(A, "shared", [C])
    'A.shared'
    >>> print(s)
    Placeholder: A
    Stage A.shared scope=shared
      for ax0 in 0..64
        for ax1 in 0..64
    Placeholder: B
    Stage C
      for i in 0..64
        for j in 0..64
          for k in 0..64
    """
    return self._do(S.CacheReadStep(_name(t), scope, tuple(_name(r) for r in readers)))

  def cache_write(self, t, scope: str = "local") -> str:
    """Compute a stage into a ``scope`` buffer, and make the stage a copy out of it.

    A new stage ``<t>.<scope>`` (made unique), placed before ``t``, takes over ``t``'s computation and
    loops; ``t`` becomes an elementwise copy of it with fresh loops ``ax0``, ``ax1``, ... Apply it before
    any other step on ``t``, then typically :meth:`compute_at` the cache into a loop of ``t``.

    Parameters
    ----------
    t : Tensor or str
        A computed stage with no step applied to it yet.
    scope : {"local", "shared"}
        The memory of the cache.

    Returns
    -------
    str
        The cache stage's name.

    Raises
    ------
    ScheduleError
        If ``scope`` is unknown, ``t`` is a placeholder, or ``t`` already has a split, fuse, annotation or
        compute location.

    Examples
    --------
    >>> import minicomp as mc
    >>> A = mc.placeholder((64, 64), name="A")
    >>> B = mc.placeholder((64, 64), name="B")
    >>> k = mc.reduce_axis(64, name="k")
    >>> C = mc.compute((64, 64), lambda i, j: mc.sum(A[i, k] * B[k, j], axis=k), name="C")
    >>> s = mc.Schedule([C])
    >>> print(s)
    Placeholder: A
    Placeholder: B
    Stage C
      for i in 0..64
        for j in 0..64
          for k in 0..64
    >>> s.cache_write(C, "local")
    'C.local'
    >>> print(s)
    Placeholder: A
    Placeholder: B
    Stage C.local scope=local
      for i in 0..64
        for j in 0..64
          for k in 0..64
    Stage C
      for ax0 in 0..64
        for ax1 in 0..64
    """
    return self._do(S.CacheWriteStep(_name(t), scope))

  def storage_align(self, t, axis: int, factor: int, offset: int) -> None:
    """Pad the stride of one dimension of a stage's buffer to ``k*factor + offset`` elements.

    At lowering, the stride of dimension ``axis`` becomes the smallest ``k*factor + offset`` not below its
    natural value (when that is a constant), e.g. a 32-float row padded to 33 so that the threads of a warp
    reading a column of a shared tile hit distinct banks. A later call for the same axis replaces it. Meant for
    a cache computed inside another stage (its buffer grows to fit): lowering a schedule that aligns a root
    stage (a dense global buffer) raises ScheduleError. The printed state does not show the padding.

    Parameters
    ----------
    t : Tensor or str
        A computed stage.
    axis : int
        The dimension whose stride to pad, ``0 <= axis < ndim - 1`` (the last dimension has stride 1).
    factor : int
        ``> 0``.
    offset : int
        ``0 <= offset < factor``.

    Returns
    -------
    None

    Raises
    ------
    ScheduleError
        If ``t`` is a placeholder, ``axis`` is out of range, or ``factor`` / ``offset`` are out of range.

    Examples
    --------
    >>> import minicomp as mc
    >>> A = mc.placeholder((64, 64), name="A")
    >>> B = mc.placeholder((64, 64), name="B")
    >>> k = mc.reduce_axis(64, name="k")
    >>> C = mc.compute((64, 64), lambda i, j: mc.sum(A[i, k] * B[k, j], axis=k), name="C")
    >>> s = mc.Schedule([C])
    >>> ko, ki = s.split(C, "k", 8)
    >>> AS = s.cache_read(A, "shared", [C])
    >>> s.compute_at(AS, C, ko)
    >>> print(s)
    Placeholder: A
    Stage A.shared (at C.k.0) scope=shared
      for ax0 in 0..1
        for ax1 in 0..8
    Placeholder: B
    Stage C
      for i in 0..64
        for j in 0..64
          for k.0 in 0..8
            for k.1 in 0..8
    >>> s.lower().kernels[0].allocs    # one row of 8 per iteration of k.0
    [Buffer(A_shared, float32, shared, 8)]
    >>> s.storage_align(AS, 0, 32, 1)
    >>> s.state.stage(AS).storage_align, s.lower().kernels[0].allocs
    (((0, 32, 1),), [Buffer(A_shared, float32, shared, 33)])
    """
    self._do(S.StorageAlignStep(_name(t), axis, factor, offset))

  # -- serialisation
  def to_json(self) -> str:
    """The recorded steps as JSON text: a list of objects, one per step, each naming its ``"step"`` kind.

    Symbolic split factors are written as ``{"var": name}``. :meth:`from_json` replays the text.

    Returns
    -------
    str
        The JSON text.

    Examples
    --------
    >>> import minicomp as mc
    >>> A = mc.placeholder((64, 32), name="A")
    >>> B = mc.compute((64, 32), lambda i, j: A[i, j] * 2, name="B")
    >>> s = mc.Schedule([B])
    >>> s.split(B, "i", 16)
    ('i.0', 'i.1')
    >>> print(s.to_json())
    [
     {
      "step": "split",
      "stage": "B",
      "iter": "i",
      "factors": [
       16
      ]
     }
    ]
    """
    return S.steps_to_json(self.state.steps)

  @staticmethod
  def from_json(outputs, text) -> "Schedule":
    """Replay recorded steps on a fresh state of ``outputs``.

    The steps apply in order, exactly as the primitives would, so the replayed schedule prints, serialises
    and lowers the same as the one that wrote the JSON.

    Parameters
    ----------
    outputs : list of Tensor or ComputeDAG
        The computation, as for :class:`Schedule`.
    text : str or list of dict
        What :meth:`to_json` wrote (or its parsed list).

    Returns
    -------
    Schedule
        The replayed schedule.

    Raises
    ------
    ScheduleError
        If a step's kind is unknown or a step does not apply to the computation (the message names the step's
        index).

    Examples
    --------
    >>> import minicomp as mc
    >>> A = mc.placeholder((64, 32), name="A")
    >>> B = mc.compute((64, 32), lambda i, j: A[i, j] * 2, name="B")
    >>> s = mc.Schedule.from_json([B], '[{"step": "split", "stage": "B", "iter": "i", "factors": [16]}]')
    >>> print(s)
    Placeholder: A
    Stage B
      for i.0 in 0..4
        for i.1 in 0..16
          for j in 0..32
    >>> mc.Schedule.from_json([B], '[{"step": "split", "stage": "B", "iter": "x", "factors": [16]}]')
    Traceback (most recent call last):
    ...
    minicomp.errors.ScheduleError: step 0 {...}: split: 'B' has no loop 'x'; its loops are ['i', 'j']
    """
    s = Schedule(outputs)
    for k, st in enumerate(S.steps_from_json(text)): S.apply_step(s.state, st, k)
    return s

  def params(self) -> list[str]:
    """Names of the symbolic schedule parameters: the variables used as split factors (and as pipeline stages), in
    first-use order.

    Returns
    -------
    list of str
        The parameter names; empty for a concrete schedule.

    Examples
    --------
    >>> import minicomp as mc
    >>> A = mc.placeholder((64, 32), name="A")
    >>> B = mc.compute((64, 32), lambda i, j: A[i, j] * 2, name="B")
    >>> s = mc.Schedule([B])
    >>> s.split(B, "i", mc.var("f"))
    ('i.0', 'i.1')
    >>> print(s)
    Placeholder: A
    Stage B
      for i.0 in 0..(f + 63) // f
        for i.1 in 0..f
          for j in 0..32
    >>> s.params()
    ['f']
    """
    out: list[str] = []
    for st in self.state.steps:
      for f in (*getattr(st, "factors", ()), getattr(st, "stages", None)):
        if isinstance(f, Expr) and f.arg not in out: out.append(f.arg)
    return out

  def substitute(self, values: dict[str, int]) -> "Schedule":
    """The concrete schedule with each symbolic parameter replaced by ``values[name]``.

    The steps are replayed on a fresh state with the split factors substituted; ``self`` is unchanged.

    Parameters
    ----------
    values : dict of str to int
        A positive value for every name in :meth:`params` (extra names are ignored).

    Returns
    -------
    Schedule
        The concrete schedule.

    Raises
    ------
    ScheduleError
        If a parameter has no value, or a value is not a positive int.

    Examples
    --------
    >>> import minicomp as mc
    >>> A = mc.placeholder((64, 32), name="A")
    >>> B = mc.compute((64, 32), lambda i, j: A[i, j] * 2, name="B")
    >>> s = mc.Schedule([B])
    >>> s.split(B, "i", mc.var("f"))
    ('i.0', 'i.1')
    >>> print(s)
    Placeholder: A
    Stage B
      for i.0 in 0..(f + 63) // f
        for i.1 in 0..f
          for j in 0..32
    >>> print(s.substitute({"f": 16}))
    Placeholder: A
    Stage B
      for i.0 in 0..4
        for i.1 in 0..16
          for j in 0..32
    """
    missing = [p for p in self.params() if p not in values]
    if missing: raise ScheduleError(f"substitute: no value for schedule parameter(s) {missing}")
    s = Schedule(self.dag)
    for k, st in enumerate(self.state.steps):
      if isinstance(st, S.SplitStep):
        st = S.SplitStep(st.stage, st.iter, tuple(values[f.arg] if isinstance(f, Expr) else f for f in st.factors))
      elif isinstance(st, S.PipelineStep) and isinstance(st.stages, Expr):
        st = S.PipelineStep(st.stage, st.iter, values[st.stages.arg])
      S.apply_step(s.state, st, k)
    return s

  def lower(self, name: str = "default"):
    """Lower the schedule to a loop-nest Program: buffers, kernels with their launch shape, and loop bodies.

    Parameters
    ----------
    name : str
        The program's name; kernels are named after it (``<name>_kernel``, or ``<name>_<stage>`` when
        there are several).

    Returns
    -------
    Program
        The lowered program (``minicomp.ir.loop.Program``), which the CUDA emitter and the interpreter take.

    Examples
    --------
    >>> import minicomp as mc
    >>> A = mc.placeholder((64, 32), name="A")
    >>> B = mc.compute((64, 32), lambda i, j: A[i, j] * 2, name="B")
    >>> s = mc.Schedule([B])
    >>> io, ii = s.split(B, "i", 16)
    >>> s.bind(B, io, "blockIdx.x")
    >>> s.bind(B, ii, "threadIdx.x")
    >>> [(k.name, k.grid, k.block) for k in s.lower("scale").kernels]
    [('scale_kernel', (4, 1, 1), (16, 1, 1))]
    """
    from minicomp.ir.lower import lower
    return lower(self.state, name)
