"""Every reduction and normalisation op on rows holding +-Inf, NaN, denormals and values near 1e38,
against onnxruntime. Where onnxruntime's own float math departs from the op's definition (an overflow
it does not need, a NaN its running window leaks, the lowest float as the max of -Inf) the row is
checked against the definition computed in float64 instead; each such row says why."""
import numpy as np
import pytest
from onnx import helper

import minicomp as mc
from onnx_harness import make_model, run_ort

ROWS = {
  "pinf": [1.0, np.inf, 2.0, 3.0], "ninf": [1.0, -np.inf, 2.0, 3.0], "all_ninf": [-np.inf] * 4,
  "all_pinf": [np.inf] * 4, "mixed_inf": [np.inf, -np.inf, 1.0, 0.0], "nan": [1.0, np.nan, 2.0, 3.0],
  "denormal": [1e-40, -1e-41, 2e-45, 0.0], "big": [1e38, 3e38, -3e38, 1e38], "big_pos": [3e38] * 4,
}
X = np.array(list(ROWS.values()), np.float32)        # one row per kind, reduced along the last axis


def _mean64(r): return np.float32(np.mean(np.asarray(r, np.float64)))


# (op, row) -> what minicomp computes where onnxruntime differs, and why
DEFINITION = {
  # onnxruntime sums in float32 first and overflows to inf; minicomp scales each term by 1/n first
  **{(op, row): _mean64 for op in ("ReduceMean", "GlobalAveragePool") for row in ("big", "big_pos")},
  # ... so LayerNormalization's mean of that row is finite (5e37): its variance overflows (InvStdDev 0) and only the
  # deviation past 3.4e38 is NaN (inf * 0); the others are B (0), where onnxruntime's infinite mean makes them all NaN
  ("LayerNormalization", "big"): lambda r: np.array([0.0, 0.0, np.nan, 0.0], np.float32),
  # onnxruntime starts its max at the lowest finite float, so a row of -inf gives -3.4e38
  ("GlobalMaxPool", "all_ninf"): lambda r: np.float32(-np.inf),
  # a NaN makes a max / min reduction NaN and is its arg extreme (ONNX's reference, numpy); onnxruntime's
  # scans skip a NaN that does not come first (ReduceMax returns 2 here)
  ("ReduceMax", "nan"): lambda r: np.float32(np.nan), ("ReduceMin", "nan"): lambda r: np.float32(np.nan),
  ("ArgMax", "nan"): lambda r: np.int64(np.argmax(r)), ("ArgMin", "nan"): lambda r: np.int64(np.argmin(r)),
}


def _lrn64(x, size=3, alpha=1e-4, beta=0.75, bias=1.0):
  """ONNX's LRN over channels (axis 1), in float64: onnxruntime keeps a running window sum, so one inf
  makes inf - inf = NaN in channels outside its window."""
  x = np.asarray(x, np.float64)
  sq, c = np.zeros_like(x), x.shape[1]
  for k in range(c):
    lo, hi = max(0, k - (size - 1) // 2), min(c, k + (size - 1) // 2 + (size - 1) % 2 + 1)
    sq[:, k] = (x[:, lo:hi] ** 2).sum(axis=1)
  with np.errstate(all="ignore"):
    return (x / (bias + alpha / size * sq) ** beta).astype(np.float32)


# op -> (attributes, opset, input shape from X, constant inputs)
OPS = {
  "ReduceLogSumExp": ({"axes": [1]}, 13, X, {}), "ReduceMax": ({"axes": [1]}, 13, X, {}),
  "ReduceMin": ({"axes": [1]}, 13, X, {}), "ReduceSum": ({}, 13, X, {"axes": np.array([1], np.int64)}),
  "ReduceMean": ({"axes": [1]}, 13, X, {}), "ReduceProd": ({"axes": [1]}, 13, X, {}),
  "ReduceL1": ({"axes": [1]}, 13, X, {}), "ReduceL2": ({"axes": [1]}, 13, X, {}),
  "ReduceSumSquare": ({"axes": [1]}, 13, X, {}), "Softmax": ({"axis": -1}, 13, X, {}),
  "LogSoftmax": ({"axis": -1}, 13, X, {}), "ArgMax": ({"axis": 1}, 13, X, {}), "ArgMin": ({"axis": 1}, 13, X, {}),
  "LayerNormalization": ({"axis": -1}, 17, X, {"scale": np.ones(4, np.float32), "bias": np.zeros(4, np.float32)}),
  "InstanceNormalization": ({}, 13, X[:, None, :], {"scale": np.ones(1, np.float32), "bias": np.zeros(1, np.float32)}),
  "GlobalMaxPool": ({}, 13, X[:, None, :], {}), "GlobalAveragePool": ({}, 13, X[:, None, :], {}),
  "LRN": ({"size": 3}, 13, X[:, :, None, None], {}),
}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("op", list(OPS))
def test_non_finite_rows_match_onnxruntime_or_the_definition(op):
  attrs, opset, x, consts = OPS[op]
  node = helper.make_node(op, ["x", *consts], ["y"], **attrs)
  m = make_model([node], {"x": x}, ["y"], consts, opset)
  got = mc.compile(m, target="sm_80", schedules="rules").run({"x": x}, device="cpu")[0].reshape(len(ROWS), -1)
  want = (_lrn64(x) if op == "LRN" else run_ort(m, {"x": x})[0]).reshape(len(ROWS), -1)
  # LRN squares 1e38 past float32's range, so it gives 0 where float64 gives 4e-17
  atol = 1e-15 if op == "LRN" else 1e-30
  for k, row in enumerate(ROWS):
    expect = DEFINITION[op, row](ROWS[row]) if (op, row) in DEFINITION else want[k]
    np.testing.assert_allclose(got[k], np.broadcast_to(expect, got[k].shape), rtol=1e-5, atol=atol,
                               equal_nan=True, err_msg=f"{op} on row {row} {ROWS[row]}")


@pytest.mark.parametrize("row, want", [("pinf", np.inf), ("all_ninf", -np.inf), ("all_pinf", np.inf),
                                       ("mixed_inf", np.inf), ("nan", np.nan)])
def test_logsumexp_of_infinities_is_infinite_not_nan(row, want):
  """The max-shift computed inf - inf = NaN for these rows before 2026-11-28."""
  x = np.array([ROWS[row]], np.float32)
  m = make_model([helper.make_node("ReduceLogSumExp", ["x"], ["y"], axes=[1])], {"x": x}, ["y"], opset=13)
  got = mc.compile(m, target="sm_80", schedules="rules").run({"x": x}, device="cpu")[0]
  np.testing.assert_equal(got, np.array([[want]], np.float32))


def test_layer_norm_whose_variance_overflows_gives_what_onnxruntime_gives():
  """A float32 variance of inf (deviations past 1.8e19) makes InvStdDev 0 and the outputs B, as onnxruntime and ONNX's
  reference compute it; until 2026-11-30 minicomp gave NaN there (the fuzzer's MatMul of a -1e38 weight before a
  LayerNormalization; onnxruntime gives NaN only where a deviation itself overflows, as in the first row, whose sum
  overflows in onnxruntime and not in minicomp's mean: there only the deviation past 3.4e38 is NaN)."""
  x = np.array([ROWS["big"], ROWS["big_pos"], [-1.26e37, 1.0, 2.0, 3.0], [1e20, 1.0, 2.0, 3.0], [1.0, 2.0, 3.0, 4.0]],
               np.float32)
  node = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-1)
  m = make_model([node], {"x": x}, ["y"], {"s": np.ones(4, np.float32), "b": np.arange(10, 14, dtype=np.float32)}, 17)
  got = mc.compile(m, target="sm_80", schedules="rules").run({"x": x}, device="cpu")[0]
  np.testing.assert_array_equal(got[0], [10, 11, np.nan, 13])
  np.testing.assert_allclose(got[1:], run_ort(m, {"x": x})[0][1:], rtol=1e-5, atol=1e-6)
  np.testing.assert_array_equal(got[1:4], np.broadcast_to(np.arange(10, 14, dtype=np.float32), (3, 4)))


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("last", [0, 1])
def test_arg_extremes_take_a_nan_as_onnx_reference_does(op, last):
  """A NaN is the extreme value wherever it stands (numpy's rule, ONNX's reference); onnxruntime agrees only
  when the NaN comes first, as its scan starts there."""
  from onnx.reference import ReferenceEvaluator
  x = np.array([[np.nan, 1.0, 2.0, 0.5], [3.0, np.nan, 1.0, np.nan], [np.inf, -np.inf, 1.0, 0.0],
                [5.0, 4.0, 3.0, 2.0]], np.float32)
  m = make_model([helper.make_node(op, ["x"], ["y"], axis=1, select_last_index=last)], {"x": x}, ["y"], opset=13)
  got = mc.compile(m, target="sm_80", schedules="rules").run({"x": x}, device="cpu")[0]
  np.testing.assert_array_equal(got, ReferenceEvaluator(m).run(None, {"x": x})[0])


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("weights", ["input", "constant"])
def test_conv_transpose_with_a_non_finite_weight_matches_onnxruntime(weights):
  """A tap that reads a zero of the dilated input multiplied it by its weight: 0 x inf = NaN in outputs the weight
  does not reach (found by benchmarks/fuzz.py, 2026-11-30). Weights that are not known finite constants are
  guarded; onnxruntime scatters only real inputs."""
  rng = np.random.default_rng(0)
  x = rng.standard_normal((1, 2, 3, 3)).astype(np.float32)
  w = rng.standard_normal((2, 1, 3, 3)).astype(np.float32)
  w[1, 0, 0, 0], w[1, 0, 2, 2], w[0, 0, 1, 1] = np.inf, np.nan, -np.inf
  node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], group=2, strides=[2, 2], pads=[1, 0, 0, 1])
  ins, inits = ({"x": x, "w": w}, {}) if weights == "input" else ({"x": x}, {"w": w})
  m = make_model([node], ins, ["y"], inits, 13)
  got = mc.compile(m, target="sm_80", schedules="rules").run(ins, device="cpu")[0]
  want = run_ort(m, ins)[0]
  assert np.isfinite(want).any() and not np.isfinite(want).all()
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)
