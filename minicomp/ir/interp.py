"""A reference interpreter of the loop-nest IR: runs a lowered :class:`Program` in Python, thread by thread.

The second oracle beside the CPU simulator (docs/simulator.md). The simulator runs the CUDA C that the
emitter writes; this runs the Program that C is written from and shares no code with the emitter, so a
disagreement between the two points at the emitter (float4 accesses, floor helpers, shuffle trees), and
both agreeing on a wrong answer points at lowering. Small, slow (some 10^4 statements a second: use tiny
shapes) and meant to be obviously right:

- Kernels run in order, the blocks of a grid one after another, each thread of a block as a Python
  generator over the statement tree. **Barriers**: every thread runs until it reaches a barrier (``Sync``,
  or a ``CrossThreadReduce``, a block-wide collective) or its end, then the block goes on once all its
  threads stand at the *same* barrier statement. Threads at different barriers, or some finished while
  others wait, raise: the IR has no early exit, so that is a divergent barrier.
- Memory: global buffers are flat copies of the arrays, each block has its own shared allocations and each
  thread its own local ones. Only the inputs start initialised: reading an element nothing wrote raises,
  as do an index outside its buffer, a store to a read-only parameter and an output element left unwritten.
- Data races (``check_races``): an element of a shared buffer, or of a global one the kernel writes, that
  one thread writes and another thread reads or writes between the same two barriers (or another block in
  the same launch: nothing orders blocks) raises. So the thread order inside a barrier interval cannot
  change a result that passes.
- Values: every expression node yields exactly its dtype. Floats are numpy scalars of that dtype (float32
  math in float32; float16 and bfloat16 math in float32 too, rounded to the half type by a cast to it and
  by a store to global or shared memory, as the emitter computes it), ints Python ints that must fit (an int32 node of an int32 kernel in int32: lowering
  promises it), bools Python bools. ``//`` and ``%`` floor (the IR's meaning); casts as in C: float -> int
  truncates toward zero, int64 -> int32 wraps. ``select``, ``&&`` and ``||`` evaluate only what C
  evaluates; float min / max ignore a NaN operand (``fminf``); ``round`` rounds half away from zero.
- Loops of every kind (serial, unroll, vectorize, vthread) are plain loops.
- ``CrossThreadReduce``, as documented in ``loop.py`` rather than as the emitter implements it: the
  ``value`` of the threads with ``threadIdx.x < extent`` is combined in threadIdx.x order, separately per
  (threadIdx.y, threadIdx.z); then each thread whose ``cond`` holds stores ``combiner(init, total)`` (or
  ``total``) at ``index``, between barriers. ``method`` and ``scratch`` are the emitter's business.

Failures are a :class:`~minicomp.errors.SimulatorError` naming the kernel, block and thread (or the
statement the interpreter does not know); bad arguments a ``RuntimeLaunchError``, as for a ``Kernel``::

    out = run_program(lower(schedule.state), a, b)    # what build(schedule)(a, b, device="cpu") returns
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from itertools import product
from typing import Iterator

import numpy as np

from minicomp.errors import RuntimeLaunchError, SimulatorError
from minicomp.ir.expr import Expr
from minicomp.ir.loop import AsyncCommit, AsyncWait, Buffer, Comment, CrossThreadReduce, For, FragmentLoad, If, Mma, Program, Seq, Store, Sync
from minicomp.ir.ops import (BITCAST, FLOAT_DTYPES, HALF_DTYPES, INTEGER_DTYPES, NARROW_INT_DTYPES, NP_DTYPE, Op,
                             wrap_int)

# a half value (float16, bfloat16) is computed in float32, as the emitter does (codegen/cuda.py): rounded to its
# type where stored in memory (global, shared) or cast to it
_FLOAT = {d: np.float32 if d in HALF_DTYPES else NP_DTYPE[d] for d in FLOAT_DTYPES}
_LIMITS = {"int32": (-2**31, 2**31 - 1), "int64": (-2**63, 2**63 - 1)}


def _floordiv(a, b):
  if b == 0: raise SimulatorError("integer division by zero")
  return a // b


def _floormod(a, b):
  if b == 0: raise SimulatorError("integer modulo by zero")
  return a % b


_ALU = {Op.ADD: lambda a, b: a + b, Op.SUB: lambda a, b: a - b, Op.MUL: lambda a, b: a * b, Op.DIV: lambda a, b: a / b,
        Op.FLOORDIV: _floordiv, Op.FLOORMOD: _floormod, Op.MIN: np.fmin, Op.MAX: np.fmax, Op.NEG: lambda a: -a,
        Op.LT: lambda a, b: a < b, Op.LE: lambda a, b: a <= b, Op.GT: lambda a, b: a > b, Op.GE: lambda a, b: a >= b,
        Op.EQ: lambda a, b: a == b, Op.NE: lambda a, b: a != b, Op.NOT: lambda a: not a}
# float arguments arrive as numpy scalars of their dtype; ev() converts every result to the node's dtype
_CALL = {"exp": np.exp, "log": np.log, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x), "tanh": np.tanh,
         "erf": math.erf, "pow": np.power, "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "abs": abs, "floor": np.floor,
         "ceil": np.ceil, "exp2": np.exp2, "log2": np.log2,
         "round": lambda x: math.copysign(math.floor(abs(float(x)) + 0.5), float(x)), "fmod": np.fmod,
         "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
         "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
         "bitand": np.bitwise_and, "bitor": np.bitwise_or, "bitxor": np.bitwise_xor, "bitnot": np.invert,
         "shl": np.left_shift, "shr": np.right_shift,
         "dot4": lambda *v: sum(int(a) * int(b) for a, b in zip(v[:4], v[4:]))}
_COMBINE = {"sum": lambda a, b: a + b, "prod": lambda a, b: a * b, "max": np.fmax, "min": np.fmin}


@dataclass
class _Mem:
  """One flat buffer and which of its elements hold a value."""
  data: np.ndarray
  written: np.ndarray

  @staticmethod
  def empty(n: int, dtype: str) -> "_Mem": return _Mem(np.zeros(n, NP_DTYPE[dtype]), np.zeros(n, bool))


@dataclass
class _Thread:
  block: tuple[int, int, int]
  tid: tuple[int, int, int]
  env: dict                                   # variable name -> value
  local: dict[str, _Mem] = field(default_factory=dict)

  def __str__(self) -> str: return f"block {self.block} thread {self.tid}"


def _const(e: Expr, what: str) -> int:
  if not isinstance(e, Expr) or not e.is_const:
    raise SimulatorError(f"{what} is symbolic ({e}); substitute values first")
  return int(e.arg)


class _Launch:
  """One launch of kernel ``k`` (an element of ``Program.kernels``) over the program's global buffers."""

  def __init__(self, k, glob: dict[str, _Mem], check_races: bool):
    self.k, self.where, self.check_races = k, f"kernel {k.name}", check_races
    if not all(isinstance(d, int) for d in k.grid + k.block):
      raise SimulatorError(f"{self.where}: grid {k.grid} and block {k.block} are symbolic; substitute values first")
    missing = [b.name for b in k.params if b.name not in glob]
    if missing: raise SimulatorError(f"{self.where}: parameters {missing} are not buffers of the program")
    self.glob = {b.name: glob[b.name] for b in k.params}
    self.writable = set(k.written)
    self.limits = {"int32": _LIMITS[k.index_dtype], "int64": _LIMITS["int64"]}
    self.phase = 0                         # barrier intervals so far, all blocks together
    self.writer: dict[tuple, tuple] = {}   # element -> ((block, thread), phase) of its last write
    self.readers: dict[tuple, dict] = {}   # element -> {(block, thread): phase} of the reads since

  def run(self) -> None:
    gx, gy, gz = self.k.grid
    for bz, by, bx in product(range(gz), range(gy), range(gx)): self._block((bx, by, bz))

  def _block(self, b: tuple[int, int, int]) -> None:
    k = self.k
    alloc = lambda scope: {a.name: _Mem.empty(_const(a.size, f"size of {a.name}"),   # (registers: computed type)
                                              a.stored_dtype)
                           for a in k.allocs
                           if a.scope == scope}
    self.shared = alloc("shared")
    threads = []
    for tz, ty, tx in product(*(range(n) for n in reversed(k.block))):
      env = {"threadIdx.x": tx, "threadIdx.y": ty, "threadIdx.z": tz, "blockIdx.x": b[0], "blockIdx.y": b[1],
             "blockIdx.z": b[2]}
      env.update({v: env[tag] for v, tag in k.bindings})
      threads.append(_Thread(b, (tx, ty, tz), env, alloc("local")))
    gens = [self.run_stmt(k.body, t) for t in threads]
    while True:
      events = [next(g, None) for g in gens]     # each thread runs to its next barrier, or to its end
      if all(e is None for e in events): return
      if any(e is None or e[0] is not events[0][0] for e in events):
        at = {t.tid: "end" if e is None else f"{type(e[0]).__name__}@{id(e[0]):x}" for t, e in zip(threads, events)}
        raise SimulatorError(f"{self.where} block {b}: divergent barrier: threads stopped at {at}")
      self.phase += 1
      if isinstance(events[0][0], CrossThreadReduce):
        self._reduce(events[0][0], threads, [e[1] for e in events])
        self.phase += 1

  def _reduce(self, s: CrossThreadReduce, threads: list[_Thread], values: list) -> None:
    n = _const(s.extent, "cross-thread reduction extent")
    if not 1 <= n <= self.k.block[0]:
      raise SimulatorError(f"{self.where}: a cross-thread reduction over {n} threads in a block of {self.k.block}")
    rows: dict[tuple, list] = {}
    for t, v in zip(threads, values):
      if t.tid[0] < n: rows.setdefault(t.tid[1:], []).append(v)
    comb = _COMBINE[s.combiner]
    for t in threads:
      if not self.ev(s.cond, t): continue
      total = functools.reduce(comb, rows[t.tid[1:]])
      if s.init is not None: total = comb(self.ev(s.init, t), total)
      self.store(s.dst, self.ev(s.index, t), self.coerce(total, s.dst.dtype, t), t)

  # -- statements: each handler is a generator that yields (statement, value) at every barrier it reaches
  def run_stmt(self, s, t: _Thread) -> Iterator:
    h = _STMT.get(type(s))
    if h is None:
      raise SimulatorError(f"{self.where}: the interpreter does not support {type(s).__name__} statements: {s!r:.200}")
    return h(self, s, t)

  def _seq(self, s: Seq, t: _Thread):
    for x in s.stmts: yield from self.run_stmt(x, t)

  def _for(self, s: For, t: _Thread):
    if s.kind not in ("serial", "unroll", "vectorize", "vthread"):
      raise SimulatorError(f"{self.where}: unknown loop kind {s.kind!r} of loop {s.var}")
    for i in range(_const(s.extent, f"extent of loop {s.var}")):
      t.env[s.var] = i
      yield from self.run_stmt(s.body, t)

  def _if(self, s: If, t: _Thread):
    if self.ev(s.cond, t): yield from self.run_stmt(s.then, t)

  def _store(self, s: Store, t: _Thread):
    if s.value.dtype != s.buffer.dtype:
      raise SimulatorError(f"{self.where}: stores a {s.value.dtype} value in {s.buffer.dtype} buffer {s.buffer.name}")
    self.store(s.buffer, self.ev(s.index, t), self.ev(s.value, t), t)
    yield from ()       # (a generator like every handler, that never reaches a barrier)

  def _sync(self, s: Sync, t: _Thread):
    yield s, None

  def _comment(self, s: Comment, t: _Thread):
    yield from ()

  def _async_fence(self, s, t: _Thread):    # (a pipelined fetch's copies are stored when issued: the slot a
    yield from ()                            # thread fills is not the one the block reads, ir/nest.py)

  def _fragment_load(self, s: FragmentLoad, t: _Thread):   # (the Mma's scalar loops read the tile themselves)
    yield from ()

  def _mma(self, s: Mma, t: _Thread):
    """A tensorized nest runs its scalar loops: the same sums in float32, operands not rounded to tf32."""
    yield from self.run_stmt(s.body, t)

  def _cross_thread(self, s: CrossThreadReduce, t: _Thread):
    if s.combiner not in _COMBINE: raise SimulatorError(f"{self.where}: unknown combiner {s.combiner!r}")
    yield s, self.ev(s.value, t)

  # -- memory
  def _mem(self, b: Buffer, i: int, t: _Thread, what: str) -> _Mem:
    m = (self.glob if b.scope == "global" else self.shared if b.scope == "shared" else t.local).get(b.name)
    if m is None:
      raise SimulatorError(f"{self.where} {t}: {what} {b.scope} buffer {b.name}, not a parameter or allocation")
    if not 0 <= i < m.data.size:
      raise SimulatorError(f"{self.where} {t}: {what} {b.name}[{i}], out of bounds (size {m.data.size})")
    return m

  def load(self, b: Buffer, i: int, t: _Thread):
    m = self._mem(b, i, t, "reads")
    if not m.written[i]: raise SimulatorError(f"{self.where} {t}: reads {b.name}[{i}] before anything wrote it")
    if self.check_races and (b.scope == "shared" or b.name in self.writable): self._race(b, i, t, write=False)
    return m.data[i]

  def store(self, b: Buffer, i: int, v, t: _Thread) -> None:
    m = self._mem(b, i, t, "writes")
    if b.scope == "global" and b.name not in self.writable:
      raise SimulatorError(f"{self.where} {t}: writes read-only parameter {b.name}")
    if self.check_races and b.scope != "local": self._race(b, i, t, write=True)
    m.data[i], m.written[i] = v, True

  def _race(self, b: Buffer, i: int, t: _Thread, write: bool) -> None:
    key = (b.name, i) if b.scope == "global" else (b.name, t.block, i)    # shared: one array per block
    me = (t.block, t.tid)

    def check(agent, phase, did):
      # another thread, and another block (nothing orders blocks) or the same barrier interval
      if agent != me and (agent[0] != t.block or phase == self.phase):
        raise SimulatorError(f"{self.where}: data race on {b.name}[{i}]: {t} {'writes' if write else 'reads'} it, "
                             f"block {agent[0]} thread {agent[1]} {did} it with no barrier between "
                             "(a missing __syncthreads()?)")
    w = self.writer.get(key)
    if w is not None: check(*w, "wrote")
    rs = self.readers.setdefault(key, {})
    if not write:
      rs[me] = self.phase
      return
    for agent, phase in rs.items(): check(agent, phase, "read")
    self.writer[key] = (me, self.phase)
    rs.clear()       # every earlier read is ordered before this write

  # -- expressions
  def coerce(self, v, dtype: str, t: _Thread):
    """``v`` as a value of ``dtype``: a numpy float scalar, a Python bool, or a Python int in range."""
    if dtype in _FLOAT: return _FLOAT[dtype](v)
    if dtype == "bool": return bool(v)
    v = int(v)
    if dtype in NARROW_INT_DTYPES: return wrap_int(v, dtype)     # value types wrap (C casts after each operation)
    lo, hi = self.limits[dtype]
    if not lo <= v <= hi:
      raise SimulatorError(f"{self.where} {t}: {dtype} value {v} overflows ({self.k.index_dtype} kernel)")
    return v

  def cast(self, v, src: str, dst: str, t: _Thread):
    if dst in HALF_DTYPES: return np.float32(NP_DTYPE[dst](v))
    if dst in INTEGER_DTYPES and src in _FLOAT:
      if not math.isfinite(v): raise SimulatorError(f"{self.where} {t}: casts {v} to {dst}")
      v = math.trunc(v)
      return wrap_int(v, dst) if dst in NARROW_INT_DTYPES else v
    if dst in NARROW_INT_DTYPES and src != "bool": return wrap_int(v, dst)
    if dst == "int32" and src == "int64": return (v + 2**31) % 2**32 - 2**31     # two's complement wrap
    return v

  def ev(self, e: Expr, t: _Thread):
    op, src = e.op, e.src
    fn = _ALU.get(op)
    if fn is not None: v = fn(*[self.ev(s, t) for s in src])
    elif op is Op.CONST: v = e.arg
    elif op is Op.VAR:
      v = t.env.get(e.arg)
      if v is None:
        raise SimulatorError(f"{self.where}: no value for variable {e.arg!r} (symbolic? substitute values first)")
    elif op is Op.SELECT: return self.ev(src[1] if self.ev(src[0], t) else src[2], t)
    elif op is Op.AND: return bool(self.ev(src[0], t) and self.ev(src[1], t))
    elif op is Op.OR: return bool(self.ev(src[0], t) or self.ev(src[1], t))
    elif op is Op.LOAD:
      if not isinstance(e.arg, Buffer): raise SimulatorError(f"{self.where}: {e} reads a tensor, not a lowered buffer")
      v = self.load(e.arg, self.ev(src[0], t), t)
    elif op is Op.CAST: v = self.cast(self.ev(src[0], t), src[0].dtype, e.dtype, t)
    elif op is Op.CALL and e.arg == BITCAST:
      v = np.array(self.ev(src[0], t), NP_DTYPE[src[0].dtype]).view(NP_DTYPE[e.dtype])[()]
    elif op is Op.CALL and e.arg in _CALL: v = _CALL[e.arg](*[self.ev(s, t) for s in src])
    else: raise SimulatorError(f"{self.where}: the interpreter cannot evaluate {op.name} node {e}")
    return self.coerce(v, e.dtype, t)


_STMT = {Seq: _Launch._seq, For: _Launch._for, If: _Launch._if, Store: _Launch._store, Sync: _Launch._sync,
         Comment: _Launch._comment, CrossThreadReduce: _Launch._cross_thread, Mma: _Launch._mma,
         FragmentLoad: _Launch._fragment_load, AsyncCommit: _Launch._async_fence, AsyncWait: _Launch._async_fence}


def run_program(program: Program, *args, check_races: bool = True):
  """Run ``program`` on ``args`` (one array per input, in order, or one dict by input name) and return its
  output, or a tuple of its outputs, as ``Kernel.__call__`` does. Raises SimulatorError for anything a
  kernel does wrong (see the module docstring); ``check_races=False`` skips the race checks."""
  names = [b.name for b in program.inputs]
  if len(args) == 1 and isinstance(args[0], dict):
    if set(args[0]) != set(names): raise RuntimeLaunchError(f"inputs are {names}, got {sorted(args[0])}")
    args = tuple(args[0][n] for n in names)
  if len(args) != len(names):
    raise RuntimeLaunchError(f"program takes {len(names)} inputs ({', '.join(names)}), got {len(args)}")
  glob: dict[str, _Mem] = {}
  for a, b in zip(args, program.inputs):
    a, shape, want = np.asarray(a), tuple(program.shapes[b.name]), np.dtype(NP_DTYPE[b.dtype])
    if a.shape != shape or a.dtype != want:
      raise RuntimeLaunchError(f"input {b.name}: expected {want.name} {shape}, got {a.dtype.name} {a.shape}")
    glob[b.name] = _Mem(a.reshape(-1).copy(), np.ones(a.size, bool))
  for b in program.outputs + program.temps: glob[b.name] = _Mem.empty(math.prod(program.shapes[b.name]), b.dtype)
  with np.errstate(all="ignore"):      # inf / NaN arithmetic is the kernel's business, as on a GPU
    for k in program.kernels: _Launch(k, glob, check_races).run()
  outs = []
  for b in program.outputs:
    m = glob[b.name]
    if not m.written.all():
      raise SimulatorError(f"output {b.name}: {(~m.written).sum()} of {m.data.size} elements never written")
    outs.append(m.data.reshape(program.shapes[b.name]))
  return outs[0] if len(outs) == 1 else tuple(outs)
