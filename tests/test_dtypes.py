"""The one dtype table (minicomp/ir/ops.py) and the views other modules take of it. No GPU needed."""
import ml_dtypes
import numpy as np

from minicomp.codegen import cuda, verify
from minicomp.ir import evaluate
from minicomp.ir.ops import C_TYPE, DTYPE_BYTES, DTYPE_INFO, DTYPES, NP_DTYPE, np_type
from minicomp.ir.expr import const
from minicomp.ir.loop import Buffer
from minicomp.search import features
from minicomp.search.features import formulas, memory
from minicomp.search.static import analytic, footprint


def test_ir_dtypes_have_every_fact():
  assert set(DTYPES) == {n for n, d in DTYPE_INFO.items() if d.c_type is not None}
  for n in DTYPE_INFO:
    assert np.dtype(np_type(n)).itemsize == DTYPE_INFO[n].bytes


def test_values_are_the_ones_the_emitter_and_models_always_used():
  assert C_TYPE == {"float32": "float", "float64": "double", "float16": "__half", "bfloat16": "__nv_bfloat16",
                    "int32": "int", "int64": "long long", "bool": "bool", "int8": "signed char", "uint8": "unsigned char",
                    "int16": "short", "uint16": "unsigned short", "uint32": "unsigned int", "uint64": "unsigned long long"}
  assert DTYPE_BYTES == {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int32": 4, "int64": 8, "bool": 1,
                         "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "uint32": 4, "uint64": 8}
  assert list(NP_DTYPE) == ["float32", "float64", "int32", "int64", "bool", "float16", "bfloat16", "int8", "uint8",
                            "int16", "uint16", "uint32", "uint64"]
  assert NP_DTYPE["bool"] is np.bool_ and NP_DTYPE["bfloat16"] is ml_dtypes.bfloat16
  assert evaluate._NP_DT is NP_DTYPE


def test_numpy_types_by_name_and_limits():
  """``np_to_dtype`` names every type by numpy's own name (bfloat16's is ml_dtypes'), and refuses the others;
  ``finfo`` gives bfloat16's limits (ml_dtypes', numpy has none) beside numpy's of the other floats."""
  import pytest

  from minicomp.errors import UnsupportedOpError
  from minicomp.frontend.dtypes import np_to_dtype
  from minicomp.ir.ops import finfo
  for n in NP_DTYPE:
    assert np_to_dtype(NP_DTYPE[n]) == n and np_to_dtype(np.zeros(1, NP_DTYPE[n]).dtype) == n
  with pytest.raises(UnsupportedOpError, match="complex64 is not supported"):
    np_to_dtype(np.complex64)
  assert finfo("bfloat16").max == float(ml_dtypes.finfo(ml_dtypes.bfloat16).max) > 3e38
  assert finfo("float16").max == 65504.0 and finfo("float32").eps == np.finfo(np.float32).eps


def test_one_source_of_truth():
  """Element sizes come from one place, ``Buffer.element_bytes`` over the table: the resource check, the static
  model and the features keep no table of their own."""
  assert cuda.C_TYPE is C_TYPE
  for m in (verify, footprint, features, analytic, formulas, memory):
    assert not hasattr(m, "DTYPE_BYTES"), m.__name__
  for dtype, nbytes in DTYPE_BYTES.items():
    assert Buffer("b", dtype, "global", const(1)).element_bytes == nbytes
  # a half tensor's shared tile and registers hold floats (docs/precision.md)
  assert Buffer("b", "float16", "shared", const(1)).element_bytes == Buffer("b", "bfloat16", "local", const(1)).element_bytes == 4
