"""Fetch loops staged through registers (codegen/cuda.py ``_staged``; on by default, ``MINICOMP_STAGED_FETCH=0``
turns it off): every value of a chunk loaded before any is stored, so a guarded fetch's loads do not wait for each
other. The kernels must compute what they computed, staged or not, against numpy in the CPU simulator."""
import numpy as np
import pytest

import minicomp as mc
from minicomp import workloads as W
from minicomp.ir.dag import ComputeDAG
from minicomp.search.strategies.gensor import construct
from test_workloads import mm_tiled_shared


@pytest.mark.parametrize("staged", [False, True])
def test_a_guarded_fetch_staged_in_chunks_computes_the_same(monkeypatch, staged):
  if staged: monkeypatch.delenv("MINICOMP_STAGED_FETCH", raising=False)     # (on by default)
  else: monkeypatch.setenv("MINICOMP_STAGED_FETCH", "0")
  wl = W.matmul(100, 72, 129, bias_relu=True)      # K = 129: the k-steps of 64 leave a guarded, partial tile
  kern = mc.build(mm_tiled_shared(wl, tile=64, thread=4, kt=64), target="sm_86")
  assert ("_stage[" in kern.source) == staged
  if staged:      # 64 x 64 tiles, 256 threads: 16 iterations a thread, two chunks of 8, each loaded, then stored
    assert "float A_shared_stage[8];" in kern.source and "float B_shared_stage[8];" in kern.source
    assert "A_shared_ax0_ax1_fused_0_c < 2" in kern.source
  ins = wl.random_inputs(0)
  np.testing.assert_allclose(kern(*ins, device="cpu"), wl.reference(*ins), rtol=1e-4, atol=1e-4)


def test_a_padded_convolution_fetch_staged_computes_the_same(monkeypatch):
  """A convolution's input tile is a padding select (a load only inside the image): staged, it still reads zeros
  outside."""
  monkeypatch.delenv("MINICOMP_STAGED_FETCH", raising=False)
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
