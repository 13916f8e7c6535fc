"""If, Loop and Scan replaced at import by the nodes of their subgraphs, copied (every shape in minicomp is
static, so control flow whose extent is known at compile time becomes straight-line code that fuses like any
other).

- ``If``: a constant condition (computed from constants and static shapes only) keeps its branch; a runtime one computes both
  branches and picks each output with ``Where`` (the branches must give the same shapes; ONNX ops have no side
  effects, so computing the branch not taken changes nothing but time).
- ``Loop``: unrolled when its trip count is a constant (the same way) and it cannot end early: the condition input absent or a
  constant true, and the body's condition output its condition input (or a constant true). Loop-carried values
  flow from one copy to the next; each scan output is the copies' values stacked on a new first axis.
- ``Scan`` (opset 9 on): unrolled over the static length of its scan inputs, with their axes and directions and
  the scan outputs' axes and directions.

Each copy's names get a prefix of the node and the iteration; names the body reads from the enclosing graph are
left alone; the body's own initializers become Constant nodes. Loops longer than ``MAX_UNROLLED_NODES`` in all
are refused, as is any other form (a data-dependent trip count, a loop that ends on a computed condition,
branches of different shapes under a runtime condition), each with an :class:`UnsupportedOpError` naming the node.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from minicomp.errors import UnsupportedOpError
from minicomp.frontend.dtypes import onnx_array

OPS = ("If", "Loop", "Scan")
MAX_UNROLLED_NODES = 20000
MAX_DEPTH = 4


def subgraphs(n: onnx.NodeProto) -> list[onnx.GraphProto]:
  """The subgraphs ``n``'s attributes hold (an If's branches, a Loop's or Scan's body)."""
  return [g for a in n.attribute for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs))]


def _refuse(n: onnx.NodeProto, why: str) -> UnsupportedOpError:
  return UnsupportedOpError(f"{n.op_type} node {n.name!r}: {why}", [(n.op_type, n.name)])


class _Copier:
  """Copies of subgraphs into the enclosing graph, each with its own names."""

  def __init__(self, node: onnx.NodeProto, k: int):
    self.prefix = f"{node.name or node.op_type}_{k}__"
    self.nodes: list[onnx.NodeProto] = []
    self.n = 0

  def const(self, value) -> str:
    name = f"{self.prefix}c{self.n}"
    self.n += 1
    self.nodes.append(helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(value))))
    return name

  def add(self, op: str, inputs: list[str], **attrs) -> str:
    name = f"{self.prefix}v{self.n}"
    self.n += 1
    self.nodes.append(helper.make_node(op, inputs, [name], **attrs))
    return name

  def copy(self, g: onnx.GraphProto, tag: str, inputs: list[str]) -> list[str]:
    """The nodes of ``g`` appended with its formal inputs bound to ``inputs``; returns the names of its outputs."""
    names = {f.name: a for f, a in zip(g.input, inputs)}
    pre = f"{self.prefix}{tag}_"
    for t in g.initializer:
      names[t.name] = pre + t.name
      self.nodes.append(helper.make_node("Constant", [], [pre + t.name], value=t))
    for n in g.node:
      for o in n.output:
        if o: names[o] = pre + o
    for n in g.node:
      c = onnx.NodeProto()
      c.CopyFrom(n)
      c.name = pre + (n.name or n.op_type)
      c.input[:] = [names.get(i, i) if i else "" for i in n.input]
      c.output[:] = [names.get(o, o) if o else "" for o in n.output]
      for sub in subgraphs(c): _rename_reads(sub, names)      # a nested subgraph reads this body's names too
      self.nodes.append(c)
    return [names.get(o.name, o.name) for o in g.output]


def _rename_reads(g: onnx.GraphProto, names: dict[str, str]) -> None:
  """Rename, in ``g`` and its subgraphs, the reads of names it does not define itself."""
  own = {i.name for i in g.input} | {t.name for t in g.initializer} | {o for n in g.node for o in n.output}
  outer = {k: v for k, v in names.items() if k not in own}
  for n in g.node:
    n.input[:] = [outer.get(i, i) for i in n.input]
    for sub in subgraphs(n): _rename_reads(sub, outer)
  for o in g.output:
    if o.name in outer: o.name = outer[o.name]


def _constants(m: onnx.ModelProto) -> dict[str, np.ndarray]:
  out = {t.name: onnx_array(t, f"initializer {t.name!r}") for t in m.graph.initializer}
  for n in m.graph.node:
    if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
      out[n.output[0]] = onnx_array(n.attribute[0].t, f"Constant node {n.name!r}: its value")
  return out


class _Folder:
  """The value of a name computed from constants and static shapes only (an If's condition ``Equal(Size(s), 4)``,
  a Loop's trip count), by ONNX's reference evaluator on the nodes that compute it; None when it depends on data."""

  def __init__(self, m: onnx.ModelProto, consts: dict, types: dict):
    self.m, self.consts, self.types = m, consts, types
    self.producer = {o: n for n in m.graph.node for o in n.output}
    self.order = {id(n): k for k, n in enumerate(m.graph.node)}

  def __call__(self, name: str):
    if name in self.consts: return self.consts[name]
    nodes, feeds, todo, seen = [], {}, [name], set()
    while todo:
      v = todo.pop()
      if v in seen or not v: continue
      seen.add(v)
      if v in self.consts:
        feeds[v] = self.consts[v]
        continue
      n = self.producer.get(v)
      if n is None or n.domain not in ("", "ai.onnx") or n.op_type in OPS: return None
      if n.op_type in ("Shape", "Size"):
        d = _dims(self.types[n.input[0]]) if n.input[0] in self.types else None
        if d is None: return None
        shape = self.types[n.input[0]].tensor_type
        feeds[n.input[0]] = np.zeros(d, helper.tensor_dtype_to_np_dtype(shape.elem_type))
      else:
        todo += list(n.input)
      nodes.append(n)
    from onnx.reference import ReferenceEvaluator
    nodes = sorted({id(n): n for n in nodes}.values(), key=lambda n: self.order[id(n)])   # the graph's order
    g = helper.make_graph(nodes, "fold", [], [helper.make_empty_tensor_value_info(name)])
    try:
      ev = ReferenceEvaluator(helper.make_model(g, opset_imports=list(self.m.opset_import)))
      return np.asarray(ev.run(None, feeds)[0])
    except Exception:   # noqa: BLE001 -- ONNX's evaluator refusing the chain: it stays a runtime value
      return None


def _if(node, k, consts, types) -> list[onnx.NodeProto]:
  c = _Copier(node, k)
  br = {a.name: a.g for a in node.attribute}
  cond = consts(node.input[0])
  if cond is not None:
    outs = c.copy(br["then_branch"] if bool(np.asarray(cond).reshape(-1)[0]) else br["else_branch"], "b", [])
    for o, v in zip(node.output, outs): c.nodes.append(helper.make_node("Identity", [v], [o]))
    return c.nodes
  then, other = c.copy(br["then_branch"], "then", []), c.copy(br["else_branch"], "else", [])
  for a, b_ in zip(br["then_branch"].output, br["else_branch"].output):
    sa, sb = _dims(a.type), _dims(b_.type)
    if sa is not None and sb is not None and sa != sb:
      raise _refuse(node, "a runtime condition with branches of different shapes "
                          f"({a.name} {sa}, {b_.name} {sb}) is not supported")
  for o, t, e in zip(node.output, then, other):
    c.nodes.append(helper.make_node("Where", [node.input[0], t, e], [o]))
  return c.nodes


def _dims(t: onnx.TypeProto):
  if not t.tensor_type.HasField("shape"): return None
  d = [x.dim_value if x.HasField("dim_value") else None for x in t.tensor_type.shape.dim]
  return None if any(v is None for v in d) else d


def _loop(node, k, consts, types) -> list[onnx.NodeProto]:
  body = next(a.g for a in node.attribute if a.name == "body")
  ins = list(node.input) + [""] * (2 - len(node.input))
  trips = consts(ins[0]) if ins[0] else None
  if trips is None:
    raise _refuse(node, "the trip count is not a constant (only loops of a constant trip count are unrolled)")
  trips = int(np.asarray(trips).reshape(-1)[0])
  cond = consts(ins[1]) if ins[1] else True
  if cond is None or not bool(np.asarray(cond).reshape(-1)[0]):
    raise _refuse(node, "the loop's condition is not a constant true")
  cond_in, cond_out = body.input[1].name, body.output[0].name
  producer = {o: n for n in body.node for o in n.output}
  p = producer.get(cond_out)
  passes = cond_out == cond_in or (p is not None and p.op_type == "Identity" and p.input[0] == cond_in)
  if p is not None and p.op_type == "Constant":
    passes = bool(onnx_array(p.attribute[0].t, f"Constant node {p.name!r}: its value").reshape(-1)[0])
  if not passes:
    raise _refuse(node, "the loop ends on a condition its body computes (only loops that run their whole "
                        "constant trip count are unrolled)")
  if trips * max(len(body.node), 1) > MAX_UNROLLED_NODES:
    raise _refuse(node, f"{trips} iterations of a {len(body.node)}-node body exceed {MAX_UNROLLED_NODES} unrolled nodes")
  n_carried = len(body.input) - 2
  n_scan = len(body.output) - 1 - n_carried
  if trips == 0 and n_scan:
    raise _refuse(node, "a loop of 0 iterations has empty scan outputs")
  c = _Copier(node, k)
  carried, scans = list(node.input[2:2 + n_carried]), [[] for _ in range(n_scan)]
  true = c.const(np.array(True))
  for i in range(trips):
    outs = c.copy(body, f"it{i}", [c.const(np.array(i, np.int64)), true, *carried])
    carried = outs[1:1 + n_carried]
    for s, v in zip(scans, outs[1 + n_carried:]): s.append(v)
  results = carried + [c.add("Concat", [c.add("Unsqueeze", [v, c.const(np.array([0], np.int64))]) for v in s], axis=0)
                       for s in scans]
  for o, v in zip(node.output, results):
    if o: c.nodes.append(helper.make_node("Identity", [v], [o]))
  return c.nodes


def _scan(node, k, consts, types) -> list[onnx.NodeProto]:
  attrs = {a.name: a for a in node.attribute}
  body = attrs["body"].g
  m = attrs["num_scan_inputs"].i
  n_state = len(node.input) - m
  ints = lambda name, n: list(attrs[name].ints) if name in attrs else [0] * n
  in_axes, in_dirs = ints("scan_input_axes", m), ints("scan_input_directions", m)
  n_out = len(body.output) - n_state
  out_axes, out_dirs = ints("scan_output_axes", n_out), ints("scan_output_directions", n_out)
  xs = node.input[n_state:]
  lengths = set()
  for x, ax in zip(xs, in_axes):
    d = _dims(types[x]) if x in types else None
    if d is None: raise _refuse(node, f"scan input {x!r} needs a static shape")
    lengths.add(d[ax % len(d)])
  if len(lengths) != 1: raise _refuse(node, f"scan inputs of different lengths {sorted(lengths)}")
  T = lengths.pop()
  if T * max(len(body.node), 1) > MAX_UNROLLED_NODES:
    raise _refuse(node, f"{T} iterations of a {len(body.node)}-node body exceed {MAX_UNROLLED_NODES} unrolled nodes")
  if T == 0 and n_out: raise _refuse(node, "a scan of length 0 has empty scan outputs")
  c = _Copier(node, k)
  state, outs = list(node.input[:n_state]), [[] for _ in range(n_out)]
  for t in range(T):
    slices = []
    for x, ax, rev in zip(xs, in_axes, in_dirs):
      rank = len(_dims(types[x]))
      slices.append(c.add("Gather", [x, c.const(np.array(T - 1 - t if rev else t, np.int64))], axis=ax % rank))
    res = c.copy(body, f"it{t}", state + slices)
    state = res[:n_state]
    for o, v in zip(outs, res[n_state:]): o.append(v)
  results = list(state)
  for vs, ax, rev, formal in zip(outs, out_axes, out_dirs, body.output[n_state:]):
    rank = len(_dims(formal.type) or []) + 1 if _dims(formal.type) is not None else None
    if rank is None and ax < 0: raise _refuse(node, "a negative scan output axis needs a typed body output")
    a = ax % rank if rank else ax
    vs = vs[::-1] if rev else vs
    results.append(c.add("Concat", [c.add("Unsqueeze", [v, c.const(np.array([a], np.int64))]) for v in vs], axis=a))
  for o, v in zip(node.output, results):
    if o: c.nodes.append(helper.make_node("Identity", [v], [o]))
  return c.nodes


def unroll_control_flow(m: onnx.ModelProto, infer) -> onnx.ModelProto:
  """``m`` with every If / Loop / Scan of the default domain replaced by its subgraphs' nodes (module docstring);
  ``infer`` (shape inference) runs after each level, since a Scan's length is a shape."""
  for _ in range(MAX_DEPTH):
    if not any(n.op_type in OPS and n.domain in ("", "ai.onnx") for n in m.graph.node): return m
    g = m.graph
    types = {vi.name: vi.type for vi in list(g.input) + list(g.value_info) + list(g.output)}
    for t in g.initializer: types[t.name] = helper.make_tensor_type_proto(t.data_type, list(t.dims))
    consts = _Folder(m, _constants(m), types)
    nodes = []
    for k, n in enumerate(g.node):
      if n.op_type not in OPS or n.domain not in ("", "ai.onnx"):
        nodes.append(n)
        continue
      nodes += {"If": _if, "Loop": _loop, "Scan": _scan}[n.op_type](n, k, consts, types)
    r = onnx.ModelProto()
    r.CopyFrom(m)
    del r.graph.node[:]
    r.graph.node.extend(nodes)
    m = infer(r)
  if any(n.op_type in OPS for n in m.graph.node):
    raise UnsupportedOpError(f"control flow nested deeper than {MAX_DEPTH} levels is not supported")
  return m
