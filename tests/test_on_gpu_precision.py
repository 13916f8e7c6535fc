"""Half precision and the tensor cores on a real GPU (gpu-marked; skipped without one, saying why): the
tensor-core schedules compile offers and random draws of the tensor-core sketch, built for the GPU's own arch,
against numpy and against the CPU simulator running the same kernel; half models compiled with their default
schedules (tensor cores where the static model keeps them) against onnxruntime, with the tolerances of the
simulator tests they mirror (tests/test_tensor_core_compile.py, tests/test_precision.py).

Run on a GPU machine with ``python -m pytest -m gpu tests/``."""
import numpy as np
import pytest

import minicomp as mc
from minicomp import zoo
from onnx_harness import rounded_weights, run_ort, to_half
from test_precision import EPS, NP, ONNX, _close, _with_opset
from test_tensor_core_compile import TC_WORKLOADS, _conv, _mlp

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("needs_gpu")]


def _tensor_core_schedules(wl, tgt, n_sampled=4):
  """compile's tensor-core schedules of ``wl`` and ``n_sampled`` random draws of the tensor-core sketch."""
  from minicomp.graph.tensor_core_schedules import tensor_core_schedules
  from minicomp.ir.dag import ComputeDAG
  from minicomp.search.annotate import sample_population
  from minicomp.search.sketch import generate_sketches
  dag = ComputeDAG(wl.outputs)
  sketches = [s for s in generate_sketches(dag, tgt) if "tensor_core_tiling" in s.rules]
  drawn = sample_population(sketches, n_sampled, np.random.default_rng(0), tgt)
  return tensor_core_schedules(dag, tgt) + [c.schedule for c in drawn]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", sorted(TC_WORKLOADS))
def test_tensor_core_kernels_match_numpy_and_the_simulator_on_the_gpu(name, dtype):
  """Each kernel: within half an output ulp plus float32's sum of numpy's result of the same half inputs, and
  within one output ulp of the CPU simulator running the same kernel (the simulator claims the GPU's rounding)."""
  wl = TC_WORKLOADS[name](dtype)
  tgt = mc.Target("cuda")
  scheds = _tensor_core_schedules(wl, tgt)
  assert len(scheds) >= 2, f"no tensor-core schedule for {name} on {tgt.arch}"
  ins = wl.random_inputs()
  ref = wl.reference(*[a.astype(np.float32) for a in ins]).astype(np.float64)
  bits = 10 if dtype == "float16" else 7
  for s in scheds:
    k = mc.build(s, target=tgt)
    assert "mma.sync.aligned.m16n8k16" in k.binary.ptx
    got = k(*ins, device="gpu").astype(np.float64)
    assert np.abs(got - ref).max() <= 2.0 ** -(bits + 1) * np.abs(ref).max() + 1e-3, (name, np.abs(got - ref).max())
    sim = k(*ins, device="cpu").astype(np.float64)
    assert np.abs(got - sim).max() <= 2.0 ** -bits * np.abs(ref).max(), (name, "simulator", np.abs(got - sim).max())


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "tf32"])
def test_a_convolution_and_a_matmul_compiled_onto_the_tensor_cores_run_on_the_gpu(dtype):
  """Conv 3x3 + bias + Relu (64 -> 64 channels, 16 x 16; weights stored channels-last) and MatMul + Add + Relu
  (256 x 512 x 256), compiled for the GPU with their default schedules: on the tensor cores where the static
  model keeps them, and numpy's result within the type's rounding (TF32: 2^-10 of the sum of |products|)."""
  import ml_dtypes
  from minicomp.workloads import conv2d_ref
  np_dtype = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "tf32": np.float32}[dtype]
  rng = np.random.default_rng(0)
  precision = "tf32" if dtype == "tf32" else None
  f64 = lambda a: a.astype(np.float64)   # noqa: E731
  conv, w, b = _conv(64, 64, 16, np_dtype, rng)
  mlp, mw, mb = _mlp(256, 512, 256, np_dtype, rng)
  x = rng.standard_normal((1, 64, 16, 16)).astype(np_dtype)
  xm = rng.standard_normal((256, 512)).astype(np_dtype)
  cases = [(conv, {"x": x}, np.maximum(conv2d_ref(f64(x), f64(w), 1, 1, 1) + f64(b)[None, :, None, None], 0),
            conv2d_ref(np.abs(f64(x)), np.abs(f64(w)), 1, 1, 1)),
           (mlp, {"x": xm}, np.maximum(f64(xm) @ f64(mw) + f64(mb), 0), np.abs(f64(xm)) @ np.abs(f64(mw)))]
  on_tc = 0
  for model, feeds, ref, magnitude in cases:
    cm = mc.compile(model, target="cuda", progress=False, precision=precision)
    on_tc += cm.stats.tensor_cores
    out = cm.run(feeds, device="gpu")[0].astype(np.float64)
    if dtype == "tf32":
      assert (np.abs(out - ref) <= 2.0 ** -10 * magnitude + 1e-4).all(), np.abs(out - ref).max()
    else:
      half_ulp = EPS[dtype] / 2
      assert np.abs(out - ref).max() <= half_ulp * np.abs(ref).max() + 1e-3, np.abs(out - ref).max()
  assert on_tc >= 1, "the static model kept neither the convolution nor the matmul on the tensor cores"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", ["residual_block", "transformer_encoder", "llama_block", "inverted_residual"])
def test_half_model_matches_onnxruntime_on_the_gpu(name, dtype):
  """The zoo model converted to ``dtype``, compiled with its default schedules for the GPU, run there with and
  without CUDA-graph replay: onnxruntime's result within 4 eps of the output's magnitude (tests/test_precision.py)."""
  model, feeds = getattr(zoo, name)()
  if dtype == "bfloat16" and name not in ("transformer_encoder", "llama_block"):
    model = _with_opset(model, 22)
  half = to_half(model, ONNX[dtype])
  hfeeds = {k: v.astype(NP[dtype]) for k, v in feeds.items()}
  if dtype == "float16":
    want = run_ort(half, hfeeds)[0]
  else:
    want = run_ort(rounded_weights(model, NP[dtype]), {k: v.astype(np.float32) for k, v in hfeeds.items()})[0]
  cm = mc.compile(half, target="cuda", progress=False)
  for cuda_graph in (False, True):
    got = cm.run(hfeeds, device="gpu", cuda_graph=cuda_graph)[0]
    assert got.dtype == NP[dtype]
    _close(got, want, dtype, f"{name} cuda_graph={cuda_graph} ({cm.stats.tensor_cores} kernels on tensor cores)")


def test_an_fp16_bert_on_the_tensor_cores_matches_onnxruntime_on_the_gpu():
  model, feeds = zoo.bert_tiny()
  half = to_half(model)
  hfeeds = {k: v.astype(np.float16) if v.dtype == np.float32 else v for k, v in feeds.items()}
  cm = mc.compile(half, target="cuda", progress=False)
  assert cm.stats.tensor_cores >= 1
  got, ref = cm.run(hfeeds, device="gpu")[0].astype(np.float32), run_ort(half, hfeeds)[0].astype(np.float32)
  assert np.abs(got - ref).max() <= 4 * 2.0 ** -10 * np.abs(ref).max()


def test_bfloat16_rounding_on_the_gpu_matches_ml_dtypes():
  """float32 -> bfloat16 with the GPU's own cvt.rn.bf16.f32 (sm_80+; before, the integer arithmetic every bf16 test
  here ran on the H200 until 2026-11-29): ml_dtypes' bits for every non-NaN input, NaN for NaN (tests/test_half.py
  has both forms in the simulator)."""
  import ml_dtypes
  tgt = mc.Target("cuda")
  if tgt.device.compute_capability < (8, 0): pytest.skip(f"{tgt.arch} has no cvt.rn.bf16.f32")
  X = mc.placeholder((4096,), "float32", name="X")
  Y = mc.compute((4096,), lambda i: mc.cast(X[i], "bfloat16"), name="Y")
  s = mc.Schedule([Y])
  o, t = s.split(Y, s.axis(Y)[0], 256)
  s.bind(Y, o, "blockIdx.x"); s.bind(Y, t, "threadIdx.x")
  bits = np.random.default_rng(0).integers(0, 2**32, 4096, dtype=np.uint64).astype(np.uint32)
  bits[:8] = [0x3f808000, 0x3f818000, 0x7f7fffff, 0x00000001, 0x807fffff, 0x7f800000, 0xff800000, 0x7fc00000]
  x = bits.view(np.float32)
  k = mc.build(s, target=tgt)
  assert "cvt.rn.bf16.f32" in k.binary.ptx
  got = k(x, device="gpu")
  with np.errstate(invalid="ignore"): want = x.astype(ml_dtypes.bfloat16)
  nan = np.isnan(x)
  np.testing.assert_array_equal(got.view(np.uint16)[~nan], want.view(np.uint16)[~nan])
  assert np.isnan(got[nan].astype(np.float32)).all()
