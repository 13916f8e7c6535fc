"""The cost model's MLP as pure functions of an explicit params pytree, and the packed batches it reads.

The model (``cost_model.py``) scores each feature row with ``Linear(F,256)-ReLU-Linear(256,256)-ReLU-
Linear(256,1)``, and a program's score is the sum over its rows. :func:`init_params`, :func:`row_scores`,
:func:`program_score`, :func:`packed_scores` and :func:`loss` are pure functions of ``params`` (STYLE item
10); :func:`train_fns`, :func:`eval_loss_fn` and :func:`predict_fn` are their jitted training step,
validation loss and prediction, cached per configuration. JAX and optax are imported inside the
functions, so importing this module stays fast.

Batching packs programs *flat*: all rows of a batch stacked into ``(R, F)`` plus a segment id per row,
summed with ``segment_sum``. Both ``R`` and the program count are bucketed to powers of two, so
``jax.jit`` compiles once per bucket, not once per batch; unlike a padded ``(B, R_max, F)`` layout no
work is spent on the padding of short programs.
:func:`pack`, :func:`gather_rows` and :func:`chunks` build that layout (:class:`Batch`) with numpy.
"""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterator
from functools import cache
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

if TYPE_CHECKING:
  import jax

Params = dict[str, Any]             # {"w1","b1","w2","b2","w3","b3"} -> jax arrays; a pytree
ScoreFn = Callable[[Params, "jax.Array", "jax.Array"], "jax.Array"]   # (params, rows[R,F], mask[R]) -> scalar
_PROG_CHUNK = 4096                  # programs per predict call (TenSet's infer batch)
_ROW_CHUNK = 16384                  # rows per predict call: every full chunk has this one shape
MIN_ROWS, MIN_PROGS = 64, 8         # smallest buckets, so tiny calls share one compiled shape
_TRACES: Counter[str] = Counter()   # how often each jitted function was traced (= compiled); tests read it


class Batch(NamedTuple):
  """Programs packed flat: ``rows[r]`` belongs to program ``seg[r]``; padding rows have ``seg == len(y)``
  (segment_sum drops them) and padding programs ``valid == False``."""
  rows: Any       # [R, F] float32, already divided by the column scales
  seg: Any        # [R] int32, sorted
  y: Any          # [B] float32 normalised throughput
  group: Any      # [B] int32 task index (pairs for the rank loss come from equal groups)
  valid: Any      # [B] bool


# ---------------------------------------------------------------------------------------------- pure functions

def init_params(key: jax.Array, n_features: int, hidden: int = 256) -> Params:
  """PyTorch's default Linear init, U(+-1/sqrt(fan_in)), as TenSet's model gets it. One uniform draw, sliced:
  XLA CPU compiles the threefry PRNG once per shape (~0.5 s each), so six draws would cost seconds."""
  import jax
  shapes = {"w1": (n_features, hidden), "b1": (hidden,), "w2": (hidden, hidden), "b2": (hidden,), "w3": (hidden, 1),
            "b3": (1,)}
  sizes = [math.prod(v) for v in shapes.values()]
  u = jax.random.uniform(key, (sum(sizes),), minval=-1.0, maxval=1.0)
  params, at = {}, 0
  for (name, shape), size in zip(shapes.items(), sizes):
    fan_in = n_features if name[1] == "1" else hidden
    params[name] = u[at:at + size].reshape(shape) / math.sqrt(fan_in)
    at += size
  return params


def row_scores(params: Params, rows: jax.Array) -> jax.Array:
  """The per-row MLP: ``rows[..., F] -> scores[...]`` (rows already scaled)."""
  import jax
  h = jax.nn.relu(rows @ params["w1"] + params["b1"])
  h = jax.nn.relu(h @ params["w2"] + params["b2"])
  return (h @ params["w3"] + params["b3"])[..., 0]


def program_score(params: Params, rows: jax.Array, mask: jax.Array) -> jax.Array:
  """One program's score: the sum of its (masked) row scores. ``rows[R, F]`` scaled, ``mask[R]`` bool."""
  import jax.numpy as jnp
  return jnp.sum(jnp.where(mask, row_scores(params, rows), 0.0))


def packed_scores(params: Params, rows: jax.Array, seg: jax.Array, n_programs: int) -> jax.Array:
  """Scores of ``n_programs`` programs packed flat (see :class:`Batch`)."""
  import jax
  return jax.ops.segment_sum(row_scores(params, rows), seg, num_segments=n_programs, indices_are_sorted=True)


def loss(params: Params, batch: Batch, kind: str) -> jax.Array:
  """``"weighted_mse"``: sum_i y_i (s_i - y_i)^2 / sum_i y_i (Ansor's pack-sum objective, weight = throughput,
  normalised by the weight sum so the step size does not depend on the batch). ``"rank"``: RankNet's
  mean softplus(-(s_i - s_j)) over the pairs of one task with y_i > y_j."""
  import jax
  import jax.numpy as jnp
  s = packed_scores(params, batch.rows, batch.seg, batch.y.shape[0])
  if kind == "weighted_mse":
    w = jnp.where(batch.valid, batch.y, 0.0)
    return jnp.sum(w * (s - batch.y) ** 2) / jnp.maximum(jnp.sum(w), 1e-12)
  pair = ((batch.group[:, None] == batch.group[None, :]) & (batch.y[:, None] > batch.y[None, :])
          & batch.valid[:, None] & batch.valid[None, :])
  l = jax.nn.softplus(-(s[:, None] - s[None, :]))
  return jnp.sum(jnp.where(pair, l, 0.0)) / jnp.maximum(jnp.sum(pair), 1)


@cache
def train_fns(kind: str, lr: float, weight_decay: float, clip: float, n_features: int, hidden: int):
  """Jitted ``init(key) -> (params, opt_state)`` and ``step``, cached so models with one config share
  compilations (eager init would compile every PRNG/slice op separately: seconds on 2 cores)."""
  import jax
  import optax
  opt = optax.chain(optax.clip_by_global_norm(clip), optax.adamw(lr, weight_decay=weight_decay))

  @jax.jit
  def init(key):
    params = init_params(key, n_features, hidden)
    return params, opt.init(params)

  @jax.jit
  def step(params, opt_state, batch: Batch):
    _TRACES["train"] += 1
    value, grads = jax.value_and_grad(loss)(params, batch, kind)
    updates, opt_state = opt.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, value
  return init, step


@cache
def eval_loss_fn(kind: str):
  import jax

  @jax.jit
  def f(params, batch: Batch):
    _TRACES["eval"] += 1
    return loss(params, batch, kind)
  return f


@cache
def predict_fn():
  import jax

  @jax.jit
  def f(params, inv_scale, rows, seg, valid):
    _TRACES["predict"] += 1
    return packed_scores(params, rows * inv_scale, seg, valid.shape[0])
  return f


# ---------------------------------------------------------------------------------------------- packing (numpy)

def pow2_bucket(n: int, lo: int) -> int:
  return max(lo, 1 << max(0, int(n) - 1).bit_length())


def pack(rows: np.ndarray, lens: np.ndarray, n_rows: int, n_progs: int) -> tuple[np.ndarray, np.ndarray]:
  """Pad ``rows`` (the programs' rows, stacked) to ``n_rows`` and build the sorted segment ids."""
  out = np.zeros((n_rows, rows.shape[1]), np.float32)
  out[:len(rows)] = rows
  seg = np.full(n_rows, n_progs, np.int32)   # padding rows point past the last segment: dropped
  seg[:len(rows)] = np.repeat(np.arange(len(lens), dtype=np.int32), lens)
  return out, seg


def gather_rows(flat: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
  """The rows of programs ``(starts[i], lens[i])`` of ``flat``, stacked, without a Python loop."""
  total = int(lens.sum())
  offs = np.repeat(starts - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens)
  return flat[offs + np.arange(total)]


def chunks(lens: np.ndarray) -> Iterator[tuple[int, int]]:
  """Greedy ``[a, b)`` ranges of at most _PROG_CHUNK programs and _ROW_CHUNK rows (a bigger program alone)."""
  cum = np.concatenate([[0], np.cumsum(lens)])
  a = 0
  while a < len(lens):
    b = min(a + _PROG_CHUNK, int(np.searchsorted(cum, cum[a] + _ROW_CHUNK, side="right")) - 1, len(lens))
    b = max(b, a + 1)
    yield a, b
    a = b

