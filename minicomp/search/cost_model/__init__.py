"""The learned cost model of the search: Ansor's pack-sum model with a per-row MLP (TenSet / Felix style).

A program is a 2-D float32 array of per-statement feature rows, shape ``(n_rows, n_features)``, as the
feature extractor writes them (already slog-transformed). The model scores each row with an MLP
``Linear(F,256)-ReLU-Linear(256,256)-ReLU-Linear(256,1)`` and a program's score is the **sum over its
rows** (Ansor: "a prediction for a program is the sum over its statements"). Higher score = faster.

Labels are Ansor's normalised throughput, ``y = min_cost_of_task / cost`` in (0, 1], 0 for a failed
program. Two losses: ``"weighted_mse"`` (Ansor's pack-sum objective, squared error weighted by ``y`` so
the fast programs matter most) and ``"rank"`` (RankNet: pairwise logistic loss within a task).

The MLP is functional (STYLE item 10) and lives in ``cost_model_mlp.py``: :func:`init_params`,
:func:`program_score`, :func:`packed_scores` and :func:`loss` (importable from here too) are pure
functions of an explicit ``params`` pytree, and batches are programs packed flat, bucketed to powers of
two so ``jax.jit`` compiles once per bucket. :class:`MLPCostModel` only holds the data, the column
scales and the current params, and trains and predicts. JAX is imported lazily, inside those functions,
so ``import minicomp`` stays fast.

Example::

    model = MLPCostModel(n_features=165)
    model.update(programs, costs, task_ids)      # after each measurement round: retrains on all data
    scores = model.predict(candidate_programs)   # higher = predicted faster; -inf for empty programs
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import time
import zipfile
from collections.abc import Hashable, Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np

from minicomp.errors import CostModelError
from minicomp.search.cost_model.mlp import (  # the pure functions are public here too (docs/cost_model.md)
  MIN_PROGS,
  MIN_ROWS,
  Batch,
  Params,
  ScoreFn,
  chunks,
  eval_loss_fn,
  gather_rows,
  init_params,
  loss,
  pack,
  packed_scores,
  pow2_bucket,
  predict_fn,
  program_score,
  row_scores,
  train_fns,
)

if TYPE_CHECKING:
  import jax

FORMAT = 1                          # the .npz format version save() writes and load() reads
LOSSES = ("weighted_mse", "rank")
_PATIENCE, _MIN_VAL_PROGRAMS = 5, 50
_PARAM_NAMES = ("w1", "b1", "w2", "b2", "w3", "b3")


# ---------------------------------------------------------------------------------------------- labels and metrics

def normalized_throughput(costs: Sequence[float | None], task_ids: Sequence[Hashable]) -> np.ndarray:
  """Ansor's label: ``min_cost_of_task / cost`` in (0, 1]; 0 for a failed program (cost None, NaN or inf)."""
  c = np.array([math.inf if x is None else float(x) for x in costs], np.float64)
  ok = np.isfinite(c)
  if np.any(c[ok] <= 0):
    i = int(np.flatnonzero(ok & (c <= 0))[0])
    raise CostModelError(f"cost[{i}] = {c[i]} <= 0; a measured cost must be positive (use None for a failed program)")
  _, task = np.unique(np.array([str(t) for t in task_ids]), return_inverse=True)
  best = np.full(task.max() + 1 if len(task) else 0, np.inf)
  np.minimum.at(best, task[ok], c[ok])
  y = np.zeros(len(c), np.float64)
  y[ok] = best[task[ok]] / c[ok]
  return y


def _random_scores(programs: Sequence[np.ndarray], seed: int) -> np.ndarray:
  """Ansor's random model, made a pure function: a score in [0, 1e-3) hashed from the seed and the program's
  bytes, so the same program always gets the same score and nothing is mutated by predict()."""
  key = int(seed).to_bytes(8, "little", signed=True)
  h = [int.from_bytes(hashlib.blake2b(p.tobytes(), digest_size=8, key=key).digest(), "little") for p in programs]
  return (np.array(h, np.float64) / 2.0 ** 64 * 1e-3).astype(np.float32)


def evaluate(scores: Sequence[float], costs: Sequence[float | None], task_ids: Sequence[Hashable], k: int = 8) -> dict:
  """Ranking quality of ``scores`` (higher = faster) against measured ``costs`` (None/inf = failed).

  ``pairwise_accuracy``: over all pairs within a task whose costs differ (a failed program is slower than
  any measured one; two failed ones tie and are skipped), the fraction ordered correctly; a tie in score
  counts 1/2, so a constant predictor gets 0.5. ``recall_at_k``: per task, the fraction of its true top-k
  (the ``min(k, #measured)`` lowest costs) among its ``k`` highest scores, averaged over the tasks with a
  measured program. Ties are broken by position (stable sort). O(n^2) memory per task for the pairs.
  """
  s = np.asarray(scores, np.float64)
  c = np.array([math.inf if x is None or not math.isfinite(float(x)) else float(x) for x in costs], np.float64)
  tasks = [str(t) for t in task_ids]
  if not len(s) == len(c) == len(tasks):
    raise CostModelError(f"evaluate: {len(s)} scores, {len(c)} costs and {len(tasks)} task ids differ in length")
  _, task = np.unique(np.array(tasks), return_inverse=True)
  correct, n_pairs, recalls = 0.0, 0, []
  for t in range(task.max() + 1 if len(task) else 0):
    idx = np.flatnonzero(task == t)
    ts, tc = s[idx], c[idx]
    faster = tc[:, None] < tc[None, :]                      # i strictly faster than j: one ordered pair
    ds = ts[:, None] - ts[None, :]
    correct += float(np.sum(faster & (ds > 0)) + 0.5 * np.sum(faster & (ds == 0)))
    n_pairs += int(faster.sum())
    n_ok = int(np.isfinite(tc).sum())
    if n_ok:
      true_top = set(np.argsort(tc, kind="stable")[:min(k, n_ok)].tolist())
      pred_top = set(np.argsort(-ts, kind="stable")[:k].tolist())
      recalls.append(len(true_top & pred_top) / len(true_top))
  return {"pairwise_accuracy": correct / n_pairs if n_pairs else math.nan,
          "recall_at_k": float(np.mean(recalls)) if recalls else math.nan, "n_pairs": n_pairs, "n_tasks": len(recalls)}


# ---------------------------------------------------------------------------------------------- the model

class MLPCostModel:
  """Ansor's pack-sum cost model with TenSet's per-row MLP, trained with optax (AdamW, clip 0.5).

  Parameters
  ----------
  n_features : width F of a feature row (``features.N_FEATURES``: 165, Ansor's 164 and ``tensor_mma``).
  hidden : width of the two hidden layers.
  loss : ``"weighted_mse"`` (Ansor) or ``"rank"`` (RankNet pairwise loss within a task).
  seed : seeds the init (jax PRNG), the shuffles and validation split (numpy Generator) and the
    random scores before the first fit; training is deterministic given the seed and the data.
  epochs, lr, batch : at most ``epochs`` passes (early stopping with patience 5 on a 10 % validation split
    when there are >= 50 programs), AdamW learning rate (weight decay 1e-6), programs per step.

  Attributes
  ----------
  params : the trained params pytree (None before the first fit). Features are divided by ``scale``
    (each column's max |value| over the training data, TenSet's ``fea_norm_vec``) before the MLP;
    :meth:`score_fn` folds that in.
  """

  def __init__(self, n_features: int, hidden: int = 256, loss: str = "weighted_mse", seed: int = 0, epochs: int = 30,
               lr: float = 7e-4, batch: int = 512):
    if loss not in LOSSES:
      raise CostModelError(f"unknown loss {loss!r}; expected one of {LOSSES}")
    if n_features < 1 or hidden < 1 or epochs < 0 or batch < 1 or not lr > 0:
      raise CostModelError(f"invalid config: {n_features=} {hidden=} {epochs=} {batch=} {lr=}")
    self.n_features, self.hidden, self.loss, self.seed = int(n_features), int(hidden), loss, int(seed)
    self.epochs, self.lr, self.batch = int(epochs), float(lr), int(batch)
    self.weight_decay, self.clip = 1e-6, 0.5
    self.params: Params | None = None
    self.scale = np.ones(self.n_features, np.float32)
    self._programs: list[np.ndarray] = []
    self._costs: list[float | None] = []
    self._tasks: list[str] = []

  @property
  def fitted(self) -> bool:
    return self.params is not None

  def config(self) -> dict:
    return {"n_features": self.n_features, "hidden": self.hidden, "loss": self.loss, "seed": self.seed,
            "epochs": self.epochs, "lr": self.lr, "batch": self.batch}

  # -- data ------------------------------------------------------------------------------------------------

  def _check_programs(self, programs: Sequence[np.ndarray]) -> list[np.ndarray]:
    out = []
    for i, p in enumerate(programs):
      a = np.asarray(p, np.float32)
      if a.size == 0:
        a = np.zeros((0, self.n_features), np.float32)
      elif a.ndim != 2 or a.shape[1] != self.n_features:
        raise CostModelError(f"program {i} has feature shape {a.shape}; expected (n_rows, {self.n_features})")
      out.append(a)
    return out

  def _check_data(self, programs, costs, task_ids) -> tuple[list[np.ndarray], list, list[str]]:
    progs, costs, tasks = self._check_programs(programs), list(costs), [str(t) for t in task_ids]
    if not len(progs) == len(costs) == len(tasks):
      raise CostModelError(f"{len(progs)} programs, {len(costs)} costs and {len(tasks)} task ids differ in length")
    normalized_throughput(costs, tasks)   # validates the costs before anything is stored
    return progs, costs, tasks

  def fit(self, programs: Sequence[np.ndarray], costs: Sequence[float | None], task_ids: Sequence[Hashable]) -> dict:
    """Train from scratch on exactly this data (it replaces what the model has seen).

    ``costs[i]`` is program i's measured cost (seconds; None or inf if it failed), ``task_ids[i]`` its task;
    labels are normalised per task. Programs with no rows are skipped. Returns training stats:
    ``epochs`` run, ``best_epoch``, ``train_loss`` (last epoch), ``val_loss`` (best, None without a
    validation split), ``seconds``, ``n_train``, ``n_val``; ``skipped`` names why nothing was trained
    (no measured program, or no pair to rank), in which case the model stays as it was.
    """
    self._programs, self._costs, self._tasks = self._check_data(programs, costs, task_ids)
    return self._train()

  def update(self, programs: Sequence[np.ndarray], costs: Sequence[float | None], task_ids: Sequence[Hashable]) -> dict:
    """Add this data to everything seen so far and retrain from scratch on all of it (as Ansor does each round)."""
    progs, costs, tasks = self._check_data(programs, costs, task_ids)
    self._programs += progs
    self._costs += costs
    self._tasks += tasks
    return self._train()

  @property
  def n_seen(self) -> int:
    return len(self._programs)

  # -- training --------------------------------------------------------------------------------------------

  def _train(self) -> dict:
    import jax
    t0 = time.perf_counter()
    y_all = normalized_throughput(self._costs, self._tasks).astype(np.float32)
    keep = np.array([len(p) > 0 for p in self._programs], bool)
    idx_keep = np.flatnonzero(keep)
    progs = [self._programs[i] for i in idx_keep]
    y = y_all[idx_keep]
    _, group = np.unique(np.array([self._tasks[i] for i in idx_keep], dtype=str), return_inverse=True)
    group = group.astype(np.int32)
    stats = {"epochs": 0, "best_epoch": 0, "train_loss": None, "val_loss": None, "seconds": 0.0,
             "n_train": 0, "n_val": 0, "skipped": None}
    if not progs:
      return {**stats, "skipped": "no program with feature rows"}
    lens = np.array([len(p) for p in progs], np.int64)
    flat = np.concatenate(progs)
    if not np.all(np.isfinite(flat)):
      raise CostModelError("training features contain NaN or inf; the feature extractor must return finite rows")
    scale = np.abs(flat).max(axis=0)
    scale = np.where(scale > 0, scale, 1.0).astype(np.float32)
    flat = flat / scale
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]])

    rng = np.random.default_rng(self.seed)
    n = len(progs)
    perm = rng.permutation(n)
    n_val = max(1, n // 10) if n >= _MIN_VAL_PROGRAMS else 0
    val, tr = np.sort(perm[:n_val]), perm[n_val:]
    if self.loss == "weighted_mse" and not np.any(y[tr] > 0):
      return {**stats, "skipped": "no measured program to learn from (weighted_mse weights failed ones by 0)"}
    if self.loss == "rank" and not any(np.unique(y[tr][group[tr] == g]).size > 1 for g in np.unique(group[tr])):
      return {**stats, "skipped": "no pair of programs of one task with different costs"}

    n_b = min(pow2_bucket(min(self.batch, len(tr)), MIN_PROGS), self.batch)   # a non-power-of-two batch is its own bucket

    # All shuffles up front, so one row bucket fits every batch of this fit: one compilation per fit, not one
    # per distinct batch size (each costs ~1 s on 2 cores; padding only the last batch costs far less).
    orders = [rng.permutation(tr) for _ in range(self.epochs)]
    n_rows = max(int(np.add.reduceat(lens[o], np.arange(0, len(o), n_b)).max()) for o in [*orders, val] if len(o))
    n_rows = pow2_bucket(n_rows, MIN_ROWS)

    def batches(ids: np.ndarray) -> Iterator[tuple[Batch, int]]:
      for a in range(0, len(ids), n_b):
        b = ids[a:a + n_b]
        rows, seg = pack(gather_rows(flat, starts[b], lens[b]), lens[b], n_rows, n_b)
        pad = n_b - len(b)
        yield Batch(rows, seg, np.pad(y[b], (0, pad)), np.pad(group[b], (0, pad), constant_values=-1),
                    np.pad(np.ones(len(b), bool), (0, pad))), len(b)

    init, step = train_fns(self.loss, self.lr, self.weight_decay, self.clip, self.n_features, self.hidden)
    eval_loss = eval_loss_fn(self.loss)
    params, opt_state = init(jax.random.PRNGKey(self.seed))
    best, best_params, best_epoch, bad, train_loss = math.inf, params, 0, 0, math.nan
    epoch = 0
    for epoch in range(1, self.epochs + 1):
      losses, counts = [], []
      for batch, cnt in batches(orders[epoch - 1]):
        params, opt_state, value = step(params, opt_state, batch)
        losses.append(value)
        counts.append(cnt)
      train_loss = float(np.average(np.array(jax.device_get(losses)), weights=counts))
      if not n_val:
        continue
      vl = [(float(eval_loss(params, b)), c) for b, c in batches(val)]
      val_loss = float(np.average([v for v, _ in vl], weights=[c for _, c in vl]))
      if val_loss < best:
        best, best_params, best_epoch, bad = val_loss, params, epoch, 0
      else:
        bad += 1
        if bad >= _PATIENCE:
          break
    self.params = best_params if n_val else params
    self.scale = scale
    return {**stats, "epochs": epoch, "best_epoch": best_epoch if n_val else epoch, "train_loss": train_loss,
            "val_loss": best if n_val else None, "seconds": time.perf_counter() - t0, "n_train": len(tr), "n_val": n_val}

  # -- inference -------------------------------------------------------------------------------------------

  def predict(self, programs: Sequence[np.ndarray]) -> np.ndarray:
    """Scores (float32, higher = predicted faster) of ``programs``, each ``(n_rows, n_features)``.

    A program with no rows (its features failed) scores -inf. Before the first fit the scores are
    small deterministic pseudo-random numbers in [0, 1e-3), a hash of the seed and the program (Ansor's
    random model). Programs go through the MLP in chunks of <= 4096 programs / 16384 rows, bucketed to
    powers of two, so repeated calls reuse the same few compiled shapes.
    """
    progs = self._check_programs(programs)
    lens = np.array([len(p) for p in progs], np.int64)
    out = np.full(len(progs), -np.inf, np.float32)
    nz = np.flatnonzero(lens > 0)
    if not self.fitted:
      out[nz] = _random_scores([progs[i] for i in nz], self.seed)
      return out
    f = predict_fn()
    inv_scale = (1.0 / self.scale).astype(np.float32)
    for a, b in chunks(lens[nz]):
      ids = nz[a:b]
      rows = np.concatenate([progs[i] for i in ids])
      if not np.all(np.isfinite(rows)):
        raise CostModelError("program features contain NaN or inf; the feature extractor must return finite rows")
      n_b = pow2_bucket(len(ids), MIN_PROGS)
      rows, seg = pack(rows, lens[ids], pow2_bucket(len(rows), MIN_ROWS), n_b)
      out[ids] = np.asarray(f(self.params, inv_scale, rows, seg, np.zeros(n_b, bool)))[:len(ids)]
    return out

  def score_fn(self) -> ScoreFn:
    """A pure, differentiable ``(params, rows[R, F], mask[R]) -> scalar`` equal to :meth:`predict`'s score.

    ``rows`` are raw (slog-transformed) feature rows, as predict() takes them; the column scaling of the
    current fit is baked in as a constant, so call score_fn() again after fit()/update(). ``mask[R]``
    (bool) selects the real rows, so callers can pad to a fixed R. Felix differentiates it with respect
    to ``rows`` (features are functions of the schedule variables), holding ``model.params`` fixed::

        f = model.score_fn()
        g = jax.grad(lambda x: f(model.params, x, mask))(rows)
    """
    if not self.fitted:
      raise CostModelError("score_fn() needs a fitted model: call fit() or update() first (or load a fitted one)")
    import jax.numpy as jnp
    inv_scale = jnp.asarray(1.0 / self.scale, jnp.float32)

    def score(params: Params, rows: jax.Array, mask: jax.Array) -> jax.Array:
      return program_score(params, rows * inv_scale, mask)
    return score

  # -- persistence -----------------------------------------------------------------------------------------

  def save(self, path: str | os.PathLike) -> None:
    """Write weights, column scales, config and format version to one ``.npz`` (atomically; the training
    data is not saved, so ``update()`` on a loaded model trains on the new data only)."""
    arrays = {"format_version": np.array(FORMAT), "config": np.array(json.dumps(self.config())), "scale": self.scale}
    if self.params is not None:
      arrays.update({f"param_{k}": np.asarray(v) for k, v in self.params.items()})
    path = os.fspath(path)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as fh:
      np.savez(fh, **arrays)
    os.replace(tmp, path)

  @classmethod
  def load(cls, path: str | os.PathLike) -> MLPCostModel:
    """Read a model written by :meth:`save`. Raises :class:`CostModelError` for a missing, corrupt or
    foreign file, or one of another format version."""
    path = os.fspath(path)
    try:
      with np.load(path, allow_pickle=False) as z:
        data = {k: z[k] for k in z.files}
    except FileNotFoundError as e:
      raise CostModelError(f"{path}: no such cost model file") from e
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
      raise CostModelError(f"{path}: not a readable .npz cost model file ({type(e).__name__}: {e})") from e
    if not isinstance(data, dict) or "format_version" not in data or "config" not in data:
      raise CostModelError(f"{path}: not a minicomp cost model file (no format_version/config entries)")
    version = int(data["format_version"])
    if version != FORMAT:
      raise CostModelError(f"{path}: cost model format version {version}, this minicomp reads version {FORMAT}")
    try:
      cfg = json.loads(str(data["config"]))
      model = cls(**cfg)
    except (json.JSONDecodeError, TypeError, CostModelError) as e:
      raise CostModelError(f"{path}: invalid cost model config ({e})") from e
    f, h = model.n_features, model.hidden
    scale = data.get("scale")
    if scale is None or scale.shape != (f,) or not np.all(np.isfinite(scale)) or not np.all(scale > 0):
      raise CostModelError(f"{path}: column scales missing or invalid (expected {f} positive finite values)")
    model.scale = scale.astype(np.float32)
    names = [f"param_{k}" for k in _PARAM_NAMES]
    present = [k in data for k in names]
    if any(present) and not all(present):
      raise CostModelError(f"{path}: weights incomplete (missing {[k for k, p in zip(names, present) if not p]})")
    if all(present):
      shapes = {"w1": (f, h), "b1": (h,), "w2": (h, h), "b2": (h,), "w3": (h, 1), "b3": (1,)}
      import jax.numpy as jnp
      params = {}
      for k in _PARAM_NAMES:
        a = data[f"param_{k}"]
        if a.shape != shapes[k] or not np.all(np.isfinite(a)):
          raise CostModelError(f"{path}: weight {k} has shape {a.shape} (expected {shapes[k]}) or non-finite values")
        params[k] = jnp.asarray(a, jnp.float32)
      model.params = params
    return model


__all__ = ["FORMAT", "LOSSES", "Batch", "MLPCostModel", "Params", "ScoreFn", "evaluate", "init_params", "loss",
           "normalized_throughput", "packed_scores", "program_score", "row_scores"]
