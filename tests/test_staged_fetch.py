"""Fetch loops staged through registers (codegen/cuda.py ``_staged``, ``MINICOMP_STAGED_FETCH=1``): every value of
a chunk loaded before any is stored, so a guarded fetch's loads do not wait for each other. The kernels must
compute what they computed, staged or not, against numpy in the CPU simulator."""
import numpy as np
import pytest

import minicomp as mc
from minicomp import workloads as W
from minicomp.ir.dag import ComputeDAG
from minicomp.search.strategies.gensor import construct


def _matmul_relu(M: int = 100, N: int = 72, K: int = 129):
  """The README's first kernel with 64 x 64 tiles of A and B: 16 fetch iterations per thread, guarded (K = 129
  does not divide into k-steps of 64)."""
  A = mc.placeholder((M, K), "float32", name="A")
  B = mc.placeholder((K, N), "float32", name="B")
  k = mc.reduce_axis(K, name="k")
  C = mc.compute((M, N), lambda i, j: mc.sum(A[i, k] * B[k, j], axis=k), name="C")
  D = mc.compute((M, N), lambda i, j: mc.max(C[i, j], 0.0), name="D")
  s = mc.Schedule([D])
  CL = s.cache_write(C, "local")
  s.compute_inline(C)
  i, j = s.axis(D)
  io, ii = s.split(D, i, 64); jo, ji = s.split(D, j, 64)
  ty, ii = s.split(D, ii, 4); tx, ji = s.split(D, ji, 4)
  s.reorder(D, io, jo, ty, tx, ii, ji)
  s.bind(D, io, "blockIdx.y"); s.bind(D, jo, "blockIdx.x")
  s.bind(D, ty, "threadIdx.y"); s.bind(D, tx, "threadIdx.x")
  s.compute_at(CL, D, tx)
  ci, cj, ck = s.loops(CL)
  ko, ki = s.split(CL, ck, 64)
  s.reorder(CL, ko, ki, ci, cj)
  for X in (A, B):
    XS = s.cache_read(X, "shared", [CL])
    s.compute_at(XS, CL, ko)
    fused = s.fuse(XS, *s.loops(XS))
    _, t = s.split(XS, fused, 256)
    y, x = s.split(XS, t, 16)
    s.bind(XS, y, "threadIdx.y"); s.bind(XS, x, "threadIdx.x")
  return s, (M, N, K)


@pytest.mark.parametrize("staged", [False, True])
def test_a_guarded_fetch_staged_in_chunks_computes_the_same(monkeypatch, staged):
  if staged: monkeypatch.setenv("MINICOMP_STAGED_FETCH", "1")
  else: monkeypatch.delenv("MINICOMP_STAGED_FETCH", raising=False)     # (off by default)
  s, (M, N, K) = _matmul_relu()
  kern = mc.build(s, target="sm_86")
  assert ("_stage[" in kern.source) == staged
  if staged:      # 16 iterations a thread: two chunks of 8, each loaded, then stored
    assert "float A_shared_stage[8];" in kern.source and "float B_shared_stage[8];" in kern.source
    assert "A_shared_ax0_ax1_fused_0_c < 2" in kern.source
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((M, K)).astype(np.float32), rng.standard_normal((K, N)).astype(np.float32)
  np.testing.assert_allclose(kern(a, b, device="cpu"), np.maximum(a @ b, 0), rtol=1e-4, atol=1e-4)


def test_a_padded_convolution_fetch_staged_computes_the_same(monkeypatch):
  """A convolution's input tile is a padding select (a load only inside the image): staged, it still reads zeros
  outside."""
  monkeypatch.setenv("MINICOMP_STAGED_FETCH", "1")
  wl = W.conv2d(1, 64, 8, 8, 32, 3, 1, 1)
  cand = construct(ComputeDAG(wl.outputs), "sm_86", seed=0).candidates[0]
  kern = mc.build(cand.schedule, target="sm_86")
  assert "pad_shared_stage[" in kern.source and " ? " in kern.source
  ins = wl.random_inputs()
  np.testing.assert_allclose(kern(*ins, device="cpu"), wl.reference(*ins), rtol=1e-4, atol=1e-4)


def test_switch_reads_its_default(monkeypatch):
  from minicomp.codegen.cache import switched_on
  monkeypatch.delenv("MINICOMP_TEST_SWITCH", raising=False)
  assert switched_on("MINICOMP_TEST_SWITCH") and not switched_on("MINICOMP_TEST_SWITCH", default=False)
  monkeypatch.setenv("MINICOMP_TEST_SWITCH", "off")
  assert not switched_on("MINICOMP_TEST_SWITCH", default=True)
  monkeypatch.setenv("MINICOMP_TEST_SWITCH", "1")
  assert switched_on("MINICOMP_TEST_SWITCH", default=False)
