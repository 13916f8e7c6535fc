"""Partition a graph into fused subgraphs (one kernel each), the way Relay / Ansor fuse.

Rules, in terms of the op kinds of the registry:

- a ``view`` op (Reshape, Flatten, Squeeze, ...) on a runtime value is no kernel: the
  compiled model re-labels the buffer;
- ``data_reuse`` (conv, matmul), ``reduction`` and ``opaque`` ops start a group: the anchor;
- an ``elementwise`` / ``broadcast`` op joins the group of its runtime input when that input is
  produced in a group and read by nothing else (epilogue fusion: bias, folded BN, activation,
  residual add, ...), as long as the group has no other consumer of that value; it also joins
  a group with no anchor yet (elementwise chains become one kernel), unless its input is read elsewhere too and
  its output is wider (a DequantizeLinear of an int8 value another kernel reads: that value is stored anyway,
  and each reader dequantizes it in its loads instead of reading a float32 copy);
- an ``injective`` op (pad, transpose, slice, ...) or elementwise op whose only consumer is in
  one group is pulled into that group as a prologue (inlined into the reads); so is a chain of them (a group
  without an anchor) whose only consumer is one node of a group without an anchor (an LSTM's
  ``Slice+Sigmoid`` gates into the step's cell update), or a chain of injective ops alone into any group (K
  transposed twice into its ``Q @ K^T``: only indices to inline; or with one multiply by a constant scalar on the
  way, as torch.onnx exports scaled dot-product attention's q and k), also through a view read by one node of a
  group (the view joins too: attention's heads transposed back and reshaped into the output projection);
- then a group of elementwise / broadcast ops only that alone reads what a ``data_reuse`` or ``reduction`` group
  makes (its other inputs ready when that group runs) joins it as its epilogue: a diamond, GELU or SiLU reading
  the product twice, whose nodes could not join one by one;
- everything else starts its own group;
- a group takes no node past ``MAX_GROUP_NODES``: its kernel inlines every node into one expression,
  whose depth and CUDA text grow with them (3,000 chained activations made one kernel no compiler pass
  could walk), so a longer chain continues in the next kernel.

A group's outputs are the values it produces that are read outside it or are graph outputs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from minicomp.frontend.graph import Graph, Node
from minicomp.graph.registry import lookup
from minicomp.ir.ops import DTYPE_BYTES

ANCHORS = ("data_reuse", "reduction", "opaque")
MAX_GROUP_NODES = 64
EPILOGUE = ("elementwise", "broadcast")


@dataclass
class Group:
  nodes: list[Node] = field(default_factory=list)
  anchor: Node | None = None
  outputs: list[str] = field(default_factory=list)
  inputs: list[str] = field(default_factory=list)


@dataclass
class Partition:
  steps: list          # Group or ("view", node) in execution order
  groups: list[Group]


def _kind(g: Graph, n: Node) -> str:
  return lookup(n.op_type, g.opset).kind


def _widens(g: Graph, n: Node, i: str) -> bool:
  """Whether ``n``'s output takes more bytes than its input ``i`` (a DequantizeLinear of int8, a Cast to a wider
  type): joined to the group making ``i``, it would be stored beside ``i`` at more bytes than ``i`` itself."""
  vi, vo = g.values.get(i), g.values.get(n.outputs[0]) if n.outputs else None
  if vi is None or vo is None: return False
  return math.prod(vo.shape) * DTYPE_BYTES.get(vo.dtype, 4) > math.prod(vi.shape) * DTYPE_BYTES.get(vi.dtype, 4)


def scales(g: Graph, n: Node) -> bool:
  """Whether ``n`` multiplies or divides one runtime value by a constant scalar: scaled dot-product attention as
  torch.onnx exports it multiplies q and k (transposed) by sqrt(scale) each before ``q @ k^T``."""
  if n.op_type not in ("Mul", "Div") or n.domain not in ("", "ai.onnx") or len(n.inputs) != 2: return False
  a, b = (g.values.get(i) for i in n.inputs)
  if a is None or b is None or a.is_const == b.is_const: return False
  c = b if b.is_const else a
  return c.const.size == 1 and (n.op_type == "Mul" or c is b) and c.dtype == (a if c is b else b).dtype


def moves_data(g: Graph, nodes: list[Node]) -> bool:
  """Whether a chain of ``nodes`` only moves data (injective ops and views) but for at most one :func:`scales`:
  inlined into a matmul's or conv's reads it is index math and at most one multiply per element fetched."""
  scaled = [n for n in nodes if _kind(g, n) not in ("injective", "view")]
  return len(scaled) <= 1 and all(scales(g, n) for n in scaled)


def partition(g: Graph) -> Partition:
  runtime = lambda v: bool(v) and not (v in g.values and g.values[v].is_const)
  consumers: dict[str, list[Node]] = {}
  for n in g.nodes:
    for i in n.inputs:
      if runtime(i): consumers.setdefault(i, []).append(n)
  group_of: dict[str, Group] = {}      # node name -> group
  views: set[str] = set()
  order: list = []
  produced_by: dict[str, Node] = {o: n for n in g.nodes for o in n.outputs}

  step_of: dict[str, int] = {}        # runtime value -> index in ``order`` of the step producing it
  for n in g.nodes:
    kind = _kind(g, n)
    rt_in = [i for i in n.inputs if runtime(i)]
    if kind == "view" and len(rt_in) == 1 and len([o for o in n.outputs if o]) == 1:
      views.add(n.name); order.append(("view", n))
      for o in n.outputs: step_of[o] = len(order) - 1
      continue
    target = None
    if kind in EPILOGUE:
      for i in rt_in:
        p = produced_by.get(i)
        if p is None or p.name not in group_of: continue
        grp = group_of[p.name]
        at = order.index(grp)
        single = len(consumers.get(i, [])) == 1 and i not in g.outputs
        ready = all(step_of.get(j, -1) <= at for j in rt_in)   # every other input exists when grp runs
        # a pure elementwise group takes any pointwise reader (diamonds fuse; a value read outside
        # becomes one more output); an anchored group only takes the single reader of its value
        if len(grp.nodes) >= MAX_GROUP_NODES: continue
        if not single and _widens(g, n, i): continue   # its input is stored anyway: readers widen it themselves
        if ready and (grp.anchor is None or (single and _kind(g, grp.anchor) in ("data_reuse", "reduction"))):
          target = grp
          break
    if target is None:
      target = Group()
      order.append(target)
    target.nodes.append(n)
    for o in n.outputs: step_of[o] = order.index(target)
    if kind in ANCHORS:
      if target.anchor is None: target.anchor = n
    group_of[n.name] = target

  # prologues: pull injective / elementwise producers into the one group that reads them
  changed = True
  while changed:
    changed = False
    for grp in [x for x in order if isinstance(x, Group)]:
      if grp.anchor is not None: continue
      names = {n.name for n in grp.nodes}
      outs = [o for n in grp.nodes for o in n.outputs if o]
      cons = {c.name for o in outs for c in consumers.get(o, []) if c.name not in names}
      if any(o in g.outputs for o in outs) or len(cons) != 1: continue
      c = next(iter(cons))
      moves = moves_data(g, grp.nodes)   # (views pulled in before)
      via = None    # a view it feeds, read by one node of a group: data movement goes through it (attention's
      if c in views and moves:      # heads transposed back, then reshaped for the output projection)
        via = next(n for n in g.nodes if n.name == c)
        vouts = [o for o in via.outputs if o]
        vcons = [x for o in vouts for x in consumers.get(o, [])]
        if any(o in g.outputs for o in vouts) or len(vcons) != 1: continue
        c = vcons[0].name
      if c not in group_of or c in views: continue
      dst = group_of[c]
      # one node into any group (its reads inline it); a chain (an LSTM gate: Slice+Sigmoid) only into a group
      # without an anchor, whose reads are one per element -- unless it only moves data (attention's K
      # transposed twice: an index to inline, nothing to recompute), or moves it and scales it once (moves_data)
      if (len(grp.nodes) > 1 or via) and dst.anchor is not None and not moves: continue
      pulled = grp.nodes + ([via] if via else [])
      if dst is grp or len(dst.nodes) + len(pulled) > MAX_GROUP_NODES: continue
      dst.nodes[:0] = pulled
      for n in pulled: group_of[n.name] = dst
      order.remove(grp)
      if via:
        views.discard(via.name)
        order = [x for x in order if not (isinstance(x, tuple) and x[1] is via)]
      changed = True
      break

  # diamond epilogues: a pointwise group that alone reads what an anchored group makes joins it (GELU's
  # x * (1 + erf(x / sqrt 2)) / 2 or SiLU's x * sigmoid(x) after a MatMul read x twice, so no node of theirs could)
  for grp in [x for x in order if isinstance(x, Group) and x.anchor is None]:
    if any(_kind(g, n) not in EPILOGUE for n in grp.nodes): continue
    names = {n.name for n in grp.nodes}
    ins = [i for n in grp.nodes for i in n.inputs
           if runtime(i) and not (i in produced_by and produced_by[i].name in names)]
    srcs = {id(group_of[produced_by[i].name]): group_of[produced_by[i].name] for i in ins
            if i in produced_by and produced_by[i].name in group_of}
    anchored = [s for s in srcs.values() if s.anchor is not None]
    if len(anchored) != 1 or _kind(g, anchored[0].anchor) not in ("data_reuse", "reduction"): continue
    dst = anchored[0]
    inside = names | {n.name for n in dst.nodes}
    from_dst = [i for i in ins if i in produced_by and group_of.get(produced_by[i].name) is dst]
    if any(i in g.outputs or any(c.name not in inside for c in consumers.get(i, [])) for i in from_dst): continue
    at = order.index(dst)
    if any(step_of.get(i, -1) > at for i in ins if i not in from_dst): continue   # the rest exists when dst runs
    if len(dst.nodes) + len(grp.nodes) > MAX_GROUP_NODES: continue
    dst.nodes += grp.nodes
    for n in grp.nodes: group_of[n.name] = dst
    order.remove(grp)
    step_of = {o: k for k, x in enumerate(order) for n in (x.nodes if isinstance(x, Group) else [x[1]])
               for o in n.outputs}

  groups = [x for x in order if isinstance(x, Group)]
  for grp in groups:
    names = {n.name for n in grp.nodes}
    grp.nodes.sort(key=lambda n: g.nodes.index(n))
    made = [o for n in grp.nodes for o in n.outputs if o]
    grp.outputs = [o for o in made if o in g.outputs or any(c.name not in names for c in consumers.get(o, []))]
    seen = []
    for n in grp.nodes:
      for i in n.inputs:
        if runtime(i) and i not in made and i not in seen: seen.append(i)
    grp.inputs = seen
  return Partition(order, groups)
