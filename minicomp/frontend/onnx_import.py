"""ONNX import: a ModelProto (or a path) -> :class:`~minicomp.frontend.graph.Graph`.

Steps: read; substitute user ``input_shapes``; ``onnx.checker``; convert a model below opset 13 to 13
(ONNX's version converter); rewrite QDQ convolutions and matmuls into QLinearConv / QLinearMatMul
(:mod:`minicomp.frontend.qdq`); refuse dynamic input dims;
``onnx.shape_inference``; unroll If / Loop / Scan of a static extent (:mod:`minicomp.frontend.control_flow`);
replace nodes of ops minicomp does not lower but ONNX defines by a function body with
that body (:mod:`minicomp.frontend.expand`: ``Attention``); collect initializers as constants; fold every node whose inputs are
all constant (plus ``Shape`` / ``Size`` of statically shaped values) with ONNX's reference
evaluator, which removes the Shape/Gather/Concat/Reshape chains exporters emit; re-run shape
inference on what is left while that gives shapes ONNX's data propagation could not (an
``Expand`` whose shape came out of ``ConstantOfShape``/``Equal``/``Where``); finally check that
every remaining node has a lowering, listing all unsupported nodes at once.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference

from minicomp.errors import ModelError, ShapeError, UnsupportedOpError
from minicomp.frontend.dtypes import DTYPE_TO_ONNX, np_to_dtype, onnx_array, onnx_to_dtype
from minicomp.frontend.expand import expand_model
from minicomp.frontend.qdq import fuse_qdq
from minicomp.frontend.graph import Graph, Node, Value

# Opsets below MIN_OPSET are converted to it (ONNX's version converter); MAX_OPSET is the newest the
# installed onnx defines (registry.NEWER_VERSIONS says which op versions past 21 the lowerings cover).
MIN_OPSET, MAX_OPSET = 13, onnx.defs.onnx_opset_version()
_NO_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"}


def read_model(model) -> onnx.ModelProto:
  """A ModelProto from a ModelProto, a path or serialized bytes."""
  if isinstance(model, onnx.ModelProto): return model
  if isinstance(model, (bytes, bytearray)):
    try:
      return onnx.load_from_string(bytes(model))
    except Exception as e:  # protobuf raises its own DecodeError
      raise ModelError(f"could not parse the ONNX bytes: {e}") from None
  if isinstance(model, (str, os.PathLike)):
    p = Path(model)
    if not p.is_file(): raise ModelError(f"no ONNX file at {str(p)!r}")
    try:
      return onnx.load(str(p))
    except Exception as e:  # protobuf's DecodeError, OSError, onnx's own errors: any of them means unreadable
      raise ModelError(f"could not read ONNX model {str(p)!r}: {e}") from None
  raise ModelError(f"expected an onnx.ModelProto, a path or bytes, got {type(model).__name__}")


def _opset(model: onnx.ModelProto) -> int:
  for imp in model.opset_import:
    if imp.domain in ("", "ai.onnx"): return int(imp.version)
  raise ModelError("the model imports no default-domain opset")


def _dims(tt) -> list:
  return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tt.shape.dim]


def _set_input_shapes(model: onnx.ModelProto, input_shapes: Mapping[str, Sequence[int] | int]) -> onnx.ModelProto:
  """Each key names an input (its whole shape) or a symbolic dim (``"batch": 4``: that dim of every input);
  an input's own name wins over a dim of the same name."""
  m = onnx.ModelProto(); m.CopyFrom(model)
  names = {i.name for i in m.graph.input}
  dim_names = {d.dim_param for i in m.graph.input for d in i.type.tensor_type.shape.dim if d.dim_param}
  unknown = set(input_shapes) - names - dim_names
  if unknown:
    raise ShapeError(f"input_shapes names {sorted(unknown)}, which are neither inputs ({sorted(names)}) nor "
                     f"symbolic dims of them ({sorted(dim_names)})")
  for inp in m.graph.input:
    if inp.name in input_shapes:
      shape = [int(d) for d in input_shapes[inp.name]]
      old = inp.type.tensor_type.shape.dim
      if len(old) and len(old) != len(shape):
        raise ShapeError(f"input {inp.name!r} has rank {len(old)}, input_shapes gives {shape}")
      del inp.type.tensor_type.shape.dim[:]
      for d in shape: inp.type.tensor_type.shape.dim.add().dim_value = d
      continue
    for d in inp.type.tensor_type.shape.dim:
      if d.dim_param and d.dim_param in input_shapes and d.dim_param not in names:
        v = input_shapes[d.dim_param]
        v = v[0] if isinstance(v, (list, tuple)) and len(v) == 1 else v
        if isinstance(v, (list, tuple)): raise ShapeError(f"input_shapes[{d.dim_param!r}]: one size for a dim, got {list(v)}")
        d.dim_value = int(v)
  return m


def _attrs(node: onnx.NodeProto) -> dict:
  out = {}
  for a in node.attribute:
    if a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
      raise UnsupportedOpError(f"{node.op_type} node {node.name!r}: subgraph attributes (control flow) are not supported",
                               [(node.op_type, node.name)])
    v = helper.get_attribute_value(a)
    try:
      if isinstance(v, bytes): v = v.decode()
      elif isinstance(v, onnx.TensorProto): v = numpy_helper.to_array(v)
      elif isinstance(v, list) and v and isinstance(v[0], bytes): v = [x.decode() for x in v]
    except UnicodeDecodeError:
      raise ModelError(f"{node.op_type} node {node.name!r}: attribute {a.name!r} is not valid UTF-8") from None
    except ValueError as e:
      raise ModelError(f"{node.op_type} node {node.name!r}: tensor attribute {a.name!r} is corrupted ({e})") from None
    out[a.name] = v
  return out


# ops ONNX's reference evaluator implements only from a later version whose change adds element types alone: a
# constant node of an older version folds with that one (the quantized weights of a QDQ model at opset 13-18)
_FOLD_OPSET = {"DequantizeLinear": 19, "QuantizeLinear": 19}


def _evaluate(node: Node, values: dict[str, Value], opset: int) -> list[np.ndarray]:
  """Run one node on constant inputs with ONNX's reference evaluator."""
  from onnx.reference import ReferenceEvaluator
  ins = [i for i in node.inputs if i]
  proto = helper.make_node(node.op_type, node.inputs, node.outputs, name=node.name, **{
    k: (numpy_helper.from_array(v) if isinstance(v, np.ndarray) else v) for k, v in node.attrs.items()})
  g = helper.make_graph([proto], "fold",
                        [helper.make_tensor_value_info(i, DTYPE_TO_ONNX[values[i].dtype], values[i].const.shape) for i in ins],
                        [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in node.outputs])
  m = helper.make_model(g, opset_imports=[helper.make_opsetid("", max(opset, _FOLD_OPSET.get(node.op_type, 0)))])
  try:
    outs = ReferenceEvaluator(m).run(None, {i: values[i].const for i in ins})
  except Exception as e:  # the reference evaluator raises whatever its numpy kernels raise
    raise ModelError(f"constant folding of {node.op_type} node {node.name!r} failed: {e}") from None
  return [np.asarray(o) for o in outs]


def load_onnx(model, input_shapes: Mapping[str, Sequence[int]] | None = None, check_ops: bool = True) -> Graph:
  """Import an ONNX model (ModelProto, path or bytes) into a Graph with constants folded."""
  m = read_model(model)
  opset = _opset(m)
  if opset > MAX_OPSET:
    raise ModelError(f"opset {opset} is newer than the installed onnx {onnx.__version__} defines (up to {MAX_OPSET}); "
                     "upgrade onnx or export the model at an older opset")
  if input_shapes: m = _set_input_shapes(m, input_shapes)
  data = m.SerializeToString()     # (once for the checker and shape inference: ResNet-18's 45 MB took 0.1 s each time)
  try:
    onnx.checker.check_model(data)
  except onnx.checker.ValidationError as e:
    raise ModelError(f"the ONNX checker rejected the model: {e}") from None
  except UnicodeDecodeError as e:
    raise ModelError(f"the ONNX checker rejected the model: a name or string in it is not valid UTF-8 ({e})") from None
  _check_names(m)
  _check_int_attrs(m)
  _refuse_non_tensors(m)
  checked = m
  m, opset = _upgrade(m, opset)
  m, _ = fuse_qdq(m)
  inits = {t.name for t in m.graph.initializer}
  dynamic = []
  for inp in m.graph.input:
    if inp.name in inits: continue
    dims = _dims(inp.type.tensor_type)
    if inp.type.tensor_type.HasField("shape") and all(isinstance(d, int) for d in dims) and 0 in dims:
      raise ShapeError(f"input {inp.name!r} has a zero-size dim {dims}: minicomp does not compile empty tensors")
    if not inp.type.tensor_type.HasField("shape") or any(not isinstance(d, int) or d < 0 for d in dims):
      dynamic.append(f"{inp.name} {dims}")
  if dynamic:
    raise ShapeError("inputs with dynamic or unknown dims: " + "; ".join(dynamic) +
                     ". Give their sizes: input_shapes={'x': (1, 3, 224, 224)} or a dim by its name, "
                     "input_shapes={'batch': 1} (command line: --input-shape x=1,3,224,224 or --input-shape batch=1)")
  m = _infer_checked(m, data if m is checked else None)     # (the same model: neither converted nor fused)
  m = expand_model(m, opset, _infer_checked)

  values: dict[str, Value] = {}
  for t in m.graph.initializer:
    arr = onnx_array(t, f"initializer {t.name!r}")
    values[t.name] = Value(t.name, tuple(arr.shape), np_to_dtype(arr.dtype), arr)
  inputs = []
  for inp in m.graph.input:
    if inp.name in values: continue
    tt = inp.type.tensor_type
    values[inp.name] = Value(inp.name, tuple(_dims(tt)), onnx_to_dtype(tt.elem_type, f"input {inp.name!r}"))
    inputs.append(inp.name)

  _take_shapes(m.graph, values)

  kept: list[tuple[Node, onnx.NodeProto]] = []
  taken: set[str] = set()
  for k, n in enumerate(m.graph.node):
    name = n.name or f"{n.op_type}_{k}"
    while name in taken: name += "_"
    taken.add(name)
    node = Node(name, n.op_type, list(n.input), list(n.output), _attrs(n), n.domain)
    if _fold(node, values, opset): continue
    kept.append((node, n))
  kept = _refold(m, kept, values, inputs, opset)
  nodes = [node for node, _ in kept]
  _drop_empty_concat_inputs(nodes, values)
  outputs = [o.name for o in m.graph.output]
  g = Graph(nodes, values, inputs, outputs, opset, m.graph.name or "model")
  if check_ops:
    from minicomp.graph.registry import check_supported
    check_supported(nodes, opset)
  return g


def _drop_empty_concat_inputs(nodes: list[Node], values: dict[str, Value]) -> None:
  """Concat inputs with a zero-size dim add nothing: they are taken out of the Concat (as a RotaryEmbedding body
  concatenates an empty "not rotated" part when the whole head rotates), so no empty tensor crosses a kernel
  boundary. A Concat of empty inputs only keeps one (and is refused as empty)."""
  for node in nodes:
    if node.op_type != "Concat": continue
    full = [i for i in node.inputs if not (i in values and 0 in values[i].shape)]
    if full and len(full) < len(node.inputs): node.inputs[:] = full


def _upgrade(m: onnx.ModelProto, opset: int) -> tuple[onnx.ModelProto, int]:
  """A model below MIN_OPSET converted to MIN_OPSET with ONNX's version converter (the lowerings
  implement the op versions from opset 13 on); a model it cannot convert is a ModelError."""
  if opset >= MIN_OPSET: return m, opset
  scan8 = next((n for n in m.graph.node if n.op_type == "Scan"), None) if opset < 9 else None
  if scan8 is not None:
    raise UnsupportedOpError(f"Scan node {scan8.name!r}: Scan-8 (a batch axis and sequence_lens) is not supported; "
                             "export the model at opset 9 or later", [("Scan", scan8.name)])
  from onnx import version_converter
  try:      # the converter can turn an invalid model into a valid one of another meaning (a Softmax-11 axis out
    shape_inference.infer_shapes(m, check_type=True, strict_mode=True)   # of range becomes a Flatten): refuse first
  except Exception as e:   # onnx's InferenceError
    msg = " ".join(str(e).split())[:400]
    raise ModelError(f"the opset {opset} model fails ONNX's (strict) shape inference, so it is not converted: {msg}") from None
  try:
    c = version_converter.convert_version(m, MIN_OPSET)
    onnx.checker.check_model(c)
  except Exception as e:   # the converter raises its own ConvertError / RuntimeError
    msg = " ".join(str(e).split())[:400]
    raise ModelError(f"the opset {opset} model could not be converted to opset {MIN_OPSET} by "
                     f"onnx.version_converter: {msg}") from None
  return c, MIN_OPSET


def _refuse_non_tensors(m: onnx.ModelProto) -> None:
  """A graph input or output that is a sequence, optional or map (not a tensor) is unsupported."""
  for where, vi in [("input", i) for i in m.graph.input] + [("output", o) for o in m.graph.output]:
    kind = vi.type.WhichOneof("value")
    if kind not in ("tensor_type", None):
      raise UnsupportedOpError(f"graph {where} {vi.name!r} is not a tensor (its type is {kind.replace('_type', '')}): "
                               "minicomp compiles tensors only")


def _check_names(m: onnx.ModelProto) -> None:
  """Protobuf hands back a string field that is not valid UTF-8 as bytes; such a name is a ModelError."""
  g = m.graph
  named = [(f"node {k}", n.name) for k, n in enumerate(g.node)] + [(f"node {k} op", n.op_type) for k, n in enumerate(g.node)]
  named += [(f"node {k} ({n.op_type}) input/output", x) for k, n in enumerate(g.node) for x in [*n.input, *n.output]]
  named += [("graph input", i.name) for i in g.input] + [("graph output", o.name) for o in g.output]
  named += [("initializer", t.name) for t in g.initializer] + [("value_info", v.name) for v in g.value_info]
  named += [("graph", g.name)] + [(f"node {k} attribute", a.name) for k, n in enumerate(g.node) for a in n.attribute]
  for where, name in named:
    if not isinstance(name, str): raise ModelError(f"{where}: name {name!r} is not valid UTF-8")


_INT32 = (-2**31, 2**31 - 1)
_WIDE_INTS = {("Slice", "starts"), ("Slice", "ends")}   # opset < 10: INT64_MAX means "to the end"


def _check_int_attrs(m: onnx.ModelProto) -> None:
  """Integer attributes outside int32 (an axis of 2**31) are a ModelError before ONNX's C++ shape
  inference sees them: onnx 1.23 segfaults on LayerNormalization(axis=2**31). No standard op has a
  meaningful integer attribute that large, except the sentinels of old Slice."""
  lo, hi = _INT32
  for k, n in enumerate(m.graph.node):
    for a in n.attribute:
      vals = [a.i] if a.type == onnx.AttributeProto.INT else list(a.ints) if a.type == onnx.AttributeProto.INTS else []
      if (n.op_type, a.name) not in _WIDE_INTS and any(not lo <= v <= hi for v in vals):
        raise ModelError(f"{n.op_type} node {n.name or f'#{k}'!r}: attribute {a.name}={vals[0] if len(vals) == 1 else vals} "
                         "is out of range (integer attributes must fit in 32 bits)")


_TYPE_ERRORS = ("unsupported type", "elem type differs", "type mismatch")


def _infer_checked(m: onnx.ModelProto, data: bytes | None = None) -> onnx.ModelProto:
  """Shape inference that also checks types: an input type an op does not accept (bool into Conv),
  or a declared output type that differs from the inferred one, is a ModelError. Strict inference
  finds both but also fails on models it merely cannot fully infer, so those get the lenient pass.
  ``data``: ``m`` serialized already."""
  data = m.SerializeToString() if data is None else data
  for strict in (True, False):
    try:
      return shape_inference.infer_shapes(data, check_type=True, strict_mode=strict, data_prop=True)
    except Exception as e:   # onnx raises its own InferenceError / ValidationError
      if any(t in str(e) for t in _TYPE_ERRORS): raise ModelError(f"the model is ill-typed: {e}") from None
      if not strict: raise ModelError(f"ONNX shape inference failed: {e}") from None
  raise AssertionError("unreachable")


def _take_shapes(graph: onnx.GraphProto, values: dict[str, Value]) -> int:
  """Record the static shapes shape inference found for intermediates and outputs (for Shape
  folding and for the placeholders of kernels); returns how many values were new."""
  new = 0
  for vi in list(graph.value_info) + list(graph.output):
    tt = vi.type.tensor_type
    if vi.name in values or not tt.HasField("shape") or tt.elem_type not in DTYPE_TO_ONNX.values(): continue
    dims = _dims(tt)
    if all(isinstance(d, int) for d in dims):
      values[vi.name] = Value(vi.name, tuple(dims), onnx_to_dtype(tt.elem_type))
      new += 1
  return new


_INLINE_CONST = 1 << 16   # constants up to this many elements go to re-inference as initializers (shape inputs are tiny)


def _refold(m: onnx.ModelProto, kept: list[tuple[Node, onnx.NodeProto]], values: dict[str, Value],
            inputs: list[str], opset: int) -> list[tuple[Node, onnx.NodeProto]]:
  """Re-run shape inference on the nodes left after folding, with the folded values as constants,
  then fold again, until every node output has a static shape or nothing changes.

  ONNX's data propagation follows Shape/Gather/Concat/Unsqueeze but not ConstantOfShape, Equal or
  Where, so the ``Expand(x, Where(Equal(shape, -ones), ones, shape))`` that PyTorch's exporter
  writes for ``expand`` (Llama's repeat_kv) gets no output shape from the first inference, though
  folding turns its shape input into a constant; a second inference sees that constant."""
  while any(o and o not in values for node, _ in kept for o in node.outputs):
    consumed = {i for node, _ in kept for i in node.inputs if i} | {o.name for o in m.graph.output}
    consts = [values[i] for i in sorted(consumed) if i in values and values[i].is_const]
    g = helper.make_graph(
      [p for _, p in kept], m.graph.name or "model",
      [i for i in m.graph.input if i.name in inputs] +
      [helper.make_tensor_value_info(v.name, DTYPE_TO_ONNX[v.dtype], v.shape) for v in consts if v.const.size > _INLINE_CONST],
      list(m.graph.output), [numpy_helper.from_array(v.const, v.name) for v in consts if v.const.size <= _INLINE_CONST])
    r = helper.make_model(g, opset_imports=list(m.opset_import), functions=list(m.functions))
    r.ir_version = m.ir_version
    try:
      r = shape_inference.infer_shapes(r, data_prop=True)
    except Exception as e:  # onnx's InferenceError / ValidationError / RuntimeError
      raise ModelError(f"ONNX shape inference (after constant folding) failed: {e}") from None
    if not _take_shapes(r.graph, values): break
    kept = [(node, p) for node, p in kept if not _fold(node, values, opset)]
  return kept


def _type_only_cast(node: Node, values: dict[str, Value]) -> Node | None:
  """A CastLike of a constant as the equivalent Cast (its second input is read for its type only, so a
  runtime one does not stop folding); None for any other node."""
  if node.op_type != "CastLike" or len(node.inputs) != 2: return None
  x, like = (values.get(i) for i in node.inputs)
  if x is None or not x.is_const or like is None: return None
  return Node(node.name, "Cast", node.inputs[:1], node.outputs, {**node.attrs, "to": DTYPE_TO_ONNX[like.dtype]}, node.domain)


def _fold(node: Node, values: dict[str, Value], opset: int) -> bool:
  """Fold ``node`` into constants when possible; returns True when folded."""
  if node.domain not in ("", "ai.onnx") or node.op_type in _NO_FOLD: return False
  if node.op_type == "Constant":
    outs = _evaluate(node, values, opset)
  elif (cast := _type_only_cast(node, values)) is not None:
    outs = _evaluate(cast, values, opset)
  elif node.op_type in ("Shape", "Size") and node.inputs[0] in values and values[node.inputs[0]].shape is not None \
      and all(isinstance(d, int) for d in values[node.inputs[0]].shape):
    shape = np.array(values[node.inputs[0]].shape, np.int64)
    if node.op_type == "Size": outs = [np.array(int(np.prod(shape)), np.int64)]
    else:
      r = len(shape)
      s, e = node.attrs.get("start", 0), node.attrs.get("end", r)
      outs = [shape[max(0, s + r if s < 0 else s):min(r, e + r if e < 0 else e)]]
  elif all(not i or (i in values and values[i].is_const) for i in node.inputs) and node.inputs:
    outs = _evaluate(node, values, opset)
  else:
    return False
  for name, arr in zip(node.outputs, outs):
    values[name] = Value(name, tuple(arr.shape), np_to_dtype(arr.dtype, node), arr)
  return True
