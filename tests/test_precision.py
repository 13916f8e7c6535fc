"""Half precision end to end: float16 / bfloat16 models kept in their type, ``precision=`` (fp32, fp16, bf16).

Tolerances. A half kernel loads its type, computes in float32 and rounds once per value it stores (codegen/cuda.py);
reductions accumulate in float32 (ir/nest.py), so a reduction of length K adds K * 2^-24 of its magnitude, far below
a half rounding here (K <= 600). A value stored in half memory is rounded by half an ulp of the type (eps / 2 relative,
eps = 2^-10 for float16, 2^-7 for bfloat16). The workloads below store at most 4 half values on any path (a chain of
stages a random schedule does not inline): ``rtol = atol / max|ref| = 4 eps``. A model is a chain of such kernels
and its reference (onnxruntime) rounds in its own places: ``4 eps`` of the output's largest magnitude again, which
the models meet with 6x to spare (the largest error seen on 2026-11-29: 0.63 eps for float16, 0.49 for bfloat16).
"""
import math
import re
import subprocess
import sys

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto

import minicomp as mc
from minicomp import workloads as W
from minicomp import zoo
from minicomp.errors import CompileError, ScheduleError, ShapeError
from minicomp.graph.schedules import default_schedule
from minicomp.ir.dag import ComputeDAG
from minicomp.search.annotate import sample_population
from minicomp.search.sketch import generate_sketches
from minicomp.search.strategies.gensor import construct
from minicomp.target import as_target
from onnx_harness import rounded_weights, run_ort, to_half

TGT = as_target("sm_86")
EPS = {"float16": 2.0**-10, "bfloat16": 2.0**-7}
NP = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
ONNX = {"float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16}
PRECISION = {"float16": "fp16", "bfloat16": "bf16"}


def _close(got, want, dtype, what=""):
  got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
  tol = 4 * EPS[dtype]
  np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1.0, float(np.abs(want).max())), err_msg=what)


# ---- every workload of minicomp/workloads.py in float16 and bfloat16, under several schedules

WORKLOADS = {
  "matmul": lambda d: W.matmul(48, 40, 72, dtype=d),
  "matmul_bias_relu": lambda d: W.matmul(32, 24, 40, bias_relu=True, dtype=d),
  "batch_matmul": lambda d: W.batch_matmul(2, 16, 24, 20, dtype=d),
  "embedding_matmul": lambda d: W.embedding(6, 20, 16, N=12, dtype=d),
  "conv2d": lambda d: W.conv2d(1, 8, 10, 10, 8, 3, 1, 1, dtype=d),
  "depthwise_conv2d": lambda d: W.depthwise_conv2d(1, 8, 10, 10, 3, 1, 1, dtype=d),
  "softmax": lambda d: W.softmax(12, 40, dtype=d),
  "layernorm": lambda d: W.layernorm(10, 48, dtype=d),
  "row_sum": lambda d: W.row_sum(16, 100, dtype=d),
  "broadcast_chain": lambda d: W.broadcast_chain(4, 6, 8, dtype=d),
}


def _schedules(dag, n_random=2):
  out = [("rules", default_schedule(dag, TGT)), ("gensor", construct(dag, TGT, seed=0).candidates[0].schedule)]
  sketches = generate_sketches(dag, TGT)
  out += [(f"random{i}", c.schedule) for i, c in enumerate(sample_population(sketches, n_random,
                                                                              np.random.default_rng(3), TGT))]
  return out


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_workload_in_half_matches_numpy(name, dtype):
  wl = WORKLOADS[name](dtype)
  ins = wl.random_inputs(1)
  assert any(a.dtype == NP[dtype] for a in ins)
  want = wl.reference(*[a.astype(np.float32) if a.dtype == NP[dtype] else a for a in ins])
  for sname, sched in _schedules(ComputeDAG(wl.outputs)):
    try:
      kern = mc.build(sched, TGT)
    except ScheduleError as e:   # a random schedule that would accumulate in half (see below) is invalid, as others are
      assert "accumulate" in str(e) and sname.startswith("random"), (sname, e)
      continue
    got = kern(*ins, device="cpu")
    got = got[0] if isinstance(got, (list, tuple)) else got
    assert got.dtype == NP[dtype], sname
    _close(got, want, dtype, f"{name} {sname}")


def test_a_half_reduction_in_global_memory_accumulates_in_float():
  """Accumulating 4096 float16 products in the output buffer itself rounded at every step: 9% off."""
  C = W.matmul(16, 16, 4096, dtype="float16").outputs[0]
  s = mc.Schedule([C])
  i, j = s.axis(C)[:2]
  s.bind(C, i, "blockIdx.x"); s.bind(C, j, "threadIdx.x")
  kern = mc.build(s, TGT)
  assert "float C_acc[1];" in kern.source and "C[i * 16 + j] = __float2half_rn(C_acc[0]);" in kern.source
  rng = np.random.default_rng(0)
  a, b = rng.random((16, 4096)).astype(np.float16), rng.random((4096, 16)).astype(np.float16)
  want = a.astype(np.float32) @ b.astype(np.float32)
  np.testing.assert_allclose(kern(a, b, device="cpu").astype(np.float32), want, rtol=2.0**-10)


def test_a_half_reduction_with_spatial_loops_inside_it_is_refused():
  A = mc.placeholder((64, 32), "float16", name="A")
  k = mc.reduce_axis(32, name="k")
  R = mc.compute((64,), lambda i: mc.sum(A[i, k], axis=k), name="R")
  s = mc.Schedule([R])
  o, t = s.split(R, s.axis(R)[0], 32)
  s.reorder(R, o, "k", t)                           # i.outer, k, i.inner: a spatial loop inside the reduction
  s.bind(R, o, "blockIdx.x")
  with pytest.raises(ScheduleError, match="accumulate in float16"):
    mc.build(s, TGT)


def test_bfloat16_constants_are_floats():
  """A bfloat16 constant was printed as an integer: x * 0.0625 became x * 0."""
  X = mc.placeholder((64,), "bfloat16", name="X")
  Y = mc.compute((64,), lambda i: X[i] * 0.0625 + 0.5, name="Y")
  s = mc.Schedule([Y])
  s.bind(Y, s.axis(Y)[0], "threadIdx.x")
  x = np.random.default_rng(0).standard_normal(64).astype(ml_dtypes.bfloat16)
  got = mc.build(s, TGT)(x, device="cpu")
  np.testing.assert_array_equal(got, (x.astype(np.float32) * 0.0625 + 0.5).astype(ml_dtypes.bfloat16))


# ---- ONNX models in float16 / bfloat16, kept in their type

MODELS = ["residual_block", "inverted_residual", "transformer_encoder", "llama_block", "generator", "conv3d_block"]


def _with_opset(model, opset):
  m = onnx.ModelProto()
  m.CopyFrom(model)
  m.opset_import[0].version = opset
  return m


def test_a_bfloat16_conv_model_of_an_old_opset_is_ill_typed():
  """(as ONNX's checker says: Conv takes bfloat16 from opset 22 on)"""
  from minicomp.errors import ModelError
  with pytest.raises(ModelError, match="ill-typed.*Conv.*bfloat16"):
    mc.compile(to_half(zoo.residual_block()[0], TensorProto.BFLOAT16), schedules="rules", progress=False)


def _float_types(cm) -> set[str]:
  return {b.dtype for k in cm.kernels for b in k.plan.inputs + k.plan.outputs if b.dtype.startswith(("float", "bfloat"))}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", MODELS)
def test_half_model_is_computed_in_its_type(name, dtype):
  model, feeds = getattr(zoo, name)()
  if dtype == "bfloat16" and name not in ("transformer_encoder", "llama_block"):
    model = _with_opset(model, 22)      # ONNX types Conv, ConvTranspose, BatchNorm for bfloat16 from opset 22 on
  half = to_half(model, ONNX[dtype])
  hfeeds = {k: v.astype(NP[dtype]) for k, v in feeds.items()}
  if dtype == "float16":
    want = run_ort(half, hfeeds)[0]
  else:   # onnxruntime has no bfloat16 CPU kernels: the float32 model on the same rounded weights and inputs
    want = run_ort(rounded_weights(model, NP[dtype]), {k: v.astype(np.float32) for k, v in hfeeds.items()})[0]
  cm = mc.compile(half, schedules="rules", progress=False)
  assert _float_types(cm) == {dtype}, _float_types(cm)
  got = cm.run(hfeeds, device="cpu")[0]
  assert got.dtype == NP[dtype]
  _close(got, want, dtype, name)


def test_half_model_with_constructed_schedules():
  model, feeds = zoo.residual_block()
  half = to_half(model)
  hfeeds = {k: v.astype(np.float16) for k, v in feeds.items()}
  cm = mc.compile(half, progress=False, jobs=1)
  assert cm.stats.constructed == len(cm.kernels)
  _close(cm.run(hfeeds, device="cpu")[0], run_ort(half, hfeeds)[0], "float16")


def test_precision_fp32_widens_a_half_model():
  model, feeds = zoo.transformer_encoder()
  half = to_half(model)
  hfeeds = {k: v.astype(np.float16) for k, v in feeds.items()}
  cm = mc.compile(half, schedules="rules", progress=False, precision="fp32")
  assert _float_types(cm) == {"float32"}
  got = cm.run(hfeeds, device="cpu")[0]
  assert got.dtype == np.float16 and [i.dtype for i in cm.inputs] == ["float16"]
  _close(got, run_ort(half, hfeeds)[0], "float16")


# ---- precision="fp16" / "bf16": autocast a float32 model

@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", ["residual_block", "transformer_encoder", "llama_block"])
def test_autocast_matches_fp32_within_the_half_tolerance(name, dtype):
  model, feeds = getattr(zoo, name)()
  cm = mc.compile(model, schedules="rules", progress=False, precision=PRECISION[dtype])
  assert dtype in _float_types(cm)
  assert [i.dtype for i in cm.inputs] == ["float32"] * len(cm.inputs)
  got = cm.run(feeds, device="cpu")[0]
  assert got.dtype == np.float32
  _close(got, run_ort(model, feeds)[0], dtype, name)
  # the kernels move 2-byte values: 16-bit global loads in the PTX of the ones reading half weights
  ptx = "\n".join(k.binary.ptx for k in cm.kernels)
  assert any(f"ld.global{s}" in ptx for s in (".nc.u16", ".u16", ".nc.b16", ".b16", ".nc.v2.u16", ".v2.u16"))
  assert cm.weights and any(w.dtype == NP[dtype] for w in cm.weights.values())


def _graph(model, precision):
  from minicomp.frontend.onnx_import import load_onnx
  from minicomp.frontend.precision import apply_precision
  return apply_precision(load_onnx(model), precision)


def test_autocast_keeps_range_ops_in_float32_and_the_boundary_types():
  model, _ = zoo.transformer_encoder()
  g = _graph(model, "fp16")
  by_op = {}
  for n in g.nodes:
    by_op.setdefault(n.op_type, set()).update(g.values[o].dtype for o in n.outputs[:1] if o in g.values)
  assert by_op["Softmax"] == {"float32"} and by_op["LayerNormalization"] == {"float32"}
  assert by_op["MatMul"] == {"float16"}
  assert by_op["Erf"] == {"float16"}            # after a half MatMul (and its bias Add): the widest input is half
  assert "float32" in by_op["Add"]              # the residual stream: the float32 input plus a half value
  assert [g.values[i].dtype for i in g.inputs] == ["float32"] and [g.values[o].dtype for o in g.outputs] == ["float32"]


def test_autocast_leaves_a_constant_past_the_half_range_in_float32():
  """An attention mask's -1e9 is -inf in float16 (and a row of -inf a softmax of NaN): the Add reading it is
  computed in float32, and so is the softmax after it."""
  b = zoo._B(0)
  x = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)
  mask = np.where(np.arange(16) < 12, 0.0, -1e9).astype(np.float32)
  y = b.op("Softmax", [b.op("Add", [b.op("MatMul", ["x", b.w(16, 16)]), b.const(mask)])], axis=-1)
  model = b.model({"x": x}, [y])
  g = _graph(model, "fp16")
  assert {n.op_type: g.values[n.outputs[0]].dtype for n in g.nodes if n.op_type != "Cast"} == \
    {"MatMul": "float16", "Add": "float32", "Softmax": "float32"}
  got = mc.compile(model, schedules="rules", progress=False, precision="fp16").run({"x": x}, device="cpu")[0]
  assert np.isfinite(got).all() and (got[:, 12:] == 0).all()
  _close(got, run_ort(model, {"x": x})[0], "float16")


def test_autocast_leaves_a_model_already_in_its_type_alone():
  half = to_half(zoo.transformer_encoder()[0])
  g, h = _graph(half, None), _graph(half, "fp16")
  assert [(n.op_type, n.inputs, n.outputs) for n in h.nodes] == [(n.op_type, n.inputs, n.outputs) for n in g.nodes]
  assert {v.dtype for v in h.values.values()} == {v.dtype for v in g.values.values()}
  b = _graph(half, "bf16")                     # the other half type: widened, then autocast
  assert any(v.dtype == "bfloat16" for v in b.values.values()) and b.boundary == {"x": "float16", g.outputs[0]: "float16"}
  feeds = {k: v.astype(np.float16) for k, v in zoo.transformer_encoder()[1].items()}
  y = mc.compile(half, schedules="rules", progress=False, precision="bf16").run(feeds, device="cpu")[0]
  assert y.dtype == np.float16
  _close(y, run_ort(half, feeds)[0], "bfloat16")


def test_an_error_about_an_autocast_graph_output_names_the_models_output():
  """autocast computes a half graph output under another name and casts it back; an error about it names the
  model's output (here a declared output shape that contradicts the MatMul's)."""
  b = zoo._B(0)
  x = np.ones((3, 4), np.float32)
  y = b.op("MatMul", ["x", b.w(4, 5)])
  model = b.model({"x": x}, [y])
  model.graph.output[0].type.tensor_type.shape.dim[1].dim_value = 6
  with pytest.raises(ShapeError, match=rf"output '{y}' \(computed as '{y}_float16'\) has shape \(3, 5\)"):
    mc.compile(model, schedules="rules", progress=False, precision="fp16")


def test_unknown_precision_is_a_compile_error():
  with pytest.raises(CompileError, match="precision='fp8'.*fp32, tf32, fp16, bf16"):
    mc.compile(zoo.residual_block()[0], precision="fp8")


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_saved_half_model_loads_and_runs(tmp_path, precision):
  model, feeds = zoo.transformer_encoder()
  cm = mc.compile(model, schedules="rules", progress=False, precision=precision)
  back = mc.load(cm.save(tmp_path / "m"))
  assert sorted(str(w.dtype) for w in back.weights.values()) == sorted(str(w.dtype) for w in cm.weights.values())
  np.testing.assert_array_equal(back.run(feeds, device="cpu")[0], cm.run(feeds, device="cpu")[0])


def test_cli_precision(tmp_path):
  path = tmp_path / "m.onnx"
  model, feeds = zoo.residual_block()
  onnx.save(model, str(path))
  r = subprocess.run([sys.executable, "-m", "minicomp.cli", "compile", str(path), "-q", "--schedules", "rules",
                      "--precision", "bf16", "-o", str(tmp_path / "out")], capture_output=True, text=True)
  assert r.returncode == 0, r.stderr
  assert re.search(r"bf16(\+fp32)?/fp32", r.stdout)     # the summary's stored/computed column
  cm = mc.load(tmp_path / "out")
  assert any(w.dtype == ml_dtypes.bfloat16 for w in cm.weights.values())
  half = tmp_path / "h.onnx"
  onnx.save(to_half(model), str(half))
  r = subprocess.run([sys.executable, "-m", "minicomp.cli", "info", str(half)], capture_output=True, text=True)
  assert r.returncode == 0 and re.search(r"^weights: [\d.]+ MB float16 ", r.stdout, re.M), r.stdout
  r = subprocess.run([sys.executable, "-m", "minicomp.cli", "compile", str(path), "--precision", "fp8", "-o",
                      str(tmp_path / "x")], capture_output=True, text=True)
  assert r.returncode == 2 and "fp8" in r.stderr and "fp16" in r.stderr


@pytest.mark.parametrize("strategy", [pytest.param("ansor", marks=pytest.mark.slow), "tuna"])   # (ansor: 30 s)
def test_tuning_a_half_model(tmp_path, strategy):
  """The search (sketches, annotation, features, the static model) handles half tasks: every trial of the log is a
  valid program, and the tuned model still matches onnxruntime."""
  from minicomp.search.records import load_records
  model, feeds = zoo.residual_block()
  half = to_half(model)
  hfeeds = {k: v.astype(np.float16) for k, v in feeds.items()}
  log = tmp_path / "t.jsonl"
  cm = mc.compile(half, trials=8, strategy=strategy, measurer="static", measures_per_round=4, log_file=str(log),
                  progress=False, jobs=1)
  recs = [r for r in load_records(str(log)) if r.strategy != "default"]
  assert len(recs) == 8 and sum(r.cost_s is not None and math.isfinite(r.cost_s) for r in recs) >= 6
  assert _float_types(cm) == {"float16"}
  _close(cm.run(hfeeds, device="cpu")[0], run_ort(half, hfeeds)[0], "float16")


@pytest.mark.parametrize("dtype,width", [("float16", 4), ("bfloat16", 2), ("float16", 8), ("float16", 3)])
def test_vectorized_half_loads_and_stores(dtype, width):
  """A vectorize loop over 2, 4 or 8 contiguous, aligned half values is one 4-, 8- or 16-byte load and store (the
  PTX's v2 / v4 loads), converted lane by lane, its float32 operand one float2 / float4 load (8 of them: two float4
  loads); a width of 3 stays scalar. Checked against numpy."""
  X = mc.placeholder((4096,), dtype, name="X")
  Y = mc.placeholder((4096,), "float32", name="Y")
  Z = mc.compute((4096,), lambda i: X[i] * 2.0 + Y[i], name="Z")
  C = mc.compute((4096,), lambda i: mc.cast(Z[i], dtype), name="C")
  s = mc.Schedule([C])
  s.compute_inline(Z)
  o, t, v = s.split(C, s.axis(C)[0], [64, width])
  s.bind(C, o, "blockIdx.x"); s.bind(C, t, "threadIdx.x"); s.vectorize(C, v)
  k = mc.build(s, TGT)
  vectorized = f"vectorized ({width} x {'__half' if dtype == 'float16' else '__nv_bfloat16'})" in k.source
  assert vectorized == (width in (2, 4, 8))
  if vectorized:
    assert any(ld in k.binary.ptx for ld in ("ld.global.nc.v2", "ld.global.nc.u32", "ld.global.nc.v4.u32"))
    assert f"ld.global.nc.v{min(width, 4)}.f32" in k.binary.ptx and "ld.global.nc.f32" not in k.binary.ptx
  rng = np.random.default_rng(0)
  x, y = rng.standard_normal(4096).astype(NP[dtype]), rng.standard_normal(4096).astype(np.float32)
  np.testing.assert_array_equal(k(x, y, device="cpu"), (x.astype(np.float32) * 2 + y).astype(NP[dtype]))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_8_half_lanes_are_one_16_byte_access(dtype):
  """With half operands and a half result only, 8 lanes are one uint4 load and store (ld.global.nc.v4.u32)."""
  X = mc.placeholder((4096,), dtype, name="X")
  C = mc.compute((4096,), lambda i: mc.cast(X[i] * 3.0 - 1.0, dtype), name="C")
  s = mc.Schedule([C])
  o, t, v = s.split(C, s.axis(C)[0], [64, 8])
  s.bind(C, o, "blockIdx.x"); s.bind(C, t, "threadIdx.x"); s.vectorize(C, v)
  k = mc.build(s, TGT)
  assert "vectorized (8 x" in k.source and "ld.global.nc.v4.u32" in k.binary.ptx
  x = np.random.default_rng(0).standard_normal(4096).astype(NP[dtype])
  np.testing.assert_array_equal(k(x, device="cpu"), (x.astype(np.float32) * 3 - 1).astype(NP[dtype]))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_padded_half_fetch_selects_the_raw_value(dtype):
  """``c ? __half2float(x[i]) : 0.0f`` was a branch per element (NVRTC does not if-convert around the conversion);
  the emitter selects the raw half and converts once. The padded conv still matches numpy."""
  wl = W.conv2d(1, 8, 10, 10, 8, 3, 1, 1, dtype=dtype)
  kern = mc.build(construct(ComputeDAG(wl.outputs), TGT, seed=0).candidates[0].schedule, TGT)
  zero = "__half{0}" if dtype == "float16" else "__nv_bfloat16{0}"
  assert zero in kern.source and "? 0.0f" not in kern.source
  ins = wl.random_inputs(2)
  _close(kern(*ins, device="cpu"), wl.reference(*[a.astype(np.float32) for a in ins]), dtype)
