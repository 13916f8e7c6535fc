"""The cuda-bindings backend's marshalling, against a recording stand-in for ``cuda.bindings.driver``
(no GPU here). What reaches cuLaunchKernel is read back through the kernelParams address."""
import ctypes
import enum
import types

import numpy as np
import pytest

from minicomp.codegen.driver import DriverError
from minicomp.codegen.driver_cuda import CudaDriver


class CUresult(enum.Enum):
  CUDA_SUCCESS = 0
  CUDA_ERROR_INVALID_VALUE = 1
  CUDA_ERROR_ILLEGAL_ADDRESS = 700


def _fake_cu(log):
  attr = types.SimpleNamespace(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR="major",
                               CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR="minor")
  ok = CUresult.CUDA_SUCCESS

  def launch(fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
    ptrs = (ctypes.c_uint64 * 3).from_address(params)
    got = [ctypes.c_uint64.from_address(ptrs[0]).value, ctypes.c_int32.from_address(ptrs[1]).value,
           ctypes.c_float.from_address(ptrs[2]).value]
    log.append(("launch", fn, (gx, gy, gz), (bx, by, bz), shared, stream, got))
    return (ok,)

  return types.SimpleNamespace(
    CUresult=CUresult, CUdevice_attribute=attr,
    cuInit=lambda f: (ok,), cuDeviceGet=lambda i: (ok, "dev0"), cuDevicePrimaryCtxRetain=lambda d: (ok, "ctx"),
    cuCtxSetCurrent=lambda c: log.append(("current", c)) or (ok,),
    cuDeviceGetAttribute=lambda a, d: (ok, {"major": 9, "minor": 0}[a]),
    cuDeviceGetName=lambda n, d: (ok, b"Fake H100\0\0\0"), cuDriverGetVersion=lambda: (ok, 13000),
    cuDeviceTotalMem=lambda d: (ok, 80 << 30), cuStreamCreate=lambda f: (ok, "stream"),
    cuMemAlloc=lambda n: (CUresult.CUDA_ERROR_INVALID_VALUE, None) if n > 1 << 40 else (ok, 0xABC000),
    cuLaunchKernel=launch,
    cuMemcpyHtoDAsync=lambda d, h, n, s: log.append(("htod", d, n, s)) or (ok,),
    cuGetErrorString=lambda e: (ok, b"invalid argument"))


def test_launch_arguments_reach_the_driver(monkeypatch):
  import cuda.bindings.driver  # noqa: F401  (so the attribute exists to replace)
  log = []
  cu = _fake_cu(log)
  monkeypatch.setattr(cuda.bindings, "driver", cu)   # what `from cuda.bindings import driver` finds
  d = CudaDriver()
  info = d.info()
  assert info.name == "Fake H100" and info.arch == "sm_90" and info.driver_cuda == (13, 0)
  ptr = d.alloc(64)
  d.launch("fn", (2, 1, 1), (128, 1, 1), 0, [ptr, np.int32(-7), np.float32(2.5)])
  assert log[-1] == ("launch", "fn", (2, 1, 1), (128, 1, 1), 0, "stream", [0xABC000, -7, 2.5])
  d.htod(ptr, np.zeros(4, np.float32))
  assert log[-1] == ("htod", ptr, 16, "stream")
  with pytest.raises(DriverError, match=r"cuMemAlloc failed: CUDA_ERROR_INVALID_VALUE \(invalid argument\)") as e:
    d.alloc(1 << 41)
  assert e.value.code == "CUDA_ERROR_INVALID_VALUE" and not e.value.sticky
