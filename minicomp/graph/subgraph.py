"""A set of graph nodes -> tensor expressions, by calling each node's op function in order."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from minicomp.errors import ModelError, ShapeError
from minicomp.frontend.graph import Graph, Node
from minicomp.graph.registry import OpCtx, lookup
from minicomp.ir import te
from minicomp.ir.te import Tensor


@dataclass
class SubgraphTE:
  """The tensor expressions of some nodes: placeholders for the values entering them, outputs by value name."""
  inputs: dict[str, Tensor]                     # graph value name -> placeholder
  outputs: dict[str, Tensor | np.ndarray]       # graph value name -> tensor (or a compile-time constant)
  consts: dict[str, np.ndarray] = field(default_factory=dict)   # constant placeholder name -> array
  kinds: dict[str, str] = field(default_factory=dict)           # node name -> op kind


def _stored(ctx: OpCtx, const: np.ndarray, layout: tuple[int, ...]) -> Tensor:
  """A constant stored in the axis order ``layout`` (graph/layout.py): a constant placeholder holding
  ``np.transpose(const, layout)`` and, read by the op, a stage in ONNX's order over it (inlined by every schedule)."""
  stored = ctx.const(np.ascontiguousarray(np.transpose(const, layout)))
  return ctx.compute(const.shape, lambda *i: stored[tuple(i[d] for d in layout)], "layout")


def nodes_to_te(g: Graph, nodes: Sequence[Node], outputs: Sequence[str] | None = None) -> SubgraphTE:
  """Build TE for ``nodes`` (topologically ordered). Values produced outside become placeholders,
  constants become constant placeholders (or stay arrays for ops that read their values)."""
  env: dict[str, Tensor | np.ndarray] = {}
  inputs: dict[str, Tensor] = {}
  consts: dict[str, np.ndarray] = {}
  names: set[str] = set()
  kinds: dict[str, str] = {}
  produced = {o for n in nodes for o in n.outputs}
  for n in nodes:
    args = []
    ctx = OpCtx(n, g.opset, consts, names)
    for i in n.inputs:
      if not i: args.append(None); continue
      if i in env: args.append(env[i]); continue
      v = g.values.get(i)
      if v is not None and v.is_const and v.layout is not None:
        env[i] = _stored(ctx, v.const, v.layout)
        args.append(env[i]); continue
      if v is not None and v.is_const: args.append(v.const); continue
      if i in produced: raise ModelError(f"node {n.name!r} reads {g.describe(i)} before it is produced")
      if v is None or v.shape is None:
        raise ShapeError(f"no static shape for value {g.describe(i)} entering node {n.name!r}")
      ph = te.placeholder(v.shape, v.dtype, name=_unique("x", names))   # the model's name stays in the graph
      inputs[i] = ph
      env[i] = ph
      args.append(ph)
    d = lookup(n.op_type, g.opset)
    if d is None: raise ModelError(f"no lowering for {n.op_type} (node {n.name!r}) at opset {g.opset}")
    outs = d.fn(ctx, *args)
    if not isinstance(outs, (list, tuple)): outs = [outs]
    n_real = len([o for o in n.outputs if o])
    if len(outs) < n_real:
      raise ModelError(f"{n.op_type} node {n.name!r}: the lowering produced {len(outs)} outputs, the node has {n_real}")
    for name, val in zip(n.outputs, outs):
      if not name: continue
      env[name] = val
      expect = g.values.get(name)
      got = tuple(val.shape)
      if expect is not None and expect.shape is not None and tuple(expect.shape) != got:
        raise ShapeError(f"{n.op_type} node {n.name!r}: output {g.describe(name)} has shape {got}, "
                         f"ONNX shape inference says {tuple(expect.shape)}")
    kinds[n.name] = d.kind
  want = outputs if outputs is not None else [o for n in nodes for o in n.outputs if o]
  return SubgraphTE(inputs, {o: env[o] for o in want}, consts, kinds)


def _unique(base: str, taken: set[str]) -> str:
  name, k = base, 1
  while name in taken: name, k = f"{base}_{k}", k + 1
  taken.add(name)
  return name
