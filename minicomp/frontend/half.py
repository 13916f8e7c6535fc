"""Half-precision models (float16, bfloat16) computed in float32.

minicomp's kernels compute in float32: every float16 / bfloat16 value of the graph (initializers,
intermediates, ``Cast`` targets) is widened to float32 at import, and only the model's boundary keeps
the half type: ``CompiledModel.run`` takes float16 (or bfloat16) inputs, widens them on the host,
and rounds the outputs back. Accumulation is in float32, as the issue asks, and values are not
rounded to half between ops: results agree with onnxruntime to half precision and are usually
closer to the exact value. The cost is bandwidth (kernels move 4-byte values). The emitter can store
float16 and compute in float32 (docs/api.md, element types); keeping a model's half values through import,
fusion and the saved format is the next step.
"""
from __future__ import annotations

import numpy as np

from minicomp.frontend.dtypes import DTYPE_TO_ONNX
from minicomp.frontend.graph import Graph, Value

HALF = {"float16", "bfloat16"}
_HALF_ONNX = {DTYPE_TO_ONNX[t] for t in HALF}
_DTYPE_ATTRS = {"Cast": "to", "EyeLike": "dtype", "RandomNormal": "dtype", "RandomUniform": "dtype",
                "RandomNormalLike": "dtype", "RandomUniformLike": "dtype", "Multinomial": "dtype", "Bernoulli": "dtype"}


def widen_half(g: Graph) -> dict[str, str]:
  """Widen ``g``'s half values to float32 in place; returns {input or output name: its half dtype}."""
  boundary = {n: g.values[n].dtype for n in g.inputs + g.outputs if n in g.values and g.values[n].dtype in HALF}
  for name, v in list(g.values.items()):
    if v.dtype not in HALF: continue
    const = None if v.const is None else np.asarray(v.const).astype(np.float32)
    g.values[name] = Value(v.name, v.shape, "float32", const)
  for n in g.nodes:
    key = _DTYPE_ATTRS.get(n.op_type)
    if key in n.attrs and int(n.attrs[key]) in _HALF_ONNX: n.attrs[key] = DTYPE_TO_ONNX["float32"]
  return boundary
