"""Readable text for expressions (Python-like; the C printer lives in codegen)."""
from __future__ import annotations

from minicomp.ir.ops import Op

_INFIX = {Op.ADD: ("+", 4), Op.SUB: ("-", 4), Op.MUL: ("*", 5), Op.DIV: ("/", 5), Op.FLOORDIV: ("//", 5),
          Op.FLOORMOD: ("%", 5), Op.LT: ("<", 3), Op.LE: ("<=", 3), Op.GT: (">", 3), Op.GE: (">=", 3),
          Op.EQ: ("==", 3), Op.NE: ("!=", 3), Op.AND: ("and", 1), Op.OR: ("or", 0)}


def expr_str(e, prec: int = 0) -> str:
  op = e.op
  if op is Op.CONST:
    return repr(e.arg) if e.dtype in ("int32", "bool", "float32") else f"{e.dtype}({e.arg!r})"
  if op is Op.VAR: return e.arg
  if op in _INFIX:
    sym, p = _INFIX[op]
    # left-associative: the right operand needs parentheses at equal precedence
    s = f"{expr_str(e.src[0], p)} {sym} {expr_str(e.src[1], p + 1)}"
    return f"({s})" if p < prec else s
  if op is Op.NEG: return f"-{expr_str(e.src[0], 6)}"
  if op is Op.NOT: return f"not {expr_str(e.src[0], 2)}"
  if op in (Op.MIN, Op.MAX): return f"{op.name.lower()}({expr_str(e.src[0])}, {expr_str(e.src[1])})"
  if op is Op.SELECT: return f"select({', '.join(expr_str(s) for s in e.src)})"
  if op is Op.CAST: return f"{e.dtype}({expr_str(e.src[0])})"
  if op is Op.CALL: return f"{e.arg}({', '.join(expr_str(s) for s in e.src)})"
  if op is Op.LOAD: return f"{e.arg.name}[{', '.join(expr_str(s) for s in e.src)}]"
  if op is Op.REDUCE:
    ax = ", ".join(a.name for a in e.arg.axes)
    init = f", init={expr_str(e.arg.init)}" if e.arg.init is not None else ""
    return f"{e.arg.combiner}({expr_str(e.src[0])}, axis=[{ax}]{init})"
  return f"{op.name}({', '.join(expr_str(s) for s in e.src)})"
