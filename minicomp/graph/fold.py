"""Graph rewrites on the imported model that change no result: BatchNormalization folded into Conv.

``fold_batchnorm(g)`` rewrites every ``Conv -> BatchNormalization`` pair where the conv's weight
(and bias, when present) and the four BN inputs are constants, the conv output feeds only the BN
and is not a graph output, and the BN is in inference form::

    a  = scale / sqrt(var + eps)          (per output channel)
    W' = W * a[:, None, ...]
    b' = (b or 0) * a + (B - mean * a)

The conv then reads the new constants ``W'`` and ``b'`` and produces the BN's output value; the BN
node is gone. Call it on the imported graph, before partitioning.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from minicomp.frontend.graph import Graph, Value


def fold_batchnorm(g: Graph) -> Graph:
  """A new Graph with each foldable Conv + BatchNormalization pair merged into the Conv (``g`` is not changed)."""
  nodes = list(g.nodes)
  values = dict(g.values)
  out = dataclasses.replace(g, nodes=nodes, values=values)
  readers: dict[str, int] = {}
  for n in g.nodes:
    for i in n.inputs:
      if i: readers[i] = readers.get(i, 0) + 1
  producer = {o: n for n in g.nodes for o in n.outputs if o}
  drop: set[str] = set()
  for bn in g.nodes:
    if bn.op_type != "BatchNormalization" or bn.domain not in ("", "ai.onnx"): continue
    if int(bn.attrs.get("training_mode", 0)) or len([o for o in bn.outputs if o]) != 1 or len(bn.inputs) < 5: continue
    conv = producer.get(bn.inputs[0])
    if conv is None or conv.op_type != "Conv" or conv.domain not in ("", "ai.onnx") or len(conv.outputs) != 1: continue
    mid = conv.outputs[0]
    if readers.get(mid, 0) != 1 or mid in g.outputs: continue
    w = g.constant(conv.inputs[1])
    has_b = len(conv.inputs) > 2 and bool(conv.inputs[2])
    b = g.constant(conv.inputs[2]) if has_b else None
    params = [g.constant(i) for i in bn.inputs[1:5]]
    if w is None or (has_b and b is None) or any(p is None for p in params) or w.ndim < 3: continue
    scale, shift, mean, var = (p.astype(np.float64).reshape(-1) for p in params)
    M = w.shape[0]
    if any(p.shape != (M,) for p in (scale, shift, mean, var)) or (b is not None and b.shape != (M,)): continue
    a = scale / np.sqrt(var + float(bn.attrs.get("epsilon", 1e-5)))
    w2 = (w.astype(np.float64) * a.reshape((M,) + (1,) * (w.ndim - 1))).astype(w.dtype)
    b2 = ((b.astype(np.float64) if b is not None else 0.0) * a + shift - mean * a).astype(w.dtype)
    dtype = g.values[conv.inputs[1]].dtype
    wn = out.fresh_value(f"{conv.name}_bnfold_w")
    values[wn] = Value(wn, tuple(w2.shape), dtype, w2)
    bname = out.fresh_value(f"{conv.name}_bnfold_b")
    values[bname] = Value(bname, (M,), dtype, b2)
    new_conv = dataclasses.replace(conv, inputs=[conv.inputs[0], wn, bname], outputs=[bn.outputs[0]],
                                   attrs=dict(conv.attrs))
    nodes[nodes.index(conv)] = new_conv
    drop.add(bn.name)
    values.pop(mid, None)
  out.nodes = [n for n in nodes if n.name not in drop]
  return out
