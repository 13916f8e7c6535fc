"""Evaluate expressions with numpy (concrete) or jax.numpy (differentiable).

``evaluate(e, env)`` maps variable names to numbers or arrays; ``evaluate(e, env, xp=jnp)``
gives a traced jax value, so ``jax.grad`` of a formula over symbolic schedule parameters
works. Integer ops keep floor semantics (``//``, ``%``) under both backends.
"""
from __future__ import annotations

import functools
import math
from typing import Any, Callable

import numpy as np

from minicomp.errors import ExprError, UnevaluableError
from minicomp.ir.expr import Expr
from minicomp.ir.ops import BITCAST, INTEGER_DTYPES, NP_DTYPE, Op
from minicomp.ir.rewrite import node_rule, value_rule, variable_rule


def _erf(xp):
  if xp is np: return np.vectorize(math.erf, otypes=[np.float64])
  import jax.scipy.special as jss
  return jss.erf


@functools.cache
def _intrinsics(xp) -> dict[str, Callable]:
  return {"exp": xp.exp, "log": xp.log, "sqrt": xp.sqrt, "rsqrt": lambda x: 1 / xp.sqrt(x), "tanh": xp.tanh,
          "erf": _erf(xp), "pow": xp.power, "sigmoid": lambda x: 1 / (1 + xp.exp(-x)), "abs": xp.abs,
          "floor": xp.floor, "ceil": xp.ceil, "exp2": xp.exp2, "log2": xp.log2, "round": xp.round, "fmod": xp.fmod,
          "sin": xp.sin, "cos": xp.cos, "tan": xp.tan, "asin": xp.arcsin, "acos": xp.arccos, "atan": xp.arctan,
          "sinh": xp.sinh, "cosh": xp.cosh, "asinh": xp.arcsinh, "acosh": xp.arccosh, "atanh": xp.arctanh,
          "bitand": xp.bitwise_and, "bitor": xp.bitwise_or, "bitxor": xp.bitwise_xor, "bitnot": xp.invert,
          "shl": xp.left_shift, "shr": xp.right_shift, "dot4": _dot4(xp)}


def _dot4(xp):
  def dot4(*v):
    w = [xp.asarray(x).astype(xp.int32) for x in v]
    return w[0] * w[4] + w[1] * w[5] + w[2] * w[6] + w[3] * w[7]
  return dot4


# the operators _table's lambdas are (compile_fold writes them in place of the call)
_INFIX = {Op.ADD: "+", Op.SUB: "-", Op.MUL: "*", Op.DIV: "/", Op.LT: "<", Op.LE: "<=", Op.GT: ">", Op.GE: ">=",
          Op.EQ: "==", Op.NE: "!="}


@functools.cache
def _table(xp) -> dict[Op, Callable]:
  return {Op.ADD: lambda a, b: a + b, Op.SUB: lambda a, b: a - b, Op.MUL: lambda a, b: a * b,
          Op.DIV: lambda a, b: a / b, Op.FLOORDIV: xp.floor_divide, Op.FLOORMOD: xp.mod,
          Op.MIN: xp.minimum, Op.MAX: xp.maximum, Op.NEG: lambda a: -a,
          Op.LT: lambda a, b: a < b, Op.LE: lambda a, b: a <= b, Op.GT: lambda a, b: a > b,
          Op.GE: lambda a, b: a >= b, Op.EQ: lambda a, b: a == b, Op.NE: lambda a, b: a != b,
          Op.AND: xp.logical_and, Op.OR: xp.logical_or, Op.NOT: xp.logical_not, Op.SELECT: xp.where}


_NP_DT = NP_DTYPE


def _cast_c(xp):
  """CAST as C converts: to the target dtype's width, float -> int truncating toward zero."""
  def cast(env, n, k):
    v = k[0]
    if n.dtype.startswith("int") and xp is np and not isinstance(v, (int, np.integer, np.ndarray)):
      return _NP_DT[n.dtype](math.trunc(v))
    return xp.asarray(v).astype(_NP_DT[n.dtype]) if xp is not np or isinstance(v, np.ndarray) else _NP_DT[n.dtype](v)
  return cast


def _cast_wide(env, n, k):
  """CAST for formulas over whole populations (numpy arrays): float -> int truncates, every integer is
  int64 (products of tile sizes overflow int32), floats are float64."""
  v = np.asarray(k[0])
  if n.dtype in INTEGER_DTYPES and v.dtype.kind == "f": return np.trunc(v).astype(np.int64)
  return v.astype(bool if n.dtype == "bool" else np.int64 if n.dtype in INTEGER_DTYPES else np.float64)


def _bitcast_or(xp, intr):
  """The CALL rule: an intrinsic of the values, and ``bitcast`` of the node's types (the same bits read as its own)."""
  def call(env, n, k):
    if n.arg != BITCAST: return intr[n.arg](*k)
    v = xp.asarray(k[0]).astype(_NP_DT[n.src[0].dtype])
    if xp is np: return v.view(_NP_DT[n.dtype])
    import jax
    return jax.lax.bitcast_convert_type(v, _NP_DT[n.dtype])
  return call


def _var(env, n, k):
  try: return env[n.arg]
  except KeyError: raise ExprError(f"no value for variable {n.arg!r}") from None


def _no_reduce(env, n, k): raise ExprError(f"cannot evaluate a reduction {n} as a scalar expression")


@functools.cache
def fold_table(xp=np, wide: bool = False) -> dict[Op, Callable]:
  """The evaluator as a fold table (``minicomp.ir.rewrite.fold``; ctx: the variables' values), for numpy or
  jax.numpy. ``wide``: integers as int64 and floats as float64 (formulas over populations), else C's casts."""
  ops, intr = _table(xp), _intrinsics(xp)
  out: dict[Op, Callable] = {op: value_rule(fn, _INFIX.get(op)) for op, fn in ops.items()}
  out.update({Op.CONST: node_rule(lambda n: n.arg), Op.VAR: variable_rule(_var), Op.REDUCE: _no_reduce,
              Op.CALL: _bitcast_or(xp, intr), Op.CAST: _cast_wide if wide else _cast_c(xp)})
  return out


@functools.lru_cache(maxsize=8192)
def _compiled(e: Expr) -> Callable | None:
  from minicomp.ir.rewrite import compile_fold
  try:
    return compile_fold([e], fold_table(np), "evaluate")
  except ExprError:          # (a read: no rule without a loads callback; evaluate words the error)
    return None


def evaluate_again(e: Expr, env: dict[str, Any]) -> Any:
  """``evaluate(e, env)`` with numpy and no loads, through a straight-line function of ``env`` compiled once per
  expression (``rewrite.compile_fold``: the same rules, so the same values): for expressions evaluated again and
  again on new arrays (the static model's enumerations of access instances), where ``fold``'s walk per call cost
  more than the numpy work. Errors are :func:`evaluate`'s."""
  run = _compiled(e)
  if run is None: return evaluate(e, env)
  try:
    return run(env)[0]
  except ExprError:
    return evaluate(e, env)


def _with_loads(xp, loads: Callable) -> dict[Op, Callable]:
  return fold_table(xp) | {Op.LOAD: lambda env, n, k: loads(n, list(k))}


def evaluate(e: Expr, env: dict[str, Any] | None = None, xp=np, loads: Callable | None = None) -> Any:
  """Evaluate ``e``. ``env`` maps variable names to values; ``loads(node, index_values)`` serves LOADs."""
  from minicomp.ir.rewrite import fold
  table = fold_table(xp) if loads is None else _with_loads(xp, loads)
  try:
    return fold(e, table, env or {}, what="evaluate")
  except ExprError as err:
    if Op.LOAD not in table and "no rule for LOAD" in str(err):
      raise UnevaluableError("cannot evaluate a tensor read without a `loads` callback", e) from None
    if "no value for variable" in str(err): raise UnevaluableError(str(err), e) from None
    raise


# -- the third form: the tape (minicomp.search.strategies.felix.tape), which runs many formulas as one JAX program. Every op
# works on float lanes, bools are 0.0 / 1.0, and each op sees ``(xp, a, b, c, mask)``: a chunk of lanes runs
# every op kind present and keeps each lane's own, so the inputs of the partial ops are masked where the
# lane runs another op (a NaN there would leak into the gradient through ``where``).

def _lanes(xp, x, m, fill): return xp.where(m, x, fill)


_PARTIAL_CALLS = {"exp": 0.0, "exp2": 0.0, "log": 1.0, "log2": 1.0, "sqrt": 1.0, "rsqrt": 1.0}
_TOTAL_CALLS = ("abs", "floor", "ceil", "round", "tanh", "sigmoid")


@functools.cache
def tape_table() -> dict[tuple, Callable]:
  """``(op name, variant) -> fn(xp, a, b, c, mask)``: the ops of :func:`_table` and :func:`_intrinsics` on
  float lanes. Variants: a CALL's intrinsic name; a CAST's ``"int"`` (float -> int: truncate) or
  ``"bool"``."""
  t: dict[tuple, Callable] = {
    ("CAST", None): lambda xp, a, b, c, m: a,
    ("CAST", "int"): lambda xp, a, b, c, m: xp.trunc(a),
    ("CAST", "bool"): lambda xp, a, b, c, m: (a != 0).astype(a.dtype),
    ("NEG", None): lambda xp, a, b, c, m: _table(xp)[Op.NEG](a),
    ("AND", None): lambda xp, a, b, c, m: ((a != 0) & (b != 0)).astype(a.dtype),
    ("OR", None): lambda xp, a, b, c, m: ((a != 0) | (b != 0)).astype(a.dtype),
    ("NOT", None): lambda xp, a, b, c, m: (a == 0).astype(a.dtype),
    ("SELECT", None): lambda xp, a, b, c, m: xp.where(a != 0, b, c),
    ("CALL", "pow"): lambda xp, a, b, c, m: xp.power(_lanes(xp, a, m, 1.0), _lanes(xp, b, m, 1.0)),
  }
  for op in (Op.ADD, Op.SUB, Op.MUL, Op.MIN, Op.MAX):
    t[(op.name, None)] = lambda xp, a, b, c, m, op=op: _table(xp)[op](a, b)
  for op in (Op.DIV, Op.FLOORDIV, Op.FLOORMOD):            # the divisor masked to 1
    t[(op.name, None)] = lambda xp, a, b, c, m, op=op: _table(xp)[op](a, _lanes(xp, b, m, 1.0))
  for op in (Op.LT, Op.LE, Op.GT, Op.GE, Op.EQ, Op.NE):
    t[(op.name, None)] = lambda xp, a, b, c, m, op=op: _table(xp)[op](a, b).astype(a.dtype)
  for name, fill in _PARTIAL_CALLS.items():
    t[("CALL", name)] = lambda xp, a, b, c, m, name=name, fill=fill: _intrinsics(xp)[name](_lanes(xp, a, m, fill))
  for name in _TOTAL_CALLS:
    t[("CALL", name)] = lambda xp, a, b, c, m, name=name: _intrinsics(xp)[name](a)
  return t
