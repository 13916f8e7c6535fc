"""The loop IR's one statement walker (minicomp/ir/loop.py: stmt_parts, walk_stmts)."""
import typing

from minicomp import workloads as W
from minicomp.graph.schedules import default_schedule
from minicomp.ir import loop as L
from minicomp.ir.expr import const, var


def test_every_statement_class_has_parts():
  assert set(typing.get_args(L.Stmt)) == set(L._PARTS)


def test_walk_is_preorder_with_children_in_order():
  i = var("i")
  buf = L.Buffer("B", "float32", "global", const(8))
  a, b = L.Store(buf, i, const(1.0)), L.Store(buf, i + 1, const(2.0))
  body = L.Seq((L.If(i < 4, a), L.Sync(), b))
  loop = L.For("i", const(8), body)
  assert list(L.walk_stmts(loop)) == [loop, body, body.stmts[0], a, body.stmts[1], b]
  assert L.stmt_parts(loop) == ((body,), (const(8),))
  assert L.stmt_parts(a) == ((), (i, const(1.0)))


def test_walk_reaches_every_store_of_a_lowered_kernel():
  wl = W.softmax(12, 40)
  prog = default_schedule(wl.outputs).lower()
  for k in prog.kernels:
    stores = [s for s in L.walk_stmts(k.body) if isinstance(s, (L.Store, L.CrossThreadReduce))]
    written = {s.buffer.name if isinstance(s, L.Store) else s.dst.name for s in stores}
    assert written & {b.name for b in k.params} == k.written


def test_auto_unroll_stops_at_a_loop_that_holds_a_block_barrier():
  """auto_unroll_max_step unrolls the innermost loops up to the first that holds a shared stage (a fetch between two
  __syncthreads): a matmul's 64-step k-loop that fetches its tiles stays rolled though 64 x its 2-element register
  tile is within the pragma's 512 (unrolled, a tuned matmul's such loop cost NVVM 26 s), the register tile inside is
  unrolled, and the kernel computes numpy's product. Without the fetch the same k-loop is unrolled."""
  import numpy as np

  import minicomp as mc

  def kernel(shared: bool):
    wl = W.matmul(64, 64, 64)
    s = mc.Schedule(wl.outputs)
    C = wl.outputs[0]
    CL = s.cache_write(C, "local")
    i, j = s.axis(C)
    io, ii = s.split(C, i, 16)
    jo, ji = s.split(C, j, 32)
    tx, ji = s.split(C, ji, 2)
    s.reorder(C, io, jo, ii, tx, ji)
    s.bind(C, io, "blockIdx.y"); s.bind(C, jo, "blockIdx.x")
    s.bind(C, ii, "threadIdx.y"); s.bind(C, tx, "threadIdx.x")
    s.compute_at(CL, C, tx)
    ko, ci, cj = s.loops(CL)[-1], *s.loops(CL)[:2]
    s.reorder(CL, ko, ci, cj)
    s.pragma(CL, ko, "auto_unroll_max_step", 512)
    if shared:
      for X in wl.inputs[:2]:
        XS = s.cache_read(X, "shared", [CL])
        s.compute_at(XS, CL, ko)
        _, t = s.split(XS, s.fuse(XS, *s.loops(XS)), 256)
        y, x = s.split(XS, t, 16)
        s.bind(XS, y, "threadIdx.y"); s.bind(XS, x, "threadIdx.x")
    return wl, ko, mc.build(s, target="sm_86")

  for shared in (True, False):
    wl, ko, k = kernel(shared)
    loops = {f.var: f for f in L.walk_stmts(k.program.kernels[0].body) if isinstance(f, L.For)}
    k_loop = next(f for v, f in loops.items() if v.startswith(ko.split(".")[-1]) and int(f.extent.arg) == 64)
    assert k_loop.pragma_unroll is not shared, (shared, k_loop)
    assert sum(f.pragma_unroll for f in loops.values()) >= 1
    a, b = wl.random_inputs()
    np.testing.assert_allclose(k(a, b, device="cpu"), a @ b, rtol=1e-4, atol=1e-4)
