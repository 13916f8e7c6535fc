"""Schedule.tensorize (ir/mma.py): matmuls whose inner tiles run on mma.sync, in the CPU simulator and the loop-IR
interpreter against numpy; the lowering's refusals; fragment reuse across a warp tile; the static model's tensor
pipe; on a GPU (gpu-marked) the same kernels."""
from __future__ import annotations

import numpy as np
import pytest

import minicomp as mc
from minicomp.codegen import tensor_core as tc
from minicomp.errors import TargetError
from test_tensor_core import _gpu

TYPES = {"m16n8k16_f16": "float16", "m16n8k16_bf16": "bfloat16", "m16n8k8_f16": "float16", "m16n8k8_tf32": "float32"}


def tensorized_matmul(intr: str, M=64, N=64, K=64, lanes=("g", "t"), k_split=None, mi=1, ni=1, staged=True):
  """C = A @ B with 128 threads a block (2 x 2 warps), each warp ``mi`` x ``ni`` tiles of 16 x 8 per k-step: rows
  ``i = block + wm (16 mi) + g (2 mi) + 2 m + r`` and columns ``j = block + wn (8 ni) + t (2 ni) + 2 n + c``, so
  lane 4 g + t holds a (2 mi) x (2 ni) box; A and B staged in shared memory per k-step. ``lanes`` orders g and t
  inside the thread index; ``staged=False`` reads them from global memory instead."""
  from minicomp import workloads as W
  dtype = TYPES[intr]
  wl = W.matmul(M, N, K, dtype=dtype)
  C, (A, B) = wl.stages["C"], wl.inputs
  s = mc.Schedule([C])
  CL = s.cache_write(C, "local")
  i, j = s.axis(C)
  io, wm, g, m, r = s.split(C, i, [2, 8, mi, 2])
  jo, wn, t, n, c = s.split(C, j, [2, 4, ni, 2])
  s.reorder(C, io, jo, wm, wn, *(g, t) if lanes == ("g", "t") else (t, g), m, n, r, c)
  s.bind(C, s.fuse(C, io, jo), "blockIdx.x")
  tx = s.fuse(C, wm, wn, *(g, t) if lanes == ("g", "t") else (t, g))
  s.bind(C, tx, "threadIdx.x")
  s.compute_at(CL, C, tx)
  ci, cj, ck = s.loops(CL)
  cm, cr = s.split(CL, ci, 2)
  cn, cc = s.split(CL, cj, 2)
  k0, k1 = s.split(CL, ck, k_split or tc.INTRINSICS[intr].k)
  s.reorder(CL, k0, cm, cn, cr, cc, k1)
  for X in (A, B) if staged else ():
    XS = s.cache_read(X, "shared", [CL])
    s.compute_at(XS, CL, k0)
    s.bind(XS, s.split(XS, s.fuse(XS, *s.loops(XS)), 128)[1], "threadIdx.x")
  s.unroll(CL, cm); s.unroll(CL, cn)
  s.tensorize(CL, cr, intr)
  return wl, s


def _matmul_tolerance(intr: str, a32, b32, ref) -> np.ndarray:
  """Per element: half an ulp of C's type (its rounding) plus the float32 sum's error, and for tf32 the operands'
  rounding (2^-11 relative each)."""
  out_bits = {"float16": 10, "bfloat16": 7, "float32": 23}[TYPES[intr]]
  mag = np.abs(a32.astype(np.float64)) @ np.abs(b32.astype(np.float64))
  per_product = 2.0 ** -10 if intr.endswith("tf32") else a32.shape[1] * 2.0 ** -23
  return 2.0 ** -(out_bits + 1) * np.abs(ref) + per_product * mag + 1e-30


@pytest.mark.parametrize("intr", sorted(TYPES))
def test_tensorized_matmul_matches_numpy_in_the_simulator(intr, monkeypatch):
  wl, s = tensorized_matmul(intr)
  arch = "sm_75" if intr == "m16n8k8_f16" else "sm_80"
  k = mc.build(s, target=arch)
  assert f"mma.sync.aligned.m16n8k{tc.INTRINSICS[intr].k}" in k.binary.ptx and tc.INTRINSICS[intr].helper in k.source
  if TYPES[intr] != "float32":
    # the tiles the tensor cores read hold the half values, read with ldmatrix (A as it is, B transposed: 2 / 1
    # matrices for k = 16 / 8); without it, A's pairs are adjacent (one 32-bit read each), B's are packed
    ctype = "__half" if TYPES[intr] == "float16" else "__nv_bfloat16"
    assert f"__shared__ __align__(16) {ctype} A_shared[" in k.source and f"__shared__ __align__(16) {ctype} B_shared[" in k.source
    n = tc.INTRINSICS[intr].a_regs
    assert f"mc_ldmatrix_x{n}(mma_a, A_shared + " in k.source and f"mc_ldmatrix_x{n // 2}_trans(mma_b, B_shared + " in k.source
    monkeypatch.setenv("MINICOMP_LDMATRIX", "0")
    plain = mc.build(s, target=arch).source
    monkeypatch.delenv("MINICOMP_LDMATRIX")
    assert "reinterpret_cast<const unsigned*>(A_shared + " in plain and "mc_pack_h2(B_shared[" in plain
  a, b = wl.random_inputs()
  a32, b32 = a.astype(np.float32), b.astype(np.float32)
  ref = a32.astype(np.float64) @ b32.astype(np.float64)
  out = k(a, b, device="cpu").astype(np.float64)
  assert (np.abs(out - ref) <= _matmul_tolerance(intr, a32, b32, ref)).all(), np.abs(out - ref).max()
  # the loop-IR interpreter runs the scalar loops the statement stands for (float32 products, no tf32 rounding;
  # one block of 32 x 16: the interpreter is slow)
  from minicomp.ir.interp import run_program
  wl, s = tensorized_matmul(intr, M=32, N=16, K=2 * tc.INTRINSICS[intr].k)
  a, b = wl.random_inputs(seed=1)
  a32, b32 = a.astype(np.float32), b.astype(np.float32)
  ref = a32.astype(np.float64) @ b32.astype(np.float64)
  interp = run_program(s.lower(), a, b).astype(np.float64)
  assert (np.abs(interp - ref) <= _matmul_tolerance(intr, a32, b32, ref)).all()


def test_a_warp_tile_of_several_mma_matches_numpy_and_reuses_its_fragments():
  """2 x 4 instructions per warp and k-step (32 x 32 per warp): correct, and each fragment is read once per k-step
  (ir/nest.py reads them ahead of the loops that reuse them): A with one ldmatrix for the 4 instructions of its
  row, B's 4 elements (16-bit reads) once for the 2 of its column: 2 ldmatrix + 4 x 4 shared reads per k-step."""
  wl, s = tensorized_matmul("m16n8k16_f16", M=128, N=128, K=32, mi=2, ni=4)
  k = mc.build(s, target="sm_80")
  a, b = wl.random_inputs()
  a32, b32 = a.astype(np.float32), b.astype(np.float32)
  ref = a32.astype(np.float64) @ b32.astype(np.float64)
  out = k(a, b, device="cpu").astype(np.float64)
  assert (np.abs(out - ref) <= _matmul_tolerance("m16n8k16_f16", a32, b32, ref)).all()
  from minicomp.search.static.ptx import analyze_ptx, ir_loop_extents
  prof = analyze_ptx(k.binary.ptx, k.plan.launches[0].kernel, hints=ir_loop_extents(k.program.kernels[0].body))
  per_step = prof.counts["ld_shared"] / (prof.counts["tensor_k16"] / 8)
  assert prof.counts["tensor_k16"] == 2 * 8 and per_step == 2 + 4 * 4      # (an ldmatrix is a shared load)
  assert k.binary.ptx.count("ldmatrix.sync.aligned.m8n8.x4.shared.b16") == 2 and "unsigned mc_frag_B_shared" in k.source


def int8_matmul(intr: str, a_type="int8", b_type="int8", M=64, N=64, K=64, operand=None, quad=False, k_step=None):
  """C (int32) = A @ B of 8-bit integers, tensorized as :func:`tensorized_matmul` does (k-steps of 32);
  ``operand(a_value)`` replaces A's widened value in the product. ``quad``: B given as N x K and the sum written in
  dot4 terms of four steps of k (graph/ops/qlinear.py's form), whose reduction loop is then K / 4 long (``k_step``:
  the loop tensorized, default the intrinsic's k in that loop's steps)."""
  from minicomp.ir.expr import dot4
  A = mc.placeholder((M, K), a_type, name="A")
  B = mc.placeholder((N, K) if quad else (K, N), b_type, name="BT" if quad else "B")
  k = mc.reduce_axis(K // 4 if quad else K, name="k")
  widen = operand or (lambda x: x)
  if quad:
    C = mc.compute((M, N), lambda i, j: mc.sum(dot4([A[i, 4 * k + q] for q in range(4)],
                                                    [B[j, 4 * k + q] for q in range(4)]), axis=k), name="C")
  else:
    C = mc.compute((M, N), lambda i, j: mc.sum(widen(mc.cast(A[i, k], "int32")) * mc.cast(B[k, j], "int32"), axis=k),
                   name="C")
  s = mc.Schedule([C])
  CL = s.cache_write(C, "local")
  io, wm, g, r = s.split(C, s.axis(C)[0], [2, 8, 2])
  jo, wn, t, c = s.split(C, s.axis(C)[-1], [2, 4, 2])
  s.reorder(C, io, jo, wm, wn, g, t, r, c)
  s.bind(C, s.fuse(C, io, jo), "blockIdx.x")
  tx = s.fuse(C, wm, wn, g, t)
  s.bind(C, tx, "threadIdx.x")
  s.compute_at(CL, C, tx)
  ci, cj, ck = s.loops(CL)
  k0, k1 = s.split(CL, ck, k_step or (8 if quad else 32))
  s.reorder(CL, k0, ci, cj, k1)
  for X in (A, B):
    XS = s.cache_read(X, "shared", [CL])
    s.compute_at(XS, CL, k0)
    s.bind(XS, s.split(XS, s.fuse(XS, *s.loops(XS)), 128)[1], "threadIdx.x")
  s.tensorize(CL, ci, intr)
  return (A, B), s


@pytest.mark.parametrize("intr, a_type, b_type", [
  ("m16n8k32_s8s8", "int8", "int8"), ("m16n8k32_u8s8", "uint8", "int8"), ("m16n8k32_s8u8", "int8", "uint8"),
  ("m16n8k32_u8u8", "uint8", "uint8")])
def test_int8_tensorized_matmul_is_exact_in_the_simulator(intr, a_type, b_type):
  """8-bit integer operands, int32 sums (mma.sync m16n8k32, sm_80+): numpy's integer product exactly, over the whole
  range of each type; A's fragment read with one ldmatrix (a row's 16 bytes are four dot4 terms, as m16n8k32 lays
  them out), B's registers (four rows of a k x n tile) packed; the same statement in the loop-IR interpreter; built
  for sm_80, sm_86 and sm_90, refused on sm_75."""
  _, s = int8_matmul(intr, a_type, b_type)
  for arch in ("sm_80", "sm_86", "sm_90"):
    k = mc.build(s, target=arch)
    sig = {"int8": "s8", "uint8": "u8"}
    assert f"mma.sync.aligned.m16n8k32.row.col.s32.{sig[a_type]}.{sig[b_type]}.s32" in k.binary.ptx
    assert k.binary.resources[k.plan.launches[0].kernel].spill_stores == 0
  assert "mc_ldmatrix_x4(mma_a, A_shared + " in k.source and "mc_pack4(" in k.source
  rng = np.random.default_rng(3)
  a = rng.integers(np.iinfo(a_type).min, np.iinfo(a_type).max + 1, (64, 64)).astype(a_type)
  b = rng.integers(np.iinfo(b_type).min, np.iinfo(b_type).max + 1, (64, 64)).astype(b_type)
  out = k(a, b, device="cpu")
  assert out.dtype == np.int32 and np.array_equal(out, a.astype(np.int64) @ b.astype(np.int64))
  from minicomp.ir.interp import run_program
  _, small = int8_matmul(intr, a_type, b_type, M=32, N=16, K=64)
  np.testing.assert_array_equal(run_program(small.lower(), a[:32], b[:, :16]), a[:32].astype(np.int64) @ b[:, :16])
  from minicomp.errors import ScheduleError
  with pytest.raises(ScheduleError, match=f"tensorize.*mma.sync {intr} needs sm_80 or newer; sm_75 does not have it"):
    mc.build(s, target="sm_75")


def test_a_dot4_reduction_tensorizes_as_int8_mma(monkeypatch):
  """The sum of dot4 terms minicomp's integer matmuls and convolutions are written in (graph/ops/qlinear.py: four
  steps of k a term, B transposed) tensorizes with a reduction loop of 8 (k = 32): a register's four bytes are one
  term's, so with B as N x K both fragments are ldmatrix reads (A x4, B x2), or with MINICOMP_LDMATRIX=0 32-bit
  reads; both exact against numpy; a loop of 16 is refused."""
  from minicomp.errors import ScheduleError
  schedule = lambda k_step: int8_matmul("m16n8k32_s8u8", "int8", "uint8", quad=True, k_step=k_step)[1]  # noqa: E731
  k = mc.build(schedule(8), target="sm_86")
  assert "mma.sync.aligned.m16n8k32.row.col.s32.s8.u8.s32" in k.binary.ptx and "mc_pack4" not in k.source
  assert "mc_ldmatrix_x4(mma_a, A_shared + " in k.source and "mc_ldmatrix_x2(mma_b, BT_shared + " in k.source
  assert k.binary.ptx.count("ldmatrix.sync.aligned.m8n8") == 4 and "ld.shared" not in k.binary.ptx
  monkeypatch.setenv("MINICOMP_LDMATRIX", "0")
  words = mc.build(schedule(8), target="sm_86")
  monkeypatch.delenv("MINICOMP_LDMATRIX")
  assert "ldmatrix" not in words.source and "mc_word(&BT_shared[" in words.source
  rng = np.random.default_rng(5)
  a, bt = rng.integers(-128, 128, (64, 64)).astype(np.int8), rng.integers(0, 256, (64, 64)).astype(np.uint8)
  for kern in (k, words):
    np.testing.assert_array_equal(kern(a, bt, device="cpu"), a.astype(np.int64) @ bt.astype(np.int64).T)
  with pytest.raises(ScheduleError, match="loop k_1 has extent 16; m16n8k32_s8u8 needs 8 .k = 32, four steps a dot4"):
    mc.build(schedule(16), target="sm_86")


def test_int8_tensorize_refuses_operands_outside_the_type():
  """An operand that is not a plain 8-bit value (computed from one: lowering does not prove its range, and a value
  past it would lose its high bits in a fragment byte) is refused naming the step; so is an intrinsic whose
  signedness is not the tensor's."""
  from minicomp.errors import ScheduleError
  with pytest.raises(ScheduleError, match="tensorize.*C.local.*operand x .* is not a int8 value"):
    mc.build(int8_matmul("m16n8k32_s8s8", operand=lambda x: x // 2)[1], target="sm_80")
  with pytest.raises(ScheduleError, match="operand x .* is not a uint8 value"):
    mc.build(int8_matmul("m16n8k32_u8s8")[1], target="sm_80")


def test_tensorize_replays_from_json_and_prints():
  wl, s = tensorized_matmul("m16n8k16_f16")
  again = mc.Schedule.from_json(wl.outputs, s.to_json())
  assert mc.build(again, target="sm_86").source == mc.build(s, target="sm_86").source
  assert "@mma.sync m16n8k16_f16" in str(s)
  from minicomp.ir.loop_text import program_text
  assert "mma_sync_m16n8k16_f16(C_local[" in program_text(s.lower())


@pytest.mark.parametrize("case, message", [
  ("lanes", "operand A .* changes with the lane's column"),
  ("k_extent", "loop k_1 has extent 8; m16n8k16_f16 needs 16"),
  ("guard", "no guard"),
  ("arch", "mma.sync m16n8k16_f16 needs sm_80 or newer; sm_75 does not have it"),
])
def test_tensorize_refuses_what_mma_cannot_compute(case, message):
  """Lanes in the wrong order (t outside g), a reduction loop of the wrong extent, k-steps that do not divide the
  reduction with operands read from global memory (a guard inside the tensorized loops: staged in shared tiles, k
  is padded instead, below), an arch without the instruction: ScheduleError naming the step."""
  from minicomp.errors import ScheduleError
  with pytest.raises(ScheduleError, match=message):
    if case == "lanes": mc.build(tensorized_matmul("m16n8k16_f16", lanes=("t", "g"))[1], target="sm_86")
    elif case == "k_extent": mc.build(tensorized_matmul("m16n8k16_f16", k_split=8)[1], target="sm_86")
    elif case == "guard": mc.build(tensorized_matmul("m16n8k16_f16", K=56, staged=False)[1], target="sm_86")
    else: mc.build(tensorized_matmul("m16n8k16_f16")[1], target="sm_75")


def test_a_reduction_no_k_step_divides_runs_padded_on_zero_filled_tiles():
  """K = 56 in k-steps of 16: the last step runs whole on tiles holding zeros past k = 56 (lower.py
  ``_computes_padding``), in the simulator and in the loop-IR interpreter (which raises on reading what nothing
  wrote), against numpy."""
  from minicomp.ir.interp import run_program
  wl, s = tensorized_matmul("m16n8k16_f16", M=32, N=16, K=56)
  a, b = wl.random_inputs(seed=2)
  a32, b32 = a.astype(np.float32), b.astype(np.float32)
  ref = a32.astype(np.float64) @ b32.astype(np.float64)
  tol = _matmul_tolerance("m16n8k16_f16", a32, b32, ref)
  assert (np.abs(mc.build(s, target="sm_86")(a, b, device="cpu").astype(np.float64) - ref) <= tol).all()
  assert (np.abs(run_program(s.lower(), a, b).astype(np.float64) - ref) <= tol).all()


def test_tensorize_step_checks():
  from minicomp.errors import ScheduleError
  from minicomp import workloads as W
  wl = W.matmul(32, 32, 32, dtype="float16")
  C = wl.stages["C"]
  s = mc.Schedule([C])
  with pytest.raises(ScheduleError, match="no tensor-core intrinsic 'm16n16k16'"):
    s.tensorize(C, "i", "m16n16k16")
  with pytest.raises(ScheduleError, match="must be two spatial loops of extent 2 .* they are \\['j', 'k'\\]"):
    s.tensorize(C, "j", "m16n8k16_f16")
  wl = W.softmax(4, 16)
  with pytest.raises(ScheduleError, match="is not a sum reduction"):
    t = next(x for x in wl.stages.values() if x.reduce is not None and x.reduce.combiner == "max")
    mc.Schedule(wl.outputs).tensorize(t, mc.Schedule(wl.outputs).loops(t)[0], "m16n8k16_f16")


@pytest.mark.gpu
@pytest.mark.parametrize("intr", sorted(TYPES))
def test_tensorized_matmul_on_the_gpu(intr):
  drv, arch = _gpu()
  try:
    tc.check_arch(tc.INTRINSICS[intr], arch)
  except TargetError as e:
    pytest.skip(str(e))
  wl, s = tensorized_matmul(intr, M=128, N=128, K=256)
  k = mc.build(s, target=arch)
  a, b = wl.random_inputs()
  a32, b32 = a.astype(np.float32), b.astype(np.float32)
  ref = a32.astype(np.float64) @ b32.astype(np.float64)
  out = k(a, b, device="gpu").astype(np.float64)
  assert (np.abs(out - ref) <= _matmul_tolerance(intr, a32, b32, ref)).all(), np.abs(out - ref).max()


@pytest.mark.gpu
@pytest.mark.parametrize("intr, a_type, b_type", [("m16n8k32_s8s8", "int8", "int8"), ("m16n8k32_u8s8", "uint8", "int8")])
def test_int8_tensorized_matmul_on_the_gpu(intr, a_type, b_type):
  drv, arch = _gpu()
  try:
    tc.check_arch(tc.INTRINSICS[intr], arch)
  except TargetError as e:
    pytest.skip(str(e))
  _, s = int8_matmul(intr, a_type, b_type, M=128, N=128, K=256)
  k = mc.build(s, target=arch)
  rng = np.random.default_rng(7)
  a = rng.integers(np.iinfo(a_type).min, np.iinfo(a_type).max + 1, (128, 256)).astype(a_type)
  b = rng.integers(np.iinfo(b_type).min, np.iinfo(b_type).max + 1, (256, 128)).astype(b_type)
  np.testing.assert_array_equal(k(a, b, device="gpu"), a.astype(np.int64) @ b.astype(np.int64))


def test_the_docs_matmul_example_builds_on_mma():
  from pathlib import Path
  text = (Path(__file__).resolve().parents[1] / "docs" / "tensor_cores.md").read_text()
  start = text.index("```python\n") + len("```python\n")
  scope: dict = {}
  exec(compile(text[start:text.index("```", start)], "docs/tensor_cores.md", "exec"), scope)
  assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in scope["kern"].binary.ptx


def test_the_static_model_counts_mma_on_the_tensor_pipe():
  """Each mma.sync of the PTX is m n k FMAs at the device's dense tensor rate: the 64^3 matmul's 8 blocks of 4
  warps, 4 k-steps each, put 4 x 4 m16n8k16 on the busiest SM (one block per SM)."""
  from minicomp.search.static.estimate import estimate
  wl, s = tensorized_matmul("m16n8k16_f16")
  k = mc.build(s, target="sm_80")
  for name in ("a100", "rtx3090", "h100"):
    dev = mc.Target(name).device
    parts = estimate(k, mc.Target(name)).launches[0].parts
    assert parts["tensor_s"] == pytest.approx(4 * 4 * 2048 / dev.tensor_fma_per_clock_per_sm("fp16") / dev.clock_hz)
  # a kernel without mma.sync has no tensor term
  from minicomp import workloads as W
  from minicomp.graph.schedules import default_schedule
  plain = mc.build(default_schedule(W.matmul(64, 64, 64).outputs), target="sm_80")
  assert "tensor_s" not in estimate(plain, mc.Target("a100")).launches[0].parts
  # the int8 matmul's 8 blocks of 4 warps, 2 k-steps of m16n8k32 each: 4 x 2 instructions of 4096 FMAs at the INT8 rate
  k8 = mc.build(int8_matmul("m16n8k32_s8s8")[1], target="sm_80")
  for name in ("a100", "rtx3090", "h100"):
    dev = mc.Target(name).device
    parts = estimate(k8, mc.Target(name)).launches[0].parts
    assert parts["tensor_s"] == pytest.approx(4 * 2 * 4096 / dev.tensor_fma_per_clock_per_sm("int8") / dev.clock_hz)


def test_tensor_rates_from_the_datasheets():
  """The datasheets' rates, but sm_90's: mma.sync's measured ceiling (636 TFLOP/s on an H200, research/mma_peak.py),
  the datasheet's 989 being wgmma's."""
  from minicomp.target import DEVICES
  rate = lambda n, kind: DEVICES[n].tensor_fma_per_clock_per_sm(kind)   # noqa: E731
  assert rate("a100", "fp16") == pytest.approx(1024, rel=0.01) and rate("a100", "tf32") == pytest.approx(512, rel=0.01)
  for n in ("h100", "h200"):
    assert 2 * rate(n, "fp16") * DEVICES[n].sm_count * DEVICES[n].clock_hz == pytest.approx(636e12, rel=0.001)
  # GeForce GA102 / AD102 accumulate in FP32 at half the rate of the professional parts on the same chip
  assert rate("rtx3090", "fp16") == pytest.approx(rate("a6000", "fp16") / 2, rel=0.01)
  assert rate("rtx4090", "fp16") == pytest.approx(rate("l4", "fp16") / 2, rel=0.01)
  assert rate("t4", "tf32") == 0 and rate("v100", "tf32") == 0
  # INT8: twice the FP16 rate of the professional parts, four times the GeForce FP32-accumulate one
  assert rate("a100", "int8") == pytest.approx(2048, rel=0.01)
  assert rate("h100", "int8") == pytest.approx(2 * rate("h100", "fp16"), rel=0.01)
  assert rate("rtx3090", "int8") == pytest.approx(4 * rate("rtx3090", "fp16"), rel=0.01) and rate("v100", "int8") == 0
