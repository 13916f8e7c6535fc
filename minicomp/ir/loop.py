"""Loop-nest IR: the lowered program the CUDA emitter prints.

Statements are frozen dataclasses; expressions are :class:`~minicomp.ir.expr.Expr`, with
LOAD nodes whose ``arg`` is a :class:`Buffer` and whose single index is already flattened.
Loop extents are Exprs (symbolic for Felix; concrete after substitution).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Iterator, TypeVar, Union

from minicomp.ir.expr import Expr
from minicomp.ir.ops import DTYPE_BYTES, HALF_DTYPES


@dataclass(frozen=True, eq=False)
class Buffer:
  """A flat array: a kernel parameter (global) or an allocation (shared / local)."""
  name: str
  dtype: str
  scope: str           # "global" | "shared" | "local"
  size: Expr           # elements
  role: str = "temp"   # "input" | "output" | "temp"
  half_tile: bool = False   # a shared tile of a half tensor read only by tensor-core instructions: held in its type

  def __repr__(self): return f"Buffer({self.name}, {self.dtype}, {self.scope}, {self.size})"

  @property
  def stored_dtype(self) -> str:
    """The type its elements are held in: a half type in global memory and in the shared tiles the tensor cores
    read (``half_tile``: their fragments take the half values as they are). Other shared tiles and registers of a
    float16 / bfloat16 tensor hold float32, converted once where they are filled, not at every use
    (docs/precision.md): a tile element feeds many multiply-adds, and the conversion pipe is 8x narrower."""
    keep = self.scope == "global" or self.half_tile
    return "float32" if self.dtype in HALF_DTYPES and not keep else self.dtype

  @property
  def element_bytes(self) -> int:
    """Bytes of one element as held (:attr:`stored_dtype`)."""
    return DTYPE_BYTES[self.stored_dtype]


@dataclass(frozen=True)
class For:
  var: str
  extent: Expr
  body: "Stmt"
  kind: str = "serial"       # "serial" | "unroll" | "vectorize" | "vthread"
  pragma_unroll: bool = False   # unrolled by an auto_unroll_max_step pragma (constant extents), not by the schedule


@dataclass(frozen=True)
class Seq:
  stmts: tuple["Stmt", ...]


@dataclass(frozen=True)
class If:
  cond: Expr
  then: "Stmt"


@dataclass(frozen=True)
class Store:
  buffer: Buffer
  index: Expr
  value: Expr
  async_copy: bool = False   # a pipelined fetch (``Schedule.pipeline``): a copy of global memory issued with cp.async,
                             # in shared memory only after the AsyncWait that covers it (the emitter falls back to a
                             # plain store where the copy is not 4, 8 or 16 aligned bytes: as correct, not overlapped)


@dataclass(frozen=True)
class Sync:
  pass


@dataclass(frozen=True)
class AsyncCommit:
  """Close the group of this thread's asynchronous copies issued since the last commit (``cp.async.commit_group``)."""


@dataclass(frozen=True)
class AsyncWait:
  """Wait until at most ``pending`` groups of this thread's asynchronous copies are still in flight
  (``cp.async.wait_group``); a barrier after it makes every thread's landed copies visible to the block. (An Expr
  in a symbolic program: a sketch's stage count.)"""
  pending: int | Expr


@dataclass(frozen=True)
class Comment:
  text: str


@dataclass(frozen=True)
class CrossThreadReduce:
  """Reduce ``value`` (one per thread) over the ``extent`` threads of threadIdx.x and store ``combiner(dst, total)``.

  ``method`` is "shuffle" (warp shuffles, plus shared memory across warps) or "tree" (shared-memory tree).
  Every thread of the block executes it; ``cond`` guards the final store (thread 0 stores
  ``combiner(init, total)``, or ``total`` when there is no init).
  """
  combiner: str
  value: Expr
  extent: Expr
  method: str
  dst: Buffer
  index: Expr
  cond: Expr
  scratch: Buffer
  init: Expr | None = None


@dataclass(frozen=True)
class Ldmatrix:
  """An operand's fragment read with one warp-wide ``ldmatrix`` (``minicomp/ir/mma.py``): ``count`` 8 x 8 matrices
  of the shared ``buffer``, this lane giving the address ``index`` of one matrix row (``trans``: rows along the
  fragment's k, as a row-major k x n tile holds B)."""
  buffer: Buffer
  index: Expr
  count: int
  trans: bool

  @property
  def helper(self) -> str: return f"mc_ldmatrix_x{self.count}{'_trans' if self.trans else ''}"


@dataclass(frozen=True)
class FragmentLoad:
  """An operand's fragments read ahead of the loops that reuse them (``minicomp/ir/nest.py``) into the register
  array ``name``: one fragment (``regs`` 32-bit registers of ``dtype`` values) for each value of the loops
  ``dims`` ((variable, extent), all unrolled, which the statement loops over itself), so that the tensorized
  statements inside the loops it was hoisted out of read each fragment once. With ``ld``, one ldmatrix; else (or
  with ``MINICOMP_LDMATRIX=0``) the ``elements`` (``Mma.a`` / ``b``) packed in pairs (tf32: one a register,
  rounded once here rather than at every instruction that uses it). Only the emitted code reads
  it: the interpreter, the static model and the features run the statement's scalar loops."""
  name: str
  dims: tuple[tuple[str, int], ...]
  regs: int
  dtype: str
  elements: tuple[Expr, ...]
  ld: Ldmatrix | None = None


@dataclass(frozen=True)
class Mma:
  """A warp's tensor-core multiply-accumulate (``Schedule.tensorize``; ``minicomp/ir/mma.py``) in place of the
  loops ``body`` it computes: each lane adds to the four accumulator elements ``acc[acc_index[c]]`` the
  product of the warp's A and B fragments, whose elements this lane supplies as the values ``a`` and ``b``
  (float expressions, in the order of ``codegen/tensor_core.Intrinsic``). ``body`` holds the scalar loops
  (two spatial loops of extent 2, one reduction loop): what the interpreter runs, and what the static model
  and the features read."""
  intrinsic: str
  acc: Buffer
  acc_index: tuple[Expr, ...]
  a: tuple[Expr, ...]
  b: tuple[Expr, ...]
  body: "Stmt"
  a_ld: Ldmatrix | None = None     # the A / B fragment read with ldmatrix instead of the elements a / b
  b_ld: Ldmatrix | None = None
  a_frag: tuple[str, tuple[str, ...]] | None = None   # or taken from a FragmentLoad's array: (name, index variables)
  b_frag: tuple[str, tuple[str, ...]] | None = None

  @property
  def operand_exprs(self) -> tuple[Expr, ...]:
    """What the lanes evaluate for the fragments: nothing for one read ahead, the ldmatrix row address, or the
    elements read."""
    def of(frag, ld, vals): return () if frag else (ld.index,) if ld else vals
    return of(self.a_frag, self.a_ld, self.a) + of(self.b_frag, self.b_ld, self.b)


Stmt = Union[For, Seq, If, Store, Sync, AsyncCommit, AsyncWait, Comment, CrossThreadReduce, Mma, FragmentLoad]

# what each statement holds: its child statements and the expressions its threads evaluate, in the order the
# emitter prints them (a reduction's ``init`` is not one of them: it is the identity the combiner starts from)
_PARTS = {
  For: lambda s: ((s.body,), (s.extent,)),
  Seq: lambda s: (s.stmts, ()),
  If: lambda s: ((s.then,), (s.cond,)),
  Store: lambda s: ((), (s.index, s.value)),
  Sync: lambda s: ((), ()),
  AsyncCommit: lambda s: ((), ()),
  AsyncWait: lambda s: ((), ()),
  Comment: lambda s: ((), ()),
  CrossThreadReduce: lambda s: ((), (s.value, s.index, s.cond)),
  Mma: lambda s: ((s.body,), s.acc_index + s.operand_exprs),
  FragmentLoad: lambda s: ((), (s.ld.index,) if s.ld else s.elements),
}


def stmt_parts(s: Stmt) -> tuple[tuple, tuple]:
  """``(child statements, expressions)`` of statement ``s``."""
  return _PARTS[type(s)](s)


def walk_stmts(s: Stmt):
  """Every statement of ``s`` (itself first), each before its children, children in order."""
  stack = [s]
  while stack:
    x = stack.pop()
    yield x
    stack.extend(reversed(_PARTS[type(x)](x)[0]))


C = TypeVar("C")


def walk_scoped(s: Stmt, ctx: C, into: Callable[[Stmt, C], C]) -> Iterator[tuple[Stmt, C]]:
  """Every statement of ``s`` in the order of :func:`walk_stmts`, with the context its ancestors give it:
  ``into(x, c)`` is the context statement ``x`` (seen in context ``c``) passes to its children, e.g. the
  loops and guards around a store, or a trip count. The one walk of the static model, the features and
  the loop text; iterative, so any depth."""
  stack = [(s, ctx)]
  while stack:
    x, c = stack.pop()
    yield x, c
    kids = _PARTS[type(x)](x)[0]
    if kids:
      inner = into(x, c)
      stack.extend((k, inner) for k in reversed(kids))


# a statement rebuilt on new children
_WITH_KIDS = {For: lambda s, k: replace(s, body=k[0]), Seq: lambda s, k: Seq(tuple(k)), If: lambda s, k: replace(s, then=k[0]),
              Mma: lambda s, k: replace(s, body=k[0])}


def map_stmts(s: Stmt, fn: Callable[[Stmt], Stmt]) -> Stmt:
  """``s`` rebuilt children first: each statement on its mapped children, then passed to ``fn`` (which returns
  it, or a replacement). Unchanged statements are kept as they are."""
  kids = _PARTS[type(s)](s)[0]
  if kids:
    new = [map_stmts(k, fn) for k in kids]
    if any(a is not b for a, b in zip(new, kids)): s = _WITH_KIDS[type(s)](s, new)
  return fn(s)


@dataclass
class LoopKernel:
  """One ``__global__`` function and its launch configuration."""
  name: str
  params: list[Buffer]
  allocs: list[Buffer]
  bindings: list[tuple[str, str]]          # (C variable, "threadIdx.x" | "blockIdx.y" | ...)
  grid: tuple          # ints, or Exprs of the schedule parameters for a symbolic program
  block: tuple
  body: Stmt
  stages: list[str] = field(default_factory=list)
  auto_unroll_max_step: int = 0   # the largest auto_unroll_max_step pragma of its stages (features read it)
  index_dtype: str = "int32"      # "int64" when an index may not fit in int32 (lowering decides; see lower.py)
  written: set[str] = field(default_factory=set)   # names of the params it stores to (the others are ``const``)
  root: str = ""       # the stage whose loops are the kernel's outermost (its name follows nest.kernel_name)


@dataclass
class Program:
  """A lowered schedule: kernels launched in order over a set of global buffers."""
  kernels: list[LoopKernel]
  inputs: list[Buffer]
  outputs: list[Buffer]
  temps: list[Buffer]
  shapes: dict[str, tuple[int, ...]]   # by buffer name
