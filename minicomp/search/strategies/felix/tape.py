"""Many expressions as one jit / vmap / grad-able JAX function: a tape interpreter of their DAG.

``compile_formulas`` turns Felix's smoothed feature formulas (:mod:`minicomp.search.strategies.felix.smooth`) into one
function of the sketch's variables. Tracing each of a million nodes into JAX would take minutes, so the
DAG becomes a program for a small interpreter instead: value slots (constants, variables, then the nodes
level by level, each level cut into chunks of equal width), one ``lax.scan`` step per chunk. Trace and
compile time do not grow with the node count. ``Tape.run_lanes`` runs a batch of points at once.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

import numpy as np

from minicomp.errors import ExprError
from minicomp.ir.evaluate import tape_table
from minicomp.ir.expr import Expr, walk
from minicomp.ir.ops import FLOAT_DTYPES, INT_DTYPES, Op


_TAPE_OPS = tape_table()     # the evaluator's tape form (minicomp.ir.evaluate)


def _opkey(n: Expr) -> tuple:
  if n.op is Op.CALL: key = ("CALL", n.arg)
  elif n.op is Op.CAST: key = ("CAST", "int" if n.dtype in INT_DTYPES and n.src[0].dtype in FLOAT_DTYPES else
                               "bool" if n.dtype == "bool" else None)
  else: key = (n.op.name, None)
  if key not in _TAPE_OPS: raise ExprError(f"compile_formulas cannot evaluate {n.op.name} {n.arg or ''} (in {n})")
  return key


class Tape:
  """The DAG of many Exprs as an interpreter program. Value slots: constants, variables, then chunks of
  ``width`` nodes of one depth level each (nodes of a level depend only on shallower ones, so a chunk
  reads the buffer and writes its own slice). Each chunk is one step of a ``lax.scan`` whose body
  runs every op kind present on all lanes and keeps each lane's own: tracing and compiling cost the
  same for ten nodes or a million; a step costs O(width x kinds)."""

  def __init__(self, exprs: list[Expr], names: list[str], width: int = 256):
    pos = {n: i for i, n in enumerate(names)}
    order: list[Expr] = []
    depth: dict[Expr, int] = {}
    for e in exprs:
      for n in walk(e, depth):
        if n.op is Op.VAR and n.arg not in pos: raise ExprError(f"variable {n.arg!r} is not in names")
        depth[n] = 0 if not n.src else 1 + max(depth[s] for s in n.src)
        order.append(n)
    index: dict[Expr, int] = {}
    consts = [n for n in order if n.op is Op.CONST]
    vars_ = [n for n in order if n.op is Op.VAR]
    for n in consts + vars_: index[n] = len(index)
    self.consts = np.array([float(n.arg) for n in consts], np.float64)
    self.var_pos = np.array([pos[n.arg] for n in vars_], np.int32)
    self.n_fixed = len(index)
    levels: dict[int, list[Expr]] = defaultdict(list)
    for n in order:
      if n.src: levels[depth[n]].append(n)
    self.kinds = sorted({_opkey(n) for n in order if n.src}, key=str)
    code = {k: i for i, k in enumerate(self.kinds)}
    chunks = [lv[i:i + width] for d in sorted(levels) for lv in [levels[d]] for i in range(0, len(lv), width)]
    self.width = width = min(width, max((len(ch) for ch in chunks), default=1))
    K = len(chunks)
    self.op = np.zeros((K, width), np.int32)
    self.args = np.zeros((K, 3, width), np.int32)
    self.start = (self.n_fixed + width * np.arange(K)).astype(np.int32)
    for k, ch in enumerate(chunks):
      for j, n in enumerate(ch): index[n] = int(self.start[k]) + j
    for k, ch in enumerate(chunks):
      for j, n in enumerate(ch):
        self.op[k, j] = code[_opkey(n)]
        for i, s in enumerate(n.src): self.args[k, i, j] = index[s]
    self.size = self.n_fixed + width * K
    self.out = np.array([index[e] for e in exprs], np.int32)
    self.n_nodes, self.depth, self.n_steps = len(order), max(depth.values(), default=0), K

  def run(self, xp, y):
    """The values of the Exprs at ``y`` (xp: numpy in float64, or jax.numpy in its default float type)."""
    dt = np.float64 if xp is np else xp.result_type(float)
    y = xp.asarray(y, dt)
    buf = xp.concatenate([xp.asarray(self.consts, dt), y[self.var_pos], xp.zeros(self.size - self.n_fixed, dt)])

    def step(buf, xs):
      op, args, start = xs
      return self._chunk(xp, op, buf[args[0]], buf[args[1]], buf[args[2]]), start

    if xp is np:
      with np.errstate(all="ignore"):
        for k in range(self.n_steps):
          r, s = step(buf, (self.op[k], self.args[k], self.start[k]))
          buf[s:s + self.width] = r
      return buf[self.out]
    import jax

    def body(buf, xs):
      r, s = step(buf, xs)
      return jax.lax.dynamic_update_slice(buf, r, (s,)), None
    buf, _ = jax.lax.scan(body, buf, (self.op, self.args, self.start))
    return buf[self.out]

  def _chunk(self, xp, op, a, b, c):
    """One chunk's results: every op kind present on all lanes, each lane keeping its own op's. ``op``
    is ``[width]``; operands are ``[width]`` or ``[width, batch]`` (``run_lanes``)."""
    r = xp.zeros_like(a)
    for i, k in enumerate(self.kinds):
      m = op == i
      if a.ndim == 2: m = m[:, None]
      r = xp.where(m, _TAPE_OPS[k](xp, a, b, c, m), r)
    return r

  def run_lanes(self, Y):
    """``run`` for a batch in jax: ``Y[B, n_vars] -> [B, n_out]``, with the value buffer ``[slots, B]``
    so every gather reads whole rows (``jax.vmap`` of ``run`` gathers across the batch: ~3x slower)."""
    import jax
    import jax.numpy as jnp
    B, dt = Y.shape[0], Y.dtype
    consts = jnp.broadcast_to(jnp.asarray(self.consts, dt)[:, None], (len(self.consts), B))
    buf = jnp.concatenate([consts, Y.T[self.var_pos], jnp.zeros((self.size - self.n_fixed, B), dt)])

    def body(buf, xs):
      op, args, start = xs
      r = self._chunk(jnp, op, buf[args[0]], buf[args[1]], buf[args[2]])
      return jax.lax.dynamic_update_slice(buf, r, (start, 0)), None
    buf, _ = jax.lax.scan(body, buf, (self.op, self.args, self.start))
    return buf[self.out].T


def compile_formulas(exprs: list[Expr], names: list[str], width: int = 256) -> Callable:
  """A pure JAX function ``f(y[len(names)]) -> values[len(exprs)]`` of the Exprs (smooth or not; the
  variables take the values of ``y`` by position), for ``jax.jit``, ``jax.vmap`` and ``jax.grad``.

  It computes in jax's default float type: float32, or float64 under ``jax_enable_x64``. The smooth
  rules keep float32 usable (selects and compact min/max are blends that give either side exactly, so
  2^40 sentinels do not swamp their neighbours). Integer ops use floor semantics on the float values,
  so exact (unsmoothed) formulas evaluate too, without useful gradients. ``f.tape.run(np, y)`` is the
  float64 numpy twin."""
  tape = Tape(list(exprs), list(names), width)

  def f(y):
    import jax.numpy as jnp
    return tape.run(jnp, y)
  f.tape = tape
  return f
