"""The one operator enum of minicomp's expression language, grouped by role, and the one table of element types."""
from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
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
TRIG = ("sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh")
INTRINSICS = {"exp": 1, "log": 1, "sqrt": 1, "rsqrt": 1, "tanh": 1, "erf": 1, "pow": 2, "sigmoid": 1,
              "abs": 1, "floor": 1, "ceil": 1, "exp2": 1, "log2": 1, "round": 1, "fmod": 2, **{t: 1 for t in TRIG},
              "bitand": 2, "bitor": 2, "bitxor": 2, "bitnot": 1, "shl": 2, "shr": 2, "dot4": 8, "bitcast": 1}
# dot4(a0, a1, a2, a3, b0, b1, b2, b3): the int32 sum of the four products of 8-bit integers (each a's one type, each
# b's one type, int8 or uint8): what one dp4a instruction computes on the bytes of two 32-bit words (codegen/cuda.py
# packs the operands, from one aligned word load where they are four consecutive bytes of a buffer)
DOT4 = "dot4"
# bitcast(x) to a float or an integer type of x's width (32 or 64 bits; integers among themselves convert by CAST,
# which keeps the bits): the same bits read as the other type
BITCAST = "bitcast"
_BITCAST_WIDTHS = ({"float32", "int32", "uint32"}, {"float64", "int64", "uint64"})

# integer intrinsics: C's & | ^ ~ << >> in the operands' integer type (a shift by a negative amount or by the width or
# more gives the sign fill, as ONNX's BitShift-28 and numpy: codegen/cuda.py _shift)
INT_INTRINSICS = ("bitand", "bitor", "bitxor", "bitnot", "shl", "shr")
EXPENSIVE_INTRINSICS = {"exp", "log", "sqrt", "rsqrt", "tanh", "erf", "pow", "sigmoid", "exp2", "log2", "fmod", *TRIG}

DTYPES = ("bool", "int32", "int64", "float16", "bfloat16", "float32", "float64",
          "int8", "uint8", "int16", "uint16", "uint32", "uint64")
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
HALF_DTYPES = ("float16", "bfloat16")      # stored in 2 bytes, computed in float32 (codegen/cuda.py)
INT_DTYPES = ("int32", "int64")            # the integer types of indices and affine index math (isl, poly, linear)
# Integer value types beside those (ONNX's tensors, quantized models): no index is ever of these types, and every
# arithmetic result wraps to its type (codegen casts after each operation: C would compute in int)
NARROW_INT_DTYPES = ("int8", "uint8", "int16", "uint16", "uint32", "uint64")
UNSIGNED_DTYPES = ("uint8", "uint16", "uint32", "uint64")
INTEGER_DTYPES = INT_DTYPES + NARROW_INT_DTYPES
INT_BITS = {"int8": 8, "uint8": 8, "int16": 16, "uint16": 16, "int32": 32, "uint32": 32, "int64": 64, "uint64": 64}


def bitcastable(src: str, dst: str) -> bool:
  """``bitcast`` reads ``src``'s bits as ``dst``: a 32- or 64-bit float and an integer type of its width."""
  return any(src in w and dst in w for w in _BITCAST_WIDTHS) and (src in FLOAT_DTYPES) != (dst in FLOAT_DTYPES)


def int_range(dtype: str) -> tuple[int, int]:
  """The lowest and highest value of integer type ``dtype``."""
  bits = INT_BITS[dtype]
  return (0, (1 << bits) - 1) if dtype in UNSIGNED_DTYPES else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)


def wrap_int(v: int, dtype: str) -> int:
  """``v`` modulo 2**bits into ``dtype``'s range (two's complement for the signed types), as C's conversion
  to that type does on every platform minicomp targets."""
  bits = INT_BITS[dtype]
  v = int(v) % (1 << bits)
  return v - (1 << bits) if dtype not in UNSIGNED_DTYPES and v >= 1 << (bits - 1) else v


@dataclass(frozen=True)
class DType:
  """One element type: its size in bytes, its numpy scalar type (``module.name``, imported on use), its CUDA C type."""
  name: str
  bytes: int
  numpy: str             # "numpy.float32", "ml_dtypes.bfloat16"
  c_type: str | None     # None: not an IR dtype


# Every element type minicomp knows (all are IR types, DTYPES). The order is the one error messages list
# (codegen.kernel.NP_DTYPE).
DTYPE_INFO = {d.name: d for d in (
  DType("float32", 4, "numpy.float32", "float"), DType("float64", 8, "numpy.float64", "double"),
  DType("int32", 4, "numpy.int32", "int"), DType("int64", 8, "numpy.int64", "long long"),
  DType("bool", 1, "numpy.bool_", "bool"), DType("float16", 2, "numpy.float16", "__half"),
  DType("bfloat16", 2, "ml_dtypes.bfloat16", "__nv_bfloat16"), DType("int8", 1, "numpy.int8", "signed char"),
  DType("uint8", 1, "numpy.uint8", "unsigned char"), DType("int16", 2, "numpy.int16", "short"),
  DType("uint16", 2, "numpy.uint16", "unsigned short"), DType("uint32", 4, "numpy.uint32", "unsigned int"),
  DType("uint64", 8, "numpy.uint64", "unsigned long long"))}

DTYPE_BYTES = {n: DTYPE_INFO[n].bytes for n in DTYPES}     # IR dtype -> bytes per element
C_TYPE = {n: DTYPE_INFO[n].c_type for n in DTYPES}         # IR dtype -> CUDA C type


def np_type(dtype: str) -> type:
  """The numpy scalar type of ``dtype`` (``np.float32``, ``np.bool_``, ``ml_dtypes.bfloat16``), imported here."""
  module, _, name = DTYPE_INFO[dtype].numpy.rpartition(".")
  return getattr(importlib.import_module(module), name)


class _NumpyTypes(Mapping):
  """dtype name -> numpy scalar type, each imported on first use: ml_dtypes (bfloat16's) takes 0.3-0.6 s to import
  (its extension registers a dozen types' casts and ufuncs), which a compile's worker processes paid at start-up for
  a type most models never use."""

  def __init__(self):
    self._known: dict[str, type] = {}

  def __getitem__(self, name: str) -> type:
    t = self._known.get(name)
    if t is None: t = self._known[name] = np_type(name)      # (KeyError for a name the table lacks)
    return t

  def __iter__(self): return iter(DTYPE_INFO)

  def __len__(self) -> int: return len(DTYPE_INFO)


NP_DTYPE: Mapping[str, type] = _NumpyTypes()   # dtype name -> numpy scalar type (bfloat16 too, for boundaries)


def finfo(dtype: str):
  """The machine limits of float ``dtype`` (numpy's finfo; ml_dtypes' for bfloat16, which numpy does not know)."""
  if dtype == "bfloat16":
    import ml_dtypes
    return ml_dtypes.finfo(NP_DTYPE[dtype])
  import numpy as np
  return np.finfo(NP_DTYPE[dtype])
