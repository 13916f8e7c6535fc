"""Expression nodes: immutable, structurally equal, hashable.

One language serves index math, loop extents, predicates, tensor bodies and feature
formulas. A node is ``Expr(op, dtype, src, arg)``; Python operators build nodes::

    i, j = var("i"), var("j")
    e = (i * 4 + j) // 4          # Expr(FLOORDIV, int32, (..., 4))
    e is (i * 4 + j) // 4         # True: nodes are interned, equal expressions are one object
    lt(i, 4), i < 4               # comparison nodes (``==`` is identity; use ``eq(a, b)``)

Nodes are hash-consed: ``Expr.make`` returns the live node with the same op, dtype, children and
argument if there is one, so structural equality is identity (``==`` and ``is`` agree, in constant
time however deep the DAG) and a dict keyed by nodes is a memo that keeps its keys alive. The
intern table holds nodes weakly: a node nobody references leaves it. Pickling and copying go
through ``Expr.make``, so an unpickled expression is the interned one.

Integers are int32 by default (CUDA index math), Python floats promote to the other
operand's float dtype.
"""
from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Union

from minicomp.errors import ExprError
from minicomp.ir.ops import (BINARY, BITCAST, COMPARE, DOT4, FLOAT_DTYPES, INT_INTRINSICS, INTEGER_DTYPES, INTRINSICS,
                             NARROW_INT_DTYPES, Op, bitcastable, wrap_int)

ExprLike = Union["Expr", int, float, bool, "IterVar"]


class ExprOps:
  """Arithmetic operator overloads shared by :class:`Expr` and :class:`IterVar`."""
  __slots__ = ()

  def _expr(self) -> "Expr": raise NotImplementedError

  def __add__(self, o): return binary(Op.ADD, self, o)
  def __radd__(self, o): return binary(Op.ADD, o, self)
  def __sub__(self, o): return binary(Op.SUB, self, o)
  def __rsub__(self, o): return binary(Op.SUB, o, self)
  def __mul__(self, o): return binary(Op.MUL, self, o)
  def __rmul__(self, o): return binary(Op.MUL, o, self)
  def __truediv__(self, o): return binary(Op.DIV, self, o)
  def __rtruediv__(self, o): return binary(Op.DIV, o, self)
  def __floordiv__(self, o): return binary(Op.FLOORDIV, self, o)
  def __rfloordiv__(self, o): return binary(Op.FLOORDIV, o, self)
  def __mod__(self, o): return binary(Op.FLOORMOD, self, o)
  def __rmod__(self, o): return binary(Op.FLOORMOD, o, self)
  def __neg__(self): return Expr.make(Op.NEG, self._expr().dtype, (self._expr(),))
  def __lt__(self, o): return binary(Op.LT, self, o)
  def __le__(self, o): return binary(Op.LE, self, o)
  def __gt__(self, o): return binary(Op.GT, self, o)
  def __ge__(self, o): return binary(Op.GE, self, o)
  def __and__(self, o): return binary(Op.AND, self, o)
  def __or__(self, o): return binary(Op.OR, self, o)
  def __invert__(self): return Expr.make(Op.NOT, "bool", (as_expr(self, "bool"),))

  def __bool__(self):
    raise ExprError("an expression has no truth value; use select()/all_of() instead of Python `if`/`and`")


# the intern table: (op, dtype, children, argument key) -> a weak reference to the live node.
# Children are interned already, so comparing keys compares children by identity (constant time).
_INTERN: dict[tuple, "weakref.KeyedRef"] = {}
# taken to add a node and to drop a dead one (lookups need no lock); re-entrant because a node can
# die, and its callback run, while this thread holds it
_INTERN_LOCK = threading.RLock()


def _forget(ref: "weakref.KeyedRef") -> None:
  """Weak-reference callback: drop a dead node's entry, unless a new node took its key (checked
  under the lock: another thread may be adding that node)."""
  try:
    with _INTERN_LOCK:
      if _INTERN.get(ref.key) is ref: del _INTERN[ref.key]
  except (KeyError, TypeError, AttributeError):  # pragma: no cover (interpreter shutdown)
    pass


@dataclass(frozen=True, slots=True, eq=False, weakref_slot=True)
class Expr(ExprOps):
  """An immutable, interned expression node: equal expressions are the same object.

  Build nodes with :meth:`make` (or the operators and constructors below), never ``Expr(...)``.
  Equality is identity (``object.__eq__``); the hash is structural and computed once."""
  op: Op
  dtype: str
  src: tuple["Expr", ...] = ()
  arg: Any = None
  _h: int = field(default=0, repr=False, compare=False)

  @staticmethod
  def make(op: Op, dtype: str, src: tuple["Expr", ...] = (), arg: Any = None) -> "Expr":
    # LOAD's argument (a tensor or buffer) is matched by identity; a constant's by type and value
    # (0, 0.0 and False are different constants)
    key = (op, dtype, src, id(arg) if op is Op.LOAD else (type(arg), arg))
    ref = _INTERN.get(key)
    if ref is not None:
      e = ref()
      if e is not None: return e
    e = Expr(op, dtype, src, arg, hash((op, dtype, src, arg if op is not Op.LOAD else id(arg))))
    with _INTERN_LOCK:
      ref = _INTERN.get(key)
      old = ref() if ref is not None else None
      if old is not None: return old              # another thread made it first
      _INTERN[key] = weakref.KeyedRef(e, _forget, key)
    return e

  def _expr(self) -> "Expr": return self

  def __hash__(self) -> int: return self._h

  def __reduce__(self):
    return (Expr.make, (self.op, self.dtype, self.src, self.arg))

  def replace(self, **kw) -> "Expr":
    """A copy with some fields changed; ``self`` when nothing changes."""
    op, dtype, src, arg = (kw.get("op", self.op), kw.get("dtype", self.dtype), kw.get("src", self.src),
                           kw.get("arg", self.arg))
    return Expr.make(op, dtype, tuple(src), arg)

  # -- queries
  @property
  def is_const(self) -> bool: return self.op is Op.CONST
  @property
  def value(self):
    if self.op is not Op.CONST: raise ExprError(f"{self} is not a constant")
    return self.arg
  @property
  def name(self) -> str:
    if self.op is not Op.VAR: raise ExprError(f"{self} is not a variable")
    return self.arg

  def __repr__(self) -> str:
    from minicomp.ir.printer import expr_str
    return expr_str(self)


@dataclass(frozen=True)
class ReduceArg:
  """What a REDUCE node reduces: the combiner, the reduce axes and an optional init value."""
  combiner: str                      # "sum" | "max" | "min" | "prod"
  axes: tuple["IterVar", ...]
  init: Expr | None = None


class IterVar(ExprOps):
  """A named loop axis of a tensor expression: a variable with an extent.

  ``kind`` is ``"spatial"`` for output axes and ``"reduce"`` for reduction axes. An IterVar
  can be used directly in index expressions (``A[i, k]``, ``k * 2 + 1``).
  """
  __slots__ = ("var", "extent", "kind")

  def __init__(self, var: Expr, extent: Expr, kind: str):
    self.var, self.extent, self.kind = var, extent, kind

  def _expr(self) -> Expr: return self.var
  @property
  def name(self) -> str: return self.var.arg
  def __repr__(self) -> str: return f"IterVar({self.name}, {self.extent}, {self.kind})"
  def __hash__(self) -> int: return hash((self.var, self.kind))
  def __eq__(self, o: object) -> bool:
    return isinstance(o, IterVar) and self.var == o.var and self.extent == o.extent and self.kind == o.kind


# ---------------------------------------------------------------------------------------------
# constructors

_CONSTS: dict[tuple, "Expr"] = {}


def const(value, dtype: str | None = None) -> Expr:
  """A constant. ``dtype`` defaults to int32 / float32 / bool by the Python type."""
  if dtype is None:
    dtype = "bool" if isinstance(value, bool) else "int32" if isinstance(value, int) else "float32"
  if dtype == "bool": value = bool(value)
  elif dtype in NARROW_INT_DTYPES: value = wrap_int(value, dtype)
  elif dtype in INTEGER_DTYPES: value = int(value)
  elif dtype in FLOAT_DTYPES: value = float(value)
  else: raise ExprError(f"unknown dtype {dtype!r}")
  key = (dtype, value)
  e = _CONSTS.get(key)
  if e is None or type(e.arg) is not type(value):      # (0.0 == 0 == False share a key otherwise)
    e = Expr.make(Op.CONST, dtype, (), value)
    if len(_CONSTS) < 1 << 16: _CONSTS[key] = e           # constants are interned: lowering makes millions
  return e


def var(name: str, dtype: str = "int32") -> Expr:
  """A variable (a loop index or a symbolic schedule parameter)."""
  if not isinstance(name, str) or not name: raise ExprError(f"variable name must be a non-empty string, got {name!r}")
  return Expr.make(Op.VAR, dtype, (), name)


def as_expr(x: ExprLike, like: str | None = None) -> Expr:
  """Convert a Python number / IterVar to an Expr; numbers take dtype ``like`` when it fits."""
  if isinstance(x, ExprOps): return x._expr()
  if isinstance(x, bool): return const(x, "bool")
  if isinstance(x, int):
    return const(x, like if like in INTEGER_DTYPES or like in FLOAT_DTYPES else "int32")
  if isinstance(x, float): return const(x, like if like in FLOAT_DTYPES else "float32")
  try:
    import numpy as np
    if isinstance(x, np.generic): return as_expr(x.item(), like)
  except ImportError:  # pragma: no cover
    pass
  raise ExprError(f"cannot convert {x!r} ({type(x).__name__}) to an expression")


def _promote(a: str, b: str) -> str:
  if {a, b} == {"float16", "bfloat16"}: return "float32"      # neither holds the other
  order = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16", "bfloat16",
           "float32", "float64"]
  return a if order.index(a) >= order.index(b) else b


def binary(op: Op, a: ExprLike, b: ExprLike) -> Expr:
  """Build a binary node with dtype promotion (int + float -> float; python numbers adapt)."""
  if isinstance(a, ExprOps) and not isinstance(b, ExprOps): ea = a._expr(); eb = as_expr(b, ea.dtype)
  elif isinstance(b, ExprOps) and not isinstance(a, ExprOps): eb = b._expr(); ea = as_expr(a, eb.dtype)
  else: ea, eb = as_expr(a), as_expr(b)
  if op in (Op.AND, Op.OR):
    if ea.dtype != "bool" or eb.dtype != "bool": raise ExprError(f"{op.name} needs bool operands, got {ea.dtype}, {eb.dtype}")
    return Expr.make(op, "bool", (ea, eb))
  if ea.dtype != eb.dtype:
    t = _promote(ea.dtype, eb.dtype)
    ea, eb = cast(ea, t), cast(eb, t)
  t = ea.dtype
  if op in (Op.FLOORDIV, Op.FLOORMOD) and t not in INTEGER_DTYPES:
    raise ExprError(f"{op.name.lower()} needs integer operands, got {t}; use / for float division")
  if op is Op.DIV and t not in FLOAT_DTYPES:
    raise ExprError("`/` on integers is ambiguous; use // (floor division) or cast to float first")
  if op in COMPARE: return Expr.make(op, "bool", (ea, eb))
  if op not in BINARY: raise ExprError(f"{op} is not a binary operator")
  return Expr.make(op, t, (ea, eb))


def cast(x: ExprLike, dtype: str) -> Expr:
  e = as_expr(x)
  if e.dtype == dtype: return e
  if e.op is Op.CONST: return const(e.arg, dtype)
  return Expr.make(Op.CAST, dtype, (e,))


def min_(a: ExprLike, b: ExprLike) -> Expr: return binary(Op.MIN, a, b)
def max_(a: ExprLike, b: ExprLike) -> Expr: return binary(Op.MAX, a, b)
def eq(a: ExprLike, b: ExprLike) -> Expr: return binary(Op.EQ, a, b)
def ne(a: ExprLike, b: ExprLike) -> Expr: return binary(Op.NE, a, b)
def logical_not(a: ExprLike) -> Expr: return ~as_expr(a)


def all_of(*conds: ExprLike) -> Expr:
  """Conjunction of conditions (``true`` for none)."""
  out: Expr | None = None
  for c in conds:
    c = as_expr(c)
    out = c if out is None else binary(Op.AND, out, c)
  return const(True) if out is None else out


def select(cond: ExprLike, t: ExprLike, f: ExprLike) -> Expr:
  """``cond ? t : f`` (both branches evaluated; keep side-effect free)."""
  c = as_expr(cond)
  if c.dtype != "bool": raise ExprError(f"select condition must be bool, got {c.dtype}")
  if isinstance(t, ExprOps) or not isinstance(f, ExprOps): et = as_expr(t); ef = as_expr(f, et.dtype)
  else: ef = as_expr(f); et = as_expr(t, ef.dtype)
  if et.dtype != ef.dtype:
    d = _promote(et.dtype, ef.dtype); et, ef = cast(et, d), cast(ef, d)
  return Expr.make(Op.SELECT, et.dtype, (c, et, ef))


def call(name: str, *args: ExprLike, dtype: str | None = None) -> Expr:
  """An intrinsic call (``exp``, ``log``, ``sqrt``, ``rsqrt``, ``tanh``, ``erf``, ``pow``, ``sigmoid``, ...; the integer
  ones ``bitand``, ``bitor``, ``bitxor``, ``bitnot``, ``shl``, ``shr`` in their first operand's type; ``dot4`` of eight
  8-bit values, int32: :func:`dot4`; ``bitcast`` of a 32- or 64-bit float to an integer of its width or back: the
  same bits, ``dtype`` the type read)."""
  if name not in INTRINSICS: raise ExprError(f"unknown intrinsic {name!r}; known: {sorted(INTRINSICS)}")
  if len(args) != INTRINSICS[name]: raise ExprError(f"{name} takes {INTRINSICS[name]} argument(s), got {len(args)}")
  if name == BITCAST:
    e = as_expr(args[0])
    if not bitcastable(e.dtype, dtype):
      raise ExprError(f"bitcast reads a 32- or 64-bit float as an integer of its width or back; {e.dtype} to {dtype}")
    return Expr.make(Op.CALL, dtype, (e,), name)
  if name == DOT4:
    es = [as_expr(a) for a in args]
    for half in (es[:4], es[4:]):
      if half[0].dtype not in ("int8", "uint8") or any(e.dtype != half[0].dtype for e in half):
        raise ExprError(f"dot4 takes four int8 or four uint8 values per side, got {[e.dtype for e in half]}")
    return Expr.make(Op.CALL, "int32", tuple(es), name)
  if name in INT_INTRINSICS:
    es = [as_expr(a, "int32") for a in args]
    d = dtype or es[0].dtype
    if d not in INTEGER_DTYPES: raise ExprError(f"{name} takes integers, got {d}")
    return Expr.make(Op.CALL, d, tuple(cast(e, d) for e in es), name)
  es = [as_expr(a, "float32") for a in args]
  d = dtype or (es[0].dtype if es[0].dtype in FLOAT_DTYPES else "float32")
  es = [cast(e, d) if name != "abs" else e for e in es]
  return Expr.make(Op.CALL, d if name != "abs" else es[0].dtype, tuple(es), name)


def exp(x): return call("exp", x)
def log(x): return call("log", x)
def sqrt(x): return call("sqrt", x)
def rsqrt(x): return call("rsqrt", x)
def tanh(x): return call("tanh", x)
def erf(x): return call("erf", x)
def sigmoid(x): return call("sigmoid", x)
def power(x, y): return call("pow", x, y)
def abs_(x): return call("abs", x)


def dot4(a, b) -> Expr:
  """``a[0] * b[0] + ... + a[3] * b[3]`` in int32, ``a`` four int8 (or four uint8) values, ``b`` likewise: one dp4a."""
  return call(DOT4, *a, *b)


# ---------------------------------------------------------------------------------------------
# traversal helpers

def walk(e: Expr, skip=None):
  """Yield every node of ``e`` once, children before parents (iteratively: formulas nest thousands
  deep). Nodes in ``skip`` (a container of nodes already handled, e.g. a node-keyed memo the caller
  fills while it iterates) are not entered."""
  seen: set[Expr] = set()
  stack: list[tuple[Expr, bool]] = [(e, False)]
  while stack:
    n, done = stack.pop()
    if done:
      yield n; continue
    if n in seen or (skip is not None and n in skip): continue
    seen.add(n)
    stack.append((n, True))
    stack.extend((s, False) for s in reversed(n.src))


_FREE_VARS: "weakref.WeakKeyDictionary[Expr, frozenset]" = weakref.WeakKeyDictionary()


def free_vars(e: Expr) -> set[str]:
  """Names of the variables in ``e`` (remembered per node while it lives: nodes are immutable and interned, and
  lowering and the analytic model ask again and again about the same indices)."""
  got = _FREE_VARS.get(e)
  if got is None:
    got = frozenset(n.arg for n in walk(e) if n.op is Op.VAR)
    with _INTERN_LOCK: _FREE_VARS[e] = got
  return set(got)
