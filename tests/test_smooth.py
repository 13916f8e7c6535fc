"""Felix's smoothing (minicomp/search/strategies/felix/smooth.py): closed forms against numerical convolution, each rule
against its exact operator at integer points, the real feature formulas of five sketches against the
exact ones, gradients, and the JAX evaluator against numpy."""
import math

import numpy as np
import pytest

from minicomp import workloads as W
from minicomp.ir.expr import (
  Expr,
  call,
  cast,
  const,
  eq,
  logical_not,
  max_,
  min_,
  ne,
  select,
  var,
  walk,
)
from minicomp.ir.ops import Op
from minicomp.search.annotate import draw_values, make_candidate
from minicomp.search.features import extract_program_exprs, feature_names
from minicomp.search.features.formulas import FormulaEval
from minicomp.search.sketch import generate_sketches
from minicomp.search.strategies.felix.log_space import compile_features, exp_substitute, log_feature
from minicomp.search.strategies.felix.smooth import (
  RULES,
  Smoother,
  abs_tie,
  is_smooth,
  max_s,
  register_smoothing_rule,
  smooth,
  step_compact,
  step_s,
)
from minicomp.search.strategies.felix.tape import compile_formulas
from minicomp.target import Target

jax = pytest.importorskip("jax")
jnp = jax.numpy
TGT = Target("sm_86")
X = var("x", "float64")


def ev(e: Expr, **env) -> np.ndarray:
  """numpy float64 value of an Expr (arrays in ``env`` broadcast)."""
  return np.asarray(FormulaEval({k: np.asarray(v) for k, v in env.items()})(e), np.float64)


def kernel_convolve(f, x: np.ndarray, h: float) -> np.ndarray:
  """(f * k_h)(x) with k(t) = 1/(2(1+t^2)^1.5): with t = h tan(th), k_h(t) dt = cos(th)/2 dth, so the
  infinite integral is a finite one over (-pi/2, pi/2) (midpoint rule)."""
  n = 200_000
  th = (np.arange(n) + 0.5) / n * np.pi - np.pi / 2
  w = np.cos(th) / 2 * (np.pi / n)
  return np.array([np.sum(f(xi - h * np.tan(th)) * w) for xi in x])


# ---------------------------------------------------------------------------------------------
# closed forms and their bounds

@pytest.mark.parametrize("h", [1.0, 0.3])
def test_closed_forms_are_the_kernel_convolutions(h):
  x = np.linspace(-6, 6, 41)
  np.testing.assert_allclose(ev(step_s(X, h), x=x), kernel_convolve(lambda t: (t > 0).astype(float), x, h), atol=1e-4)
  relu = lambda t: np.maximum(t, 0.0)
  np.testing.assert_allclose(ev(max_s(X, const(0.0, "float64"), h), x=x), kernel_convolve(relu, x, h), atol=1e-4)
  # max(a, b) = b + max(a - b, 0): the same convolution in a - b
  b = 2.5
  np.testing.assert_allclose(ev(max_s(X, const(b, "float64"), h), x=x), b + kernel_convolve(relu, x - b, h), atol=1e-4)
  # the kernel integrates to 1 and is phi^3 / 2
  assert abs(kernel_convolve(lambda t: np.ones_like(t), np.zeros(1), h)[0] - 1) < 1e-9


def test_closed_form_error_bounds():
  h = 0.7
  x = np.concatenate([np.linspace(-50, 50, 2001), [1e-9, -1e-9]])
  x = x[x != 0]
  e_step = np.abs(ev(step_s(X, h), x=x) - (x > 0))
  assert np.all(e_step <= h * h / (4 * x * x) + 1e-12) and np.all(e_step <= 0.5)
  e_max = np.abs(ev(max_s(X, const(0.0, "float64"), h), x=x) - np.maximum(x, 0))
  assert np.all(e_max <= h * h / (4 * np.abs(x)) + 1e-12) and np.all(e_max <= h / 2 + 1e-12)
  e_abs = np.abs(ev(abs_tie(X, h), x=x) - np.abs(x))
  assert np.all(e_abs <= h * h / (2 * np.abs(x)) + 1e-12) and ev(abs_tie(X, h), x=0.0) == 0.0
  # the compact step: exactly 0 / 1 outside [-w/2, w/2], monotone, C^1 (derivative 0 at the ends)
  w = 0.9
  u = np.linspace(-1, 1, 4001)
  s = ev(step_compact(X, w), x=u)
  assert np.all(s[u <= -w / 2] == 0) and np.all(s[u >= w / 2] == 1) and np.all(np.diff(s) >= 0)
  d = np.diff(s) / np.diff(u)
  assert d.max() <= 15 / 8 / w + 1e-3 and d[0] == 0 and d[-1] == 0


# ---------------------------------------------------------------------------------------------
# each rule against its exact operator

A, B = var("a"), var("b")
AI = np.arange(-6, 41)[:, None] * np.ones((1, 12), int)
BI = np.ones((47, 1), int) * np.arange(1, 13)[None, :]


def both(e: Expr, **kw):
  """(exact, smoothed) values of ``e`` on the integer grid a in [-6, 40], b in [1, 12]."""
  return ev(e, a=AI, b=BI), ev(smooth(e, **kw), a=AI.astype(float), b=BI.astype(float))


CMP = {"lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
       "eq": eq, "ne": ne}


@pytest.mark.parametrize("name", sorted(CMP))
def test_comparisons_at_integer_points(name):
  e = CMP[name](A, B)
  x, s = both(e)
  assert np.array_equal(x, s)                                   # compact: exact at every integer point
  h = 0.1
  x, s = both(e, kernel="phi", int_width=h)
  bound = (1 - 1 / math.sqrt(1 + 4 * h * h)) / 2 * (2 if name in ("eq", "ne") else 1)
  err = np.abs(x - s)
  assert err.max() <= bound + 1e-12 and err.max() > bound / 2    # the phi kernel: within its bound
  assert np.all((s > 0.5) == (x > 0.5))                          # ... and on the right side of 1/2


def test_float_comparisons_keep_ties_and_are_exact_off_the_width():
  a, b = var("p", "float64"), var("q", "float64")
  w = 0.01
  p = np.array([0.0, 1.0, 2.5, 2.5, 3.0, 3.004])
  q = np.array([0.0, 1.0, 2.5, 3.0, 2.5, 3.0])
  for e in (a < b, a <= b, a > b, a >= b, eq(a, b), ne(a, b)):
    x, s = ev(e, p=p, q=q), ev(smooth(e, float_width=w), p=p, q=q)
    assert np.array_equal(x[:5], s[:5]), e                         # ties and |p - q| >= w: exact
    assert 0 <= s[5] <= 1


@pytest.mark.parametrize("op", ["min", "max"])
def test_min_max_at_integer_points(op):
  e = (min_ if op == "min" else max_)(A, B)
  x, s = both(e)
  np.testing.assert_array_equal(x, s)
  x, s = both(e, kernel="phi", int_width=0.5)                     # tie-exact |d|: 0 at ties, <= h^2/(4|d|)
  d = np.abs(AI - BI)
  assert np.all(np.abs(x - s)[d == 0] == 0) and np.all(np.abs(x - s)[d > 0] <= 0.25 / (4 * d[d > 0]) + 1e-12)


def test_logic_select_and_casts():
  c1, c2 = A < B, A > 3
  for e in (c1 & c2, c1 | c2, logical_not(c1), select(c1, A * 2, B - 7), cast(A, "float64") * 0.5,
            cast(c1, "int32") + 1, cast(cast(A, "float64") / 1.0, "int32")):
    x, s = both(e)
    np.testing.assert_array_equal(x, s, err_msg=str(e))


def test_floor_division_at_integer_points():
  q_x, q_s = both(A // B)
  m_x, m_s = both(A % B)
  a, b = AI, BI
  exact = (((-b <= a) & (a < 4 * b))                             # -1, then the staircase of 3 steps
           | ((a >= 4 * b) & ((a + 1) % b == 0))                  # the (a + 1)/b - 1 tail
           | ((a < -b) & (a % b == 0)))                           # a / b
  np.testing.assert_allclose(q_s[exact], q_x[exact], rtol=0, atol=1e-9)      # exact up to rounding of a*b/(b^2+eps^2)
  np.testing.assert_allclose(m_s[exact], m_x[exact], rtol=0, atol=1e-8)
  assert np.all(np.abs(q_x - q_s) < 1) and np.all(np.abs(m_x - m_s) < b)
  assert (~exact).sum() > 50                                     # the grid does reach the inexact tail
  # Felix's real division is off by up to 1 - 1/b, its floormod -> 0 by up to b - 1, on the same grid
  assert np.abs(q_x - a / b).max() > 0.9 and np.abs(m_x).max() == 11


def test_exact_rewrites_of_floor_division():
  x, y, p = var("x"), var("y"), var("p")
  xs, ys = np.meshgrid(np.arange(1, 40), np.arange(1, 17))
  pq = xs * ys
  cases = [((x * y - 1) // y, xs - 1), ((x * y - 1) % y, ys - 1), (max_(1, x * y) - 1, pq - 1),
           ((x * y * 4 + 3) // (y * 2), 2 * xs + 3 // (2 * ys)),
           (((min_(max_(1, x * y), x * y) - 1) // x) % y, ((pq - 1) // xs) % ys)]
  for e, want in cases:
    got = ev(smooth(e), x=xs.astype(float), y=ys.astype(float))
    np.testing.assert_array_equal(got, want, err_msg=str(e))
  # a ceil division by a tile size dividing its extent: 1 + 63 // p, then the tail, exact
  ps = np.array([1, 2, 4, 8, 16, 32, 64])
  np.testing.assert_allclose(ev(smooth((p + 63) // p), p=ps.astype(float)), (ps + 63) // ps, rtol=1e-9)
  assert len(list(walk(smooth((x * y - 1) % y)))) <= 3                 # y - 1: no steps left at all
  # without the sizes assumption nothing is rewritten: (x*y - 1) % y keeps the floor-division rule
  assert len(list(walk(smooth((x * y - 1) % y, assume_sizes=False)))) > 10


def test_log_sqrt_and_division_guards():
  u, v = var("u", "float64"), var("v", "float64")
  exprs = [smooth(call("log2", X)), smooth(call("sqrt", X)), smooth(u / X), smooth(call("log", X * v))]
  assert all(is_smooth(e) for e in exprs)
  f = compile_formulas(exprs, ["x", "u", "v"])
  g = jax.jit(jax.grad(lambda y: f(y).sum()))
  for x0 in (0.0, -3.0, 1e-30, 5.0, 1e6):
    assert np.isfinite(np.asarray(g(jnp.array([x0, 2.0, 3.0], jnp.float32)))).all(), x0
  np.testing.assert_allclose(np.asarray(f(jnp.array([8.0, 2.0, 0.5]))), [3.0, math.sqrt(8), 0.25, math.log(4)], rtol=1e-6)


def test_register_smoothing_rule_replaces_a_rule():
  old = RULES[Op.FLOORMOD]
  try:
    register_smoothing_rule(Op.FLOORMOD, lambda sm, n, kids: const(0.0, "float64"))   # Felix's choice
    assert smooth(A % B).op is Op.CONST
  finally:
    register_smoothing_rule(Op.FLOORMOD, old)
  assert smooth(A % B).op is not Op.CONST
  s = Smoother(rules={Op.FLOORMOD: lambda sm, n, kids: const(0.0, "float64")})
  assert s(A % B).op is Op.CONST


def test_log_feature_is_a_smooth_slog():
  x = np.array([0.0, 1.0, -3.0, 100.0, 0.5])
  s = ev(log_feature(X, 0.1), x=x)
  want = np.sign(x) * np.log2(np.abs(x) + 1)
  assert s[0] == 0 and np.all(np.abs(s - want)[1:] <= 0.01 / np.minimum(np.abs(x[1:]), x[1:] ** 2))
  assert is_smooth(log_feature(X))


# ---------------------------------------------------------------------------------------------
# the real feature formulas

WORKLOADS = {"matmul": lambda: W.matmul(64, 64, 32, bias_relu=True), "softmax": lambda: W.softmax(8, 96),
             "layernorm": lambda: W.layernorm(8, 96),
             "conv2d": lambda: W.conv2d(1, 8, 8, 8, 16, 3, 1, 1), "depthwise": lambda: W.depthwise_conv2d(1, 16, 8, 8, 3, 1, 1),
             "embedding_matmul": lambda: W.embedding(30, 50, 24, 20)}   # a gather inside the shared fetch
# worst |smoothed - exact| over all entries (slog units) and the share of entries off by more than 0.01
BOUNDS = {"softmax": (1e-4, 0.0), "layernorm": (1e-4, 0.0), "matmul": (0.25, 0.003), "conv2d": (1.5, 0.03),
          "depthwise": (1.5, 0.03), "embedding_matmul": (0.5, 0.02)}
LARGE = {"conv2d", "depthwise"}   # a few seconds each to build (extraction, 16 valid draws, tape)


class Case:
  def __init__(self, name: str):
    self.name = name
    self.sketch = generate_sketches(WORKLOADS[name]().outputs, TGT)[0]
    self.names = list(self.sketch.params)
    self.rows = extract_program_exprs(self.sketch.schedule.lower())
    rng = np.random.default_rng(7)
    self.values = []
    while len(self.values) < 16:
      v = draw_values(self.sketch, rng)
      if make_candidate(self.sketch, v, {}, TGT)[0] is not None: self.values.append(v)
    env = {n: np.array([v[n] for v in self.values], np.int64) for n in self.names}
    fe = FormulaEval(env)
    self.exact = np.stack([np.stack([np.broadcast_to(np.asarray(fe(e), np.float64), (len(self.values),))
                                     for e in row], 1) for row in self.rows], 1)   # (P, R, F)
    self.f = compile_features(self.rows, self.names)
    self.y = np.log(np.array([[v[n] for n in self.names] for v in self.values], np.float64))


_CASES: dict[str, Case] = {}


@pytest.fixture(scope="module", params=list(WORKLOADS))
def case(request) -> Case:
  if request.param not in _CASES: _CASES[request.param] = Case(request.param)
  return _CASES[request.param]


def test_smoothed_features_match_exact_at_valid_points(case):
  got = np.asarray(jax.jit(jax.vmap(case.f))(case.y), np.float64)
  err = np.abs(got - case.exact)
  worst, share = BOUNDS[case.name]
  names = feature_names()
  r, c = np.unravel_index(err.max(0).argmax(), err.shape[1:])
  assert err.max() <= worst, f"{case.name}: worst {err.max():.3g} at row {r} {names[c]}"
  assert np.mean(err > 0.01) <= share, f"{case.name}: {np.mean(err > 0.01):.4f} of entries off by > 0.01"
  # every entry whose exact formula has no floor division is exact (float32 rounding aside)
  no_div = np.array([[not any(n.op in (Op.FLOORDIV, Op.FLOORMOD) for n in walk(e)) for e in row] for row in case.rows])
  assert err[:, no_div].max() <= 1e-3 * max(1.0, np.abs(case.exact).max() / 100)


def test_smoothed_rows_use_only_differentiable_ops(case):
  sm = case.f.smoother
  seen: set[int] = set()
  ops = set()
  for row in case.rows:
    for e in row:
      stack = [sm(e)]
      while stack:                                   # one walk over the whole shared DAG
        n = stack.pop()
        if id(n) in seen: continue
        seen.add(id(n))
        assert n.dtype == "float64" and n.op in (Op.CONST, Op.VAR, Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.NEG, Op.CALL,
                                                 Op.MIN, Op.MAX), n.op
        if n.op is Op.CALL: assert n.arg in ("exp", "log", "sqrt")
        if n.op in (Op.MIN, Op.MAX): assert n.src[1].op is Op.CONST        # only the compact step's clamp
        ops.add(n.op)
        stack.extend(n.src)
  assert Op.CALL in ops and Op.MIN in ops


def test_gradients_are_finite_in_the_relaxed_box(case):
  hi = np.log(np.array([max(max(v[n] for v in case.values), 2) for n in case.names], np.float64))
  rng = np.random.default_rng(3)
  pts = np.concatenate([rng.uniform(0, 1, (8, len(hi))) * hi,      # real points
                        case.y[:8],                                  # log of integers: on every jump
                        np.zeros((1, len(hi)))])                     # all variables 1
  g = np.asarray(jax.jit(jax.vmap(jax.grad(lambda y: case.f(y).sum())))(pts))
  assert np.isfinite(g).all()
  assert np.abs(g[8:16]).max() < 1e4                                 # no sentinel-sized cancellation at integers


@pytest.mark.parametrize("name", [w for w in WORKLOADS if w not in LARGE])   # one large sketch is enough: matmul
def test_gradient_matches_finite_differences(name):
  if name not in _CASES: _CASES[name] = Case(name)
  case = _CASES[name]
  rng = np.random.default_rng(5)
  hi = np.log(np.array([max(max(v[n] for v in case.values), 2) for n in case.names], np.float64))
  y0 = rng.uniform(0, 1, len(hi)) * hi
  with jax.enable_x64(True):
    g = np.asarray(jax.grad(lambda y: case.f(y).sum())(jnp.asarray(y0, jnp.float64)))
  tape = case.f.tape
  fd = np.zeros_like(y0)
  for i in range(len(y0)):
    e = np.zeros_like(y0); e[i] = 1e-6
    fd[i] = (tape.run(np, y0 + e).sum() - tape.run(np, y0 - e).sum()) / 2e-6
  np.testing.assert_allclose(g, fd, rtol=1e-4, atol=1e-4)


def test_compiled_function_matches_numpy_evaluation_of_the_smoothed_exprs(case):
  sm = case.f.smoother
  flat = [sm(e) for row in case.rows for e in row]
  x = {n: np.array([v[n] for v in case.values[:4]], np.float64) * 1.37 for n in case.names}   # off-integer
  fe = FormulaEval(x)
  want = np.stack([np.broadcast_to(np.asarray(fe(e), np.float64), (4,)) for e in flat], 1)
  y = np.log(np.stack([x[n] for n in case.names], 1))
  with jax.enable_x64(True):
    got = np.asarray(jax.jit(jax.vmap(case.f))(jnp.asarray(y)), np.float64).reshape(4, -1)
  np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-7)
  got32 = np.asarray(jax.jit(jax.vmap(case.f))(y.astype(np.float32)), np.float64).reshape(4, -1)
  assert np.mean(np.abs(got32 - want) <= 1e-3 * np.maximum(1, np.abs(want))) > 0.99     # float32: rounding
  np.testing.assert_allclose(case.f.tape.run(np, y[0]), want[0], rtol=1e-9, atol=1e-9)


def test_exp_substitute_is_the_change_of_variables():
  e = smooth(max_(A, B * 3) // B + (A < B))
  y = exp_substitute(e, ["a", "b"])
  assert {n.arg for n in walk(y) if n.op is Op.VAR} == {"a", "b"}
  assert all(n.dtype == "float64" for n in walk(y))
  a, b = np.array([1.0, 5.0, 12.0]), np.array([2.0, 2.0, 7.0])
  np.testing.assert_allclose(ev(y, a=np.log(a), b=np.log(b)), ev(e, a=a, b=b), rtol=1e-12)
  np.testing.assert_allclose(ev(exp_substitute(A // B, ["a", "b"]), a=np.log(a), b=np.log(b)), a // b)   # smooths first


def test_the_tape_runs_the_evaluators_ops():
  """The tape's op table is the evaluator's (minicomp.ir.evaluate.tape_table): on lanes where the op runs,
  each op gives what evaluate gives (bools as 0.0 / 1.0)."""
  import numpy as np

  from minicomp.ir.evaluate import _intrinsics, _table, tape_table
  from minicomp.ir.ops import Op
  rng = np.random.default_rng(0)
  a, b, c = (rng.uniform(0.5, 20.0, 32) for _ in range(3))
  m = np.ones(32, bool)
  for (name, variant), fn in tape_table().items():
    if name == "CALL":
      ref = _intrinsics(np)[variant](*((a, b) if variant == "pow" else (a,)))
    elif name == "CAST" or name in ("AND", "OR", "NOT", "SELECT"):
      continue
    else:
      op = Op[name]
      ref = _table(np)[op](*((a,) if op is Op.NEG else (a, b))).astype(np.float64)
    np.testing.assert_array_equal(fn(np, a, b, c, m), ref, err_msg=f"{name} {variant}")
