"""Hand-written schedules for the standard workloads: each compiles with NVRTC for sm_80 and
sm_86 and matches numpy on the CPU simulator (non-divisible shapes throughout)."""
import numpy as np
import pytest

import minicomp as mc
from minicomp import workloads as W


def run_and_check(wl, s, archs=("sm_80", "sm_86"), rtol=1e-4, atol=1e-4):
  kern = None
  for arch in archs:
    kern = mc.build(s, target=arch)
    assert kern.binary.cubin and kern.binary.ptx
  ins = wl.random_inputs(1)
  out = kern(*ins, device="cpu")
  np.testing.assert_allclose(out, wl.reference(*ins), rtol=rtol, atol=atol)
  return kern


# ---------------------------------------------------------------------------------------------
# matmul (+ bias + relu)

def mm_default(wl):
  return mc.Schedule(wl.outputs)


def mm_inline_simple(wl):
  s = mc.Schedule(wl.outputs)
  s.compute_inline("C") if "D" in wl.stages and False else None
  C = wl.stages["C"]
  i, j = s.axis(C)
  io, ii = s.split(C, i, 16)
  jo, ji = s.split(C, j, 16)
  s.reorder(C, io, jo, ii, ji)
  s.bind(C, io, "blockIdx.y"); s.bind(C, jo, "blockIdx.x")
  s.bind(C, ii, "threadIdx.y"); s.bind(C, ji, "threadIdx.x")
  if "D" in wl.stages:
    D = wl.stages["D"]
    f = s.fuse(D, *s.axis(D))
    fo, fi = s.split(D, f, 128)
    s.bind(D, fo, "blockIdx.x"); s.bind(D, fi, "threadIdx.x")
  return s


def mm_tiled_shared(wl, tile=64, thread=4, kt=8, vthread=False, align=False):
  s = mc.Schedule(wl.outputs)
  out = wl.outputs[0]
  C = wl.stages["C"]
  CL = s.cache_write(C, "local")
  if out is not C: s.compute_inline(C)
  i, j = s.axis(out)
  io, ii = s.split(out, i, tile)
  jo, ji = s.split(out, j, tile)
  if vthread:
    vy, ii = s.split(out, ii, tile // 2)
    vx, ji = s.split(out, ji, tile // 2)
  ty, ii = s.split(out, ii, thread)
  tx, ji = s.split(out, ji, thread)
  order = [io, jo] + ([vy, vx] if vthread else []) + [ty, tx, ii, ji]
  s.reorder(out, *order)
  s.bind(out, io, "blockIdx.y"); s.bind(out, jo, "blockIdx.x")
  if vthread: s.bind(out, vy, "vthread"); s.bind(out, vx, "vthread")
  s.bind(out, ty, "threadIdx.y"); s.bind(out, tx, "threadIdx.x")
  s.compute_at(CL, out, tx)
  ci, cj, ck = s.loops(CL)
  ko, ki = s.split(CL, ck, kt)
  s.reorder(CL, ko, ki, ci, cj)
  s.pragma(CL, ko, "auto_unroll_max_step", 64)
  nthreads = (tile // (2 if vthread else 1) // thread)
  for X in wl.inputs[:2]:
    XS = s.cache_read(X, "shared", [CL])
    s.compute_at(XS, CL, ko)
    if align: s.storage_align(XS, 0, 32, 1)
    f = s.fuse(XS, *s.loops(XS))
    _, t = s.split(XS, f, nthreads * nthreads)
    y, x = s.split(XS, t, nthreads)
    s.bind(XS, y, "threadIdx.y"); s.bind(XS, x, "threadIdx.x")
  return s


def mm_local_cache_read(wl):
  """A.shared -> A.shared.local register tiles (two-level caching)."""
  s = mm_tiled_shared(wl, tile=32, thread=2, kt=4)
  CL = "C.local"
  ko, ki = s.loops(CL)[:2]
  AL = s.cache_read("A.shared", "local", [CL])
  s.compute_at(AL, CL, ki)
  return s


MM_SCHEDULES = [mm_default, mm_inline_simple, mm_tiled_shared,
                lambda wl: mm_tiled_shared(wl, tile=32, thread=2, kt=16),
                lambda wl: mm_tiled_shared(wl, vthread=True),
                lambda wl: mm_tiled_shared(wl, align=True),
                mm_local_cache_read]


@pytest.mark.parametrize("sched", range(len(MM_SCHEDULES)))
@pytest.mark.parametrize("bias_relu", [False, True])
def test_matmul(sched, bias_relu):
  M, N, K = (300, 200, 129) if sched else (37, 29, 19)
  wl = W.matmul(M, N, K, bias_relu)
  run_and_check(wl, MM_SCHEDULES[sched](wl))


def test_batch_matmul():
  wl = W.batch_matmul(3, 45, 70, 33)
  s = mc.Schedule(wl.outputs)
  C = wl.stages["C"]
  CL = s.cache_write(C, "local")
  b, i, j = s.axis(C)
  io, ii = s.split(C, i, 16); jo, ji = s.split(C, j, 32)
  ty, ii = s.split(C, ii, 2); tx, ji = s.split(C, ji, 2)
  s.reorder(C, b, io, jo, ty, tx, ii, ji)
  s.bind(C, b, "blockIdx.z"); s.bind(C, io, "blockIdx.y"); s.bind(C, jo, "blockIdx.x")
  s.bind(C, ty, "threadIdx.y"); s.bind(C, tx, "threadIdx.x")
  s.compute_at(CL, C, tx)
  *_, ck = s.loops(CL)
  ko, ki = s.split(CL, ck, 8)
  s.reorder(CL, ko, *[l for l in s.loops(CL) if l not in (ko,)])
  BS = s.cache_read(wl.inputs[1], "shared", [CL])
  s.compute_at(BS, CL, ko)
  f = s.fuse(BS, *s.loops(BS))
  _, t = s.split(BS, f, 128)
  s.bind(BS, t, "threadIdx.x")
  k = run_and_check(wl, s)
  assert k.launches[0][1] == (3, 3, 3)


# ---------------------------------------------------------------------------------------------
# convolutions

def conv_schedule(wl, cache_input=True):
  s = mc.Schedule(wl.outputs)
  s.compute_inline("pad")
  Y = wl.outputs[0]
  CL = s.cache_write(Y, "local")
  n, f, y, x = s.axis(Y)
  fo, fi = s.split(Y, f, 4)
  yx = s.fuse(Y, y, x)
  yxo, yxi = s.split(Y, yx, 32)
  s.reorder(Y, n, fo, yxo, fi, yxi)
  nfo = s.fuse(Y, n, fo)
  s.bind(Y, nfo, "blockIdx.y"); s.bind(Y, yxo, "blockIdx.x"); s.bind(Y, yxi, "threadIdx.x")
  s.compute_at(CL, Y, yxi)
  reds = s.reduce_axis(CL)
  rco, rci = s.split(CL, reds[0], 2)
  s.reorder(CL, rco, rci, *[l for l in s.loops(CL) if l not in (rco, rci)])
  if cache_input:
    for src in ("pad", wl.inputs[1].name):
      XS = s.cache_read(src, "shared", [CL])
      s.compute_at(XS, CL, rco)
      fz = s.fuse(XS, *s.loops(XS))
      _, t = s.split(XS, fz, 32)
      s.bind(XS, t, "threadIdx.x")
  return s


@pytest.mark.parametrize("cfg", [
  dict(N=1, C=3, H=13, W=11, F=6, KH=3, stride=1, pad=1, dil=1),
  dict(N=2, C=5, H=17, W=15, F=7, KH=3, stride=2, pad=2, dil=1),
  dict(N=1, C=4, H=14, W=14, F=5, KH=3, stride=1, pad=2, dil=2),
  dict(N=1, C=6, H=9, W=9, F=4, KH=1, stride=1, pad=0, dil=1),
])
@pytest.mark.parametrize("cache_input", [False, True])
def test_conv2d(cfg, cache_input):
  wl = W.conv2d(**cfg)
  run_and_check(wl, conv_schedule(wl, cache_input))


@pytest.mark.parametrize("cfg", [dict(N=1, C=7, H=15, W=13, KH=3, stride=1, pad=1),
                                 dict(N=2, C=5, H=16, W=16, KH=5, stride=2, pad=2)])
def test_depthwise_conv2d(cfg):
  wl = W.depthwise_conv2d(**cfg)
  s = mc.Schedule(wl.outputs)
  s.compute_inline("pad")
  Y = wl.outputs[0]
  n, c, y, x = s.axis(Y)
  ry, rx = s.reduce_axis(Y)
  nc = s.fuse(Y, n, c)
  yo, yi = s.split(Y, y, 4)
  xo, xi = s.split(Y, x, 8)
  s.reorder(Y, nc, yo, xo, yi, xi, ry, rx)
  s.bind(Y, nc, "blockIdx.y")
  b = s.fuse(Y, yo, xo)
  s.bind(Y, b, "blockIdx.x")
  s.bind(Y, yi, "threadIdx.y"); s.bind(Y, xi, "threadIdx.x")
  s.unroll(Y, rx)
  run_and_check(wl, s)


# ---------------------------------------------------------------------------------------------
# reductions and normalisations

@pytest.mark.parametrize("method,threads", [("shuffle", 128), ("shuffle", 64), ("tree", 100), ("tree", 32)])
def test_row_sum_cross_thread(method, threads):
  wl = W.row_sum(7, 1000)
  s = mc.Schedule(wl.outputs)
  R = wl.outputs[0]
  (i,) = s.axis(R)
  (k,) = s.reduce_axis(R)
  ko, ki = s.split(R, k, threads)
  s.bind(R, i, "blockIdx.x")
  s.cross_thread_reduce(R, ki, method)
  k_ = run_and_check(wl, s, atol=1e-3)
  assert k_.launches[0][2] == (threads, 1, 1)
  assert ("__shfl_down_sync" in k_.source) == (method == "shuffle" and threads % 32 == 0)


def test_row_sum_serial_and_2d_threads():
  wl = W.row_sum(70, 33)
  s = mc.Schedule(wl.outputs)
  R = wl.outputs[0]
  (i,) = s.axis(R)
  io, ii = s.split(R, i, 8)
  s.bind(R, io, "blockIdx.x"); s.bind(R, ii, "threadIdx.y")
  (k,) = s.reduce_axis(R)
  ko, ki = s.split(R, k, 32)
  s.cross_thread_reduce(R, ki, "shuffle")
  run_and_check(wl, s, atol=1e-4)


def _row_schedule(s, wl, reductions, out, threads, method):
  i, j = s.axis(out)
  jo, ji = s.split(out, j, threads)
  s.reorder(out, i, jo, ji)
  s.bind(out, i, "blockIdx.x"); s.bind(out, ji, "threadIdx.x")
  for r in reductions:
    s.compute_at(r, out, i)
    (k,) = s.reduce_axis(r)
    ko, ki = s.split(r, k, threads)
    s.cross_thread_reduce(r, ki, method)


@pytest.mark.parametrize("method,threads", [("shuffle", 64), ("tree", 48)])
def test_softmax(method, threads):
  wl = W.softmax(9, 250)
  s = mc.Schedule(wl.outputs)
  _row_schedule(s, wl, ["rowmax", "expsum"], wl.outputs[0], threads, method)
  k = run_and_check(wl, s, atol=1e-6)
  assert len(k.launches) == 1


def test_softmax_unscheduled_three_kernels():
  wl = W.softmax(5, 33)
  k = run_and_check(wl, mc.Schedule(wl.outputs), atol=1e-6)
  assert len(k.launches) == 3


@pytest.mark.parametrize("method", ["shuffle", "tree"])
def test_layernorm(method):
  wl = W.layernorm(6, 300)
  s = mc.Schedule(wl.outputs)
  _row_schedule(s, wl, ["mean", "var"], wl.outputs[0], 128, method)
  run_and_check(wl, s, atol=1e-4)


# ---------------------------------------------------------------------------------------------
# elementwise

@pytest.mark.parametrize("threads", [64, 256, 100])
def test_broadcast_chain(threads):
  wl = W.broadcast_chain(3, 17, 29)
  s = mc.Schedule(wl.outputs)
  for n in ("mul", "add", "relu"): s.compute_inline(n)
  Z = wl.outputs[0]
  f = s.fuse(Z, *s.axis(Z))
  fo, fi = s.split(Z, f, threads)
  s.bind(Z, fo, "blockIdx.x"); s.bind(Z, fi, "threadIdx.x")
  run_and_check(wl, s)


def test_broadcast_chain_partially_inlined():
  wl = W.broadcast_chain(2, 5, 7)
  s = mc.Schedule(wl.outputs)
  s.compute_inline("mul")
  Z = wl.outputs[0]
  a, b, c = s.axis(Z)
  s.bind(Z, a, "blockIdx.x"); s.bind(Z, b, "threadIdx.y"); s.bind(Z, c, "threadIdx.x")
  s.compute_at("relu", Z, a)   # relu tile in shared memory for the block, add stays a global temp
  k = run_and_check(wl, s)
  assert len(k.launches) == 2


# ---------------------------------------------------------------------------------------------
# vectorization: float4 / float2 when the access is contiguous and provably aligned

@pytest.mark.parametrize("width", [2, 4, 8])
def test_vectorize_elementwise(width):
  """float2 / float4 loads and stores; 8 floats as two float4 of each (PTX v4 accesses, no scalar ones)."""
  wl = W.broadcast_chain(4, 16, 32)
  s = mc.Schedule(wl.outputs)
  for n in ("mul", "add", "relu"): s.compute_inline(n)
  Z = wl.outputs[0]
  f = s.fuse(Z, *s.axis(Z))
  fo, fv = s.split(Z, f, width)
  fo, t = s.split(Z, fo, 64)
  s.bind(Z, fo, "blockIdx.x"); s.bind(Z, t, "threadIdx.x"); s.vectorize(Z, fv)
  k = run_and_check(wl, s)
  assert f"reinterpret_cast<float{min(width, 4)}*>(out + " in k.source
  if width == 8:
    assert "vectorized (2 x float4)" in k.source and "st.global.v4.f32" in k.binary.ptx
    assert "st.global.f32" not in k.binary.ptx


def test_vectorize_falls_back_when_unaligned_or_guarded():
  wl = W.broadcast_chain(3, 5, 7)      # 105 elements: the split by 4 needs a guard
  s = mc.Schedule(wl.outputs)
  for n in ("mul", "add", "relu"): s.compute_inline(n)
  Z = wl.outputs[0]
  f = s.fuse(Z, *s.axis(Z))
  fo, fv = s.split(Z, f, 4)
  s.bind(Z, fo, "threadIdx.x"); s.vectorize(Z, fv)
  k = run_and_check(wl, s)
  assert "float4" not in k.source and "// vectorize" in k.source


@pytest.mark.parametrize("K,vectorized", [(128, True), (129, False)])
def test_vectorized_cooperative_fetch(K, vectorized):
  wl = W.matmul(64, 64, K)
  s = mc.Schedule(wl.outputs)
  C = wl.outputs[0]
  i, j = s.axis(C)
  io, ii = s.split(C, i, 32); jo, ji = s.split(C, j, 32)
  s.reorder(C, io, jo, ii, ji)
  s.bind(C, io, "blockIdx.y"); s.bind(C, jo, "blockIdx.x"); s.bind(C, ii, "threadIdx.y"); s.bind(C, ji, "threadIdx.x")
  (k,) = s.reduce_axis(C)
  ko, ki = s.split(C, k, 16)
  s.reorder(C, io, jo, ii, ji, ko, ki)
  AS = s.cache_read("A", "shared", [C])
  s.compute_at(AS, C, ko)
  f = s.fuse(AS, *s.loops(AS))       # 32 x 16 tile
  fo, fv = s.split(AS, f, 4)
  fo, tx = s.split(AS, fo, 32)
  s.bind(AS, tx, "threadIdx.x"); s.vectorize(AS, fv)
  k_ = run_and_check(wl, s)
  assert ("reinterpret_cast<const float4*>(A + " in k_.source) == vectorized


# ---------------------------------------------------------------------------------------------
# rfactor: reductions with little spatial parallelism

@pytest.mark.parametrize("inner", [True, False])
def test_rfactor_two_kernels(inner):
  wl = W.row_sum(3, 5000)
  s = mc.Schedule(wl.outputs)
  R = wl.outputs[0]
  (k,) = s.reduce_axis(R)
  ko, ki = s.split(R, k, 64)
  RF = s.rfactor(R, ki if inner else ko)
  assert RF == "rowsum.rf"
  rf_axis, i = s.axis(RF)[:2]
  s.bind(RF, rf_axis, "threadIdx.x" if inner else "blockIdx.x")
  s.bind(RF, i, "blockIdx.y" if inner else "threadIdx.x")
  (r,) = s.reduce_axis(R)
  s.bind(R, "i", "threadIdx.x")
  k_ = run_and_check(wl, s, atol=1e-3)
  assert len(k_.launches) == 2


def test_rfactor_of_a_half_sum_keeps_float_partials():
  """A float16 matmul's sum split in chunks: the partials are float32, as the sum accumulates (rounding each to
  half would add an error per chunk), and the product matches numpy's to half an ulp of the largest output."""
  wl = W.matmul(8, 16, 4096, dtype="float16")
  s = mc.Schedule(wl.outputs)
  C = wl.outputs[0]
  ko, _ = s.split(C, s.reduce_axis(C)[0], 256)
  rf = s.rfactor(C, ko)
  assert s.state.stage(rf).tensor.dtype == "float32"
  part, i, j = s.axis(rf)
  s.bind(rf, part, "blockIdx.x"); s.bind(rf, s.fuse(rf, i, j), "threadIdx.x")
  s.bind(C, s.fuse(C, *s.axis(C)), "threadIdx.x")
  k = mc.build(s, "sm_86")
  assert len(k.launches) == 2 and "float* __restrict__ C_rf" in k.source
  a, b = (x.astype(np.float16) for x in wl.random_inputs())
  ref = a.astype(np.float64) @ b.astype(np.float64)
  assert np.abs(k(a, b, device="cpu").astype(np.float64) - ref).max() <= 2.0 ** -11 * np.abs(ref).max()


@pytest.mark.parametrize("method", ["shuffle", "tree"])
def test_rfactor_cross_thread(method):
  wl = W.row_sum(5, 3000)
  s = mc.Schedule(wl.outputs)
  R = wl.outputs[0]
  (k,) = s.reduce_axis(R)
  ko, ki = s.split(R, k, 128)
  RF = s.rfactor(R, ki)
  (i,) = s.axis(R)
  (r,) = s.reduce_axis(R)
  s.bind(R, i, "blockIdx.x")
  s.cross_thread_reduce(R, r, method)
  s.compute_at(RF, R, r)
  k_ = run_and_check(wl, s, atol=1e-3)
  assert len(k_.launches) == 1 and k_.launches[0][2] == (128, 1, 1)


def test_rfactor_errors():
  wl = W.row_sum(5, 300)
  s = mc.Schedule(wl.outputs)
  with pytest.raises(mc.ScheduleError, match="exactly one two-way split"):
    s.rfactor(wl.outputs[0], "k")
  with pytest.raises(mc.ScheduleError, match="not a reduction loop"):
    s.rfactor(wl.outputs[0], "i")


def test_vthread_injection_shares_tiles():
  """Virtual threads: one shared tile and one register slice per vthread, not a tile per vthread."""
  wl = W.matmul(300, 200, 129, True)
  k = run_and_check(wl, mm_tiled_shared(wl, vthread=True), archs=("sm_80",))
  assert "float C_local[64];" in k.source          # 2x2 vthreads x 4x4 per thread
  assert "float A_shared[512];" in k.source         # 64 rows x 8: every vthread's rows, loaded once
  body = k.source.split("// stage A.shared")[0]
  assert "// vthread" in body.split("for (int k_0")[0]   # the init runs per vthread, before the k loop
  assert body.split("for (int k_0")[1].count("// vthread") == 0   # ... but the shared loads are not per vthread
