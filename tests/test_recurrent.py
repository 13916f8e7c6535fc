"""LSTM, GRU and RNN (minicomp/frontend/recurrent.py: unrolled over time at import) against onnxruntime, with the
attributes and inputs ONNX's own node tests leave out: sequence_lens, clip, input_forget, activations with their
alpha / beta, linear_before_reset, layout=1 (which onnxruntime lacks: compared with layout 0 on transposed data),
a missing Y output; and the refusals."""
import numpy as np
import pytest
from onnx import helper

import minicomp as mc
from minicomp.errors import UnsupportedOpError
from onnx_harness import make_model, run_ort

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def _case(kind, dirs=1, layout=0, lens=None, init=False, peep=False, outputs=("Y", "Y_h", "Y_c"), T=4, B=3, I=5,
          H=6, **attrs):
  """A one-node model, its feeds and a builder of the same node at another layout."""
  rng = np.random.default_rng(len(attrs) + dirs)
  G = GATES[kind]
  inits = {"W": 0.5 * rng.standard_normal((dirs, G * H, I)).astype(np.float32),
           "R": 0.5 * rng.standard_normal((dirs, G * H, H)).astype(np.float32),
           "B": 0.5 * rng.standard_normal((dirs, 2 * G * H)).astype(np.float32)}
  feeds = {"X": rng.standard_normal((B, T, I) if layout else (T, B, I)).astype(np.float32)}
  order = ["X", "W", "R", "B"]
  if lens is not None:
    feeds["L"] = np.array(lens, np.int32)
    order.append("L")
  elif init or peep: order.append("")
  if init:
    for s in (["h0", "c0"] if kind == "LSTM" else ["h0"]):
      feeds[s] = rng.standard_normal((B, dirs, H) if layout else (dirs, B, H)).astype(np.float32)
      order.append(s)
  elif peep: order += ["", ""]
  if peep:
    inits["P"] = rng.standard_normal((dirs, 3 * H)).astype(np.float32)
    order.append("P")
  outs = list(outputs if kind == "LSTM" else outputs[:2])
  attrs.setdefault("direction", "bidirectional" if dirs == 2 else "forward")
  build = lambda lay, f: make_model([helper.make_node(kind, order, outs, hidden_size=H, layout=lay, **attrs)], f,
                                    [o for o in outs if o], inits)
  return build(layout, feeds), feeds, build


CASES = {
  "lstm_bidirectional_layout1_lens_init_peepholes": dict(kind="LSTM", dirs=2, layout=1, lens=[4, 1, 2], init=True, peep=True),
  "lstm_reverse_lens_clip": dict(kind="LSTM", lens=[2, 4, 3], clip=0.7, direction="reverse"),
  "lstm_input_forget_peepholes": dict(kind="LSTM", input_forget=1, peep=True),
  "lstm_activations_alpha_beta": dict(kind="LSTM", dirs=2, activations=["HardSigmoid", "LeakyRelu", "ScaledTanh",
                                      "Sigmoid", "Tanh", "Affine"], activation_alpha=[0.3, 0.1, 0.8, 0.9],
                                      activation_beta=[0.4, 1.1, 0.2]),
  "gru_bidirectional_linear_before_reset_lens": dict(kind="GRU", dirs=2, lens=[3, 4, 1], init=True, linear_before_reset=1),
  "gru_clip_elu_softsign": dict(kind="GRU", clip=0.5, activations=["Elu", "Softsign"], activation_alpha=[0.5]),
  "rnn_bidirectional_layout1_relu": dict(kind="RNN", dirs=2, layout=1, lens=[1, 4, 2], init=True,
                                         activations=["Relu", "ThresholdedRelu"], activation_alpha=[0.2]),
  "rnn_only_y_h_softplus_clip": dict(kind="RNN", outputs=("", "Y_h"), activations=["Softplus"], clip=1.0),
  # a batch entry of length 0: its Y_h / Y_c are 0, not the initial state (onnxruntime; the fuzzer found the difference)
  "lstm_bidirectional_length_0": dict(kind="LSTM", dirs=2, direction="bidirectional", lens=[0, 2, 4], init=True),
  "gru_reverse_length_0": dict(kind="GRU", direction="reverse", lens=[3, 0, 1], init=True),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_recurrent_op_matches_onnxruntime(name):
  spec = dict(CASES[name])
  layout = spec.get("layout", 0)
  model, feeds, build = _case(**spec)
  if layout:   # onnxruntime refuses layout=1: the same node at layout 0 on transposed inputs, transposed back
    f0 = {k: (v.transpose(1, 0, 2) if k in ("X", "h0", "c0") else v) for k, v in feeds.items()}
    want = [w.transpose(2, 0, 1, 3) if w.ndim == 4 else w.transpose(1, 0, 2) for w in run_ort(build(0, f0), f0)]
  else:
    want = run_ort(model, feeds)
  got = mc.compile(model, target="sm_80", schedules="rules", progress=False).run(feeds, device="cpu")
  assert len(got) == len(want)
  for g, w in zip(got, want):
    assert g.shape == w.shape
    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_a_recurrent_step_is_a_matmul_kernel_and_one_fused_cell_update():
  """Per step and direction: h @ R^T with the step's input projection added, then every gate and the cell update
  in one kernel (the gates' Slice+Sigmoid chains are pulled into it). The first step's h is the zero initial state:
  its product is folded at import."""
  model, feeds, _ = _case("LSTM", T=5)
  cm = mc.compile(model, target="sm_80", schedules="rules", progress=False)
  assert sum("MatMul" in c.ops for c in cm.calls) == 4
  cells = [c for c in cm.calls if "Sigmoid" in c.ops]
  assert len(cells) == 5 and all(c.ops.count("Sigmoid") == 3 and c.ops.count("Tanh") == 2 for c in cells)
  np.testing.assert_allclose(cm.run(feeds, device="cpu")[0], run_ort(model, feeds)[0], rtol=1e-5, atol=1e-5)


def test_unknown_activation_and_wrong_count_are_refused_naming_the_node():
  model, _, _ = _case("GRU", activations=["Sigmoid", "Swishy"])
  with pytest.raises(UnsupportedOpError, match=r"GRU node .*activation 'Swishy'"):
    mc.compile(model, target="sm_80", schedules="rules", progress=False)
  model, _, _ = _case("RNN", activations=["Tanh", "Tanh"])
  with pytest.raises(UnsupportedOpError, match=r"RNN node .*2 activations given, 1 expected"):
    mc.compile(model, target="sm_80", schedules="rules", progress=False)


def test_a_sequence_past_the_unrolled_limit_is_refused_at_once_naming_the_node():
  """The fuzzer's GRU of 4096 steps (a mutated dim) took over 5 minutes before it failed; now refused in a moment."""
  import time

  from minicomp.frontend.recurrent import MAX_TIME_STEPS
  model, _, _ = _case("GRU", dirs=2, direction="bidirectional", T=MAX_TIME_STEPS + 1, B=1, I=2, H=2)
  t0 = time.perf_counter()
  too_long = rf"GRU node .*{MAX_TIME_STEPS + 1} time steps.*more than {MAX_TIME_STEPS}"
  with pytest.raises(UnsupportedOpError, match=too_long):
    mc.compile(model, target="sm_80", schedules="rules", progress=False)
  assert time.perf_counter() - t0 < 30


def test_a_symbolic_sequence_length_asks_for_its_size_and_compiles_with_it():
  model, feeds, _ = _case("LSTM")
  model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "time"
  with pytest.raises(mc.MinicompError, match=r"dynamic or unknown dims: X \['time', 3, 5\]"):
    mc.compile(model, target="sm_80", schedules="rules", progress=False)
  cm = mc.compile(model, target="sm_80", schedules="rules", progress=False, input_shapes={"time": 4})
  np.testing.assert_allclose(cm.run(feeds, device="cpu")[1], run_ort(model, feeds)[1], rtol=1e-5, atol=1e-5)
