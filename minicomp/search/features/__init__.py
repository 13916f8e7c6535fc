"""Ansor's per-store feature vector, written once over Expr arithmetic (see ``docs/features.md``).

Every feature is built with the constant-folding kit :mod:`minicomp.ir.arith`, so the same code gives
numbers on a concrete program (every node folds as it is built: the fast path) and Exprs of the schedule
variables on a symbolic one (Felix's requirement). Nothing compares symbolic values in Python: choices
Ansor makes by looking at values ("the first loop whose variable is in the index") are nested selects, and
choices made by looking at the program are made on what survives substitution unchanged (statement
structure, buffer names, loop kinds). "Does loop v move this access" is the *semantic* unit step
``idx(v=1) - idx(0)``, not "v occurs in idx": concrete lowering simplifies indices further than
symbolic lowering, so occurrence differs while the step does not. Loops of extent 1 vanish from
concrete programs but not from symbolic ones, so every loop-level rule skips them by ``extent > 1``.

Layout: :mod:`~minicomp.search.features.sites` finds the stores, their loops and accesses and answers the
index questions; :mod:`~minicomp.search.features.memory` computes the per-buffer features and the
arithmetic-intensity curve; this module counts operations, describes the loops and launch, assembles
the rows, and holds the public API (``extract_features``, ``extract_program_exprs``,
``evaluate_features``, ``feature_names``).
"""
from __future__ import annotations

import numpy as np

from minicomp.ir.arith import add, div, fl, gt, ifl, lnot, mul, num, onehot, slog
from minicomp.ir.evaluate import evaluate
from minicomp.ir.expr import Expr
from minicomp.ir.loop import Program
from minicomp.ir.ops import FLOAT_DTYPES, INT_DTYPES, Op
from minicomp.ir.rewrite import fold
from minicomp.search.features.memory import (BUF_FEATURE_NAMES, CACHE_LINE, N_BUF_FEATURES, N_CURVE, buffer_features,
                                            intensity_curve)
from minicomp.search.features.sites import Site, SiteLoop, add_regions, kernel_loop_vars, nontrivial, store_sites

MAX_N_BUFS = 5
N_FEATURES = 57 + N_BUF_FEATURES * MAX_N_BUFS + N_CURVE + 4 + 3 + 1   # 165: Ansor's 164 (5 buffers) + tensor_mma
_POS = ("kPosNone", "kPosInnerSpatial", "kPosMiddleSpatial", "kPosOuterSpatial", "kPosInnerReduce", "kPosMiddleReduce",
        "kPosOuterReduce", "kPosMixed")
_OP_KINDS = ("mad", "addsub", "mul", "divmod", "cmp", "math_func", "other_func")

__all__ = ["CACHE_LINE", "MAX_N_BUFS", "N_BUF_FEATURES", "N_CURVE", "N_FEATURES", "evaluate_features",
           "extract_features", "extract_program_exprs", "feature_names"]


def feature_names() -> list[str]:
  """Names of the N_FEATURES columns, in Ansor's order (``B{i}.`` prefixes the buffer slots)."""
  out = [f"float_{o}" for o in _OP_KINDS] + [f"int_{o}" for o in _OP_KINDS] + ["bool_op", "select_op"]
  for k in ("vec", "unroll", "parallel"): out += [f"{k}_num", f"{k}_prod", f"{k}_len"] + [f"{k}_type.{p}" for p in _POS]
  out += ["is_gpu", "blockIdx_x_len", "blockIdx_y_len", "blockIdx_z_len", "threadIdx_x_len", "threadIdx_y_len",
          "threadIdx_z_len", "vthread_len"]
  out += [f"B{b}.{n}" for b in range(MAX_N_BUFS) for n in BUF_FEATURE_NAMES]
  out += [f"arith_intensity_curve_{i}" for i in range(N_CURVE)]
  return out + ["alloc_size", "alloc_prod", "alloc_outer_prod", "alloc_inner_prod", "outer_prod", "num_loops",
                "auto_unroll_max_step", "tensor_mma"]


# ---------------------------------------------------------------------------------------------
# operation counts: a fold whose value at each node is (16 counts, reads memory)

_OP_SLOT = {Op.ADD: 1, Op.SUB: 1, Op.NEG: 1, Op.MUL: 2, Op.DIV: 3, Op.FLOORDIV: 3, Op.FLOORMOD: 3, Op.MIN: 4, Op.MAX: 4,
            Op.LT: 4, Op.LE: 4, Op.GT: 4, Op.GE: 4, Op.EQ: 4, Op.NE: 4, Op.CALL: 5}
_NO_OPS = (0,) * 16


def _count(ctx, n: Expr, kids: tuple) -> tuple[tuple[int, ...], bool]:
  loads = n.op is Op.LOAD or any(k[1] for k in kids)
  if n.op is Op.LOAD or (not loads and n.dtype in INT_DTYPES): return _NO_OPS, loads
  r = [sum(c) for c in zip(_NO_OPS, *[k[0] for k in kids])]
  if n.op in (Op.AND, Op.OR, Op.NOT): r[14] += 1
  elif n.op is Op.SELECT: r[15] += 1
  elif n.op in _OP_SLOT: r[_OP_SLOT[n.op] + (0 if (n.src[0].dtype if n.src else n.dtype) in FLOAT_DTYPES else 7)] += 1
  return tuple(r), loads


_COUNT = {op: _count for op in Op}


def _count_ops(e: Expr) -> list[int]:
  """Ansor's MathOpCounter on a store's value, as a tree (shared subtrees count each time they are
  used), without index arithmetic: integer subtrees that read no memory (load indices, the operands of
  padding predicates) are simplified differently by concrete and symbolic lowering."""
  return list(fold(e, _COUNT, what="op count", enter=lambda n: n.op is not Op.LOAD)[0])


# ---------------------------------------------------------------------------------------------
# rows

def _loop_group(loops: list[SiteLoop], kind: str) -> list[Expr]:
  """num, prod, len and the 8-way position one-hot (kPosMixed when any) of the loops of ``kind``."""
  ls = [lp for lp in loops if lp.kind == kind]
  n, prod, ln = fl(0.0), fl(1.0), fl(0.0)
  for lp in ls:
    n = add(n, onehot(nontrivial(lp)))
    prod = mul(prod, lp.ext)
    ln = ifl(nontrivial(lp), lp.ext, ln)
  prod = ifl(gt(n, 0.0), prod, 0.0)
  some = gt(n, 0.0)
  return [slog(n), slog(prod), slog(ln), onehot(lnot(some))] + [fl(0.0)] * 6 + [onehot(some)]


def _row(sites: list[Site], j: int, loop_vars: set[str], alloc_at: dict[str, int], unroll_max: int = 0) -> list[Expr]:
  s = sites[j]
  k = s.kernel
  outer_prod = fl(1.0)
  for lp in s.loops: outer_prod = mul(outer_prod, lp.ext)
  counts = _count_ops(s.value)
  row = [slog(mul(outer_prod, float(c))) if c else fl(0.0) for c in counts]
  row += _loop_group(s.loops, "vectorize") + _loop_group(s.loops, "unroll")
  row += [fl(0.0)] * 3 + [fl(1.0)] + [fl(0.0)] * 7    # parallel: no CPU-style parallel loops on a GPU
  vthread = fl(1.0)
  for lp in s.loops:
    if lp.kind == "vthread": vthread = mul(vthread, lp.ext)
  dims = [k.grid[0], k.grid[1], k.grid[2], k.block[0], k.block[1], k.block[2]]
  row += [fl(1.0)] + [slog(num(d, "int32")) for d in dims] + [slog(vthread)]
  # buffers: the stored one first, then the others by name (structural, so symbolic == concrete)
  names = [s.buffer.name] + sorted(b for b in s.acc if b != s.buffer.name)
  for b in names[:MAX_N_BUFS]: row += buffer_features(sites, j, b, outer_prod, loop_vars)
  row += [fl(0.0)] * (N_BUF_FEATURES * (MAX_N_BUFS - min(len(names), MAX_N_BUFS)))
  row += intensity_curve(s, sum(counts[:7]))
  if s.buffer.scope != "global":   # allocated at the loops common to every store into it
    depth = alloc_at[s.buffer.name]
    aop = fl(1.0)
    for lp in s.loops[:depth]: aop = mul(aop, lp.ext)
    size = mul(s.buffer.size, s.buffer.element_bytes)
    row += [slog(size), slog(mul(s.buffer.size, aop)), slog(aop), slog(div(outer_prod, aop))]
  else:
    row += [fl(0.0)] * 4
  num_loops = fl(0.0)
  for lp in s.loops:
    num_loops = add(num_loops, 1.0 if lp.kind == "launch" else onehot(nontrivial(lp)))
  row += [slog(outer_prod), slog(num_loops), slog(fl(float(unroll_max)))]
  # tensor_mma (not Ansor's): the mma.sync a tensor-core store's Mma issues, over the loops around it (its scalar
  # body's multiply-adds are counted above as Ansor counts any: they run on the tensor pipe instead)
  mma = fl(0.0)
  if s.mma_loops is not None:
    mma = fl(1.0)
    for lp in s.loops[:s.mma_loops]: mma = mul(mma, lp.ext)
  row.append(slog(mma))
  assert len(row) == N_FEATURES, len(row)
  return row


def _alloc_depths(sites: list[Site]) -> dict[str, int]:
  """Per stored buffer, the number of loops common to every store into it (where it is allocated)."""
  keys: dict[str, list] = {}
  for s in sites:
    ks = [lp.key for lp in s.loops]
    prev = keys.get(s.buffer.name)
    if prev is None: keys[s.buffer.name] = ks
    else:
      d = 0
      while d < min(len(prev), len(ks)) and prev[d] == ks[d]: d += 1
      keys[s.buffer.name] = prev[:d]
  return {b: len(ks) for b, ks in keys.items()}


# ---------------------------------------------------------------------------------------------
# the public API

def extract_program_exprs(program: Program) -> list[list[Expr]]:
  """One row of N_FEATURES float64 Exprs per Store (and per cross-thread reduction) of every kernel, in
  program order. Constants on a concrete program; Exprs of the schedule variables on a symbolic one."""
  rows: list[list[Expr]] = []
  unroll_max = max((getattr(k, "auto_unroll_max_step", 0) for k in program.kernels), default=0)
  for k in program.kernels:
    sites = store_sites(k)
    loop_vars = kernel_loop_vars(k, sites)
    alloc_at = _alloc_depths(sites)
    for s in sites: add_regions(s, loop_vars)
    rows += [_row(sites, j, loop_vars, alloc_at, unroll_max) for j in range(len(sites))]
  return rows


def evaluate_features(rows: list[list[Expr]], values: dict[str, int] | None = None) -> np.ndarray:
  """Evaluate feature Exprs at schedule-variable ``values`` -> float32 (n_rows, N_FEATURES)."""
  out = np.zeros((len(rows), N_FEATURES), np.float64)
  for r, row in enumerate(rows):
    for c, e in enumerate(row): out[r, c] = e.arg if e.op is Op.CONST else float(evaluate(e, values or {}))
  return out.astype(np.float32)


def extract_features(program: Program, values: dict[str, int] | None = None) -> np.ndarray:
  """The feature matrix (n_rows, N_FEATURES) float32 of a program (``values`` for a symbolic one)."""
  return evaluate_features(extract_program_exprs(program), values)
