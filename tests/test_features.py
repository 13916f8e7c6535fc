"""Ansor per-store features: hand-computed values on a tiny kernel, structure, and the Felix property:
the Exprs extracted from a symbolic program, evaluated at an assignment, equal exactly the features of
the concrete program lowered with that assignment."""
import numpy as np
import pytest
from test_workloads import mm_default, mm_tiled_shared

import minicomp as mc
from minicomp import workloads as W
from minicomp.ir.loop import CrossThreadReduce, For, If, Seq, Store
from minicomp.search.features import (N_FEATURES, evaluate_features,
                                      extract_features, extract_program_exprs, feature_names)

NAMES = feature_names()
COL = {n: i for i, n in enumerate(NAMES)}


def slog(x): return np.float32(np.sign(x) * np.log2(abs(x) + 1))


def divisors(n): return [d for d in range(1, n + 1) if n % d == 0]


def n_stores(program) -> int:
  def go(s):
    if isinstance(s, For): return go(s.body)
    if isinstance(s, Seq): return sum(go(x) for x in s.stmts)
    if isinstance(s, If): return go(s.then)
    return int(isinstance(s, (Store, CrossThreadReduce)))
  return sum(go(k.body) for k in program.kernels)


def elementwise(n=1024, threads=64, vec=None):
  A = mc.placeholder((n,), "float32", name="A")
  B = mc.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
  s = mc.Schedule([B])
  (i,) = s.axis(B)
  if vec: i, v = s.split(B, i, vec)
  bo, t = s.split(B, i, threads)
  s.bind(B, bo, "blockIdx.x"); s.bind(B, t, "threadIdx.x")
  if vec: s.vectorize(B, v)
  return s


def test_names_and_length():
  assert len(NAMES) == N_FEATURES == 165 and len(set(NAMES)) == N_FEATURES
  assert NAMES[57] == "B0.acc_type.kRead" and NAMES[-2:] == ["auto_unroll_max_step", "tensor_mma"]


def test_elementwise_hand_computed():
  f = extract_features(elementwise().lower())
  assert f.shape == (1, N_FEATURES) and f.dtype == np.float32
  r = f[0]
  expect = {"float_mul": slog(1024), "float_addsub": slog(1024), "int_addsub": 0, "float_divmod": 0, "is_gpu": 1,
            "blockIdx_x_len": slog(16), "threadIdx_x_len": slog(64), "threadIdx_y_len": slog(1), "vthread_len": slog(1),
            "vec_num": 0, "vec_type.kPosNone": 1, "vec_type.kPosMixed": 0, "parallel_type.kPosNone": 1,
            "outer_prod": slog(1024), "num_loops": slog(2), "auto_unroll_max_step": 0,
            # B0 is the stored buffer B, B1 the read of A: 4 bytes each of 1024 elements, stride 1 along threadIdx.x,
            # lines = 1024 iterations * 4/64 of a line, unique lines = 4096 / 64, nothing reused
            "B0.acc_type.kWrite": 1, "B0.acc_type.kRead": 0, "B1.acc_type.kRead": 1,
            "B0.bytes": slog(4096), "B0.unique_bytes": slog(4096), "B0.lines": slog(64), "B0.unique_lines": slog(64),
            "B0.stride": slog(1), "B1.stride": slog(1), "B1.unique_bytes": slog(4096),
            "B0.reuse_type.kNoReuse": 1, "B0.reuse_ct": 0, "B0.bytes_d_reuse_ct": slog(4096 / 0.5),
            "B2.bytes": 0, "B2.acc_type.kRead": 0, "alloc_size": 0}
    # ops = 2 flops per element; bytes touched = 8 per element: log2(2*64)/log2(8*64) at the threadIdx.x level
  for name, v in expect.items(): assert r[COL[name]] == pytest.approx(v, rel=1e-6), name
  assert r[COL["arith_intensity_curve_9"]] == pytest.approx(np.log2(2 * 1024) / np.log2(8 * 1024), rel=1e-6)


def test_vectorize_features():
  r = extract_features(elementwise(vec=4).lower())[0]
  assert r[COL["vec_num"]] == slog(1) and r[COL["vec_len"]] == slog(4) and r[COL["vec_prod"]] == slog(4)
  assert r[COL["vec_type.kPosMixed"]] == 1 and r[COL["vec_type.kPosNone"]] == 0
  assert r[COL["B0.stride"]] == slog(1) and r[COL["num_loops"]] == slog(3)


@pytest.mark.parametrize("make", [lambda: mm_default(W.matmul(32, 24, 16)), lambda: mm_tiled_shared(W.matmul(64, 64, 32)),
                                  lambda: mm_tiled_shared(W.matmul(64, 64, 32, True), vthread=True),
                                  lambda: mc.Schedule(W.softmax(5, 33).outputs)])
def test_one_row_per_store(make):
  p = make().lower()
  f = extract_features(p)
  assert f.shape == (n_stores(p), N_FEATURES) and np.isfinite(f).all()


def test_tiled_matmul_differs_from_naive():
  wl = W.matmul(64, 64, 32)
  naive, tiled = extract_features(mm_default(wl).lower()), extract_features(mm_tiled_shared(wl).lower())
  assert naive.shape != tiled.shape or not np.array_equal(naive, tiled)
  # the tiled update reads shared memory with reuse; the naive one has no shared buffers at all
  assert tiled[:, COL["alloc_size"]].max() > 0 and naive[:, COL["alloc_size"]].max() == 0
  assert tiled[:, COL["auto_unroll_max_step"]].max() > 0   # the pragma unrolls the inner loops


# ---------------------------------------------------------------------------------------------
# symbolic == concrete

def sym_matmul():
  wl = W.matmul(64, 64, 32)
  s = mc.Schedule(wl.outputs)
  CL = s.cache_write("C", "local")
  i, j = s.axis("C")
  io, ii = s.split("C", i, mc.var("ti")); jo, ji = s.split("C", j, mc.var("tj"))
  ty, ii = s.split("C", ii, mc.var("ri")); tx, ji = s.split("C", ji, mc.var("rj"))
  s.reorder("C", io, jo, ty, tx, ii, ji)
  s.bind("C", io, "blockIdx.y"); s.bind("C", jo, "blockIdx.x"); s.bind("C", ty, "threadIdx.y"); s.bind("C", tx, "threadIdx.x")
  s.compute_at(CL, "C", tx)
  ci, cj, ck = s.loops(CL)
  ko, ki = s.split(CL, ck, mc.var("kt"))
  s.reorder(CL, ko, ki, ci, cj)
  for X, n in (("A", "nA"), ("B", "nB")):
    XS = s.cache_read(X, "shared", [CL])
    s.compute_at(XS, CL, ko)
    f = s.fuse(XS, *s.loops(XS))
    _, t = s.split(XS, f, mc.var(n))
    s.bind(XS, t, "threadIdx.x")

  def sample(rng):
    v = {"ti": int(rng.choice(divisors(64))), "tj": int(rng.choice(divisors(64))), "kt": int(rng.choice(divisors(32)))}
    v["ri"], v["rj"] = int(rng.choice(divisors(v["ti"]))), int(rng.choice(divisors(v["tj"])))
    v["nA"], v["nB"] = int(rng.choice(divisors(v["ti"] * v["kt"]))), int(rng.choice(divisors(v["tj"] * v["kt"])))
    return v
  return s, sample


def sym_conv2d():
  # a fused (y, x) split by a variable does not lower symbolically (LoweringError: tile extent not
  # boundable), so y and x are split separately here
  wl = W.conv2d(N=1, C=4, H=8, W=8, F=8, KH=3, stride=1, pad=1)
  s = mc.Schedule(wl.outputs)
  s.compute_inline("pad")
  Y = wl.outputs[0]
  CL = s.cache_write(Y, "local")
  n, f, y, x = s.axis(Y)
  fo, fi = s.split(Y, f, mc.var("ff")); yo, yi = s.split(Y, y, mc.var("fy")); xo, xi = s.split(Y, x, mc.var("fx"))
  s.reorder(Y, n, fo, yo, xo, fi, yi, xi)
  s.bind(Y, fo, "blockIdx.z"); s.bind(Y, yo, "blockIdx.y"); s.bind(Y, xo, "blockIdx.x")
  s.bind(Y, yi, "threadIdx.y"); s.bind(Y, xi, "threadIdx.x")
  s.compute_at(CL, Y, xi)
  rco, rci = s.split(CL, s.reduce_axis(CL)[0], mc.var("frc"))
  s.reorder(CL, rco, rci, *[lp for lp in s.loops(CL) if lp not in (rco, rci)])
  for src, nm in (("pad", "nX"), ("W", "nW")):
    XS = s.cache_read(src, "shared", [CL])
    s.compute_at(XS, CL, rco)
    _, t = s.split(XS, s.fuse(XS, *s.loops(XS)), mc.var(nm))
    s.bind(XS, t, "threadIdx.x")

  def sample(rng):
    v = {k: int(rng.choice(divisors(8))) for k in ("ff", "fy", "fx")}
    v["frc"] = int(rng.choice(divisors(4)))
    v["nX"] = int(rng.choice(divisors(v["frc"] * (v["fy"] + 2) * (v["fx"] + 2))))
    v["nW"] = int(rng.choice(divisors(v["frc"] * 9)))
    return v
  return s, sample


def sym_softmax(method):
  wl = W.softmax(8, 96)
  s = mc.Schedule(wl.outputs)
  out = wl.outputs[0]
  i, j = s.axis(out)
  _, ji = s.split(out, j, mc.var("t"))
  s.bind(out, i, "blockIdx.x"); s.bind(out, ji, "threadIdx.x")
  for r in ("rowmax", "expsum"):
    s.compute_at(r, out, i)
    _, ki = s.split(r, s.reduce_axis(r)[0], mc.var("r"))   # the reductions use their own thread count
    s.cross_thread_reduce(r, ki, method)
  red = [d for d in divisors(96) if method == "tree" or d % 32 == 0]
  return s, lambda rng: {"t": int(rng.choice(divisors(96))), "r": int(rng.choice(red))}


@pytest.mark.parametrize("make", [sym_matmul, sym_conv2d, lambda: sym_softmax("tree"), lambda: sym_softmax("shuffle")],
                         ids=["matmul", "conv2d", "softmax_tree", "softmax_shuffle"])
def test_symbolic_features_equal_concrete(make):
  s, sample = make()
  sym = s.lower()
  rows = extract_program_exprs(sym)
  assert len(rows) == n_stores(sym) and all(len(r) == N_FEATURES for r in rows)
  assert any(not e.is_const for r in rows for e in r)   # really symbolic
  rng = np.random.default_rng(0)
  seen = set()
  for _ in range(30):
    vals = sample(rng)
    seen.add(tuple(sorted(vals.items())))
    conc = extract_features(s.substitute(vals).lower())
    np.testing.assert_array_equal(evaluate_features(rows, vals), conc, err_msg=str(vals))
  assert len(seen) >= 15


@pytest.mark.parametrize("dtype,tf32,k_step", [("float16", False, 16), ("bfloat16", False, 16), ("float32", True, 8)])
def test_tensor_mma_counts_the_mma_sync_a_tensor_core_program_issues(dtype, tf32, k_step):
  """The column is the mma.sync count over the kernel's threads: a warp's m16n8k16 (m16n8k8 for tf32) covers
  16 x 8 x k_step multiply-adds, so M N K / (16 * 8 * k_step) per warp-instruction, 32 lanes each; 0 elsewhere."""
  from minicomp.graph.tensor_core_schedules import tensor_core_schedules
  from minicomp.ir.dag import ComputeDAG
  col = feature_names().index("tensor_mma")
  M, N, K = 128, 64, 256
  wl = W.matmul(M, N, K, dtype=dtype)
  scheds = tensor_core_schedules(ComputeDAG(wl.outputs), mc.Target("sm_86"), tf32=tf32)
  assert scheds
  for s in scheds:
    f = extract_features(s.lower())
    mma = f[:, col]
    assert (mma > 0).sum() == 1                     # the store inside the Mma; fetches and the epilogue: 0
    np.testing.assert_allclose(2.0 ** mma.max() - 1, 32 * M * N * K / (16 * 8 * k_step), rtol=1e-5)
  assert (extract_features(mm_tiled_shared(W.matmul(64, 64, 32)).lower())[:, col] == 0).all()
