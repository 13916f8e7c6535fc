"""minicomp.ir.reference: a ComputeDAG evaluated in numpy, against the workloads' hand-written numpy references
and onnxruntime (no schedule, lowering or kernel involved on either side)."""
import numpy as np
import pytest

import minicomp as mc
from minicomp import workloads as W
from minicomp.errors import TEError
from minicomp.ir import reference as R
from minicomp.ir.dag import ComputeDAG
from minicomp.ir.reference import evaluate_dag

CALLS = ["matmul(33, 20, 17, bias_relu=True)", "batch_matmul(3, 9, 7, 5)", "embedding(6, 11, 4, 5)",
         "conv2d(1, 5, 9, 7, 6, 3, 2, 1)", "conv2d(2, 4, 8, 8, 4, 3, pad=1, dil=2)", "depthwise_conv2d(1, 6, 9, 9, 3, 1, 1)",
         "softmax(7, 33)", "layernorm(5, 40)", "row_sum(6, 50)", "broadcast_chain(3, 4, 5)"]


@pytest.mark.parametrize("call", CALLS)
def test_workloads_match_their_numpy_reference(call):
  wl = W.from_call(call)
  args = wl.random_inputs(1)
  want = wl.reference(*args)
  want = list(want) if isinstance(want, (tuple, list)) else [want]
  got = evaluate_dag(ComputeDAG(wl.outputs), args)
  assert len(got) == len(want)
  for g, w in zip(got, want):
    assert g.shape == w.shape and g.dtype == w.dtype
    np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5)


def test_half_convolution_rounds_its_output_to_half():
  wl = W.from_call('conv2d(1, 8, 6, 6, 8, 3, pad=1, dtype="float16", channels_last_weights=True)')
  args = wl.random_inputs(0)
  (got,) = evaluate_dag(ComputeDAG(wl.outputs), args)
  want = wl.reference(*[a.astype(np.float32) for a in args])
  assert got.dtype == np.float16
  np.testing.assert_allclose(got.astype(np.float32), want, rtol=2e-3, atol=2e-3)


def test_reductions_chunk_and_take_init_max_and_min(monkeypatch):
  """Max / min reductions with an init, over reduce axes split into chunks of 3 values (CHUNK_ELEMENTS small)."""
  monkeypatch.setattr(R, "CHUNK_ELEMENTS", 12)        # 4 outputs: 3 reduce values at a time, 35 of them
  X = mc.placeholder((4, 5, 7), name="X")
  j, k = mc.reduce_axis(5, "j"), mc.reduce_axis(7, "k")
  hi = mc.compute((4,), lambda i: mc.max(X[i, j, k], axis=[j, k], init=mc.const(0.5)), name="hi")
  lo = mc.compute((4,), lambda i: mc.min(X[i, j, k] * 2.0, axis=[j, k]), name="lo")
  s = mc.compute((4,), lambda i: mc.sum(X[i, j, k], axis=[j, k]), name="s")
  x = np.random.default_rng(0).standard_normal((4, 5, 7)).astype(np.float32)
  x[1] = -3.0                                          # row 1: every value under the init
  got_hi, got_lo, got_s = evaluate_dag(ComputeDAG([hi, lo, s]), [x])
  np.testing.assert_array_equal(got_hi, np.maximum(x.max(axis=(1, 2)), 0.5))
  np.testing.assert_array_equal(got_lo, (x * 2).min(axis=(1, 2)))
  np.testing.assert_allclose(got_s, x.astype(np.float64).sum(axis=(1, 2)), rtol=1e-6)


def test_a_guarded_read_outside_the_tensor_is_discarded_not_an_error():
  X = mc.placeholder((6,), name="X")
  Y = mc.compute((6,), lambda i: mc.select(i > 0, X[i - 1], mc.const(7.0)) + mc.select(i < 5, X[i + 1], mc.const(0.0)),
                 name="Y")
  x = np.arange(6, dtype=np.float32)
  (got,) = evaluate_dag(ComputeDAG([Y]), [x])
  np.testing.assert_array_equal(got, [8, 2, 4, 6, 8, 4])


def test_inputs_that_do_not_fit_are_refused():
  wl = W.from_call("matmul(4, 5, 6)")
  dag = ComputeDAG(wl.outputs)
  with pytest.raises(TEError, match="has 2 inputs"):
    evaluate_dag(dag, [np.zeros((4, 6), np.float32)])
  with pytest.raises(TEError, match="shape"):
    evaluate_dag(dag, [np.zeros((4, 6), np.float32), np.zeros((5, 6), np.float32)])


@pytest.mark.parametrize("name, kw", [("residual_block", {"c": 4, "hw": 6}), ("bert_tiny", {}),
                                      ("mobilenet_v2", {"hw": 32}), ("llama_block", {}), ("lstm_tagger", {})])
def test_a_models_tasks_chained_match_onnxruntime(name, kw):
  """Every task of a zoo model evaluated in launch order on its weights (views reshaped): the model's outputs,
  as onnxruntime computes them."""
  ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the test reference (the [test] extra)")
  from minicomp import zoo
  from minicomp.compiler import CompileOptions, CompileState, PHASE_NAMES, PHASES, run_phases
  from minicomp.model_parts import ViewStep
  model = getattr(zoo, name)(**kw)[0]
  st = run_phases(PHASES[:PHASE_NAMES.index("tasks") + 1], CompileState(model, mc.Target("sm_86"), CompileOptions()))
  rng = np.random.default_rng(0)
  feeds = {}
  for i in st.graph.inputs:
    v = st.graph.values[i]
    feeds[i] = (rng.integers(0, 10, v.shape) if np.dtype(v.dtype).kind in "iu" else rng.standard_normal(v.shape)).astype(v.dtype)
  vals = {**feeds, **st.consts}
  for step in st.steps:
    if isinstance(step, ViewStep):
      vals[step.dst] = vals[step.src].reshape(step.shape)
      continue
    args = [st.weights[n] if kind == "const" else vals[n] for kind, n in step.inputs]
    vals.update(zip(step.outputs, evaluate_dag(st.tasks[step.task].dag, args)))
  sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
  want = sess.run(None, {x.name: feeds[x.name] for x in sess.get_inputs()})
  assert len(want) == len(st.graph.outputs)
  for o, w in zip(st.graph.outputs, want):
    np.testing.assert_allclose(vals[o], w, rtol=1e-5, atol=1e-5)
