"""The one operator enum of minicomp's expression language, grouped by role."""
from __future__ import annotations

from enum import Enum, auto


class Op(Enum):
  # leaves
  CONST = auto()   # arg: the Python value
  VAR = auto()     # arg: the variable's name (names are unique within a program)
  # arithmetic (int and float)
  ADD = auto(); SUB = auto(); MUL = auto()
  DIV = auto()     # true division, float only
  FLOORDIV = auto(); FLOORMOD = auto()   # floor semantics (Python's // and %), int only
  MIN = auto(); MAX = auto(); NEG = auto()
  # comparisons -> bool
  LT = auto(); LE = auto(); GT = auto(); GE = auto(); EQ = auto(); NE = auto()
  # logic on bool
  AND = auto(); OR = auto(); NOT = auto()
  # control / conversion
  SELECT = auto()  # src: (cond, true_value, false_value)
  CAST = auto()    # dtype: the target dtype
  CALL = auto()    # arg: intrinsic name ("exp", "log", "sqrt", "rsqrt", "tanh", "erf", "pow", "sigmoid", "abs", ...)
  # tensors
  LOAD = auto()    # arg: the tensor / buffer read; src: indices
  REDUCE = auto()  # arg: ReduceArg; src: (body,)


BINARY = {Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.FLOORDIV, Op.FLOORMOD, Op.MIN, Op.MAX}
COMPARE = {Op.LT, Op.LE, Op.GT, Op.GE, Op.EQ, Op.NE}
LOGIC = {Op.AND, Op.OR, Op.NOT}
COMMUTATIVE = {Op.ADD, Op.MUL, Op.MIN, Op.MAX, Op.EQ, Op.NE, Op.AND, Op.OR}

# intrinsics and their arity; "expensive" ones matter to the sketch rules (IsStrictInlinable)
INTRINSICS = {"exp": 1, "log": 1, "sqrt": 1, "rsqrt": 1, "tanh": 1, "erf": 1, "pow": 2, "sigmoid": 1,
              "abs": 1, "floor": 1, "ceil": 1, "exp2": 1, "log2": 1, "round": 1}
EXPENSIVE_INTRINSICS = {"exp", "log", "sqrt", "rsqrt", "tanh", "erf", "pow", "sigmoid", "exp2", "log2"}

DTYPES = ("bool", "int32", "int64", "float16", "float32", "float64")
FLOAT_DTYPES = ("float16", "float32", "float64")
INT_DTYPES = ("int32", "int64")
