"""Tensorized reductions: a warp's ``mma.sync`` in the loop IR (``Schedule.tensorize``).

**The intrinsics.** :class:`Intrinsic` describes one ``mma.sync`` shape and type and where each of its
operands' elements lives across the 32 lanes of a warp (the PTX ISA's fragment figures; the CUDA side, the
helpers kernels call and the arch check, is ``minicomp/codegen/tensor_core.py``, and docs/tensor_cores.md
lists the layouts).

**The lowering.** ``tensorize(C, loop, intrinsic)`` names the innermost three loops of a sum reduction: two
spatial loops of extent 2 (``r`` and ``c``) and one reduction loop of extent k. In the scalar program, each
thread adds, for its own (r, c), the k products ``x(r, kk) * y(c, kk)`` to its accumulator element. The warp's
instruction computes the same sums when the lanes are arranged as the accumulator fragment says: lane
``(g, t)`` (``g = lane / 4``, ``t = lane % 4``) holds fragment rows ``g + 8 r`` and columns ``2 t + c``, so

- the operand ``x`` (A) may depend on the lane only through ``g`` (and on ``r``, ``kk``, the warp, the outer
  loops), and
- the operand ``y`` (B) only through ``t`` (and ``c``, ``kk``, ...).

Which tensor rows and columns those are is the schedule's choice (rows ``2 g + r`` keep a lane's four
elements in a 2 x 2 box, which bound inference sizes exactly). :func:`mma_statement` checks both conditions on
the lowered index expressions (over every thread of a warp and every (r, c, kk), at sample values of the outer
loops) and writes each lane's fragment elements by substituting into ``x`` and ``y``: A's element i of lane
(g, t) is ``x`` at ``r = (row - g) / 8``, ``kk = col``; B's element i (column g of the fragment) is ``y`` as the
lane of the same warp with ``t = g / 2`` reads it (its own g does not matter: 0 is taken), at ``c = g % 2``,
``kk = row``. The statement keeps the scalar loops as its body.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from minicomp.errors import ScheduleError
from minicomp.ir.evaluate import evaluate
from minicomp.ir.expr import Expr, cast, const, free_vars, var, walk
from minicomp.ir.loop import For, Ldmatrix, Mma, Store
from minicomp.ir.ops import DOT4, Op, int_range
from minicomp.ir.rewrite import map_loads, substitute
from minicomp.ir.simplify import simplify


@dataclass(frozen=True)
class Intrinsic:
  """One ``mma.sync`` shape and type: ``D[m x n] += A[m x k] B[k x n]``, warp-wide; D float32, or int32 for the
  8-bit integer types."""
  name: str            # "m16n8k16_f16": the helper is mc_mma_<name>
  m: int
  n: int
  k: int
  dtype: str           # A's element type: "float16", "bfloat16", "tfloat32" (floats rounded), "int8" or "uint8"
  min_cc: tuple[int, int]
  a_regs: int          # 32-bit registers per lane
  b_regs: int
  b_type: str = ""     # B's element type where it differs from A's (an int8 / uint8 pair)

  @property
  def helper(self) -> str: return f"mc_mma_{self.name}"

  @property
  def b_dtype(self) -> str: return self.b_type or self.dtype

  @property
  def integer(self) -> bool: return self.dtype in BYTE_TYPES

  @property
  def acc_dtype(self) -> str:
    """The accumulator's type: int32 for the integer types (their products summed exactly, wrapping), else float32."""
    return "int32" if self.integer else "float32"

  @property
  def k_per_term(self) -> int:
    """Steps of k one term of the tensorized sum covers: 4 for the 8-bit types (a ``dot4``), else 1 (a product)."""
    return 4 if self.integer else 1

  @property
  def per_register(self) -> int:
    """Operand elements per 32-bit register: 4 for the 8-bit types, 2 for the 16-bit ones, 1 for tf32."""
    return 4 if self.integer else 1 if self.dtype == "tfloat32" else 2

  # The layouts as functions of groupID ``g`` and threadID_in_group ``t`` (ints, or index Exprs: lowering writes
  # a lane's fragment elements with them), and of the lane.
  def a_at(self, g, t, i: int):
    """(row, col) in A (m x k) of element ``i`` of the A fragment of the lane with groupID ``g``, thread ``t``."""
    if self.dtype == "tfloat32": return g + 8 * (i % 2), t + 4 * (i // 2)
    if self.integer: return g + 8 * (i // 4 % 2), 4 * t + i % 4 + 16 * (i // 8)
    if self.k == 8: return g + 8 * (i // 2), 2 * t + i % 2
    return g + 8 * (i // 2 % 2), 2 * t + i % 2 + 8 * (i // 4)

  def b_at(self, g, t, i: int):
    """(row, col) in B (k x n) of element ``i`` of the B fragment of lane (``g``, ``t``)."""
    if self.dtype == "tfloat32": return t + 4 * i, g
    if self.integer: return 4 * t + i % 4 + 16 * (i // 4), g
    return 2 * t + i % 2 + 8 * (i // 2), g

  @staticmethod
  def c_at(g, t, i: int):
    """(row, col) in C / D (m x n) of element ``i`` (0..3) of lane (``g``, ``t``)'s accumulator: every shape's."""
    return g + 8 * (i // 2), 2 * t + i % 2

  def a_element(self, lane: int, i: int) -> tuple[int, int]: return self.a_at(lane // 4, lane % 4, i)
  def b_element(self, lane: int, i: int) -> tuple[int, int]: return self.b_at(lane // 4, lane % 4, i)
  def c_element(self, lane: int, i: int) -> tuple[int, int]: return self.c_at(lane // 4, lane % 4, i)

  @property
  def a_elements(self) -> int: return self.a_regs * self.per_register

  @property
  def b_elements(self) -> int: return self.b_regs * self.per_register


BYTE_TYPES = {"int8": "s8", "uint8": "u8"}      # the 8-bit integer types and their PTX names
INTRINSICS: dict[str, Intrinsic] = {i.name: i for i in (
  Intrinsic("m16n8k16_f16", 16, 8, 16, "float16", (8, 0), 4, 2),
  Intrinsic("m16n8k16_bf16", 16, 8, 16, "bfloat16", (8, 0), 4, 2),
  Intrinsic("m16n8k8_f16", 16, 8, 8, "float16", (7, 5), 2, 1),
  Intrinsic("m16n8k8_tf32", 16, 8, 8, "tfloat32", (8, 0), 4, 2),
  *(Intrinsic(f"m16n8k32_{BYTE_TYPES[a]}{BYTE_TYPES[b]}", 16, 8, 32, a, (8, 0), 4, 2, b)
    for a in BYTE_TYPES for b in BYTE_TYPES),
)}


def _one_load(e: Expr, what: str, where: str) -> Expr:
  """The index of the single tensor read in operand ``e``."""
  loads = [n for n in walk(e) if n.op is Op.LOAD]
  if len(loads) != 1:
    raise ScheduleError(f"{where}: operand {what} ({e!r}) must read exactly one tensor element, it reads {len(loads)}")
  return loads[0].src[0]


def _holds_only(e: Expr, dtype: str) -> bool:
  """Whether every value of ``e`` is one of ``dtype`` (an 8-bit integer type): a read of a tensor of that type,
  widened by casts, or a select between such values and constants in its range (a convolution's padding)."""
  lo, hi = int_range(dtype)
  if e.op is Op.CAST: return e.dtype in ("int16", "int32", "int64") and _holds_only(e.src[0], dtype)
  if e.op is Op.LOAD: return e.dtype == dtype
  if e.op is Op.CONST: return float(e.arg).is_integer() and lo <= e.arg <= hi
  if e.op is Op.SELECT: return _holds_only(e.src[1], dtype) and _holds_only(e.src[2], dtype)
  return False


def _probe(e: Expr) -> Expr:
  """Operand ``e`` with its tensor read replaced by the read's index: what must not change between lanes that
  share a fragment element (the element read, and any condition around it, such as a padding select)."""
  return map_loads(e, lambda n: cast(n.src[0], n.dtype))


def _scalar_nest(scalar, where: str):
  """(the three loops, the update) of the tensorized loops: nested loops around one store, nothing else."""
  loops, s = [], scalar
  while isinstance(s, For):
    loops.append(s)
    s = s.body
  if not isinstance(s, Store) or len(loops) != 3:
    what = "a guard" if type(s).__name__ == "If" else f"{len(loops)} loops around a {type(s).__name__}"
    raise ScheduleError(f"{where}: the tensorized loops must be exactly three loops (extents 2, 2 and k) around the "
                        f"update, with no guard; found {what} (a loop of extent 1 is dropped, a split that does "
                        "not divide its loop adds a guard)")
  return loops, s


def mma_statement(scalar, intr: Intrinsic, spatial: tuple[str, str], k_var: str, lane_vars: list[str],
                  ranges: dict, where: str) -> Mma:
  """The :class:`Mma` of the scalar nest ``scalar`` (the stage's loops from the tensorized one inward).
  ``spatial``: the C variables of its two spatial loops, ``k_var`` its reduction loop's; ``lane_vars``: the
  variables bound to threadIdx.x (a multiple of 32 threads); ``ranges``: every loop variable's (lo, hi)."""
  loops, store = _scalar_nest(scalar, where)
  ext = {lp.var: lp.extent for lp in loops}
  if set(ext) != {*spatial, k_var}:
    raise ScheduleError(f"{where}: the tensorized loops are {list(ext)}, expected {[*spatial, k_var]}")
  value = store.value
  acc_load = Expr.make(Op.LOAD, value.dtype, (store.index,), store.buffer)
  prod = value.src[1] if value.op is Op.ADD and len(value.src) == 2 else None
  quad = prod is not None and prod.op is Op.CALL and prod.arg == DOT4 and intr.integer    # four steps of k a term
  if store.buffer.scope != "local" or prod is None or value.src[0] != acc_load or not (prod.op is Op.MUL or quad):
    raise ScheduleError(f"{where}: the tensorized update must be acc[...] = acc[...] + x * y (or, for an 8-bit "
                        f"intrinsic, + dot4(x0..x3, y0..y3)) with acc in registers (cache_write the stage to local); "
                        f"it is {store.buffer.name}[...] = {value!r}")
  xs, ys = (prod.src[:4], prod.src[4:]) if quad else ((prod.src[0],), (prod.src[1],))
  per = len(xs)                 # k steps a term: element column `col` is term col % per of step col // per
  for v, want in ((spatial[0], 2), (spatial[1], 2), (k_var, intr.k // per)):
    if not (ext[v].is_const and int(ext[v].arg) == want):
      raise ScheduleError(f"{where}: loop {v} has extent {ext[v]!r}; {intr.name} needs {want}"
                          + (f" (k = {intr.k}, four steps a dot4)" if quad else ""))
  if intr.integer:
    for es, what, want in ((xs, "x", intr.dtype), (ys, "y", intr.b_dtype)):
      for e in es:
        if not _holds_only(e, want):
          raise ScheduleError(f"{where}: {intr.name} multiplies {want} operands exactly (int32 sums); operand {what} "
                              f"({e!r}) is not a {want} value (a tensor of that type read, widened at most)")
    if store.buffer.dtype != "int32":
      raise ScheduleError(f"{where}: {intr.name} accumulates in int32; {store.buffer.name} is {store.buffer.dtype}")
  deps = [{frozenset(set(free_vars(_one_load(e, n, where))) & set(spatial)) for e in es}
          for es, n in ((xs, "x"), (ys, "y"))]
  deps = [set(next(iter(d))) if len(d) == 1 else set(spatial) for d in deps]    # (a dot4's four terms: the same)
  if len(deps[0]) != 1 or len(deps[1]) != 1 or deps[0] == deps[1]:
    raise ScheduleError(f"{where}: each operand must vary with one of the two spatial loops {list(spatial)} and not the "
                        f"other (A with the rows, B with the columns); they vary with {sorted(deps[0])} and {sorted(deps[1])}")
  r_var, c_var = next(iter(deps[0])), next(iter(deps[1]))
  for x, y in zip(xs, ys):
    _check_lanes(_probe(x), _probe(y), r_var, c_var, k_var, intr.k // per, lane_vars, ranges, where)
  used = set().union(*(free_vars(e) for e in (*xs, *ys)), free_vars(store.index))
  first = next((v for v in lane_vars if v in used), lane_vars[0])     # (all are threadIdx.x; the stage's own reads best)
  g, t = var(first) % 32 // 4, var(first) % 4
  a = []
  for i in range(intr.a_elements):
    row0, col = intr.a_at(0, t, i)          # row g + 8 r: r = row0 / 8
    kk = col if per == 1 else col // per
    a.append(simplify(substitute(xs[i % per], {r_var: const(int(row0) // 8), c_var: const(0), k_var: kk}), ranges))
  b = []
  for i in range(intr.b_elements):
    row, _ = intr.b_at(g, t, i)             # column g of B: as the lane with t = g / 2 reads it, c = g % 2
    moved = {v: var(v) // 32 * 32 + g // 2 for v in lane_vars}   # B does not vary with the lane's g: take g = 0
    kk = row if per == 1 else row // per
    b.append(simplify(substitute(ys[i % per], {**moved, c_var: g % 2, r_var: const(0), k_var: kk}), ranges))
  acc = tuple(simplify(substitute(store.index, {r_var: const(i // 2), c_var: const(i % 2), k_var: const(0)}), ranges)
              for i in range(4))

  def a_at(e, j, gq, kk):   # A's read e where matrix j (register j)'s fragment row gq of 8 reads its kk-th term
    row, col = intr.a_at(const(0), const(0), intr.per_register * j)
    return substitute(e, {**{v: var(v) // 32 * 32 + 4 * gq for v in lane_vars}, r_var: row // 8, c_var: const(0),
                          k_var: col // per + kk})

  def b_at(e, j, gq, kk):   # B's read e where matrix j's fragment column gq reads its kk-th term
    row, _ = intr.b_at(const(0), const(0), intr.per_register * j)
    return substitute(e, {**{v: var(v) // 32 * 32 + gq // 2 for v in lane_vars}, c_var: gq % 2, r_var: const(0),
                          k_var: row // per + kk})
  a_ld = _ldmatrix(xs, intr.dtype, a_at, intr.a_regs, intr, first, lane_vars, ranges)
  b_ld = _ldmatrix(ys, intr.b_dtype, b_at, intr.b_regs, intr, first, lane_vars, ranges)
  return Mma(intr.name, store.buffer, acc, tuple(a), tuple(b), scalar, a_ld, b_ld)


_EXACT_WIDENING = {"float16": {"float32", "float64"}, "bfloat16": {"float32", "float64"},
                   "int8": {"int16", "int32", "int64"}, "uint8": {"int16", "int32", "int64"}}


def _read(e: Expr) -> Expr | None:
  """The tensor read that operand term ``e`` is, or widens exactly (an 8-bit value cast to int32 for its dot4: a
  fragment register holds the value as stored); None for any other value."""
  casts = []
  while e.op is Op.CAST: casts, e = casts + [e.dtype], e.src[0]
  return e if e.op is Op.LOAD and all(c in _EXACT_WIDENING.get(e.dtype, ()) for c in casts) else None


def _ldmatrix(terms, dtype: str, at, count: int, intr: Intrinsic, first: str, lane_vars: list[str],
              ranges: dict) -> Ldmatrix | None:
  """The ``ldmatrix`` that reads an operand's fragment (``count`` 8 x 8 matrices of 16-bit values, one per
  register), or None where its layout does not allow one. ``terms``: the operand's values in one term of the
  sum (one product's, or a dot4's four, read at k = 4 kk + term); ``at(read, j, gq, kk)``: a term's tensor read
  where matrix j's fragment row (A) or column (B) ``gq`` reads its kk-th term. Lane ``8 j + q`` gives the address of row
  q of matrix j: its 16 bytes (8 16-bit or 16 8-bit elements, k offsets 0, 1, ...) must be adjacent (row q is
  fragment row q; an 8-bit register's four bytes are then one dot4 term's, as m16n8k32 lays them out), or else
  (16-bit types only) the 8 rows at one k offset (``.trans``: row q is k offset q, as a row-major k x n tile holds
  B), 16-byte aligned either way. Checked by evaluating every (j, gq, offset) for the first and the last warp at the
  low, middle and high values of the other variables (as :func:`_check_lanes`: linear indices, for which it is a
  proof)."""
  reads = [_read(e) for e in terms]
  if intr.dtype == "tfloat32" or any(e is None or e.arg is not reads[0].arg for e in reads): return None
  buf = reads[0].arg
  if buf.scope != "shared" or buf.stored_dtype != dtype or buf.element_bytes * intr.per_register != 4: return None
  per, row_elems = len(terms), 16 // buf.element_bytes
  gq, kk = var("mc_ld_gq"), var("mc_ld_kk")
  index = [[at(e, const(j), gq, kk).src[0] for e in reads] for j in range(count)]
  _, hi = ranges.get(first, (0, None))
  if hi is None: return None
  others = sorted(set().union(*(free_vars(i) for m in index for i in m)) - {"mc_ld_gq", "mc_ld_kk", *lane_vars})
  G, K = np.meshgrid(np.arange(8), np.arange(row_elems // per), indexing="ij")
  P = np.arange(row_elems)[None, :]
  plain, trans = True, per == 1 and row_elems == 8
  for setting in range(3):
    env = {}
    for v in others:
      lo, h = ranges.get(v, (0, 0))
      env[v] = (lo, (lo + (lo if h is None else h)) // 2, lo if h is None else h)[setting]
    for w0 in sorted({0, (hi + 1) // 32 * 32 - 32}):
      lanes = {v: w0 for v in lane_vars}
      for terms_j in index:
        got = np.zeros((8, row_elems), dtype=np.int64)
        for i, ix in enumerate(terms_j):     # element offset per kk + i of the row: term i of its kk-th dot4
          got[:, i::per] = np.broadcast_to(np.asarray(evaluate(ix, {**env, **lanes, "mc_ld_gq": G, "mc_ld_kk": K})),
                                           G.shape)
        plain &= bool((got - got[:, :1] == P).all() and (got[:, 0] % row_elems == 0).all())
        trans &= bool((got - got[:1, :] == np.arange(8)[:, None]).all() and (got[0, :] % 8 == 0).all())
      if not (plain or trans): return None
  lane = var(first) % 32
  j, q = lane // 8 % count, lane % 8
  row = at(reads[0], j, q, const(0)) if plain else at(reads[0], j, const(0), q)
  return Ldmatrix(buf, simplify(row.src[0], ranges), count, not plain)


def _check_lanes(pa: Expr, pb: Expr, r_var: str, c_var: str, k_var: str, k: int, lane_vars: list[str],
                 ranges: dict, where: str) -> None:
  """A's probe (:func:`_probe`) may depend on the lane only through g and not on c; B's only through t and not on
  r: checked on every thread of the first and the last warp, every (r, c, kk), at the low, middle and high value
  of the other variables (all low, all middle, all high: a sample, not a proof; schedules that tile with splits
  give indices linear in each loop, for which it is)."""
  _, hi = ranges.get(lane_vars[0], (0, None))
  if hi is None: raise ScheduleError(f"{where}: the threads' extent must be known to tensorize")
  n_threads = hi + 1
  others = sorted((set(free_vars(pa)) | set(free_vars(pb))) - {r_var, c_var, k_var, *lane_vars})
  # axes: g (8), t (4), r (2), c (2), kk (k)
  g, t, r, c, kk = np.meshgrid(np.arange(8), np.arange(4), np.arange(2), np.arange(2), np.arange(k), indexing="ij")
  for setting in range(3):
    env = {}
    for v in others:
      l, h = ranges.get(v, (0, 0))
      h = l if h is None else h
      env[v] = (l, (l + h) // 2, h)[setting]
    for w0 in sorted({0, (n_threads // 32 - 1) * 32}):
      full = {**env, **{v: w0 + g * 4 + t for v in lane_vars}, r_var: r, c_var: c, k_var: kk}
      va = np.broadcast_to(np.asarray(evaluate(pa, full)), g.shape)
      vb = np.broadcast_to(np.asarray(evaluate(pb, full)), g.shape)
      if not ((va == va[:, :1, :, :1, :]).all()):
        raise ScheduleError(f"{where}: operand A ({pa!r}, reads as their indices) changes with the lane's column (threadIdx.x % 4) or "
                            "the column loop: lanes would need each other's A elements in a layout mma.sync does not have")
      if not ((vb == vb[:1, :, :1, :, :]).all()):
        raise ScheduleError(f"{where}: operand B ({pb!r}, reads as their indices) changes with the lane's row (threadIdx.x % 32 / 4) or "
                            "the row loop: mma.sync's B fragment cannot hold it")


__all__ = ["BYTE_TYPES", "INTRINSICS", "Intrinsic", "mma_statement"]
