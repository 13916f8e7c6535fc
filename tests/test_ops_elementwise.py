"""Elementwise ops (minicomp/graph/ops/elementwise.py) against onnxruntime, one node per model."""
import numpy as np
import pytest
from onnx import TensorProto, helper

import minicomp as mc
from onnx_harness import check_model, check_node, make_model

rng = np.random.default_rng(0)


def f32(*shape): return rng.standard_normal(shape).astype(np.float32)
def f64(*shape): return rng.standard_normal(shape)
def pos(*shape): return (np.abs(f32(*shape)) + 0.1).astype(np.float32)
def i64(*shape, lo=-9, hi=10): return rng.integers(lo, hi, shape).astype(np.int64)
def i32(*shape, lo=-9, hi=10): return rng.integers(lo, hi, shape).astype(np.int32)
def bools(*shape): return rng.random(shape) < 0.5


# ---------------------------------------------------------------------------------------------
# unary ops and activations: (op, input, attrs, opset)

HALVES = np.array([[-2.5, -1.5, -0.5, 0.5, 1.5, 2.5], [0.4, -0.6, 3.7, -3.2, 1e8, -0.0]], np.float32)
UNARY = [
  ("Sigmoid", f32(3, 4), {}, 17), ("Tanh", f32(3, 4), {}, 17), ("Erf", f32(3, 4), {}, 17),
  ("Exp", f32(3, 4), {}, 17), ("Sqrt", pos(3, 4), {}, 17), ("Log", pos(3, 4), {}, 17),
  ("Neg", f32(3, 4), {}, 17), ("Abs", f32(3, 4), {}, 17), ("Reciprocal", pos(3, 4), {}, 17),
  ("Floor", 3 * f32(3, 4), {}, 17), ("Ceil", 3 * f32(3, 4), {}, 17), ("Sign", np.array([[-2, 0, 3.5]], np.float32), {}, 17),
  ("Round", HALVES, {}, 17), ("Round", HALVES.astype(np.float64), {}, 13), ("Relu", f32(3, 4), {}, 13),
  ("Softplus", 8 * f32(3, 4), {}, 17), ("Elu", 2 * f32(3, 4), {}, 17), ("Elu", 2 * f32(3, 4), {"alpha": 0.5}, 17),
  ("Selu", 2 * f32(3, 4), {}, 17), ("Selu", 2 * f32(3, 4), {"alpha": 1.5, "gamma": 2.0}, 17),
  ("LeakyRelu", f32(3, 4), {}, 17), ("LeakyRelu", f32(3, 4), {"alpha": 0.3}, 13),
  ("HardSigmoid", 4 * f32(3, 4), {}, 17), ("HardSigmoid", 4 * f32(3, 4), {"alpha": 0.5, "beta": 0.25}, 17),
  ("HardSwish", 4 * f32(3, 4), {}, 14), ("Gelu", 2 * f32(3, 4), {}, 20),
  ("Gelu", 2 * f32(3, 4), {"approximate": "tanh"}, 20), ("Gelu", 2 * f32(3, 4), {"approximate": "none"}, 21),
  ("Exp", f64(2, 3), {}, 17), ("Sigmoid", f64(2, 3), {}, 17), ("Tanh", f64(2, 3), {}, 17),
  # integer forms
  ("Neg", i64(2, 3), {}, 17), ("Abs", np.array([[-3_000_000_000, 5, -7]], np.int64), {}, 17),
  ("Sign", i32(2, 3), {}, 17), ("Sign", i64(2, 3), {}, 17), ("Relu", i32(2, 3), {}, 14),
  ("Not", bools(2, 3), {}, 17),
]


@pytest.mark.parametrize("op_type,x,attrs,opset", UNARY,
                         ids=[f"{o}-{x.dtype}-{'-'.join(f'{k}={v}' for k, v in a.items())}-op{s}" for o, x, a, s in UNARY])
def test_unary(op_type, x, attrs, opset):
  check_node(op_type, {"x": x}, attrs, opset=opset)


# ---------------------------------------------------------------------------------------------
# binary ops: runtime/runtime with broadcasting, a constant on either side

def _binary(op_type, a, b, where, opset=17):
  """``where``: "rt" both runtime, "right" b is an initializer, "left" a is an initializer."""
  if where == "rt": return check_node(op_type, {"a": a, "b": b}, opset=opset)
  if where == "right": return check_node(op_type, {"a": a}, initializers={"b": b}, opset=opset)
  return check_node(op_type, {"b": b}, initializers={"a": a}, input_order=["a", "b"], opset=opset)


BINARY = [
  ("Sub", f32(3, 1, 5), f32(4, 1), "rt"), ("Sub", f32(2, 3), np.array(1.5, np.float32), "right"),
  ("Sub", np.array([2.0], np.float32), f32(2, 3), "left"), ("Sub", i64(2, 3), i64(3), "right"),
  ("Mul", f32(3, 1, 5), f32(4, 1), "rt"), ("Mul", np.array(3.0, np.float32), f32(2, 3), "left"),
  ("Mul", f32(2, 3), f32(2, 3), "right"), ("Mul", i32(2, 3), np.array([[-3]], np.int32), "right"),
  ("Div", f32(3, 1, 5), pos(4, 1), "rt"), ("Div", f32(2, 3), np.array(4.0, np.float32), "right"),
  ("Div", np.array(1.0, np.float32), pos(2, 3), "left"), ("Div", f64(2, 3), f64(3) + 5, "rt"),
  # integer Div truncates toward zero: -7 / 2 = -3, 7 / -2 = -3
  ("Div", np.array([[-7, 7, -7, 7, 0, -1]], np.int64), np.array([[2, 2, -2, -2, 3, 5]], np.int64), "rt"),
  ("Div", np.array([[-7, 7, -9_000_000_000, 9, 1, -8]], np.int64), np.array(-2, np.int64), "right"),
  ("Div", np.array(-17, np.int32), np.array([[2, -3, 4], [-5, 6, 7]], np.int32), "left"),
  ("Div", i32(3, 4, lo=-50, hi=50), i32(4, lo=1, hi=6), "rt"),
  ("Pow", pos(3, 1, 4), f32(2, 1), "rt"), ("Pow", f32(2, 3), np.array(2.0, np.float32), "right"),
  ("Pow", f32(2, 3), np.array(3, np.int64), "right"), ("Pow", pos(2, 3), np.array([0.5, 1.5, -1.0], np.float32), "right"),
  ("Pow", np.array(2.0, np.float32), f32(2, 3), "left"), ("Pow", f32(2, 3), i32(3, lo=0, hi=4), "rt"),
  ("Pow", f64(2, 3), np.array(2, np.int32), "right"), ("Pow", i64(2, 3), i64(3, lo=0, hi=4), "rt"),
  ("Equal", i64(3, 4, lo=0, hi=3), i64(4, lo=0, hi=3), "rt"), ("Equal", bools(2, 3), bools(3), "rt"),
  ("Equal", f32(2, 3).round(), np.array(0.0, np.float32), "right"),
  ("Less", f32(3, 1, 4), f32(2, 1), "rt"), ("Less", f32(2, 3), np.array(0.0, np.float32), "right"),
  ("LessOrEqual", i32(3, 4, lo=0, hi=3), i32(3, 4, lo=0, hi=3), "rt"),
  ("Greater", i64(2, 3), np.array(1, np.int64), "right"), ("Greater", np.array([0.5], np.float32), f32(2, 3), "left"),
  ("GreaterOrEqual", np.array([1], np.int64), i64(2, 3, lo=0, hi=3), "left"),
  ("GreaterOrEqual", f64(2, 3), f64(3), "rt"),
  ("And", bools(3, 1, 4), bools(2, 1), "rt"), ("Or", bools(2, 3), bools(3), "rt"), ("Xor", bools(2, 3), bools(2, 3), "rt"),
  ("And", bools(2, 3), np.array(True), "right"), ("Xor", np.array([True]), bools(2, 3), "left"),
]


@pytest.mark.parametrize("op_type,a,b,where", BINARY,
                         ids=[f"{o}-{a.dtype}{list(a.shape)}-{b.dtype}{list(b.shape)}-{w}" for o, a, b, w in BINARY])
def test_binary(op_type, a, b, where):
  _binary(op_type, a, b, where)


@pytest.mark.parametrize("opset", [13, 15])
def test_pow_opset(opset):
  _binary("Pow", pos(2, 3), f32(3), "rt", opset=opset)


def test_sub_const_full_tensor_both_sides():
  nodes = [helper.make_node("Sub", ["x", "c"], ["t"]), helper.make_node("Sub", ["c", "t"], ["y"])]
  m = make_model(nodes, {"x": f32(2, 3)}, ["y"], {"c": f32(2, 3)})
  check_model(m, {"x": f32(2, 3)})


# ---------------------------------------------------------------------------------------------
# variadic ops

VARIADIC = [
  ("Sum", [f32(2, 3, 4), f32(3, 1), f32(4)]), ("Sum", [f32(2, 3)]), ("Mean", [f32(2, 3, 4), f32(3, 1), f32(4)]),
  ("Mean", [f32(3, 2), f32(3, 2)]), ("Min", [f32(2, 3, 4), f32(3, 1), f32(4)]), ("Max", [f32(2, 3, 4), f32(3, 1)]),
  ("Max", [i32(2, 3), i32(3), i32(2, 1)]), ("Min", [i64(2, 3), i64(3)]), ("Max", [f64(2, 3)]),
]


@pytest.mark.parametrize("op_type,xs", VARIADIC, ids=[f"{o}-{len(xs)}-{xs[0].dtype}" for o, xs in VARIADIC])
def test_variadic(op_type, xs):
  check_node(op_type, {f"x{k}": x for k, x in enumerate(xs)})


@pytest.mark.parametrize("op_type", ["Sum", "Max"])
def test_variadic_with_constants(op_type):
  check_node(op_type, {"x": f32(2, 3)}, initializers={"c": np.array(0.25, np.float32), "d": f32(3)})


# ---------------------------------------------------------------------------------------------
# Where, PRelu, Clip

WHERE = [
  ({"c": bools(2, 3), "a": f32(2, 3), "b": f32(2, 3)}, {}),
  ({"c": bools(3, 1, 4), "a": f32(2, 1), "b": f32(4)}, {}),
  ({"c": bools(2, 3), "b": i64(3)}, {"a": np.array(-1, np.int64)}),
  ({"a": f32(2, 3), "b": f32(2, 3)}, {"c": bools(3)}),
  ({"c": bools(2, 3), "a": i32(2, 3)}, {"b": np.array([7], np.int32)}),
]


@pytest.mark.parametrize("inputs,inits", WHERE, ids=[f"where{k}" for k in range(len(WHERE))])
def test_where(inputs, inits):
  check_node("Where", inputs, initializers=inits, input_order=["c", "a", "b"])


PRELU = [
  ({"x": f32(2, 3, 4)}, {"s": np.abs(f32(3, 1))}, 17), ({"x": f32(2, 3, 4), "s": f32(4)}, {}, 17),
  ({"x": f32(2, 3)}, {"s": np.array([0.1], np.float32)}, 13), ({"x": f32(2, 3), "s": f32(2, 3)}, {}, 16),
]


@pytest.mark.parametrize("inputs,inits,opset", PRELU, ids=[f"prelu{k}" for k in range(len(PRELU))])
def test_prelu(inputs, inits, opset):
  check_node("PRelu", inputs, initializers=inits, input_order=["x", "s"], opset=opset)


CLIP = [   # (runtime inputs, initializers, input order, opset)
  ({"x": f32(3, 4)}, {}, ["x"], 13),
  ({"x": f32(3, 4)}, {"lo": np.array(-0.5, np.float32)}, ["x", "lo"], 13),
  ({"x": f32(3, 4)}, {"hi": np.array(0.3, np.float32)}, ["x", "", "hi"], 17),
  ({"x": f32(3, 4)}, {"lo": np.array(-0.5, np.float32), "hi": np.array(0.3, np.float32)}, ["x", "lo", "hi"], 21),
  ({"x": f32(3, 4)}, {"lo": np.array(0.5, np.float32), "hi": np.array(-0.3, np.float32)}, ["x", "lo", "hi"], 17),
  ({"x": i64(3, 4)}, {"lo": np.array(-2, np.int64), "hi": np.array(3, np.int64)}, ["x", "lo", "hi"], 17),
  ({"x": i32(3, 4)}, {"hi": np.array(0, np.int32)}, ["x", "", "hi"], 13),
  ({"x": f32(3, 4), "lo": np.array([-0.5], np.float32), "hi": np.array([0.2], np.float32)}, {}, ["x", "lo", "hi"], 17),
  ({"x": f32(3, 4), "hi": np.array([0.2], np.float32)}, {"lo": np.array(-0.1, np.float32)}, ["x", "lo", "hi"], 17),
]


@pytest.mark.parametrize("inputs,inits,order,opset", CLIP, ids=[f"clip{k}-{'_'.join(o)}-op{s}" for k, (_, _, o, s) in enumerate(CLIP)])
def test_clip(inputs, inits, order, opset):
  check_node("Clip", inputs, initializers=inits, input_order=order, opset=opset)


def test_clip_runtime_0d_bounds():
  check_node("Clip", {"x": f32(3, 4), "lo": np.array(-0.5, np.float32), "hi": np.array(0.2, np.float32)})


# ---------------------------------------------------------------------------------------------
# NaN / inf: onnxruntime propagates NaN through Max, Min, Relu, Clip, Sign, HardSigmoid (CUDA's
# fmaxf would drop it) and Clip's omitted bounds are numeric_limits lowest / max (inf -> FLT_MAX)

SPECIAL = np.array([[np.nan, 1.0, -1.0, np.inf, -np.inf, -0.0, 2.5, -0.5]], np.float32)
NAN_CASES = [
  ("Max", {"x": SPECIAL, "y": SPECIAL[:, ::-1].copy()}, {}), ("Min", {"x": SPECIAL, "y": SPECIAL[:, ::-1].copy()}, {}),
  ("Relu", {"x": SPECIAL}, {}), ("Clip", {"x": SPECIAL}, {}), ("Clip", {"x": SPECIAL.astype(np.float64)}, {}),
  ("Clip", {"x": SPECIAL}, {"lo": np.array(-0.5, np.float32)}), ("Sign", {"x": SPECIAL}, {}),
  ("HardSigmoid", {"x": SPECIAL}, {}), ("Round", {"x": SPECIAL}, {}),
]


@pytest.mark.parametrize("op_type,inputs,inits", NAN_CASES,
                         ids=[f"{o}-{list(i)[0]}{len(i) + len(c)}-{i['x'].dtype}" for o, i, c in NAN_CASES])
def test_nan_inf(op_type, inputs, inits):
  check_node(op_type, inputs, initializers=inits)


# ---------------------------------------------------------------------------------------------
# Cast / CastLike

F, D, I32, I64, B = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT32, TensorProto.INT64, TensorProto.BOOL
FRAC = np.array([[-2.7, -1.5, -0.2, 0.0, 0.9, 3.99]], np.float32)
CAST = [
  (FRAC, I32, 17), (FRAC, I64, 13), (FRAC.astype(np.float64), I32, 19), (FRAC, B, 17), (FRAC, D, 21),
  (f64(2, 3), F, 17), (i64(2, 3), F, 17), (np.array([[3_000_000_000, -5]], np.int64), D, 17),
  (i32(2, 3), I64, 17), (i64(2, 3), I32, 17), (i64(2, 3, lo=-1, hi=2), B, 17), (bools(2, 3), F, 17),
  (bools(2, 3), I64, 17), (f32(2, 3), F, 17),
]


@pytest.mark.parametrize("x,to,opset", CAST, ids=[f"{x.dtype}-to-{TensorProto.DataType.Name(t)}-op{s}" for x, t, s in CAST])
def test_cast(x, to, opset):
  check_node("Cast", {"x": x}, {"to": to}, opset=opset)


@pytest.mark.parametrize("like", [np.zeros(2, np.int64), np.zeros(1, np.float64)], ids=["int64", "float64"])
def test_cast_like(like):
  check_node("CastLike", {"x": FRAC}, initializers={"like": like}, input_order=["x", "like"])


def test_cast_like_runtime_target():
  check_node("CastLike", {"x": FRAC, "like": np.zeros(3, np.int32)})


# ---------------------------------------------------------------------------------------------
# fusion: a chain of elementwise nodes is one kernel

def test_elementwise_chain_is_one_kernel():
  """Nine pointwise nodes (constants on both sides, a second runtime input entering mid-chain, a
  bool condition, a dtype change) in a straight chain: one kernel."""
  nodes = [helper.make_node("Mul", ["x", "s"], ["t0"]), helper.make_node("Sub", ["t0", "z"], ["t1"]),
           helper.make_node("Tanh", ["t1"], ["t2"]), helper.make_node("Clip", ["t2", "lo", "hi"], ["t3"]),
           helper.make_node("LeakyRelu", ["t3"], ["t4"], alpha=0.2), helper.make_node("Div", ["one", "t4"], ["t5"]),
           helper.make_node("Pow", ["t5", "two"], ["t6"]), helper.make_node("Where", ["c", "t6", "z"], ["t7"]),
           helper.make_node("Cast", ["t7"], ["y"], to=TensorProto.DOUBLE)]
  feeds = {"x": f32(2, 3, 4), "z": f32(3, 1), "c": bools(4)}
  inits = {"s": np.array(1.5, np.float32), "lo": np.array(-0.8, np.float32), "hi": np.array(0.8, np.float32),
           "one": np.array([1.0], np.float32), "two": np.array(2, np.int64)}
  cm = check_model(make_model(nodes, feeds, ["y"], inits), feeds)
  assert len(cm.calls) == 1


def test_mul_runtime_0d():
  check_node("Mul", {"a": f32(2, 3), "b": np.array(-1.5, np.float32)})


# ---------------------------------------------------------------------------------------------
# errors

def _compile_node(op_type, inputs, attrs=None, opset=17):
  node = helper.make_node(op_type, list(inputs), ["y"], name="bad", **(attrs or {}))
  return mc.compile(make_model([node], inputs, ["y"], opset=opset))


@pytest.mark.parametrize("to", [TensorProto.FLOAT8E4M3FN, TensorProto.INT4], ids=["float8e4m3fn", "int4"])
def test_cast_unsupported_type_raises(to):
  with pytest.raises(mc.UnsupportedOpError, match="Cast node 'bad'"):
    _compile_node("Cast", {"x": f32(2, 3)}, {"to": to}, opset=21)     # (float8 and int4 exist from opset 21)


def test_cast_to_float16_rounds_at_the_boundary():
  x = f32(2, 3) * 1000
  y = _compile_node("Cast", {"x": x}, {"to": TensorProto.FLOAT16}).run({"x": x}, device="cpu")[0]
  assert y.dtype == np.float16
  np.testing.assert_array_equal(y, x.astype(np.float16))


def test_gelu_unknown_approximate_raises():
  with pytest.raises(mc.UnsupportedOpError, match="approximate"):
    _compile_node("Gelu", {"x": f32(2, 3)}, {"approximate": "sigmoid"}, opset=20)


def test_erf_int_raises():
  with pytest.raises(mc.ModelError, match="ill-typed.*Erf.*int32"):
    _compile_node("Erf", {"x": i32(2, 3)})
