"""QDQ convolutions and matmuls as integer ops: the pattern onnxruntime's ``quantize_static`` writes, rewritten at
import into the QLinear op it stands for, so it compiles into one int8-input, int32-accumulating kernel.

A QDQ model says ``y = QuantizeLinear(Conv(DequantizeLinear(x_q), DequantizeLinear(w_q), DequantizeLinear(b_q)))``:
dequantize, compute in float, quantize. When the quantization parameters are constants of the forms QLinearConv
and QLinearMatMul take, that is ``QLinearConv(x_q, w_q, b_q)`` (the convolution of the zero-point-shifted integers,
scaled once), which is how onnxruntime runs the same graph. The rewrite applies to:

- ``Conv`` whose input and weight each come from a DequantizeLinear (the weight's constant: per tensor or per
  output channel, axis 0), whose bias is absent or the DequantizeLinear of an int32 constant with zero point 0
  and scale ``x_scale * w_scale`` (what the quantizer writes), and whose output is read only by one
  QuantizeLinear, directly or through a ``Relu`` that the QuantizeLinear's saturation implies (its zero point
  is the type's lowest value);
- ``MatMul`` of two DequantizeLinear outputs (B's per tensor or per column) read only by one QuantizeLinear.

The int8 / uint8 types only, scalar activation scales and zero points, all of them constants. Anything else is
left in float (the QDQ nodes then fuse into their neighbours' kernels). DequantizeLinear nodes nothing reads
any more are removed (their constants are then unused, and no kernel reads them).
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from minicomp.frontend.dtypes import onnx_array

EIGHT_BIT = (onnx.TensorProto.INT8, onnx.TensorProto.UINT8)


def fuse_qdq(m: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
  """``m`` with each QDQ Conv / MatMul pattern (module docstring) replaced by its QLinear op; and their count."""
  g = m.graph
  consts = {t.name: t for t in g.initializer}
  producer = {o: n for n in g.node for o in n.output}
  readers: dict[str, list[onnx.NodeProto]] = {}
  for n in g.node:
    for i in n.input: readers.setdefault(i, []).append(n)
  outputs = {o.name for o in g.output}

  def value(name):
    return onnx_array(consts[name], f"initializer {name!r}") if name in consts else None

  def dq(name: str, const_input: bool):
    """The (input, scale, zero point) names of the DequantizeLinear producing ``name``, when its scale and zero
    point are constants of an 8-bit type (and its input too when ``const_input``); else None."""
    n = producer.get(name)
    if n is None or n.op_type != "DequantizeLinear" or n.domain not in ("", "ai.onnx") or len(n.input) < 3: return None
    x, s, z = n.input[:3]
    if s not in consts or z not in consts or (const_input and x not in consts): return None
    if consts[z].data_type not in EIGHT_BIT and not (const_input and consts[z].data_type == onnx.TensorProto.INT32):
      return None
    return n, x, s, z, next((a.i for a in n.attribute if a.name == "axis"), 1)

  def only_reader(name: str):
    rs = readers.get(name, [])
    return rs[0] if len(rs) == 1 and name not in outputs else None

  def quantized_output(name: str):
    """The QuantizeLinear reading ``name`` (through an implied Relu) and the nodes it replaces; else None."""
    n = only_reader(name)
    skipped = []
    if n is not None and n.op_type == "Relu":
      skipped, n = [n], only_reader(n.output[0])
    if n is None or n.op_type != "QuantizeLinear" or len(n.input) < 3: return None
    s, z = n.input[1:3]
    if s not in consts or z not in consts or consts[z].data_type not in EIGHT_BIT: return None
    if value(s).size != 1 or value(z).size != 1: return None
    if skipped and int(value(z).reshape(())) != np.iinfo(helper.tensor_dtype_to_np_dtype(consts[z].data_type)).min:
      return None     # a Relu the saturation does not imply
    return n, s, z, skipped

  scalar = lambda name: value(name).size == 1
  drop, new_at = set(), {}
  for n in g.node:
    if n.domain not in ("", "ai.onnx") or n.op_type not in ("Conv", "MatMul"): continue
    a = dq(n.input[0], const_input=False)
    b = dq(n.input[1], const_input=True)
    q = quantized_output(n.output[0])
    if a is None or b is None or q is None or not (scalar(a[2]) and scalar(a[3])): continue
    if consts[b[3]].data_type not in EIGHT_BIT: continue
    w = value(b[1])
    wscale = value(b[2])
    if n.op_type == "Conv":
      if wscale.size != 1 and not (wscale.ndim == 1 and b[4] in (0, -w.ndim)): continue
      bias = []
      if len(n.input) > 2 and n.input[2]:
        c = dq(n.input[2], const_input=True)
        if c is None or consts[c[1]].data_type != onnx.TensorProto.INT32 or np.any(value(c[3]) != 0): continue
        want = (value(a[2]).astype(np.float32) * wscale.astype(np.float32)).reshape(-1)
        if not np.allclose(value(c[2]).reshape(-1), want, rtol=1e-6, atol=0): continue
        bias = [c[1]]
      fused = helper.make_node("QLinearConv", [a[1], a[2], a[3], b[1], b[2], b[3], q[1], q[2], *bias], [q[0].output[0]],
                               name=f"{n.name or 'Conv'}_qlinear")
      fused.attribute.extend(n.attribute)
    else:
      if w.ndim != 2 or (wscale.size != 1 and not (wscale.ndim == 1 and b[4] in (1, -1))): continue
      fused = helper.make_node("QLinearMatMul", [a[1], a[2], a[3], b[1], b[2], b[3], q[1], q[2]], [q[0].output[0]],
                               name=f"{n.name or 'MatMul'}_qlinear")
    new_at[id(q[0])] = fused
    drop |= {id(n), id(q[0]), *map(id, q[3])}
  if not new_at: return m, 0

  nodes = [new_at.get(id(n), n) for n in g.node if id(n) not in drop or id(n) in new_at]
  # DequantizeLinear nodes nothing reads any more (the fused ops read their inputs)
  while True:
    read = {i for n in nodes for i in n.input} | outputs
    dead = {id(n) for n in nodes if n.op_type == "DequantizeLinear" and not any(o in read for o in n.output)}
    if not dead: break
    nodes = [n for n in nodes if id(n) not in dead]
  r = onnx.ModelProto()
  r.CopyFrom(m)
  del r.graph.node[:]
  r.graph.node.extend(nodes)
  del r.graph.value_info[:]        # shape inference recomputes them
  return r, len(new_at)
