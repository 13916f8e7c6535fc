"""Compile an ONNX model with minicomp, inspect its kernels, run it, save and reload it.

Run:  python examples/compile_onnx.py [model.onnx]
Without an argument it builds a small transformer encoder block with onnx.helper
(minicomp.zoo). The result is checked against onnxruntime when it is installed.
"""
import sys
import tempfile

import numpy as np
import onnx

import minicomp
from minicomp import zoo

if len(sys.argv) > 1:
  model = onnx.load(sys.argv[1])
  feeds = None
else:
  model, feeds = zoo.transformer_encoder()

mod = minicomp.compile(model, target="sm_86", progress=True)
print(mod.summary())
if feeds is None:
  feeds = {i.name: np.random.default_rng(0).standard_normal(i.shape).astype(i.dtype) for i in mod.inputs}
outs = mod.run(feeds)
print("outputs:", [(o.shape, o.dtype) for o in outs])
print("\nfirst kernel's CUDA C:\n" + mod.kernels[0].source[:1500] + "...")

with tempfile.TemporaryDirectory() as d:
  mod.save(d)
  again = minicomp.load(d).run(feeds)
  assert all(np.array_equal(a, b) for a, b in zip(outs, again))
  print(f"\nsaved to and reloaded from {d}: identical outputs")

try:
  import onnxruntime as ort
  want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
  err = max(float(np.abs(a - b).max()) for a, b in zip(outs, want))
  print(f"max abs difference from onnxruntime: {err:.2e}")
except ImportError:
  pass
