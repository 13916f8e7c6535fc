"""ONNX linear algebra, reductions and normalisations through minicomp.compile vs onnxruntime."""
import numpy as np
import pytest
from onnx import TensorProto, helper

import minicomp as mc
from minicomp.errors import ShapeError, UnsupportedOpError
from onnx_harness import check_model, check_node, make_model


def f32(*shape, seed=0, dtype=np.float32):
  return np.random.default_rng(seed + 7 * len(shape)).standard_normal(shape).astype(dtype)


def ints(*shape, dtype=np.int64, lo=-4, hi=5, seed=0):
  return np.random.default_rng(seed).integers(lo, hi, shape).astype(dtype)


def i64(*v): return np.array(v, np.int64)


def compile_node(op_type, inputs, attrs=None, initializers=None, opset=17, y_shape=None):
  """minicomp alone (for models onnxruntime rejects or that must fail in minicomp); ``y_shape``
  declares the output where shape inference cannot (so that the ONNX checker passes)."""
  node = helper.make_node(op_type, list(inputs) + list(initializers or {}), ["y"], name=f"{op_type.lower()}_node",
                          **(attrs or {}))
  m = make_model([node], inputs, ["y"], initializers, opset)
  if y_shape is not None:
    m.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape))
  return mc.compile(m)


# ------------------------------------------------------------------------------------------ MatMul / Gemm

@pytest.mark.parametrize("a,b", [((3, 4), (4, 5)), ((4,), (2, 4, 5)), ((2, 3, 4), (4,)), ((4,), (4,)),
                                 ((2, 1, 3, 4), (3, 4, 5)), ((3, 1), (1, 5)), ((1, 3, 4), (2, 4, 2))],
                         ids=["2d", "1d_3d", "3d_1d", "1d_1d", "batch_bcast", "k1", "batch1_bcast"])
def test_matmul(a, b):
  check_node("MatMul", {"a": f32(*a), "b": f32(*b, seed=1)})


def test_matmul_const_weight_int64():
  check_node("MatMul", {"a": ints(2, 3, 4)}, initializers={"w": ints(4, 5, seed=1)})


@pytest.mark.parametrize("op_type,shapes,attrs,match", [
  ("MatMul", [(3, 4), (5, 2)], {}, "inner dims differ"),
  ("MatMul", [(2, 3, 4), (3, 4, 2)], {}, "do not broadcast"),
  ("Gemm", [(3, 4), (4, 2), (3, 3)], {}, "do not broadcast"),
  ("Einsum", [(3, 4), (5, 2)], {"equation": "ij,jk->ik"}, "index 'j' has sizes 4 and 5")],
  ids=["matmul_k", "matmul_batch", "gemm_c", "einsum_sizes"])
def test_linalg_shape_errors(op_type, shapes, attrs, match):
  with pytest.raises(ShapeError, match=f"{op_type} node .*{match}"):
    compile_node(op_type, {f"x{k}": f32(*s) for k, s in enumerate(shapes)}, attrs, y_shape=[1])


@pytest.mark.parametrize("attrs,c", [({}, None), ({"transA": 1}, (5,)), ({"transB": 1, "alpha": 0.5}, None),
                                     ({"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0}, (3, 1)),
                                     ({"beta": 0.0}, (3, 5)), ({"alpha": 2.0, "beta": -1.0}, (1,))],
                         ids=["plain", "transA_cN", "transB_alpha", "both_cM1", "beta0", "c_scalar"])
def test_gemm(attrs, c):
  a = f32(4, 3) if attrs.get("transA") else f32(3, 4)
  b = f32(5, 4, seed=1) if attrs.get("transB") else f32(4, 5, seed=1)
  inits = {"c": f32(*c, seed=2)} if c else None
  check_node("Gemm", {"a": a, "b": b}, attrs, initializers=inits)


def test_gemm_runtime_c_float64():
  check_node("Gemm", {"a": f32(3, 4, dtype=np.float64), "b": f32(4, 5, seed=1, dtype=np.float64),
                      "c": f32(3, 5, seed=2, dtype=np.float64)}, {"alpha": 0.25})


# ------------------------------------------------------------------------------------------ Einsum

@pytest.mark.parametrize("eq,a,b", [("ij,jk->ik", (3, 4), (4, 5)), ("bij,bjk->bik", (2, 3, 4), (2, 4, 5)),
                                    ("bhid,bhjd->bhij", (2, 2, 3, 4), (2, 2, 5, 4)),
                                    ("bhij,bhjd->bhid", (2, 2, 3, 5), (2, 2, 5, 4)), ("bid,jd->bij", (2, 3, 4), (5, 4)),
                                    ("i,j->ij", (3,), (4,)), ("ij, kj -> ki", (3, 4), (5, 4))],
                         ids=["mm", "bmm", "qk", "av", "bid_jd", "outer", "spaces_transposed_out"])
def test_einsum(eq, a, b):
  check_node("Einsum", {"a": f32(*a), "b": f32(*b, seed=1)}, {"equation": eq})


@pytest.mark.parametrize("eq,shapes", [("ij,jk", [(3, 4), (4, 5)]), ("ij->ji", [(3, 4)])], ids=["implicit", "one_operand"])
def test_einsum_implicit_output_and_one_operand(eq, shapes):
  check_node("Einsum", {f"x{k}": f32(*s, seed=k) for k, s in enumerate(shapes)}, {"equation": eq})


@pytest.mark.parametrize("eq,shapes", [("ii,ij->j", [(3, 3), (3, 4)]), ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)]),
                                       ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)])],
                         ids=["repeated", "ellipsis", "three_operands"])
def test_einsum_unsupported(eq, shapes):
  with pytest.raises(UnsupportedOpError, match="Einsum node"):
    check_node("Einsum", {f"x{k}": f32(*s, seed=k) for k, s in enumerate(shapes)}, {"equation": eq})


# ------------------------------------------------------------------------------------------ Trilu

@pytest.mark.parametrize("upper,k", [(1, None), (0, 1), (1, -1), (0, -2)],
                         ids=["upper", "lower_k1", "upper_kneg", "lower_kneg2"])
def test_trilu(upper, k):
  inits = {"k": np.array(k, np.int64)} if k is not None else None
  check_node("Trilu", {"x": f32(2, 4, 5)}, {"upper": upper}, initializers=inits, opset=14)


def test_trilu_int64_and_runtime_k_error():
  check_node("Trilu", {"x": ints(3, 3)}, {"upper": 0})
  with pytest.raises(UnsupportedOpError, match="k must be a constant"):
    check_node("Trilu", {"x": f32(3, 3), "k": np.array(0, np.int64)})


# ------------------------------------------------------------------------------------------ Reduce*

REDUCE_OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare", "ReduceL1",
              "ReduceL2", "ReduceLogSumExp"]


def reduce_node(op_type, x, axes, opset, **attrs):
  """A Reduce* node in the form of ``opset``: axes attribute (13, except ReduceSum) or axes input."""
  as_input = opset >= 18 or op_type == "ReduceSum"
  if axes is not None and not as_input: attrs["axes"] = list(axes)
  inits = {"axes": i64(*axes)} if as_input and axes is not None else None
  order = ["x", "axes"] if inits else ["x"]
  return check_node(op_type, {"x": x}, attrs, initializers=inits, opset=opset, input_order=order)


@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize("op_type", REDUCE_OPS)
def test_reduce_opset_forms(op_type, opset):
  x = f32(3, 4, 5)
  if op_type == "ReduceL2": x = np.abs(x) + 0.1   # keep sqrt well conditioned
  reduce_node(op_type, x, [-1, 0], opset, keepdims=int(opset == 13))


@pytest.mark.parametrize("axes,attrs", [(None, {}), ([], {}), ([1], {"keepdims": 0}), ([-2, -1], {}),
                                        ([0, 2], {"keepdims": 0}), ([], {"noop_with_empty_axes": 1}),
                                        (None, {"keepdims": 0})],
                         ids=["absent_all", "empty_all", "mid_nokeep", "neg", "outer_inner", "noop", "all_to_scalar"])
def test_reduce_axes_variants(axes, attrs):
  reduce_node("ReduceMean", f32(2, 3, 4), axes, 18, **attrs)


def test_reduce_extent1_axis():
  reduce_node("ReduceMax", f32(3, 1, 4), [1], 13)    # reducing an extent-1 dim: an elementwise stage


@pytest.mark.parametrize("op_type", ["ReduceSumSquare", "ReduceL2", "ReduceLogSumExp"])
def test_reduce_noop_keeps_elementwise_part(op_type):
  # noop_with_empty_axes reduces over no dims: onnxruntime still squares (SumSquare), takes |x| (L2)
  reduce_node(op_type, f32(3, 4), [], 18, noop_with_empty_axes=1)


@pytest.mark.parametrize("op_type,dtype", [("ReduceSum", np.int64), ("ReduceMean", np.int32), ("ReduceMean", np.int64),
                                           ("ReduceL2", np.int32), ("ReduceProd", np.int64), ("ReduceMin", np.int32),
                                           ("ReduceL1", np.int64)])
def test_reduce_ints(op_type, dtype):
  reduce_node(op_type, ints(3, 5, dtype=dtype), [1], 18)   # int mean truncates toward zero, int L2 truncates sqrt


@pytest.mark.parametrize("op_type", ["ReduceMax", "ReduceMin"])
def test_reduce_bool_opset20(op_type):
  x = np.random.default_rng(3).random((3, 4, 2)) < 0.4
  reduce_node(op_type, x, [1], 20)


def test_reduce_runtime_axes_error():
  # shape inference cannot type y when axes is a runtime input: declare it so the checker passes
  g = helper.make_graph([helper.make_node("ReduceMax", ["x", "axes"], ["y"], name="rmax")], "t",
                        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4]),
                         helper.make_tensor_value_info("axes", TensorProto.INT64, [1])],
                        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 1])])
  m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
  m.ir_version = 8
  with pytest.raises(UnsupportedOpError, match="ReduceMax node 'rmax': axes must be a constant"):
    mc.compile(m)


def test_reduce_int_logsumexp_error():
  with pytest.raises(UnsupportedOpError, match="ReduceLogSumExp node"):
    reduce_node("ReduceLogSumExp", ints(3, 4), [1], 18)


def _compile_run(model, feeds):
  return mc.compile(model).run(feeds, device="cpu")


def test_reduce_sum_long_row_vs_float64():
  # A sum of 8192 float32 values: onnxruntime (blocked, vectorised) and minicomp (cross-thread tree)
  # round in different orders, so both are compared with float64 numpy; the bound is the usual
  # n * eps * sum|x| worst case shrunk by sqrt(n) for random rounding: 8192**0.5 * 6e-8 * ~6600.
  x = f32(2, 8192) + 1.0
  m = make_model([helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0)], {"x": x}, ["y"], {"axes": i64(1)})
  ref = x.astype(np.float64).sum(axis=1)
  np.testing.assert_allclose(_compile_run(m, {"x": x})[0], ref, rtol=0, atol=5e-3)


# ------------------------------------------------------------------------------------------ ArgMax / ArgMin

@pytest.mark.parametrize("op_type", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("attrs", [{}, {"axis": -1, "keepdims": 0}, {"axis": 1, "select_last_index": 1}],
                         ids=["default", "neg_nokeep", "last"])
def test_argmax_argmin_ties(op_type, attrs):
  check_node(op_type, {"x": ints(3, 4, 5, lo=0, hi=3)}, attrs)   # few distinct values: many ties


def test_argmax_float_and_extent1():
  check_node("ArgMax", {"x": f32(4, 6)}, {"axis": 1, "keepdims": 0})
  check_node("ArgMin", {"x": f32(4, 1, 3)}, {"axis": 1})


# ------------------------------------------------------------------------------------------ Softmax / LogSoftmax

@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("shape,axis", [((3, 4, 5), -1), ((3, 4, 5), 1), ((3, 4, 5), 0), ((70,), 0)],
                         ids=["last", "mid", "first", "rank1_long"])
def test_softmax(op_type, shape, axis):
  check_node(op_type, {"x": f32(*shape) * 4}, {"axis": axis}, opset=13)


def test_softmax_large_logits_stable():
  x = f32(2, 8) * 30 + 80    # exp(x) overflows float32 without the max shift
  check_node("Softmax", {"x": x})


# ------------------------------------------------------------------------------------------ LayerNormalization

@pytest.mark.parametrize("shape,axis,bias", [((3, 4, 5), -1, False), ((3, 4, 5), 1, True), ((2, 3, 4), -2, True),
                                             ((4, 6), 0, True)], ids=["last", "axis1_bias", "neg2", "all"])
def test_layer_norm(shape, axis, bias):
  norm = shape[axis:]
  inits = {"s": f32(*norm, seed=1)} | ({"b": f32(*norm, seed=2)} if bias else {})
  check_node("LayerNormalization", {"x": f32(*shape)}, {"axis": axis, "epsilon": 1e-3}, initializers=inits)


def test_layer_norm_mean_invstd_outputs():
  check_node("LayerNormalization", {"x": f32(3, 4, 6)}, {"axis": -1}, initializers={"s": f32(6, seed=1)}, n_outputs=3)


def test_layer_norm_float64_outputs_float32_stats():
  check_node("LayerNormalization", {"x": f32(3, 5, dtype=np.float64)},
             initializers={"s": f32(5, seed=1, dtype=np.float64), "b": f32(5, seed=2, dtype=np.float64)}, n_outputs=3)


def test_layer_norm_offset_vs_float64():
  # Rows with mean ~50: minicomp's two-pass float32 mean / variance and onnxruntime's accumulation
  # differ, so compare with float64 numpy; the mean of 512 values near 50 carries ~50 * 1e-7 * log2(512)
  # absolute error, i.e. ~5e-6 after dividing by the unit std: atol 2e-5.
  x = f32(4, 512) + 50.0
  s = np.ones(512, np.float32)
  m = make_model([helper.make_node("LayerNormalization", ["x", "s"], ["y"])], {"x": x}, ["y"], {"s": s})
  xd = x.astype(np.float64)
  mu = xd.mean(-1, keepdims=True)
  ref = (xd - mu) / np.sqrt(((xd - mu) ** 2).mean(-1, keepdims=True) + 1e-5)
  np.testing.assert_allclose(_compile_run(m, {"x": x})[0], ref, rtol=0, atol=2e-5)


def test_layer_norm_stash_type_error():
  with pytest.raises(UnsupportedOpError, match="stash_type"):
    compile_node("LayerNormalization", {"x": f32(3, 5, dtype=np.float64)}, {"stash_type": 11},
                 initializers={"s": f32(5, dtype=np.float64)})


# ------------------------------------------------------------------------------------------ CumSum

@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)],
                         ids=["plain", "excl", "rev", "excl_rev"])
def test_cumsum(exclusive, reverse):
  check_node("CumSum", {"x": f32(3, 6)}, {"exclusive": exclusive, "reverse": reverse},
             initializers={"axis": np.array(1, np.int64)})


def test_cumsum_neg_axis_int64_and_int32_axis():
  check_node("CumSum", {"x": ints(2, 5, 3)}, initializers={"axis": np.array(-2, np.int64)})
  check_node("CumSum", {"x": f32(4, 2)}, {"reverse": 1}, initializers={"axis": np.array([0], np.int32)})


def test_cumsum_runtime_axis_error():
  with pytest.raises(UnsupportedOpError, match="axis must be a constant"):
    check_node("CumSum", {"x": f32(3, 4), "axis": np.array(1, np.int64)})


# ------------------------------------------------------------------------------------------ attention block

def _attention(use_einsum: bool, B=2, H=2, S=5, D=4):
  q, k, v = f32(B, H, S, D), f32(B, H, S, D, seed=1), f32(B, H, S, D, seed=2)
  if use_einsum:
    nodes = [helper.make_node("Einsum", ["q", "k"], ["s"], equation="bhid,bhjd->bhij")]
  else:
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s"])]
  nodes += [helper.make_node("Mul", ["s", "scale"], ["ss"]), helper.make_node("Softmax", ["ss"], ["p"], axis=-1),
            helper.make_node("MatMul", ["p", "v"], ["y"])]
  feeds = {"q": q, "k": k, "v": v}
  m = make_model(nodes, feeds, ["y"], {"scale": np.array(1 / np.sqrt(D), np.float32)})
  return check_model(m, feeds)


def test_attention_einsum():
  _attention(True)


def test_attention_transpose_matmul():
  _attention(False)   # needs the shape-ops helper's Transpose


def test_matmul_bias_relu_is_one_kernel():
  nodes = [helper.make_node("MatMul", ["x", "w"], ["t"]), helper.make_node("Add", ["t", "b"], ["u"]),
           helper.make_node("Relu", ["u"], ["y"])]
  m = make_model(nodes, {"x": f32(6, 8)}, ["y"], {"w": f32(8, 5, seed=1), "b": f32(5, seed=2)})
  assert len(check_model(m, {"x": f32(6, 8)}).calls) == 1


DFT = {   # (input shape, attributes, dft_length or None)
  "real_padded_axis1": ((2, 10, 3, 1), {"axis": 1}, 12),
  "complex_truncated_inverse": ((2, 3, 10, 2), {"axis": 2, "inverse": 1}, 6),
  "real_onesided_odd": ((1, 9, 2, 1), {"axis": 1, "onesided": 1}, None),
}


@pytest.mark.parametrize("case", list(DFT))
def test_dft(case):
  """DFT (opset 17) against onnxruntime: real and complex input, dft_length padding and truncating, inverse,
  onesided."""
  shape, attrs, n = DFT[case]
  x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
  inits = {} if n is None else {"n": np.array(n, np.int64)}
  check_node("DFT", {"x": x}, attrs, inits, opset=17, input_order=["x"] + list(inits))


@pytest.mark.parametrize("n", [9, 10])
def test_dft_irfft_matches_numpy(n):
  """inverse + onesided is numpy's irfft (the first n // 2 + 1 inputs, real output), for odd and even lengths."""
  rng = np.random.default_rng(1)
  x = rng.standard_normal((2, 7, 2)).astype(np.float32)
  node = helper.make_node("DFT", ["x", "n", "axis"], ["y"], inverse=1, onesided=1)
  m = make_model([node], {"x": x}, ["y"], {"n": np.array(n, np.int64), "axis": np.array(1, np.int64)}, 20)
  got = mc.compile(m, progress=False).run({"x": x}, device="cpu")[0]
  want = np.fft.irfft(x[..., 0] + 1j * x[..., 1], n=n, axis=1)[..., None]
  assert got.shape == want.shape and got.dtype == np.float32
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
