"""The cost model's pre-training data (search/cost_model/pretrain.py): the shipped set is current and teaches the
model to rank programs of a task it has never seen; a strategy given it starts model-guided."""
from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import strategies as B  # noqa: E402

import minicomp as mc  # noqa: E402
from minicomp.errors import CostModelError, TuneError  # noqa: E402
from minicomp.ir.dag import ComputeDAG  # noqa: E402
from minicomp.search.cost_model import evaluate  # noqa: E402
from minicomp.search.features import N_FEATURES  # noqa: E402
from minicomp.search.measure import StaticMeasurer  # noqa: E402
from minicomp.search.cost_model.pretrain import TASK_PREFIX, PretrainData, build, resolve, shipped, stale  # noqa: E402
from minicomp.search.strategies.base import TuneTask  # noqa: E402
from minicomp.search.strategies.felix import FelixStrategy  # noqa: E402
from minicomp.search.task_scheduler import tune  # noqa: E402
from minicomp.search.tune import make_strategy  # noqa: E402
from minicomp.target import as_target  # noqa: E402


def test_the_shipped_data_covers_the_benchmark_tasks_with_static_labels():
  d = shipped()
  assert set(d.task_names()) == set(B.tasks())
  assert d.n_features == N_FEATURES and len(d) >= 1500
  assert all(f.ndim == 2 and f.shape[0] > 0 and np.isfinite(f).all() for f in d.features)
  assert all(c is None or 1e-7 < c < 1.0 for c in d.costs)
  assert "static-model estimates" in d.meta["labels"] and d.meta["commit"] and d.meta["command"]


def test_the_shipped_features_are_what_the_feature_extractor_gives_now():
  """Stale features (a changed feature definition) would train the model on one definition and query it
  with another: rebuild with research/pretrain_data.py when this fails."""
  dags = {t: B.task_dag(t) for t in B.tasks()}
  assert stale(shipped(), dags, sample=3) == []


def test_a_changed_feature_shows_as_stale():
  d = shipped().without(*[t for t in B.tasks() if t != "softmax"])
  bad = PretrainData(tuple(f * 1.5 for f in d.features), d.costs, d.tasks, d.steps, d.meta)
  assert len(stale(bad, {"softmax": B.task_dag("softmax")}, sample=2)) == 2


def test_pretrained_model_ranks_a_task_it_never_saw():
  """Leave one task out: trained on the other seven, the model ranks the held-out task's programs far
  better than chance (0.5); this is why felix-pre's first round beats a random one."""
  d = shipped()
  strat = FelixStrategy(pretrain=d.without("conv3x3"))
  held = [i for i, t in enumerate(d.tasks) if t == "conv3x3"]
  ev = evaluate(strat.model.predict([d.features[i] for i in held]), [d.costs[i] for i in held],
                ["conv3x3"] * len(held))
  assert ev["pairwise_accuracy"] > 0.7, ev


def test_save_load_round_trip_and_subsets(tmp_path):
  dag = B.task_dag("matmul64", smoke=True)
  from minicomp.search.annotate import sample_population
  from minicomp.search.sketch import generate_sketches
  cands = sample_population(generate_sketches(dag, "h100"), 3, np.random.default_rng(0), "h100")
  skipped = []
  d = build([("a", dag, c.key, 1e-5 * (i + 1)) for i, c in enumerate(cands)] + [("b", dag, cands[0].key, None),
            ("b", dag, "not json", 1.0)], {"labels": "test"}, on_skip=lambda *a: skipped.append(a))
  assert len(d) == 4 and len(skipped) == 1 and skipped[0][0] == "b"
  back = PretrainData.load(d.save(tmp_path / "d.npz"))
  assert back.tasks == d.tasks and back.steps == d.steps and back.costs == d.costs
  assert all(np.array_equal(a, b) for a, b in zip(back.features, d.features))
  assert back.meta["labels"] == "test"
  assert back.without("a").tasks == ("b",)
  rows = back.rows(N_FEATURES)
  assert [r[2] for r in rows] == [TASK_PREFIX + t for t in d.tasks] and rows[-1][1] is None
  assert resolve(tmp_path / "d.npz").tasks == d.tasks and resolve(None) is None and resolve(True) is shipped()


def test_bad_data_raises_a_cost_model_error(tmp_path):
  with pytest.raises(CostModelError, match="no such file"): PretrainData.load(tmp_path / "none.npz")
  (tmp_path / "junk.npz").write_bytes(b"not a zip")
  with pytest.raises(CostModelError, match="not a minicomp pre-training file"): PretrainData.load(tmp_path / "junk.npz")
  d = shipped().without(*[t for t in B.tasks() if t != "softmax"])
  with pytest.raises(CostModelError, match="165 features per row, the cost model expects 80"): d.rows(80)
  with pytest.raises(CostModelError, match="4 feature matrices but 3 costs"):
    PretrainData(d.features[:4], d.costs[:3], d.tasks[:4], d.steps[:4])
  with pytest.raises(CostModelError, match="expected None, True"): resolve(3)


def test_felix_pre_starts_model_guided_and_gives_correct_programs():
  """strategy="felix-pre": the model is trained before the first round, so the first round comes from
  the descent (plain Felix's first round is random); its programs compute the right thing."""
  strat = make_strategy("felix-pre")
  assert isinstance(strat, FelixStrategy) and strat.name == "felix-pre" and strat.pretrain is shipped()
  strat.n_seeds, strat.n_steps, strat.later_steps = 4, 20, 5
  wl = B.tasks(smoke=True)["matmul64"][1]()
  dag = ComputeDAG(wl.outputs)
  task = TuneTask("matmul64", dag, as_target("h100"), 1, dag.flop_count(), "", "matmul64")
  with StaticMeasurer(executor=ThreadPoolExecutor(2)) as meas:
    tune([task], strat, meas, 4, seed=0, measures_per_round=4)
  assert task.trials == 4 and strat.stats["from_descent"] == 4 and strat.stats["random"] == 0
  assert all(c is not None for _, c in task.history)
  by_name = dict(zip((t.name for t in wl.inputs), wl.random_inputs(3)))
  k = mc.build(mc.Schedule.from_json(dag, task.best_steps), "h100")
  np.testing.assert_allclose(k(*[by_name[p.name] for p in dag.placeholders], device="cpu"),
                             wl.reference(*[by_name[t.name] for t in wl.inputs]), rtol=2e-3, atol=2e-3)


def test_felix_pre_is_a_strategy_name_and_unknown_names_list_it():
  with pytest.raises(TuneError, match="felix-pre"): make_strategy("felix-pretrained")
