"""Elementwise ops: unary math, activations, binary arithmetic with broadcasting, comparisons, logic."""
from __future__ import annotations

import minicomp.ir.te as te
from minicomp.graph.ops._util import broadcast_shape, load, operand
from minicomp.graph.registry import op
from minicomp.ir.expr import binary, select
from minicomp.ir.ops import Op


def _binary(ctx, a, b, fn):
  shape = broadcast_shape(a.shape, b.shape, where=f"{ctx.node.op_type} node {ctx.node.name!r}")
  A, B = operand(ctx, a), operand(ctx, b)
  return [ctx.compute(shape, lambda *i: fn(load(A, shape, i), load(B, shape, i)))]


@op("Add", kind="broadcast", since=7)
def add(ctx, a, b): return _binary(ctx, a, b, lambda x, y: x + y)


@op("Relu", kind="elementwise", since=6)
def relu(ctx, x):
  return [ctx.compute(x.shape, lambda *i: te.max(x[i], 0.0 if x.dtype.startswith("float") else 0))]
