"""The float types a model is computed in: its own, float32 throughout, or float32 autocast to a half type.

``compile(model, precision=...)`` (the ``precision`` phase, after BatchNorm folding) calls :func:`apply_precision`:

- ``None`` (the default): the model's own types. A float16 or bfloat16 model stays in its type: its weights and
  activations are stored in 2 bytes, its kernels load and store the half type and compute in float32
  (codegen/cuda.py), reductions accumulate in float32 (ir/nest.py) and softmax's and the norms' statistics are
  kept in float32 (graph/ops/_util.py ``stat_type``).
- ``"fp32"``: every float16 / bfloat16 value of the graph (initializers, intermediates, ``Cast`` targets) is widened
  to float32 (:func:`widen_half`); only the model's boundary keeps the half type: ``CompiledModel.run`` takes half
  inputs, widens them on the host and rounds the outputs back. Twice the bytes, no rounding between ops.
- ``"fp16"`` / ``"bf16"``: :func:`autocast` an fp32 model as ``torch.autocast`` does: weights and activations in
  the half type, except the outputs of the ops in :data:`KEPT_IN_FP32` (exp, log, pow, sums and products, softmax,
  the norms: ops whose values need float32's range), which stay float32; ``Cast`` nodes convert between the two
  where a value crosses (they fuse into the kernels around them). The model's inputs and outputs keep their own
  types. float64 values are left alone, and a node that reads a float constant past the half type's range (an
  attention mask's -1e9 in float16) is computed in float32 too.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from minicomp.errors import CompileError
from minicomp.frontend.dtypes import DTYPE_TO_NP, DTYPE_TO_ONNX
from minicomp.frontend.graph import Graph, Node, Value

PRECISIONS = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
HALF = {"float16", "bfloat16"}
_HALF_ONNX = {DTYPE_TO_ONNX[t] for t in HALF}
_DTYPE_ATTRS = {"Cast": "to", "EyeLike": "dtype", "RandomNormal": "dtype", "RandomUniform": "dtype",
                "RandomNormalLike": "dtype", "RandomUniformLike": "dtype", "Multinomial": "dtype", "Bernoulli": "dtype"}

# torch.autocast's float32 list, in ONNX ops: their outputs need float32's range (exp overflows float16 past 11)
KEPT_IN_FP32 = frozenset({
  "Exp", "Log", "Pow", "Reciprocal", "Softplus", "Softmax", "LogSoftmax", "CumSum",
  "ReduceSum", "ReduceProd", "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSumExp",
  "LayerNormalization", "InstanceNormalization", "GroupNormalization", "LpNormalization", "MeanVarianceNormalization"})
# inputs an op reads in float32 whatever the model computes in: (op, input position)
_FIXED_INPUTS = {("Resize", 1), ("Resize", 2), ("Upsample", 1)}
# ops whose float output type is not their inputs' (an attribute or nothing says it): their inputs are left alone
_ANY_INPUT = {"Cast", "Shape", "Size"}


def check_precision(precision) -> str | None:
  """``precision`` itself, or a CompileError naming the choices."""
  if precision is None or (isinstance(precision, str) and precision in PRECISIONS): return precision
  raise CompileError(f"unknown precision={precision!r}; choose one of {', '.join(PRECISIONS)} "
                     "(or None: the model's own types)")


def apply_precision(g: Graph, precision: str | None) -> Graph:
  """``g`` computed in ``precision`` (see the module docstring); ``g`` itself for None."""
  if precision is None: return g
  if precision == "fp32":
    g.boundary = widen_half(g)
    return g
  return autocast(g, PRECISIONS[precision])


def _overflows(n: Node, values: dict[str, Value], top: float) -> bool:
  """Whether a float constant ``n`` reads holds a finite value past the half type's largest (an attention mask's
  -1e9 in float16): the node is then computed in float32, where the value is what the model says."""
  for name in n.inputs:
    v = values.get(name) if name else None
    if v is not None and v.is_const and v.dtype == "float32":
      a = np.abs(np.asarray(v.const, np.float64))
      if np.any(np.isfinite(a) & (a > top)): return True
  return False


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


def autocast(g: Graph, half: str) -> Graph:
  """A new Graph computing ``g``'s float32 (and other half type's) values in ``half``, but for the outputs of
  :data:`KEPT_IN_FP32`; the graph's inputs and outputs keep their types."""
  values = dict(g.values)
  nodes: list[Node] = []
  casts: dict[tuple[str, str], str] = {}       # (value, dtype) -> the value cast to dtype
  names = set(values) | {n.name for n in g.nodes}

  def fresh(base: str) -> str:
    name, k = base, 1
    while name in names: name, k = f"{base}_{k}", k + 1
    names.add(name)
    return name

  def as_type(name: str, dtype: str) -> str:
    """``name`` in ``dtype``: a converted constant, or the output of one Cast node per value and type."""
    if (name, dtype) in casts: return casts[name, dtype]
    v = values[name]
    new = fresh(f"{name}_{dtype}")
    if v.is_const:
      values[new] = Value(new, v.shape, dtype, np.asarray(v.const).astype(DTYPE_TO_NP[dtype]))
    else:
      values[new] = Value(new, v.shape, dtype)
      nodes.append(Node(fresh(f"autocast_{new}"), "Cast", [name], [new], {"to": DTYPE_TO_ONNX[dtype]}))
    casts[name, dtype] = new
    return new

  def castable(name: str) -> bool:
    return bool(name) and name in values and values[name].dtype in ("float32",) + tuple(HALF)

  outputs = set(g.outputs)
  top = float(ml_dtypes.finfo(DTYPE_TO_NP[half]).max)
  for n in g.nodes:
    want = "float32" if n.op_type in KEPT_IN_FP32 or _overflows(n, values, top) else half
    ins = list(n.inputs)
    if n.op_type not in _ANY_INPUT:
      for k, name in enumerate(ins):
        if castable(name) and (n.op_type, k) not in _FIXED_INPUTS and values[name].dtype != want:
          ins[k] = as_type(name, want)
    attrs = dict(n.attrs)
    key = _DTYPE_ATTRS.get(n.op_type)
    if key in attrs and int(attrs[key]) in {DTYPE_TO_ONNX["float32"]} | _HALF_ONNX:
      attrs[key] = DTYPE_TO_ONNX[want]
    outs, after = list(n.outputs), []
    for k, name in enumerate(outs):
      if not castable(name): continue
      v = values[name]
      if n.op_type == "LayerNormalization" and k > 0: continue         # its statistics: float32 (stash_type)
      if v.dtype == want: continue
      if name in outputs:          # a graph output keeps its type: computed under another name, then cast
        outs[k] = fresh(f"{name}_{want}")
        values[outs[k]] = Value(outs[k], v.shape, want)
        after.append(Node(fresh(f"autocast_{name}"), "Cast", [outs[k]], [name], {"to": DTYPE_TO_ONNX[v.dtype]}))
        casts[name, want] = outs[k]                # its readers in the graph read it before the cast
      else:
        values[name] = Value(name, v.shape, want, None if v.const is None else np.asarray(v.const).astype(DTYPE_TO_NP[want]))
    nodes.append(Node(n.name, n.op_type, ins, outs, attrs, n.domain))
    nodes.extend(after)
  out = Graph(nodes, values, list(g.inputs), list(g.outputs), g.opset, g.name, boundary=dict(g.boundary))
  out.rebuild_nx()
  return out
