"""Standard tensor-expression workloads with numpy references.

Used by the tests, the benchmarks and the examples: each builder returns a
:class:`Workload` holding the input placeholders, the output tensors, the intermediate
stages by name, and a numpy reference function of the same inputs. ``dtype`` is the float type of the inputs
and stages (float16 and bfloat16 too: the reference then takes the inputs widened to float32).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

import minicomp as mc
from minicomp.ir.ops import NP_DTYPE


@dataclass
class Workload:
  name: str
  inputs: list[mc.Tensor]
  outputs: list[mc.Tensor]
  reference: Callable[..., np.ndarray]
  stages: dict[str, mc.Tensor] = field(default_factory=dict)
  index_high: int = 1            # integer inputs (gather indices) are drawn from [0, index_high)

  def random_inputs(self, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, self.index_high, t.shape).astype(t.dtype) if t.dtype.startswith("int")
            else rng.standard_normal(t.shape).astype(NP_DTYPE[t.dtype]) for t in self.inputs]


def matmul(M: int, N: int, K: int, bias_relu: bool = False, dtype: str = "float32") -> Workload:
  """C = A @ B, optionally D = relu(C + bias)."""
  A = mc.placeholder((M, K), dtype, name="A")
  B = mc.placeholder((K, N), dtype, name="B")
  k = mc.reduce_axis(K, name="k")
  C = mc.compute((M, N), lambda i, j: mc.sum(A[i, k] * B[k, j], axis=k), name="C")
  if not bias_relu:
    return Workload(f"matmul_{M}x{N}x{K}", [A, B], [C], lambda a, b: a @ b, {"C": C})
  bias = mc.placeholder((N,), dtype, name="bias")
  D = mc.compute((M, N), lambda i, j: mc.max(C[i, j] + bias[j], 0.0), name="D")
  return Workload(f"matmul_bias_relu_{M}x{N}x{K}", [A, B, bias], [D], lambda a, b, c: np.maximum(a @ b + c, 0),
                  {"C": C, "D": D})


def batch_matmul(Bt: int, M: int, N: int, K: int, dtype: str = "float32") -> Workload:
  A = mc.placeholder((Bt, M, K), dtype, name="A")
  B = mc.placeholder((Bt, K, N), dtype, name="B")
  k = mc.reduce_axis(K, name="k")
  C = mc.compute((Bt, M, N), lambda b, i, j: mc.sum(A[b, i, k] * B[b, k, j], axis=k), name="C")
  return Workload(f"batch_matmul_{Bt}x{M}x{N}x{K}", [A, B], [C], lambda a, b: np.matmul(a, b), {"C": C})


def embedding(T: int, V: int, D: int, N: int = 0, dtype: str = "float32") -> Workload:
  """Rows of a (V, D) table at T int64 token ids (a gather: the index reads a tensor), wrapped and
  clamped into [0, V) as the ONNX Gather does; with ``N`` > 0 projected, Y = E @ W + b (N columns)."""
  Tab = mc.placeholder((V, D), dtype, name="table")
  ids = mc.placeholder((T,), "int64", name="ids")

  def row(t):
    i = mc.cast(ids[t], "int32")
    return mc.min(mc.max(mc.select(i < 0, i + V, i), 0), V - 1)
  E = mc.compute((T, D), lambda t, d: Tab[row(t), d], name="embed")
  take = lambda x, tab: tab[np.clip(np.where(x < 0, x + V, x), 0, V - 1)]
  if N <= 0: return Workload(f"embedding_{T}x{V}x{D}", [ids, Tab], [E], take, {"embed": E}, index_high=V)
  W = mc.placeholder((D, N), dtype, name="W")
  b = mc.placeholder((N,), dtype, name="b")
  k = mc.reduce_axis(D, name="k")
  C = mc.compute((T, N), lambda t, j: mc.sum(E[t, k] * W[k, j], axis=k), name="C")
  Y = mc.compute((T, N), lambda t, j: C[t, j] + b[j], name="Y")
  return Workload(f"embedding_matmul_{T}x{V}x{D}x{N}", [ids, Tab, W, b], [Y],
                  lambda x, tab, w, bb: take(x, tab) @ w + bb, {"embed": E, "C": C, "Y": Y}, index_high=V)


def pad2d(X: mc.Tensor, pad: int, name: str = "pad") -> mc.Tensor:
  n, c, h, w = X.shape
  return mc.compute((n, c, h + 2 * pad, w + 2 * pad),
                    lambda b, ch, y, x: mc.select(mc.all_of(y >= pad, y < h + pad, x >= pad, x < w + pad),
                                                  X[b, ch, y - pad, x - pad], 0.0), name=name)


def conv2d_ref(x, w, stride, pad, dil, groups=1):
  n, c, h, wd = x.shape
  f, cg, kh, kw = w.shape
  xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
  oh = (h + 2 * pad - dil * (kh - 1) - 1) // stride + 1
  ow = (wd + 2 * pad - dil * (kw - 1) - 1) // stride + 1
  out = np.zeros((n, f, oh, ow), np.float64)
  fpg = f // groups
  for g in range(groups):
    for ry in range(kh):
      for rx in range(kw):
        patch = xp[:, g * cg:(g + 1) * cg, ry * dil: ry * dil + stride * (oh - 1) + 1: stride,
                   rx * dil: rx * dil + stride * (ow - 1) + 1: stride]
        out[:, g * fpg:(g + 1) * fpg] += np.einsum("ncyx,fc->nfyx", patch, w[g * fpg:(g + 1) * fpg, :, ry, rx])
  return out.astype(np.float32)


def conv2d(N: int, C: int, H: int, W: int, F: int, KH: int, stride: int = 1, pad: int = 0, dil: int = 1,
           dtype: str = "float32", channels_last_weights: bool = False) -> Workload:
  """NCHW conv2d as an inlinable pad stage plus a reduction over (rc, ry, rx); weights (F, C, KH, KW) as in ONNX,
  or with ``channels_last_weights`` (F, KH, KW, C), as ``compile`` stores them for the tensor cores
  (graph/layout.py)."""
  X = mc.placeholder((N, C, H, W), dtype, name="X")
  Wt = mc.placeholder((F, KH, KH, C) if channels_last_weights else (F, C, KH, KH), dtype, name="W")
  P = pad2d(X, pad)
  OH = (H + 2 * pad - dil * (KH - 1) - 1) // stride + 1
  OW = (W + 2 * pad - dil * (KH - 1) - 1) // stride + 1
  rc, ry, rx = mc.reduce_axis(C, "rc"), mc.reduce_axis(KH, "ry"), mc.reduce_axis(KH, "rx")
  w_at = (lambda f: Wt[f, ry, rx, rc]) if channels_last_weights else (lambda f: Wt[f, rc, ry, rx])
  Y = mc.compute((N, F, OH, OW), lambda n, f, y, x: mc.sum(
    P[n, rc, y * stride + ry * dil, x * stride + rx * dil] * w_at(f), axis=[rc, ry, rx]), name="conv")
  ref = (lambda x, w: conv2d_ref(x, w.transpose(0, 3, 1, 2), stride, pad, dil)) if channels_last_weights else \
      (lambda x, w: conv2d_ref(x, w, stride, pad, dil))
  return Workload(f"conv2d_{N}x{C}x{H}x{W}_f{F}k{KH}s{stride}p{pad}d{dil}" + ("_ohwi" if channels_last_weights else ""),
                  [X, Wt], [Y], ref, {"pad": P, "conv": Y})


def depthwise_conv2d(N: int, C: int, H: int, W: int, KH: int, stride: int = 1, pad: int = 0,
                     dtype: str = "float32") -> Workload:
  X = mc.placeholder((N, C, H, W), dtype, name="X")
  Wt = mc.placeholder((C, 1, KH, KH), dtype, name="W")
  P = pad2d(X, pad)
  OH = (H + 2 * pad - KH) // stride + 1
  OW = (W + 2 * pad - KH) // stride + 1
  ry, rx = mc.reduce_axis(KH, "ry"), mc.reduce_axis(KH, "rx")
  Y = mc.compute((N, C, OH, OW), lambda n, c, y, x: mc.sum(
    P[n, c, y * stride + ry, x * stride + rx] * Wt[c, 0, ry, rx], axis=[ry, rx]), name="dwconv")
  return Workload(f"depthwise_{N}x{C}x{H}x{W}_k{KH}s{stride}p{pad}", [X, Wt], [Y],
                  lambda x, w: conv2d_ref(x, w, stride, pad, 1, groups=C), {"pad": P, "dwconv": Y})


def softmax(M: int, N: int, dtype: str = "float32") -> Workload:
  """Row softmax in three stages: row max, sum of exp, normalise."""
  X = mc.placeholder((M, N), dtype, name="X")
  k1, k2 = mc.reduce_axis(N, "k"), mc.reduce_axis(N, "k")
  Mx = mc.compute((M,), lambda i: mc.max(X[i, k1], axis=k1), name="rowmax")
  S = mc.compute((M,), lambda i: mc.sum(mc.exp(X[i, k2] - Mx[i]), axis=k2), name="expsum")
  Y = mc.compute((M, N), lambda i, j: mc.exp(X[i, j] - Mx[i]) / S[i], name="softmax")

  def ref(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)
  return Workload(f"softmax_{M}x{N}", [X], [Y], ref, {"rowmax": Mx, "expsum": S, "softmax": Y})


def layernorm(M: int, N: int, eps: float = 1e-5, dtype: str = "float32") -> Workload:
  """Layer normalisation over the last axis (two-pass mean / variance), with gamma and beta."""
  X = mc.placeholder((M, N), dtype, name="X")
  G = mc.placeholder((N,), dtype, name="gamma")
  Bt = mc.placeholder((N,), dtype, name="beta")
  k1, k2 = mc.reduce_axis(N, "k"), mc.reduce_axis(N, "k")
  mean = mc.compute((M,), lambda i: mc.sum(X[i, k1] * (1.0 / N), axis=k1), name="mean")
  var = mc.compute((M,), lambda i: mc.sum((X[i, k2] - mean[i]) * (X[i, k2] - mean[i]) * (1.0 / N), axis=k2), name="var")
  Y = mc.compute((M, N), lambda i, j: (X[i, j] - mean[i]) * mc.rsqrt(var[i] + eps) * G[j] + Bt[j], name="layernorm")

  def ref(x, g, b):
    mu = x.mean(axis=1, keepdims=True)
    v = ((x - mu) ** 2).mean(axis=1, keepdims=True)
    return (x - mu) / np.sqrt(v + eps) * g + b
  return Workload(f"layernorm_{M}x{N}", [X, G, Bt], [Y], ref, {"mean": mean, "var": var, "layernorm": Y})


def row_sum(M: int, N: int, dtype: str = "float32") -> Workload:
  X = mc.placeholder((M, N), dtype, name="X")
  k = mc.reduce_axis(N, "k")
  R = mc.compute((M,), lambda i: mc.sum(X[i, k], axis=k), name="rowsum")
  return Workload(f"row_sum_{M}x{N}", [X], [R], lambda x: x.sum(axis=1), {"rowsum": R})


def broadcast_chain(A: int, B: int, C: int, dtype: str = "float32") -> Workload:
  """Z = relu(X * scale[k] + shift[j]) - 0.5 * sigmoid(X), as four elementwise stages."""
  X = mc.placeholder((A, B, C), dtype, name="X")
  sc = mc.placeholder((C,), dtype, name="scale")
  sh = mc.placeholder((B,), dtype, name="shift")
  T1 = mc.compute((A, B, C), lambda i, j, k: X[i, j, k] * sc[k], name="mul")
  T2 = mc.compute((A, B, C), lambda i, j, k: T1[i, j, k] + sh[j], name="add")
  T3 = mc.compute((A, B, C), lambda i, j, k: mc.max(T2[i, j, k], 0.0), name="relu")
  Z = mc.compute((A, B, C), lambda i, j, k: T3[i, j, k] - 0.5 * mc.sigmoid(X[i, j, k]), name="out")

  def ref(x, s, h):
    return np.maximum(x * s + h[None, :, None], 0) - 0.5 / (1 + np.exp(-x))
  return Workload(f"broadcast_{A}x{B}x{C}", [X, sc, sh], [Z], ref, {"mul": T1, "add": T2, "relu": T3, "out": Z})


def from_call(call: str) -> Workload:
  """The workload a call names (``"minicomp.workloads.matmul(1024, 1024, 1024)"``, or ``"matmul(1024, 1024, 1024)"``).
  Parsed, not evaluated: only a function of this module with literal arguments; anything else is a
  :class:`~minicomp.errors.UsageError` naming the text."""
  import ast
  from minicomp.errors import UsageError
  try:
    node = ast.parse(call.strip(), mode="eval").body
  except SyntaxError:
    node = None
  fn = ast.unparse(node.func) if isinstance(node, ast.Call) else ""
  name = fn.removeprefix("minicomp.workloads.")
  f = globals().get(name) if name and "." not in name and not name.startswith("_") else None
  if not callable(f) or name == "from_call" or getattr(f, "__annotations__", {}).get("return") != "Workload":
    raise UsageError(f"not a call of a minicomp.workloads function: {call!r} (e.g. 'matmul(1024, 1024, 1024)')")
  try:
    out = f(*map(ast.literal_eval, node.args), **{kw.arg: ast.literal_eval(kw.value) for kw in node.keywords})
  except (ValueError, TypeError, SyntaxError) as e:
    raise UsageError(f"{call!r}: {e}") from None
  return out
