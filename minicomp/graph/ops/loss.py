"""Loss ops: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (inference: the loss value, no gradient).

Both pick, for every sample position ``(n, d1, ..., dk)``, the class its target names: ``loss = -input[n,
target, d...] * weight[target]`` (weight 1 without a ``weight`` input), 0 where the target is
``ignore_index``; then ``reduction`` "none" keeps that tensor, "sum" adds it up and "mean" divides the sum by
the sum of the weights used (with ``weight`` or ``ignore_index``) or by the number of positions (without
either), as ONNX's reference does. A target outside ``[0, C)`` that is not ``ignore_index`` is clamped into
range (ONNX leaves it undefined; this never reads out of bounds). SoftmaxCrossEntropyLoss is LogSoftmax over
the class dim followed by the same; its optional second output is that log-probability tensor.
"""
from __future__ import annotations

import math

import minicomp.ir.te as te
from minicomp.errors import ShapeError
from minicomp.graph.ops._util import as_stat, back_to, stat_type
from minicomp.graph.ops.reduce import _softmax
from minicomp.graph.ops.shape_gather import runtime_index
from minicomp.graph.registry import op
from minicomp.ir.expr import cast, const, eq, select
from minicomp.ir.ops import FLOAT_DTYPES
from minicomp.ir.te import Tensor


def _where(ctx) -> str: return f"{ctx.node.op_type} node {ctx.node.name!r}"


def _nll(ctx, logp: Tensor, target, weight, out_dtype: str) -> Tensor:
  """The loss of ``logp`` (N, C, d...: log-probabilities, or any scores) against ``target`` (N, d...)."""
  if logp.ndim < 2: raise ShapeError(f"{_where(ctx)}: input must be at least 2-D (N, C, ...), got {list(logp.shape)}")
  N, C, rest = logp.shape[0], logp.shape[1], tuple(logp.shape[2:])
  if tuple(target.shape) != (N,) + rest:
    raise ShapeError(f"{_where(ctx)}: target shape {list(target.shape)} is not input's {[N, *rest]} without the class dim")
  t = ctx.tensor(target)
  if t.dtype not in ("int32", "int64"): raise ctx.error(f"target element type {t.dtype} is not supported (int32, int64)")
  if weight is not None and tuple(weight.shape) != (C,):
    raise ShapeError(f"{_where(ctx)}: weight shape {list(weight.shape)} is not [{C}]")
  reduction = ctx.attr("reduction", "mean")
  if reduction not in ("none", "sum", "mean"): raise ctx.error(f"reduction={reduction!r} is not one of none, sum, mean")
  ignore = ctx.attr("ignore_index", None)
  st = stat_type(logp.dtype)
  W = ctx.tensor(weight) if weight is not None else None
  shape = (N,) + rest

  def w_of(i):          # the weight a position counts with: 0 where ignored
    cls = runtime_index(t[i], C)
    w = as_stat(W[(cls,)]) if W is not None else const(1.0, st)
    return select(eq(t[i], int(ignore)), const(0.0, st), w) if ignore is not None else w

  def loss_of(i):
    cls = runtime_index(t[i], C)
    return -as_stat(logp[(i[0], cls) + tuple(i[1:])]) * w_of(i)
  if reduction == "none":
    return ctx.compute(shape, lambda *i: back_to(loss_of(i), out_dtype))
  axes = [ctx.reduce_axis(n, f"r{d}") for d, n in enumerate(shape)]
  total = ctx.compute((), lambda: te.sum(loss_of(tuple(axes)), axis=axes), "sum")
  if reduction == "sum": return ctx.compute((), lambda: back_to(total[()], out_dtype))
  if W is None and ignore is None:
    return ctx.compute((), lambda: back_to(total[()] * (1.0 / math.prod(shape)), out_dtype))
  axes2 = [ctx.reduce_axis(n, f"w{d}") for d, n in enumerate(shape)]
  wsum = ctx.compute((), lambda: te.sum(w_of(tuple(axes2)), axis=axes2), "wsum")
  return ctx.compute((), lambda: back_to(total[()] / wsum[()], out_dtype))


@op("NegativeLogLikelihoodLoss", kind="reduction", since=13)
def nll_loss(ctx, x, target, weight=None):
  """ONNX NegativeLogLikelihoodLoss (module docstring): ``x`` holds log-probabilities (N, C, d1, ...)."""
  x = ctx.tensor(x)
  if x.dtype not in FLOAT_DTYPES: raise ctx.error(f"input dtype {x.dtype} is not supported")
  return [_nll(ctx, x, target, weight, x.dtype)]


@op("SoftmaxCrossEntropyLoss", kind="reduction", since=13)
def softmax_cross_entropy_loss(ctx, scores, labels, weights=None):
  """ONNX SoftmaxCrossEntropyLoss: LogSoftmax of ``scores`` over the class dim (1), then the NLL loss; the
  optional second output is the log-probabilities, in the scores' type."""
  x = ctx.tensor(scores)
  if x.dtype not in FLOAT_DTYPES: raise ctx.error(f"input dtype {x.dtype} is not supported")
  if x.ndim < 2: raise ShapeError(f"{_where(ctx)}: scores must be at least 2-D (N, C, ...), got {list(x.shape)}")
  logp = _softmax(ctx, x, True, ax=1, keep_stat=True)[0]
  out = [_nll(ctx, logp, labels, weights, x.dtype)]
  if len(ctx.node.outputs) > 1:
    out.append(logp if logp.dtype == x.dtype else ctx.compute(x.shape, lambda *i: cast(logp[i], x.dtype), "logprob"))
  return out
