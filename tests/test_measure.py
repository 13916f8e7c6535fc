"""The measurer interface: costs or typed failures, in order, through any Executor."""
import concurrent.futures as cf
import json
import pickle

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
  """Runs only where pycuda finds a CUDA GPU (none on the CI machines: skipped there, saying so)."""
  from minicomp.codegen.gpu_runtime import gpu_available, gpu_status
  if not gpu_available():
    pytest.skip(f"needs a CUDA GPU and pycuda: {gpu_status()}")
  import test_workloads as T
  wl = W.matmul(128, 96, 64)
  s = T.mm_tiled_shared(wl, tile=32, thread=4, kt=8)
  with GPUMeasurer(min_total_s=0.02) as m:
    (res,) = m.measure([MeasureInput(s.dag, s.to_json(), "sm_80")])
  assert res.ok, res.message
  assert res.is_estimate is False and 0 < res.cost_s < 0.1 and res.parts["min_s"] <= res.cost_s


def test_a_timed_out_estimate_does_not_keep_its_worker():
  """A timeout stops the owned pool's worker and starts a fresh pool (``_restart``): the next round is
  measured by the new pool and close() returns promptly. (This estimate is fast, so the test checks the
  restart path, not a minutes-long abandoned estimate.)"""
  import time
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
