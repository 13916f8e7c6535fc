"""ONNX ops defined as functions of other ops, expanded into their definitions at import.

ONNX defines some ops by a function body: a subgraph of simpler ops that *is* the op's meaning (``Attention``,
whose body ONNX builds for each node from its attributes and input types, is one). A node whose op has no
lowering in minicomp but such a body, all of whose ops minicomp lowers, is replaced by its body (ONNX's own
inliner renames what is inside), so the op is computed exactly as ONNX specifies it, fused and scheduled like
any other ops. A body with an op minicomp cannot lower is not used: the unsupported-op error then names the
node's own op. Bodies of bodies are expanded the same way, up to ``MAX_DEPTH`` levels.
"""
from __future__ import annotations

import onnx
from onnx import inliner

from minicomp.errors import ModelError, UnsupportedOpError
from minicomp.frontend import recurrent
from minicomp.frontend.control_flow import OPS as CONTROL_FLOW, unroll_control_flow

DOMAIN = "minicomp.expanded"     # where the per-node function copies live until they are inlined
MAX_DEPTH = 3


# (op, attribute): the 0 / 1 flags of ops expanded into their ONNX function body, which computes with the value (the
# fuzzer's periodic=-1 window was the window of size - 2, its is_causal=2 attention not causal: onnxruntime and
# ONNX's own ops read any nonzero as 1)
FLAGS = {("BlackmanWindow", "periodic"), ("HammingWindow", "periodic"), ("HannWindow", "periodic"),
         ("Attention", "is_causal")}


def _lowered(op_type: str, domain: str, opset: int) -> bool:
  from minicomp.graph.registry import lookup
  return domain in ("", "ai.onnx") and lookup(op_type, opset) is not None


def _body(node: onnx.NodeProto, types: dict[str, onnx.TypeProto], opset: int) -> onnx.FunctionProto | None:
  """ONNX's function body for ``node`` at ``opset`` (context-dependent ones built for its attributes and input
  types), or None when its op has none, an input's type is unknown, or ONNX cannot build it. The recurrent ops,
  which ONNX defines by equations only, get minicomp's body (``frontend.recurrent``)."""
  if node.domain not in ("", "ai.onnx"): return None
  for a in node.attribute:     # a flag the body computes with (a window of size - 1 + periodic): 0 or 1 only
    if (node.op_type, a.name) in FLAGS and a.type == onnx.AttributeProto.INT and a.i not in (0, 1):
      raise ModelError(f"{node.op_type} node {node.name!r}: attribute {a.name} is {a.i}; it must be 0 or 1")
  if node.op_type in recurrent.GATES: return recurrent.recurrent_body(node, types, opset)
  if node.op_type == "DynamicQuantizeLinear": return _dynamic_quantize_linear(opset)
  try:
    schema = onnx.defs.get_schema(node.op_type, opset, node.domain)
  except onnx.defs.SchemaError:
    return None
  try:
    if schema.has_function:
      body = schema.get_function_with_opset_version(opset)
      fp = onnx.FunctionProto()
      fp.ParseFromString(body if isinstance(body, bytes) else body.SerializeToString())
      return fp
    if schema.has_context_dependent_function:
      if any(i and i not in types for i in node.input): return None
      arg = [types[i].SerializeToString() if i else onnx.TypeProto().SerializeToString() for i in node.input]
      fp = onnx.FunctionProto()
      fp.ParseFromString(schema.get_context_dependent_function_with_opset_version(opset, node.SerializeToString(), arg))
      return fp
  except Exception:   # onnx's own failure to build a body (a malformed node): the node stays, and is refused
    return None
  return None


def expand_model(m: onnx.ModelProto, opset: int, infer, refuse: bool = True) -> onnx.ModelProto:
  """``m`` with its control flow unrolled (``frontend.control_flow``) and its function bodies expanded, in turn: a
  body may hold control flow (LinearAttention's Scan), a loop body ops with bodies. ``refuse``: control flow that
  cannot be unrolled raises its UnsupportedOpError; otherwise it is left as it is."""
  for _ in range(MAX_DEPTH):
    try:
      m = unroll_control_flow(m, infer)
    except UnsupportedOpError:
      if refuse: raise
    m, expanded = expand_functions(m, opset, infer)
    if not expanded: break
  return m


def _dynamic_quantize_linear(opset: int) -> onnx.FunctionProto:
  """ONNX's body of DynamicQuantizeLinear, written at the model's opset (ONNX's own is at opset 11, which its
  inliner does not take into a newer model): uint8 over the range of x widened to include 0."""
  mk = onnx.helper.make_node
  zero = onnx.helper.make_tensor("v", onnx.TensorProto.FLOAT, [], [0.0])
  top = onnx.helper.make_tensor("v", onnx.TensorProto.FLOAT, [], [255.0])
  nodes = [mk("Constant", [], ["qmin"], value=zero), mk("Constant", [], ["qmax"], value=top),
           mk("ReduceMin", ["x"], ["lo0"], keepdims=0), mk("Min", ["lo0", "qmin"], ["lo"]),
           mk("ReduceMax", ["x"], ["hi0"], keepdims=0), mk("Max", ["hi0", "qmin"], ["hi"]),
           mk("Sub", ["hi", "lo"], ["range"]), mk("Div", ["range", "qmax"], ["y_scale"]),
           mk("Div", ["lo", "y_scale"], ["lo_scaled"]),
           mk("Sub", ["qmin", "lo_scaled"], ["zp0"]), mk("Clip", ["zp0", "qmin", "qmax"], ["zp1"]),
           mk("Round", ["zp1"], ["zp2"]), mk("Cast", ["zp2"], ["y_zero_point"], to=onnx.TensorProto.UINT8),
           mk("QuantizeLinear", ["x", "y_scale", "y_zero_point"], ["y"])]
  return onnx.helper.make_function(DOMAIN, "DynamicQuantizeLinear", ["x"], ["y", "y_scale", "y_zero_point"], nodes,
                                   [onnx.helper.make_opsetid("", opset)])


def _defaults(node: onnx.NodeProto, opset: int) -> list[onnx.AttributeProto]:
  """The attributes ``node`` leaves to their defaults, with the default values of its op's schema."""
  schema = onnx.defs.get_schema(node.op_type, opset, node.domain)
  have = {a.name for a in node.attribute}
  return [a.default_value for name, a in schema.attributes.items()
          if name not in have and a.default_value.type != onnx.AttributeProto.UNDEFINED]


def _types(m: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
  g = m.graph
  out = {vi.name: vi.type for vi in list(g.input) + list(g.value_info) + list(g.output)}
  for t in g.initializer:
    tp = onnx.TypeProto()
    tp.tensor_type.elem_type = t.data_type
    for d in t.dims: tp.tensor_type.shape.dim.add().dim_value = d
    out[t.name] = tp
  return out


def expand_functions(m: onnx.ModelProto, opset: int, infer) -> tuple[onnx.ModelProto, list[str]]:
  """``m`` with every node that minicomp cannot lower but ONNX defines by a function body of ops it can
  replaced by that body; ``infer`` (shape inference) runs after each level. Returns the model and the op types
  expanded. A body ONNX's inliner does not take (another opset than the model's, a variadic signature) is not
  used."""
  expanded: list[str] = []
  for _ in range(MAX_DEPTH):
    types, calls = _types(m), {}
    for k, node in enumerate(m.graph.node):
      fp = None if _lowered(node.op_type, node.domain, opset) else _body(node, types, opset)
      if fp is not None and all(_lowered(n.op_type, n.domain, opset) or n.op_type in ("Constant",) + CONTROL_FLOW
                                or _body(n, {}, opset) is not None for n in fp.node):
        fp.name, fp.domain = f"{node.op_type}_{k}", DOMAIN
        calls[k] = fp
    calls = {k: fp for k, fp in calls.items() if _inlined(m, {k: fp}, opset) is not None}   # each alone first
    if not calls: break
    r = onnx.ModelProto()
    r.CopyFrom(m)
    del r.graph.node[:]
    r.graph.node.extend(_inlined(m, calls, opset))
    expanded += [m.graph.node[k].op_type for k in calls]
    m = infer(r)
  return m, expanded


def _inlined(m: onnx.ModelProto, calls: dict[int, onnx.FunctionProto], opset: int) -> list[onnx.NodeProto] | None:
  """The nodes of ``m`` with node ``k`` replaced by the body ``calls[k]`` for each ``k`` (ONNX's inliner, on a copy
  of the nodes alone: no weights are copied), or None when the inliner does not take them all: it raises on some
  bodies (variadic signatures) and leaves others (another opset than the model's)."""
  light = onnx.ModelProto()
  light.ir_version = m.ir_version
  light.opset_import.extend(m.opset_import)
  light.opset_import.append(onnx.helper.make_opsetid(DOMAIN, 1))
  g = light.graph
  g.name = m.graph.name
  # every name of the model is a graph input or output here, so the inliner's new names avoid them all
  g.input.extend(m.graph.input)
  g.input.extend(onnx.helper.make_empty_tensor_value_info(t.name) for t in m.graph.initializer)
  g.output.extend(m.graph.output)
  for k, node in enumerate(m.graph.node):
    if k not in calls:
      g.node.append(node)
      continue
    call = g.node.add()
    call.CopyFrom(node)
    call.op_type, call.domain = calls[k].name, DOMAIN
    call.attribute.extend(_defaults(node, opset))   # the body refers to them: every attribute explicit
  light.functions.extend(calls.values())
  try:
    nodes = list(inliner.inline_local_functions(light).graph.node)
  except Exception:   # the inliner's RuntimeError: those nodes stay as they are
    return None
  return None if any(n.domain == DOMAIN for n in nodes) else nodes
