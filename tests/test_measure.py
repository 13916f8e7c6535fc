"""The measurer interface: costs or typed failures, in order, through any Executor."""
import concurrent.futures as cf
import json
import pickle

import numpy as np
import pytest

import minicomp as mc
from minicomp import workloads as W
from minicomp.search.measure import ErrorKind, GPUMeasurer, MeasureInput, StaticMeasurer


def _inputs():
  wl = W.matmul(64, 64, 64)
  dag = mc.ComputeDAG(wl.outputs)
  good = mc.Schedule(wl.outputs)
  i, j = good.axis("C")
  f = good.fuse("C", i, j)
  bo, t = good.split("C", f, 128)
  good.bind("C", bo, "blockIdx.x"); good.bind("C", t, "threadIdx.x")
  big = mc.Schedule(wl.outputs)
  f2 = big.fuse("C", *big.axis("C"))
  bo2, t2 = big.split("C", f2, 2048)
  big.bind("C", bo2, "blockIdx.x"); big.bind("C", t2, "threadIdx.x")
  bad_steps = json.dumps([{"step": "split", "stage": "C", "iter": "nope", "factors": [4]}])
  return [MeasureInput(dag, good.to_json(), "sm_86", "good"), MeasureInput(dag, big.to_json(), "sm_86", "big"),
          MeasureInput(dag, bad_steps, "sm_86", "bad")]


def test_static_measurer_costs_and_typed_failures():
  with StaticMeasurer(executor=cf.ThreadPoolExecutor(2)) as m:
    good, big, bad = m.measure(_inputs())
  assert good.ok and good.cost_s > 0 and good.is_estimate and "estimate" in str(good)
  assert big.error is ErrorKind.RESOURCE and "1024" in big.message
  assert bad.error is ErrorKind.SCHEDULE and "nope" in bad.message


def test_candidates_are_plain_picklable_data_and_process_pool_works():
  inputs = _inputs()[:1]
  assert pickle.loads(pickle.dumps(inputs[0])).steps_json == inputs[0].steps_json
  with StaticMeasurer(workers=1) as m:        # the default: a process pool
    (res,) = m.measure(inputs)
  assert res.ok, res.message
  with StaticMeasurer(executor=cf.ThreadPoolExecutor(1)) as m:
    (res2,) = m.measure(inputs)
  assert res2.cost_s == res.cost_s             # deterministic


def test_gpu_measurer_needs_a_gpu():
  from minicomp.codegen.gpu_runtime import gpu_available
  if gpu_available():
    pytest.skip("a GPU is present: GPUMeasurer is usable here")
  with pytest.raises(mc.RuntimeLaunchError, match="StaticMeasurer"):
    GPUMeasurer()


@pytest.mark.gpu
def test_gpu_measurer_times_a_kernel_on_the_gpu():
  """Runs only where a CUDA GPU is usable (none on the CI machines: skipped there, saying so)."""
  from minicomp.codegen.driver import gpu_arch, gpu_available, gpu_status
  if not gpu_available():
    pytest.skip(f"needs a CUDA GPU: {gpu_status()}")
  import test_workloads as T
  wl = W.matmul(128, 96, 64)
  s = T.mm_tiled_shared(wl, tile=32, thread=4, kt=8)
  with GPUMeasurer(min_total_s=0.02) as m:
    (res,) = m.measure([MeasureInput(s.dag, s.to_json(), gpu_arch())])
  assert res.ok, res.message
  assert res.is_estimate is False and 0 < res.cost_s < 0.1 and res.parts["min_s"] <= res.cost_s


def _float64_double():
  A = mc.placeholder((300,), "float64", name="A")
  B = mc.compute((300,), lambda i: A[i] * 2.0, name="B")
  s = mc.Schedule([B])
  bo, t = s.split("B", s.axis("B")[0], 128)
  s.bind("B", bo, "blockIdx.x"); s.bind("B", t, "threadIdx.x")
  return MeasureInput(mc.ComputeDAG([B]), s.to_json(), "sm_86", "f64")


def test_gpu_measurer_with_a_fake_gpu_through_a_spawn_pool(fake_gpu):
  """Builds in real spawned workers come back as plain data; timing and the simulator check run here."""
  with GPUMeasurer(driver=fake_gpu, min_total_s=0.0, max_repeats=5) as m:    # default executor: spawn pool
    good, big, bad, f64 = m.measure(_inputs() + [_float64_double()])
  assert good.ok and f64.ok, (good.message, f64.message)
  assert good.is_estimate is False and good.cost_s == pytest.approx(fake_gpu.launch_s) and good.parts["repeats"] == 3
  assert big.error is ErrorKind.RESOURCE and bad.error is ErrorKind.SCHEDULE
  assert 300 * 8 in [c[2] for c in fake_gpu.of("alloc")]             # float64 buffers in their real size
  assert fake_gpu.count("memset") == 2 * 3                             # L2 flushed before every timed run


def test_gpu_measurer_stops_when_the_gpu_context_is_lost(fake_gpu):
  from minicomp.search.measure import MeasureError, build_candidate
  inp = _inputs()[0]
  name = build_candidate(inp).plan.launches[0].kernel
  with GPUMeasurer(driver=fake_gpu, executor=cf.ThreadPoolExecutor(1), min_total_s=0.0, max_repeats=3) as m:
    fake_gpu.fail_launch[name] = "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"   # the candidate's fault
    (res,) = m.measure([inp])
    assert res.error is ErrorKind.LAUNCH and "OUT_OF_RESOURCES" in res.message
    fake_gpu.fail_launch[name] = "CUDA_ERROR_ILLEGAL_ADDRESS"           # the context is gone
    with pytest.raises(MeasureError, match="context is lost.*restart the process"):
      m.measure([inp])


def test_gpu_measurer_reports_a_wrong_result(fake_gpu, monkeypatch):
  import minicomp.codegen.gpu_runtime as G
  real = G.run_plan
  def corrupt(mod, plan, ins, outs):
    real(mod, plan, ins, outs)
    outs[0].reshape(-1)[0] += 1.0
  monkeypatch.setattr(G, "run_plan", corrupt)
  with GPUMeasurer(driver=fake_gpu, executor=cf.ThreadPoolExecutor(1), min_total_s=0.0, max_repeats=3) as m:
    (res,) = m.measure(_inputs()[:1])
  assert res.error is ErrorKind.WRONG_RESULT


def test_a_timed_out_estimate_does_not_keep_its_worker():
  """A timeout stops the owned pool's worker and starts a fresh pool (``_restart``): the next round is
  measured by the new pool and close() returns promptly. (This estimate is fast, so the test checks the
  restart path, not a minutes-long abandoned estimate: the shared pool is stopped first, so the first
  candidate waits for workers to start, seconds, far over the 0.01 s allowed.)"""
  import time
  from minicomp.search.workers import shutdown_pools
  shutdown_pools()
  inputs = _inputs()[:1]
  m = StaticMeasurer(workers=1, timeout_s=0.01)
  (res,) = m.measure(inputs)
  assert res.error is ErrorKind.TIMEOUT
  m.timeout_s = 120.0
  (res2,) = m.measure(inputs)
  assert res2.ok, res2.message
  t0 = time.perf_counter()
  m.close()
  assert time.perf_counter() - t0 < 10


def test_tuning_measures_on_the_gpu_only_when_it_is_the_target(fake_gpu):
  from minicomp.search.tune import default_measurer
  m = default_measurer(mc.Target("sm_86"))          # the fake GPU is sm_86
  assert isinstance(m, GPUMeasurer) and m.driver is fake_gpu
  m.close()
  m = default_measurer(mc.Target("sm_80"))
  assert isinstance(m, StaticMeasurer)
  m.close()


def test_compile_tunes_with_gpu_measurements(fake_gpu, tmp_path):
  """compile(trials=N) on a GPU machine of the target's arch: N measured (not estimated) records, none
  an internal error (the GPUMeasurer once failed every candidate: its workers returned live Kernels)."""
  from minicomp import zoo
  from minicomp.search.records import load_records
  from onnx_harness import run_ort
  model, feeds = zoo.residual_block(c=4, hw=6)
  log = tmp_path / "gpu.jsonl"
  cm = mc.compile(model, target="sm_86", trials=4, log_file=str(log), measures_per_round=2, strategy="random")
  recs = load_records(log)
  assert all(not r.is_estimate for r in recs)
  assert len([r for r in recs if r.strategy == "default"]) == 2          # each task's default, measured once
  recs = [r for r in recs if r.strategy != "default"]
  assert len(recs) == 4
  assert not [r for r in recs if r.error == ErrorKind.INTERNAL.value], [r.message for r in recs]
  assert sum(r.ok for r in recs) >= 2
  for g, w in zip(cm.run(feeds), run_ort(model, feeds)):
    np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
