"""Linear algebra: Gemm, MatMul (numpy semantics), one- and two-operand Einsum, Trilu.

MatMul / Gemm / Einsum are one reduction stage ``sum(A[..k..] * B[..k..], axis=k)`` (the
data-reuse anchor of a kernel) plus, for Gemm, an elementwise epilogue for alpha / beta * C
that the default schedule computes in the same kernel.
"""
from __future__ import annotations

import numpy as np

import minicomp.ir.te as te
from minicomp.errors import ShapeError
from minicomp.graph.ops._util import broadcast_shape, load, operand
from minicomp.graph.registry import op
from minicomp.ir.expr import const, select


def _where(ctx) -> str:
  return f"{ctx.node.op_type} node {ctx.node.name!r}"


def _same_dtype(ctx, a, b) -> None:
  if a.dtype != b.dtype: raise ShapeError(f"{_where(ctx)}: operand dtypes differ ({a.dtype} vs {b.dtype})")


def _batch_index(shape, batch, idx):
  """Indices into the leading (batch) dims ``shape`` of an operand for output batch indices ``idx``."""
  nb, r = len(batch), len(shape)
  return tuple(0 if shape[d] == 1 and batch[nb - r + d] != 1 else idx[nb - r + d] for d in range(r))


@op("MatMul", kind="data_reuse", since=13)
def matmul(ctx, a, b):
  """numpy.matmul: a 1-D first operand is a row (its M dim is dropped from the output), a 1-D
  second operand a column (its N dim is dropped); leading batch dims broadcast."""
  return [matmul_sum(ctx, ctx.tensor(a), ctx.tensor(b))]


def matmul_sum(ctx, A, B):
  """numpy.matmul of the tensors ``A`` and ``B`` in their (common) element type."""
  _same_dtype(ctx, A, B)
  if A.ndim == 0 or B.ndim == 0: raise ShapeError(f"{_where(ctx)}: MatMul operands must have rank >= 1")
  a_shape = (1,) + A.shape if A.ndim == 1 else A.shape
  b_shape = B.shape + (1,) if B.ndim == 1 else B.shape
  (M, K), (K2, N) = a_shape[-2:], b_shape[-2:]
  if K != K2: raise ShapeError(f"{_where(ctx)}: inner dims differ: {A.shape} @ {B.shape}")
  batch = broadcast_shape(a_shape[:-2], b_shape[:-2], where=_where(ctx))
  nb = len(batch)
  out_shape = batch + ((M,) if A.ndim > 1 else ()) + ((N,) if B.ndim > 1 else ())
  k = ctx.reduce_axis(K, "k")

  def body(*i):
    rest = i[nb:]
    ia = _batch_index(A.shape[:-2], batch, i) + ((rest[0],) if A.ndim > 1 else ()) + (k,)
    ib = _batch_index(B.shape[:-2], batch, i) + (k,) + ((rest[-1],) if B.ndim > 1 else ())
    return te.sum(A[ia] * B[ib], axis=k)
  return ctx.compute(out_shape, body)


@op("Gemm", kind="data_reuse", since=13)
def gemm(ctx, a, b, c=None):
  """Y = alpha * A' @ B' + beta * C with A' = A^T if transA, B' = B^T if transB; C (optional)
  broadcasts unidirectionally to (M, N); beta == 0 drops C."""
  alpha, beta = float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 1.0))
  ta, tb = int(ctx.flag("transA", 0)), int(ctx.flag("transB", 0))
  A, B = ctx.tensor(a), ctx.tensor(b)
  _same_dtype(ctx, A, B)
  if A.ndim != 2 or B.ndim != 2: raise ShapeError(f"{_where(ctx)}: A and B must be 2-D, got {A.shape}, {B.shape}")
  M, K = A.shape[::-1] if ta else A.shape
  K2, N = B.shape[::-1] if tb else B.shape
  if K != K2:
    raise ShapeError(f"{_where(ctx)}: inner dims differ: A {A.shape} (transA={ta}), B {B.shape} (transB={tb})")
  k = ctx.reduce_axis(K, "k")
  mm = ctx.compute((M, N), lambda i, j: te.sum((A[k, i] if ta else A[i, k]) * (B[j, k] if tb else B[k, j]), axis=k),
                   suffix="mm" if (alpha != 1.0 or (c is not None and beta != 0.0)) else "")
  if c is not None and beta != 0.0:
    if len(c.shape) > 2 or broadcast_shape(c.shape, (M, N), where=_where(ctx)) != (M, N):
      raise ShapeError(f"{_where(ctx)}: C of shape {tuple(c.shape)} does not broadcast to (M, N) = {(M, N)}")
    C = operand(ctx, c)
    _same_dtype(ctx, A, C)
    return [ctx.compute((M, N), lambda i, j: mm[i, j] * alpha + load(C, (M, N), (i, j)) * beta)]
  if alpha != 1.0: return [ctx.compute((M, N), lambda i, j: mm[i, j] * alpha)]
  return [mm]


def _parse_einsum(ctx, eq: str, n_inputs: int):
  eq = eq.replace(" ", "")
  lhs, out = eq.split("->") if "->" in eq else (eq, None)
  terms = lhs.split(",")
  if out is None:   # implicit output: the indices that appear once, in alphabetical order (as numpy)
    out = "".join(sorted(c for c in set(lhs) if c.isalpha() and lhs.count(c) == 1))
  if len(terms) not in (1, 2) or n_inputs != len(terms):
    raise ctx.error(f"equation {eq!r}: only one- and two-operand forms are supported")
  for t in terms + [out]:
    if not t.isalpha() and t != "":
      raise ctx.error(f"equation {eq!r}: only letters are supported (no ellipsis '...')")
    if len(set(t)) != len(t):
      raise ctx.error(f"equation {eq!r}: repeated index in one term ({t!r}: diagonals / traces) is not supported")
  if set(out) - set("".join(terms)):
    raise ShapeError(f"{_where(ctx)}: equation {eq!r}: output index not in any operand")
  return terms, out


@op("Einsum", kind="data_reuse", since=12)
def einsum(ctx, *xs):
  """One- or two-operand Einsum ("bhid,bhjd->bhij", "ij->ji", "ij->i", "i,i"); indices absent from the
  output are summed; without "->" the output is the indices that appear once, sorted. Ellipsis and
  repeated indices within a term (diagonals, traces) -> error."""
  terms, out = _parse_einsum(ctx, str(ctx.attr("equation")), len(xs))
  ops = [ctx.tensor(x) for x in xs]
  if len(ops) == 2: _same_dtype(ctx, *ops)
  sizes: dict[str, int] = {}
  for t, x in zip(terms, ops):
    if len(t) != x.ndim:
      raise ShapeError(f"{_where(ctx)}: term {t!r} has {len(t)} indices, operand has shape {x.shape}")
    for c, d in zip(t, x.shape):
      if sizes.setdefault(c, d) != d:
        raise ShapeError(f"{_where(ctx)}: index {c!r} has sizes {sizes[c]} and {d}")
  red = [c for c in dict.fromkeys("".join(terms)) if c not in out]
  raxes = {c: ctx.reduce_axis(sizes[c], f"r_{c}") for c in red}

  def body(*i):
    env = dict(zip(out, i)) | raxes
    prod = None
    for t, x in zip(terms, ops):
      v = x[tuple(env[c] for c in t)]
      prod = v if prod is None else prod * v
    return te.sum(prod, axis=[raxes[c] for c in red]) if red else prod
  return [ctx.compute(tuple(sizes[c] for c in out), body)]


@op("Trilu", kind="elementwise", since=14)
def trilu(ctx, x, k=None):
  """Keep the upper (upper=1: j - i >= k) or lower (j - i <= k) triangle of the last two dims;
  ``k`` (0-d int64 input) must be a constant."""
  if isinstance(k, te.Tensor): raise ctx.error("k must be a constant initializer")
  kk = int(np.asarray(k).reshape(-1)[0]) if k is not None else 0
  upper = int(ctx.flag("upper", 1))
  X = ctx.tensor(x)
  if X.ndim < 2: raise ShapeError(f"{_where(ctx)}: input must have rank >= 2, got {X.shape}")
  zero = const(0, X.dtype)

  def body(*i):
    d = i[-1] - i[-2]
    return select(d >= kk if upper else d <= kk, X[i], zero)
  return [ctx.compute(X.shape, body)]

