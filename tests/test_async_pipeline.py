"""``Schedule.pipeline``: shared tiles fetched ahead with cp.async into several buffers (issue 47).

The lowered loop (ir/nest.py ``_pipelined``) against numpy in the CPU simulator, which lands a cp.async copy in
shared memory only at the wait that covers it (so a pipeline that waits too little reads stale tiles there, as it
may on a GPU), and in the Python interpreter; the emitted instructions; the step's checks and its JSON; compile's
tensor-core template pipelined on sm_80+ and not before.
"""
from __future__ import annotations

import numpy as np
import pytest

import minicomp as mc
from minicomp.codegen.simulator import build_simulator
from minicomp.errors import ScheduleError
from minicomp.ir.interp import run_program

M = N = 32


def matmul(K: int, step: int, stages: int | None, width: int = 4):
  """C = A B (float32, M x N x K) on 64 threads a block of 16 x 16 outputs, A and B staged through shared memory
  ``step`` values of k at a time, fetched ``width`` floats per thread at once, pipelined in ``stages`` buffers."""
  A = mc.placeholder((M, K), name="A")
  B = mc.placeholder((K, N), name="B")
  k = mc.reduce_axis(K, name="k")
  C = mc.compute((M, N), lambda i, j: mc.sum(A[i, k] * B[k, j], axis=k), name="C")
  s = mc.Schedule([C])
  CL = s.cache_write(C, "local")
  ax, ay = s.axis(C)
  i0, i1, i2 = s.split(C, ax, [8, 2])
  j0, j1, j2 = s.split(C, ay, [8, 2])
  s.reorder(C, i0, j0, i1, j1, i2, j2)
  s.bind(C, s.fuse(C, i0, j0), "blockIdx.x")
  tx = s.fuse(C, i1, j1)
  s.bind(C, tx, "threadIdx.x")
  s.compute_at(CL, C, tx)
  ko, ki = s.split(CL, "k", step)
  s.reorder(CL, ko, ki, *s.axis(CL))
  for X in (A, B):
    xs = s.cache_read(X, "shared", [CL])
    s.compute_at(xs, CL, ko)
    o, t, v = s.split(xs, s.fuse(xs, *s.loops(xs)), [64, width])    # (tiles of 16 x step: 64 x width divides them)
    s.bind(xs, t, "threadIdx.x")
    if width > 1: s.vectorize(xs, v)
  if stages: s.pipeline(CL, ko, stages)
  return s, CL, ko


def _inputs(K: int):
  rng = np.random.default_rng(K)
  a, b = rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal((K, N)).astype(np.float32)
  return a, b, a.astype(np.float64) @ b


@pytest.mark.parametrize("stages, K, step, width", [(2, 64, 16, 4), (3, 64, 16, 4), (3, 80, 16, 4), (3, 48, 8, 1),
                                                    (4, 16, 8, 2), (2, 8, 8, 2)])
def test_a_pipelined_matmul_matches_numpy(stages, K, step, width):
  """Two, three and four stages; a loop of 5 k-steps (not a multiple of 3), of 2 (fewer than the 4 stages' 3
  fetched ahead: the prologue's guards) and of 1 (nothing to pipeline: built as it is); 16-, 8- and 4-byte copies."""
  s, _, _ = matmul(K, step, stages, width)
  a, b, ref = _inputs(K)
  k = mc.build(s, target="sm_80")
  steps = K // step
  if steps > 1:
    assert f"mc_cp_async_wait<{stages - 2}>();" in k.source and f"mc_cp_async_{4 * width}(" in k.source
    assert "cp.async.wait_group" in k.binary.ptx
  else:
    assert "mc_cp_async" not in k.source
  np.testing.assert_allclose(k(a, b, device="cpu"), ref, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(run_program(s.lower(), a, b), ref, rtol=1e-4, atol=1e-4)


def test_a_thread_may_have_many_copies_in_flight():
  """4-byte copies of 16 x 64 tiles in 4 stages: each thread has 96 copies in flight after the prologue. PTX sets no
  limit; the simulator held 64 and failed the kernel (a one-warp tensor-core convolution of ResNet-18 in TF32 did,
  under MINICOMP_TENSOR_CORES=always); its queue grows now, and the product is numpy's."""
  s, _, _ = matmul(256, 64, 4, width=1)
  k = mc.build(s, "sm_80")
  assert k.source.count("mc_cp_async_4(") == 4          # (A and B, in the prologue and in the loop)
  a, b, want = _inputs(256)
  np.testing.assert_allclose(k(a, b, device="cpu"), want, rtol=1e-4, atol=1e-4)


def test_shared_memory_holds_one_tile_per_stage():
  plain = {b.name: int(b.size.arg) for b in matmul(64, 8, None, 2)[0].lower().kernels[0].allocs if b.scope == "shared"}
  piped = {b.name: int(b.size.arg) for b in matmul(64, 8, 3, 2)[0].lower().kernels[0].allocs if b.scope == "shared"}
  assert piped == {n: 3 * v for n, v in plain.items()} and plain == {"A_shared": 128, "B_shared": 128}


def test_the_simulator_catches_a_pipeline_that_waits_too_little():
  """The same kernel with its wait loosened by one group reads tiles still in flight: wrong in the simulator."""
  s, _, _ = matmul(64, 16, 3)
  a, b, ref = _inputs(64)
  k = mc.build(s, target="sm_80")
  (call,) = k.plan.launches
  for wait, right in (("mc_cp_async_wait<1>();", True), ("mc_cp_async_wait<2>();", False)):
    src = k.source.replace("mc_cp_async_wait<1>();", wait)
    mod = build_simulator(src, {call.kernel: ["const float*", "const float*", "float*"]})
    out = np.zeros((M, N), np.float32)
    mod.launch(call.kernel, call.grid, call.block, [a, b, out])
    assert np.allclose(out, ref, rtol=1e-4, atol=1e-4) == right, wait


def test_pipeline_replays_from_json_and_prints():
  s, _, _ = matmul(64, 16, 3)
  assert "@pipeline 3 stages" in str(s)
  again = mc.Schedule.from_json(s.dag.outputs, s.to_json())
  assert mc.build(again, target="sm_80").source == mc.build(s, target="sm_80").source


@pytest.mark.parametrize("stages", [1, 9, "2", True])
def test_pipeline_refuses_a_bad_stage_count(stages):
  s, CL, ko = matmul(64, 8, None)
  with pytest.raises(ScheduleError, match="stages must be an int from 2 to 8"):
    s.pipeline(CL, ko, stages)


def test_pipeline_step_checks():
  s, CL, ko = matmul(64, 8, None)
  with pytest.raises(ScheduleError, match="is annotated 'blockIdx.x'"):
    s.pipeline("C", s.loops("C")[0], 2)
  with pytest.raises(ScheduleError, match="is a spatial loop"):
    s.pipeline("C", s.loops("C")[2], 2)
  with pytest.raises(ScheduleError, match="no shared-memory stage is computed at"):
    s.pipeline(CL, s.loops(CL)[1], 2)
  s.pipeline(CL, ko, 2)
  s.split(CL, ko, 2)                      # the pipelined loop is split after the step: lowering says so
  with pytest.raises(ScheduleError, match="no longer exists"):
    s.lower()


def test_pipeline_needs_cp_async():
  s, _, _ = matmul(64, 8, 2)
  with pytest.raises(ScheduleError, match="cp.async needs sm_80"):
    mc.build(s, target="sm_75")


@pytest.mark.parametrize("target, piped", [("sm_80", True), ("sm_90", True), ("sm_75", False)])
def test_the_tensor_core_template_is_pipelined_where_cp_async_exists(target, piped):
  """compile's tensor-core schedules fetch their tiles ahead on sm_80+ (3 stages where they fit 48 KB: a 1024^3
  fp16 matmul's 128 x 128 x 32 tiles take 3 x 19 KB, so 2), and synchronously on sm_75; the simulator runs of
  their results against numpy are test_tensor_core_compile.py's."""
  from minicomp import workloads as W
  from minicomp.graph.tensor_core_schedules import tensor_core_schedules
  from minicomp.ir.dag import ComputeDAG
  wl = W.matmul(1024, 1024, 1024, dtype="float16")
  scheds = tensor_core_schedules(ComputeDAG(wl.outputs), mc.Target(target))
  stages = [dict(st.pipeline) for s in scheds for st in s.state.stages if st.tensorize]
  if not piped:
    assert stages == [{}, {}]
    return
  if target == "sm_80":         # 128 x 128 and 128 x 64 tiles (108 SMs); on sm_90's 132, 128 x 64 and 64 x 64
    assert [list(x.values()) for x in stages][:2] == [[2], [3]]      # (then a split-K one: 64 blocks < 1.5 / SM)
  assert all(list(x.values()) in ([2], [3]) for x in stages)
  for s, n in zip(scheds, stages):
    k = mc.build(s, target=target)
    assert "mc_cp_async_16(A_shared" in k.source and "mc_cp_async_16(B_shared" in k.source
    assert f"mc_cp_async_wait<{list(n.values())[0] - 2}>();" in k.source
    assert sum(r.shared_bytes for r in k.binary.resources.values()) <= 48 * 1024


@pytest.mark.parametrize("channels, piped", [(128, True), (64, False)])
def test_a_convolution_pipelines_its_taps_and_k_steps_as_one_loop(channels, piped):
  """A 3x3 convolution's k-steps of 32 channels run inside its 9 filter taps: with 128 channels (36 steps) the taps
  and steps are fused into one pipelined loop, with 64 (18 steps, fewer than TAP_PIPELINE_MIN_STEPS) the tiles stay
  synchronous; both compute numpy's result in the simulator."""
  from minicomp import workloads as W
  from minicomp.graph.tensor_core_schedules import tensor_core_schedules
  from minicomp.ir.dag import ComputeDAG
  wl = W.conv2d(1, channels, 8, 8, channels, 3, pad=1, dtype="float16", channels_last_weights=True)
  ins = wl.random_inputs()
  ref = wl.reference(*[a.astype(np.float32) for a in ins]).astype(np.float64)
  for s in tensor_core_schedules(ComputeDAG(wl.outputs), mc.Target("sm_80")):
    if any(st.name.endswith(".rf") for st in s.state.stages): continue   # (split-K: a chunk's steps are fewer)
    pipes = [dict(st.pipeline) for st in s.state.stages if st.tensorize][0]
    assert list(pipes) == (["ry.rx.rc.0.fused"] if piped else [])
    k = mc.build(s, target="sm_80")
    assert ("mc_cp_async_commit();" in k.source) == piped
    out = k(*ins, device="cpu").astype(np.float64)
    assert np.abs(out - ref).max() <= 2.0 ** -11 * np.abs(ref).max() + 1e-3


def test_stages_may_be_a_schedule_parameter():
  """A variable stage count (the tensor-core sketch's choice) is a parameter: params() lists it, JSON keeps it,
  substitute() gives the schedule that the same count written as an int gives."""
  s, CL, ko = matmul(64, 16, None)
  s.pipeline(CL, ko, mc.var("stages"))
  assert s.params() == ["stages"] and "@pipeline stages stages" in str(s)
  again = mc.Schedule.from_json(s.dag.outputs, s.to_json())
  assert again.params() == ["stages"]
  fixed, _, _ = matmul(64, 16, 3)
  assert mc.build(again.substitute({"stages": 3}), target="sm_80").source == mc.build(fixed, target="sm_80").source
  with pytest.raises(ScheduleError, match="stages must be an int from 2 to 8"):
    s.substitute({"stages": 1})
