"""Expression language: structural equality, simplifier, evaluators (numpy and jax), printing."""
import numpy as np
import pytest

import minicomp as mc
from minicomp.ir.evaluate import evaluate
from minicomp.ir.expr import Expr, const, free_vars, max_, min_, select, var
from minicomp.ir.rewrite import substitute
from minicomp.ir.ops import Op
from minicomp.ir.linear import bounds
from minicomp.ir.simplify import simplify


def test_structural_equality_and_hash():
  i, j = var("i"), var("j")
  a, b = (i * 4 + j) // 4, (var("i") * 4 + var("j")) // 4
  assert a == b and hash(a) == hash(b) and a is b          # interned: equal means identical
  assert a != (i * 4 + j) // 2
  assert len({a, b}) == 1
  assert const(1) != const(1.0)   # int vs float constants differ
  assert isinstance(i < 3, Expr) and (i < 3).op is Op.LT
  with pytest.raises(mc.ExprError):
    bool(i < 3)


def test_dtype_rules():
  x = var("x", "float32")
  assert (x * 2).dtype == "float32" and (x * 2).src[1].dtype == "float32"
  assert (var("i") + 1).dtype == "int32"
  assert (var("i") < 3).dtype == "bool"
  with pytest.raises(mc.ExprError):
    var("i") / 2          # ambiguous integer division
  with pytest.raises(mc.ExprError):
    x // 2                # floor division on floats
  with pytest.raises(mc.ExprError):
    mc.ir.expr.call("nope", x)


R = {"io": (0, 9), "ii": (0, 3), "j": (0, 7)}


@pytest.mark.parametrize("expr,expected", [
  (lambda i, io, ii, j: (io * 4 + ii) // 4, lambda i, io, ii, j: io),
  (lambda i, io, ii, j: (io * 4 + ii) % 4, lambda i, io, ii, j: ii),
  (lambda i, io, ii, j: i * 1 + 0, lambda i, io, ii, j: i),
  (lambda i, io, ii, j: i * 0 + j, lambda i, io, ii, j: j),
  (lambda i, io, ii, j: i - i, lambda i, io, ii, j: const(0)),
  (lambda i, io, ii, j: (i * 8 + j) // 8 * 8 + (i * 8 + j) % 8, lambda i, io, ii, j: i * 8 + j),
  (lambda i, io, ii, j: ii // 4, lambda i, io, ii, j: const(0)),
  (lambda i, io, ii, j: ii % 4, lambda i, io, ii, j: ii),
  (lambda i, io, ii, j: (i // 4) // 8, lambda i, io, ii, j: i // 32),
  (lambda i, io, ii, j: min_(ii, 5), lambda i, io, ii, j: ii),
  (lambda i, io, ii, j: max_(ii, 5), lambda i, io, ii, j: const(5)),
  (lambda i, io, ii, j: select(ii < 4, io, j), lambda i, io, ii, j: io),
  (lambda i, io, ii, j: (io * 4 + ii + 4) // 4, lambda i, io, ii, j: io + 1),
  (lambda i, io, ii, j: const(3) * 4 + 2, lambda i, io, ii, j: const(14)),
])
def test_simplify_rules(expr, expected):
  vs = [var(n) for n in ("i", "io", "ii", "j")]
  assert simplify(expr(*vs), R) == simplify(expected(*vs))


def test_simplify_preserves_value_random():
  """Randomised: the simplified expression evaluates to the same value on the given ranges."""
  rng = np.random.default_rng(0)
  io, ii, j = var("io"), var("ii"), var("j")
  exprs = [(io * 4 + ii) * 129 + j, ((io * 4 + ii) * 8 + j) // 16, ((io * 4 + ii) * 8 + j) % 16,
           (io * 32 + ii * 8 + j) // 8 % 4, ((io * 4 + ii) // 2 + j) % 3, (io - ii) // 4]
  env = {n: rng.integers(lo, hi + 1, size=200) for n, (lo, hi) in R.items()}
  for e in exprs:
    np.testing.assert_array_equal(evaluate(simplify(e, R), env), evaluate(e, env))


def test_simplify_memo_never_changes_a_result(monkeypatch):
  """Results are remembered across calls, per ranges *contents*: warm, cold, cleared half-way through
  (a tiny memo limit) or after the caller changed its ranges dict, simplify gives the same Exprs."""
  from minicomp.ir import linear as L
  from minicomp.ir import simplify as S
  rng = np.random.default_rng(1)
  leaves = [var("io"), var("ii"), var("j"), var("t"), const(3), const(8)]

  def rand(depth):
    if depth == 0: return leaves[rng.integers(len(leaves))]
    a, b = rand(depth - 1), rand(depth - 1)
    k = int(rng.integers(7))
    return [a + b, a - b, a * 4 + b, a // 8, a % 4, min_(a, b), select(a < b, a, b)][k]

  exprs = [rand(4) for _ in range(60)]
  cases = [(e, r) for e in exprs for r in (R, None, {"io": (0, 1), "t": (0, None)})]
  S.clear_memo()
  cold = []
  for e, r in cases:
    S.clear_memo()
    cold.append(simplify(e, r))
  warm = [simplify(e, r) for e, r in cases]
  assert warm == cold and [repr(x) for x in warm] == [repr(x) for x in cold]
  monkeypatch.setattr(S, "_MEMO_MAX", 7)         # cleared again and again in the middle of a call
  monkeypatch.setattr(L, "_MEMO_MAX", 7)
  assert [simplify(e, r) for e, r in reversed(cases)] == cold[::-1]
  monkeypatch.undo()
  ii = var("ii")
  rs = dict(R)
  assert simplify(ii // 4, rs) == const(0)
  rs["ii"] = (0, 7)                                # the same dict, new contents: not the old answer
  assert simplify(ii // 4, rs) == ii // 4 and simplify(ii // 4) == ii // 4
  terms, _ = L.linear(ii * 2 + 1)
  terms.clear()                                    # linear hands out copies of what it remembers
  assert L.linear(ii * 2 + 1) == ({ii: 2}, 1)


def test_bounds():
  io, ii = var("io"), var("ii")
  assert bounds(io * 4 + ii, R) == (0, 39)
  assert bounds((io * 4 + ii) // 8, R) == (0, 4)
  assert bounds(io % 3, R) == (0, 2)
  assert bounds(var("free"), R) == (None, None)


def test_evaluate_numpy_floor_semantics():
  i = var("i")
  assert evaluate(i // 4, {"i": -1}) == -1
  assert evaluate(i % 4, {"i": -1}) == 3
  x = var("x", "float32")
  assert evaluate(mc.sigmoid(x), {"x": 0.0}) == pytest.approx(0.5)
  assert evaluate(mc.erf(x), {"x": 0.5}) == pytest.approx(0.5204998778)
  assert evaluate(mc.rsqrt(x), {"x": 4.0}) == pytest.approx(0.5)


def test_jax_gradient_of_symbolic_extent():
  import jax
  import jax.numpy as jnp
  # the outer extent of a split by a symbolic factor f, as a smooth-enough formula: N / f * f_inner ...
  f, g = var("f", "float32"), var("g", "float32")
  cost = (const(1024.0) / f) * g + f * f
  grad = jax.grad(lambda fv: evaluate(cost, {"f": fv, "g": jnp.float32(3.0)}, xp=jnp))(jnp.float32(8.0))
  assert float(grad) == pytest.approx(-1024.0 * 3.0 / 64.0 + 16.0)


def test_substitute_and_free_vars():
  i, j = var("i"), var("j")
  e = i * 2 + j
  assert free_vars(e) == {"i", "j"}
  assert simplify(substitute(e, {"i": const(3)})) == simplify(j + 6)
  assert str(simplify((i * 8 + j) // 8, {"j": (0, 7)})) == "i"


def test_c_printing():
  from minicomp.codegen.cuda import CUDARenderer
  r = CUDARenderer()
  i, j = var("i"), var("j")
  r.ranges = {"i": (0, 9), "j": (0, 9)}
  assert r.expr(simplify((i * 4 + j) // 2, r.ranges)) == "i * 2 + j / 2"
  assert r.expr((i + j * 3) // 2) == "(i + j * 3) / 2"
  assert r.expr(i - 3 < j) == "i - 3 < j"
  r.ranges = {}
  assert r.expr(i // 4).startswith("mc_floordiv(")
  x = var("x", "float32")
  assert r.expr(max_(x, 0.0)) == "fmaxf(x, 0.0f)"
  assert r.expr(mc.exp(x)) == "expf(x)"
  assert r.expr(const(float("-inf"))) == "__int_as_float(0xff800000)"


def test_jax_gradient_of_a_lowered_symbolic_extent():
  """The register tile of a symbolic schedule is f2 * f3 elements: d/df2 = f3 through jax."""
  import jax
  import jax.numpy as jnp
  from test_schedule import _symbolic_matmul
  _, s = _symbolic_matmul()
  prog = s.lower()
  size = next(b.size for b in prog.kernels[0].allocs if b.name == "C_local")
  g = jax.grad(lambda f2: evaluate(size, {"f2": f2, "f3": jnp.float32(4.0)}, xp=jnp))(jnp.float32(8.0))
  assert float(g) == pytest.approx(4.0)


def test_shift_free_extent_bounds_a_moving_floordiv_region():
  """The channels a tile of ``T`` output channels reads through ``m // 4`` shift with the tile:
  the bound is free of the tile index, never below the true extent and at most one above it (it
  does not know the tile starts at a multiple of T)."""
  from minicomp.ir.bound import shift_free_extent
  b, T = var("b"), var("T")
  lo, hi = (b * T) // 4, (b * T + T - 1) // 4
  ext = shift_free_extent(hi - lo + 1, {"b"})
  assert ext is not None and "b" not in free_vars(ext)
  for t in range(1, 13):
    true = max(((k * t + t - 1) // 4 - (k * t) // 4 + 1) for k in range(64))
    got = evaluate(ext, {"T": t})
    assert true <= got <= true + 1, (t, true, got)
  assert shift_free_extent(b * 2 + T, {"b"}) is None        # a term that moves without a partner
