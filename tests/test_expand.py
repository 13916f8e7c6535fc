"""Ops ONNX defines by a function body, expanded into it at import (minicomp/frontend/expand.py): the result is
checked against numpy, an op whose body has ops minicomp lacks is refused by its own name."""
import numpy as np
import pytest
from onnx import TensorProto, helper

import minicomp as mc
from minicomp.errors import UnsupportedOpError


def _attention_model(two: bool = False):
  """Grouped-query causal attention (4 query heads, 2 kv heads), opset 23; ``two``: a second Attention after it."""
  q = helper.make_tensor_value_info("q", TensorProto.FLOAT, [2, 4, 5, 8])
  k = helper.make_tensor_value_info("k", TensorProto.FLOAT, [2, 2, 5, 8])
  v = helper.make_tensor_value_info("v", TensorProto.FLOAT, [2, 2, 5, 8])
  nodes = [helper.make_node("Attention", ["q", "k", "v"], ["y"], is_causal=1, softcap=3.0)]
  out = "y"
  if two:
    nodes.append(helper.make_node("Attention", ["y", "k", "v"], ["y2"], scale=0.5))
    out = "y2"
  g = helper.make_graph(nodes, "attn", [q, k, v], [helper.make_tensor_value_info(out, TensorProto.FLOAT, [2, 4, 5, 8])])
  return helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])


def _attention_numpy(q, k, v, causal: bool, scale: float, softcap: float = 0.0):
  k, v = np.repeat(k, q.shape[1] // k.shape[1], axis=1), np.repeat(v, q.shape[1] // v.shape[1], axis=1)
  s = (q.astype(np.float64) @ k.transpose(0, 1, 3, 2)) * scale
  if softcap: s = softcap * np.tanh(s / softcap)
  if causal: s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
  p = np.exp(s - s.max(-1, keepdims=True))
  return (p / p.sum(-1, keepdims=True)) @ v


def test_attention_is_its_onnx_definition_against_numpy():
  rng = np.random.default_rng(0)
  q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((2, 4, 5, 8), (2, 2, 5, 8), (2, 2, 5, 8)))
  want = _attention_numpy(q, k, v, causal=True, scale=8 ** -0.5, softcap=3.0)
  cm = mc.compile(_attention_model(), target="sm_80", schedules="rules", progress=False)
  np.testing.assert_allclose(cm.run({"q": q, "k": k, "v": v}, device="cpu")[0], want, rtol=1e-4, atol=1e-5)
  cm2 = mc.compile(_attention_model(two=True), target="sm_80", schedules="rules", progress=False)   # two bodies
  want2 = _attention_numpy(want.astype(np.float32), k, v, causal=False, scale=0.5)
  np.testing.assert_allclose(cm2.run({"q": q, "k": k, "v": v}, device="cpu")[0], want2, rtol=1e-4, atol=1e-5)


def test_an_op_whose_body_is_not_taken_is_refused_by_its_own_name():
  # AffineGrid's ONNX body is written at opset 20, which ONNX's inliner leaves in an opset-21 model
  theta = helper.make_tensor_value_info("theta", TensorProto.FLOAT, [2, 2, 3])
  size = helper.make_tensor("size", TensorProto.INT64, [4], [2, 3, 4, 5])
  outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 5, 2])]
  g = helper.make_graph([helper.make_node("AffineGrid", ["theta", "size"], ["y"], name="ag")], "g", [theta], outs, [size])
  with pytest.raises(UnsupportedOpError, match="AffineGrid \\(node 'ag'\\)"):
    mc.compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]), target="sm_80", progress=False)


@pytest.mark.parametrize("periodic", [0, 1, -1, 2])
def test_a_window_is_periodic_or_symmetric_and_other_flags_are_refused(periodic):
  """The window ops' bodies compute with ``periodic`` (a window of size - 1 + periodic): 0 and 1 give numpy's
  symmetric / periodic Blackman window; another value is refused naming the node and the attribute (the fuzzer's
  periodic=-1 came out as a window of size - 2)."""
  size = helper.make_tensor("size", TensorProto.INT64, [], [10])
  g = helper.make_graph([helper.make_node("BlackmanWindow", ["size"], ["y"], periodic=periodic, name="win")], "w", [],
                        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [10])], [size])
  m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
  if periodic not in (0, 1):
    with pytest.raises(mc.errors.ModelError, match="BlackmanWindow node 'win': attribute periodic is"):
      mc.compile(m, target="sm_80", schedules="rules", progress=False)
    return
  (y,) = mc.compile(m, target="sm_80", schedules="rules", progress=False).run({}, device="cpu")
  want = np.blackman(11)[:10] if periodic else np.blackman(10)
  np.testing.assert_allclose(y, want, atol=1e-6)


def test_an_attention_flag_other_than_0_or_1_is_refused_naming_the_attribute():
  m = _attention_model()
  for a in m.graph.node[0].attribute:
    if a.name == "is_causal": a.i = 2
  with pytest.raises(mc.errors.ModelError, match="Attention node '': attribute is_causal is 2; it must be 0 or 1"):
    mc.compile(m, target="sm_80", schedules="rules", progress=False)


@pytest.mark.parametrize("opset", [23, 24])
def test_an_attention_mask_shorter_than_the_keys_is_broadcast_at_opset_23_and_padded_at_24(opset):
  """Attention-23 broadcasts a float mask to (batch, heads, queries, keys): a last dim of 1 adds its value to every
  key; Attention-24 pads a short last dim with -inf, so a last dim of 1 lets each query see the first key only.
  (ONNX's reference evaluator pads at both opsets: fuzz seed 29 called minicomp's opset-23 answer a mismatch.)"""
  rng = np.random.default_rng(0)
  q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((2, 3, 4, 8), (2, 3, 6, 8), (2, 3, 6, 8)))
  mask = rng.standard_normal((4, 1)).astype(np.float32)
  ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape) for n, a in zip("qkv", (q, k, v))]
  ins.append(helper.make_tensor_value_info("mask", TensorProto.FLOAT, [4, 1]))
  g = helper.make_graph([helper.make_node("Attention", ["q", "k", "v", "mask"], ["y"])], "attn", ins,
                        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4, 8])])
  m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
  (y,) = mc.compile(m, target="sm_80", schedules="rules", progress=False).run(
    {"q": q, "k": k, "v": v, "mask": mask}, device="cpu")
  s = q.astype(np.float64) @ k.transpose(0, 1, 3, 2) / np.sqrt(8)
  s = s + mask if opset == 23 else np.concatenate([s[..., :1] + mask, np.full(s[..., 1:].shape, -np.inf)], -1)
  p = np.exp(s - s.max(-1, keepdims=True))
  np.testing.assert_allclose(y, (p / p.sum(-1, keepdims=True)) @ v, rtol=1e-4, atol=1e-5)
