"""ONNX / numpy element types <-> minicomp dtype names.

The ONNX codes are ``TensorProto.DataType`` values, fixed by the ONNX spec (onnx.proto), written here
as ints so that this module (and ``import minicomp``) needs no onnx; tests/test_import_without_onnx.py
checks them against ``onnx.TensorProto``.
"""
from __future__ import annotations

import numpy as np

from minicomp.errors import ModelError, UnsupportedOpError
from minicomp.ir.ops import NP_DTYPE

DTYPE_TO_ONNX = {"float32": 1, "float64": 11, "int64": 7, "int32": 6, "bool": 9, "float16": 10, "bfloat16": 16,
                 "int8": 3, "uint8": 2, "int16": 5, "uint16": 4, "uint32": 12, "uint64": 13}
ONNX_TO_DTYPE = {v: k for k, v in DTYPE_TO_ONNX.items()}
_SUPPORTED = ", ".join(DTYPE_TO_ONNX)
DTYPE_TO_NP = NP_DTYPE     # the one dtype table's (minicomp.ir.ops; every ONNX type minicomp takes is in it)


def onnx_to_dtype(elem_type: int, where: str = "") -> str:
  if elem_type not in ONNX_TO_DTYPE:
    from onnx import TensorProto   # only an ONNX model has other element types
    name = TensorProto.DataType.Name(elem_type) if elem_type in TensorProto.DataType.values() else str(elem_type)
    raise UnsupportedOpError(f"{where}: element type {name} is not supported (supported: {_SUPPORTED})")
  return ONNX_TO_DTYPE[elem_type]


def np_to_dtype(dt, where=None) -> str:
  dt = np.dtype(dt)
  if dt.name in DTYPE_TO_ONNX and np.dtype(DTYPE_TO_NP[dt.name]) == dt: return dt.name   # (numpy's names are ours)
  w = f"{where.op_type} node {where.name!r}: " if where is not None and hasattr(where, "op_type") else ""
  raise UnsupportedOpError(f"{w}element type {dt} is not supported (supported: {_SUPPORTED})")


def onnx_array(t, where: str) -> np.ndarray:
  """ONNX TensorProto ``t`` (an initializer, a Constant's value, a tensor attribute) as an array; an element type
  minicomp lacks, external data, or data whose size does not match its dims and type is an error naming
  ``where`` ("initializer 'w'"), never a raw ValueError of onnx's."""
  from onnx import TensorProto, numpy_helper   # (only an ONNX model has TensorProtos)
  onnx_to_dtype(t.data_type, where)
  if t.data_location == TensorProto.EXTERNAL:
    raise ModelError(f"{where}: external data is not loaded; load the model with onnx.load(path) (which reads it) first")
  try:
    arr = numpy_helper.to_array(t)
  except (ValueError, TypeError) as e:
    raise ModelError(f"{where}: its data does not match its type {TensorProto.DataType.Name(t.data_type)} and "
                     f"dims {list(t.dims)} ({e})") from None
  if tuple(arr.shape) != tuple(t.dims):
    raise ModelError(f"{where}: holds {arr.size} values for dims {list(t.dims)}")
  return arr
