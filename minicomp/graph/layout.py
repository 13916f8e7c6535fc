"""Weight layouts chosen at compile time: a convolution's constant weights stored channels-last for the tensor cores.

ONNX stores a convolution's weights ``(O, I, K1, .., Kd)``: the filter taps innermost. The tensor-core schedules
(graph/tensor_core_schedules.py) step through the reduction 32 input channels at a time at one filter tap, so
in ONNX's order a step's weights lie 9 values apart for a 3x3 filter (one 2-byte read per 32-byte sector). Stored
``(O, K1, .., Kd, I)`` (as cuDNN's tensor-core convolutions want them) a step reads 64 contiguous bytes per
filter, in 16-byte accesses. Weights are constants, so the order costs nothing at run time: the saved model holds
them transposed, and the kernels read them through a view in ONNX's order (``subgraph._stored``) that every
schedule inlines.

:func:`channels_last_weights` stores them so for each convolution the tensor cores can take: ``group`` 1, a
filter larger than 1 (a 1 x 1 filter is already channels-last), input channels a multiple of an instruction's k
(16: the schedules' k-steps are ``KSTEP`` channels where that divides them, else one instruction's), input and
weights of one type that has an mma.sync intrinsic on the target (float16, bfloat16; float32 with
``precision="tf32"``), constant weights read by convolutions only; and where the template's 2-D tiles of output
pixels apply and win: unit strides and dilations, output rows a multiple of 8 pixels or padded to one within the
template's ``MAX_PADDING`` (rows of 14 or 7 pixels in tiles 8 wide: ``pixel_tiles_fit``, as the plan decides it).
Elsewhere the order costs the FP32-pipe kernels that keep the layer: a ResNet-18's strided and 4x4 / 2x2 layers
stayed there, and
its 2x2 layers' cross-thread reductions, which read a filter's weights along (I, KH, KW), read them 512 apart in
channels-last order (the fp16 model at 64 x 64 on an H100: 334.2 us with every such conv transposed, 303.4 with
none, by the static model). ``compile`` calls it (the ``layout`` phase) in the modes that offer tensor-core
schedules; otherwise the graph is unchanged.
"""
from __future__ import annotations

import dataclasses

from minicomp.frontend.graph import Graph, Node
from minicomp.graph.tensor_core_schedules import KSTEP, intrinsic_for, pixel_tiles_fit
from minicomp.target import Target


def _takes_tensor_cores(g: Graph, n: Node, target: Target, tf32: bool) -> bool:
  if n.op_type != "Conv" or n.domain not in ("", "ai.onnx") or len(n.inputs) < 2: return False
  x, w = (g.values.get(i) for i in n.inputs[:2])
  if x is None or w is None or not w.is_const or w.layout is not None or w.const.ndim < 3: return False
  if int(n.attrs.get("group", 1)) != 1 or w.const.shape[1] % (KSTEP // 2) or all(k == 1 for k in w.const.shape[2:]):
    return False
  y = g.values.get(n.outputs[0])
  if any(int(v) != 1 for k in ("strides", "dilations") for v in n.attrs.get(k, ())) or y is None \
      or not pixel_tiles_fit(int(y.shape[-1]), window=w.const.shape[-1] > 1):
    return False
  return x.dtype == w.dtype and intrinsic_for(w.dtype, target, tf32) is not None


def channels_last_weights(g: Graph, target: Target, tf32: bool = False) -> Graph:
  """``g`` with the weights of every convolution the tensor cores can take stored ``(O, K.., I)`` (module
  docstring); ``g`` itself when there is none. ``tf32``: float32 convolutions qualify too (``precision="tf32"``)."""
  readers: dict[str, list[tuple[Node, int]]] = {}
  for n in g.nodes:
    for k, i in enumerate(n.inputs):
      if i: readers.setdefault(i, []).append((n, k))
  chosen = {n.inputs[1] for n in g.nodes if _takes_tensor_cores(g, n, target, tf32)}
  chosen = {w for w in chosen if all(k == 1 and _takes_tensor_cores(g, n, target, tf32) for n, k in readers[w])
            and w not in g.outputs}
  if not chosen: return g
  values = dict(g.values)
  for w in chosen:
    nd = values[w].const.ndim
    values[w] = dataclasses.replace(values[w], layout=(0, *range(2, nd), 1))
  return dataclasses.replace(g, values=values)


__all__ = ["channels_last_weights"]
