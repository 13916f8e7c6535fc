"""The counting engine: distinct elements of sets of accesses, and their sums over blocks / threads.

Every count of the data-movement analysis (``footprint.py``) is a number of distinct (kept hardware
indices, element) pairs some accesses touch, with some input dimensions fixed: the cardinality of
the image of access relations (``isl_build.py``). :class:`DistinctCounter` takes each count the
cheapest way that is exact: numpy enumeration for small sets (``enumeration.py``), isl within an
operation budget, the instance count of an injective access, enumeration again; a set too large
for all of them is sampled (:func:`_sampled`), so that every count finishes in bounded time, and
the result says so.

:func:`sum_unique` sums the distinct elements of every block (or thread) over the grid: translation
invariance and classes of equal counts (:func:`_class_sum`) keep it exact; failing those, it is
estimated from the first and the last block.
"""
from __future__ import annotations

import itertools
import math

import islpy as isl
import numpy as np

from minicomp.ir.evaluate import evaluate_again
from minicomp.ir.expr import Expr, free_vars
from minicomp.ir.loop import LoopKernel
from minicomp.ir.ops import Op
from minicomp.ir.linear import bounds, build_linear, linear
from minicomp.ir.simplify import simplify
from minicomp.search.static.footprint.enumeration import distinct_rows, enumerate_count, instances, kept_span, relevant
from minicomp.search.static.footprint.isl_build import HW_TAGS, N_HW, AccessMap, hw_extent, isl_budgeted
from minicomp.search.static.footprint.separable import separable_count

SUM_EXACT_LIMIT = 512     # kept hardware-index combinations isl may scan for an exact per-block / per-thread sum
ISL_BUDGETS = (3000, 30000)   # isl operations a count may take, first and second try
INJECTIVE_BUDGET = 3000   # isl operations an injectivity test may take
ENUM_CHEAP = 1 << 18      # sets of at most this many instances are enumerated with numpy (isl is slower there)
SEPARABLE_MIN = 1 << 16   # sets of more instances are first counted in closed form when the index separates
ENUM_LIMIT = 1 << 20      # instances enumerated in one go (sampled sums)
ENUM_HARD_LIMIT = 1 << 25  # instances the numpy fallback enumerates at most (in chunks)
# past the first isl budget, sets this small are enumerated rather than retried (isl's second budget can take seconds)
ENUM_PREFERRED = 1 << 25
SAMPLE_LIMIT = 1 << 22     # instances a sampled count enumerates (sets too large for isl and for ENUM_HARD_LIMIT)
SUM_CLASSES_LIMIT = 256   # classes of equal per-block / per-thread counts counted one by one at most
SUM_ENUM_LIMIT = 1 << 18  # instances a per-block / per-thread sum enumerates before it samples


class DistinctCounter:
  """Distinct-element counts of sets of accesses, memoised, with ``stats`` of how each was taken.

  A set of more than :data:`SEPARABLE_MIN` instances of one access is first counted in closed
  form when its index separates into parts over disjoint variables (``separable.py``). Sets of
  at most :data:`ENUM_CHEAP` instances are enumerated with numpy: isl's ``count_val``
  scans the points of a set with existential variables, and a few small ones with awkward
  lattices (fused loops split again by threads) take it seconds to minutes. Larger sets go to
  isl: its count within a small operation budget; for a single injective access, the count of
  its (factored) instance domain; the count within a larger budget; then enumeration when
  there are at most :data:`ENUM_HARD_LIMIT` instances (in chunks); otherwise a sampled count
  (:func:`_sampled`), so that every count finishes in bounded time. (isl without a budget, the
  last resort before, ran for more than 30 minutes on a stride-2 3x3 convolution's input.)
  """

  def __init__(self, kernel: LoopKernel):
    self.kernel = kernel
    self.stats = {"separable": 0, "isl": 0, "enumerated": 0, "sampled": 0}
    self.memo: dict[tuple, int] = {}

  def __call__(self, ms, keep: int = 0, fixed: tuple[int, ...] = (), at: tuple[tuple[int, int], ...] = ()) -> int:
    """Distinct (first ``keep`` hardware indices, element) pairs the accesses ``ms`` touch, with
    the input dimensions ``fixed`` at 0 and ``at`` (position, value) fixed."""
    return self.items([(m, fixed, at) for m in ms], keep)

  def union_fixed(self, by_fix: dict[tuple[int, ...], list[AccessMap]]) -> int:
    """Distinct elements of several groups of accesses, each with its own fixed dimensions."""
    return self.items([(m, fx, ()) for fx, ms in by_fix.items() for m in ms], 0)

  def items(self, items: list[tuple[AccessMap, tuple[int, ...], tuple]], keep: int) -> int:
    if not items: return 0
    unit = {p for p in range(N_HW) if hw_extent(self.kernel, p) == 1}     # fixing those changes nothing
    items = [(m, tuple(p for p in fx if p not in unit), at) for m, fx, at in items]
    if unit.issuperset(range(keep)): keep = 0                            # constant keys
    same = {}                          # a read and a write of one statement touch the same elements
    for m, fx, at in items: same.setdefault((_shape(m), fx, at), (m, fx, at))
    items = list(same.values())
    key = (keep,) + tuple((id(m), fx, at) for m, fx, at in items)
    if key not in self.memo: self.memo[key] = self._count(items, keep)
    return self.memo[key]

  def _count(self, items, keep: int) -> int:
    """The count, never above the instances visited (each touches one element): a gather, counted as covering its
    whole buffer (its index is data), touches at most that many (an embedding lookup reads its rows, not the table)."""
    fixes = [(m, {**{p: 0 for p in fx}, **dict(at)}) for m, fx, at in items]
    n = sum(instances(m, keep, f) for m, f in fixes)
    return min(n, self._counted(items, fixes, keep, n))

  def _counted(self, items, fixes, keep: int, n: int) -> int:
    if n > SEPARABLE_MIN and len(fixes) == 1:
      c = separable_count(*fixes[0], keep)
      if c is not None:
        self.stats["separable"] += 1
        return c
    if n <= ENUM_CHEAP:
      self.stats["enumerated"] += 1
      return enumerate_count(fixes, keep)
    s = _union(m.image(keep, fx, at) for m, fx, at in items)
    count = lambda: s.count_val().to_python()
    c = isl_budgeted(count, ISL_BUDGETS[0])
    if c is None and len(fixes) == 1:   # one access, injective: the image is as large as the domain
      (m, fix), = fixes
      drop = frozenset(range(len(m.extents))) - set(relevant(m, keep)) - set(fix)
      if m.affine_index and m.exact and m.injective(keep, fix, drop, INJECTIVE_BUDGET):
        c = m.instance_count(fix, drop)
    if c is None and n > min(ENUM_PREFERRED, ENUM_HARD_LIMIT): c = isl_budgeted(count, ISL_BUDGETS[1])
    if c is not None:
      self.stats["isl"] += 1
      return c
    if n <= ENUM_HARD_LIMIT:
      self.stats["enumerated"] += 1
      return enumerate_count(fixes, keep)
    self.stats["sampled"] += 1        # a huge set isl finds hard: estimated, within stated bounds
    return _sampled(fixes, keep, n, self.kernel)[0]


def _sampled(fixes, keep: int, n: int, kernel: LoopKernel, limit: int = SAMPLE_LIMIT) -> tuple[int, int, int]:
  """(estimate, lower bound, upper bound) of the distinct count of :class:`DistinctCounter`, from at most
  about ``limit`` instances: the hardware index with the most values is restricted to evenly
  spaced values (the first and the last among them), the distinct elements found there are
  counted exactly and scaled by the fraction of its values taken.

  Kept indices (``p < keep``) partition the count, so when the blocks or threads alike touch
  alike many elements the scaling is exact; for an index that is not kept, overlap between its
  values (a convolution's halo) makes the scaled count an overestimate. The estimate is clipped
  to [distinct found, min(instances, buffer elements x kept combinations)], the bounds returned."""
  ms = [m for m, _ in fixes]
  cands = [p for p in range(N_HW) if all(p not in f for _, f in fixes) and len(kept_span(ms, p)) > 1
           and any(p in relevant(m, keep) for m in ms)]
  kept = math.prod(len(kept_span(ms, q)) for q in range(keep))
  upper = min(n, sum(int(m.access.buffer.size.arg) if m.access.buffer.size.is_const else n for m in ms) * kept)
  if not cands: return min(upper, enumerate_count(fixes, keep)), 0, upper
  p = max(cands, key=lambda q: len(kept_span(ms, q)))
  span = kept_span(ms, p)
  k = max(2, min(len(span), len(span) * limit // max(n, 1)))
  vals = sorted({span[round(i * (len(span) - 1) / (k - 1))] for i in range(k)})
  found = distinct_rows(fixes, keep, {p: vals}).shape[1]
  return max(found, min(upper, round(found * len(span) / len(vals)))), found, upper


def _shape(m: AccessMap) -> tuple:
  a = m.access
  return (a.buffer.name, a.index, a.conds, tuple(lp.node for lp in a.loops))


def _union(sets) -> isl.Set | None:
  out = None
  for s in sets: out = s if out is None else out.union(s)
  return out


def sum_unique(count: DistinctCounter, ms, keep: int) -> tuple[float, bool]:
  """Distinct elements of each block (keep 3) or thread (keep 6), summed over them; exact?

  A kept index the accesses are translation-invariant in (every access ``c * index + rest``
  with the same ``c``, no condition on it) contributes its extent as a factor, counted at 0.
  When the instances are too many to enumerate at once, the sum is taken by classes of equal
  counts (:func:`_class_sum`; over at most :data:`SUM_EXACT_LIMIT` key combinations only where
  there are at most half as many classes, else by counting all the keys at once), or as the
  instance count of one injective access. Failing those, it is estimated from the first and the
  last block (where bound guards cut tiles short), the first standing for all but the last, with
  every thread (or the first and last thread too).
  """
  if not ms: return 0, True
  kernel = count.kernel
  factor, fixed, rest = 1, [], []
  for p in range(keep):
    e = hw_extent(kernel, p)
    if e == 1: continue
    cs = {m.translation(HW_TAGS[p]) for m in ms}
    if len(cs) == 1 and None not in cs: factor *= e; fixed.append(p)
    else: rest.append(p)
  fix = {p: 0 for p in fixed}
  if sum(instances(m, keep, fix) for m in ms) <= SUM_ENUM_LIMIT: return factor * count(ms, keep, tuple(fixed)), True
  # classes first: a tensor-core kernel's blocks, fused into one index, are few but each reads a long k loop, and one
  # count per class (often one class for a weight tile) enumerates a fraction of what counting them all at once would
  keys = math.prod(len(kept_span(ms, p)) for p in rest)
  exact = _class_sum(count, ms, keep, fixed, rest, SUM_CLASSES_LIMIT if keys > SUM_EXACT_LIMIT else keys // 2) \
    if keys > 1 else None
  if exact is not None: return factor * exact, True
  if keys <= SUM_EXACT_LIMIT: return factor * count(ms, keep, tuple(fixed)), True
  shapes = {_shape(m): m for m in ms}
  if len(shapes) == 1:                 # one access, injective: the sum is its number of instances
    m = next(iter(shapes.values()))
    drop = frozenset(range(len(m.extents))) - set(relevant(m, keep)) - set(fix)
    if m.affine_index and m.exact and m.injective(keep, fix, drop, INJECTIVE_BUDGET):
      return factor * m.instance_count(fix, drop), True
  fixes = [(m, fix) for m in shapes.values()]
  size = lambda vals: sum(math.prod(len(vals[p]) if p in vals else len(m.span(p))
                                    for p in relevant(m, keep) if p not in fix) for m, _ in fixes)
  spans = {p: kept_span(ms, p) for p in rest}
  for sampled in ([p for p in rest if p < 3], rest):   # sample block indices; thread indices too if need be
    values = {p: sorted({r[0], r[-1]}) if p in sampled and len(r) else list(r) for p, r in spans.items()}
    if size(values) <= ENUM_LIMIT: break
  weights = {p: np.array([len(spans[p]) - 1, 1] if len(values[p]) == 2 and p in sampled else [1] * len(values[p]),
                         float) for p in rest}   # the first block stands for all but the last
  if size(values) <= ENUM_LIMIT:
    rows = distinct_rows(fixes, keep, values)            # one column per distinct (sampled key, element)
    w = np.ones(rows.shape[1])
    for p in rest: w *= weights[p][np.searchsorted(values[p], rows[p])]
    return factor * float(w.sum()), False
  total = 0.0
  for combo in itertools.product(*[[(p, v, w) for v, w in zip(values[p], weights[p])] for p in rest]):
    total += math.prod(c[2] for c in combo) * count(ms, keep, tuple(fixed), tuple((p, v) for p, v, _ in combo))
  return factor * total, False


def _class_sum(count: DistinctCounter, ms, keep: int, fixed: list[int], rest: list[int],
               most: int = SUM_CLASSES_LIMIT) -> int | None:
  """The exact sum over the ``rest`` kept indices by classes of equal counts, or None.

  When every index is ``K(kept indices) + R(other dims)`` with the same ``K`` for all the
  accesses (a translation of the key's elements) and every condition a boolean combination of
  comparisons ``K'(kept) + R'(other) <op> 0`` (bound guards), two keys whose values ``K'`` agree
  once clipped to the range ``-R'`` can take have equally many distinct elements: one count
  per class, weighted by the class size. None also where there are more than ``most`` classes.
  """
  tags = {HW_TAGS[p]: p for p in rest}
  if math.prod(len(kept_span(ms, p)) for p in rest) > 1 << 20: return None

  def split(e: Expr):
    terms, const = linear(e)
    kept = {t: k for t, k in terms.items() if free_vars(t) <= tags.keys() and free_vars(t)}
    other = {t: k for t, k in terms.items() if not free_vars(t) & tags.keys()}
    return None if len(kept) + len(other) != len(terms) else (kept, other, const)
  shift, atoms = None, []
  for m in ms:
    a = m.access
    sp = split(a.index) if m.affine_index and m.exact else None
    if sp is None or (shift is not None and build_linear(sp[0], 0) != shift): return None
    shift = build_linear(sp[0], 0)
    names = m.names
    ranges = {n: (0, 0 if p in fixed else m.extents[p] - 1) for p, n in enumerate(names) if n not in tags}
    for c in a.conds:
      for x in _comparisons(c) or [None]:
        sp = None if x is None else split(simplify(x.src[0] - x.src[1]))
        if sp is None: return None
        lo, hi = bounds(build_linear(sp[1], 0), ranges)
        atoms.append((build_linear(sp[0], sp[2]), lo, hi))
  axes = np.meshgrid(*[np.asarray(kept_span(ms, p)) for p in rest], indexing="ij")
  env = {n: axes[i].ravel() for i, n in enumerate(tags)}
  size = env[next(iter(tags))].size
  sig = [np.zeros(size, np.int64)]
  for k, lo, hi in atoms:        # K' + R' <op> 0 reads K' only through its clip to [-hi - 1, -lo + 1]
    v = np.broadcast_to(np.asarray(evaluate_again(k, env), np.int64), (size,))
    sig.append(np.clip(v, None if hi is None else -hi - 1, None if lo is None else -lo + 1))
  first, sizes = _column_classes(np.stack(sig))
  if len(first) > most: return None
  return sum(int(n) * count(ms, 0, tuple(fixed), tuple((p, int(env[HW_TAGS[p]][i])) for p in rest))
             for i, n in zip(first, sizes))


def _column_classes(sig: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """The first column of each class of equal columns of ``sig`` and the class sizes, in the
  columns' lexicographic order (as ``np.unique(sig, axis=1, return_index=True, return_counts=True)``).
  The columns are packed into one int64 each when their ranges allow (tens of times faster than
  comparing columns as rows of a structured array)."""
  if not sig.shape[1]: return np.zeros(0, np.int64), np.zeros(0, np.int64)
  lo, hi = sig.min(axis=1), sig.max(axis=1)
  spans = [int(h) - int(l) + 1 for l, h in zip(lo, hi)]
  if math.prod(spans) >= 1 << 62:
    _, first, sizes = np.unique(sig, axis=1, return_index=True, return_counts=True)
    return first, sizes
  key = np.zeros(sig.shape[1], np.int64)
  for row, l, n in zip(sig, lo, spans): key = key * n + (row - l)
  _, first, sizes = np.unique(key, return_index=True, return_counts=True)
  return first, sizes


def _comparisons(c: Expr) -> list[Expr] | None:
  """The integer comparisons a condition is a boolean combination of; None if it is not one."""
  if c.op in (Op.AND, Op.OR, Op.NOT):
    parts = [_comparisons(x) for x in c.src]
    return None if any(p is None for p in parts) else [x for p in parts for x in p]
  if c.op is Op.CONST: return []
  if c.op in (Op.LT, Op.LE, Op.GT, Op.GE, Op.EQ, Op.NE) and c.src[0].dtype in ("int32", "int64"): return [c]
  return None

