"""Evolution strategies (Tuna's Algorithm 4), a black-box minimiser over real vectors, independent of sketches.

With ``n`` mirrored samples ``eps_i ~ N(0, I)`` around a mean ``theta`` and their fitness ``F_i`` (higher
is better), one step is ``theta += alpha / (n sigma) sum_i F_i eps_i``. :func:`centered_ranks` shapes the
fitness by rank, :func:`es_step` is the update, and :func:`evolve` runs several independent means in
lockstep on one cost function. Tuna's search (``tuna.py``) runs it on a sketch's relaxed parameters.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

POPULATION = 32          # samples per run and iteration (mirrored: 16 pairs)
ITERATIONS = 40          # per run
SIGMA = 0.3              # noise, natural-log units (a factor of 1.35 in a tile size)
ALPHA = 1.0              # step size


def centered_ranks(fitness: np.ndarray) -> np.ndarray:
  """Rank-shaped utilities of ``fitness`` (higher is better) along the last axis: rank / (n - 1) - 0.5,
  so they lie in [-0.5, 0.5] and sum to 0; tied values share their mean rank; nan ranks last."""
  f = np.where(np.isnan(fitness), -np.inf, np.asarray(fitness, np.float64))
  out = np.zeros(f.shape)
  n = f.shape[-1]
  if n < 2: return out
  for idx in np.ndindex(f.shape[:-1]):
    row = f[idx]
    order = np.argsort(row, kind="stable")
    _, first, counts = np.unique(row[order], return_index=True, return_counts=True)
    ranks = np.empty(n)
    ranks[order] = np.repeat(first + (counts - 1) / 2, counts)
    out[idx] = ranks / (n - 1) - 0.5
  return out


def es_step(theta: np.ndarray, eps: np.ndarray, fitness: np.ndarray, alpha: float, sigma: float,
            shaping: bool = True) -> np.ndarray:
  """Algorithm 4's update, ``theta + alpha / (n sigma) sum_i F_i eps_i``, for ``theta`` [..., d], ``eps``
  [..., n, d] and ``fitness`` [..., n] (higher is better). ``F`` is ``centered_ranks(fitness)`` with
  ``shaping``, else the fitness itself (non-finite values replaced by the worst finite one, 0 if none)."""
  if shaping: F = centered_ranks(fitness)
  else:
    f = np.asarray(fitness, np.float64)
    ok = np.isfinite(f)
    worst = np.min(np.where(ok, f, np.inf), axis=-1, keepdims=True)
    F = np.where(ok, f, np.where(np.isfinite(worst), worst, 0.0))
  n = eps.shape[-2]
  return theta + alpha / (n * sigma) * np.einsum("...n,...nd->...d", F, eps)


@dataclass
class ESRun:
  """What :func:`evolve` did: the final means, the best sample per run, iterations and samples."""
  theta: np.ndarray          # [R, d]
  best: np.ndarray           # [R, d] best point scored per run (a sample or a mean)
  best_cost: np.ndarray      # [R]
  iterations: int
  samples: int


def evolve(cost, theta0: np.ndarray, rng: np.random.Generator, population: int = POPULATION,
           iterations: int = ITERATIONS, sigma: float = SIGMA, alpha: float = ALPHA, lo=None, hi=None,
           deadline: float | None = None, shaping: bool = True) -> ESRun:
  """Minimise ``cost`` (``Y[m, d] -> costs[m]``, ``inf`` allowed) by ES from the means ``theta0`` [R, d],
  R independent runs in lockstep: each iteration scores every run's ``population`` mirrored samples and
  its mean in one ``cost`` call, then steps each mean (:func:`es_step` on fitness ``-cost``) and clips it
  to [``lo``, ``hi``]. Stops after ``iterations`` or at ``deadline`` (``time.perf_counter()``)."""
  theta = np.array(theta0, np.float64, ndmin=2)
  R, d = theta.shape
  half = max(1, population // 2)
  n = 2 * half
  best, best_cost = theta.copy(), np.full(R, np.inf)
  done = samples = 0
  for _ in range(iterations):
    if deadline is not None and time.perf_counter() > deadline: break
    e = rng.standard_normal((R, half, d))
    eps = np.concatenate([e, -e], axis=1)
    Y = theta[:, None, :] + sigma * eps
    c = np.asarray(cost(np.concatenate([Y.reshape(-1, d), theta])), np.float64)
    cs = c[:R * n].reshape(R, n)
    pts = np.concatenate([Y, theta[:, None, :]], axis=1)
    allc = np.concatenate([cs, c[R * n:, None]], axis=1)
    i = np.argmin(allc, axis=1)
    better = allc[np.arange(R), i] < best_cost
    best[better] = pts[np.arange(R), i][better]
    best_cost = np.where(better, allc[np.arange(R), i], best_cost)
    theta = es_step(theta, eps, -cs, alpha, sigma, shaping)
    if lo is not None or hi is not None: theta = np.clip(theta, lo, hi)
    done += 1
    samples += R * (n + 1)
  return ESRun(theta, best, best_cost, done, samples)


__all__ = ["ALPHA", "ITERATIONS", "POPULATION", "SIGMA", "ESRun", "centered_ranks", "es_step", "evolve"]
