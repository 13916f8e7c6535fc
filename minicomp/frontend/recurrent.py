"""LSTM, GRU and RNN as function bodies of simpler ops, unrolled over the (static) sequence length.

ONNX defines the recurrent ops by their equations, not by a function body, so minicomp writes the body for each
node from its attributes and input shapes, and ``frontend.expand`` inlines it like ONNX's own bodies. Per
direction, the input projection of every time step is one Gemm (``X @ W^T + Wb + Rb`` for all T*B rows), and each
step is a Gather of its rows, ``H @ R^T`` and the gates' elementwise ops: a matmul kernel with its gates fused into
it per step, the time loop unrolled into kernel calls (more than ``MAX_TIME_STEPS`` steps are refused naming the
node: a bidirectional LSTM of 100 steps compiles in 8 s, of 400 in 49 s, on 2 cores). The equations, gate orders
(LSTM ``iofc``, peepholes ``iof``; GRU ``zrh``), ``activations`` with ``activation_alpha``/``beta`` (consumed in
order by the activations that take them, the operators' defaults otherwise), ``clip`` (on every gate's input to its
activation), ``input_forget`` (``f = 1 - i``), GRU's ``linear_before_reset``, ``direction`` (forward, reverse,
bidirectional), ``layout`` and ``sequence_lens`` (a batch entry's state stops changing after its length and its
``Y`` rows are 0, so a reverse pass starts at its last valid step; an entry of length 0 has ``Y_h`` and ``Y_c`` 0)
follow the ONNX operator specification and onnxruntime, which the tests compare against.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from minicomp.errors import UnsupportedOpError

# activation name -> (ONNX op or None for a composite, its (attribute, default) parameters in alpha, beta order)
ACTIVATIONS = {
  "relu": ("Relu", ()), "tanh": ("Tanh", ()), "sigmoid": ("Sigmoid", ()), "softsign": ("Softsign", ()),
  "softplus": ("Softplus", ()), "leakyrelu": ("LeakyRelu", (("alpha", 0.01),)),
  "thresholdedrelu": ("ThresholdedRelu", (("alpha", 1.0),)), "elu": ("Elu", (("alpha", 1.0),)),
  "hardsigmoid": ("HardSigmoid", (("alpha", 0.2), ("beta", 0.5))),
  "affine": (None, (("alpha", 1.0), ("beta", 0.0))), "scaledtanh": (None, (("alpha", 1.0), ("beta", 1.0))),
}
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
MAX_TIME_STEPS = 1024
DEFAULT_ACTS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"], "RNN": ["Tanh"]}


class _Body:
  """A function body under construction: ``op`` appends a node and returns its (first) output's name."""

  def __init__(self, np_dtype):
    self.nodes: list[onnx.NodeProto] = []
    self.dtype = np_dtype

  def op(self, op_type: str, *inputs: str, outputs: int = 1, **attrs):
    names = [f"r{len(self.nodes)}_{k}" for k in range(outputs)]
    self.nodes.append(helper.make_node(op_type, list(inputs), names, **attrs))
    return names[0] if outputs == 1 else names

  def const(self, value, dtype=None) -> str:
    arr = np.asarray(value, dtype=dtype or self.dtype)
    return self.op("Constant", value=numpy_helper.from_array(arr))

  def index(self, x: str, i: int, axis: int = 0) -> str:
    """``x`` at index ``i`` of ``axis`` (that axis dropped)."""
    return self.op("Gather", x, self.const(np.int64(i), np.int64), axis=axis)

  def cols(self, x: str, lo: int, hi: int) -> str:
    """Columns ``lo:hi`` of a 2-D ``x``."""
    c = lambda v: self.const([v], np.int64)
    return self.op("Slice", x, c(lo), c(hi), c(1))

  def activation(self, x: str, act: tuple[str, tuple[float, ...]], clip: float | None) -> str:
    if clip is not None: x = self.op("Clip", x, self.const(-clip), self.const(clip))
    name, params = act
    onnx_op, names = ACTIVATIONS[name]
    if onnx_op is not None:
      return self.op(onnx_op, x, **{a: float(v) for (a, _), v in zip(names, params)})
    alpha, beta = params
    if name == "affine": return self.op("Add", self.op("Mul", x, self.const(alpha)), self.const(beta))
    return self.op("Mul", self.op("Tanh", self.op("Mul", x, self.const(beta))), self.const(alpha))   # scaledtanh


def _where(node) -> str: return f"{node.op_type} node {node.name!r}"


def _activations(node, attrs: dict, dirs: int) -> list[list[tuple[str, tuple[float, ...]]]]:
  """Per direction, the op's activations as ``(name, parameters)``."""
  per = len(DEFAULT_ACTS[node.op_type])
  names = [a.decode() if isinstance(a, bytes) else a for a in attrs.get("activations", [])]
  if not names: names = DEFAULT_ACTS[node.op_type] * dirs
  if len(names) != per * dirs:
    raise UnsupportedOpError(f"{_where(node)}: {len(names)} activations given, {per * dirs} expected "
                             f"({per} per direction)")
  alphas, betas = list(attrs.get("activation_alpha", [])), list(attrs.get("activation_beta", []))
  out = []
  for n in names:
    key = n.lower()
    if key not in ACTIVATIONS:
      raise UnsupportedOpError(f"{_where(node)}: activation {n!r} is not one ONNX defines "
                               f"({', '.join(sorted(ACTIVATIONS))})")
    params = []
    for attr, default in ACTIVATIONS[key][1]:
      src = alphas if attr == "alpha" else betas
      params.append(float(src.pop(0)) if src else default)
    out.append((key, tuple(params)))
  return [out[d * per:(d + 1) * per] for d in range(dirs)]


def _shape(types, name: str, node) -> list[int]:
  t = types.get(name)
  dims = [d.dim_value if d.HasField("dim_value") else None for d in t.tensor_type.shape.dim] if t else None
  if dims is None or any(d is None for d in dims):
    raise UnsupportedOpError(f"{_where(node)}: input {name!r} needs a static shape (the time loop is unrolled)")
  return dims


def recurrent_body(node: onnx.NodeProto, types: dict, opset: int) -> onnx.FunctionProto:
  """The body of an LSTM / GRU / RNN ``node`` (module docstring); its formal inputs and outputs are ``in<k>`` and
  ``out<k>`` for the node's positions."""
  kind = node.op_type
  attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
  direction = attrs.get("direction", b"forward")
  direction = direction.decode() if isinstance(direction, bytes) else direction
  if direction not in ("forward", "reverse", "bidirectional"):
    raise UnsupportedOpError(f"{_where(node)}: direction {direction!r} is not forward, reverse or bidirectional")
  dirs = 2 if direction == "bidirectional" else 1
  layout = int(attrs.get("layout", 0))
  clip = float(attrs["clip"]) if "clip" in attrs else None
  acts = _activations(node, attrs, dirs)
  ins = list(node.input) + [""] * (8 - len(node.input))
  given = lambda k: bool(ins[k])
  x_shape = _shape(types, ins[0], node)
  w_shape = _shape(types, ins[1], node)
  x_type = types[ins[0]].tensor_type.elem_type
  b = _Body(helper.tensor_dtype_to_np_dtype(x_type))
  T, B = (x_shape[1], x_shape[0]) if layout else (x_shape[0], x_shape[1])
  G, H = GATES[kind], w_shape[1] // GATES[kind]
  if "hidden_size" in attrs and int(attrs["hidden_size"]) != H:
    raise UnsupportedOpError(f"{_where(node)}: hidden_size {attrs['hidden_size']} does not match W's {w_shape[1]} "
                             f"rows ({G} gates)")
  if w_shape[0] != dirs:
    raise UnsupportedOpError(f"{_where(node)}: W has {w_shape[0]} directions, direction={direction!r} needs {dirs}")

  if T > MAX_TIME_STEPS:
    raise UnsupportedOpError(f"{_where(node)}: {T} time steps; minicomp unrolls a recurrence over time into a "
                             f"kernel call per step and refuses more than {MAX_TIME_STEPS} (compiling takes minutes "
                             "before that)")
  X = b.op("Transpose", "in0", perm=[1, 0, 2]) if layout else "in0"               # [T, B, I]
  X2 = b.op("Reshape", X, b.const([T * B, x_shape[2]], np.int64))
  state = lambda k: (b.op("Transpose", f"in{k}", perm=[1, 0, 2]) if layout else f"in{k}") if given(k) else None
  h0, c0 = state(5), (state(6) if kind == "LSTM" else None)
  zeros = b.const(np.zeros((B, H)))
  masks = None
  if given(4):   # sequence_lens: [B] int32; step t changes a batch entry's state only where t < its length
    lens = b.op("Unsqueeze", "in4", b.const([1], np.int64))                        # [B, 1]
    masks = [b.op("Less", b.const(np.int32(t), np.int32), lens) for t in range(T)]

  ys, hs, cs = [], [], []
  for d in range(dirs):
    W, R = b.index("in1", d), b.index("in2", d)                                    # [G H, I], [G H, H]
    bias = b.index("in3", d) if given(3) else None                                 # [2 G H]
    wb = rb = None
    if bias is not None:                                                           # [Wb; Rb]
      half = lambda lo, hi: b.op("Slice", bias, b.const([lo], np.int64), b.const([hi], np.int64))
      wb, rb = half(0, G * H), half(G * H, 2 * G * H)
    lbr = kind == "GRU" and bool(attrs.get("linear_before_reset", 0))
    if lbr and bias is not None:   # Rbh is added inside the reset gate's product, the other biases up front
      rb_front = b.op("Mul", rb, b.const([1.0] * (2 * H) + [0.0] * H))
    gemm_in = [X2, W] + ([b.op("Add", wb, rb_front if lbr else rb)] if bias is not None else [])
    XW = b.op("Reshape", b.op("Gemm", *gemm_in, transB=1), b.const([T, B, G * H], np.int64))
    RT = b.op("Transpose", R)                                                      # [H, G H]
    h = b.index(h0, d) if h0 else zeros
    c = (b.index(c0, d) if c0 else zeros) if kind == "LSTM" else None
    P = b.index("in7", d) if kind == "LSTM" and given(7) else None
    steps = range(T - 1, -1, -1) if direction == "reverse" or d == 1 else range(T)
    y = [None] * T
    for t in steps:
      xt = b.index(XW, t)                                                          # [B, G H]
      if kind == "LSTM":
        h_new, c_new = _lstm_step(b, xt, h, c, RT, P, H, acts[d], clip, bool(attrs.get("input_forget", 0)))
      elif kind == "GRU":
        h_new, c_new = _gru_step(b, xt, h, RT, rb, H, acts[d], clip, lbr), None
      else:
        h_new, c_new = b.activation(b.op("Add", xt, b.op("MatMul", h, RT)), acts[d][0], clip), None
      if masks:
        y[t] = b.op("Where", masks[t], h_new, zeros)
        h = b.op("Where", masks[t], h_new, h)
        if c is not None: c = b.op("Where", masks[t], c_new, c)
      else:
        y[t] = h = h_new
        c = c_new
    ys.append(b.op("Concat", *[b.op("Unsqueeze", v, b.const([0, 1], np.int64)) for v in y], axis=0))   # [T, 1, B, H]
    if masks:   # an entry of length 0 has no last step: its Y_h (Y_c) is 0, as onnxruntime gives, not its initial state
      ran = b.op("Less", b.const(np.int32(0), np.int32), lens)
      h = b.op("Where", ran, h, zeros)
      if c is not None: c = b.op("Where", ran, c, zeros)
    hs.append(h)
    cs.append(c)

  outs = ["out0", "out1", "out2"][:len(node.output)]
  stack = lambda vs: b.op("Concat", *[b.op("Unsqueeze", v, b.const([0], np.int64)) for v in vs], axis=0)
  results = [b.op("Concat", *ys, axis=1), stack(hs)] + ([stack(cs)] if kind == "LSTM" else [])
  perms = [[2, 0, 1, 3], [1, 0, 2], [1, 0, 2]]
  for k, name in enumerate(outs):
    if layout: b.op("Transpose", results[k], perm=perms[k])
    else: b.op("Identity", results[k])
    b.nodes[-1].output[0] = name                                                   # the formal output
  return helper.make_function("minicomp.recurrent", kind, [f"in{k}" for k in range(len(node.input))], outs,
                              b.nodes, [helper.make_opsetid("", opset)])


def _gates(b: _Body, xt: str, h: str, RT: str, H: int, n: int) -> list[str]:
  """The ``n`` gate pre-activations ``xt + h @ R^T`` (each [B, H])."""
  z = b.op("Add", xt, b.op("MatMul", h, RT))
  return [b.cols(z, k * H, (k + 1) * H) for k in range(n)]


def _lstm_step(b, xt, h, c, RT, P, H, acts, clip, input_forget):
  f, g, hh = acts
  i_, o_, f_, c_ = _gates(b, xt, h, RT, H, 4)
  if P is not None:
    pi, po, pf = (b.op("Slice", P, b.const([k * H], np.int64), b.const([(k + 1) * H], np.int64)) for k in range(3))
    i_, f_ = b.op("Add", i_, b.op("Mul", pi, c)), b.op("Add", f_, b.op("Mul", pf, c))
  i = b.activation(i_, f, clip)
  fg = b.op("Sub", b.const(1.0), i) if input_forget else b.activation(f_, f, clip)
  c_new = b.op("Add", b.op("Mul", fg, c), b.op("Mul", i, b.activation(c_, g, clip)))
  if P is not None: o_ = b.op("Add", o_, b.op("Mul", po, c_new))
  o = b.activation(o_, f, clip)
  return b.op("Mul", o, b.activation(c_new, hh, None)), c_new


def _gru_step(b, xt, h, RT, rb, H, acts, clip, linear_before_reset):
  f, g = acts
  x_z, x_r, x_h = (b.cols(xt, k * H, (k + 1) * H) for k in range(3))
  hr = b.op("MatMul", h, b.op("Slice", RT, b.const([0], np.int64), b.const([2 * H], np.int64),
                               b.const([1], np.int64)))                           # h @ [Rz; Rr]^T
  z = b.activation(b.op("Add", x_z, b.cols(hr, 0, H)), f, clip)
  r = b.activation(b.op("Add", x_r, b.cols(hr, H, 2 * H)), f, clip)
  Rh = b.op("Slice", RT, b.const([2 * H], np.int64), b.const([3 * H], np.int64), b.const([1], np.int64))
  if linear_before_reset:   # r * (h @ Rh^T + Rbh); the other biases are in x_h already
    hRh = b.op("MatMul", h, Rh)
    if rb is not None: hRh = b.op("Add", hRh, b.op("Slice", rb, b.const([2 * H], np.int64), b.const([3 * H], np.int64)))
    pre = b.op("Add", x_h, b.op("Mul", r, hRh))
  else:                     # (r * h) @ Rh^T; both biases are in x_h already
    pre = b.op("Add", x_h, b.op("MatMul", b.op("Mul", r, h), Rh))
  hh = b.activation(pre, g, clip)
  one_minus_z = b.op("Sub", b.const(1.0), z)
  return b.op("Add", b.op("Mul", one_minus_z, hh), b.op("Mul", z, h))
