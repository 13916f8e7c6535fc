"""The rewrite engine (minicomp/ir/rewrite.py): rule order, guards, composition, fixpoint, memo, depth."""
import pytest

from minicomp.errors import ExprError
from minicomp.ir.expr import Expr, const, var, walk
from minicomp.ir.ops import Op
from minicomp.ir.printer import PRINT, expr_str
from minicomp.ir.rewrite import Rules, fold, map_loads, rewrite, substitute
from minicomp.ir.simplify import SIMPLIFY, simplify

i, j = var("i"), var("j")


def test_first_matching_rule_wins_and_when_guards_a_rule():
  R = Rules("t")
  R.add(lambda n, ctx: const(1), Op.ADD, when=lambda n: n.src[1].is_const)
  R.add(lambda n, ctx: const(2), Op.ADD)
  assert rewrite(i + 5, R) is const(1)
  assert rewrite(i + j, R) is const(2)
  assert rewrite(i * j, R) is i * j                    # no rule for MUL: rebuilt unchanged (the same node)


def test_rules_compose_in_order_and_a_rule_for_no_op_applies_to_every_op():
  A, B = Rules("a"), Rules("b")
  B.add(lambda n, ctx: const(7), Op.MUL)
  A.add(lambda n, ctx: const(9) if n.op is Op.MUL else None)      # every op
  assert (A + B).groups == ("a", "b") and rewrite(i * j, A + B) is const(9)
  assert rewrite(i * j, B + A) is const(7)


def test_rules_apply_bottom_up_and_see_rewritten_children():
  seen = []
  R = Rules("t")
  R.add(lambda n, ctx: seen.append(n) or None, Op.ADD)
  R.add(lambda n, ctx: const(0), Op.VAR)
  assert rewrite(i + j, R) is const(0) + const(0)
  assert seen == [const(0) + const(0)]


def test_fixpoint_rewrites_a_replacement_again():
  R = Rules("t")                                     # x * 1 -> x + 0, x + 0 -> x
  R.add(lambda n, ctx: n.src[0] if n.src[1] is const(0) else None, Op.ADD)
  R.add(lambda n, ctx: n.src[0] + 0, Op.MUL, when=lambda n: n.src[1] is const(1))
  e = (i * 1) * 1
  assert rewrite(e, R) is (i + 0) + 0                # one application per node: (i + 0) * 1 -> (i + 0) + 0
  assert rewrite(e, R, fixpoint=True) is i


def test_enter_keeps_a_subtree_as_it_is():
  R = Rules("t")
  R.add(lambda n, ctx: const(0), Op.VAR)
  e = (i + 1) // 4 + j
  assert rewrite(e, R, enter=lambda n: n.op is not Op.FLOORDIV) is (i + 1) // 4 + const(0)


def test_memo_is_shared_between_calls():
  calls = []
  R = Rules("t")
  R.add(lambda n, ctx: calls.append(n) or None, Op.ADD)
  memo = {}
  rewrite(i + j, R, memo=memo)
  rewrite((i + j) * 2, R, memo=memo)
  assert calls == [i + j]


def test_deep_expressions_need_no_recursion():
  e = i
  for k in range(20000): e = e + (k % 7)
  assert rewrite(e, SIMPLIFY, None) is not None
  assert len(fold(e, PRINT)[0]) > 20000
  assert substitute(e, {"i": j}) is not e


def test_fold_names_a_missing_rule():
  with pytest.raises(ExprError, match="no rule for ADD"):
    fold(i + j, {Op.VAR: lambda ctx, n, k: 0}, what="test")


def test_substitute_and_map_loads():
  assert substitute(i * 4 + j, {"j": const(1)}) is i * 4 + 1
  assert substitute(i, {}) is i
  from minicomp.ir.te import placeholder
  A = placeholder((8,), name="A")
  e = A[i] + A[j]
  got = map_loads(e, lambda n: const(float(n.src[0] is i)))       # A[i] -> 1.0, A[j] -> 0.0
  assert got.op is Op.ADD and got.src == (const(1.0), const(0.0))


def test_printer_parenthesises_by_precedence():
  a, b, c = var("a"), var("b"), var("c")
  assert expr_str((a + b) * c) == "(a + b) * c"
  assert expr_str(a - (b - c)) == "a - (b - c)"
  assert expr_str((a - b) - c) == "a - b - c"
  assert expr_str(-(a + b)) == "-(a + b)"
  assert expr_str((a < b) & (b < c)) == "a < b and b < c"


def test_simplifier_groups_are_named_rules():
  assert SIMPLIFY.groups == ("fold", "linear", "divmod", "bounds", "logic")
  assert simplify((i * 4 + j) // 4, {"i": (0, 7), "j": (0, 3)}) is i
  assert simplify((i * 4 + j) % 4, {"i": (0, 7), "j": (0, 3)}) is j
  assert isinstance(simplify(const(3) * 2), Expr) and simplify(const(3) * 2) is const(6)


def test_identities_drop_nodes_and_keep_every_value():
  """fold_identities (the analytic model's formulas, compiled): integer constants folded, x+0, x*1, x*0, 0//d, x%1
  gone; x // 0 and an int32 constant that would wrap kept as written; the values those of the original."""
  import numpy as np

  from minicomp.ir.evaluate import fold_table
  from minicomp.ir.simplify import fold_identities
  zero, one = const(0), const(1)
  assert fold_identities(i * one + zero) is i and fold_identities(zero * j + i) is i
  assert fold_identities((i * zero) // j) is zero and fold_identities(i % one) is zero
  assert fold_identities(i // one - zero) is i and fold_identities(const(6) * 7 + i) is const(42) + i
  assert fold_identities(i // zero).op is Op.FLOORDIV                    # (x // 0: left as written)
  big = const(1 << 30) * 4
  assert fold_identities(big) is big                                      # (int32: C would wrap it)
  x, y = var("x", "int64"), var("y", "int64")
  roots = [(x * 0 + y * 1) // (y + 0) + x % 1, (x * 3 + 0) * (y - 0) // 1 + 0 // (y + 1), x * y * 1 - 0]
  table, memo = fold_table(np, wide=True), {}
  env = {"x": np.arange(-4, 5, dtype=np.int64), "y": np.arange(1, 10, dtype=np.int64)}
  for r in roots:
    folded = fold_identities(r, memo)
    assert len(list(walk(folded))) < len(list(walk(r)))
    np.testing.assert_array_equal(np.broadcast_to(fold(folded, table, env), (9,)), fold(r, table, env))


def test_a_compiled_fold_gives_the_values_fold_gives():
  """compile_fold: the same rules on the same inputs, one straight-line function; shared nodes once."""
  import numpy as np

  from minicomp.ir.evaluate import fold_table
  from minicomp.ir.expr import var
  from minicomp.ir.rewrite import compile_fold, fold
  x, y = var("x"), var("y")
  shared = (x * 3 + y) // 2
  roots = [shared * shared - x, (shared + 1) % 5, x * y]
  table = fold_table(np, wide=True)
  env = {"x": np.arange(1, 9, dtype=np.int64), "y": np.arange(8, 0, -1, dtype=np.int64)}
  run = compile_fold(roots, table)
  for got, r in zip(run(env), roots):
    np.testing.assert_array_equal(got, fold(r, table, env))


def test_a_compiled_fold_calls_unmarked_rules_and_names_a_missing_variable():
  """Rules without compile_fold's marks are called as fold calls them; a variable ctx lacks raises the table's
  own error, compiled or not."""
  import numpy as np
  import pytest

  from minicomp.errors import ExprError
  from minicomp.ir.evaluate import fold_table
  from minicomp.ir.expr import exp, var
  from minicomp.ir.ops import Op
  from minicomp.ir.rewrite import compile_fold, fold
  x = var("x", "float32")
  seen = []
  table = dict(fold_table(np, wide=True))
  plain_add = lambda ctx, n, k: (seen.append(n.op), k[0] + k[1])[1]   # noqa: E731
  table[Op.ADD] = plain_add
  root = exp(x) + x * 2.0
  env = {"x": np.linspace(0, 1, 5)}
  np.testing.assert_array_equal(compile_fold([root], table)(env)[0], fold(root, table, env))
  assert seen == [Op.ADD, Op.ADD]
  with pytest.raises(ExprError, match="no value for variable 'x'"):
    compile_fold([root], table)({"y": env["x"]})
