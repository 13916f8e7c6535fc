"""A sketch's features and resource use as formulas of its variables, evaluated for a whole
population at once.

Lowering a candidate and extracting its features in Python costs 0.1-0.5 s, so scoring Ansor's
population of 2048 per generation that way takes many minutes. A sketch is a symbolic schedule:
lowered once, its program's feature vector (``features.extract_program_exprs``), block size,
grid size and shared-memory bytes are expressions of the sketch's variables. Evaluating them
with numpy arrays of the candidates' values scores a whole population in one pass.

The values are those of the formulas, not of each concrete program: where a split does not
divide its loop (cooperative fetches, thread counts that do not divide a row), the concrete
lowering simplifies guards and regions that the symbolic program keeps general, so some
features (bytes, lines, reuse of the fetched buffers) differ from the concrete extractor's.
The search uses these formula features for training and for scoring alike, so the cost model
sees one consistent definition; the exact agreement the Felix issue needs holds where every
split divides (tests/test_features.py). The resource formulas are a pre-filter: a candidate
they accept is still lowered and checked exactly before it is measured.
"""
from __future__ import annotations

import numpy as np

from minicomp.errors import ExprError, MinicompError
from minicomp.ir.evaluate import fold_table
from minicomp.ir.expr import Expr, const
from minicomp.ir.ops import Op
from minicomp.ir.rewrite import compile_fold, fold
from minicomp.ir.simplify import fold_identities
from minicomp.search.sketch_types import Sketch
from minicomp.target import Target

UNROLL_COLUMN = "auto_unroll_max_step"


def _reads_tensor(env, n, k):     # the extractor reads a gather's loaded index by its position
  raise ExprError(f"a feature formula reads a tensor ({str(n)[:200]}); features.extract_program_exprs should have "
                  "replaced every loaded value by its position (feature_sites._positions)")


_FORMULA_TABLE = fold_table(np, wide=True) | {Op.LOAD: _reads_tensor, Op.REDUCE: _reads_tensor}


class FormulaEval:
  """Evaluate many expressions over the same variables with one shared memo (numpy arrays; integers
  int64, floats float64: ``evaluate.fold_table(wide=True)``)."""

  def __init__(self, env: dict[str, np.ndarray]):
    self.env, self.memo = env, {}

  def __call__(self, e: Expr):
    return fold(e, _FORMULA_TABLE, self.env, self.memo, what="feature formula")


class FormulaProgram:
  """Formulas one caller evaluates again and again on new values, in the same order (the analytic model's
  facts at every point of a walk): the first evaluation folds them as :class:`FormulaEval` does and records
  which it asked for; later ones run them compiled (``rewrite.compile_fold``: one straight-line function,
  the same rules on the same inputs, so the same values, several times faster). ``bind(env)`` gives the
  evaluator for one set of values; a formula not compiled yet is folded and compiled next time."""

  def __init__(self):
    self.roots: dict[Expr, int] = {}
    self._run = None
    self._compiled = 0
    self._folded: dict = {}      # (fold_identities' memo: a recompile folds only the new formulas)

  def bind(self, env: dict[str, np.ndarray]) -> "_Bound":
    if len(self.roots) > self._compiled:      # (compiled with the identities dropped: the same values, fewer nodes)
      roots = [fold_identities(r, self._folded) for r in self.roots]
      self._run, self._compiled = compile_fold(roots, _FORMULA_TABLE, "feature formula"), len(self.roots)
    return _Bound(self, env, self._run(env) if self._run is not None else [])


class _Bound:
  def __init__(self, prog: FormulaProgram, env: dict, values: list):
    self.prog, self.env, self.values, self.memo = prog, env, values, {}

  def __call__(self, e: Expr):
    k = self.prog.roots.get(e)
    if k is not None and k < len(self.values): return self.values[k]
    if k is None: self.prog.roots[e] = len(self.prog.roots)
    return fold(e, _FORMULA_TABLE, self.env, self.memo, what="feature formula")


class SketchFormulas:
  """Features and resources of one sketch as formulas (built once per sketch)."""

  def __init__(self, sketch: Sketch):
    from minicomp.search.features import extract_program_exprs, feature_names
    self.sketch = sketch
    prog = sketch.schedule.lower()
    self.rows = extract_program_exprs(prog)
    self.unroll_col = feature_names().index(UNROLL_COLUMN)
    self.kernels = [(tuple(_e(d) for d in k.block), tuple(_e(d) for d in k.grid),
                     [(_e(b.size), b.element_bytes) for b in k.allocs if b.scope == "shared"])
                    for k in prog.kernels]
    # per kernel: (elements, bytes) of each per-thread local buffer: the register estimate Felix penalises
    self.local = [[(_e(b.size), b.element_bytes) for b in k.allocs if b.scope == "local"] for k in prog.kernels]

  def _env(self, values: list[dict]) -> dict[str, np.ndarray]:
    names = self.sketch.schedule.params()
    return {n: np.array([v[n] for v in values], np.int64) for n in names}

  def features(self, values: list[dict], unroll: list[dict]) -> np.ndarray:
    """(P, rows, N_FEATURES) float32 for P candidates of this sketch. The auto-unroll column holds
    slog of the candidate's largest ``auto_unroll_max_step`` (the lowered program does not carry it)."""
    from minicomp.search.features import N_FEATURES
    P = len(values)
    ev = FormulaEval(self._env(values))
    out = np.zeros((P, len(self.rows), N_FEATURES), np.float64)
    for r, row in enumerate(self.rows):
      for c, e in enumerate(row):
        out[:, r, c] = e.arg if e.op is Op.CONST else np.broadcast_to(np.asarray(ev(e), np.float64), (P,))
    u = np.array([max(x.values(), default=0) for x in unroll], np.float64)
    out[:, :, self.unroll_col] = np.log2(u + 1.0)[:, None]
    return out.astype(np.float32)

  def valid(self, values: list[dict], target: Target) -> np.ndarray:
    """Boolean (P,): block size, grid size and shared memory within ``target``'s limits by the formulas, and the
    thread-local buffers within the registers the search offers (``annotate.make_candidate``'s checks)."""
    from minicomp.search.annotate import local_words
    P = len(values)
    ev = FormulaEval(self._env(values))
    ok = np.ones(P, bool)
    for local in self.local:
      ok &= local_words([(np.broadcast_to(np.asarray(ev(n), np.int64), (P,)), nb) for n, nb in local]) \
          <= target.max_registers_per_thread
    for block, grid, shared in self.kernels:
      dims = [np.broadcast_to(np.asarray(ev(d), np.int64), (P,)) for d in block]
      ok &= np.prod(dims, axis=0) <= target.max_threads_per_block
      for d, m in zip(dims, target.max_block_dims): ok &= d <= m
      for g, m in zip(grid, target.max_grid_dims): ok &= np.broadcast_to(np.asarray(ev(g), np.int64), (P,)) <= m
      smem = sum((np.broadcast_to(np.asarray(ev(s), np.int64), (P,)) * nb for s, nb in shared), np.zeros(P, np.int64))
      ok &= smem <= target.search_shared_bytes
    return ok


def _e(x) -> Expr:
  return x if isinstance(x, Expr) else const(int(x))


def formulas_or_none(sketch: Sketch) -> SketchFormulas | None:
  """The sketch's formulas, or None when its symbolic program cannot be lowered or featurized
  (the search then falls back to lowering each candidate)."""
  try:
    return SketchFormulas(sketch)
  except MinicompError:   # a symbolic program that does not lower or featurize: use the per-candidate path
    return None


__all__ = ["FormulaEval", "SketchFormulas", "formulas_or_none"]
