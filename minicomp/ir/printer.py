"""Readable text for expressions (Python-like; the C printer lives in codegen): a fold table.

Each node folds to ``(text, precedence)``; a parent puts a child in parentheses when the child binds
less tightly than the parent's operand position needs. Infix operators are left-associative, so the
right operand needs one level more than the operator. Calls, loads and leaves never need parentheses
(precedence ``_ATOM``).
"""
from __future__ import annotations

from minicomp.ir.ops import Op
from minicomp.ir.rewrite import fold

_INFIX = {Op.ADD: ("+", 4), Op.SUB: ("-", 4), Op.MUL: ("*", 5), Op.DIV: ("/", 5), Op.FLOORDIV: ("//", 5),
          Op.FLOORMOD: ("%", 5), Op.LT: ("<", 3), Op.LE: ("<=", 3), Op.GT: (">", 3), Op.GE: (">=", 3),
          Op.EQ: ("==", 3), Op.NE: ("!=", 3), Op.AND: ("and", 1), Op.OR: ("or", 0)}
_ATOM = 99


def _at(kid: tuple[str, int], prec: int) -> str:
  """A child's text in an operand position that needs precedence ``prec``."""
  return f"({kid[0]})" if kid[1] < prec else kid[0]


def _infix(sym: str, p: int):
  return lambda ctx, n, k: (f"{_at(k[0], p)} {sym} {_at(k[1], p + 1)}", p)


def _const(ctx, n, k):
  return (repr(n.arg) if n.dtype in ("int32", "bool", "float32") else f"{n.dtype}({n.arg!r})", _ATOM)


def _args(k) -> str: return ", ".join(t for t, _ in k)


def _reduce(ctx, n, k):
  ax = ", ".join(a.name for a in n.arg.axes)
  init = f", init={expr_str(n.arg.init)}" if n.arg.init is not None else ""
  return (f"{n.arg.combiner}({k[0][0]}, axis=[{ax}]{init})", _ATOM)


PRINT = {op: _infix(sym, p) for op, (sym, p) in _INFIX.items()} | {
  Op.CONST: _const,
  Op.VAR: lambda ctx, n, k: (n.arg, _ATOM),
  Op.NEG: lambda ctx, n, k: (f"-{_at(k[0], 6)}", _ATOM),
  Op.NOT: lambda ctx, n, k: (f"not {_at(k[0], 2)}", _ATOM),
  Op.MIN: lambda ctx, n, k: (f"min({_args(k)})", _ATOM),
  Op.MAX: lambda ctx, n, k: (f"max({_args(k)})", _ATOM),
  Op.SELECT: lambda ctx, n, k: (f"select({_args(k)})", _ATOM),
  Op.CAST: lambda ctx, n, k: (f"{n.dtype}({k[0][0]})", _ATOM),
  Op.CALL: lambda ctx, n, k: (f"{n.arg}({_args(k)})", _ATOM),
  Op.LOAD: lambda ctx, n, k: (f"{n.arg.name}[{_args(k)}]", _ATOM),
  Op.REDUCE: _reduce,
}


def expr_str(e) -> str:
  """``e`` as Python-like text (what ``repr(expr)`` shows)."""
  return fold(e, PRINT, what="expr_str")[0]
