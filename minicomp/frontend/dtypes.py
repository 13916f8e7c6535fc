"""ONNX / numpy element types <-> minicomp dtype names."""
from __future__ import annotations

import ml_dtypes
import numpy as np
from onnx import TensorProto

from minicomp.errors import UnsupportedOpError

ONNX_TO_DTYPE = {TensorProto.FLOAT: "float32", TensorProto.DOUBLE: "float64", TensorProto.INT64: "int64",
                 TensorProto.INT32: "int32", TensorProto.BOOL: "bool", TensorProto.FLOAT16: "float16",
                 TensorProto.BFLOAT16: "bfloat16"}
DTYPE_TO_ONNX = {v: k for k, v in ONNX_TO_DTYPE.items()}
DTYPE_TO_NP = {"float32": np.float32, "float64": np.float64, "int64": np.int64, "int32": np.int32, "bool": np.bool_,
               "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def onnx_to_dtype(elem_type: int, where: str = "") -> str:
  if elem_type not in ONNX_TO_DTYPE:
    name = TensorProto.DataType.Name(elem_type) if elem_type in TensorProto.DataType.values() else str(elem_type)
    raise UnsupportedOpError(f"{where}: element type {name} is not supported (supported: float32, float64, int64, int32, bool)")
  return ONNX_TO_DTYPE[elem_type]


def np_to_dtype(dt, where=None) -> str:
  dt = np.dtype(dt)
  for k, v in DTYPE_TO_NP.items():
    if np.dtype(v) == dt: return k
  w = f"{where.op_type} node {where.name!r}: " if where is not None and hasattr(where, "op_type") else ""
  raise UnsupportedOpError(f"{w}element type {dt} is not supported (supported: float32, float64, int64, int32, bool)")
