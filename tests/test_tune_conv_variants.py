"""Tuning transposed and 3-d convolutions (issue #14): their sketches tile every output and reduction
axis and lower symbolically (so a round scores its population with formulas instead of lowering
each candidate), a short ansor run finishes and matches onnxruntime, and every sampling loop is
bounded by time as well as by tries."""
import concurrent.futures
import dataclasses
import time

import numpy as np
import pytest
from onnx import helper
from onnx_harness import make_model, run_ort

import minicomp as mc
from minicomp.frontend.onnx_import import load_onnx
from minicomp.graph.partition import partition
from minicomp.graph.subgraph import nodes_to_te
from minicomp.ir.dag import ComputeDAG
from minicomp.search import annotate
from minicomp.search.features.formulas import formulas_or_none
from minicomp.search.measure import StaticMeasurer
from minicomp.search.records import load_records
from minicomp.search.sketch import generate_sketches
from minicomp.search.strategies.ansor import AnsorStrategy
from minicomp.search.strategies.base import TuneTask
from minicomp.search.task_scheduler import tune
from minicomp.target import Target


def _conv_transpose():
  """ConvTranspose 32->16, 4x4, stride 2, pad 1 on 8x8 (-> 16x16), with bias."""
  rng = np.random.default_rng(0)
  x = rng.standard_normal((1, 32, 8, 8)).astype(np.float32)
  w = (rng.standard_normal((32, 16, 4, 4)) * 0.1).astype(np.float32)
  b = rng.standard_normal(16).astype(np.float32)
  node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], kernel_shape=[4, 4], strides=[2, 2], pads=[1] * 4)
  return make_model([node], {"x": x}, ["y"], {"w": w, "b": b}), {"x": x}


def _conv3d():
  """Conv3d 8->16, 3x3x3, pad 1 on 4x8x8, bias, ReLU."""
  rng = np.random.default_rng(1)
  x = rng.standard_normal((1, 8, 4, 8, 8)).astype(np.float32)
  w = (rng.standard_normal((16, 8, 3, 3, 3)) * 0.1).astype(np.float32)
  b = rng.standard_normal(16).astype(np.float32)
  nodes = [helper.make_node("Conv", ["x", "w", "b"], ["t"], kernel_shape=[3, 3, 3], pads=[1] * 6),
           helper.make_node("Relu", ["t"], ["y"])]
  return make_model(nodes, {"x": x}, ["y"], {"w": w, "b": b}), {"x": x}


MODELS = {"conv_transpose": _conv_transpose, "conv3d": _conv3d}


def _dag(model) -> ComputeDAG:
  """The model's single task, as the compiler builds it."""
  g = load_onnx(model)
  (st,) = [s for s in partition(g).steps if not isinstance(s, tuple)]
  te_ = nodes_to_te(g, st.nodes, st.outputs)
  return ComputeDAG([te_.outputs[o] for o in st.outputs])


@pytest.mark.parametrize("name", list(MODELS))
def test_sketch_tiles_output_and_reduction_and_lowers_symbolically(name):
  dag = _dag(MODELS[name]()[0])
  (sk,) = generate_sketches(dag, "sm_86")
  red = next(t for t in dag.tensors if getattr(t, "reduce_axes", None))
  tiled = {(g.stage, g.iter, g.kind) for g in sk.tiles}
  assert {(red.name, a.name, "spatial") for a in red.axes} <= tiled
  assert {(red.name, a.name, "reduce") for a in red.reduce_axes} <= tiled
  assert any(r.startswith("multi_level_tiling") for r in sk.rules)
  # ConvTranspose read its input at (o + pad - k) / stride: the shared tile of that input had no
  # symbolic bound, so the sketch had no formulas and every candidate was lowered one by one
  assert formulas_or_none(sk) is not None


@pytest.mark.parametrize("name", list(MODELS))
def test_short_ansor_run_finishes_and_matches_onnxruntime(name, tmp_path):
  model, feeds = MODELS[name]()
  log = str(tmp_path / "tune.jsonl")
  t0 = time.perf_counter()
  with concurrent.futures.ThreadPoolExecutor(2) as ex:
    cm = mc.compile(model, target="sm_86", trials=8, strategy="ansor", log_file=log, measures_per_round=4,
                    measurer=StaticMeasurer(executor=ex))
  elapsed = time.perf_counter() - t0
  assert elapsed < 120, f"8 trials took {elapsed:.0f} s"          # ~10-15 s on 2 cores; > 15 min before the fix
  trials = [r for r in load_records(log) if r.strategy != "default"]
  assert len(trials) == 8
  assert sum(r.ok for r in trials) >= 6, [(r.error, r.message[:80]) for r in trials if not r.ok]
  (want,) = run_ort(model, feeds)
  (got,) = cm.run(feeds, device="cpu")
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------ time bounds of the sampling loops

def _rejecting():
  """The ConvTranspose sketch with a target that allows 64 bytes of shared memory: every draw that
  passes the value checks is lowered (the slow step) and then rejected."""
  dag = _dag(_conv_transpose()[0])
  tgt = dataclasses.replace(Target("sm_86"), max_shared_bytes_per_block=64)
  return dag, generate_sketches(dag, tgt), tgt


def test_sampling_stops_at_its_time_bound_when_every_draw_is_rejected():
  _, sketches, tgt = _rejecting()
  rng = np.random.default_rng(0)
  t0 = time.perf_counter()
  with pytest.raises(annotate.AnnotationError, match="no valid schedule"):
    annotate.sample(sketches[0], rng, tgt, max_tries=10**9, time_limit_s=0.5)
  assert time.perf_counter() - t0 < 3
  t0 = time.perf_counter()
  assert annotate.sample_population(sketches, 64, rng, tgt, max_tries=10**9, time_limit_s=0.5) == []
  assert time.perf_counter() - t0 < 3


def test_ansor_round_is_bounded_and_a_task_with_nothing_valid_dies():
  dag, sketches, tgt = _rejecting()
  task = TuneTask("k", dag, tgt, _sketches=sketches)
  strat = AnsorStrategy(population=256, time_limit_s=0.5)
  strat._formulas = lambda task, k: None     # no formulas: every candidate is lowered (the slow fallback)
  asked = []

  class Never:
    is_estimate = True

    def measure(self, inputs):
      asked.extend(inputs)
      return []

  t0 = time.perf_counter()
  res = tune([task], strat, Never(), trials=8, measures_per_round=4)
  assert time.perf_counter() - t0 < 5        # 0.5 s of sampling; nothing valid to choose from
  assert res.trials == 0 and not asked
