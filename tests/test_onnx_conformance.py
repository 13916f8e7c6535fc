"""ONNX's backend node test cases (benchmarks/onnx_conformance.py) through minicomp: every case whose ops
minicomp has matches the reference outputs or is refused with a MinicompError whose reason is listed
(``REASONS``); none gives a wrong answer or another exception. By default a deterministic sample runs
(every 8th case by name, plus the cases behind fixes); the slow tests run the other seven eighths, so
with them every case runs, each once (bar the few cases behind fixes). The table is in
benchmarks/README.md. Also here: the importer's opset handling (conversion of old opsets, newer op
versions) that the cases exercise."""
import functools
import os
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import minicomp as mc
from onnx_harness import make_model, run_ort

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
import onnx_conformance as oc  # noqa: E402

# cases behind fixes, always run: opset 7 / 1 / 11 (converted), 22 / 25 / 27 / 28, SpaceToDepth CRD,
# ConvTranspose output_shape past the full output, LRN, CastLike of a constant, shape operands bound,
# Resize cubic, one-operand and implicit-output Einsum; issue 49's new ops
ALWAYS = ["test_dft_inverse", "test_dft_irfft", "test_stft_with_window", "test_and_bcast4v4d", "test_not_2d", "test_gather_elements_negative_indices", "test_relu", "test_elu",
          "test_maxpool_2d_pads", "test_cast_FLOAT_to_DOUBLE", "test_shape_start_1", "test_range_int32_type_negative_delta",
          "test_spacetodepth_crd_mode_example", "test_depthtospace_crd_mode_example", "test_convtranspose_output_shape",
          "test_lrn", "test_lrn_default", "test_causal_conv_with_state_kernel_size_one_expanded",
          "test_castlike_FLOAT_to_DOUBLE_expanded", "test_reduce_sum_keepdims_example", "test_resize_upsample_sizes_nearest",
          "test_slice_neg_steps", "test_cumsum_2d_negative_axis", "test_center_crop_pad_crop_expanded",
          "test_resize_downsample_scales_linear_align_corners", "test_resize_downsample_scales_cubic_align_corners",
          "test_resize_upsample_scales_cubic_A_n0p5_exclude_outside", "test_resize_downsample_sizes_cubic",
          "test_einsum_transpose", "test_einsum_sum", "test_einsum_inner_prod", "test_identity_sequence", "test_add_uint8",
          "test_cast_FLOAT_to_FLOAT8E4M3FN", "test_div_uint8", "test_quantizelinear_axis", "test_dequantizelinear_int16",
          # issue 49's ops: a zero L2 norm, both Mod rules, trigonometry, Hardmax's first maximum, the new norms
          "test_l2normalization_axis_0", "test_mod_mixed_sign_float32", "test_mod_int64_fmod", "test_mod_mixed_sign_int32",
          "test_sinh", "test_acosh", "test_hardmax_one_hot", "test_rms_normalization_2d_axis1", "test_cumprod_1d_exclusive",
          "test_isinf_negative", "test_isnan_float16", "test_mish", "test_mvn", "test_celu_float16", "test_shrink_soft",
          "test_lpnormalization_default", "test_nllloss_NCd1d2d3_sum_weight_high_ii",
          "test_nllloss_NCd1_mean_weight_negative_ii", "test_sce_mean_weight_ii_3d_log_prob",
          "test_sce_NCd1d2d3_none_no_weight_negative_ii_log_prob", "test_sce_mean", "test_group_normalization_example",
          "test_top_k_uint64", "test_top_k_same_values_2d", "test_top_k_smallest", "test_onehot_negative_indices",
          "test_onehot_out_of_range_indices", "test_scatter_elements_with_duplicate_indices",
          "test_scatter_elements_with_negative_indices", "test_scatter_elements_with_reduction_mul", "test_scatternd_add",
          "test_scatternd_max_with_element_indices", "test_gathernd_example_int32_batch_dim1",
          # ops ONNX defines by a function body, expanded at import (frontend/expand.py)
          "test_attention_4d_gqa_causal_nonpad_decode", "test_attention_3d_with_past_and_present_qk_matmul_softcap",
          "test_attention_23_boolmask_fullymasked_row_nan_robustness", "test_attention_4d_causal_fp16",
          "test_attention_local_window_with_past", "test_blackmanwindow",
          "test_gridsample_bicubic", "test_gridsample_volumetric_nearest_align_corners_1",
          "test_gridsample_reflection_padding", "test_bitshift_right_int8", "test_bitwise_not_3d",
          # an empty Split chunk concatenated back (the whole head rotates)
          "test_rotary_embedding", "test_rotary_embedding_interleaved_expanded",
          # EyeLike; Upsample-9 and Scatter-10 through the version converter
          "test_eyelike_with_dtype", "test_eyelike_populate_off_main_diagonal", "test_upsample_nearest",
          "test_scatter_with_axis",
          # the recurrent ops, unrolled at import (frontend/recurrent.py)
          "test_lstm_with_peepholes", "test_lstm_batchwise", "test_gru_seq_length", "test_simple_rnn_bidirectional",
          # the integer convolutions and matmuls; control flow unrolled (frontend/control_flow.py)
          "test_convinteger_with_padding", "test_qlinearconv", "test_qlinearmatmul_3D_int8_float16",
          "test_dynamicquantizelinear", "test_if", "test_loop11", "test_scan9_multi_state",
          "test_linear_attention_gated_delta", "test_affine_grid_3d_align_corners"]


@functools.lru_cache(maxsize=1)
def _runnable():
  """The cases whose ops are all in the registry (collecting them takes a few seconds)."""
  return [c for c in oc.cases() if not oc.missing_ops(c.model)]


def _check(cases):
  results = [oc.run_case(c) for c in cases]
  bad = [r for r in results if r.outcome in ("wrong", "error")]
  assert not bad, "\n".join(f"{r.case}: {r.outcome} {r.reason} {r.detail}" for r in bad)
  assert all(r.reason in dict(oc.REASONS) for r in results if r.outcome == "refused")
  return {r.case: r for r in results}


# The sample is every 8th case (k % 8 == 0); the slow tests run the rest: the other half of the first quarter
# (k % 8 == 4) and the other three quarters (k % 4 == 1, 2, 3). Passes at least, per part (residue, modulus): the
# first quarter's half passed 189 of 217 with onnx 1.23.2 on 2026-12-01 (the sample 188 of 218); the quarters' floors
# were set on 2026-11-27, when a quarter held ~270 cases (200 199 196 200 passed; it holds ~435 now, and they all passed
# on 2026-12-01, counts not recorded); they leave room for a case or two a newer onnx changes
MIN_PASS = {(4, 8): 186, (1, 4): 197, (2, 4): 194, (3, 4): 197}


def _part(residue: int, modulus: int) -> list:
  return [c for k, c in enumerate(_runnable()) if k % modulus == residue]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")   # numpy's, from ONNX's reference evaluator folding log(0)
def test_sample_of_onnx_node_cases_passes_or_is_refused_for_a_listed_reason():
  sample = _part(0, 8)
  extra = set(ALWAYS) - {c.name for c in sample}
  sample += [c for c in _runnable() if c.name in extra]
  res = _check(sample)
  assert set(ALWAYS) <= set(res), set(ALWAYS) - set(res)
  n_pass = sum(r.outcome == "pass" for r in res.values())
  assert n_pass >= 0.65 * len(sample), f"{n_pass} of {len(sample)} pass"
  fixed = [n for n in ALWAYS if n not in ("test_identity_sequence", "test_cast_FLOAT_to_FLOAT8E4M3FN")]
  assert all(res[n].outcome == "pass" for n in fixed), {n: res[n].detail for n in fixed if res[n].outcome != "pass"}
  assert res["test_identity_sequence"].reason == "sequence / optional type"
  assert res["test_cast_FLOAT_to_FLOAT8E4M3FN"].reason == "element type"


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("part", sorted(MIN_PASS), ids=[f"{r}-of-{m}" for r, m in sorted(MIN_PASS)])
def test_the_other_onnx_node_cases_pass_or_are_refused_for_a_listed_reason(part):
  res = _check(_part(*part))
  n_pass = sum(r.outcome == "pass" for r in res.values())
  assert n_pass >= MIN_PASS[part], f"{n_pass} of {len(res)} pass"


def test_refusal_reasons_are_recognised():
  assert oc.reason_of(mc.ModelError("input 'x': element type UINT8 is not supported")) == "element type"
  assert oc.reason_of(mc.ModelError("Trilu node 'n': k must be a constant initializer")) == "runtime shape operand"
  assert oc.reason_of(mc.ModelError("something else entirely")) is None


# ---------------------------------------------------------------------------------------------
# the importer's opsets

@pytest.mark.parametrize("opset", [7, 11])
def test_old_opset_is_converted_keeping_its_meaning(opset):
  """Softmax's 2-D coercion, Split / ReduceSum / Unsqueeze with attributes that became inputs at 13."""
  x = np.random.default_rng(0).standard_normal((2, 6, 4)).astype(np.float32)
  nodes = [helper.make_node("Softmax", ["x"], ["s"], axis=1), helper.make_node("Split", ["s"], ["a", "b"], axis=1, split=[2, 4]),
           helper.make_node("ReduceSum", ["b"], ["r"], axes=[2], keepdims=0), helper.make_node("Unsqueeze", ["r"], ["u"], axes=[0])]
  m = make_model(nodes, {"x": x}, ["s", "a", "u"], opset=opset)
  got = mc.compile(m, target="sm_80", schedules="rules").run({"x": x}, device="cpu")
  for g, w in zip(got, run_ort(m, {"x": x})):
    assert g.shape == w.shape
    np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(got[0].sum(axis=(1, 2)), 1.0, rtol=1e-5)   # the old meaning, not opset 13's


def test_converter_failure_is_a_model_error():
  n = helper.make_node("Pad", ["x"], ["y"], paddings=[1, 1, 1, 1])    # the converter has no adapter for Pad-1
  g = helper.make_graph([n], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
                        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4])])
  m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 1)])
  with pytest.raises(mc.ModelError, match="opset 1 model could not be converted to opset 13") as e:
    mc.compile(m, target="sm_80")
  assert oc.reason_of(e.value) == "opset"


def test_opset_newer_than_onnx_is_refused():
  x = np.zeros((2, 3), np.float32)
  m = make_model([helper.make_node("Relu", ["x"], ["y"])], {"x": x}, ["y"], opset=17)
  m.opset_import[0].version = onnx.defs.onnx_opset_version() + 1
  with pytest.raises(mc.ModelError, match="newer than the installed onnx") as e:
    mc.compile(m, target="sm_80")
  assert oc.reason_of(e.value) == "opset"


def test_op_version_past_the_checked_opsets_must_be_listed(monkeypatch):
  from minicomp.graph import registry
  x = np.random.default_rng(1).standard_normal((1, 2, 5, 5)).astype(np.float32)
  m = make_model([helper.make_node("Elu", ["x"], ["y"])], {"x": x}, ["y"], opset=22)
  np.testing.assert_allclose(mc.compile(m, target="sm_80", schedules="rules").run({"x": x}, device="cpu")[0],
                             run_ort(m, {"x": x})[0], rtol=1e-5, atol=1e-6)
  monkeypatch.setitem(registry.NEWER_VERSIONS, "Elu", ())    # as if Elu-22 had changed its meaning
  with pytest.raises(mc.UnsupportedOpError, match="Elu .*version 22 .*newer than its lowering covers") as e:
    mc.compile(m, target="sm_80")
  assert oc.reason_of(e.value) == "op version"


def test_every_newer_op_version_is_registered_or_listed():
  """Each registered op's versions in opsets past CHECKED_OPSET are covered: a newer onnx adds a failure here
  (and a refusal at import), never a silent use of the old lowering."""
  from minicomp.graph import registry
  for op_type in registry.supported_ops():
    for opset in range(registry.CHECKED_OPSET + 1, onnx.defs.onnx_opset_version() + 1):
      assert registry.lookup(op_type, opset) is not None or registry.lookup(op_type, registry.CHECKED_OPSET) is None, \
        (op_type, opset)


def test_castlike_of_a_constant_folds_at_import():
  x = np.random.default_rng(2).standard_normal((2, 3)).astype(np.float32)
  nodes = [helper.make_node("CastLike", ["c", "x"], ["cx"]), helper.make_node("Add", ["x", "cx"], ["y"])]
  m = make_model(nodes, {"x": x}, ["y"], {"c": np.arange(3, dtype=np.int64)})
  cm = mc.compile(m, target="sm_80", schedules="rules")
  np.testing.assert_allclose(cm.run({"x": x}, device="cpu")[0], run_ort(m, {"x": x})[0], rtol=1e-6)
  assert not any("CastLike" in c.ops for c in cm.calls)
