"""The static model without NVRTC: a sketch's launch facts as formulas of its tile sizes.

:func:`~minicomp.search.static.estimate.estimate` reads instruction counts from the PTX and
registers from ptxas, so every estimate costs an NVRTC build (0.2-2.5 s). Gensor's construction
(``strategies/gensor.py``) scores thousands of states per task and needs the same model at a
fraction of that cost. :class:`SketchModel` lowers a sketch's *symbolic* program once and reads
off, as expressions of the sketch's variables, what :class:`~.model.LaunchFacts` needs:

- **work per thread**: every store of the loop IR, times the product of its enclosing loop
  extents; each distinct load in its value and index (interned expressions: a load read twice is
  one load, as after CSE) is one instruction per vector in the scope of its buffer (global,
  shared; local buffers are registers); float arithmetic, FMAs (a multiply feeding an add),
  intrinsics (SFU), a cross-thread reduction's shuffles, an integer instruction per global
  access and three per executed (not unrolled) loop iteration (address and loop overhead);
- **coalescing**: the index at the first warp's 32 lanes (threadIdx.x a column of 0..31 in one formula, every
  other loop and block index at 0) gives the 32-byte sectors a warp request touches, each element of a vector
  whose elements are not adjacent on its own (until 2026-11-30 the step from thread 0 to thread 1 stood for the
  warp, which missed a fused index breaking rows mid-warp: a convolution's fetch of its padded input, or of
  weights four filters apart, at 0.26-0.4x the full model's L2 traffic; it stays where threads use other axes);
- **vector accesses**: a vectorized loop is one float2 / float4 instruction per thread only where
  the CUDA emitter can prove its lanes contiguous and aligned; a lane under an integer division
  or modulo of the symbolic index counts as scalar (``VECTOR_STRICT``), each lane then paying its
  own index arithmetic (3 instructions per division or modulo);
- **index arithmetic of a cooperative fetch**: per element copied, one integer instruction; three per division or
  modulo of a loop variable: once per value of the loops it reads where they are unrolled (hoisted out of the
  others: the reduction loop around a fetch does not change them, and the addresses then step; charged per element
  until 2026-11-30, 7-30x the PTX's integers on a stride-2 convolution), at every element where one is rolled or
  the fetch's vectors are split into lanes; a division or modulo of thread and block
  indices alone is loop-invariant, computed once per thread (the compiler hoists it), and free.
  Counting those per element, as the model did until 2026-11-27, made it see 5-6 times the integer
  instructions NVRTC's PTX has on the benchmark's convolutions and rank the depthwise's best
  programs behind a thousand others (``research/analytic_fidelity.py``);
- **bank conflicts** of shared accesses from the same 32 lanes (:func:`_bank_degree`: the most distinct words one
  bank serves in a 128-byte phase; until 2026-11-30 a stride ``s`` in words between threads 0 and 1 stood for the
  warp, ``gcd(s, 32)``-way, 2.1-2.25x the full model's conflicts on convolutions): a block's wavefronts are its warp
  requests times their conflict degree (until 2026-11-27 they were divided by the number of blocks once more, so
  shared memory never bound the analytic estimate);
- **resources**: block and grid size, shared bytes, and registers per thread: the local
  (register) buffers, the shared values one unrolled body loads (ptxas hoists those loads and
  keeps the values live; at most ``OPERAND_CAP``) and a fixed overhead; past the register file the
  excess spills (local memory traffic, as ptxas's spill figures are used by the full model). The
  four constants are fitted to ptxas's registers on 600 programs of four benchmark tasks
  (``research/analytic_calibration.py``) as their 80% quantile: an estimate under ptxas's count
  admits a block that ptxas then compiles with spills the model does not see, the costlier error.
  On 600 programs the earlier hand-set 24 + 1 x local + 1 x operands was under ptxas's count for 25%
  and 0.5-3.8x it (10%-90% quantiles per task); the fitted formula is under for 21%, 0.6-2.4x;
- **register reuse**: a store's loop nest is unrolled from the inside while the unrolled steps
  stay within ``auto_unroll_max_step`` (vthread loops always are); a load inside the unrolled
  part is issued once per value of the unrolled loops its index uses (a register tile re-reads
  its operands from registers, not from shared memory), and NVRTC merges shared loads contiguous along any
  unrolled loop into ld.shared.v2 / v4 (until 2026-11-30 only along the innermost loop the index uses: a
  matmul's A-tile reads along k counted as scalars, 2.5x the PTX's shared loads);
- **latency** (Tuna's ILP cost, approximated from what the full model shows on PTX, which puts a
  load right before its first use): one instruction per cycle, plus the full latency of every
  shared load and of every global load outside a cooperative fetch, plus half a global latency
  per barrier (the fetch before it) and an SFU latency per intrinsic;
- **tensor cores**: an ``Mma`` statement is one mma.sync per thread (the tensor pipe's class, whose FMAs the
  shared formula costs at the device's tensor rate) with its latency, and its fragment reads (an ldmatrix, the
  elements, or nothing where a ``FragmentLoad`` read them ahead, which counts them itself) are shared loads, their
  wavefronts and latency; the scalar loops it keeps for the interpreter are not counted. A tensorized sketch does
  not lower symbolically (the tensorized loops' checks need concrete sizes): :func:`sketch_model` gives it a
  :class:`PointwiseModel`, which lowers each point's program on its own, once, and counts it the same way.
  :func:`schedule_seconds` costs one concrete schedule so (compile ranks the tensor-core template's tiles with it).

Data movement to DRAM is compulsory (every global buffer once), and L2 -> SM traffic is the
sectors of the global requests, as in the full model. The facts then go through the same
:func:`~.model.launch_time` formula as a built kernel's (all points at once: ``launch_times``), so the two
models share every hardware figure; only the counting differs. ``tests/test_gensor.py`` checks their rank
agreement; the figures are **estimates** of a GPU this machine does not have.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from minicomp.ir.expr import Expr, const, free_vars, var, walk
from minicomp.ir.linear import consecutive
from minicomp.ir.rewrite import map_loads, substitute
from minicomp.ir.loop import CrossThreadReduce, For, FragmentLoad, Mma, Store, Sync, walk_scoped, walk_stmts
from minicomp.ir.mma import INTRINSICS
from minicomp.ir.ops import BITCAST, DOT4, FLOAT_DTYPES, Op
from minicomp.search.features.formulas import FormulaProgram
from minicomp.search.static.calibration import active as active_calibration
from minicomp.search.static.model import LaunchFacts, launch_times
from minicomp.search.static.ptx import LATENCY_CYCLES
from minicomp.target import Target

# registers per thread: the 80% quantile of ptxas's (sm_90, NVRTC 12.9), research/analytic_calibration.py
REG_OVERHEAD = 43           # registers a kernel needs besides its local buffers (indices, addresses, pointers)
REG_PER_LOCAL = 1.13        # registers per element of a local (register) buffer
OPERAND_REGS = 0.23         # registers per shared value an unrolled body loads (ptxas hoists the loads) ...
OPERAND_CAP = 260           # ... up to this many
VECTOR_STRICT = True        # a vector lane under a division / modulo counts as a scalar access
INT_PER_ITERATION = 3.0      # integer instructions per executed (rolled) loop iteration of a store's nest
INT_PER_FETCH_ELEMENT = 1.0  # ... per element a cooperative fetch copies (its index) ...
INT_PER_DIVMOD = 3.0         # ... and per division / modulo in that index
INT_PER_GLOBAL_ACCESS = 1.0  # ... per global load / store (its address)
LANE = "mc_lane"            # the lane variable of a warp's addresses (bound to 0..31 as a column: one formula)
UNROLL_DEFAULT = 512        # the auto_unroll_max_step the construction gives every marked loop
_ARITH = {Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.MIN, Op.MAX, Op.NEG, Op.SELECT, Op.LT, Op.LE, Op.GT, Op.GE, Op.EQ,
          Op.NE}


@dataclass
class _Access:
  """A memory instruction in a store's loop nest (``deps``: the positions of the enclosing loops
  whose variable its index uses: unrolled loops it does not use re-read the same register)."""
  scope: str
  store: bool
  step: Expr                 # index step from thread 0 to thread 1
  width: Expr               # elements per instruction (a vectorized loop's extent)
  nbytes: int
  deps: frozenset
  fetch: str | None = None   # the shared buffer a global load fills (a cooperative fetch)
  steps: tuple = ()          # (position, the index's step along it) per loop it uses (1: contiguous, vectorizable)
  warp: Expr | None = None   # its index over the first warp's lanes (:data:`LANE`; every loop at 0): sectors, banks
  vstep: Expr | None = None  # its step along the vectorized loop (1: one contiguous vector; else an access per element)
  divmods: tuple = ()        # (the loops they read, how many) of the integer divisions / modulos of loop variables in
                             # its index


@dataclass
class _Site:
  """A store and its loop nest."""
  loops: list[tuple[Expr, str]]    # (extent, kind) of each enclosing loop, outer to inner
  accesses: list[_Access]
  counts: dict[str, Expr]          # arithmetic instructions of one execution, by class
  vector: list[tuple[Expr, Expr]] = field(default_factory=list)   # (span, first index) per access and probe


@dataclass
class _KernelFormulas:
  blocks: Expr
  threads: Expr
  smem: Expr
  local: Expr
  shared_sizes: dict[str, Expr] = field(default_factory=dict)
  counts: dict[str, Expr] = field(default_factory=dict)       # per-thread instructions outside the sites
  sites: list[_Site] = field(default_factory=list)
  rounds: Expr = field(default_factory=lambda: const(0))     # barriers per thread
  exposed: Expr = field(default_factory=lambda: const(0))    # latency cycles outside the sites (mma.sync, fragments)
  wavefronts: Expr = field(default_factory=lambda: const(0))  # shared-memory wavefronts per warp outside the sites
  dram_bytes: float = 0.0


def _has_sync(st) -> bool:
  """Does the statement hold a barrier (a loop around one re-fetches shared data every iteration,
  so unrolling it shares no loads)?"""
  return any(isinstance(x, Sync) for x in walk_stmts(st))


def _divmods(index: Expr, pos: dict[str, int], varying: set[str]) -> tuple[frozenset, ...]:
  """Per division or modulo in ``index`` that reads one of the ``varying`` (loop) variables, the positions (``pos``)
  of the enclosing loops it reads. The others read only thread and block indices, which the compiler computes once
  per thread (hoisted); one that reads only unrolled loops is computed once per combination of their values,
  hoisted out of the loops it does not read (an unrolled loop's instances are constants); one that reads a rolled
  loop, at every element."""
  return tuple(frozenset(pos[v] for v in free_vars(n) if v in pos) for n in walk(index)
               if n.op in (Op.FLOORDIV, Op.FLOORMOD) and free_vars(n) & varying)


def _split(a: _Access, num) -> np.ndarray | bool:
  """Per point: is ``a`` a vector whose elements are not adjacent (the emitter writes an access per element)?"""
  return False if a.vstep is None else num(a.vstep) != 1


def _bank_degree(first: np.ndarray, live: np.ndarray, width: np.ndarray) -> np.ndarray:
  """Per point, the shared-memory wavefronts of one warp request: the most distinct 4-byte words one bank serves in
  a phase (128 bytes of lanes: 32 lanes of scalars, 16 of 8-byte, 8 of 16-byte vectors), as the full model counts
  them (footprint/coalescing.py). ``first``: each lane's byte address (32 x points); ``live``: the lanes the block
  has (32 x points); ``width``: bytes per lane."""
  P = first.shape[1]
  first, width = np.asarray(first, np.int64), np.asarray(width, np.int64)
  first = np.where(live, first, -1)                                         # (lanes past the block: none)
  per_lane = np.maximum(width // 4, 1)
  K = int(per_lane.max())
  k = np.arange(K)[:, None, None]                                            # a lane's words
  words = np.where(k < per_lane[None, None, :], first[None] // 4 + k, -1).reshape(-1, P)
  phase = np.broadcast_to(np.arange(32)[None, :, None] // np.maximum(1, 128 // np.maximum(width, 4))[None, None, :],
                          (K, 32, P)).reshape(-1, P)
  live = (words >= 0) & np.broadcast_to((first >= 0)[None], (K, 32, P)).reshape(-1, P)
  key = np.sort(np.where(live, phase * (1 << 40) + words, -1), axis=0)          # distinct (phase, word) per point
  new = np.concatenate([np.ones((1, P), bool), key[1:] != key[:-1]]) & (key >= 0)
  slot = (key >> 40) * 32 + (key & ((1 << 40) - 1)) % 32                        # (phase, bank)
  S = 32 * (int((key >> 40).max(initial=0)) + 1)
  cols = np.broadcast_to(np.arange(P)[None, :], key.shape)
  counts = np.bincount((cols * S + slot)[new], minlength=P * S).reshape(P, S)
  return np.maximum(counts.max(axis=1), 1)


def _lane_sectors(first: np.ndarray, n_el: np.ndarray, apart: np.ndarray, piece: np.ndarray) -> np.ndarray:
  """Per point, the 32-byte sectors one warp request touches: ``first``, each lane's first byte (32 x points; a
  lane past the block at lane 0's); each lane reads ``n_el`` pieces (1, or a vector's elements where the emitter
  splits it), ``apart`` bytes apart, of ``piece`` bytes each."""
  P = first.shape[1]
  e = np.arange(int(n_el.max()))[:, None, None]
  start = first[None] + e * apart[None, None, :]                                    # (piece, lane, point)
  start = np.where(e < n_el[None, None, :], start, first[:1][None]).reshape(-1, P)  # (no piece: lane 0's again)
  secs = np.sort(np.concatenate([start // 32, (start + piece[None, :] - 1) // 32]), axis=0)
  return 1 + np.count_nonzero(np.diff(secs, axis=0), axis=0)


def _prod(xs) -> Expr:
  out = const(1)
  for x in xs: out = out * x
  return out


def _e(x) -> Expr:
  return x if isinstance(x, Expr) else const(int(x))


def _dot4_words(value: Expr) -> tuple[set, set]:
  """The loads of ``value`` that the emitter reads a 32-bit word at a time for a dot4 (the first of four consecutive
  bytes of one buffer: codegen/cuda.py ``_word``), and the other three, which that word holds."""
  words, held = set(), set()
  for n in walk(value):
    if n.op is Op.CALL and n.arg == DOT4:
      for side in (n.src[:4], n.src[4:]):
        if all(x.op is Op.LOAD and x.arg is side[0].arg and getattr(x.arg, "scope", "global") != "local"
               for x in side) and consecutive([x.src[0] for x in side]):
          words.add(side[0]); held.update(side[1:])
  return words, held - words


def _per_point(ev, P: int):
  """A formula's value at each of ``P`` points (``ev``: a bound :class:`FormulaProgram`), as a read-only float64
  array, each formula evaluated once per call (a site's loops and strides recur across its accesses)."""
  memo: dict = {}

  def num(e: Expr) -> np.ndarray:
    out = memo.get(e)
    if out is None:
      v = ev(e)
      out = v.astype(np.float64) if isinstance(v, np.ndarray) and v.shape == (P,) else np.full(P, v, np.float64)
      out.flags.writeable = False
      memo[e] = out
    return out
  return num


class SketchModel:
  """Latency estimates of many concrete points of one sketch at once (see module docstring).

  ``model(values)`` -> seconds per point (``inf`` where a point breaks a resource limit);
  ``model.valid(values)`` -> the resource check alone. Raises whatever lowering the symbolic
  program raises (callers treat any failure as "no analytic model for this sketch")."""

  def __init__(self, sketch, target: Target, unroll: int = UNROLL_DEFAULT, program=None):
    self.sketch, self.target, self.dev, self.unroll = sketch, target, target.device, unroll
    self.calibration = active_calibration(self.dev)      # (looked up once: a walk evaluates thousands of points)
    prog = program if program is not None else sketch.schedule.lower()   # (PointwiseModel: one point's program)
    self.names = sketch.schedule.params()
    sizes = {b.name: math.prod(prog.shapes[b.name]) * b.element_bytes for b in prog.inputs + prog.outputs}
    self._plain: dict[Expr, tuple[Expr, set]] = {}     # index -> (its loads read as 0, its variables): _at
    self.kernels = [self._kernel(k, sizes) for k in prog.kernels]
    # each evaluation asks the same formulas on new values: compiled after the first (FormulaProgram)
    self._facts_f, self._whole_f, self._valid_f = FormulaProgram(), FormulaProgram(), FormulaProgram()
    self._occupied: dict[tuple, tuple[int, int]] = {}
    self._lanes_memo: dict[tuple, int] = {}     # (_bank_degree or _lane_sectors, a point's lanes) -> its value

  # -- building the formulas (once per sketch)
  def _kernel(self, k, sizes: dict[str, int]) -> _KernelFormulas:
    kf = _KernelFormulas(_prod(_e(d) for d in k.grid), _prod(_e(d) for d in k.block),
                         sum((_e(b.size) * b.element_bytes for b in k.allocs if b.scope == "shared"), const(0)),
                         sum((_e(b.size) for b in k.allocs if b.scope == "local"), const(0)),
                         {b.name: _e(b.size) for b in k.allocs if b.scope == "shared"})
    self._threads = {v for v, tag in k.bindings if tag.startswith("threadIdx")}
    self._lane_vars = {v for v, tag in k.bindings if tag == "threadIdx.x"} \
        if all(tag in ("threadIdx.x",) or not tag.startswith("threadIdx") for _, tag in k.bindings) else None
    self._blocks = {v for v, tag in k.bindings if tag.startswith("blockIdx")}
    self._loops: set[str] = set()
    counts: dict[str, Expr] = {}

    def add(cls: str, n: Expr) -> None:
      counts[cls] = counts[cls] + n if cls in counts else n

    def into(st, ctx):
      """(trip count, enclosing loops, vector width, the vectorized loop's variable) inside ``st``; None inside an
      Mma (its scalar loops are what the interpreter runs, not what the GPU does)."""
      if ctx is None or isinstance(st, Mma): return None
      trip, loops, width, vvar = ctx
      if not isinstance(st, For): return ctx
      if st.kind == "vectorize": return trip, loops, width * st.extent, st.var
      kind = "barrier" if _has_sync(st.body) else st.kind
      return trip * st.extent, loops + [(st.var, st.extent, kind)], width, vvar

    for st, ctx in walk_scoped(k.body, (const(1), [], const(1), None), into):
      if ctx is None: continue
      trip, loops, width, vvar = ctx
      if isinstance(st, Mma):               # one warp instruction; its fragments from registers, ldmatrix or elements
        intr = INTRINSICS[st.intrinsic]
        cls = "tensor_tf32" if "tf32" in intr.name else "tensor_int8" if intr.integer else f"tensor_k{intr.k}"
        # (ptx_parse.TENSOR_FMAS' classes)
        operands = ((st.a_frag, st.a_ld, st.a), (st.b_frag, st.b_ld, st.b))
        reads = sum(0 if frag else 1 if ld else len({n for e in vals for n in walk(e) if n.op is Op.LOAD})
                    for frag, ld, vals in operands)
        add(cls, trip)
        if reads: add("ld_shared", trip * reads)
        kf.wavefronts = kf.wavefronts + trip * sum(0 if frag else ld.count if ld else len(vals)
                                                   for frag, ld, vals in operands)
        kf.exposed = kf.exposed + trip * (reads * LATENCY_CYCLES["ld_shared"] + LATENCY_CYCLES[cls])
      elif isinstance(st, FragmentLoad):    # fragments read ahead: an ldmatrix, or the elements, per fragment
        n = trip * math.prod(e for _, e in st.dims) * (1 if st.ld is not None else len(
          {x for e in st.elements for x in walk(e) if x.op is Op.LOAD}))
        add("ld_shared", n)
        kf.wavefronts = kf.wavefronts + (n * st.ld.count if st.ld is not None else n)   # (an 8x8 matrix: one each)
        kf.exposed = kf.exposed + n * LATENCY_CYCLES["ld_shared"]
      elif isinstance(st, For):
        self._loops.add(st.var)
      elif isinstance(st, Sync):
        kf.rounds = kf.rounds + trip
        add("bar_sync", trip)
      elif isinstance(st, Store):
        kf.sites.append(self._site(st.buffer, st.index, st.value, loops, width, vvar))
      elif isinstance(st, CrossThreadReduce):
        kf.sites.append(self._site(st.dst, None, st.value, loops, const(1)))
        steps = const(max(1, math.ceil(math.log2(max(2, int(st.extent.arg)))))) if st.extent.op is Op.CONST else \
            const(5)
        add("shfl", trip * steps)
        add("fp32_arith", trip * steps)
        add("st_shared", trip); add("ld_shared", trip); add("bar_sync", trip * 2)
    kf.counts = counts
    kf.dram_bytes = float(sum(sizes.get(b.name, 0) for b in k.params if b.scope == "global"))
    return kf

  def _at(self, index: Expr, fixed: dict[str, Expr]) -> Expr:
    """``index`` with the variables in ``fixed`` set and every other loop, block and thread index
    at 0; a gathered position (a load in the index) reads as 0 (unknown)."""
    plain = self._plain.get(index)          # (once per index: its step, its step along each loop, its probes ask)
    if plain is None:
      mapped = map_loads(index, lambda n: const(0, n.dtype))
      plain = self._plain[index] = (mapped, free_vars(mapped))
    index, used = plain
    zero = {v: const(0) for v in (self._loops | self._blocks | self._threads) if v in used}
    return substitute(index, {**zero, **fixed})

  def _warp(self, index: Expr) -> Expr | None:
    """``index`` with threadIdx.x the variable :data:`LANE` (evaluated at lanes 0..31 at once) and every loop and
    block index 0, for the sectors and banks a warp request touches; None where threads are bound to other axes too
    (the step between threads 0 and 1 then stands for the warp)."""
    if self._lane_vars is None or not self._lane_vars & free_vars(index): return None
    return self._at(index, {v: var(LANE) for v in self._lane_vars})

  def _step(self, index: Expr) -> Expr:
    """The index's step from thread 0 to thread 1."""
    return self._at(index, {v: const(1) for v in self._threads}) - self._at(index, {})

  def _along(self, index: Expr, v: str) -> Expr:
    """The index's step along loop variable ``v``."""
    return self._at(index, {v: const(1)}) - self._at(index, {})

  def _vector_probes(self, index: Expr, vvar: str, width: Expr) -> list[tuple[Expr, Expr]]:
    """(index(last lane) - index(lane 0), index(lane 0)) for threads 0..3 (every other index 0):
    the emitter writes float2 / float4 accesses only where the lanes are contiguous and aligned."""
    plain = map_loads(index, lambda n: const(0, n.dtype))
    if VECTOR_STRICT and any(n.op in (Op.FLOORDIV, Op.FLOORMOD) and vvar in free_vars(n) for n in walk(plain)):
      return [(const(-1), const(0))]     # the lane is divided: the emitter cannot prove it contiguous
    out = []
    for t in range(4):
      lanes = {u: const(t) for u in self._threads}
      first = self._at(index, lanes)
      out.append((self._at(index, {**lanes, vvar: width - 1}) - first, first))
    return out

  def _site(self, buf, index, value: Expr, loops, width: Expr, vvar: str | None = None) -> _Site:
    pos = {v: i for i, (v, _, _) in enumerate(loops)}
    deps = lambda e: frozenset(pos[v] for v in free_vars(e) if v in pos)   # noqa: E731
    varying = set(pos) | ({vvar} if vvar else set())
    accesses, counts, vector = [], {}, []
    fetch = buf.name if buf.scope == "shared" else None
    n_mul = n_add = 0
    words, in_words = _dot4_words(value)
    for e in [value] + ([index] if index is not None else []):
      for n in walk(e):
        if n.op is Op.LOAD:
          b = n.arg
          scope = getattr(b, "scope", "global")
          if scope == "local" or n in in_words: continue
          d = deps(n.src[0])
          steps = tuple((i, self._along(n.src[0], loops[i][0]) // (4 if n in words else 1)) for i in sorted(d)) \
              if scope == "shared" else ()      # (only shared loads merge into vectors here)
          accesses.append(_Access(scope, False, self._step(n.src[0]), const(4) if n in words else width,
                                  b.element_bytes, d, fetch if scope == "global" else None, steps=steps,
                                  divmods=tuple(Counter(_divmods(n.src[0], pos, varying)).items()),
                                  warp=self._warp(n.src[0]) if n not in words else None,
                                  vstep=self._along(n.src[0], vvar) if vvar in free_vars(n.src[0]) else None))
          if vvar is not None and vvar in free_vars(n.src[0]): vector += self._vector_probes(n.src[0], vvar, width)
        elif n.op is Op.CALL and n.dtype in FLOAT_DTYPES and n.arg != BITCAST:    # (a bitcast is a register's bits)
          counts["sfu"] = counts.get("sfu", const(0)) + width
        elif n.op is Op.CALL and n.arg == DOT4:
          counts["int"] = counts.get("int", const(0)) + width
        elif n.op in _ARITH and n.dtype in FLOAT_DTYPES:
          if n.op is Op.MUL: n_mul += 1
          elif n.op in (Op.ADD, Op.SUB): n_add += 1
          else: counts["fp32_arith"] = counts.get("fp32_arith", const(0)) + width
    fma = min(n_mul, n_add)
    if fma: counts["fp32_fma"] = width * fma
    if n_mul + n_add - 2 * fma:
      counts["fp32_arith"] = counts.get("fp32_arith", const(0)) + width * (n_mul + n_add - 2 * fma)
    if buf.scope != "local" and index is not None:
      accesses.append(_Access(buf.scope, True, self._step(index), width, buf.element_bytes, deps(index),
                              divmods=tuple(Counter(_divmods(index, pos, varying)).items()),
                              warp=self._warp(index),
                              vstep=self._along(index, vvar) if vvar in free_vars(index) else None))
      if vvar is not None: vector += self._vector_probes(index, vvar, width)
    return _Site([(x, kind) for _, x, kind in loops], accesses, counts, vector)

  # -- evaluating (per population)
  def facts(self, values: list[dict]) -> list[list[LaunchFacts]]:
    """Per point, per kernel: the launch facts (occupancy from the register / shared formulas)."""
    P = len(values)
    out: list[list[LaunchFacts]] = [[] for _ in range(P)]
    for ki, f in enumerate(self._launches(values)):
      for p in range(P):
        out[p].append(LaunchFacts(
          name=f"k{ki}", blocks=int(f.blocks[p]), threads_per_block=int(f.threads_per_block[p]),
          per_thread={c: float(v[p]) for c, v in f.per_thread.items()},
          active_warps_per_sm=int(f.active_warps_per_sm[p]), blocks_per_sm=int(f.blocks_per_sm[p]),
          dram_bytes=f.dram_bytes, l2_bytes=float(f.l2_bytes[p]), l1_cycles_per_block=float(f.l1_cycles_per_block[p]),
          shared_wavefronts_per_block=float(f.shared_wavefronts_per_block[p]), chain_cycles=float(f.chain_cycles[p]),
          local_bytes_per_thread=float(f.local_bytes_per_thread[p]), registers=int(f.registers[p])))
    return out

  def _launches(self, values: list[dict]) -> list[LaunchFacts]:
    """Per kernel, the launch facts of every point at once: each number a numpy array, one value per point
    (:func:`.model.unit_times` takes them so)."""
    P = len(values)
    env = {n: np.array([v[n] for v in values], np.int64) for n in self.names}
    env[LANE] = np.arange(32, dtype=np.int64)[:, None]
    ev = self._facts_f.bind(env)
    num = _per_point(ev, P)
    whole = self._whole(env, P)
    out: list[LaunchFacts] = []
    for ki, kf in enumerate(self.kernels):
      blocks, threads, smem, local = num(kf.blocks), num(kf.threads), num(kf.smem), num(kf.local)
      regs = REG_OVERHEAD + REG_PER_LOCAL * local
      warps = np.ceil(threads / self.dev.warp_size)
      counts = {c: num(e).copy() for c, e in kf.counts.items()}
      live = np.arange(32)[:, None] < threads[None, :]       # the first warp's lanes the block has
      l1, l2, exposed = np.zeros(P), np.zeros(P), num(kf.exposed).copy()
      shared = num(kf.wavefronts) * warps

      def add(cls, n):
        counts[cls] = counts[cls] + n if cls in counts else n
      operands = np.zeros(P)    # the most values one unrolled body loads (ptxas keeps them in registers)
      for s in kf.sites:
        ext = [num(x) for x, _ in s.loops]
        trip = np.prod(ext, axis=0) if ext else np.ones(P)
        unrolled, open_ = np.ones(P), np.ones(P, bool)
        rolled = [np.zeros(P, bool) for _ in ext]
        for i in reversed(range(len(ext))):
          x, (_, kind) = ext[i], s.loops[i]
          fits = (kind == "vthread") | (open_ & (unrolled * x <= self.unroll) & (kind != "barrier"))
          unrolled = np.where(fits, unrolled * x, unrolled)
          open_ &= fits
          rolled[i] = ~fits
        iters = trip / unrolled
        fetch_req = None      # a cooperative fetch: warp requests per block, from the buffer it fills
        dst = next((a for a in s.accesses if a.store and a.scope == "shared"), None)
        if dst is not None and any(a.fetch for a in s.accesses):
          size = num(kf.shared_sizes[next(a.fetch for a in s.accesses if a.fetch)])
          fetch_rounds = np.prod([ext[i] for i in range(len(ext)) if i not in dst.deps] or [np.ones(P)], axis=0)
          fetch_req = fetch_rounds * np.ceil(size / (num(dst.width) * self.dev.warp_size))
        for c, n in s.counts.items(): add(c, num(n) * trip)
        add("int", INT_PER_ITERATION * iters)
        lanes = np.ones(P)       # instructions per vector: 1 when the emitter writes float2 / float4, else one per lane
        if s.vector:
          w = num(s.accesses[0].width) if s.accesses else np.ones(P)
          ok = np.ones(P, bool)
          for span, first in s.vector: ok &= (num(span) == w - 1) & (num(first) % w == 0)
          lanes = np.where(ok, 1.0, w)
        body_loads = np.zeros(P)
        wide = [None] * len(ext)      # per loop: the widest vector NVRTC merges along it where unrolled (once a site)
        for a in s.accesses:
          distinct = np.ones(P)
          for i in a.deps: distinct = np.where(rolled[i], distinct, distinct * ext[i])
          if a.scope == "shared" and not a.store and a.steps:
            # NVRTC merges the contiguous loads of an unrolled loop into ld.shared.v2 / v4, whichever loop it is (the
            # innermost alone, as until 2026-11-30, saw a matmul's A-tile reads along k as scalars: 2.5x the PTX's)
            vf = np.ones(P)
            for i, st in a.steps:
              if wide[i] is None:
                wide[i] = np.where(rolled[i], 1, np.where(ext[i] % 4 == 0, 4, np.where(ext[i] % 2 == 0, 2, 1)))
              vf = np.maximum(vf, np.where(num(st) == 1, wide[i], 1))
            distinct = distinct / vf
          if not a.store and a.scope == "shared": body_loads = body_loads + distinct
          cnt = iters * distinct
          add(f"{'st' if a.store else 'ld'}_{a.scope}", cnt * lanes)
          if fetch_req is not None:     # a fetch's index: an instruction per element, its divisions per value
            add("int", cnt * lanes * INT_PER_FETCH_ELEMENT)
            for dd, times in a.divmods:   # (recomputed at every element where a loop it reads is rolled, or where
              once = INT_PER_DIVMOD * times * lanes * np.prod([ext[i] for i in dd] or [np.ones(P)], axis=0)  # a
              again = (lanes > 1) | (np.any([rolled[i] for i in dd], axis=0) if dd else False)   # vector is split)
              add("int", np.where(again, INT_PER_DIVMOD * times * cnt * lanes, once))
          step = np.abs(num(a.step))
          if a.scope == "global":
            add("int", INT_PER_GLOBAL_ACCESS * cnt)
            if not a.store and a.fetch is None: exposed += cnt * LATENCY_CYCLES["ld_global"]
            vec = num(a.width) * a.nbytes
            if a.warp is None:       # 32 threads, ``span`` bytes apart
              span = step * a.nbytes
              sectors = np.where(span == 0, np.ceil(vec / 32),
                                 np.minimum(np.ceil((31 * span + vec) / 32), 32 * np.ceil(vec / 32)))
            else:                    # the sectors the 32 lanes touch (a fused index breaks rows mid-warp); a
              first = np.broadcast_to(ev(a.warp), (32, P)) * a.nbytes   # vector whose elements are apart, per element
              split = _split(a, num)
              apart = np.where(split, num(a.vstep) * a.nbytes, 0) if np.any(split) else np.zeros(P)
              sectors = self._remembered(_lane_sectors, np.where(live, first, first[:1]),
                                         np.where(split, num(a.width), 1), apart, np.where(split, a.nbytes, vec))
            req = (cnt * warps if fetch_req is None else fetch_req) * blocks
            reuse = 1.0
            if a.fetch is not None and a.fetch in whole[ki]:
              moved = req * self.dev.warp_size * num(a.width)
              reuse = np.minimum(1.0, whole[ki][a.fetch] * blocks / np.maximum(moved, 1))
            l1 += req * np.maximum(np.ceil(sectors / 4), 1)
            l2 += req * sectors * 32 * reuse
          elif a.scope == "shared":
            if not a.store: exposed += cnt * LATENCY_CYCLES["ld_shared"]
            req = cnt * warps if fetch_req is None or not a.store else fetch_req
            if a.warp is not None:
              shared += req * self._remembered(_bank_degree, np.broadcast_to(ev(a.warp), (32, P)) * a.nbytes, live,
                                              np.where(_split(a, num), a.nbytes, num(a.width) * a.nbytes))
            else:
              words = np.maximum(step * a.nbytes / 4, 0).astype(np.int64)
              shared += req * np.where(words == 0, 1, np.gcd(words, 32))
        operands = np.maximum(operands, body_loads)
      regs = regs + OPERAND_REGS * np.minimum(operands, OPERAND_CAP)
      rounds = num(kf.rounds)
      chain = sum(counts.values()) + exposed + rounds * LATENCY_CYCLES["ld_global"] / 2 \
        + counts.get("sfu", 0) * LATENCY_CYCLES["sfu"]
      spill = np.maximum(regs - self.dev.max_regs_per_thread, 0) * 8.0 * np.maximum(rounds / 2, 1)
      capped = np.minimum(regs, self.dev.max_regs_per_thread).astype(np.int64)
      occ = np.array([self._occupancy(*x) for x in zip(threads.astype(np.int64).tolist(), capped.tolist(),
                                                        smem.astype(np.int64).tolist(),
                                                        np.maximum(blocks, 1).astype(np.int64).tolist())], np.int64)
      b = np.maximum(blocks.astype(np.int64), 1).astype(np.float64)
      out.append(LaunchFacts(
        name=f"k{ki}", blocks=b, threads_per_block=threads.astype(np.int64).astype(np.float64),
        per_thread=counts, active_warps_per_sm=occ[:, 1], blocks_per_sm=occ[:, 0],
        dram_bytes=kf.dram_bytes, l2_bytes=np.maximum(l2, kf.dram_bytes), l1_cycles_per_block=l1 / b,
        shared_wavefronts_per_block=shared, chain_cycles=chain, local_bytes_per_thread=spill,
        registers=np.round(regs).astype(np.int64)))
    return out

  def _remembered(self, fn, *columns: np.ndarray) -> np.ndarray:
    """``fn(*columns)`` (each column: a value or values per point, points last; ``fn`` gives one value per point),
    remembered per point by its columns' values: a walk's next states differ from its current ones by a move, and
    most keep their warps' addresses. Only the points not seen before are computed."""
    parts = [np.asarray(c, np.int64).reshape(-1, c.shape[-1]) for c in columns]
    rows = np.concatenate(parts).T.copy()
    keys = [(fn, r.tobytes()) for r in rows]
    memo = self._lanes_memo
    todo = [p for p, k in enumerate(keys) if k not in memo]
    if todo:
      sub, at = rows[todo].T, np.cumsum([0] + [len(x) for x in parts])
      args = [sub[a:b].reshape(c.shape[:-1] + (len(todo),)) for a, b, c in zip(at, at[1:], columns)]
      for p, v in zip(todo, fn(*args)): memo[keys[p]] = v
    return np.array([memo[k] for k in keys])

  def _occupancy(self, threads: int, regs: int, smem: int, blocks: int) -> tuple[int, int]:
    """(blocks, warps) resident per SM; (0, 0) where the launch does not fit (memoised: walks revisit them)."""
    from minicomp.search.static.occupancy import OccupancyError, occupancy
    key = (threads, regs, smem, blocks)
    hit = self._occupied.get(key)
    if hit is None:
      try:
        occ = occupancy(self.dev, threads, regs, smem, blocks)
        hit = (occ.blocks_per_sm, occ.active_warps_per_sm)
      except OccupancyError:
        hit = (0, 0)
      self._occupied[key] = hit
    return hit

  def _whole(self, env: dict[str, np.ndarray], P: int) -> list[dict[str, np.ndarray]]:
    """Per kernel, per shared buffer: the elements it holds over the whole reduction (its size with
    every reduction tile of the sketch stretched to the full extent): the distinct data a block
    fetches into it, which bounds the L2 traffic of its fetches (L1 keeps what rounds re-read)."""
    env = dict(env)
    for g in self.sketch.tiles:
      if g.kind == "reduce" and g.vars:
        env[g.vars[0]] = np.full(P, g.extent, np.int64)
        for v in g.vars[1:]: env[v] = np.ones(P, np.int64)
    ev = self._whole_f.bind(env)
    num = _per_point(ev, P)
    return [{b: num(e) for b, e in kf.shared_sizes.items()}
            for kf in self.kernels]

  def valid(self, values: list[dict]) -> np.ndarray:
    """Block size, grid, shared memory and registers within the target's limits (bool per point)."""
    tgt, P = self.target, len(values)
    ev = self._valid_f.bind({n: np.array([v[n] for v in values], np.int64) for n in self.names})
    num = _per_point(ev, P)
    ok = np.ones(P, bool)
    for kf in self.kernels:
      threads, smem, local, blocks = num(kf.threads), num(kf.smem), num(kf.local), num(kf.blocks)
      ok &= (threads <= tgt.max_threads_per_block) & (smem <= tgt.search_shared_bytes)
      ok &= REG_OVERHEAD + REG_PER_LOCAL * local <= self.dev.max_regs_per_thread
      ok &= (blocks >= 1) & (blocks <= tgt.max_grid_dims[0])
    return ok

  def __call__(self, values: list[dict]) -> np.ndarray:
    """Estimated seconds per point (all launches); ``inf`` for points that break a limit."""
    if not values: return np.zeros(0)
    ok = self.valid(values)
    out = np.full(len(values), np.inf)
    idx = [i for i in range(len(values)) if ok[i]]
    if not idx: return out
    total, fits = np.zeros(len(idx)), np.ones(len(idx), bool)
    for f in self._launches([values[i] for i in idx]):
      fits &= f.blocks_per_sm > 0
      total = total + launch_times(f, self.dev, self.calibration)
    out[np.array(idx)[fits]] = total[fits]
    return out


class PointwiseModel:
  """The analytic model of a sketch whose symbolic program does not lower: the tensor-core sketch, whose tensorized
  loops and lane checks need its sizes. Each point's program is lowered on its own, once (kept by its values), and
  costed by :class:`SketchModel`'s counting; the sketch's few choices (warp tile, k-step, fetch widths, stages)
  bound that to a few hundred lowerings a task. A point that does not lower (tiles that do not divide the task)
  is invalid. The same interface: ``model(values)``, ``valid``, ``facts``, ``names`` and ``unroll``."""

  def __init__(self, sketch, target: Target, unroll: int = UNROLL_DEFAULT):
    self.sketch, self.target, self.unroll = sketch, target, unroll
    self.names = sketch.schedule.params()
    self._points: dict[tuple, SketchModel | None] = {}

  def _model(self, values: dict) -> SketchModel | None:
    from minicomp.errors import MinicompError
    from minicomp.search.annotate import concretize
    key = tuple(values[n] for n in self.names)
    if key not in self._points:
      try:
        self._points[key] = SketchModel(self.sketch, self.target, self.unroll,
                                        program=concretize(self.sketch, values).lower())
      except MinicompError:
        self._points[key] = None
    m = self._points[key]
    if m is not None: m.unroll = self.unroll      # (Tuna sets the unroll limit on its copies of the model)
    return m

  def valid(self, values: list[dict]) -> np.ndarray:
    return np.array([m is not None and bool(m.valid([v])[0]) for v in values for m in [self._model(v)]], bool)

  def facts(self, values: list[dict]) -> list[list[LaunchFacts]]:
    return [self._model(v).facts([v])[0] for v in values]

  def __call__(self, values: list[dict]) -> np.ndarray:
    return np.array([m([v])[0] if m is not None else np.inf for v in values for m in [self._model(v)]], np.float64)


def sketch_model(sketch, target: Target, unroll: int = UNROLL_DEFAULT):
  """The analytic model of ``sketch``: formulas of its variables (:class:`SketchModel`), or, for a sketch with a
  tensorize step, whose symbolic program does not lower, one program per point (:class:`PointwiseModel`)."""
  from minicomp.errors import MinicompError
  try:
    return SketchModel(sketch, target, unroll)
  except MinicompError:
    if not any(st.kind == "tensorize" for st in sketch.schedule.state.steps): raise
    return PointwiseModel(sketch, target, unroll)


@dataclass(frozen=True)
class _Concrete:
  """A concrete schedule in a sketch's place: no parameters, no tiles to stretch."""
  schedule: object
  tiles: tuple = ()


def schedule_seconds(schedule, target: Target, program=None) -> float:
  """The analytic model's estimate of one concrete schedule (``program``: its lowered program, lowered here when not
  given), no NVRTC build; ``inf`` where it breaks a resource limit. Raises what lowering raises."""
  return float(SketchModel(_Concrete(schedule), target, program=program if program is not None else schedule.lower())(
    [{}])[0])


__all__ = ["PointwiseModel", "SketchModel", "UNROLL_DEFAULT", "schedule_seconds", "sketch_model"]
