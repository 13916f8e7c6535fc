"""The float types a model is computed in: its own, float32 throughout, or float32 autocast to a half type.

``compile(model, precision=...)`` (the ``precision`` phase, after BatchNorm folding) calls :func:`apply_precision`:

- ``None`` (the default): the model's own types. A float16 or bfloat16 model stays in its type: its weights and
  activations are stored in 2 bytes, its kernels load and store the half type and compute in float32
  (codegen/cuda.py), reductions accumulate in float32 (ir/nest.py) and softmax's and the norms' statistics are
  kept in float32 (graph/ops/_util.py ``stat_type``).
- ``"fp32"``: every float16 / bfloat16 value of the graph (initializers, intermediates, ``Cast`` targets) is widened
  to float32 (:func:`widen_half`); only the model's boundary keeps the half type: ``CompiledModel.run`` takes half
  inputs, widens them on the host and rounds the outputs back. Twice the bytes, no rounding between ops.
- ``"tf32"``: as ``"fp32"`` here; ``compile`` then also offers the MatMul / Gemm / Conv tasks tensor-core schedules
  whose products round the float32 operands to TF32 (10 mantissa bits; docs/tensor_cores.md), as PyTorch's
  ``torch.backends.cuda.matmul.allow_tf32 = True`` (and cuDNN's default for convolutions) does.
- ``"fp16"`` / ``"bf16"``: :func:`autocast` an fp32 model as ``torch.autocast`` does: the matmuls and
  convolutions (:data:`HALF_OPS`) in the half type, their weights converted once; the ops whose values need
  float32's range (:data:`KEPT_IN_FP32`: exp, log, pow, sums and products, softmax, the norms) in float32; every
  other op in the widest type of its runtime inputs, so a chain after a convolution stays half and a transformer's
  residual stream, which starts from a float32 input, stays float32. ``Cast`` nodes convert where a value crosses
  (they fuse into the kernels around them). The model's inputs and outputs keep their own types, explicit ``Cast``
  nodes theirs; float64 values are left alone; a node that reads a float constant past the half type's range (an
  attention mask's -1e9 in float16) is computed in float32.
"""
from __future__ import annotations

import numpy as np

from minicomp.errors import CompileError
from minicomp.frontend.dtypes import DTYPE_TO_NP, DTYPE_TO_ONNX
from minicomp.frontend.graph import Graph, Node, Value
from minicomp.ir.ops import HALF_DTYPES, finfo

PRECISIONS = {"fp32": "float32", "tf32": "float32", "fp16": "float16", "bf16": "bfloat16"}
_HALF_ONNX = {DTYPE_TO_ONNX[t] for t in HALF_DTYPES}
_DTYPE_ATTRS = {"Cast": "to", "EyeLike": "dtype", "RandomNormal": "dtype", "RandomUniform": "dtype",
                "RandomNormalLike": "dtype", "RandomUniformLike": "dtype", "Multinomial": "dtype", "Bernoulli": "dtype"}

# torch.autocast's float32 list, in ONNX ops: their outputs need float32's range (exp overflows float16 past 11)
KEPT_IN_FP32 = frozenset({
  "Exp", "Log", "Pow", "Reciprocal", "Softplus", "Softmax", "LogSoftmax", "CumSum", "CumProd",
  "Sinh", "Cosh", "Tan", "Asin", "Acos", "RMSNormalization",
  "ReduceSum", "ReduceProd", "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSumExp",
  "LayerNormalization", "InstanceNormalization", "GroupNormalization", "LpNormalization", "MeanVarianceNormalization"})
# torch.autocast's lower-precision list, in ONNX ops: the matmuls and convolutions, where the bytes and the math are
HALF_OPS = frozenset({"MatMul", "Gemm", "Conv", "ConvTranspose", "Einsum", "PRelu"})
# inputs an op reads in float32 whatever the model computes in: (op, input position)
_FIXED_INPUTS = {("Resize", 1), ("Resize", 2), ("Upsample", 1)}
# ops whose output type is not their inputs': left alone (as are the ops of _DTYPE_ATTRS, whose type is explicit)
_ANY_INPUT = {"Shape", "Size"}


def check_precision(precision) -> str | None:
  """``precision`` itself, or a CompileError naming the choices."""
  if precision is None or (isinstance(precision, str) and precision in PRECISIONS): return precision
  raise CompileError(f"unknown precision={precision!r}; choose one of {', '.join(PRECISIONS)} "
                     "(or None: the model's own types)")


def apply_precision(g: Graph, precision: str | None) -> Graph:
  """``g`` computed in ``precision`` (see the module docstring); ``g`` itself for None."""
  if precision is None: return g
  if precision in ("fp32", "tf32"):      # (tf32: float32 values; compile puts the matmuls on TF32 tensor cores)
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
  boundary = {n: g.values[n].dtype for n in g.inputs + g.outputs if n in g.values and g.values[n].dtype in HALF_DTYPES}
  for name, v in list(g.values.items()):
    if v.dtype not in HALF_DTYPES: continue
    const = None if v.const is None else np.asarray(v.const).astype(np.float32)
    g.values[name] = Value(v.name, v.shape, "float32", const)
  for n in g.nodes:
    key = _DTYPE_ATTRS.get(n.op_type)
    if key in n.attrs and int(n.attrs[key]) in _HALF_ONNX: n.attrs[key] = DTYPE_TO_ONNX["float32"]
  return boundary


def autocast(g: Graph, half: str) -> Graph:
  """A new Graph computing ``g`` as ``torch.autocast`` would: :data:`HALF_OPS` in ``half``, :data:`KEPT_IN_FP32`
  in float32, every other op in the widest float type of its runtime inputs (float32 if one of them is); constants
  take the type of the node reading them. The graph's inputs and outputs keep their types; explicit ``Cast`` nodes
  keep theirs. A model holding the other half type is widened to float32 first (:func:`widen_half`); a model with
  no float32 value (one already in ``half``) is returned as it is."""
  if any(v.dtype in HALF_DTYPES and v.dtype != half for v in g.values.values()):
    g.boundary = widen_half(g)
  if not any(v.dtype == "float32" for v in g.values.values()): return g
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
      with np.errstate(over="ignore"):    # (a node whose constants overflow the half type is computed in float32)
        values[new] = Value(new, v.shape, dtype, np.asarray(v.const).astype(DTYPE_TO_NP[dtype]))
    else:
      values[new] = Value(new, v.shape, dtype)
      nodes.append(Node(fresh(f"autocast_{new}"), "Cast", [name], [new], {"to": DTYPE_TO_ONNX[dtype]}))
    casts[name, dtype] = new
    return new

  def floats(n: Node) -> list[int]:
    """The positions of ``n``'s float inputs whose type follows the node's."""
    return [k for k, name in enumerate(n.inputs) if name and name in values and values[name].dtype in ("float32", half)
            and (n.op_type, k) not in _FIXED_INPUTS]

  def node_type(n: Node) -> str | None:
    if n.op_type in _DTYPE_ATTRS or n.op_type in _ANY_INPUT: return None      # explicit types: left alone
    if n.op_type in KEPT_IN_FP32 or _overflows(n, values, top): return "float32"
    if n.op_type in HALF_OPS: return half
    runtime = {values[n.inputs[k]].dtype for k in floats(n) if not values[n.inputs[k]].is_const}
    if not runtime: return None
    return "float32" if "float32" in runtime else half

  outputs = set(g.outputs)
  aliases = dict(g.aliases)
  top = float(finfo(half).max)
  for n in g.nodes:
    want = node_type(n)
    if want is None:
      nodes.append(n)
      continue
    ins = list(n.inputs)
    for k in floats(n):
      if values[ins[k]].dtype != want: ins[k] = as_type(ins[k], want)
    outs, after = list(n.outputs), []
    for k, name in enumerate(outs):
      v = values.get(name) if name else None
      if v is None or v.dtype not in ("float32", half) or v.dtype == want: continue
      if n.op_type == "LayerNormalization" and k > 0: continue         # its statistics: float32 (stash_type)
      if name in outputs:          # a graph output keeps its type: computed under another name, then cast
        outs[k] = fresh(f"{name}_{want}")
        values[outs[k]] = Value(outs[k], v.shape, want)
        after.append(Node(fresh(f"autocast_{name}"), "Cast", [outs[k]], [name], {"to": DTYPE_TO_ONNX[v.dtype]}))
        casts[name, want] = outs[k]                # its readers in the graph read it before the cast
        aliases[outs[k]] = name
      else:
        values[name] = Value(name, v.shape, want)
    nodes.append(Node(n.name, n.op_type, ins, outs, dict(n.attrs), n.domain))
    nodes.extend(after)
  out = Graph(nodes, values, list(g.inputs), list(g.outputs), g.opset, g.name, boundary=dict(g.boundary),
              aliases=aliases)
  return out
