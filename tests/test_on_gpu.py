"""On a real GPU (gpu-marked; skipped without one, saying why): random valid schedules of every
standard workload and every zoo model, built for the GPU's own arch (``target="cuda"``), run
through the default backend and compared with numpy / onnxruntime; a model benchmark; and
GPU-measured tuning of a small model, no slower than its default schedules.

Run on a GPU machine with ``python -m pytest -m gpu tests/``."""
import numpy as np
import pytest

import minicomp as mc
from minicomp import workloads as W
from minicomp import zoo
from onnx_harness import run_ort

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("needs_gpu")]


WORKLOADS = {
  "matmul": lambda: W.matmul(257, 192, 129), "matmul_bias_relu": lambda: W.matmul(128, 96, 64, bias_relu=True),
  "batch_matmul": lambda: W.batch_matmul(4, 64, 48, 32),
  "conv2d": lambda: W.conv2d(1, 16, 14, 14, 32, 3, pad=1), "conv2d_stride": lambda: W.conv2d(2, 8, 15, 13, 16, 3, stride=2),
  "depthwise": lambda: W.depthwise_conv2d(1, 32, 28, 28, 3, pad=1),
  "softmax": lambda: W.softmax(64, 1000), "layernorm": lambda: W.layernorm(64, 768),
  "row_sum": lambda: W.row_sum(100, 777), "broadcast_chain": lambda: W.broadcast_chain(8, 30, 17),
}


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_random_schedules_of_every_workload_match_numpy_on_the_gpu(name):
  from minicomp.search.annotate import sample_population
  from minicomp.search.sketch import generate_sketches
  wl = WORKLOADS[name]()
  tgt = mc.Target("cuda")
  cands = sample_population(generate_sketches(mc.ComputeDAG(wl.outputs), tgt), 8, np.random.default_rng(0), tgt)
  assert cands, "no valid schedule sampled"
  ins = wl.random_inputs(1)
  want = wl.reference(*ins)
  for c in cands:
    got = mc.build(c.schedule, tgt)(*ins, device="gpu")
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3, err_msg=c.key[:200])


@pytest.mark.parametrize("name", sorted(zoo.TEST_MODELS))
def test_zoo_model_matches_onnxruntime_on_the_gpu(name):
  model, feeds = zoo.TEST_MODELS[name]()
  want = run_ort(model, feeds)
  cm = mc.compile(model, target="cuda")
  for cuda_graph in (False, True, True):
    for g, w in zip(cm.run(feeds, device="gpu", cuda_graph=cuda_graph), want):
      np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-4, err_msg=f"{name} cuda_graph={cuda_graph}")


def test_benchmark_on_the_gpu():
  model, feeds = zoo.residual_block(c=32, hw=28)
  cm = mc.compile(model, target="cuda")
  r = cm.benchmark(feeds, repeat=20, warmup=3)
  print(r)
  assert r.median_s > 0 and r.min_s <= r.median_s and len(r.calls) == len(cm.calls)
  assert all(c[2] > 0 for c in r.calls)
  assert r.host_waits == 0      # every run's launches were queued before the GPU reached them (no host time timed)
  g = cm.benchmark(feeds, repeat=20, warmup=3, cuda_graph=True)
  assert g.median_s > 0 and g.cuda_graph


def test_gpu_measured_tuning_is_no_slower_than_the_default_schedule(tmp_path):
  # The default (trials=0) is Gensor's construction where the static model rates it above the rules; on an
  # H200 (2026-11-27) 64 GPU-measured trials found nothing faster for this block (20.96 us tuned, 20.94 us
  # default): tuning must not lose to the default beyond timing noise, and must have measured on the GPU.
  import json
  model, feeds = zoo.residual_block(c=32, hw=28)
  default = mc.compile(model, target="cuda").benchmark(feeds, repeat=30)
  log = tmp_path / "log.jsonl"
  tuned = mc.compile(model, target="cuda", trials=64, log_file=str(log), seed=0)
  got = tuned.benchmark(feeds, repeat=30)
  print(default, got, sep="\n")
  assert got.median_s <= default.median_s * 1.05
  recs = [json.loads(ln) for ln in log.read_text().splitlines() if ln.strip()]
  assert len(recs) >= 32 and all(r["is_estimate"] is False for r in recs)
  for g, w in zip(tuned.run(feeds), run_ort(model, feeds)):
    np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("a_type,b_type", [(np.int8, np.int8), (np.uint8, np.int8), (np.int8, np.uint8),
                                           (np.uint8, np.uint8)])
def test_dp4a_kernels_match_numpy_on_the_gpu(a_type, b_type):
  """The dp4a helpers' PTX (nvrtc.DP4A_HEADER) on the GPU, every signedness: a word-read matmul (the pure asm) and one
  whose A starts at an odd column (packed bytes: the volatile form), exact against numpy's int64 product."""
  def full(t, *shape):
    info = np.iinfo(t)
    return np.random.default_rng(1).integers(info.min, info.max + 1, shape).astype(t)
  M, K, N = 33, 256, 40
  for offset in (0, 1):
    A = mc.placeholder((M, K + offset), a_type.__name__, "A")
    B = mc.placeholder((N, K), b_type.__name__, "B")
    k = mc.reduce_axis(K // 4, "k")
    C = mc.compute((M, N), lambda i, j: mc.sum(mc.dot4([A[i, offset + 4 * k + t] for t in range(4)],
                                                      [B[j, 4 * k + t] for t in range(4)]), axis=k), "C")
    kern = mc.build(mc.Schedule([C]), "cuda")
    a, b = full(a_type, M, K + offset), full(b_type, N, K)
    got = np.asarray(kern(a, b, device="gpu"))
    assert np.array_equal(got, a[:, offset:].astype(np.int64) @ b.astype(np.int64).T), f"offset {offset}"
    assert ("mc_dp4av_" in kern.source) == (offset == 1)


def test_an_int8_qdq_block_on_dp4a_matches_onnxruntime_on_the_gpu(tmp_path):
  """A ResNet basic block (64 channels, 28x28) quantized by onnxruntime's quantize_static, compiled for the GPU: its
  QLinearConv kernels run dp4a on the input blocked by four channels; equal to onnxruntime's CPU output."""
  from test_quantize import _quantized
  model, feeds = zoo.residual_block(c=64, hw=28)
  q = _quantized(model, feeds, tmp_path)
  cm = mc.compile(q, target="cuda")
  assert sum("mc_dp4a" in k.source for k in cm.kernels) == 2
  assert np.array_equal(cm.run(feeds, device="gpu")[0], run_ort(q, feeds)[0])
