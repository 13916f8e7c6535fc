"""Expressions -> isl text (isl_text.py): the fold tables' output on small expressions, and the order in
which the digit rewrite names slices (the text of every access relation depends on it)."""
from minicomp.ir.expr import Expr, var
from minicomp.ir.ops import Op
from minicomp.search.static.footprint.isl_text import Digits, aff_text, cond_text, pieces_text

i, tx, k = var("i"), var("threadIdx.x"), var("k")
NAMES = {"i": "l0", "threadIdx.x": "tx"}          # k has no isl name


def test_affine_text():
  assert aff_text((i * 4 + tx) // 8, NAMES) == "floor((((4*(l0)) + tx))/8)"
  assert aff_text(i % 6 - tx, NAMES) == "(((l0) mod 6) - (tx))"
  assert aff_text(i * k, NAMES) is None               # a product of two variables
  assert aff_text(i + k, NAMES) is None               # a variable isl does not know
  assert aff_text(i // tx, NAMES) is None             # a division by a variable


def test_conditions_and_their_negations():
  c = (i < 3) & ~(tx >= 5)
  assert cond_text(c, NAMES) == "(((l0 < 3)) and ((tx < 5)))"
  assert cond_text(c, NAMES, negate=True) == "(((l0 >= 3)) or ((tx >= 5)))"
  assert cond_text((i < 3) & (k < 2), NAMES) == "(((l0 < 3)))"    # a conjunction keeps its affine part
  assert cond_text((i < 3) | (k < 2), NAMES) is None                # a disjunction cannot


def test_selects_split_into_pieces():
  sel = Expr.make(Op.SELECT, "int32", (i < 3, i * 2, tx + 1), None)
  assert pieces_text(sel + 5, NAMES) == [("((l0 < 3))", "((2*(l0)) + 5)"), ("((l0 >= 3))", "((tx + 1) + 5)")]
  assert pieces_text(i + 1, NAMES) == [("", "(l0 + 1)")]


def test_digits_name_slices_children_first_across_calls():
  d = Digits()
  f = i * 32 + tx
  got = [d.rewrite(e) for e in (f // 58 % 4, f % 58, f // 58)]
  assert [e.arg for e in got] == ["sl_1", "sl_2", "sl_0"]         # f // 58 is met first, inside f // 58 % 4
  values, digits, cons = d.finish()
  assert digits == ["dg0_0", "dg0_1", "dg0_2"] and "0 <= dg0_0 < 58" in cons
