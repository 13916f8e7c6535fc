"""The analytic model on the tensor-core sketch (search/static/analytic.py PointwiseModel): its symbolic program does
not lower (the tensorized loops need their sizes), so each point is lowered on its own and counted as a tensor-core
kernel: mma.sync instructions on the tensor pipe, fragment reads from shared memory, not the scalar loops the Mma
statement keeps for the interpreter. Gensor's walks and Tuna search the sketch with it."""
import numpy as np

import minicomp as mc
from minicomp import workloads as W
from minicomp.search.annotate import sample
from minicomp.search.sketch import generate_sketches
from minicomp.search.static.analytic import PointwiseModel, SketchModel, sketch_model
from minicomp.search.static.estimate import estimate
from minicomp.search.strategies.gensor import construct


def _tc_sketch(M=256, N=256, K=256, target="h100"):
  tgt = mc.Target(target)
  dag = mc.ComputeDAG(W.matmul(M, N, K, dtype="float16").outputs)
  (sk,) = [s for s in generate_sketches(dag, tgt) if "tensor_core_tiling" in s.rules
            and "tensor_core_split_k" not in s.rules]     # (not the split-K one 256^3 also gets on the h100)
  return dag, sk, tgt


def test_the_tensor_core_sketch_gets_a_pointwise_model_and_others_keep_their_formulas():
  dag, sk, tgt = _tc_sketch()
  assert isinstance(sketch_model(sk, tgt), PointwiseModel)
  other = [s for s in generate_sketches(dag, tgt) if "tensor_core_tiling" not in s.rules]
  assert other and all(isinstance(sketch_model(s, tgt), SketchModel) for s in other)


def test_a_point_counts_mma_instructions_not_the_scalar_loops():
  dag, sk, tgt = _tc_sketch()
  m = sketch_model(sk, tgt)
  values = {c.var: c.candidates[0] for c in sk.choices}
  values.update({"tc_mi": 2, "tc_ni": 2})
  values = {n: values.get(n, 1) for n in m.names}
  (f,) = m.facts([values])[0]
  # 2 x 2 warps of 2 x 2 instructions: each thread issues its warp's 4 per 16 of K
  assert f.per_thread["tensor_k16"] == 2 * 2 * 256 // 16
  assert f.per_thread.get("fp32_fma", 0) == 0            # (the Mma's scalar body: 64 FMAs per lane and instruction)
  assert f.per_thread["ld_shared"] > 0 and f.shared_wavefronts_per_block > 0
  cost = m([values])[0]
  assert np.isfinite(cost)
  assert m._points and len(m._points) == 1 and m([values])[0] == cost     # (lowered once per point)


def test_a_point_whose_tiles_overhang_the_task_counts_the_padded_instructions():
  dag, sk, tgt = _tc_sketch(M=48, N=256, K=256)      # 48 rows: a warp tile of 4 instructions is 64 (lowering pads)
  m = sketch_model(sk, tgt)
  values = {n: 1 for n in m.names}
  values.update({c.var: c.candidates[0] for c in sk.choices})
  values.update({"tc_mi": 4})
  assert m.valid([values])[0] and np.isfinite(m([values])[0])
  (f,) = m.facts([values])[0]
  assert f.per_thread["tensor_k16"] == 4 * values["tc_ni"] * 256 // 16    # the overhanging rows' instructions too


def test_a_point_whose_k_steps_overhang_the_reduction_counts_them_whole():
  dag, sk, tgt = _tc_sketch(M=64, N=256, K=48)       # k-steps of 2 instructions (32): the second half past k's end
  m = sketch_model(sk, tgt)
  values = {n: 1 for n in m.names}
  values.update({c.var: c.candidates[0] for c in sk.choices})
  values.update({"tc_ksteps": 2})
  assert m.valid([values])[0]
  (f,) = m.facts([values])[0]
  assert f.per_thread["tensor_k16"] == values["tc_mi"] * values["tc_ni"] * 64 // 16


def test_the_analytic_estimates_follow_the_full_model_on_sampled_points():
  """Not a fidelity claim: the two agree within 3x on every point and put the best of them first-or-second."""
  dag, sk, tgt = _tc_sketch(1024, 1024, 1024)
  m = sketch_model(sk, tgt)
  rng = np.random.default_rng(0)
  pts = [sample(sk, rng, tgt) for _ in range(6)]
  a = np.array([m([c.values])[0] for c in pts])
  f = np.array([estimate(mc.build(c.schedule, tgt), tgt).latency_s for c in pts])
  assert np.all(a / f < 3) and np.all(f / a < 3)
  assert np.argsort(a)[np.argmin(f)] <= 1 or np.argmin(a) == np.argmin(f)


def test_gensor_constructs_on_the_tensor_cores_for_a_half_matmul():
  dag, sk, tgt = _tc_sketch(1024, 1024, 1024)
  res = construct(dag, tgt, seed=0)
  assert res.candidates and "tensorize" in res.candidates[0].schedule.to_json()
  fp32 = [c for c, cost in zip(res.candidates, res.costs) if "tensorize" not in c.schedule.to_json()]
  assert fp32 and res.costs[0] < 0.5 * min(cost for c, cost in zip(res.candidates, res.costs) if c in fp32)


def test_tuna_searches_the_tensor_core_sketch():
  """Tuna's ES over the sketch (one short run): its random starts score finite and the run's best point is a valid
  tensor-core program no worse than where it started."""
  from minicomp.search.strategies.tuna import SketchSearch
  dag, sk, tgt = _tc_sketch()
  s = SketchSearch(sk, tgt)
  assert isinstance(s.models[next(iter(s.models))], PointwiseModel)
  rng = np.random.default_rng(0)
  starts = s.random_starts(rng, 2)
  assert starts and np.isfinite(s.score(starts)).all()
  run = s.run(rng, restarts=2, population=4, iterations=3, sigma=0.3, alpha=1.0, deadline=None, starts=starts)
  assert run is not None and s.archive
  best = min(s.archive, key=s.archive.get)
  assert s.archive[best] <= min(s.score(starts))
