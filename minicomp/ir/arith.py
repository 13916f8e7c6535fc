"""Float64 expression builders that fold constants: the one kit behind Ansor's feature formulas
(:mod:`minicomp.search.features`) and Felix's smoothing rules (:mod:`minicomp.search.strategies.felix.smooth`).

A builder returns an Expr; when every operand is a constant it returns the constant, computed with the
numpy tables of :mod:`minicomp.ir.evaluate`. Folding while building and evaluating the unfolded Expr
later therefore run the same float64 operations, bit for bit (numpy's exp and log are not libm's: with
AVX-512 they differ in the last bit for a few percent of arguments). That is what lets the feature
extractor run one code path on a concrete program (every node folds as it is built) and on a symbolic
one (Exprs of the schedule variables, evaluated later to exactly the concrete numbers)::

    >>> from minicomp.ir.expr import var
    >>> x = var("x")                            # int32, as extents and indices are
    >>> add(mul(x, 2), 1.0)
    float64(x) * float64(2.0) + float64(1.0)
    >>> add(mul(3, 2), 1.0)
    float64(7.0)

Operands are Exprs or Python numbers: numbers become float64 constants, int and bool Exprs are cast
(``fl``). Comparisons and ``land`` / ``lor`` / ``lnot`` build bool Exprs, ``ifl`` selects between float64
values, ``make(op, dtype, *src)`` is the folding constructor for any op and dtype (index arithmetic).

Besides constants, the builders drop the identities that hold bit for bit for every float64: ``x * 1``,
``1 * x``, ``x - 0``, ``-(-x)``, ``select(c, t, t)`` and constant conditions. With ``finite=True``
(Felix's smoothing rules: operands finite by construction, output approximate anyway) ``add``, ``sub``,
``mul`` and ``div`` also drop those that assume finite operands and ignore the sign of zero: ``x + 0``,
``0 + x``, ``x - x``, ``x * 0``, ``0 * x`` and ``0 / b``; and they divide by a constant as a multiplication
by its reciprocal (folded constants too: ``6 / 3`` is ``6 * (1 / 3)``), within an ulp of the quotient.
Feature formulas must not: ``x / 10`` and ``x * 0.1`` differ in the last bit, and ``-0.0 + 0`` is ``+0.0``::

    >>> div(x, 10), div(x, 10, finite=True)
    (float64(x) / float64(10.0), float64(x) * float64(0.1))
    >>> add(x, 0.0), add(x, 0.0, finite=True), mul(x, 0, finite=True)
    (float64(x) + float64(0.0), float64(x), float64(0.0))
"""
from __future__ import annotations

import math

import numpy as np

from minicomp.errors import ExprError
from minicomp.ir.evaluate import _intrinsics, _table
from minicomp.ir.expr import Expr, const
from minicomp.ir.ops import Op

F64 = "float64"
Num = Expr | int | float | bool
_NP, _NP_CALL = _table(np), _intrinsics(np)


def make(op: Op, dtype: str, *src: Expr) -> Expr:
  """``Expr.make(op, dtype, src)``, or its value (evaluate's numpy table) when every operand is a constant."""
  for s in src:
    if s.op is not Op.CONST: return Expr.make(op, dtype, src)
  return const(_NP[op](*[s.arg for s in src]), dtype)


def num(x: Num, dtype: str = F64) -> Expr:
  """``x`` as an Expr: Exprs as they are, Python bools as bool constants, other numbers as ``dtype`` ones."""
  if isinstance(x, Expr): return x
  return const(x, "bool" if isinstance(x, bool) else dtype)


def fl(x: Num) -> Expr:
  """``x`` as float64 (extents and indices are int32 Exprs, conditions bool ones)."""
  if isinstance(x, Expr):
    if x.dtype == F64: return x
    if x.op is Op.CONST: return const(float(x.arg), F64)
    return Expr.make(Op.CAST, F64, (x,))
  return const(float(x), F64)


def is_const(e: Expr, v: float) -> bool:
  """Whether ``e`` is the constant ``v``."""
  return e.op is Op.CONST and e.arg == v


# ---------------------------------------------------------------------------------------------
# arithmetic (``finite``: the extra identities of the module docstring)

def add(a: Num, b: Num, finite: bool = False) -> Expr:
  a, b = fl(a), fl(b)
  if a.op is Op.CONST and b.op is Op.CONST: return const(_NP[Op.ADD](a.arg, b.arg), F64)
  if finite:
    if is_const(a, 0.0): return b
    if is_const(b, 0.0): return a
  return Expr.make(Op.ADD, F64, (a, b))


def sub(a: Num, b: Num, finite: bool = False) -> Expr:
  a, b = fl(a), fl(b)
  if a.op is Op.CONST and b.op is Op.CONST: return const(_NP[Op.SUB](a.arg, b.arg), F64)
  if is_const(b, 0.0) and (finite or math.copysign(1.0, b.arg) > 0): return a   # -0.0 - -0.0 is +0.0
  if finite and a is b: return const(0.0, F64)
  return Expr.make(Op.SUB, F64, (a, b))


def mul(a: Num, b: Num, finite: bool = False) -> Expr:
  a, b = fl(a), fl(b)
  if a.op is Op.CONST and b.op is Op.CONST: return const(_NP[Op.MUL](a.arg, b.arg), F64)
  if is_const(a, 1.0): return b
  if is_const(b, 1.0): return a
  if finite and (is_const(a, 0.0) or is_const(b, 0.0)): return const(0.0, F64)
  return Expr.make(Op.MUL, F64, (a, b))


def div(a: Num, b: Num, finite: bool = False) -> Expr:
  """``a / b``. ``finite``: only for denominators positive by construction (sqrt(x^2 + h^2), constants);
  a constant denominator becomes a multiplication by its reciprocal, and 0 is an error."""
  a, b = fl(a), fl(b)
  if finite:
    if b.op is Op.CONST:
      if b.arg == 0.0: raise ExprError(f"division by the constant 0 in {a} / {b}")
      return mul(a, const(1.0 / b.arg, F64), finite=True)
    if is_const(a, 0.0): return a
    return Expr.make(Op.DIV, F64, (a, b))
  if a.op is Op.CONST and b.op is Op.CONST: return const(_NP[Op.DIV](a.arg, b.arg), F64)
  return Expr.make(Op.DIV, F64, (a, b))


def neg(a: Num) -> Expr:
  a = fl(a)
  if a.op is Op.CONST: return const(_NP[Op.NEG](a.arg), F64)
  if a.op is Op.NEG: return a.src[0]
  return Expr.make(Op.NEG, F64, (a,))


def fmin(a: Num, b: Num) -> Expr: return make(Op.MIN, F64, fl(a), fl(b))
def fmax(a: Num, b: Num) -> Expr: return make(Op.MAX, F64, fl(a), fl(b))
def imin(a: Expr, b: Expr) -> Expr: return make(Op.MIN, a.dtype, a, b)


def call(name: str, a: Num) -> Expr:
  """The float64 intrinsic ``name`` (``exp``, ``log``, ``log2``, ``sqrt``, ...) of ``a``."""
  a = fl(a)
  if a.op is Op.CONST: return const(float(_NP_CALL[name](a.arg)), F64)
  return Expr.make(Op.CALL, F64, (a,), name)


def sqrt(a: Num) -> Expr: return call("sqrt", a)
def exp(a: Num) -> Expr: return call("exp", a)
def log2(a: Num) -> Expr: return call("log2", a)


def slog(x: Num) -> Expr:
  """Ansor's signed log, ``sign(x) * log2(|x| + 1)``."""
  x = fl(x)
  return mul(ifl(ge(x, 0.0), 1.0, -1.0), log2(add(fmax(x, sub(0.0, x)), 1.0)))


# ---------------------------------------------------------------------------------------------
# comparisons, logic, selects

def gt(a: Num, b: Num) -> Expr: return make(Op.GT, "bool", fl(a), fl(b))
def ge(a: Num, b: Num) -> Expr: return make(Op.GE, "bool", fl(a), fl(b))
def ne(a: Num, b: Num) -> Expr: return make(Op.NE, "bool", fl(a), fl(b))
def eq(a: Num, b: Num) -> Expr: return make(Op.EQ, "bool", fl(a), fl(b))


def ifl(c: Num, t: Num, f: Num) -> Expr:
  """float64 ``select(c, t, f)``."""
  c = num(c)
  if c.op is Op.CONST: return fl(t) if c.arg else fl(f)
  t, f = fl(t), fl(f)
  return t if t is f else Expr.make(Op.SELECT, F64, (c, t, f))


def onehot(c: Num) -> Expr: return ifl(c, 1.0, 0.0)


def land(*cs: Num) -> Expr:
  out = num(True)
  for c in cs:
    c = num(c)
    if c.op is Op.CONST: out = out if c.arg else c
    elif out.op is Op.CONST: out = c if out.arg else out
    else: out = Expr.make(Op.AND, "bool", (out, c))
  return out


def lor(a: Num, b: Num) -> Expr:
  a, b = num(a), num(b)
  if a.op is Op.CONST: return b if not a.arg else a
  if b.op is Op.CONST: return a if not b.arg else b
  return Expr.make(Op.OR, "bool", (a, b))


def lnot(a: Num) -> Expr: return make(Op.NOT, "bool", num(a))
