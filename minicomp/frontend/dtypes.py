"""ONNX / numpy element types <-> minicomp dtype names.

The ONNX codes are ``TensorProto.DataType`` values, fixed by the ONNX spec (onnx.proto), written here
as ints so that this module (and ``import minicomp``) needs no onnx; tests/test_import_without_onnx.py
checks them against ``onnx.TensorProto``.
"""
from __future__ import annotations

import numpy as np

from minicomp.errors import UnsupportedOpError
from minicomp.ir.ops import np_type

DTYPE_TO_ONNX = {"float32": 1, "float64": 11, "int64": 7, "int32": 6, "bool": 9, "float16": 10, "bfloat16": 16,
                 "int8": 3, "uint8": 2, "int16": 5, "uint16": 4, "uint32": 12, "uint64": 13}
ONNX_TO_DTYPE = {v: k for k, v in DTYPE_TO_ONNX.items()}
_SUPPORTED = ", ".join(DTYPE_TO_ONNX)
DTYPE_TO_NP = {n: np_type(n) for n in DTYPE_TO_ONNX}     # from the one dtype table (minicomp.ir.ops)


def onnx_to_dtype(elem_type: int, where: str = "") -> str:
  if elem_type not in ONNX_TO_DTYPE:
    from onnx import TensorProto   # only an ONNX model has other element types
    name = TensorProto.DataType.Name(elem_type) if elem_type in TensorProto.DataType.values() else str(elem_type)
    raise UnsupportedOpError(f"{where}: element type {name} is not supported (supported: {_SUPPORTED})")
  return ONNX_TO_DTYPE[elem_type]


def np_to_dtype(dt, where=None) -> str:
  dt = np.dtype(dt)
  for k, v in DTYPE_TO_NP.items():
    if np.dtype(v) == dt: return k
  w = f"{where.op_type} node {where.name!r}: " if where is not None and hasattr(where, "op_type") else ""
  raise UnsupportedOpError(f"{w}element type {dt} is not supported (supported: {_SUPPORTED})")
