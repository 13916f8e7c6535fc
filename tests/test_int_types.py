"""The integer element types beside the index types: int8, uint8, int16, uint16, uint32, uint64 through import,
kernels (emitter and CPU simulator), run and save. Arithmetic wraps to the type after every operation, as ONNX's
typed arithmetic (numpy's) does; checked against numpy on the full range of each type."""
import numpy as np
import pytest
from onnx import helper

import minicomp as mc
from minicomp.ir.ops import wrap_int
from onnx_harness import make_model

TYPES = [np.int8, np.uint8, np.int16, np.uint16, np.uint32, np.uint64]


def _full_range(t, shape, seed):
  """Random values over the whole range, with the extremes (-128, 127, 0, 1, -1, ...) among them."""
  info = np.iinfo(t)
  a = np.random.default_rng(seed).integers(info.min, info.max, shape, dtype=t, endpoint=True)
  edges = np.array([info.min, info.max, 0, 1, info.max - 1] + ([-1, info.min + 1] if info.min else []), t)
  a.reshape(-1)[:len(edges)] = np.roll(edges, seed)
  return a


@pytest.mark.parametrize("t", TYPES, ids=lambda t: t.__name__)
def test_arithmetic_wraps_after_every_operation(t):
  """(a + b) * c - a, then Neg (signed types: ONNX's Neg takes no unsigned ones), Max and Abs: numpy's typed
  arithmetic, element for element, over each type's whole range (an int8 sum of 100 + 100 is -56 before it is
  multiplied)."""
  a, b, c = (_full_range(t, (4, 16), s) for s in range(3))
  signed = np.issubdtype(t, np.signedinteger)
  nodes = [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Mul", ["s", "c"], ["p"]),
           helper.make_node("Sub", ["p", "a"], ["d"]), helper.make_node("Neg" if signed else "Identity", ["d"], ["n"]),
           helper.make_node("Max", ["n", "b"], ["m"]), helper.make_node("Abs", ["m"], ["y"])]
  m = make_model(nodes, {"a": a, "b": b, "c": c}, ["y"], opset=17)
  got = mc.compile(m, target="sm_86", progress=False).run({"a": a, "b": b, "c": c})[0]
  with np.errstate(over="ignore"):
    d = (a + b) * c - a
    want = np.abs(np.maximum(-d if signed else d, b))
  assert got.dtype == t and np.array_equal(got, want)


@pytest.mark.parametrize("t", TYPES, ids=lambda t: t.__name__)
def test_division_and_mod_follow_onnx(t):
  """Div truncates toward zero, Mod (fmod=0) takes the divisor's sign; unsigned ones are C's / and %."""
  a, b = _full_range(t, (64,), 3), _full_range(t, (64,), 4)
  b[b == 0] = 3
  m = make_model([helper.make_node("Div", ["a", "b"], ["q"]), helper.make_node("Mod", ["a", "b"], ["r"])],
                 {"a": a, "b": b}, ["q", "r"], opset=17)
  q, r = mc.compile(m, target="sm_86", progress=False).run({"a": a, "b": b})
  with np.errstate(over="ignore"):
    want_q = np.array([wrap_int(int(np.trunc(int(x) / int(y))) if abs(int(x)) < 2**52 else int(x) // int(y), t.__name__)
                       for x, y in zip(a, b)], t) if np.issubdtype(t, np.signedinteger) else a // b
  assert np.array_equal(q, want_q) and np.array_equal(r, np.mod(a, b))


@pytest.mark.parametrize("t", TYPES + [np.int32, np.int64], ids=lambda t: t.__name__)
def test_an_integer_zero_divisor_gives_0_as_onnx_reference_does(t):
  """ONNX leaves it undefined and onnxruntime refuses to run it; numpy and ONNX's reference evaluator give 0 for
  Div and Mod (Div divided by 1, giving the dividend, until the fuzzer found it on 2026-11-30)."""
  from onnx.reference import ReferenceEvaluator
  a = _full_range(t, (64,), 5)
  b = np.zeros(64, t)
  b[::3] = 2
  m = make_model([helper.make_node("Div", ["a", "b"], ["q"]), helper.make_node("Mod", ["a", "b"], ["r"])],
                 {"a": a, "b": b}, ["q", "r"], opset=17)
  q, r = mc.compile(m, target="sm_86", progress=False).run({"a": a, "b": b})
  with np.errstate(divide="ignore", over="ignore"):
    want_q, want_r = ReferenceEvaluator(m).run(None, {"a": a, "b": b})
  assert np.array_equal(q[b == 0], np.zeros((b == 0).sum(), t)) and np.array_equal(r[b == 0], want_r[b == 0])
  assert np.array_equal(q[b == 0], want_q[b == 0])


def test_narrow_types_save_load_and_cast(tmp_path):
  """A uint8 image cast to float and back, saved and loaded: the types survive the saved format."""
  from minicomp.saved_model_load import load
  x = np.arange(256, dtype=np.uint8).reshape(16, 16)
  nodes = [helper.make_node("Cast", ["x"], ["f"], to=1), helper.make_node("Mul", ["f", "half"], ["h"]),
           helper.make_node("Cast", ["h"], ["y"], to=3)]                        # to int8: 0..127
  m = make_model(nodes, {"x": x}, ["y"], initializers={"half": np.array(0.5, np.float32)}, opset=17)
  mod = mc.compile(m, target="sm_86", progress=False)
  mod.save(tmp_path / "m")
  got = load(tmp_path / "m").run({"x": x})[0]
  assert got.dtype == np.int8 and np.array_equal(got, (x.astype(np.float32) * 0.5).astype(np.int8))


def test_wrap_int():
  assert wrap_int(200, "int8") == -56 and wrap_int(-1, "uint16") == 65535 and wrap_int(2**64 + 5, "uint64") == 5
  assert wrap_int(2**31, "int32") == -2**31


@pytest.mark.parametrize("t", [np.int32, np.int64], ids=lambda t: t.__name__)
def test_max_of_the_lowest_values_is_the_lowest_value(t):
  """A max-reduction starts from the type's lowest value (it started from lowest + 1, which a row holding only
  the lowest value returned); C has no literal for int32's / int64's lowest, so it is printed as -max - 1."""
  x = np.full((3, 5), np.iinfo(t).min, t)
  x[0, 1] = 5
  m = make_model([helper.make_node("ReduceMax", ["x"], ["y"], keepdims=0, axes=[1])], {"x": x}, ["y"], opset=17)
  got = mc.compile(m, target="sm_86", progress=False).run({"x": x})[0]
  assert np.array_equal(got, x.max(axis=1))


@pytest.mark.parametrize("t", TYPES + [np.int32, np.int64], ids=lambda t: t.__name__)
def test_bitwise_ops_and_shifts_follow_numpy(t):
  """BitwiseAnd / Or / Xor / Not over the whole range, and BitShift both ways (opset 28: signed types too) by
  every amount from -2 to the width + 2: past the width (or negative) a shift gives the sign fill, -1 for a right
  shift of a negative value, else 0 (numpy's answer, which C leaves undefined), a signed right shift is
  arithmetic."""
  a, b = _full_range(t, (4, 16), 5), _full_range(t, (4, 16), 6)
  bits = np.iinfo(t).bits
  amounts = np.arange(0 if np.iinfo(t).min == 0 else -2, bits + 3)
  s = np.resize(amounts, 64).reshape(4, 16).astype(t)
  nodes = [helper.make_node("BitwiseAnd", ["a", "b"], ["and"]), helper.make_node("BitwiseOr", ["a", "b"], ["or"]),
           helper.make_node("BitwiseXor", ["a", "b"], ["xor"]), helper.make_node("BitwiseNot", ["a"], ["not"]),
           helper.make_node("BitShift", ["a", "s"], ["shl"], direction="LEFT"),
           helper.make_node("BitShift", ["a", "s"], ["shr"], direction="RIGHT")]
  feeds = {"a": a, "b": b, "s": s}
  m = make_model(nodes, feeds, ["and", "or", "xor", "not", "shl", "shr"], opset=28)
  got = mc.compile(m, target="sm_86", progress=False).run(feeds)
  out = s.astype(np.int64) >= bits
  if np.iinfo(t).min: out |= s.astype(np.int64) < 0
  safe = np.where(out, 0, s).astype(t)
  with np.errstate(over="ignore"):
    shl = np.where(out, 0, np.left_shift(a, safe)).astype(t)
    shr = np.where(out, np.where(a < 0, -1, 0) if np.iinfo(t).min else 0, np.right_shift(a, safe)).astype(t)
  want = [a & b, a | b, a ^ b, ~a, shl, shr]
  for name, g, w in zip(["and", "or", "xor", "not", "shl", "shr"], got, want):
    assert g.dtype == t and np.array_equal(g, w), name


@pytest.mark.parametrize("src, dst", [(np.int8, np.uint8), (np.uint16, np.int16), (np.uint32, np.int32),
                                      (np.int64, np.uint64), (np.bool_, np.uint8), (np.bool_, np.int8)])
def test_bitcast_between_integer_types_keeps_the_bits(src, dst):
  """ONNX BitCast (opset 26) between integer types, and from bool: numpy's view of the same bytes."""
  from onnx_harness import NP_TO_ONNX
  x = (_full_range(src, (32,), 7) if src is not np.bool_ else np.arange(32) % 3 == 0).astype(src)
  m = make_model([helper.make_node("BitCast", ["x"], ["y"], to=NP_TO_ONNX[np.dtype(dst)])], {"x": x}, ["y"],
                 opset=26)
  (y,) = mc.compile(m, target="sm_86", progress=False).run({"x": x})
  assert y.dtype == dst and np.array_equal(y, x.view(dst))


@pytest.mark.parametrize("src, dst", [(np.float32, np.int32), (np.float32, np.uint32), (np.int32, np.float32),
                                      (np.float64, np.int64), (np.uint64, np.float64)])
def test_bitcast_between_a_float_and_an_integer_keeps_the_bits(src, dst):
  """The IR's bitcast intrinsic: numpy's view of the same bytes, NaN, infinities, -0.0 and denormals included (an
  integer read as a float may be a NaN: compared bit for bit); in the kernel, the evaluator and the interpreter."""
  from onnx_harness import NP_TO_ONNX

  from minicomp.ir.evaluate import evaluate
  from minicomp.ir.expr import call, var
  if np.dtype(src).kind == "f":
    x = np.concatenate([np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-40, 1.5, -3.25], src),
                        np.random.default_rng(2).standard_normal(24).astype(src)])
  else:
    x = _full_range(src, (32,), 9)
  m = make_model([helper.make_node("BitCast", ["x"], ["y"], to=NP_TO_ONNX[np.dtype(dst)])], {"x": x}, ["y"],
                 opset=26)
  cm = mc.compile(m, target="sm_86", progress=False)
  (y,) = cm.run({"x": x})
  assert y.dtype == dst and y.tobytes() == x.view(dst).tobytes()
  assert "mc_bitcast<" in "".join(k.source for k in cm.kernels)
  e = call("bitcast", var("v", np.dtype(src).name), dtype=np.dtype(dst).name)
  assert evaluate(e, {"v": x}).tobytes() == x.view(dst).tobytes()
  from minicomp.ir.interp import run_program
  X = mc.placeholder(x.shape, np.dtype(src).name, "X")
  Y = mc.compute(x.shape, lambda i: call("bitcast", X[i], dtype=np.dtype(dst).name), "Y")
  assert np.asarray(run_program(mc.Schedule([Y]).lower(), x)).tobytes() == x.view(dst).tobytes()


def test_bitcast_of_a_half_float_is_refused_naming_the_types():
  g = helper.make_graph([helper.make_node("BitCast", ["x"], ["y"], to=5, name="bc")], "g",
                        [helper.make_tensor_value_info("x", 10, [4])], [helper.make_tensor_value_info("y", 5, [4])])
  m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 26)])
  with pytest.raises(mc.errors.UnsupportedOpError, match="BitCast from float16 to int16 is not supported"):
    mc.compile(m, target="sm_86", progress=False)
  # types of two widths: a clean ModelError (ONNX's checker refuses it before the op's own width check does)
  x = np.ones(4, np.float32)
  m = make_model([helper.make_node("BitCast", ["x"], ["y"], to=7)], {"x": x}, ["y"], opset=26, output_types={"y": 7})
  with pytest.raises(mc.errors.ModelError):
    mc.compile(m, target="sm_86", progress=False)
