"""Every estimate finishes in bounded time: a stride-2 3x3 convolution + BatchNormalization + Relu
whose rule-based kernel's estimate once ran for over 30 minutes (an unbudgeted isl count of its input
footprint) now takes a sampled count. Run in a child process with a generous limit, so a
regression fails instead of hanging the suite."""
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent('''
  import sys
  sys.path.insert(0, %r)
  import numpy as np
  from onnx import helper
  from onnx_harness import make_model
  import minicomp as mc
  rng = np.random.default_rng(0)
  x = rng.standard_normal((1, 64, 56, 56)).astype(np.float32)
  w = rng.standard_normal((128, 64, 3, 3)).astype(np.float32)
  g, b, mu, var = (rng.random(128).astype(np.float32) + 0.5 for _ in range(4))
  nodes = [helper.make_node("Conv", ["x", "w"], ["c"], strides=[2, 2], pads=[1, 1, 1, 1]),
           helper.make_node("BatchNormalization", ["c", "g", "b", "mu", "var"], ["bn"]),
           helper.make_node("Relu", ["bn"], ["y"])]
  cm = mc.compile(make_model(nodes, {"x": x}, ["y"], {"w": w, "g": g, "b": b, "mu": mu, "var": var}), target="sm_86",
                  schedules="rules")
  est = cm.estimate()
  assert 0 < est.latency_s < 1, est
  from minicomp.search.static.footprint import analyze_program
  sampled = dict(analyze_program(cm.kernels[0].program)[0].counts)["sampled"]
  assert sampled > 0, "the counts this test is about were not sampled"
  print("sampled counts:", sampled)
''' % str(Path(__file__).parent))


def test_stride2_conv_estimate_finishes():
  r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr[-3000:]
  assert "sampled counts:" in r.stdout
