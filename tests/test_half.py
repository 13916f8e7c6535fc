"""Half kernels (float16, bfloat16): stored in 2 bytes, computed in float (codegen/cuda.py), built by NVRTC and run
on the simulator.

References are numpy computed in float32 from the same half inputs, rounded to the half type at the end. A kernel
may accumulate in another order than numpy (tiles, threads): the tolerance is the half type's rounding of the
result (half an ulp: 2^-11 relative for float16, 2^-8 for bfloat16) plus float32 reassociation over a reduction
of length K (K * 2^-24 of the sum of magnitudes), so rtol 2 ulp with atol from the reduction's magnitude.
"""
import ml_dtypes
import numpy as np
import pytest

import minicomp as mc
from minicomp import workloads as W
from minicomp.graph.schedules import default_schedule
from minicomp.search.annotate import sample_population
from minicomp.search.sketch import generate_sketches
from minicomp.search.strategies.gensor import construct
from minicomp.target import as_target

TGT = as_target("sm_86")
rng = np.random.default_rng(0)


HALF = {"float16": (np.float16, 2.0**-10), "bfloat16": (ml_dtypes.bfloat16, 2.0**-7)}   # numpy type, rtol


def _half(*shape, scale=1.0, dtype="float16"):
  return (rng.standard_normal(shape) * scale).astype(HALF[dtype][0])


def _matmul(M, N, K, dtype="float16"):
  wl = W.matmul(M, N, K, dtype=dtype)
  return wl.inputs, wl.outputs


def _softmax(M, N):
  X = mc.placeholder((M, N), "float16", name="X")
  k1, k2 = mc.reduce_axis(N, name="k1"), mc.reduce_axis(N, name="k2")
  mx = mc.compute((M,), lambda i: mc.max(X[i, k1], axis=k1), name="mx")
  e = mc.compute((M, N), lambda i, j: mc.exp(X[i, j] - mx[i]), name="e")
  s = mc.compute((M,), lambda i: mc.sum(e[i, k2], axis=k2), name="s")
  y = mc.compute((M, N), lambda i, j: e[i, j] / s[i], name="y")
  return [X], [y]


def _schedules(outs, n_random=3):
  """The rule-based schedule, Gensor's constructed ones and random sketch samples of ``outs``."""
  dag = mc.ComputeDAG(outs)
  out = [("rules", default_schedule(dag, TGT))]
  out += [(f"gensor{i}", c.schedule) for i, c in enumerate(construct(dag, TGT, seed=0).candidates[:2])]
  out += [(f"random{i}", c.schedule) for i, c in enumerate(sample_population(generate_sketches(dag, TGT), n_random,
                                                                              np.random.default_rng(1), TGT))]
  return out


def test_elementwise_is_computed_in_float_and_rounded_once():
  A = mc.placeholder((1000,), "float16", name="A")
  B = mc.compute((1000,), lambda i: A[i] * A[i] + 1.0, name="B")
  s = mc.Schedule([B])
  o, t = s.split(B, s.axis(B)[0], 128)
  s.bind(B, o, "blockIdx.x"); s.bind(B, t, "threadIdx.x")
  k = mc.build(s, TGT)
  assert "const __half* __restrict__ A" in k.source and "__float2half_rn(" in k.source
  ptx = k.binary.ptx
  assert "ld.global.nc.u16" in ptx or "ld.global.u16" in ptx
  assert "cvt.rn.f16.f32" in ptx and "cvt.f32.f16" in ptx
  a = _half(1000, scale=4)
  got = k(a)
  assert got.dtype == np.float16
  np.testing.assert_array_equal(got, (a.astype(np.float32) ** 2 + 1).astype(np.float16))


def test_a_cast_to_half_inside_an_expression_rounds_there():
  A = mc.placeholder((256,), "float32", name="A")
  B = mc.compute((256,), lambda i: mc.cast(mc.cast(A[i], "float16"), "float32") - A[i], name="B")
  s = mc.Schedule([B])
  o, t = s.split(B, s.axis(B)[0], 64)
  s.bind(B, o, "blockIdx.x"); s.bind(B, t, "threadIdx.x")
  a = rng.standard_normal(256).astype(np.float32)
  got = mc.build(s, TGT)(a)
  np.testing.assert_array_equal(got, a.astype(np.float16).astype(np.float32) - a)
  assert np.abs(got).max() > 0                  # (the rounding is really there)


@pytest.mark.parametrize("M,N,K,dtype", [(64, 48, 96, "float16"), (33, 70, 129, "float16"), (40, 24, 72, "bfloat16")])
def test_matmul_in_half_accumulates_in_float(M, N, K, dtype):
  ins, outs = _matmul(M, N, K, dtype)
  a, b = _half(M, K, dtype=dtype), _half(K, N, dtype=dtype)
  want = a.astype(np.float32) @ b.astype(np.float32)
  atol = K * 2.0**-24 * (np.abs(a.astype(np.float32)) @ np.abs(b.astype(np.float32))).max() + 2.0**-14
  for name, sched in _schedules(outs):
    k = mc.build(sched, TGT)
    assert ("__half" if dtype == "float16" else "__nv_bfloat16") in k.source, name
    to_float = "__half2float" if dtype == "float16" else "__bfloat162float"
    shared = [line for line in k.source.splitlines() if "__shared__" in line]
    if '"tensorize"' in sched.to_json():    # a tensor-core sample: its tiles keep the half type the fragments take
      half_t = "__half" if dtype == "float16" else "__nv_bfloat16"
      assert "mc_mma_" in k.source and shared and all(f" {half_t} " in line for line in shared), name
    else:
      for line in k.source.splitlines():    # shared tiles hold floats: a fetch converts each element once (into the
        lhs = line.split("=")[0]            # tile, or the registers it is staged in: codegen/cuda._staged), a use never
        if "__shared__" in line: assert line.lstrip().startswith("__shared__ __align__(16) float "), (name, line)
        elif "_shared_stage[" in lhs and "=" in line: assert to_float in line, (name, line)
        elif "_shared[" in lhs and "=" in line: assert to_float in line or "_shared_stage[" in line, (name, line)
        elif "=" in line: assert f"{to_float}(A_shared" not in line and f"{to_float}(B_shared" not in line, (name, line)
    got = k(a, b)
    assert got.dtype == HALF[dtype][0], name
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=HALF[dtype][1], atol=atol, err_msg=name)


def test_softmax_in_half():
  ins, outs = _softmax(16, 300)
  x = _half(16, 300, scale=3)
  x32 = x.astype(np.float32)
  e = np.exp(x32 - x32.max(axis=1, keepdims=True))
  want = e / e.sum(axis=1, keepdims=True)
  for name, sched in _schedules(outs):
    got = mc.build(sched, TGT)(x)
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=2.0**-10, atol=2.0**-14, err_msg=name)


def test_the_interpreter_computes_half_as_the_emitted_code_does():
  """The loop-IR interpreter (the second oracle) follows the same rule: float math, rounding at stores and casts."""
  from minicomp.ir.interp import run_program
  ins, outs = _matmul(8, 6, 20)
  a, b = _half(8, 20), _half(20, 6)
  for name, sched in _schedules(outs, n_random=1)[:3]:
    k = mc.build(sched, TGT)
    want = k(a, b)
    got = run_program(k.program, a, b)
    np.testing.assert_allclose(np.asarray(got).astype(np.float32), want.astype(np.float32), rtol=2.0**-10, atol=2.0**-14,
                               err_msg=name)


@pytest.mark.parametrize("arch", ["sm_70", "sm_86"])
def test_bfloat16_rounds_to_nearest_even_as_ml_dtypes_does(arch):
  """Every float32 bit pattern class: ties to even, overflow to inf, denormals, inf, NaN; on sm_70 (no bf16
  conversion instruction: integer arithmetic) and sm_86 (cvt.rn.bf16.f32), in the simulator (the GPU's cvt:
  tests/test_on_gpu_precision.py)."""
  X = mc.placeholder((4096,), "float32", name="X")
  Y = mc.compute((4096,), lambda i: mc.cast(X[i], "bfloat16"), name="Y")
  s = mc.Schedule([Y])
  o, t = s.split(Y, s.axis(Y)[0], 256)
  s.bind(Y, o, "blockIdx.x"); s.bind(Y, t, "threadIdx.x")
  bits = rng.integers(0, 2**32, 4096, dtype=np.uint64).astype(np.uint32)
  bits[:8] = [0x3f808000, 0x3f818000, 0x7f7fffff, 0x00000001, 0x807fffff, 0x7f800000, 0xff800000, 0x7fc00000]
  x = bits.view(np.float32)
  k = mc.build(s, arch)
  assert ("cvt.rn.bf16.f32" in k.binary.ptx) == (arch >= "sm_80")     # (one instruction where the arch has it)
  got = k(x)
  with np.errstate(invalid="ignore"): want = x.astype(ml_dtypes.bfloat16)
  assert got.dtype == ml_dtypes.bfloat16
  g, w = got.view(np.uint16), want.view(np.uint16)
  nan = np.isnan(x)
  np.testing.assert_array_equal(g[~nan], w[~nan])
  assert np.isnan(got[nan].astype(np.float32)).all()
