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

from minicomp.errors import ExprError
from minicomp.ir.expr import Expr
from minicomp.ir.ops import Op


def _erf(xp):
  if xp is np: return np.vectorize(math.erf, otypes=[np.float64])
  import jax.scipy.special as jss
  return jss.erf


@functools.cache
def _intrinsics(xp) -> dict[str, Callable]:
  return {"exp": xp.exp, "log": xp.log, "sqrt": xp.sqrt, "rsqrt": lambda x: 1 / xp.sqrt(x), "tanh": xp.tanh,
          "erf": _erf(xp), "pow": xp.power, "sigmoid": lambda x: 1 / (1 + xp.exp(-x)), "abs": xp.abs,
          "floor": xp.floor, "ceil": xp.ceil, "exp2": xp.exp2, "log2": xp.log2, "round": xp.round}


@functools.cache
def _table(xp) -> dict[Op, Callable]:
  return {Op.ADD: lambda a, b: a + b, Op.SUB: lambda a, b: a - b, Op.MUL: lambda a, b: a * b,
          Op.DIV: lambda a, b: a / b, Op.FLOORDIV: xp.floor_divide, Op.FLOORMOD: xp.mod,
          Op.MIN: xp.minimum, Op.MAX: xp.maximum, Op.NEG: lambda a: -a,
          Op.LT: lambda a, b: a < b, Op.LE: lambda a, b: a <= b, Op.GT: lambda a, b: a > b,
          Op.GE: lambda a, b: a >= b, Op.EQ: lambda a, b: a == b, Op.NE: lambda a, b: a != b,
          Op.AND: xp.logical_and, Op.OR: xp.logical_or, Op.NOT: xp.logical_not, Op.SELECT: xp.where}


_NP_DT = {"bool": np.bool_, "int32": np.int32, "int64": np.int64, "float16": np.float16, "float32": np.float32,
          "float64": np.float64}


def evaluate(e: Expr, env: dict[str, Any] | None = None, xp=np, loads: Callable | None = None) -> Any:
  """Evaluate ``e``. ``env`` maps variable names to values; ``loads(node, index_values)`` serves LOADs."""
  env = env or {}
  table, intr = _table(xp), _intrinsics(xp)
  memo: dict[Expr, Any] = {}

  def go(n: Expr):
    if n in memo: return memo[n]
    op = n.op
    if op is Op.CONST: r = n.arg
    elif op is Op.VAR:
      if n.arg not in env: raise ExprError(f"no value for variable {n.arg!r} in {e}")
      r = env[n.arg]
    elif op is Op.CALL: r = intr[n.arg](*[go(s) for s in n.src])
    elif op is Op.CAST:
      v = go(n.src[0])
      r = xp.asarray(v).astype(_NP_DT[n.dtype]) if xp is not np or isinstance(v, np.ndarray) else _NP_DT[n.dtype](v)
      if n.dtype.startswith("int") and xp is np and not isinstance(v, (int, np.integer, np.ndarray)): r = _NP_DT[n.dtype](math.trunc(v))
    elif op is Op.LOAD:
      if loads is None: raise ExprError(f"cannot evaluate tensor read {n} without a `loads` callback")
      r = loads(n, [go(s) for s in n.src])
    elif op is Op.REDUCE: raise ExprError(f"cannot evaluate a reduction {n} as a scalar expression")
    else:
      fn = table.get(op)
      if fn is None: raise ExprError(f"no evaluator for {op}")
      r = fn(*[go(s) for s in n.src])
    memo[n] = r
    return r
  return go(e)
