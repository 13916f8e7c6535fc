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
