"""What a user hands minicomp (ONNX models, command lines) is refused cleanly when it is wrong:
a specific MinicompError naming the tensor or node, or a one-line CLI error with exit status 2."""
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import minicomp
from minicomp.cli import main
from minicomp.errors import FeedError, ModelError, ShapeError


def _model(nodes, inputs, outputs, inits=(), opset=17):
  m = helper.make_model(helper.make_graph(nodes, "t", inputs, outputs, list(inits)),
                        opset_imports=[helper.make_opsetid("", opset)])
  m.ir_version = 8
  return m


def _gemm():
  rng = np.random.default_rng(0)
  w = numpy_helper.from_array(rng.standard_normal((8, 16)).astype(np.float32), "w")
  b = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")
  return _model([helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1, name="gemm")],
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])], [w, b])


def test_initializer_whose_data_does_not_fit_its_dims_names_the_tensor():
  m = _gemm()
  m.graph.initializer[1].raw_data += b"\0" * 8
  with pytest.raises(ModelError, match="initializer 'b'"):
    minicomp.compile(m, schedules="rules", progress=False)


def test_bool_into_conv_is_ill_typed():
  w = numpy_helper.from_array(np.ones((1, 1, 3, 3), np.float32), "w")
  m = _model([helper.make_node("Conv", ["x", "w"], ["y"], name="conv")],
             [helper.make_tensor_value_info("x", TensorProto.BOOL, [1, 1, 4, 4])],
             [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 2, 2])], [w])
  with pytest.raises(ModelError, match="ill-typed.*Conv"):
    minicomp.compile(m, schedules="rules", progress=False)


def test_declared_output_type_that_differs_from_the_inferred_one_is_ill_typed():
  m = _gemm()
  m.graph.output[0].type.tensor_type.elem_type = TensorProto.INT32
  with pytest.raises(ModelError, match="ill-typed"):
    minicomp.compile(m, schedules="rules", progress=False)


def test_zero_size_dims_are_not_called_dynamic():
  m = _gemm()
  m.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 0
  with pytest.raises(ShapeError, match="zero-size dim") as e:
    minicomp.compile(m, schedules="rules", progress=False)
  assert "dynamic" not in str(e.value)


def test_names_that_are_not_utf8_are_a_model_error():
  data = bytearray(_gemm().SerializeToString())
  k = bytes(data).index(b"gemm")
  data[k:k + 2] = b"\xab\xac"
  with pytest.raises(ModelError, match="UTF-8"):
    minicomp.compile(bytes(data), schedules="rules", progress=False)


# ---- half precision models: in their own type (precision=None) or in float32 with half at the boundary (fp32)
def _half_model(t):
  rng = np.random.default_rng(1)
  np_t = np.float16 if t == TensorProto.FLOAT16 else None
  wf = rng.standard_normal((16, 8)).astype(np.float32)
  w = numpy_helper.from_array(wf.astype(np_t), "w") if np_t else helper.make_tensor("w", t, wf.shape, wf.reshape(-1).tolist())
  nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"), helper.make_node("Relu", ["m"], ["r"], name="relu"),
           helper.make_node("Cast", ["r"], ["f"], to=TensorProto.FLOAT, name="up"),
           helper.make_node("Softmax", ["f"], ["s"], axis=-1, name="sm"),
           helper.make_node("Cast", ["s"], ["y"], to=t, name="down")]
  return _model(nodes, [helper.make_tensor_value_info("x", t, [4, 16])], [helper.make_tensor_value_info("y", t, [4, 8])], [w])


@pytest.mark.parametrize("precision", [None, "fp32"])
def test_float16_model_matches_onnxruntime(precision):
  m = _half_model(TensorProto.FLOAT16)
  x = np.random.default_rng(2).standard_normal((4, 16)).astype(np.float16)
  ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
  cm = minicomp.compile(m, schedules="rules", progress=False, precision=precision)
  assert {b.dtype for k in cm.kernels for b in k.plan.inputs} >= {"float16" if precision is None else "float32"}
  assert [(i.name, i.dtype) for i in cm.inputs] == [("x", "float16")]
  y = cm.run({"x": x}, device="cpu")[0]
  assert y.dtype == np.float16
  np.testing.assert_allclose(y.astype(np.float32), ref.astype(np.float32), rtol=1e-2, atol=1e-3)
  with pytest.raises(FeedError, match="float16"):
    cm.run({"x": x.astype(np.float32)}, device="cpu")


def test_bfloat16_model_matches_numpy():
  import ml_dtypes
  m = _half_model(TensorProto.BFLOAT16)
  x = np.random.default_rng(2).standard_normal((4, 16)).astype(ml_dtypes.bfloat16)
  cm = minicomp.compile(m, schedules="rules", progress=False)
  y = cm.run({"x": x}, device="cpu")[0]
  assert y.dtype == ml_dtypes.bfloat16
  w = numpy_helper.to_array(m.graph.initializer[0]).astype(np.float32)
  z = np.maximum(x.astype(np.float32) @ w, 0)
  e = np.exp(z - z.max(-1, keepdims=True))
  np.testing.assert_allclose(y.astype(np.float32), e / e.sum(-1, keepdims=True), rtol=2e-2, atol=1e-2)


def test_half_model_survives_save_and_load(tmp_path):
  m = _half_model(TensorProto.FLOAT16)
  x = np.random.default_rng(3).standard_normal((4, 16)).astype(np.float16)
  cm = minicomp.compile(m, schedules="rules", progress=False)
  back = minicomp.load(cm.save(tmp_path / "half"))
  np.testing.assert_array_equal(back.run({"x": x}, device="cpu")[0], cm.run({"x": x}, device="cpu")[0])


# ---- Gather indices out of range: an error (as onnxruntime), unless the check is turned off
def _embedding():
  t = numpy_helper.from_array(np.arange(40, dtype=np.float32).reshape(10, 4), "t")
  return _model([helper.make_node("Gather", ["t", "i"], ["y"], axis=0, name="emb")],
                [helper.make_tensor_value_info("i", TensorProto.INT64, [3])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])], [t])


@pytest.fixture(scope="module")
def embedding():
  return minicomp.compile(_embedding(), schedules="rules", progress=False)


def test_gather_index_out_of_range_raises_naming_the_node(embedding):
  bad = np.array([1, 2 ** 32 + 5, 3], np.int64)
  with pytest.raises(ort.capi.onnxruntime_pybind11_state.InvalidArgument):
    ort.InferenceSession(_embedding().SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"i": bad})
  with pytest.raises(FeedError, match="4294967301.*Gather node 'emb'"):
    embedding.run({"i": bad}, device="cpu")
  ok = embedding.run({"i": np.array([1, -1, 3], np.int64)}, device="cpu")[0]
  np.testing.assert_array_equal(ok, np.arange(40, dtype=np.float32).reshape(10, 4)[[1, 9, 3]])


def test_gather_index_check_can_be_turned_off_and_never_reads_out_of_bounds(embedding):
  y = embedding.run({"i": np.array([1, 2 ** 32 + 5, -2 ** 40], np.int64)}, device="cpu", check_indices=False)[0]
  table = np.arange(40, dtype=np.float32).reshape(10, 4)
  np.testing.assert_array_equal(y, table[[1, 9, 0]])   # clamped into the axis, not wrapped to row 5


# ---- the command line
def _cli(*args):
  return subprocess.run([sys.executable, "-m", "minicomp.cli", *map(str, args)], capture_output=True, text=True, timeout=120)


def test_cli_version():
  r = _cli("--version")
  assert r.returncode == 0 and r.stdout.strip() == f"minicomp {minicomp.__version__}"


@pytest.mark.parametrize("args,match", [
  (["run", "{saved}", "--input", "x=missing.npy"], "no file 'missing.npy'"),
  (["run", "{saved}", "--input", "x={junk}"], "not a readable .npy file"),
  (["run", "{saved}", "--input", "x"], "expects NAME=FILE.npy"),
  (["info", "{model}", "--input-shape", "x=1,q"], "positive integer dims"),
  (["info", "{model}", "--input-shape", "x=1,-3"], "positive integer dims"),
  (["info", "nowhere.onnx"], "no ONNX file"),
  (["run", "nowhere/"], "not a saved minicomp model"),
  (["compile", "{model}"], "needs -o/--output"),
  (["tune", "{model}", "--trials", "four", "--log", "x.log"], "invalid int value"),
  (["compile", "{model}", "-o", "{tmp}/o", "--target", "sm_1"], "TargetError"),
])
def test_cli_input_errors_are_one_line_with_exit_status_2(tmp_path, args, match):
  model = tmp_path / "m.onnx"
  onnx.save(_gemm(), model)
  junk = tmp_path / "junk.npy"
  junk.write_bytes(b"not numpy")
  sub = {"model": model, "junk": junk, "tmp": tmp_path, "saved": tmp_path}
  r = _cli(*[a.format(**sub) for a in args])
  assert r.returncode == 2, r.stderr
  lines = r.stderr.strip().splitlines()
  assert len(lines) == 1 and match in lines[0] and "Traceback" not in r.stderr, r.stderr


def test_cli_main_returns_2_on_a_bad_feed_name(tmp_path, capsys):
  cm = minicomp.compile(_gemm(), schedules="rules", progress=False)
  saved = cm.save(tmp_path / "gemm")
  np.save(tmp_path / "x.npy", np.zeros((4, 16), np.float32))
  assert main(["run", str(saved), "--input", f"z={tmp_path / 'x.npy'}"]) == 2
  assert "FeedError" in capsys.readouterr().err


# ---- what the fuzzer found (benchmarks/fuzz.py): each was a raw exception, a crash or a guess
def _one(op, attrs, x_shape=(1, 2, 4, 4), y_shape=(1, 2, 4, 4), inits=(), extra_inputs=()):
  node = helper.make_node(op, ["x", *extra_inputs], ["y"], name="n", **attrs)
  return _model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)], list(inits))


@pytest.mark.parametrize("op,attrs,match", [
  ("ReduceSum", {"keepdims": 2}, "keepdims=2 must be 0 or 1"),                # onnxruntime drops the dim, the spec keeps it
  ("AveragePool", {"kernel_shape": [0, 2]}, "kernel_shape .* must be positive"),
  ("LayerNormalization", {"axis": 2 ** 31}, "axis=2147483648 is out of range"),  # onnx's C++ shape inference segfaults
])
def test_bad_attributes_are_model_errors(op, attrs, match):
  extra = ("g",) if op == "LayerNormalization" else ()
  inits = [numpy_helper.from_array(np.ones(4, np.float32), "g")] if extra else []
  with pytest.raises(ModelError, match=match):
    minicomp.compile(_one(op, attrs, inits=inits, extra_inputs=extra), schedules="rules", progress=False)


def test_split_into_zero_outputs_is_a_shape_error():
  node = helper.make_node("Split", ["x"], ["a", "b"], axis=0, num_outputs=0, name="s")
  m = _model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 2])],
             [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 2]) for n in "ab"], opset=18)
  with pytest.raises(ModelError, match="num_outputs=0"):
    minicomp.compile(m, schedules="rules", progress=False)


@pytest.mark.parametrize("bad", [np.inf, np.nan])
def test_resize_with_non_finite_scales_is_a_model_error(bad):
  scales = numpy_helper.from_array(np.array([1, 1, 2, bad], np.float32), "s")
  node = helper.make_node("Resize", ["x", "", "s"], ["y"], mode="nearest", name="r")
  m = _model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 2, 2])],
             [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 4, 4])], [scales])
  with pytest.raises(ModelError, match="finite"):
    minicomp.compile(m, schedules="rules", progress=False)


def test_not_enough_host_memory_is_a_runtime_launch_error():
  from minicomp.codegen.kernel import host_zeros
  with pytest.raises(minicomp.RuntimeLaunchError, match=r"output y: not enough host memory .*GiB"):
    host_zeros((2 ** 40, 2 ** 10), "float32", "output y")


def test_convtranspose_output_padding_past_the_stride_is_refused():
  w = numpy_helper.from_array(np.ones((1, 2, 3, 3), np.float32), "w")
  node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[3, 2], output_padding=[1, 2], name="ct")
  m = _model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 3, 3])],
             [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 10, 8])], [w])
  with pytest.raises(ModelError, match=r"output_padding \[1, 2\] must be in"):
    minicomp.compile(m, schedules="rules", progress=False)


def test_old_opset_model_that_fails_strict_inference_is_not_converted():
  # Softmax-11's default axis is 1: out of range for a 1-D input; the version converter would
  # silently give it another meaning (a softmax over a flattened (3, 1) tensor: all ones)
  m = _model([helper.make_node("Softmax", ["x"], ["y"], name="sm")], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
             [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])], opset=11)
  with pytest.raises(ModelError, match="opset 11 model fails ONNX's .*shape inference.*axis"):
    minicomp.compile(m, schedules="rules", progress=False)


def test_shape_operand_that_is_not_integer_is_a_model_error():
  node = helper.make_node("Reshape", ["x", "s"], ["y"], name="rs")
  m = _model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
             [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])],
             [numpy_helper.from_array(np.array([3, 2], np.int64), "s")])
  m.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.array([np.nan, 2.0]), "s"))
  with pytest.raises(ModelError):
    minicomp.compile(m, schedules="rules", progress=False)


def test_graph_name_that_is_not_utf8_is_a_model_error():
  m = _gemm()
  m.graph.name = "gr\u2603ph"
  data = bytearray(m.SerializeToString())
  k = bytes(data).index("\u2603".encode())
  data[k:k + 3] = b"\xe2\x98("
  with pytest.raises(ModelError, match="not valid UTF-8"):
    minicomp.compile(bytes(data), schedules="rules", progress=False)


def _loop_model():
  """y = x + 1, added in a Loop of a constant trip count ``n`` (unrolled by the frontend)."""
  one = numpy_helper.from_array(np.ones(4, np.float32), "one")
  body = helper.make_graph(
    [helper.make_node("Identity", ["c"], ["c_out"]), helper.make_node("Add", ["v", "one"], ["v_out"])], "body",
    [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("c", TensorProto.BOOL, []),
     helper.make_tensor_value_info("v", TensorProto.FLOAT, [4])],
    [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
     helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [4])])
  n = numpy_helper.from_array(np.array(1, np.int64), "n")
  cond = numpy_helper.from_array(np.array(True), "cond")
  return _model([helper.make_node("Loop", ["n", "cond", "x"], ["y"], body=body, name="loop")],
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], [n, cond, one])


def test_loop_model_runs_and_a_corrupt_trip_count_names_the_tensor():
  """The frontend reads a Loop's constants before the rest of the import: a trip count whose data does not fit its
  dims was a raw ValueError there (fuzz seed 29)."""
  m = _loop_model()
  x = np.arange(4, dtype=np.float32)
  np.testing.assert_array_equal(minicomp.compile(m, schedules="rules", progress=False).run({"x": x})[0], x + 1)
  m.graph.initializer[0].raw_data += b"\0" * 8
  with pytest.raises(ModelError, match="initializer 'n'"):
    minicomp.compile(m, schedules="rules", progress=False)


def test_quantized_matmul_with_a_corrupt_scale_names_the_tensor():
  """The QDQ pass reads scales and zero points before the rest of the import."""
  w = numpy_helper.from_array(np.ones((4, 4), np.int8), "w")
  s = numpy_helper.from_array(np.array(0.5, np.float32), "s")
  z = numpy_helper.from_array(np.array(0, np.int8), "z")
  m = _model([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
              helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
              helper.make_node("DequantizeLinear", ["w", "s", "z"], ["wd"]),
              helper.make_node("MatMul", ["xd", "wd"], ["y"], name="mm")],
             [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
             [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [w, s, z])
  x = np.arange(8, dtype=np.float32).reshape(2, 4)
  np.testing.assert_allclose(minicomp.compile(m, schedules="rules", progress=False).run({"x": x})[0],
                             np.round(x / 0.5) * 0.5 @ np.full((4, 4), 0.5, np.float32))
  m.graph.initializer[1].raw_data += b"\0" * 4
  with pytest.raises(ModelError, match="initializer 's'"):
    minicomp.compile(m, schedules="rules", progress=False)
