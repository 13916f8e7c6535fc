"""The op library's registry: ONNX op type (and opset) -> a function building tensor expressions.

An op function takes an :class:`OpCtx` and the node's inputs, each either a TE
:class:`~minicomp.ir.te.Tensor` (a runtime value), a ``numpy.ndarray`` (a constant: an
initializer or a folded value) or ``None`` (an omitted optional input), and returns the list
of its outputs (Tensors, or arrays when it can compute them at compile time)::

    @op("LeakyRelu", kind="elementwise")
    def leaky_relu(ctx, x):
      alpha = ctx.attr("alpha", 0.01)
      return [ctx.compute(x.shape, lambda *i: mc.select(x[i] >= 0, x[i], x[i] * alpha))]

``kind`` tells the partitioner how the op fuses: ``elementwise`` / ``broadcast`` (fused into a
producer's kernel), ``injective`` (inlined into consumers: pad, transpose, slice, ...),
``view`` (a reshape of contiguous data: no kernel), ``reduction`` and ``data_reuse`` (anchors
of a kernel), ``opaque`` (its own kernel). Registration picks the highest ``since`` opset not
above the model's. An op version newer than ``CHECKED_OPSET`` must be listed in ``NEWER_VERSIONS``
(or have its own registration): a later ONNX that changes an op's meaning gets a refusal, not the
old lowering.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from minicomp.errors import ModelError, UnsupportedOpError
from minicomp.frontend.graph import Node
from minicomp.ir import te
from minicomp.ir.te import Tensor

KINDS = ("elementwise", "broadcast", "injective", "view", "reduction", "data_reuse", "opaque")
_REQUIRED = object()


@dataclass(frozen=True)
class OpDef:
  op_type: str
  since: int
  kind: str
  fn: Callable


_OP_DEFS: dict[str, list[OpDef]] = {}

CHECKED_OPSET = 21   # the lowerings were written against the op versions of opsets up to this one
# Op versions of later opsets (22-28, onnx 1.20) whose change the lowering of the previous version
# covers: new element types only (minicomp's dtype checks refuse those it lacks: bfloat16, float8,
# int4 / int2, float4 / float6), a function body added (DepthToSpace-28), or an attribute the lowering
# reads (SpaceToDepth-28 mode; Range-27 stash_type, for float16 / bfloat16 only; Cast-24 round_mode,
# for float8e8m0 only).
_TYPES_ONLY = (23, 24, 25)
NEWER_VERSIONS = {
  **{n: (22,) for n in ("AveragePool", "Conv", "ConvTranspose", "Dropout", "Elu", "GlobalAveragePool", "GlobalMaxPool",
                        "HardSigmoid", "HardSwish", "InstanceNormalization", "MaxPool", "Round", "Selu", "Softplus",
                        "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh",
                        "Softsign", "ThresholdedRelu", "Mish", "LpNormalization", "NegativeLogLikelihoodLoss")},
  **{n: _TYPES_ONLY for n in ("CastLike", "ConstantOfShape", "Flatten", "Identity", "Pad", "Reshape", "Shape", "Size",
                              "Squeeze", "Transpose", "Unsqueeze")},
  "Cast": _TYPES_ONLY + (28,), "DepthToSpace": (28,), "Einsum": (28,), "Range": (27,), "ReduceLogSumExp": (28,),
  "SpaceToDepth": (28,), "Mod": (28,), "Celu": (28,), "BitShift": (28,), "GridSample": (20, 22), "LpPool": (22,),
  "GlobalLpPool": (22,), "EyeLike": (22,),
  # (23: the precision attribute, read; 24 / 25 / 28: float8e8m0 scales, 2-bit and 6-bit types, refused by type)
  "QuantizeLinear": (23, 24, 25, 28), "DequantizeLinear": (23, 24, 25, 28), "TopK": (24,), "OneHot": (28,),
}


def op(op_type: str, kind: str, since: int = 1):
  """Register ``fn`` as the lowering of ``op_type`` for opsets >= ``since``."""
  if kind not in KINDS: raise ValueError(f"unknown op kind {kind!r}")

  def deco(fn):
    _OP_DEFS.setdefault(op_type, []).append(OpDef(op_type, since, kind, fn))
    _OP_DEFS[op_type].sort(key=lambda d: d.since)
    return fn
  return deco


def onnx_version(op_type: str, opset: int) -> int | None:
  """The version of ``op_type`` in ``opset`` of the default domain (None when ONNX has no such op)."""
  import onnx.defs
  try:
    return onnx.defs.get_schema(op_type, opset, "").since_version
  except onnx.defs.SchemaError:
    return None


def newer_version(op_type: str, opset: int) -> int | None:
  """The op's version at ``opset`` when it is newer than what its lowering was checked against, else None."""
  best = _best(op_type, opset)
  if best is None or opset <= CHECKED_OPSET: return None
  v = onnx_version(op_type, opset)
  if v is None or v <= max(CHECKED_OPSET, best.since) or v in NEWER_VERSIONS.get(op_type, ()): return None
  return v


def _best(op_type: str, opset: int) -> OpDef | None:
  _load_library()
  best = None
  for d in _OP_DEFS.get(op_type, []):
    if d.since <= opset: best = d
  return best


def lookup(op_type: str, opset: int) -> OpDef | None:
  """The registered definition for ``op_type`` at ``opset`` (highest ``since`` <= opset); None also
  when the op's version at ``opset`` is newer than its lowering covers."""
  return None if newer_version(op_type, opset) else _best(op_type, opset)


def supported_ops() -> list[str]:
  _load_library()
  return sorted(_OP_DEFS)


def check_supported(nodes: Sequence[Node], opset: int) -> None:
  """Raise UnsupportedOpError listing *every* node whose op minicomp cannot lower."""
  bad = [(n.op_type, n.name) for n in nodes if n.domain not in ("", "ai.onnx") or lookup(n.op_type, opset) is None]
  if bad:
    def why(n):
      v = newer_version(n.op_type, opset) if n.domain in ("", "ai.onnx") else None
      return f": version {v} (opset {opset}) is newer than its lowering covers (up to opset {CHECKED_OPSET})" if v else ""
    lines = "\n".join(f"  - {n.op_type} (node {n.name!r}){why(n)}" for n in nodes if (n.op_type, n.name) in bad)
    raise UnsupportedOpError(
      f"{len(bad)} node(s) use ops minicomp does not support:\n{lines}\nSupported ops: {', '.join(supported_ops())}", bad)


_loaded = False
_load_lock = threading.RLock()


def _load_library() -> None:
  """Import every op module (each registers its ops), once. Safe from several threads: the flag is set
  only when every module is in (a thread that found it set early used to see MatMul missing)."""
  global _loaded
  if _loaded: return
  with _load_lock:
    if _loaded: return
    import importlib
    import pkgutil
    import minicomp.graph.ops as pkg
    for m in pkgutil.iter_modules(pkg.__path__):
      importlib.import_module(f"{pkg.__name__}.{m.name}")
    _loaded = True


@dataclass
class OpCtx:
  """What an op function may ask: attributes, opset, fresh tensor names, constants."""
  node: Node
  opset: int
  consts: dict[str, np.ndarray] = field(default_factory=dict)   # constant placeholders made so far (shared)
  names: set[str] = field(default_factory=set)                  # tensor names taken (shared)

  def attr(self, name: str, default: Any = _REQUIRED) -> Any:
    if name in self.node.attrs: return self.node.attrs[name]
    if default is _REQUIRED:
      raise ModelError(f"{self.node.op_type} node {self.node.name!r}: required attribute {name!r} is missing")
    return default

  def flag(self, name: str, default: int) -> bool:
    """A 0/1 attribute (keepdims, transB, ceil_mode, ...); any other value is a ModelError (runtimes
    disagree on what keepdims=2 means, so it is refused rather than guessed)."""
    v = self.attr(name, default)
    if isinstance(v, (bool, np.bool_)) or v not in (0, 1):
      raise ModelError(f"{self.node.op_type} node {self.node.name!r}: attribute {name}={v!r} must be 0 or 1")
    return bool(v)

  def error(self, msg: str) -> UnsupportedOpError:
    """An error naming this node, for a form of the op minicomp does not support."""
    return UnsupportedOpError(f"{self.node.op_type} node {self.node.name!r}: {msg}", [(self.node.op_type, self.node.name)])

  def fresh(self, suffix: str = "") -> str:
    """A tensor name not taken yet, made from the op type (never from the model's names, which reach
    the CUDA source as identifiers: see :mod:`minicomp.ir.names`)."""
    base = self.node.op_type.lower() + (f"_{suffix}" if suffix else "")
    name, k = base, 1
    while name in self.names: name, k = f"{base}_{k}", k + 1
    self.names.add(name)
    return name

  def compute(self, shape, fcompute, suffix: str = "") -> Tensor:
    """``te.compute`` with a fresh name made from the op type (:meth:`fresh`)."""
    return te.compute(tuple(int(d) for d in shape), fcompute, name=self.fresh(suffix))

  def reduce_axis(self, extent: int, name: str = "r") -> te.IterVar:
    return te.reduce_axis(int(extent), name=name)

  def const(self, arr: np.ndarray, suffix: str = "const") -> Tensor:
    """A placeholder bound to a constant array (weights); 0-d arrays become shape (1,)."""
    arr = np.asarray(arr)
    if arr.size == 0: raise self.error(f"an empty constant operand {list(arr.shape)} is not supported (no empty tensors)")
    if arr.ndim == 0: arr = arr.reshape(1)
    from minicomp.frontend.dtypes import np_to_dtype
    t = te.placeholder(arr.shape, np_to_dtype(arr.dtype, self.node), name=self.fresh(suffix))
    self.consts[t.name] = arr
    return t

  def tensor(self, v) -> Tensor:
    """A runtime input as is; a constant as a constant placeholder."""
    return v if isinstance(v, Tensor) else self.const(v)
