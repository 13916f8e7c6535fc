"""Small ONNX models built with ``onnx.helper`` (no downloads), for tests, benchmarks and examples.

Each builder returns ``(model, feeds)``: an ``onnx.ModelProto`` (opset 17 unless said, IR 8)
and a dict of random inputs. Weights are random with a fixed seed.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class _B:
  """A tiny graph builder: ``b.op("Conv", [x, w], strides=[1, 1])`` returns the output name."""

  def __init__(self, seed: int = 0):
    self.nodes, self.inits, self.k = [], [], 0
    self.rng = np.random.default_rng(seed)

  def w(self, *shape, scale: float | None = None, name: str = "w") -> str:
    fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
    s = scale if scale is not None else 1.0 / np.sqrt(max(fan_in, 1))
    return self.const((self.rng.standard_normal(shape) * s).astype(np.float32), name)

  def const(self, arr, name: str = "c") -> str:
    self.k += 1
    n = f"{name}{self.k}"
    self.inits.append(numpy_helper.from_array(np.asarray(arr), n))
    return n

  def op(self, op_type: str, inputs, n_out: int = 1, **attrs):
    self.k += 1
    outs = [f"{op_type.lower()}{self.k}_{i}" for i in range(n_out)]
    self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=f"{op_type}_{self.k}", **attrs))
    return outs[0] if n_out == 1 else outs

  def bn(self, x: str, c: int) -> str:
    r = self.rng
    return self.op("BatchNormalization", [x, self.const((1 + 0.1 * r.standard_normal(c)).astype(np.float32), "gamma"),
                                          self.const((0.1 * r.standard_normal(c)).astype(np.float32), "beta"),
                                          self.const((0.1 * r.standard_normal(c)).astype(np.float32), "mean"),
                                          self.const((0.5 + r.random(c)).astype(np.float32), "var")], epsilon=1e-5)

  def conv(self, x: str, cin: int, cout: int, k: int, stride: int = 1, pad: int = 0, group: int = 1, bias=True,
           dims: int = 2) -> str:
    ins = [x, self.w(cout, cin // group, *([k] * dims))] + ([self.const(np.zeros(cout, np.float32) + 0.01, "b")] if bias else [])
    return self.op("Conv", ins, kernel_shape=[k] * dims, strides=[stride] * dims, pads=[pad] * (2 * dims), group=group)

  def model(self, inputs: dict, outputs: list[str], opset: int = 17, name: str = "model") -> onnx.ModelProto:
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
           for n, a in inputs.items()]
    g = helper.make_graph(self.nodes, name, ins, [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
                          self.inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    inferred = onnx.shape_inference.infer_shapes(m).graph
    types = {v.name: v.type for v in list(inferred.value_info) + list(inferred.output) if v.type.tensor_type.elem_type}
    for o in m.graph.output:
      if o.name in types: o.type.CopyFrom(types[o.name])
    return m


def _x(seed: int, *shape) -> np.ndarray:
  return np.random.default_rng(seed + 100).standard_normal(shape).astype(np.float32)


def residual_block(n: int = 1, c: int = 8, hw: int = 10):
  """Conv3x3-BN-ReLU-Conv3x3-BN + identity, ReLU (a ResNet basic block)."""
  b = _B(1)
  x = "x"
  y = b.op("Relu", [b.bn(b.conv(x, c, c, 3, pad=1, bias=False), c)])
  y = b.bn(b.conv(y, c, c, 3, pad=1, bias=False), c)
  y = b.op("Relu", [b.op("Add", [y, x])])
  return b.model({"x": _x(1, n, c, hw, hw)}, [y], name="residual_block"), {"x": _x(1, n, c, hw, hw)}


def inverted_residual(n: int = 1, c: int = 8, hw: int = 10, expand: int = 4):
  """MobileNetV2 block: 1x1 expand-BN-Clip(0,6), 3x3 depthwise-BN-Clip, 1x1 project-BN, + input."""
  b = _B(2)
  e = c * expand
  six = b.const(np.array(6.0, np.float32), "six"); zero = b.const(np.array(0.0, np.float32), "zero")
  y = b.op("Clip", [b.bn(b.conv("x", c, e, 1, bias=False), e), zero, six])
  y = b.op("Clip", [b.bn(b.conv(y, e, e, 3, pad=1, group=e, bias=False), e), zero, six])
  y = b.bn(b.conv(y, e, c, 1, bias=False), c)
  y = b.op("Add", [y, "x"])
  return b.model({"x": _x(2, n, c, hw, hw)}, [y], name="inverted_residual"), {"x": _x(2, n, c, hw, hw)}


def grouped_block(n: int = 1, c: int = 8, hw: int = 10, groups: int = 2):
  """ResNeXt-style bottleneck: 1x1-BN-ReLU, 3x3 grouped conv (``groups``)-BN-ReLU, 1x1-BN, + input, ReLU."""
  b = _B(10)
  y = b.op("Relu", [b.bn(b.conv("x", c, c, 1, bias=False), c)])
  y = b.op("Relu", [b.bn(b.conv(y, c, c, 3, pad=1, group=groups, bias=False), c)])
  y = b.bn(b.conv(y, c, c, 1, bias=False), c)
  y = b.op("Relu", [b.op("Add", [y, "x"])])
  return b.model({"x": _x(10, n, c, hw, hw)}, [y], name="grouped_block"), {"x": _x(10, n, c, hw, hw)}


def _layernorm(b: _B, x: str, d: int) -> str:
  return b.op("LayerNormalization", [x, b.const(np.ones(d, np.float32) + 0.1 * b.rng.standard_normal(d).astype(np.float32), "ln_g"),
                                     b.const(0.1 * b.rng.standard_normal(d).astype(np.float32), "ln_b")], axis=-1, epsilon=1e-5)


def _attention(b: _B, x: str, s: int, d: int, heads: int, mask: str | None = None) -> str:
  hd = d // heads
  def proj(t): return b.op("MatMul", [t, b.w(d, d)])
  def split_heads(t):   # (1, s, d) -> (1, heads, s, hd)
    r = b.op("Reshape", [t, b.const(np.array([1, s, heads, hd], np.int64), "shape")])
    return b.op("Transpose", [r], perm=[0, 2, 1, 3])
  q, k, v = (split_heads(proj(x)) for _ in range(3))
  kt = b.op("Transpose", [k], perm=[0, 1, 3, 2])
  scores = b.op("Div", [b.op("MatMul", [q, kt]), b.const(np.array(np.sqrt(hd), np.float32), "scale")])
  if mask is not None: scores = b.op("Add", [scores, mask])
  p = b.op("Softmax", [scores], axis=-1)
  o = b.op("Transpose", [b.op("MatMul", [p, v])], perm=[0, 2, 1, 3])
  o = b.op("Reshape", [o, b.const(np.array([1, s, d], np.int64), "shape")])
  return proj(o)


def _gelu_erf(b: _B, x: str) -> str:
  inner = b.op("Erf", [b.op("Div", [x, b.const(np.array(np.sqrt(2.0), np.float32), "sqrt2")])])
  one = b.const(np.array(1.0, np.float32), "one"); half = b.const(np.array(0.5, np.float32), "half")
  return b.op("Mul", [b.op("Mul", [x, half]), b.op("Add", [inner, one])])


def transformer_encoder(s: int = 8, d: int = 32, heads: int = 4, ff: int = 64):
  """Pre-norm encoder block: LayerNorm, multi-head attention, residual, LayerNorm, GELU MLP, residual."""
  b = _B(3)
  h = b.op("Add", ["x", _attention(b, _layernorm(b, "x", d), s, d, heads)])
  m = b.op("MatMul", [_gelu_erf(b, b.op("Add", [b.op("MatMul", [_layernorm(b, h, d), b.w(d, ff)]),
                                                  b.const(np.zeros(ff, np.float32), "b1")])), b.w(ff, d)])
  y = b.op("Add", [h, m])
  return b.model({"x": _x(3, 1, s, d)}, [y], name="transformer_encoder"), {"x": _x(3, 1, s, d)}


def _rmsnorm(b: _B, x: str, d: int) -> str:
  ms = b.op("ReduceMean", [b.op("Mul", [x, x])], axes=[-1], keepdims=1)
  inv = b.op("Reciprocal", [b.op("Sqrt", [b.op("Add", [ms, b.const(np.array(1e-6, np.float32), "eps")])])])
  return b.op("Mul", [b.op("Mul", [x, inv]), b.const(np.ones(d, np.float32), "rms_w")])


def decoder_block(s: int = 8, d: int = 32, heads: int = 4, ff: int = 64):
  """Decoder block: RMSNorm, causal self-attention (Trilu mask + Where), residual, RMSNorm, SiLU MLP."""
  b = _B(4)
  ones = b.const(np.ones((s, s), np.float32), "ones")
  keep = b.op("Cast", [b.op("Trilu", [ones], upper=0)], to=TensorProto.BOOL)
  mask = b.op("Where", [keep, b.const(np.array(0.0, np.float32), "zero"), b.const(np.array(-1e9, np.float32), "neg")])
  h = b.op("Add", ["x", _attention(b, _rmsnorm(b, "x", d), s, d, heads, mask)])
  u = b.op("MatMul", [_rmsnorm(b, h, d), b.w(d, ff)])
  silu = b.op("Mul", [u, b.op("Sigmoid", [u])])
  y = b.op("Add", [h, b.op("MatMul", [silu, b.w(ff, d)])])
  return b.model({"x": _x(4, 1, s, d)}, [y], name="decoder_block"), {"x": _x(4, 1, s, d)}


def _repeat_kv(b: _B, x: str, n_rep: int) -> str:
  """Llama's ``repeat_kv`` as PyTorch's TorchScript exporter (opset 17) writes it: x (B, KVH, S, D) ->
  (B, KVH * n_rep, S, D) through ``x[:, :, None].expand(B, KVH, n_rep, S, D).reshape(B, KVH * n_rep, S, D)``,
  every size read back with Shape/Gather, and ``expand``'s -1 handling ``Where(Equal(size, -ones), ones, size)``
  with ones from ConstantOfShape (ONNX's shape inference cannot see through those)."""
  def c(arr): return b.op("Constant", [], value=numpy_helper.from_array(np.asarray(arr)))
  shape = b.op("Shape", [x])
  bs, kvh, s, d = (b.op("Gather", [shape, c(np.array(i, np.int64))], axis=0) for i in range(4))
  ax0 = c(np.array([0], np.int64))
  def unsq(t): return b.op("Unsqueeze", [t, ax0])
  size = b.op("Concat", [unsq(bs), unsq(kvh), c(np.array([n_rep], np.int64)), unsq(s), unsq(d)], axis=0)
  size = b.op("Reshape", [size, c(np.array([-1], np.int64))])
  ones = b.op("ConstantOfShape", [c(np.array([5], np.int64))], value=numpy_helper.from_array(np.array([1], np.int64)))
  neg = b.op("Mul", [ones, c(np.array(-1, np.int64))])
  size = b.op("Where", [b.op("Equal", [size, neg]), ones, size])
  y = b.op("Expand", [b.op("Unsqueeze", [x, c(np.array([2], np.int64))]), size])
  heads = b.op("Mul", [kvh, c(np.array(n_rep, np.int64))])
  return b.op("Reshape", [y, b.op("Concat", [unsq(bs), unsq(heads), unsq(s), unsq(d)], axis=0)])


def repeat_kv(n: int = 1, kv_heads: int = 2, s: int = 8, hd: int = 8, n_rep: int = 2):
  """The bare exported ``repeat_kv`` chain (see ``_repeat_kv``) on an input k of shape (n, kv_heads, s, hd)."""
  b = _B(8)
  y = _repeat_kv(b, "k", n_rep)
  return b.model({"k": _x(8, n, kv_heads, s, hd)}, [y], name="repeat_kv"), {"k": _x(8, n, kv_heads, s, hd)}


def llama_block(s: int = 8, heads: int = 4, kv_heads: int = 2, hd: int = 8, ff: int = 64):
  """Llama-style decoder layer: RMSNorm, grouped-query causal attention (kv heads repeated by the
  exported ``repeat_kv`` chain), residual, RMSNorm, SwiGLU MLP, residual. No rotary embedding."""
  b = _B(9)
  d = heads * hd
  ones = b.const(np.ones((s, s), np.float32), "ones")
  keep = b.op("Cast", [b.op("Trilu", [ones], upper=0)], to=TensorProto.BOOL)
  mask = b.op("Where", [keep, b.const(np.array(0.0, np.float32), "zero"), b.const(np.array(-1e9, np.float32), "neg")])
  def heads_of(t, h):   # (1, s, h * hd) -> (1, h, s, hd)
    r = b.op("Reshape", [t, b.const(np.array([1, s, h, hd], np.int64), "shape")])
    return b.op("Transpose", [r], perm=[0, 2, 1, 3])
  x = _rmsnorm(b, "x", d)
  q = heads_of(b.op("MatMul", [x, b.w(d, d)]), heads)
  k = _repeat_kv(b, heads_of(b.op("MatMul", [x, b.w(d, kv_heads * hd)]), kv_heads), heads // kv_heads)
  v = _repeat_kv(b, heads_of(b.op("MatMul", [x, b.w(d, kv_heads * hd)]), kv_heads), heads // kv_heads)
  scores = b.op("Div", [b.op("MatMul", [q, b.op("Transpose", [k], perm=[0, 1, 3, 2])]),
                        b.const(np.array(np.sqrt(hd), np.float32), "scale")])
  p = b.op("Softmax", [b.op("Add", [scores, mask])], axis=-1)
  o = b.op("Transpose", [b.op("MatMul", [p, v])], perm=[0, 2, 1, 3])
  o = b.op("Reshape", [o, b.const(np.array([1, s, d], np.int64), "shape")])
  h = b.op("Add", ["x", b.op("MatMul", [o, b.w(d, d)])])
  u = _rmsnorm(b, h, d)
  gate = b.op("MatMul", [u, b.w(d, ff)])
  up = b.op("MatMul", [u, b.w(d, ff)])
  act = b.op("Mul", [b.op("Mul", [gate, b.op("Sigmoid", [gate])]), up])
  y = b.op("Add", [h, b.op("MatMul", [act, b.w(ff, d)])])
  return b.model({"x": _x(9, 1, s, d)}, [y], name="llama_block"), {"x": _x(9, 1, s, d)}


def llama_block_23(s: int = 8, heads: int = 4, kv_heads: int = 2, hd: int = 8, ff: int = 64):
  """The Llama decoder layer as recent exporters write it at opset 23: RMSNormalization, RotaryEmbedding on the
  query and key heads (position ids a graph input), grouped-query causal Attention, residual, RMSNormalization,
  SwiGLU MLP, residual. Inputs ``x [1, s, heads * hd]`` and ``pos [1, s]`` (int64)."""
  b = _B(14)
  d = heads * hd
  def heads_of(t, h):   # (1, s, h * hd) -> (1, h, s, hd)
    r = b.op("Reshape", [t, b.const(np.array([1, s, h, hd], np.int64), "shape")])
    return b.op("Transpose", [r], perm=[0, 2, 1, 3])
  rms = lambda t: b.op("RMSNormalization", [t, b.const((1 + 0.1 * b.rng.standard_normal(d)).astype(np.float32), "rms_w")],
                       axis=-1, epsilon=1e-6)
  angle = np.outer(np.arange(2 * s), 10000.0 ** (-np.arange(0, hd, 2) / hd))          # [positions, hd / 2]
  cos, sin = b.const(np.cos(angle).astype(np.float32), "cos"), b.const(np.sin(angle).astype(np.float32), "sin")
  rope = lambda t: b.op("RotaryEmbedding", [t, cos, sin, "pos"])
  x = rms("x")
  q = rope(heads_of(b.op("MatMul", [x, b.w(d, d)]), heads))
  k = rope(heads_of(b.op("MatMul", [x, b.w(d, kv_heads * hd)]), kv_heads))
  v = heads_of(b.op("MatMul", [x, b.w(d, kv_heads * hd)]), kv_heads)
  o = b.op("Transpose", [b.op("Attention", [q, k, v], is_causal=1)], perm=[0, 2, 1, 3])
  o = b.op("Reshape", [o, b.const(np.array([1, s, d], np.int64), "shape")])
  h = b.op("Add", ["x", b.op("MatMul", [o, b.w(d, d)])])
  u = rms(h)
  gate = b.op("MatMul", [u, b.w(d, ff)])
  act = b.op("Mul", [b.op("Mul", [gate, b.op("Sigmoid", [gate])]), b.op("MatMul", [u, b.w(d, ff)])])
  y = b.op("Add", [h, b.op("MatMul", [act, b.w(ff, d)])])
  feeds = {"x": _x(14, 1, s, d), "pos": (np.arange(s, dtype=np.int64) + 3)[None]}
  return b.model(feeds, [y], opset=23, name="llama_block_23"), feeds


def generator(n: int = 1, z: int = 16, c: int = 8):
  """DCGAN-style stack: ConvTranspose 4x4 s1 (1x1 -> 4x4), BN, ReLU, ConvTranspose 4x4 s2 p1 (-> 8x8), Tanh."""
  b = _B(5)
  y = b.op("ConvTranspose", ["x", b.w(z, c, 4, 4)], kernel_shape=[4, 4], strides=[1, 1])
  y = b.op("Relu", [b.bn(y, c)])
  y = b.op("ConvTranspose", [y, b.w(c, 3, 4, 4)], kernel_shape=[4, 4], strides=[2, 2], pads=[1, 1, 1, 1])
  y = b.op("Tanh", [y])
  return b.model({"x": _x(5, n, z, 1, 1)}, [y], name="generator"), {"x": _x(5, n, z, 1, 1)}


def conv3d_block(n: int = 1, c: int = 4, d: int = 6):
  """Conv3d 3x3x3 pad 1 + bias, ReLU, MaxPool3d 2x2x2."""
  b = _B(6)
  y = b.op("Relu", [b.conv("x", c, 2 * c, 3, pad=1, dims=3)])
  y = b.op("MaxPool", [y], kernel_shape=[2, 2, 2], strides=[2, 2, 2])
  return b.model({"x": _x(6, n, c, d, d, d)}, [y], name="conv3d_block"), {"x": _x(6, n, c, d, d, d)}


def resnet18(n: int = 1, hw: int = 224, classes: int = 1000, width: int = 64):
  """A ResNet-18-shaped model (stem, 4 stages of 2 basic blocks, global pool, FC), for compile-time benchmarks."""
  b = _B(7)
  y = b.op("Relu", [b.bn(b.conv("x", 3, width, 7, stride=2, pad=3, bias=False), width)])
  y = b.op("MaxPool", [y], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
  c = width
  for stage, cout in enumerate([width, width * 2, width * 4, width * 8]):
    for blk in range(2):
      stride = 2 if stage > 0 and blk == 0 else 1
      t = b.op("Relu", [b.bn(b.conv(y, c, cout, 3, stride=stride, pad=1, bias=False), cout)])
      t = b.bn(b.conv(t, cout, cout, 3, pad=1, bias=False), cout)
      sc = y if stride == 1 and c == cout else b.bn(b.conv(y, c, cout, 1, stride=stride, bias=False), cout)
      y = b.op("Relu", [b.op("Add", [t, sc])])
      c = cout
  y = b.op("Flatten", [b.op("GlobalAveragePool", [y])], axis=1)
  y = b.op("Gemm", [y, b.w(classes, c), b.const(np.zeros(classes, np.float32), "fc_b")], transB=1)
  return b.model({"x": _x(7, n, 3, hw, hw)}, [y], name="resnet18"), {"x": _x(7, n, 3, hw, hw)}


def mobilenet_v2(n: int = 1, hw: int = 224, classes: int = 1000):
  """A MobileNetV2-shaped model (width 1.0: stem, the 17 inverted-residual blocks of the paper's table 2, 1x1 conv
  to 1280, global pool, FC), for compile-time benchmarks."""
  b = _B(11)
  six = b.const(np.array(6.0, np.float32), "six"); zero = b.const(np.array(0.0, np.float32), "zero")
  relu6 = lambda t: b.op("Clip", [t, zero, six])   # noqa: E731
  y = relu6(b.bn(b.conv("x", 3, 32, 3, stride=2, pad=1, bias=False), 32))
  c = 32
  for t, cout, reps, stride in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                                (6, 160, 3, 2), (6, 320, 1, 1)):
    for r in range(reps):
      e, st = c * t, stride if r == 0 else 1
      h = relu6(b.bn(b.conv(y, c, e, 1, bias=False), e)) if t != 1 else y
      h = relu6(b.bn(b.conv(h, e, e, 3, stride=st, pad=1, group=e, bias=False), e))
      h = b.bn(b.conv(h, e, cout, 1, bias=False), cout)
      y = b.op("Add", [h, y]) if st == 1 and c == cout else h
      c = cout
  y = relu6(b.bn(b.conv(y, c, 1280, 1, bias=False), 1280))
  y = b.op("Flatten", [b.op("GlobalAveragePool", [y])], axis=1)
  y = b.op("Gemm", [y, b.w(classes, 1280), b.const(np.zeros(classes, np.float32), "fc_b")], transB=1)
  return b.model({"x": _x(11, n, 3, hw, hw)}, [y], name="mobilenet_v2"), {"x": _x(11, n, 3, hw, hw)}


def bert_tiny(s: int = 128, layers: int = 2, d: int = 128, heads: int = 2, ff: int = 512):
  """A BERT-tiny-shaped encoder (2 post-norm layers of width 128, 2 heads, GELU MLP of 512) on embedded inputs,
  for compile-time benchmarks."""
  b = _B(12)
  h = _layernorm(b, "x", d)
  for _ in range(layers):
    h = _layernorm(b, b.op("Add", [h, _attention(b, h, s, d, heads)]), d)
    m = b.op("MatMul", [_gelu_erf(b, b.op("Add", [b.op("MatMul", [h, b.w(d, ff)]), b.const(np.zeros(ff, np.float32), "b1")])),
                        b.w(ff, d)])
    h = _layernorm(b, b.op("Add", [h, b.op("Add", [m, b.const(np.zeros(d, np.float32), "b2")])]), d)
  return b.model({"x": _x(12, 1, s, d)}, [h], name="bert_tiny"), {"x": _x(12, 1, s, d)}


def lstm_tagger(t: int = 6, batch: int = 2, vocab: int = 40, emb: int = 16, hidden: int = 16, tags: int = 5):
  """A sequence tagger: token embeddings (Gather), a bidirectional LSTM, a linear layer over both directions' states
  and LogSoftmax over the tags; tokens ``[t, batch]`` int64, output ``[t, batch, tags]``."""
  b = _B(13)
  e = b.op("Gather", [b.w(vocab, emb, scale=1.0), "tokens"])                      # [t, batch, emb]
  y = b.op("LSTM", [e, b.w(2, 4 * hidden, emb), b.w(2, 4 * hidden, hidden), b.w(2, 8 * hidden, scale=0.1)],
           hidden_size=hidden, direction="bidirectional")                      # [t, 2, batch, hidden]
  y = b.op("Reshape", [b.op("Transpose", [y], perm=[0, 2, 1, 3]), b.const(np.array([t, batch, 2 * hidden]), "shape")])
  y = b.op("Add", [b.op("MatMul", [y, b.w(2 * hidden, tags)]), b.const(np.zeros(tags, np.float32) + 0.1, "b")])
  tokens = np.random.default_rng(113).integers(0, vocab, (t, batch)).astype(np.int64)
  return b.model({"tokens": tokens}, [b.op("LogSoftmax", [y], axis=-1)], name="lstm_tagger"), {"tokens": tokens}


TEST_MODELS = {"residual_block": residual_block, "inverted_residual": inverted_residual,
               "transformer_encoder": transformer_encoder, "decoder_block": decoder_block, "generator": generator,
               "conv3d_block": conv3d_block, "llama_block": llama_block, "grouped_block": grouped_block,
               "lstm_tagger": lstm_tagger, "llama_block_23": llama_block_23}
