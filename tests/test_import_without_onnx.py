"""``import minicomp`` and everything but the ONNX path work without onnx (or onnxruntime) installed."""
import subprocess
import sys

import numpy as np
import onnx
from onnx import helper

import minicomp as mc
from onnx_harness import make_model

# Run in a fresh interpreter where onnx and onnxruntime cannot be imported, as if not installed.
CHILD = r'''
import importlib.abc, sys

class NoOnnx(importlib.abc.MetaPathFinder):
  def find_spec(self, name, path, target=None):
    if name.partition(".")[0] in ("onnx", "onnxruntime"):
      raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    return None

sys.meta_path.insert(0, NoOnnx())
try:
  import onnx
  raise AssertionError("onnx should not be importable here")
except ModuleNotFoundError:
  pass

import numpy as np
import minicomp as mc
assert "jax" not in sys.modules, "import minicomp imported jax"
assert "ml_dtypes" not in sys.modules, "import minicomp imported ml_dtypes (0.3-0.6 s; bfloat16's numpy type only)"

A = mc.placeholder((16, 12), "float32", name="A")
B = mc.placeholder((12, 20), "float32", name="B")
k = mc.reduce_axis(12, name="k")
C = mc.compute((16, 20), lambda i, j: mc.sum(A[i, k] * B[k, j], axis=k), name="C")
s = mc.Schedule([C])
i, j = s.axis(C)
s.bind(C, i, "blockIdx.x")
s.bind(C, j, "threadIdx.x")
kern = mc.build(s, "sm_86")
rng = np.random.default_rng(0)
a, b = rng.standard_normal((16, 12)).astype(np.float32), rng.standard_normal((12, 20)).astype(np.float32)
np.testing.assert_allclose(kern(a, b, device="cpu"), a @ b, rtol=1e-5, atol=1e-5)
assert mc.estimate(kern, "sm_86").latency_s > 0
assert "ml_dtypes" not in sys.modules, "a float32 kernel's build or estimate imported ml_dtypes"

saved = sys.argv[1]
cm = mc.load(saved + "/model")
x = np.load(saved + "/x.npy")
np.testing.assert_allclose(cm.run({"x": x}, device="cpu")[0], np.load(saved + "/y.npy"), rtol=1e-6)

try:
  mc.compile(saved + "/model.onnx")
  raise AssertionError("compile should need onnx")
except mc.MissingDependencyError as e:
  assert "pip install onnx" in str(e), e
assert not [m for m in sys.modules if m.partition(".")[0] == "onnx"]
print("ok")
'''


def test_minicomp_works_without_onnx(tmp_path):
  rng = np.random.default_rng(0)
  nodes = [helper.make_node("Add", ["x", "b"], ["t"]), helper.make_node("Relu", ["t"], ["y"])]
  bias = {"b": rng.standard_normal(3).astype(np.float32)}
  model = make_model(nodes, {"x": np.zeros((2, 3), np.float32)}, ["y"], bias)
  onnx.save(model, str(tmp_path / "model.onnx"))
  cm = mc.compile(model, schedules="rules")
  cm.save(tmp_path / "model")
  x = rng.standard_normal((2, 3)).astype(np.float32)
  np.save(tmp_path / "x.npy", x)
  np.save(tmp_path / "y.npy", cm.run({"x": x}, device="cpu")[0])
  r = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path)], capture_output=True, text=True, timeout=300)
  assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_onnx_type_codes_are_onnx_s():
  """minicomp writes ONNX's TensorProto.DataType codes as ints (so it needs no onnx to know them)."""
  from minicomp.frontend.dtypes import DTYPE_TO_ONNX, ONNX_TO_DTYPE
  names = {"float32": "FLOAT", "float64": "DOUBLE", "int64": "INT64", "int32": "INT32", "bool": "BOOL",
           "float16": "FLOAT16", "bfloat16": "BFLOAT16", "int8": "INT8", "uint8": "UINT8", "int16": "INT16",
           "uint16": "UINT16", "uint32": "UINT32", "uint64": "UINT64"}
  assert set(DTYPE_TO_ONNX) == set(names)
  for dtype, code in DTYPE_TO_ONNX.items():
    assert code == getattr(onnx.TensorProto, names[dtype]) and ONNX_TO_DTYPE[code] == dtype
