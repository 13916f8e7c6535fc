"""Felix's objective for one sketch, and gradient descent on it (docs/search.md, "Felix strategy").

A sketch's variables x (tile sizes, thread counts, vector widths; ``Sketch.params``) are optimised as
``y = log x``, plus one variable ``u`` for auto-unroll (below). For a batch of seeds ``Y[B, n + 1]``:

    O(y) = -score(features(y)) / s  +  lam * sum_j max(g_j(y), 0)^2          (Felix, eq. 4)

* ``features(y)``: the sketch's feature rows (``SketchFormulas.rows``) smoothed, with x = exp(y), and
  compiled (``log_space.compile_features``). The auto-unroll column is not a formula of the program:
  ``SketchFormulas.features`` writes ``log2(1 + max unroll step)`` into every row, so here that column
  *is* ``u``, a continuous variable in ``[0, log2(1025)]`` (0 when the sketch marks no loop).
* ``score``: the cost model's program score (``cost_model.program_score``: the MLP summed over rows,
  higher = faster; the same function ``MLPCostModel.predict`` and ``score_fn`` compute), with the
  params and column scales as *arguments*, so one compilation serves every retrained model.
* ``s``: the spread (std) of the model's scores over random valid programs of the sketch, passed in by
  the caller. The MLP's scale is arbitrary (ranking loss), so ``lam`` is in units of "how much better
  a program can look than a random one" and one ``lam`` fits every model and round. (Felix instead
  rescales the penalty gradient to 5x the cost gradient at every step.)
* constraints ``g_j <= 0``, all in log space:
  - box, by projection (clipping after each step; exact, never violated): ``0 <= y <= log extent``
    for tile sizes (innermost ``<= log inner_limit``), ``log min <= y <= log max`` over a choice's
    candidates (vector width <= 4, thread counts), ``0 <= u <= log2(1025)``;
  - linear, by penalty: per tile group ``sum y - log extent`` (the product fits the loop), threads per
    block ``sum y - log 1024`` and, where the stage has more than two warps of work, ``log 32 - sum y``
    (``annotate.check_values``), vthreads ``sum y - log 8``;
  - nonlinear, by penalty: each kernel's shared memory, block size and register estimate (32-bit words
    of its per-thread local buffers <= max registers per thread - ``REG_RESERVE``) from the sketch's
    resource formulas (``formulas.py``), smoothed and compiled like the features:
    ``log(max(bytes, 1)) - log(limit)``.
  A rounded point is still checked exactly (``annotate.make_candidate``) before it is measured.

Gradients are forward-mode (one JVP per variable, all seeds at once): the feature tape is a
``lax.scan`` over a value buffer, and its reverse-mode gradient copies the whole cotangent buffer at
every scan step: 3-4x slower than forward mode for the 10-30 variables of a sketch on CPU. The tape
is run with the seeds in the lanes of each buffer slot (``tape.Tape.run_lanes``; ``jax.vmap`` of
``Tape.run`` gathers across the batch and is ~3x slower again).
"""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from minicomp.search.annotate import UNROLL_CHOICES
from minicomp.search.sketch_types import Sketch
from minicomp.target import Target

UNROLL_MAX = math.log2(max(UNROLL_CHOICES) + 1)   # the unroll column's largest value (slog of 1024)
REG_RESERVE = 32      # registers per thread kept for indices, pointers and operands (register-estimate penalty)


def constraints(sketch: Sketch, target: Target) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
  """``(lo, hi, A, b)``: the box ``lo <= y <= hi`` and the coupled linear constraints ``A y <= b`` of
  the module docstring, over ``y = [log x for x in sketch.params] + [u]``."""
  names = list(sketch.params)
  idx = {v: i for i, v in enumerate(names)}
  n = len(names) + 1
  lo, hi = np.zeros(n), np.zeros(n)
  for g in sketch.tiles:
    for v in g.vars: hi[idx[v]] = math.log(g.extent)
    hi[idx[g.vars[-1]]] = math.log(max(1, min(g.extent, g.inner_limit)))
  for ch in sketch.choices:
    lo[idx[ch.var]], hi[idx[ch.var]] = math.log(min(ch.candidates)), math.log(max(ch.candidates))
  hi[-1] = UNROLL_MAX if sketch.unroll else 0.0
  rows: list[np.ndarray] = []
  bound: list[float] = []

  def add(vs, sign: float, limit: float) -> None:
    a = np.zeros(n)
    for v in vs: a[idx[v]] += sign
    rows.append(a); bound.append(sign * limit)
  for g in sketch.tiles:
    if len(g.vars) > 1: add(g.vars, 1.0, math.log(g.extent))
  for root, vs in sketch.threads.items():
    add(vs, 1.0, math.log(target.max_threads_per_block))
    work = math.prod(int(getattr(d, "arg", d)) for d in sketch.schedule.state.stage(root).tensor.shape)
    if work > 2 * target.warp_size: add(vs, -1.0, math.log(target.warp_size))
  for vs in sketch.vthreads.values():
    add(vs, 1.0, math.log(target.max_vthread_extent))
  A = np.array(rows, np.float64).reshape(len(rows), n)
  return lo, hi, A, np.array(bound, np.float64)


def resource_formulas(formulas, target: Target) -> tuple[list, list[float]]:
  """The non-constant resource Exprs of a sketch (shared bytes, threads and a register estimate per kernel)
  and their limits. The register estimate is the 32-bit words of the thread's local buffers (the
  accumulator tile, times its vthreads); the limit leaves ``REG_RESERVE`` of the target's registers per
  thread for indices, pointers and operands. It only steers the descent (ptxas decides); the exact checks
  (``annotate.make_candidate``) hold the same words to all of the target's registers per thread."""
  from minicomp.ir.ops import Op
  from minicomp.search.annotate import local_words
  exprs, limits = [], []
  for local in getattr(formulas, "local", []):
    regs = local_words(local) if local else None
    if regs is not None and regs.op is not Op.CONST:
      exprs.append(regs); limits.append(float(max(1, target.max_registers_per_thread - REG_RESERVE)))
  for block, _, shared in formulas.kernels:
    threads = math.prod(block[1:], start=block[0])
    if threads.op is not Op.CONST: exprs.append(threads); limits.append(float(target.max_threads_per_block))
    if shared:
      smem = sum((size * nbytes for size, nbytes in shared[1:]), shared[0][0] * shared[0][1])
      if smem.op is not Op.CONST: exprs.append(smem); limits.append(float(target.search_shared_bytes))
  return exprs, limits


class SketchObjective:
  """Felix's objective of one sketch (module docstring), compiled once; ``descend`` runs Adam on it.

  Building it smooths and compiles the sketch's feature formulas: seconds for a matmul, tens of
  seconds for a conv on 2 cores; the strategy caches one per sketch."""

  def __init__(self, sketch: Sketch, target: Target, formulas=None):
    from minicomp.search.features.formulas import SketchFormulas
    from minicomp.search.strategies.felix.log_space import compile_features, exp_substitute
    from minicomp.search.strategies.felix.smooth import Smoother
    from minicomp.search.strategies.felix.tape import compile_formulas
    self.sketch, self.target = sketch, target
    self.formulas = formulas if formulas is not None else SketchFormulas(sketch)
    self.names = list(sketch.params)
    self.dim = len(self.names) + 1
    rows = self.formulas.rows
    self.shape = (len(rows), len(rows[0]) if rows else 0)
    self.feature_tape = compile_features(rows, self.names).tape
    self.unroll_col = self.formulas.unroll_col
    self.lo, self.hi, self.A, self.b = constraints(sketch, target)
    exprs, limits = resource_formulas(self.formulas, target)
    sm, memo = Smoother(), {}
    self.resource_tape = compile_formulas([exp_substitute(sm(e), self.names, memo) for e in exprs],
                                          self.names).tape if exprs else None
    self.log_limits = np.log(np.array(limits, np.float64))
    self._step: Callable | None = None
    self._value: Callable | None = None

  # -- the pieces (jax, batched over seeds)
  def features(self, Y):
    """``Y[B, dim] -> [B, rows, features]``: the smoothed feature rows, unroll column = ``u``."""
    import jax.numpy as jnp
    B = Y.shape[0]
    F = self.feature_tape.run_lanes(Y[:, :-1]).reshape((B, *self.shape))
    u = jnp.broadcast_to(Y[:, -1:], (B, self.shape[0]))
    return F.at[:, :, self.unroll_col].set(u)

  def penalty(self, Y):
    """``Y[B, dim] -> [B]``: sum of squared violations of the linear and the resource constraints."""
    import jax.numpy as jnp
    p = jnp.zeros(Y.shape[0], Y.dtype)
    if len(self.b):
      g = Y @ jnp.asarray(self.A.T, Y.dtype) - jnp.asarray(self.b, Y.dtype)
      p = p + jnp.sum(jnp.maximum(g, 0.0) ** 2, axis=1)
    if self.resource_tape is not None:
      v = self.resource_tape.run_lanes(Y[:, :-1])
      g = jnp.log(jnp.maximum(v, 1.0)) - jnp.asarray(self.log_limits, Y.dtype)
      p = p + jnp.sum(jnp.maximum(g, 0.0) ** 2, axis=1)
    return p

  def values(self, Y, params, inv_scale, s, lam):
    """The objective per seed, ``[B]`` (lower = better)."""
    import jax
    import jax.numpy as jnp

    from minicomp.search.cost_model.mlp import program_score
    F = self.features(Y) * inv_scale
    mask = jnp.ones(self.shape[0], bool)
    score = jax.vmap(program_score, (None, 0, None))(params, F, mask)
    return -score / s + lam * self.penalty(Y)

  def value_and_grad(self, Y, params, inv_scale, s, lam):
    """Objective ``[B]`` and its gradient ``[B, dim]``, forward mode (module docstring)."""
    import jax
    import jax.numpy as jnp
    f = lambda Y: self.values(Y, params, inv_scale, s, lam)
    E = jnp.eye(self.dim, dtype=Y.dtype)
    val, tangents = jax.vmap(lambda e: jax.jvp(f, (Y,), (jnp.broadcast_to(e, Y.shape),)), out_axes=(None, 0))(E)
    return val, tangents.T

  # -- compiled entry points
  def _compiled(self):
    if self._step is None:
      import jax
      import jax.numpy as jnp
      import optax
      adam = optax.scale_by_adam()
      lo, hi = jnp.asarray(self.lo, jnp.float32), jnp.asarray(self.hi, jnp.float32)

      @jax.jit
      def step(Y, state, params, inv_scale, s, lam, lr):
        v, g = self.value_and_grad(Y, params, inv_scale, s, lam)
        upd, state = adam.update(g, state)
        return jnp.clip(Y - lr * upd, lo, hi), state, v

      self._step, self._init = step, jax.jit(adam.init)
      self._value = jax.jit(self.values)
    return self._step

  def _model_args(self, model):
    import jax.numpy as jnp
    return model.params, jnp.asarray(1.0 / model.scale, jnp.float32)

  def value(self, Y: np.ndarray, model, s: float = 1.0, lam: float = 10.0) -> np.ndarray:
    """The objective at ``Y[B, dim]`` (numpy in, numpy out) for a fitted ``model``."""
    import jax.numpy as jnp
    self._compiled()
    params, inv = self._model_args(model)
    return np.asarray(self._value(jnp.asarray(Y, jnp.float32), params, inv, jnp.float32(s), jnp.float32(lam)))

  def clip(self, Y: np.ndarray) -> np.ndarray:
    return np.clip(Y, self.lo, self.hi)

  def descend(self, Y0: np.ndarray, model, n_steps: int, lr: float = 0.3, lam: float = 10.0, s: float = 1.0,
              drop_at: float = 0.3, drop: float = 0.2) -> tuple[np.ndarray, np.ndarray]:
    """Adam from ``Y0[B, dim]`` (clipped into the box) for ``n_steps``; the learning rate drops to
    ``drop x lr`` after ``drop_at x n_steps`` steps (Felix's MultiStepLR). Returns every visited point,
    ``[n_steps + 1, B, dim]``, and the objective at each step's starting point, ``[n_steps, B]``."""
    import jax.numpy as jnp
    step = self._compiled()
    params, inv = self._model_args(model)
    Y = jnp.asarray(self.clip(np.asarray(Y0, np.float64)), jnp.float32)
    state = self._init(Y)
    s, lam = jnp.float32(s), jnp.float32(lam)
    path, vals = [np.asarray(Y)], []
    for t in range(n_steps):
      rate = jnp.float32(lr if t < drop_at * n_steps else lr * drop)
      Y, state, v = step(Y, state, params, inv, s, lam, rate)
      path.append(np.asarray(Y)); vals.append(np.asarray(v))
    return np.stack(path), np.stack(vals) if vals else np.zeros((0, len(Y0)), np.float32)


__all__ = ["UNROLL_MAX", "SketchObjective", "constraints", "resource_formulas"]
