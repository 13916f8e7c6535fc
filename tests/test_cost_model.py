"""The learned cost model (minicomp.search.cost_model): it learns a known cost function well enough to rank
held-out programs, its pack-sum structure holds exactly, and it is deterministic, persistent and cheap to call."""
from __future__ import annotations

import math

import numpy as np
import pytest

from minicomp.errors import MinicompError
from minicomp.search import cost_model as cm
from minicomp.search.cost_model import mlp
from minicomp.search.cost_model import CostModelError, MLPCostModel, evaluate

F, HIDDEN = 12, 64     # small, so the file runs in seconds; one config shared by every test (one compilation)


def make_tasks(seed: int, n_tasks: int = 4, n_per_task: int = 200, max_rows: int = 6):
  """Programs of 1..max_rows rows: one main statement (column 4 = 1) and cheap auxiliary ones (padding, bias,
  cache copies: 5 % of the work), as Ansor's tasks mostly look. A row's cost is a known nonlinear function of
  columns 0-3, a program's cost the sum over its rows times a per-task scale; the other columns are noise."""
  rng = np.random.default_rng(seed)
  programs, costs, tasks = [], [], []
  for t in range(n_tasks):
    scale = 10.0 ** rng.uniform(-6, -3)
    for _ in range(n_per_task):
      n_rows = int(rng.integers(1, max_rows + 1))
      x = rng.uniform(0, 1, size=(n_rows, F)).astype(np.float32)
      x[:, 4] = 0
      x[rng.integers(n_rows), 4] = 1
      row_cost = np.exp(2 * x[:, 0]) * (1 + 4 * (x[:, 1] - 0.5) ** 2) + 0.5 * x[:, 2] * x[:, 3]
      row_cost *= np.where(x[:, 4] > 0, 1.0, 0.05)
      programs.append(x * 3.0)            # features are slog-sized values, not in [0, 1]
      costs.append(float(scale * row_cost.sum()))
      tasks.append(f"task{t}")
  return programs, costs, tasks


def split(data, n_train_per_task: int, n_per_task: int = 200):
  """First ``n_train_per_task`` programs of every task for training, the rest held out."""
  programs, costs, tasks = data
  tr = [i for i in range(len(programs)) if i % n_per_task < n_train_per_task]
  te = [i for i in range(len(programs)) if i % n_per_task >= n_train_per_task]
  pick = lambda ids: ([programs[i] for i in ids], [costs[i] for i in ids], [tasks[i] for i in ids])
  return pick(tr), pick(te)


@pytest.fixture(scope="module")
def data():
  return make_tasks(0)


@pytest.fixture(scope="module", params=["weighted_mse", "rank"])
def trained(request, data):
  (train, test) = split(data, 150)
  # 540 training programs: TenSet's batch 512 / lr 7e-4 would make only 60 steps in 30 epochs and underfit
  # (held-out accuracy ~0.6), so small-data settings, as a search's first rounds would need.
  model = MLPCostModel(F, hidden=HIDDEN, loss=request.param, seed=0, batch=64, lr=3e-3, epochs=60)
  stats = model.fit(*train)
  return model, stats, test


# ------------------------------------------------------------------------------------------------ learning

def test_ranks_held_out_programs(trained):
  model, stats, (programs, costs, tasks) = trained
  assert stats["skipped"] is None and 1 <= stats["best_epoch"] <= stats["epochs"] <= 60 and stats["seconds"] > 0
  assert stats["n_val"] == 60 and stats["n_train"] == 540 and math.isfinite(stats["val_loss"])
  res = evaluate(model.predict(programs), costs, tasks, k=8)
  assert res["pairwise_accuracy"] > 0.85, res
  assert res["n_tasks"] == 4


def test_rows_are_summed(trained):
  """A program's score is the sum of its rows' scores: independent of row order, additive over row sets."""
  model, _, (programs, _, _) = trained
  a, b = programs[0], programs[1]
  rng = np.random.default_rng(1)
  ab = np.concatenate([a, b])
  s = model.predict([a, b, ab, ab[rng.permutation(len(ab))], a[::-1]])
  np.testing.assert_allclose(s[2], s[0] + s[1], rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(s[3], s[2], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(s[4], s[0], rtol=1e-5, atol=1e-6)
  assert s[0] != s[1]


def test_predict_alone_equals_predict_in_a_batch(trained):
  model, _, (programs, _, _) = trained
  batch = model.predict(programs)
  alone = np.array([model.predict([p])[0] for p in programs[:5]])
  np.testing.assert_allclose(alone, batch[:5], rtol=1e-5, atol=1e-6)


def test_score_fn_matches_predict_and_differentiates(trained):
  import jax
  import jax.numpy as jnp
  model, _, (programs, _, _) = trained
  p = programs[3]
  rows = np.zeros((8, F), np.float32)
  rows[:len(p)] = p
  mask = np.arange(8) < len(p)
  f = model.score_fn()
  np.testing.assert_allclose(float(jax.jit(f)(model.params, rows, mask)), model.predict([p])[0], rtol=1e-5, atol=1e-6)
  g = np.asarray(jax.grad(lambda x: f(model.params, x, jnp.asarray(mask)))(jnp.asarray(rows)))
  assert np.all(np.isfinite(g)) and np.abs(g[:len(p)]).sum() > 0
  assert np.all(g[len(p):] == 0)     # padding rows do not take part


# ------------------------------------------------------------------------------------------------ labels, data

def test_normalized_throughput_and_failed_programs(data):
  y = cm.normalized_throughput([2.0, 1.0, None, math.inf, 4.0, 8.0], ["a", "a", "a", "a", "b", "b"])
  np.testing.assert_array_equal(y, [0.5, 1.0, 0.0, 0.0, 1.0, 0.5])
  programs, costs, tasks = (list(x[:200]) for x in data)
  costs = [None if i % 4 == 0 else (math.inf if i % 7 == 0 else c) for i, c in enumerate(costs)]
  programs[5] = np.zeros((0, F), np.float32)    # features failed: skipped in training, -inf in predict
  model = MLPCostModel(F, hidden=HIDDEN, epochs=3)
  stats = model.fit(programs, costs, tasks)
  assert stats["skipped"] is None and stats["n_train"] + stats["n_val"] == 199
  s = model.predict(programs)
  assert s[5] == -np.inf and np.all(np.isfinite(np.delete(s, 5)))


def test_nothing_to_learn_is_skipped(data):
  programs, _, tasks = data
  model = MLPCostModel(F, hidden=HIDDEN)
  stats = model.fit(programs[:60], [None] * 60, tasks[:60])
  assert stats["skipped"] and stats["epochs"] == 0 and not model.fitted
  rank = MLPCostModel(F, hidden=HIDDEN, loss="rank")
  assert rank.fit(programs[:3], [1.0, 1.0, 1.0], ["a", "b", "c"])["skipped"] and not rank.fitted


def test_update_retrains_on_everything_seen(data):
  programs, costs, tasks = data
  a, b = slice(0, 120), slice(300, 420)
  m1 = MLPCostModel(F, hidden=HIDDEN, epochs=3, seed=3)
  m1.update(programs[a], costs[a], tasks[a])
  before = m1.predict(programs[:50])
  m1.update(programs[b], costs[b], tasks[b])
  assert m1.n_seen == 240
  m2 = MLPCostModel(F, hidden=HIDDEN, epochs=3, seed=3)
  m2.fit(programs[a] + programs[b], costs[a] + costs[b], tasks[a] + tasks[b])
  np.testing.assert_array_equal(m1.predict(programs[:50]), m2.predict(programs[:50]))
  assert not np.array_equal(before, m1.predict(programs[:50]))


def test_bad_input_raises(data):
  programs, costs, tasks = data
  model = MLPCostModel(F, hidden=HIDDEN)
  with pytest.raises(CostModelError, match="feature shape"):
    model.predict([np.zeros((3, F + 1), np.float32)])
  with pytest.raises(CostModelError, match="differ in length"):
    model.fit(programs[:3], costs[:2], tasks[:3])
  with pytest.raises(CostModelError, match="<= 0"):
    model.fit(programs[:2], [1.0, 0.0], tasks[:2])
  with pytest.raises(CostModelError, match="unknown loss"):
    MLPCostModel(F, loss="mse")
  assert issubclass(CostModelError, MinicompError)


# ------------------------------------------------------------------------------------------------ determinism

def test_same_seed_same_model_other_seed_other_model(data):
  programs, costs, tasks = (x[:200] for x in data)
  preds = []
  for seed in (7, 7, 8):
    m = MLPCostModel(F, hidden=HIDDEN, epochs=3, seed=seed)
    m.fit(programs, costs, tasks)
    preds.append(m.predict(programs))
  np.testing.assert_array_equal(preds[0], preds[1])
  assert not np.allclose(preds[0], preds[2])


def test_predict_before_fit_is_deterministic(data):
  programs = data[0][:100] + [np.zeros((0, F), np.float32)]
  m = MLPCostModel(F, seed=5)
  s1, s2 = m.predict(programs), m.predict(programs)
  np.testing.assert_array_equal(s1, s2)
  np.testing.assert_array_equal(s1, MLPCostModel(F, seed=5).predict(programs))
  assert not np.array_equal(s1[:-1], MLPCostModel(F, seed=6).predict(programs)[:-1])
  assert s1[-1] == -np.inf and np.all((s1[:-1] >= 0) & (s1[:-1] < 1e-3)) and len(np.unique(s1[:-1])) == 100
  with pytest.raises(CostModelError, match="fitted"):
    m.score_fn()


# ------------------------------------------------------------------------------------------------ speed

def test_bucketed_predict_does_not_recompile(trained):
  model, _, _ = trained
  rng = np.random.default_rng(2)
  lens = rng.integers(1, 8, size=5000)
  progs1 = [rng.normal(size=(n, F)).astype(np.float32) for n in lens]
  progs2 = [rng.normal(size=(n, F)).astype(np.float32) for n in lens]
  model.predict(progs1)
  traces = mlp._TRACES["predict"]
  s1 = model.predict(progs1)
  model.predict(progs2)
  model.predict(progs1[:3000])      # 3000 programs: the same buckets as the first 4096-program chunk
  assert mlp._TRACES["predict"] == traces
  assert s1.shape == (5000,) and np.all(np.isfinite(s1))


# ------------------------------------------------------------------------------------------------ persistence

def test_save_load_round_trip(trained, tmp_path):
  model, _, (programs, _, _) = trained
  path = tmp_path / "model.npz"
  model.save(path)
  loaded = MLPCostModel.load(path)
  assert loaded.config() == model.config() and loaded.fitted
  np.testing.assert_array_equal(loaded.predict(programs), model.predict(programs))
  fresh = MLPCostModel(F, seed=4)
  fresh.save(tmp_path / "fresh.npz")
  again = MLPCostModel.load(tmp_path / "fresh.npz")
  assert not again.fitted
  np.testing.assert_array_equal(again.predict(programs), fresh.predict(programs))


def test_load_rejects_bad_files(trained, tmp_path):
  model, _, _ = trained
  good = tmp_path / "good.npz"
  model.save(good)
  cases = {"garbage.npz": b"this is not a zip file at all",
           "truncated.npz": good.read_bytes()[:200]}
  for name, content in cases.items():
    (tmp_path / name).write_bytes(content)
  np.savez(tmp_path / "foreign.npz", x=np.arange(3))
  arrays = dict(np.load(good))
  np.savez(tmp_path / "future.npz", **{**arrays, "format_version": np.array(cm.FORMAT + 1)})
  np.savez(tmp_path / "bad_weight.npz", **{**arrays, "param_w1": np.zeros((3, 3), np.float32)})
  np.savez(tmp_path / "no_weight.npz", **{k: v for k, v in arrays.items() if k != "param_b2"})
  expect = {"garbage.npz": "not a readable", "truncated.npz": "not a readable", "foreign.npz": "not a minicomp",
            "future.npz": "format version", "bad_weight.npz": "weight w1", "no_weight.npz": "incomplete",
            "missing.npz": "no such"}
  for name, msg in expect.items():
    with pytest.raises(CostModelError, match=msg):
      MLPCostModel.load(tmp_path / name)


# ------------------------------------------------------------------------------------------------ evaluate

def test_evaluate_exact_values():
  # perfect, reversed, and a score tie (counts 1/2): (0,1) tie, (0,2) and (1,2) right -> 2.5/3
  assert evaluate([3, 2, 1], [1, 2, 3], "aaa")["pairwise_accuracy"] == 1.0
  assert evaluate([1, 2, 3], [1, 2, 3], "aaa")["pairwise_accuracy"] == 0.0
  assert evaluate([1, 1, 0], [1, 2, 3], "aaa")["pairwise_accuracy"] == pytest.approx(2.5 / 3)
  # pairs never cross tasks: a is right, b is wrong -> 1/2 (across tasks, 3 of 4 pairs would be right)
  r = evaluate([1, 0, 0, 5], [1, 2, 1, 2], ["a", "a", "b", "b"])
  assert r["pairwise_accuracy"] == 0.5 and r["n_pairs"] == 2
  # a failed program is slower than any measured one; two failed ones tie and are skipped; equal costs skipped
  # program 0 (fastest) vs 1-4: 4 pairs, all wrong; 3 and 4 vs the failed 1 and 2: 4 pairs, all right
  r = evaluate([0, 1, 2, 3, 3], [1, None, math.inf, 5, 5], "aaaaa")
  assert r["n_pairs"] == 8 and r["pairwise_accuracy"] == 0.5
  # recall@2: task a true top {0,1}, predicted {0,2} -> 1/2; task b -> 1; mean 3/4
  r = evaluate([4, 1, 3, 2, 3, 2, 1], [1, 2, 3, 4, 1, 2, 3], list("aaaabbb"), k=2)
  assert r["recall_at_k"] == 0.75 and r["n_tasks"] == 2
  # a task with one measured program: its true top-k is that one program
  assert evaluate([0, 1], [1.0, None], "aa", k=1)["recall_at_k"] == 0.0
  with pytest.raises(CostModelError):
    evaluate([1, 2], [1.0], "ab")
