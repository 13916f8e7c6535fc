"""Fuzzing minicomp as a careful user and as an attacker would: mutated ONNX models (hostile names, deep
activation chains and non-finite feeds among the mutations), tampered saved models and corrupted tuning
logs, each case classified.

    python benchmarks/fuzz.py --cases 5065 --kinds onnx:4000,tamper:65,log:1000   # the long run (benchmarks/README.md)
    python benchmarks/fuzz.py --cases 30 --kinds onnx,log                          # a quick look
    python benchmarks/fuzz.py --cases 400 --kinds onnx --node-models 0 --precision fp16   # the tensor cores

``--precision fp16|bf16|tf32`` fuzzes the reduced-precision path instead: MatMul / Gemm / Conv / attention layers of
random sizes (:func:`tensor_core_seed`; a third of them mutated) compiled with that precision, compile's default
schedules and ``MINICOMP_TENSOR_CORES=always``, judged against onnxruntime's float32 run to 8 of the type's
epsilons of each output's largest value (a case whose feeds or reference pass float16's range is ``unchecked``),
or, failing that, to no more than the error of onnxruntime's run with every float result rounded to the type
(:func:`_rounded_every_op`: a long chain of activations drifts past the first bound without a fault; since seed 54).

Every case runs in a worker process (so a crash is seen, not suffered) with a time limit, on the CPU
simulator. A case is one of:

- ``match``: minicomp ran it and agrees with the reference (onnxruntime, or the untampered model; ONNX's
  reference evaluator where onnxruntime rejects the mutant or differs from ONNX on NaN / inf);
- ``unchecked``: minicomp ran a mutant that neither onnxruntime nor ONNX's reference evaluator runs, or one on
  which the two disagree with each other and with minicomp (NaN inside a MaxPool window: each has its own rule);
- ``clean``: minicomp refused it with a ``MinicompError`` (the reference may or may not accept it;
  ``clean*`` counts the refusals of cases onnxruntime accepts: not failures, but worth reading);
- ``mismatch``: minicomp ran it and its answer differs from the reference — a silent wrong answer;
- ``error``: an exception that is not a ``MinicompError`` (a bug);
- ``crash``: the worker died (a signal); ``hang``: it ran past the time limit.

Goal (issue 16): 0 mismatch, 0 error, 0 crash, 0 hang. A mutant onnxruntime crashes on is
skipped (``ref-crash``): it says nothing about minicomp.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))
FAILURES = ("mismatch", "error", "crash", "hang")
TARGET = "sm_86"


# --------------------------------------------------------------------------------------------- seeds
def _model(nodes, inputs, outputs, inits=(), opset=17) -> onnx.ModelProto:
  g = helper.make_graph(nodes, "fuzz", inputs, outputs, list(inits))
  m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
  m.ir_version = 8
  return m


def _vi(name, shape, t=TensorProto.FLOAT):
  return helper.make_tensor_value_info(name, t, shape)


def _w(name, *shape, seed=0):
  return numpy_helper.from_array(np.random.default_rng(seed).standard_normal(shape).astype(np.float32), name)


def seed_models() -> dict[str, onnx.ModelProto]:
  """Small models covering the op families, each a few kernels (fast to compile in the simulator)."""
  N = helper.make_node
  return {
    "conv_relu": _model([N("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], strides=[1, 1], name="conv"),
                         N("Relu", ["c"], ["y"], name="relu")],
                        [_vi("x", [1, 4, 8, 8])], [_vi("y", [1, 8, 8, 8])], [_w("w", 8, 4, 3, 3), _w("b", 8)]),
    "gemm": _model([N("Gemm", ["x", "w", "b"], ["y"], transB=1, name="gemm")],
                   [_vi("x", [4, 16])], [_vi("y", [4, 8])], [_w("w", 8, 16), _w("b", 8)]),
    "softmax": _model([N("Softmax", ["x"], ["y"], axis=-1, name="sm")], [_vi("x", [3, 33])], [_vi("y", [3, 33])]),
    "gather": _model([N("Gather", ["t", "i"], ["y"], axis=0, name="emb")],
                     [_vi("i", [2, 3], TensorProto.INT64)], [_vi("y", [2, 3, 4])], [_w("t", 10, 4)]),
    "reduce_transpose": _model([N("Transpose", ["x"], ["t"], perm=[0, 2, 1], name="tr"),
                                N("ReduceMean", ["t"], ["y"], axes=[1], keepdims=0, name="mean")],
                               [_vi("x", [2, 5, 6])], [_vi("y", [2, 5])], opset=17),
    "pool_add": _model([N("MaxPool", ["x"], ["p"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
                        N("Add", ["p", "p"], ["y"], name="add")],
                       [_vi("x", [1, 3, 8, 8])], [_vi("y", [1, 3, 4, 4])]),
    "matmul_ln": _model([N("MatMul", ["x", "w"], ["m"], name="mm"),
                         N("LayerNormalization", ["m", "g", "b"], ["y"], axis=-1, epsilon=1e-5, name="ln")],
                        [_vi("x", [2, 4, 8])], [_vi("y", [2, 4, 16])], [_w("w", 8, 16), _w("g", 16), _w("b", 16)]),
    "concat_reshape": _model([N("Concat", ["a", "b"], ["c"], axis=1, name="cat"),
                              N("Reshape", ["c", "s"], ["y"], name="rs")],
                             [_vi("a", [2, 3]), _vi("b", [2, 5])], [_vi("y", [4, 4])],
                             [numpy_helper.from_array(np.array([4, 4], np.int64), "s")]),
  }


TC_KINDS = ("tc_mlp_gelu", "tc_conv_relu", "tc_gemm", "tc_attention")


def tensor_core_seed(kind: str, rng: np.random.Generator) -> tuple[onnx.ModelProto, str]:
  """A layer of ``kind`` (:data:`TC_KINDS`) that ``precision="fp16"`` / ``"bf16"`` / ``"tf32"`` may put on the
  tensor cores, with sizes drawn from ``rng``: mostly what the template takes (k a multiple of 32, 32 or 64
  channels), sometimes not (rows and columns not multiples of a tile, k of 8 or 16, strided or 1 x 1
  convolutions), so the guards and refusals are exercised too; (model, its sizes in words). The seeds of a
  ``--precision`` run."""
  N = helper.make_node
  const = lambda name, v: numpy_helper.from_array(np.array(v, np.float32), name)   # noqa: E731
  pick = lambda *xs: int(rng.choice(xs))                                           # noqa: E731
  k = pick(32, 64, 96, 128, 256, 8, 16, 40)
  m, n = pick(16, 32, 64, 128, 3, 24, 100), pick(8, 32, 64, 128, 5, 40)
  if kind == "tc_mlp_gelu":   # MatMul + bias + GELU (the erf form: a diamond after the bias)
    return _model([N("MatMul", ["x", "w"], ["m"], name="mm"), N("Add", ["m", "b"], ["a"], name="bias"),
                   N("Div", ["a", "sqrt2"], ["d"], name="div"), N("Erf", ["d"], ["e"], name="erf"),
                   N("Add", ["e", "one"], ["u"], name="add1"), N("Mul", ["a", "u"], ["v"], name="mul"),
                   N("Mul", ["v", "half"], ["y"], name="mulh")],
                  [_vi("x", [m, k])], [_vi("y", [m, n])],
                  [_w("w", k, n), _w("b", n), const("sqrt2", 2 ** 0.5), const("one", 1.0), const("half", 0.5)]), \
        f"{m}x{k} @ {k}x{n}"
  if kind == "tc_conv_relu":
    c, o, hw, kh = pick(32, 64, 32, 16), pick(32, 64, 8, 24), pick(8, 16, 5, 12, 14, 7), pick(3, 3, 1)
    stride, pad = pick(1, 1, 2), kh // 2
    out = (hw + 2 * pad - kh) // stride + 1
    return _model([N("Conv", ["x", "w", "b"], ["c"], pads=[pad] * 4, strides=[stride] * 2, name="conv"),
                   N("Relu", ["c"], ["y"], name="relu")],
                  [_vi("x", [1, c, hw, hw])], [_vi("y", [1, o, out, out])], [_w("w", o, c, kh, kh), _w("b", o)]), \
        f"{c}->{o} {kh}x{kh}/{stride} on {hw}x{hw}"
  if kind == "tc_gemm":
    return _model([N("Gemm", ["x", "w", "b"], ["y"], transB=1, name="gemm")],
                  [_vi("x", [m, k])], [_vi("y", [m, n])], [_w("w", n, k), _w("b", n)]), f"{m}x{k} @ ({n}x{k})^T"
  bt, d = pick(1, 2, 3), pick(32, 64, 16)     # attention: softmax(q k^T / 2) v over (bt, m, d) heads
  return _model([N("Transpose", ["k"], ["kt"], perm=[0, 2, 1], name="tr"),
                 N("MatMul", ["q", "kt"], ["s"], name="qk"), N("Mul", ["s", "half"], ["t"], name="scale"),
                 N("Softmax", ["t"], ["p"], axis=-1, name="sm"), N("MatMul", ["p", "v"], ["y"], name="pv")],
                [_vi(x, [bt, m, d]) for x in "qkv"], [_vi("y", [bt, m, d])], [const("half", 0.5)]), \
      f"{bt} heads of {m}x{d}"


def node_seeds(n: int) -> dict[str, onnx.ModelProto]:
  """Up to ``n`` of ONNX's backend node test models whose ops minicomp lowers, spread evenly over the
  op families (shape operands bound to constants, as benchmarks/onnx_conformance.py does)."""
  import onnx_conformance as oc
  usable = [c for c in oc.cases() if not oc.missing_ops(c.model)]
  step = max(1, len(usable) // max(n, 1))
  return {f"node:{c.name}": oc.freeze_shape_operands(c)[0] for c in usable[::step][:n]}


# ------------------------------------------------------------------------------------------ mutants
_INTS = [-2, -1, 0, 1, 2, 3, 7, 64, 2 ** 31, 2 ** 40]
_TYPES = [TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT64, TensorProto.INT32, TensorProto.BOOL,
          TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.UINT8, TensorProto.STRING]
_OPS = ["Relu", "Add", "MatMul", "Conv", "Softmax", "Gather", "Transpose", "Reshape", "Sigmoid", "Not", "Cast"]


def _attr(rng, m):
  n = m.graph.node[rng.integers(len(m.graph.node))]
  if not n.attribute: return _dim(rng, m)
  a = n.attribute[rng.integers(len(n.attribute))]
  if a.type == onnx.AttributeProto.INT: a.i = int(rng.choice(_INTS))
  elif a.type == onnx.AttributeProto.INTS and len(a.ints): a.ints[rng.integers(len(a.ints))] = int(rng.choice(_INTS))
  elif a.type == onnx.AttributeProto.FLOAT: a.f = float(rng.choice([-1.0, 0.0, 1e30, float("nan")]))
  else: n.attribute.remove(a)
  return f"attr {n.name}.{a.name}"


def _dim(rng, m):
  vis = list(m.graph.input) + list(m.graph.output)
  v = vis[rng.integers(len(vis))]
  dims = v.type.tensor_type.shape.dim
  if not len(dims): return "noop"
  d = dims[rng.integers(len(dims))]
  choice = rng.integers(4)
  if choice == 0: d.dim_param = "n"
  else: d.dim_value = int(rng.choice([0, 1, 2, 3, 5, 17, 4096]))
  return f"dim {v.name}"


def _dtype(rng, m):
  vis = list(m.graph.input) + list(m.graph.output)
  v = vis[rng.integers(len(vis))]
  v.type.tensor_type.elem_type = int(rng.choice(_TYPES))
  return f"dtype {v.name}"


def _init(rng, m):
  if not m.graph.initializer: return _dtype(rng, m)
  t = m.graph.initializer[rng.integers(len(m.graph.initializer))]
  choice = rng.integers(4)
  if choice == 0 and t.raw_data: t.raw_data = t.raw_data[:max(0, len(t.raw_data) - 4 * int(rng.integers(1, 4)))]
  elif choice == 1 and len(t.dims): t.dims[rng.integers(len(t.dims))] += int(rng.integers(1, 3))
  elif choice == 2: t.data_type = int(rng.choice(_TYPES[:7]))
  else:
    try:
      arr = numpy_helper.to_array(t).copy()
    except ValueError:     # an earlier mutation broke it already
      return f"initializer {t.name}"
    if arr.dtype.kind == "i": arr.flat[0] = int(rng.choice([-100, 2 ** 32 + 5, 10 ** 12]))
    else: arr.flat[0] = rng.choice([np.inf, np.nan, -1e38])
    t.CopyFrom(numpy_helper.from_array(arr, t.name))
  return f"initializer {t.name}"


def _wire(rng, m):
  n = m.graph.node[rng.integers(len(m.graph.node))]
  names = [i.name for i in m.graph.input] + [t.name for t in m.graph.initializer] + [o for x in m.graph.node for o in x.output]
  choice = rng.integers(4)
  if choice == 0 and len(n.input) > 1: n.input[0], n.input[1] = n.input[1], n.input[0]
  elif choice == 1 and len(n.input): del n.input[len(n.input) - 1]
  elif choice == 2: n.input.append(str(rng.choice(names)))
  elif len(n.input): n.input[rng.integers(len(n.input))] = str(rng.choice(names + ["nowhere"]))
  return f"wire {n.name}"


def _op(rng, m):
  n = m.graph.node[rng.integers(len(m.graph.node))]
  n.op_type = str(rng.choice(_OPS))
  return f"op {n.name}->{n.op_type}"


def _opset(rng, m):
  m.opset_import[0].version = int(rng.choice([1, 6, 7, 9, 11, 12, 13, 18, 21, 22, 25, 99]))
  return f"opset {m.opset_import[0].version}"


def _drop(rng, m):
  if len(m.graph.node) < 2: return _wire(rng, m)
  k = int(rng.integers(len(m.graph.node)))
  del m.graph.node[k]
  return f"drop node {k}"


def _bytes(rng, m):
  return "bytes"   # applied to the serialized model in mutate()


def _badname(rng, m):
  n = m.graph.node[rng.integers(len(m.graph.node))]
  n.name = "\u2603" + n.name    # its UTF-8 bytes are cut in half in mutate(): a name that is not UTF-8
  return "badname"


# names that are C / C++ / CUDA keywords, reserved, macros of NVRTC's or the simulator's translation unit, or
# comment and directive markers: a model's names must never reach the CUDA source
HOSTILE_NAMES = ["int", "float", "return", "class", "asm", "nullptr", "and", "max", "threadIdx", "__global__",
                 "x__attribute__y", "_Pragma", "INFINITY", "NAN", "FLT_MAX", "stdin", "SIGINT", "mc_e0", "/* c */",
                 "line\\", "#include <x>", "a b"]


def _cname(rng, m):
  """A value (input, intermediate, output or initializer) and a node renamed to hostile names."""
  g = m.graph
  names = [v.name for v in g.input] + [o for n in g.node for o in n.output if o] + [t.name for t in g.initializer]
  old, new = names[rng.integers(len(names))], HOSTILE_NAMES[rng.integers(len(HOSTILE_NAMES))]
  if new in names: return "cname n/a"
  for v in list(g.input) + list(g.output) + list(g.value_info) + list(g.initializer):
    if v.name == old: v.name = new
  for n in g.node:
    n.input[:] = [new if x == old else x for x in n.input]
    n.output[:] = [new if x == old else x for x in n.output]
  g.node[rng.integers(len(g.node))].name = HOSTILE_NAMES[rng.integers(len(HOSTILE_NAMES))]
  return f"cname {old!r}->{new!r}"


def _chain(rng, m):
  """A chain of activations that each read their input twice appended to the first output (Relu, or a
  written-out tanh-GELU): the fused kernel's text and the walks over it must stay bounded."""
  g, N = m.graph, helper.make_node
  out, n = g.output[0].name, int(rng.choice([16, 64, 300]))
  prev = out + "_pre"
  for node in g.node: node.output[:] = [prev if x == out else x for x in node.output]
  gelu = rng.random() < 0.5
  if gelu:
    for name, v in (("c3", 0.044715), ("k", float(np.sqrt(2 / np.pi))), ("one", 1.0), ("half", 0.5)):
      g.initializer.append(numpy_helper.from_array(np.array(v, np.float32), f"chain_{name}"))
  for k in range(n // (8 if gelu else 1)):
    dst = out if k == n // (8 if gelu else 1) - 1 else f"chain{k}"
    if not gelu:
      g.node.append(N("Relu", [prev], [dst]))
    else:
      p = f"chain{k}_"
      g.node.extend([N("Mul", [prev, prev], [p + "sq"]), N("Mul", [p + "sq", prev], [p + "cu"]),
                     N("Mul", [p + "cu", "chain_c3"], [p + "m"]), N("Add", [prev, p + "m"], [p + "a"]),
                     N("Mul", [p + "a", "chain_k"], [p + "b"]), N("Tanh", [p + "b"], [p + "t"]),
                     N("Add", [p + "t", "chain_one"], [p + "u"]), N("Mul", [prev, p + "u"], [p + "v"]),
                     N("Mul", [p + "v", "chain_half"], [dst])])
    prev = dst
  return f"chain {n} {'gelu' if gelu else 'relu'}"


def _nonfinite(rng, m):
  """Feeds holding +-Inf, NaN, denormals and values near 1e30 (applied by feeds_for)."""
  m.metadata_props.add(key="fuzz_feeds", value="nonfinite")
  return "nonfinite feeds"


MUTATORS = [_attr, _dim, _dtype, _init, _wire, _op, _opset, _drop, _bytes, _badname, _cname, _chain, _nonfinite]
# semantic edits (attributes, dims, types, initializer values, opsets) most often: their mutants
# get past the checker, so they test the importer and the kernels, not only the parsers
WEIGHTS = np.array([4, 2, 2, 4, 1, 1, 2, 1, 0.5, 0.5, 1, 0.5, 1]) / 20.5


def mutate(m: onnx.ModelProto, rng: np.random.Generator) -> tuple[bytes, str]:
  """One to three mutations of a copy of ``m``: the serialized mutant and what was done."""
  c = onnx.ModelProto(); c.CopyFrom(m)
  what, flip = [], False
  for _ in range(int(rng.choice([1, 2, 3], p=[0.6, 0.3, 0.1]))):
    f = MUTATORS[rng.choice(len(MUTATORS), p=WEIGHTS)]
    flip |= f is _bytes
    try:
      what.append(f(rng, c))
    except (ValueError, IndexError, TypeError):   # the mutator does not apply to this model (an empty tensor, ...)
      what.append(f"{f.__name__[1:]} n/a")
  data = bytearray(c.SerializeToString())
  if "badname" in what:
    snow = "\u2603".encode()
    k = bytes(data).find(snow)
    data[k:k + 3] = b"\xe2\x98("
  if flip and data:
    for _ in range(int(rng.integers(1, 6))): data[rng.integers(len(data))] = int(rng.integers(256))
  return bytes(data), "; ".join(what)


# ------------------------------------------------------------------------------------------- worker
def feeds_for(model_bytes: bytes, seed: int = 0) -> dict[str, np.ndarray]:
  """Random feeds for the model's inputs (indices in [0, 3), so they are in range for every seed model);
  {} for a model that does not parse or whose input types have no numpy dtype (the model is refused anyway)."""
  try:
    m = onnx.load_from_string(model_bytes)
  except Exception:   # noqa: BLE001 (protobuf's DecodeError)
    return {}
  rng = np.random.default_rng(seed)
  inits = {t.name for t in m.graph.initializer}
  special = any(p.key == "fuzz_feeds" and p.value == "nonfinite" for p in m.metadata_props)
  out = {}
  for i in m.graph.input:
    if i.name in inits: continue
    tt = i.type.tensor_type
    shape = tuple(d.dim_value for d in tt.shape.dim)
    try:
      dt = helper.tensor_dtype_to_np_dtype(tt.elem_type)
    except (KeyError, ValueError):
      continue
    if dt.kind == "f":
      out[i.name] = rng.standard_normal(shape).astype(dt)
      if special and out[i.name].size:
        flat = out[i.name].reshape(-1)
        picks = rng.choice(flat.size, size=min(flat.size, 4), replace=False)
        flat[picks] = np.array([np.inf, -np.inf, np.nan, 1e30, 1e-40, -1e30], dt)[rng.integers(6, size=len(picks))]
    elif dt.kind == "b": out[i.name] = rng.integers(0, 2, shape).astype(bool)
    else: out[i.name] = rng.integers(0, 3, shape).astype(dt)
  return out


# a --precision run's tolerance: a float output within 8 of the type's epsilons of its largest finite magnitude
# (tests/test_precision.py derives 4 for the zoo models; mutants add chains and odd shapes), and its largest finite
# value: a run whose feeds or reference pass it overflowed by design and is not judged
PRECISION = {"fp16": (2.0 ** -10, 65504.0), "bf16": (2.0 ** -7, 3.0e38), "tf32": (2.0 ** -10, 3.0e38)}


def _close(a: np.ndarray, b: np.ndarray, precision: str | None = None) -> bool:
  """Whether minicomp's ``a`` is the reference's ``b``: float outputs to 1e-3 (1e-2 in a half type), or, when
  compiled with ``precision``, to :data:`PRECISION`'s epsilons of ``b``'s largest finite magnitude, non-finite
  values in the same places."""
  a, b = np.asarray(a), np.asarray(b)
  if a.shape != b.shape: return False
  floating = any(x.dtype.kind in "fc" or "bfloat16" in str(x.dtype) for x in (a, b))   # (ml_dtypes' kind is "V")
  if precision and floating:
    # (a model in the other half type: the reference computes in it, with its own epsilon)
    eps = max(PRECISION[precision][0], *(2.0 ** -7 if "bfloat16" in str(x.dtype) else 2.0 ** -10
                                           if x.dtype == np.float16 else 0.0 for x in (a, b)))
    a, b = a.astype(np.float64), b.astype(np.float64)
    fa, fb = np.isfinite(a), np.isfinite(b)
    if not (np.array_equal(fa, fb) and np.array_equal(a[~fa], b[~fb], equal_nan=True)): return False
    scale = np.abs(b[fb]).max() if fb.any() else 0.0
    return bool(np.all(np.abs(a[fa] - b[fb]) <= 8 * eps * scale))
  if floating:
    tol = 1e-2 if np.float16 in (a.dtype, b.dtype) or "bfloat16" in (str(a.dtype), str(b.dtype)) else 1e-3
    a, b = a.astype(np.float64), b.astype(np.float64)
    return bool(np.allclose(a, b, rtol=tol, atol=tol, equal_nan=True))
  return bool(np.array_equal(a, b))


def for_reference(data: bytes) -> bytes:
  """The model as the references get it: Resize's negative ``axes`` made positive (the same meaning by
  the spec; onnxruntime 1.2x and ONNX's reference evaluator both mishandle them)."""
  try:
    m = onnx.load_from_string(data)
    ranks = {v.name: len(v.type.tensor_type.shape.dim) for v in list(m.graph.input) + list(m.graph.value_info)}
    changed = False
    for n in m.graph.node:
      r = ranks.get(n.input[0]) if n.op_type == "Resize" and n.input else None
      for a in n.attribute:
        if r and a.name == "axes" and any(x < 0 for x in a.ints):
          a.ints[:] = [x + r if x < 0 else x for x in a.ints]
          changed = True
    return m.SerializeToString() if changed else data
  except Exception:   # noqa: BLE001 (a mutant that does not parse goes to the references as it is)
    return data


def _do(req: dict) -> dict:
  """One request in the worker: reference ("ort") or minicomp ("onnx", "load", "log")."""
  op, path = req["op"], req["path"]
  if op == "ort":
    import onnxruntime as ort
    data = Path(path).read_bytes()
    try:
      feeds = feeds_for(data)
      so = ort.SessionOptions(); so.log_severity_level = 4
      outs = ort.InferenceSession(for_reference(data), so, providers=["CPUExecutionProvider"]).run(None, feeds)
    except Exception as e:   # noqa: BLE001 (the reference rejecting the mutant is a result)
      return {"ref": "rejects", "why": f"{type(e).__name__}: {str(e)[:200]}"}
    if any(o is None for o in outs):   # (an output it does not compute: saved, it would not load and kill the worker)
      return {"ref": "rejects", "why": "onnxruntime gives no value for an output"}
    np.savez(req["ref"], *[np.asarray(o) for o in outs])
    return {"ref": "ok"}
  info: dict = {}
  return _judged(req, info) | info


def _judged(req: dict, info: dict) -> dict:
  """minicomp's side of a request (compile or load, run, compare): its class and why; ``info`` gets the number
  of tensor-core kernels of a ``precision`` compile."""
  op, path = req["op"], req["path"]
  import minicomp
  from minicomp.errors import MinicompError
  prec = req.get("precision")
  if prec: os.environ["MINICOMP_TENSOR_CORES"] = "always"   # (the tensor-core kernels wherever they apply)
  else: os.environ.pop("MINICOMP_TENSOR_CORES", None)
  try:
    if op == "onnx":
      data = Path(path).read_bytes()
      feeds = feeds_for(data)
      how = {"precision": prec} if prec else {"schedules": "rules"}   # (a precision run: the default schedules)
      cm = minicomp.compile(data, target=TARGET, progress=False, **how)
      if prec: info["tensor_cores"] = cm.stats.tensor_cores
    elif op == "log":
      data = Path(req["model"]).read_bytes()
      feeds = feeds_for(data)
      cm = minicomp.compile(data, target=TARGET, schedules="rules", progress=False, log_file=path)
    else:
      feeds = {k: v for k, v in np.load(req["feeds"]).items()}
      cm = minicomp.load(path)
    outs = cm.run(feeds, device="cpu")
  except MinicompError as e:
    return {"class": "clean", "why": f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"}
  except Exception as e:   # noqa: BLE001 (anything else is what the fuzzer looks for)
    return {"class": "error", "why": f"{type(e).__name__}: {str(e)[:300]}"}
  if req.get("roundtrip"):       # a model that compiled and ran must also save, load and run the same (lost data)
    try:
      with tempfile.TemporaryDirectory() as d:
        again = minicomp.load(cm.save(Path(d) / "m")).run(feeds, device="cpu")
    except Exception as e:   # noqa: BLE001 (a refusal here is lost data, not a clean refusal)
      return {"class": "error", "why": f"saved, but does not load and run: {type(e).__name__}: {str(e)[:200]}"}
    if not (len(again) == len(outs) and all(_close(a, b) for a, b in zip(outs, again))):
      return {"class": "mismatch", "why": "the saved and loaded model differs from the compiled one"}
  same = lambda ref: len(ref) == len(outs) and all(_close(a, b, prec) for a, b in zip(outs, ref))  # noqa: E731
  if prec and req.get("ref") is not None:
    with np.load(req["ref"]) as z: ref = [z[f"arr_{k}"] for k in range(len(z.files))]
    top = PRECISION[prec][1]
    if any(np.asarray(v).dtype.kind == "f" and (np.isfinite(v) & (np.abs(v) > top)).any()
           for v in [*feeds.values(), *ref]):
      return {"class": "unchecked", "why": f"finite feeds or reference values past {prec}'s range"}
  if req.get("ref") is None:     # onnxruntime rejected the mutant: ONNX's reference evaluator is the judge
    ref = _onnx_reference(for_reference(data), feeds) if op == "onnx" else []
    if not ref: return {"class": "unchecked", "why": "minicomp ran it; neither onnxruntime nor ONNX's reference can"}
    if same(ref): return {"class": "match", "why": "agrees with ONNX's reference evaluator (onnxruntime rejects it)"}
    if len(ref) == len(outs) and all(_close(np.squeeze(a), np.squeeze(np.asarray(b)), prec) for a, b in zip(outs, ref)):
      # (its Loop stacks a scalar scan output as (n, 1), where ONNX says (n,))
      return {"class": "unchecked", "why": "the same values as ONNX's reference evaluator, in another shape"}
    return {"class": "mismatch", "why": "differs from ONNX's reference evaluator (onnxruntime rejects it)"}
  with np.load(req["ref"]) as z: ref = [z[f"arr_{k}"] for k in range(len(z.files))]
  if same(ref): return {"class": "match", "why": ""}
  if prec and op == "onnx" and _within_rounding(outs, ref, _rounded_every_op(for_reference(data), feeds, prec)):
    return {"class": "match", "why": f"within the error of onnxruntime's run with every result rounded to {prec}"}
  second = _onnx_reference(for_reference(data), feeds) if op == "onnx" else []
  if second and same(second):      # onnxruntime's Relu(NaN) is 0, ONNX's is NaN
    return {"class": "match", "why": "agrees with ONNX's reference evaluator, not onnxruntime (NaN/inf handling)"}
  if second and not (len(second) == len(ref) and all(_close(a, b) for a, b in zip(second, ref))):
    # the two references disagree (a NaN in a MaxPool window: onnxruntime's vector max lets the value after it win,
    # ONNX's reference keeps it only where it comes first): no answer to judge minicomp's by
    return {"class": "unchecked", "why": "onnxruntime and ONNX's reference disagree with each other and with minicomp"}
  if not second and any(np.asarray(v).dtype.kind == "f" and not np.isfinite(v).all() for v in feeds.values()):
    # non-finite feeds that ONNX's reference cannot run (its GridSample converts an infinite coordinate to int and
    # raises): onnxruntime alone is no judge there (it converts such coordinates to int64 as C leaves undefined;
    # seed 45): the case is listed, not counted a wrong answer
    return {"class": "unchecked", "why": "differs from onnxruntime on non-finite feeds ONNX's reference cannot run"}
  return {"class": "mismatch", "why": f"{len(outs)} outputs differ from the reference"}


ROUNDED_TYPE = {"fp16": (TensorProto.FLOAT16, "float16"), "bf16": (TensorProto.BFLOAT16, "bfloat16")}   # (ONNX, name)


def _rounded_every_op(data: bytes, feeds: dict, precision: str) -> list:
  """onnxruntime's outputs of the model with its float32 inputs and every float32 result of its graph rounded to the
  ``precision``'s type (a Cast there and back after each node): the error of a computation that stores each result
  in that type, which minicomp does only between its kernels. [] where that cannot be run (tf32: no such type)."""
  import onnxruntime as ort
  from minicomp.ir.ops import NP_DTYPE
  if precision not in ROUNDED_TYPE: return []
  onnx_type, name = ROUNDED_TYPE[precision]
  try:
    m = onnx.shape_inference.infer_shapes(onnx.load_from_string(data))
    g = m.graph
    floats = {v.name for v in list(g.input) + list(g.value_info) + list(g.output)
              if v.type.tensor_type.elem_type == TensorProto.FLOAT}
    nodes = []
    for n in g.node:
      rounded = [o for o in n.output if o in floats]
      copy = onnx.NodeProto()
      copy.CopyFrom(n)
      copy.output[:] = [o + "__unrounded" if o in floats else o for o in n.output]
      nodes.append(copy)
      for o in rounded:
        nodes.append(helper.make_node("Cast", [o + "__unrounded"], [o + "__narrow"], to=onnx_type))
        nodes.append(helper.make_node("Cast", [o + "__narrow"], [o], to=TensorProto.FLOAT))
    del g.node[:]
    g.node.extend(nodes)
    fed = {k: v.astype(NP_DTYPE[name]).astype(np.float32) if v.dtype == np.float32 else v for k, v in feeds.items()}
    so = ort.SessionOptions(); so.log_severity_level = 4
    return list(ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, fed))
  except Exception:   # noqa: BLE001 (no such run: the strict judgement stands)
    return []


def _within_rounding(outs: list, ref: list, rounded: list) -> bool:
  """Whether every float output of minicomp's is off the float32 reference by no more than the every-op-rounded run
  is (and finite where it is): a long chain of activations in a half type drifts that far without a fault."""
  if not rounded or len(rounded) != len(ref) or len(outs) != len(ref): return False
  for a, b, r in zip(outs, ref, rounded):
    a, b, r = (np.asarray(x, np.float64) for x in (a, b, r))
    if a.shape != b.shape or r.shape != b.shape or not np.array_equal(np.isfinite(a), np.isfinite(b)): return False
    fb = np.isfinite(b)
    if not fb.any(): continue
    if not np.isfinite(r[fb]).all() or np.abs(a[fb] - b[fb]).max() > np.abs(r[fb] - b[fb]).max(): return False
  return True


def _onnx_reference(data: bytes, feeds: dict) -> list:
  """ONNX's reference evaluator on the model; below opset 13, on the model as ONNX's version converter
  makes it (what minicomp compiles: ONNX's evaluator reads an absent count_include_pad of AveragePool-1
  as including the pads, its converter as excluding them)."""
  from onnx import version_converter
  from onnx.reference import ReferenceEvaluator
  try:
    m = onnx.load_from_string(data)
    opset = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), 0)
    # its Attention pads a mask's short last dim with -inf at every opset, Attention-24's rule; Attention-23's
    # function body broadcasts a last dim of 1, as minicomp does (onnxruntime refuses it; seed 29): no opinion there
    last = {v.name: v.type.tensor_type.shape.dim[-1].dim_value for v in list(m.graph.input) + list(m.graph.value_info)
            if v.type.tensor_type.shape.dim}
    last.update({t.name: t.dims[-1] for t in m.graph.initializer if t.dims})
    if opset < 24 and any(n.op_type == "Attention" and len(n.input) > 3 and last.get(n.input[3]) == 1
                          for n in m.graph.node): return []
    if m.opset_import and m.opset_import[0].version < 13: m = version_converter.convert_version(m, 13)
    return list(ReferenceEvaluator(m).run(None, feeds))
  except Exception:   # noqa: BLE001 (no second opinion)
    return []


def worker() -> None:
  """Serve JSON-line requests on stdin, one JSON-line answer each on stdout."""
  import logging
  logging.disable(logging.WARNING)
  out = sys.stdout
  sys.stdout = sys.stderr     # anything minicomp prints must not corrupt the protocol
  for line in sys.stdin:
    out.write(json.dumps(_do(json.loads(line))) + "\n")
    out.flush()


class Pool:
  """One worker process, restarted after a crash or a time-out."""

  def __init__(self, timeout_s: float):
    self.timeout_s, self.p = timeout_s, None

  def ask(self, req: dict) -> dict:
    import selectors
    if self.p is None or self.p.poll() is not None:
      self.p = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--worker"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    self.p.stdin.write(json.dumps(req) + "\n"); self.p.stdin.flush()
    sel = selectors.DefaultSelector(); sel.register(self.p.stdout, selectors.EVENT_READ)
    if not sel.select(self.timeout_s):
      self.close()
      return {"class": "hang", "why": f"no answer in {self.timeout_s:.0f} s"}
    line = self.p.stdout.readline()
    if not line:
      rc = self.p.wait()
      self.p = None
      return {"class": "crash", "why": f"worker died (exit status {rc})"}
    return json.loads(line)

  def close(self) -> None:
    if self.p is not None:
      self.p.kill(); self.p.wait(); self.p = None


# -------------------------------------------------------------------------------------------- cases
def onnx_cases(n: int, seed: int, work: Path, node_models: int = 0, precision: str | None = None):
  """``n`` mutants of the seed models (and of ``node_models`` of ONNX's node test models): (name, request). With
  ``precision``, the seeds are :func:`tensor_core_seed`'s layers of random sizes, a third of them mutated."""
  rng = np.random.default_rng(seed)
  seeds = ({kind: None for kind in TC_KINDS} if precision else seed_models()) | node_seeds(node_models)
  names = sorted(seeds)
  for k in range(n):
    base = names[k % len(names)]
    model, sizes = (tensor_core_seed(base, rng) if seeds[base] is None else (seeds[base], ""))
    if precision and rng.random() < 2 / 3: data, what = model.SerializeToString(), "unmutated"
    else: data, what = mutate(model, rng)
    path = work / f"m{k}.onnx"
    path.write_bytes(data)
    yield f"onnx {base}{' ' + sizes if sizes else ''}: {what}", {"op": "onnx", "path": str(path),
                                                                 "roundtrip": "cname" in what, "precision": precision}


def _saved(work: Path, pool: Pool) -> tuple[Path, Path, Path]:
  """A saved model of the conv seed, its feeds and its reference outputs (from onnxruntime)."""
  import minicomp
  m = seed_models()["conv_relu"]
  src = work / "seed.onnx"; src.write_bytes(m.SerializeToString())
  feeds = feeds_for(src.read_bytes())
  np.savez(work / "feeds.npz", **feeds)
  pool.ask({"op": "ort", "path": str(src), "ref": str(work / "saved_ref.npz")})
  minicomp.compile(m, target=TARGET, schedules="rules", progress=False).save(work / "saved")
  return work / "saved", work / "feeds.npz", work / "saved_ref.npz"


def tamper_cases(n: int, seed: int, work: Path, pool: Pool):
  """Each tamper of tests/tamper.py applied to a fresh copy of a saved model, cycling until ``n``."""
  import shutil

  import tamper
  saved, feeds, ref = _saved(work, pool)
  cases = list(tamper.CASES)
  for k in range(n):
    name, fn = cases[k % len(cases)]
    d = work / f"t{k}"
    shutil.copytree(saved, d, symlinks=True)
    fn(d)
    yield f"tamper {name}", {"op": "load", "path": str(d), "feeds": str(feeds), "ref": str(ref)}


def log_cases(n: int, seed: int, work: Path):
  """A real tuning log of the gemm seed (static model, 8 trials), corrupted ``n`` ways."""
  import minicomp
  rng = np.random.default_rng(seed)
  m = seed_models()["gemm"]
  src = work / "gemm.onnx"; src.write_bytes(m.SerializeToString())
  good = work / "good.log"
  if not good.exists():
    minicomp.compile(m, target=TARGET, schedules="rules", progress=False, trials=8, log_file=str(good))
  lines = good.read_text().splitlines()
  for k in range(n):
    ls = [json.loads(x) for x in lines]
    r = ls[int(rng.integers(len(ls)))]
    choice = int(rng.integers(9))
    if choice == 0: r["cost_s"] = float(rng.choice([0.0, -1.0, 1e-30]))
    elif choice == 1: r["steps"] = r["steps"][: int(rng.integers(len(r["steps"]) + 1))] + [{"step": "split"}]
    elif choice == 2 and r["steps"]: r["steps"][int(rng.integers(len(r["steps"])))]["factors"] = [0]
    elif choice == 3: r["workload_key"] = 7
    elif choice == 4: r["v"] = 99
    elif choice == 5: r["error"] = "ok"; r["cost_s"] = 1e-12
    elif choice == 6: r["steps"] = "not a list"
    elif choice == 7: r.pop("target", None)
    text = "\n".join(json.dumps(x) for x in ls) + "\n"
    if choice == 8: text += "}{garbage\n"
    if rng.random() < 0.2: text = text[: int(rng.integers(len(text)))]
    path = work / f"l{k}.log"
    path.write_text(text)
    yield f"log #{choice}", {"op": "log", "path": str(path), "model": str(src)}


# --------------------------------------------------------------------------------------------- main
def split(cases: int, kinds: list[str]) -> dict[str, int]:
  """``["onnx:800", "tamper", "log"]`` -> cases per kind: a kind without ``:N`` shares what is left of ``cases``."""
  fixed = {k.partition(":")[0]: int(k.partition(":")[2]) for k in kinds if ":" in k}
  rest = [k for k in kinds if ":" not in k]
  left = max(0, cases - sum(fixed.values()))
  fixed.update({k: left // len(rest) + (i < left % len(rest)) for i, k in enumerate(rest)})
  return fixed


def run(cases: int, seed: int, kinds: list[str], timeout_s: float = 300.0, verbose: bool = False,
        node_models: int = 0, keep: str | None = None, precision: str | None = None) -> list[dict]:
  """Run ``cases`` cases split over ``kinds`` (see :func:`split`); one result dict per case. ONNX
  mutants start from the seed models plus ``node_models`` of ONNX's node test models; with ``precision``
  ("fp16", "bf16", "tf32") from :func:`tensor_core_seeds` instead of the seed models, compiled with that
  precision, compile's default schedules and ``MINICOMP_TENSOR_CORES=always`` (so the tensor-core kernels run
  wherever they apply), and judged to :data:`PRECISION`'s tolerance."""
  pool = Pool(timeout_s)
  results = []
  with tempfile.TemporaryDirectory(prefix="minicomp-fuzz-") as tmp:
    work = Path(tmp)
    share = split(cases, kinds)
    gens = {"onnx": lambda n: onnx_cases(n, seed, work, node_models, precision),
            "tamper": lambda n: tamper_cases(n, seed, work, pool),
            "log": lambda n: log_cases(n, seed, work)}
    try:
      for kind in share:
        for name, req in gens[kind](share[kind]):
          t0 = time.perf_counter()
          res = {"kind": kind, "case": name}
          if kind == "onnx":
            req["ref"] = str(work / "ref.npz")
            ref = pool.ask({"op": "ort", "path": req["path"], "ref": req["ref"]})
            if ref.get("class") in ("crash", "hang"): res.update({"class": "ref-crash", "why": ref["why"]}); results.append(res); continue
            if ref["ref"] != "ok": req["ref"] = None
            res["ref"], res["ref_why"] = ref["ref"], ref.get("why", "")
          if kind == "log":
            req["ref"] = str(work / "gemm_ref.npz")
            if not Path(req["ref"]).exists(): pool.ask({"op": "ort", "path": req["model"], "ref": req["ref"]})
          res.update(pool.ask(req))
          if res.get("ref") == "rejects": res["why"] += f" [onnxruntime: {res['ref_why'][:120]}]"
          res["s"] = round(time.perf_counter() - t0, 2)
          results.append(res)
          if verbose or res["class"] in FAILURES: print(f"{res['class']:>9}  {name}  {res.get('why', '')}", flush=True)
          if keep and res["class"] in FAILURES:      # the failing input, to replay by hand
            import shutil
            Path(keep).mkdir(parents=True, exist_ok=True)
            src = Path(req["path"])
            dst = Path(keep) / f"{len(results) - 1}-{src.name}"
            (shutil.copytree if src.is_dir() else shutil.copy)(src, dst)
            res["kept"] = str(dst)
    finally:
      pool.close()
  return results


def table(results: list[dict]) -> str:
  """The cases by kind and class (markdown); for a ``--precision`` run, a line on how many ran tensor-core kernels."""
  tc = [r for r in results if r.get("tensor_cores")]
  note = (f"\n\n{len(tc)} cases ran tensor-core kernels ({sum(r['class'] == 'match' for r in tc)} of them matched)"
          if any("tensor_cores" in r for r in results) else "")
  return _counts(results) + note


def _counts(results: list[dict]) -> str:
  kinds = sorted({r["kind"] for r in results})
  cols = ["match", "unchecked", "clean", "clean*", "mismatch", "error", "crash", "hang", "ref-crash"]
  rows = ["| kind | cases | " + " | ".join(cols) + " |", "| --- | ---: |" + " ---: |" * len(cols)]
  for k in kinds + ["all"]:
    rs = [r for r in results if k in ("all", r["kind"])]
    c = Counter(r["class"] for r in rs)
    c["clean*"] = sum(r["class"] == "clean" and r.get("ref") == "ok" for r in rs)
    rows.append(f"| {k} | {len(rs)} | " + " | ".join(str(c[x]) for x in cols) + " |")
  return "\n".join(rows)


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--cases", type=int, default=1000)
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--kinds", default="onnx,tamper,log")
  ap.add_argument("--timeout", type=float, default=300.0, help="seconds per case before it counts as a hang")
  ap.add_argument("--node-models", type=int, default=200,
                  help="ONNX backend node test models added to the seeds of the ONNX mutants (default 200)")
  ap.add_argument("--precision", choices=sorted(PRECISION),
                  help="ONNX mutants of the tensor-core seeds compiled with this precision and the default schedules")
  ap.add_argument("--json", help="also write every case's result to this file")
  ap.add_argument("--keep", help="copy the input of every failing case into this folder")
  ap.add_argument("-v", "--verbose", action="store_true")
  ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
  a = ap.parse_args()
  if a.worker:
    worker()
    return 0
  t0 = time.time()
  res = run(a.cases, a.seed, a.kinds.split(","), a.timeout, a.verbose, a.node_models, a.keep, a.precision)
  prec = f" --precision {a.precision}" if a.precision else ""
  print(f"\n`python benchmarks/fuzz.py --cases {a.cases} --seed {a.seed} --kinds {a.kinds} --node-models {a.node_models}"
        f"{prec}` "
        f"({time.time() - t0:.0f} s, {time.strftime('%Y-%m-%d')})\n")
  print(table(res))
  if a.json: Path(a.json).write_text(json.dumps(res, indent=1))
  bad = [r for r in res if r["class"] in FAILURES]
  for r in bad: print(f"  {r['class']}: {r['case']}: {r.get('why', '')}")
  return 1 if bad else 0


if __name__ == "__main__":
  sys.exit(main())
