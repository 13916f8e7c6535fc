"""Expression nodes are hash-consed: equal expressions are one object, comparison is constant time,
and the intern table forgets nodes nobody holds."""
import copy
import gc
import pickle
import threading
import time

import minicomp as mc
from minicomp.ir import expr as E
from minicomp.ir.expr import Expr, const, select, var
from minicomp.ir.rewrite import substitute
from minicomp.ir.ops import Op


def _chain(depth: int, salt: int = 0) -> Expr:
  """A DAG whose tree expansion doubles with every level (each level uses the one below twice)."""
  i, j = var("i"), var("j")
  e = i + salt
  for _ in range(depth): e = e * e + j
  return e


def test_equal_expressions_built_twice_are_one_object():
  i, k = var("i"), var("k")
  a = select(i < 4, (i * 8 + k) // 2, k % 3)
  b = select(var("i") < 4, (var("i") * 8 + var("k")) // 2, var("k") % 3)
  assert a is b
  assert substitute(a, {"k": var("k")}) is a
  assert substitute(a, {"k": i}) is select(i < 4, (i * 8 + i) // 2, i % 3)
  # constants of different types stay different; a LOAD is matched by its tensor's identity
  assert const(1) is not const(1.0) and const(1) is not const(True) and const(0, "float32") is const(0.0)
  A, B = mc.placeholder((4,), name="A"), mc.placeholder((4,), name="A")
  assert A[i] is A[i] and A[i] is not B[i]


def test_comparing_deep_dags_takes_constant_time():
  # depth 400: the tree expansion has 2^400 nodes; equality must not look at it
  a, b, c = _chain(400), _chain(400), _chain(400, salt=1)
  t0 = time.perf_counter()
  for _ in range(10_000): assert a == b and a != c
  assert time.perf_counter() - t0 < 1.0
  assert len({a, b, c}) == 2


def test_pickling_and_copying_return_the_interned_node():
  e = _chain(30)
  assert pickle.loads(pickle.dumps(e)) is e
  assert copy.deepcopy(e) is e and copy.copy(e) is e


def test_intern_table_forgets_unreferenced_nodes():
  gc.collect()
  before = len(E._INTERN)
  e = _chain(50, salt=12345)
  assert len(E._INTERN) >= before + 50
  del e
  gc.collect()
  assert len(E._INTERN) <= before + 2       # the two leaves (i, j) may be held elsewhere


def test_threads_building_the_same_nodes_get_one_object():
  out: list[list[Expr]] = [[] for _ in range(4)]

  def build(slot):
    for n in range(300): out[slot].append(var(f"t{n}") * 3 + n)
  ts = [threading.Thread(target=build, args=(s,)) for s in range(4)]
  for t in ts: t.start()
  for t in ts: t.join()
  for n in range(300):
    assert all(out[s][n] is out[0][n] for s in range(4))
  assert out[0][5].op is Op.ADD
