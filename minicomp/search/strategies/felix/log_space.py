"""Felix's change of variables and the compiled feature function of a sketch
(``docs/search.md``, "Smoothing (Felix)").

Felix searches in ``y = log x`` for every size variable ``x`` of a sketch: products of tile sizes
become sums, and a step in ``y`` is a relative step in ``x``. :func:`exp_substitute` replaces each
``x`` by ``exp(y_x)`` in a smoothed formula (:mod:`minicomp.search.strategies.felix.smooth`), :func:`log_feature` is a
smooth ``slog`` for raw formulas, and :func:`compile_features` smooths, substitutes and compiles a
sketch's feature rows into one JAX function of ``y`` (:mod:`minicomp.search.strategies.felix.tape`).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable

from minicomp.ir.arith import call as fcall
from minicomp.ir.arith import exp, sqrt
from minicomp.ir.arith import fl as c
from minicomp.ir.expr import Expr, var
from minicomp.ir.ops import Op
from minicomp.ir.rewrite import Rules, rewrite
from minicomp.search.strategies.felix.smooth import F64, LN2, SMOOTH_CALLS, SMOOTH_OPS, Smoother, add, div, is_smooth, mul, smooth
from minicomp.search.strategies.felix.tape import compile_formulas


class _NotSmooth(Exception):
  pass


def exp_substitute(e: Expr, names: Iterable[str], memo: dict[Expr, Expr] | None = None) -> Expr:
  """``e`` with each size variable x in ``names`` replaced by ``exp(y_x)`` (Felix's x = e^y; the new
  variables keep the names, float64). ``e`` is smoothed first unless it already is. Pass one ``memo``
  dict for many expressions that share sub-DAGs (else each gets its own copy of the shared parts)."""
  names = set(names)
  memo = {} if memo is None else memo
  try: return _exp_sub(e, names, memo)
  except _NotSmooth: return _exp_sub(smooth(e), names, memo)


def _smooth_only(n: Expr, names) -> None:
  if n.dtype != F64 or (n.op not in SMOOTH_OPS and n.op not in (Op.MIN, Op.MAX)) or \
     (n.op is Op.CALL and n.arg not in SMOOTH_CALLS):
    raise _NotSmooth


EXP_SUBSTITUTE = Rules("exp substitution")      # ctx: the names of the size variables
EXP_SUBSTITUTE.add(_smooth_only)
EXP_SUBSTITUTE.add(lambda n, names: exp(var(n.arg, F64)) if n.arg in names else None, Op.VAR)


def _exp_sub(e: Expr, names: set[str], memo: dict[Expr, Expr]) -> Expr:
  return rewrite(e, EXP_SUBSTITUTE, names, memo)


def log_feature(e: Expr, h: float = 0.1) -> Expr:
  """Ansor's ``slog(x) = sign(x) log2(|x| + 1)``, smooth: ``x/sqrt(x^2+h^2) * log2(x^2/sqrt(x^2+h^2) + 1)``.

  Felix logs its features so products of variables become sums (linear in y). minicomp's rows are
  already slog-ed where that matters (counts, bytes, extents, reuse); one-hots and the curve are not
  and should not be. Use this on raw quantities (a formula of your own); exact at 0, within
  ``h^2 / min(|x|, x^2)`` of slog elsewhere."""
  if not is_smooth(e): e = smooth(e)
  r = sqrt(add(mul(e, e), c(h * h)))
  return mul(div(e, r), mul(fcall("log", add(div(mul(e, e), r), c(1.0))), c(1.0 / LN2)))


def compile_features(rows: list[list[Expr]], names: list[str], **smoother_kw) -> Callable:
  """Felix's feature function of a sketch: ``f(y[len(names)]) -> (len(rows), len(rows[0]))`` with the
  rows smoothed (``Smoother(**smoother_kw)``, one memo), x = exp(y) substituted, and compiled."""
  sm = Smoother(**smoother_kw)
  memo: dict[Expr, Expr] = {}
  flat = [exp_substitute(sm(e), names, memo) for row in rows for e in row]
  g = compile_formulas(flat, names)
  shape = (len(rows), len(rows[0]) if rows else 0)

  def f(y):
    return g(y).reshape(shape)
  f.tape, f.smoother = g.tape, sm
  return f


__all__ = ["EXP_SUBSTITUTE", "compile_features", "exp_substitute", "log_feature"]
