"""Row reductions of a batch of one (LayerNormalization, Softmax on [1, rows, n]: the reductions keep their axes,
shape [1, rows, 1]) run one block per row in every schedule source: the rule schedule, Gensor's construction and
the sketches' cross-thread rule, and compute onnxruntime's result. (Until 2026-11-29 the leading 1 was taken for a
reduced axis: one block did every row, 128 rows in sequence for a BERT layer norm, 44 us* where 6 us* do.)"""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import minicomp as mc
from onnx_harness import run_ort

ROWS = {"LayerNormalization": 64, "Softmax": 2 * 32}


def _model(op: str):
  shape = [1, 64, 96] if op == "LayerNormalization" else [1, 2, 32, 96]
  x, y = (helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in "xy")
  rng = np.random.default_rng(0)
  inits = [numpy_helper.from_array(rng.standard_normal(96).astype(np.float32), n) for n in ("g", "b")]
  node = helper.make_node(op, ["x", "g", "b"] if op == "LayerNormalization" else ["x"], ["y"], axis=-1)
  g = helper.make_graph([node], "rows", [x], [y], inits if op == "LayerNormalization" else [])
  return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("schedules", ["rules", "gensor"])
@pytest.mark.parametrize("op", sorted(ROWS))
def test_a_row_reduction_of_a_batch_of_one_runs_a_block_per_row(op, schedules):
  model = _model(op)
  cm = mc.compile(model, target="sm_86", schedules=schedules, progress=False, jobs=1)
  (launch,) = cm.kernels[0].plan.launches
  assert launch.grid[0] * launch.grid[1] * launch.grid[2] == ROWS[op], launch
  x = np.random.default_rng(1).standard_normal([i.shape for i in cm.inputs][0]).astype(np.float32)
  np.testing.assert_allclose(cm.run({"x": x}, device="cpu")[0], run_ort(model, {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_the_cross_thread_sketch_of_a_batch_of_one_reduces_per_row():
  from minicomp.search.annotate import sample_population
  from minicomp.search.sketch import generate_sketches
  cm = mc.compile(_model("LayerNormalization"), target="sm_86", schedules="rules", progress=False, jobs=1)
  dag = cm.tasks[0].dag
  sketches = [s for s in generate_sketches(dag, "sm_86") if any(r.startswith("cross_thread_reduction") for r in s.rules)]
  assert sketches
  for c in sample_population(sketches, 4, np.random.default_rng(0), "sm_86"):
    (launch,) = mc.build(c.schedule, target="sm_86").plan.launches
    assert launch.grid[0] * launch.grid[1] * launch.grid[2] >= ROWS["LayerNormalization"], (c.values, launch)
