"""Behaviour fingerprints of a fixed corpus of schedules, recorded before a restructuring (issue 19).

Every entry builds schedules the same way the compiler does (the rule-based default, Gensor's
construction, seeded samples of every sketch, one small ONNX model through ``compile``) and hashes what
the compiler derives from them: the workload keys, the CUDA source the emitter writes, the state's printed form, the
feature vectors, Felix's smoothed features at fixed points and the static model's estimate (through
islpy and ptxas). A refactoring of the expression machinery (rewrite rules, simplifier, renderers,
evaluators, smoother) must leave every one of them byte-identical; floats are compared at 7 significant
digits so that a reordered but equal sum does not count as a change.

Felix's values are the exception: JAX computes them in float32 through XLA, whose exp / log / sqrt
differ in the last bit from one CPU to another (the penalty ``16.57652`` recorded on one machine is
``16.57651`` on another), so they are kept as values, not hashes, and compared to a relative 1e-5
(:data:`FELIX_FIELDS`). They were re-recorded in that form on 2026-11-26 from a tree whose smoothed
features still hashed to the values recorded before the restructuring, and whose penalties differed from
them only in that one last digit.

Re-record (only when a change of behaviour is intended, and say so in the commit):

    python tests/test_source_corpus.py --record
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

RECORD = Path(__file__).with_name("data") / "source_corpus.json"
RANDOM_PER_WORKLOAD = 4
FELIX_FIELDS = ("smoothed", "penalty")    # float32 values from XLA, compared to FELIX_RTOL
FELIX_RTOL = 1e-5


def _h(text: str) -> str:
  return hashlib.sha256(text.encode()).hexdigest()[:16]


def _floats(a) -> str:
  return " ".join(f"{float(v):.7g}" for v in np.asarray(a, np.float64).ravel())


def _workloads() -> dict:
  from minicomp import workloads as W
  return {
    "matmul": W.matmul(64, 48, 40),
    "matmul_bias_relu": W.matmul(32, 32, 64, bias_relu=True),
    "batch_matmul": W.batch_matmul(2, 32, 32, 16),
    "conv2d": W.conv2d(1, 8, 10, 10, 16, 3, 1, 1),
    "conv2d_s2": W.conv2d(1, 4, 9, 9, 8, 3, 2, 1),
    "depthwise": W.depthwise_conv2d(1, 8, 12, 12, 3, 1, 1),
    "softmax": W.softmax(12, 40),
    "layernorm": W.layernorm(8, 64),
    "row_sum": W.row_sum(16, 50),
    "broadcast_chain": W.broadcast_chain(4, 5, 6),
    "embedding": W.embedding(6, 20, 8),
  }


def _schedule_prints(s) -> dict:
  """What one concrete schedule turns into: CUDA source, printed state, features."""
  from minicomp.codegen.cuda import emit_cuda
  from minicomp.ir.lower import lower
  from minicomp.search.features import extract_features
  prog = lower(s.state)
  return {"cuda": _h(emit_cuda(prog)), "state": _h(str(s.state)), "features": _h(_floats(extract_features(prog)))}


def _entries_of(name: str, wl) -> dict:
  from minicomp.codegen.kernel import build
  from minicomp.graph.schedules import default_schedule
  from minicomp.graph.tasks import workload_key
  from minicomp.ir.dag import ComputeDAG
  from minicomp.search.annotate import sample
  from minicomp.search.sketch import generate_sketches
  from minicomp.search.static.estimate import estimate
  from minicomp.search.strategies.gensor import construct
  out = {}
  out[f"{name}/default"] = _schedule_prints(default_schedule(wl.outputs))
  out[f"{name}/default_simple"] = _schedule_prints(default_schedule(wl.outputs, simple=True))
  dag = ComputeDAG(wl.outputs)
  out[f"{name}/dag"] = {"workload_key": workload_key(dag)}
  g = construct(dag, "sm_86", seed=0).candidates[0].schedule
  out[f"{name}/gensor"] = _schedule_prints(g)
  out[f"{name}/gensor"]["estimate"] = f"{estimate(build(g, 'sm_86'), 'sm_86').latency_s:.7g}"
  sketches = generate_sketches(dag, "sm_86")
  rng = np.random.default_rng(0)
  for i in range(RANDOM_PER_WORKLOAD):
    k = i % len(sketches)
    out[f"{name}/sketch{k}_sample{i}"] = _schedule_prints(sample(sketches[k], rng, "sm_86", k, time_limit_s=None).schedule)
  return out


def _felix_entries() -> dict:
  """Felix's smoothed features (and resource penalty) of a matmul and a softmax sketch at fixed points."""
  import jax.numpy as jnp

  from minicomp import workloads as W
  from minicomp.ir.dag import ComputeDAG
  from minicomp.search.strategies.felix.objective import SketchObjective
  from minicomp.search.sketch import generate_sketches
  from minicomp.target import as_target
  out = {}
  for name, wl in (("matmul", W.matmul(64, 48, 40)), ("softmax", W.softmax(12, 40))):
    sk = generate_sketches(ComputeDAG(wl.outputs), "sm_86")[0]
    obj = SketchObjective(sk, as_target("sm_86"))
    Y = jnp.asarray(np.random.default_rng(1).uniform(0.0, 3.0, (3, obj.dim)))
    out[f"{name}/felix"] = {"smoothed": _floats(obj.features(Y)), "penalty": _floats(obj.penalty(Y))}
  return out


def _model_entries() -> dict:
  """Every kernel of three small models (a ResNet block; a DCGAN generator, whose ConvTranspose comes only
  through the importer; a Conv3d block), compiled with no search (Gensor's construction)."""
  import minicomp
  from minicomp import zoo
  out = {}
  for make in (zoo.residual_block, zoo.generator, zoo.conv3d_block):
    cm = minicomp.compile(make()[0], target="sm_86", progress=False)
    out.update({f"{make.__name__}/kernel{i}": {"cuda": _h(k.source)} for i, k in enumerate(cm.kernels)})
    out[f"{make.__name__}/tasks"] = {"workload_keys": " ".join(t.key for t in cm.tasks)}
  return out


def corpus() -> dict:
  out = {}
  for name, wl in _workloads().items():
    out.update(_entries_of(name, wl))
  out.update(_felix_entries())
  out.update(_model_entries())
  return out


def _same(recorded: dict, current: dict) -> bool:
  """Equal entries: every field byte for byte, but Felix's float32 values to FELIX_RTOL."""
  if sorted(recorded) != sorted(current): return False
  for f in recorded:
    if f in FELIX_FIELDS:
      a, b = (np.array(x.split(), np.float64) for x in (recorded[f], current[f]))
      if a.shape != b.shape or not np.allclose(a, b, rtol=FELIX_RTOL, atol=FELIX_RTOL): return False
    elif recorded[f] != current[f]: return False
  return True


def test_felix_values_compare_to_a_tolerance():
  """A last-digit difference of XLA's float32 passes; a change in the fourth digit, or a missing value, does not."""
  rec = {"smoothed": "1 16.57652 0", "penalty": "33.07602"}
  assert _same(rec, {"smoothed": "1 16.57651 0", "penalty": "33.07602"})
  assert not _same(rec, {"smoothed": "1 16.5801 0", "penalty": "33.07602"})
  assert not _same(rec, {"smoothed": "1 16.57652", "penalty": "33.07602"})
  assert not _same({"cuda": "ab12"}, {"cuda": "ab13"})


@pytest.fixture(scope="module")
def current():
  return corpus()


def test_corpus_is_recorded():
  assert RECORD.exists(), f"{RECORD} is missing: record it with python tests/test_source_corpus.py --record"


def test_corpus_is_unchanged(current):
  recorded = json.loads(RECORD.read_text())
  assert sorted(current) == sorted(recorded)
  changed = {k: (recorded[k], current[k]) for k in recorded if not _same(recorded[k], current[k])}
  assert not changed, f"{len(changed)} of {len(recorded)} entries changed: {changed}"


if __name__ == "__main__":
  if sys.argv[1:] != ["--record"]:
    sys.exit(__doc__)
  RECORD.parent.mkdir(exist_ok=True)
  RECORD.write_text(json.dumps(corpus(), indent=1, sort_keys=True) + "\n")
  print(f"recorded {RECORD}")
