"""Barriers lowering keeps (ir/nest.py ``_needed_barriers``): two fetches into different shared tiles of one round
share one pair of ``__syncthreads()``; a barrier that orders a read after a write, a write after a read, two writes
of one tile, or anything past what the sequence shows stays. The kernels are checked by the loop-IR interpreter
(which raises on a data race between two barriers) and by the CUDA simulator, both against numpy."""
import numpy as np

import minicomp as mc
from minicomp import workloads as W
from minicomp.ir.dag import ComputeDAG
from minicomp.ir.expr import Expr, const, var
from minicomp.ir.interp import run_program
from minicomp.ir.loop import Buffer, For, Store, Sync
from minicomp.ir.lower import lower
from minicomp.ir.nest import _needed_barriers
from minicomp.ir.ops import Op
from minicomp.search.strategies.gensor import construct
from test_workloads import mm_tiled_shared

TOL = dict(rtol=1e-4, atol=1e-4)


def _buf(name, scope="shared"):
  return Buffer(name, "float32", scope, const(64))


def _fill(dst, src):
  """for i in 0..63: dst[i] = src[i]"""
  return For("i", const(64), Store(dst, var("i"), Expr.make(Op.LOAD, "float32", (var("i"),), src)))


def test_two_fetches_of_one_round_share_their_barriers():
  wl = W.matmul(32, 32, 40)                        # K = 40: the last k-step's tiles are guarded
  sched = mm_tiled_shared(wl, tile=16, thread=4, kt=16)
  kern = mc.build(sched, target="sm_86")
  k_loop = kern.source[kern.source.index("for (int "):]
  # sync; fetch A; fetch B; sync; multiply-add (before: a third barrier between the two fetches)
  assert k_loop.count("__syncthreads();") == 2
  fetch_a, fetch_b = k_loop.index("A_shared["), k_loop.index("B_shared[")
  assert "__syncthreads" not in k_loop[min(fetch_a, fetch_b):max(fetch_a, fetch_b)]
  ins = wl.random_inputs(0)
  np.testing.assert_allclose(run_program(lower(sched.state), *ins), wl.reference(*ins), **TOL)   # races raise
  np.testing.assert_allclose(kern(*ins, device="cpu"), wl.reference(*ins), **TOL)


def test_a_padded_convolution_fetches_between_two_barriers():
  wl = W.conv2d(1, 8, 6, 6, 8, 3, 1, 1)
  cand = construct(ComputeDAG(wl.outputs), "sm_86", seed=0).candidates[0]
  kern = mc.build(cand.schedule, target="sm_86")
  src = kern.source
  assert src.count("__syncthreads();") == 2          # (the reduction fits one round: one fetch of each tile)
  assert src.index("__syncthreads();") < src.index("// stage pad.shared") < src.index("// stage W.shared") < src.rindex(
    "__syncthreads")
  ins = wl.random_inputs(1)
  np.testing.assert_allclose(run_program(lower(cand.schedule.state), *ins), wl.reference(*ins), **TOL)
  np.testing.assert_allclose(kern(*ins, device="cpu"), wl.reference(*ins), **TOL)


def test_a_barrier_that_orders_something_stays():
  g, a, b = _buf("g", "global"), _buf("a"), _buf("b")
  s = Sync()
  independent = [s, _fill(a, g), s, _fill(b, g), s]
  assert _needed_barriers(independent) == [s, independent[1], independent[3], s]
  for then in (_fill(b, a),        # reads the tile the first wrote
               _fill(a, g),        # writes it again
               _fill(g, b)):       # writes the global buffer the first read
    stmts = [s, _fill(a, g), s, then, s]
    assert _needed_barriers(stmts) == stmts
  war = [s, _fill(b, a), s, _fill(a, g), s]        # the second overwrites the tile the first read
  assert _needed_barriers(war) == war
  # a barrier with no barrier on one side orders what comes before or after the sequence: not in view
  assert _needed_barriers([_fill(a, g), s, _fill(b, g), s]) == [_fill(a, g), s, _fill(b, g), s]
  assert _needed_barriers([s, _fill(a, g), s, _fill(b, g)]) == [s, _fill(a, g), s, _fill(b, g)]
  # three independent fetches: both middle barriers go; registers (local buffers) never conflict
  c, r = _buf("c"), _buf("r", "local")
  three = [s, _fill(a, g), s, _fill(b, g), s, _fill(c, g), s]
  assert _needed_barriers(three) == [s, three[1], three[3], three[5], s]
  assert len(_needed_barriers([s, _fill(r, g), s, _fill(r, g), s])) == 4
