"""Distinct elements of one access in closed form, when its index separates into independent parts.

Most large counts of the data-movement analysis are of one access whose index is a sum of terms,
each reading its own few variables: a tiled matmul's shared-memory fetch reads
``bx // 8 * 32768 + f0 * 16384 + tx * 4 // 64 * 1024 + k0 * 64 + tx * 4 % 64 + f3``. Grouping the
variables that share a term or a condition (each conjunct of the guards: bounds, padding) splits
the instances into a product of parts over disjoint variables, and the elements into the
Minkowski sum of the parts' value sets; each part is small enough to evaluate over its own grid
(a few thousand points where the whole set has tens of millions), its conditions as a mask.

:func:`separable_count` builds that sum from the narrowest part up: a part whose neighbouring
values lie further apart than the sum so far spans (or the reverse) multiplies the count, since
no two sums can coincide; overlapping parts are added explicitly (every pairwise sum,
deduplicated) while that is small. Kept hardware indices enter the key, not the element: a part of
kept indices alone multiplies the count by the combinations its conditions allow; a part that ties
kept indices to element variables (a padded convolution's halo guard reads the block index) is
taken per combination of those kept indices and the counts summed (at most :data:`KEPT_LIMIT`
combinations, equal ones once). Anything else (a gather, a part larger than :data:`PART_LIMIT`,
overlapping parts too large to add, a condition that cannot be evaluated) returns None and the
caller counts another way. The result equals
:func:`~minicomp.search.static.footprint.enumeration.enumerate_count` exactly (tested against it and
against the simulator's trace).
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from minicomp.errors import ExprError
from minicomp.ir.evaluate import evaluate_again
from minicomp.ir.expr import free_vars
from minicomp.ir.linear import linear
from minicomp.ir.ops import Op
from minicomp.search.static.footprint.enumeration import _sorted_unique, instances, relevant
from minicomp.search.static.footprint.isl_build import AccessMap

PART_LIMIT = 1 << 20      # grid points a part of the index is evaluated over at most
PAIR_LIMIT = 1 << 20      # pairwise sums the explicit Minkowski sum forms at most
MIN_SAVING = 2            # the parts' grids must hold at most 1/this of the instances' grid (else enumerate)
KEPT_LIMIT = 1 << 10      # combinations of kept indices tied to element variables that are summed one by one


def separable_count(m: AccessMap, fix: dict[int, int], keep: int) -> int | None:
  """Distinct (first ``keep`` hardware indices, element) pairs of access ``m`` with the input
  dimensions ``fix`` fixed, or None when the index does not separate (see the module)."""
  if not m.affine_index: return None
  names = m.names
  if len(set(names)) != len(names): return None      # an inner loop shadows an outer one
  dims = [p for p in relevant(m, keep) if p not in fix]
  if any(len(m.span(p)) == 0 for p in dims): return 0
  pos = {names[p]: p for p in dims}
  const_env = {n: 0 for n in names} | {names[p]: v for p, v in fix.items()}
  parent = {p: p for p in dims}                      # union-find: variables a term or a condition ties

  def root(p: int) -> int:
    while parent[p] != p: parent[p] = p = parent[parent[p]]
    return p

  def tie(e) -> list[int] | None:
    vs = free_vars(e)
    if not vs.issubset(names): return None           # a symbol that is not a loop or hardware index
    ps = sorted(pos[v] for v in vs if v in pos)      # (fixed dimensions are constants)
    for q in ps[1:]: parent[root(q)] = root(ps[0])
    return ps
  pieces = []                                        # (is a condition, expression, coefficient, dimensions)
  for t, coef in linear(m.access.index)[0].items():
    ps = tie(t)
    if ps is None: return None
    if ps: pieces.append((False, t, coef, ps))
  for c in _conjuncts(m.access.conds):
    ps = tie(c)
    if ps is None: return None
    if ps: pieces.append((True, c, 1, ps))
    elif not _holds(c, const_env): return 0          # a condition on fixed dimensions only, false
  by_root: dict[int, list] = {}
  for pc in pieces: by_root.setdefault(root(pc[3][0]), []).append(pc)
  members: dict[int, list[int]] = {}
  for p in dims: members.setdefault(root(p), []).append(p)
  grid = lambda ps: math.prod(len(m.span(p)) for p in ps)
  tied = [p for ps in members.values() if ps[0] < keep <= ps[-1] for p in ps if p < keep]   # (ps ascend)
  if grid(tied) > KEPT_LIMIT: return None
  evaluated = sum(grid(ps) for r, ps in members.items() if r in by_root)
  if MIN_SAVING * evaluated > instances(m, keep, fix):
    return None                                      # barely separates: as costly as enumerating the instances
  factor, value_sets, mixed = 1, [], []
  for r, ps in members.items():
    kept = [p for p in ps if p < keep]
    if kept and len(kept) != len(ps):               # a term or condition ties kept indices to element variables
      mixed.append(_keyed_part(by_root.get(r, []), ps, kept, m, const_env))
      if mixed[-1] is None: return None
      continue
    part = _part(by_root.get(r, []), ps, m, const_env)
    if part is None: return None
    inside, vals = part
    if inside == 0: return 0                         # no instance at all
    if kept: factor *= inside                        # each kept combination the conditions allow: a translate
    elif vals is not None: value_sets.append(vals)
  if not mixed:
    count = _minkowski_count(value_sets)
    return None if count is None else factor * count
  total, memo = 0, {}
  for combo in itertools.product(*mixed):          # one kept combination of every tied group: their sum
    if any(inside == 0 for inside, _ in combo): continue
    sets = value_sets + [v for _, v in combo if v is not None]
    key = tuple(sorted((v - v[0]).tobytes() for v in sets))   # counts are translation invariant
    if key not in memo: memo[key] = _minkowski_count(sets)
    if memo[key] is None: return None
    total += memo[key]
  return factor * total


def _conjuncts(conds) -> list:
  """The conditions split at their top-level ``and``s (each ties only its own variables)."""
  stack, out = list(conds), []
  while stack:
    c = stack.pop()
    if c.op is Op.AND: stack.extend(c.src)
    else: out.append(c)
  return out


def _holds(c, env: dict) -> bool:
  """A condition over fixed dimensions; one that cannot be evaluated is taken (as enumeration takes it)."""
  try: return bool(evaluate_again(c, env))
  except ExprError: return True


def _grid(pieces, ps: list[int], m: AccessMap, const_env: dict):
  """The pieces of one part over the grid of its variables ``ps``: (grid shape, the index terms'
  sum or None without terms, the conditions' mask); None when the grid is larger than
  :data:`PART_LIMIT` or a piece cannot be evaluated."""
  shape = tuple(len(m.span(p)) for p in ps)
  if math.prod(shape) > PART_LIMIT: return None
  names, env = m.names, dict(const_env)
  for i, p in enumerate(ps):
    env[names[p]] = np.arange(m.span(p).start, m.span(p).stop, dtype=np.int64).reshape(
      tuple(-1 if j == i else 1 for j in range(len(ps))))
  total, mask = None, np.ones(shape, bool)
  try:
    for is_cond, e, coef, _ in pieces:
      x = np.asarray(evaluate_again(e, env))
      if is_cond: mask &= x.astype(bool)
      else: total = (0 if total is None else total) + coef * x.astype(np.int64)
  except ExprError:
    return None
  return shape, None if total is None else np.broadcast_to(total, shape), mask


def _part(pieces, ps: list[int], m: AccessMap, const_env: dict) -> tuple[int, np.ndarray | None] | None:
  """One part: (points its conditions allow, the distinct values (sorted) of its index terms there,
  or None without terms); None when it cannot be evaluated (see :func:`_grid`)."""
  if not pieces: return math.prod(len(m.span(p)) for p in ps), None   # no condition, no term
  g = _grid(pieces, ps, m, const_env)
  if g is None: return None
  _, total, mask = g
  inside = int(np.count_nonzero(mask))
  if total is None or inside == 0: return inside, None
  return inside, _sorted_unique(total[mask])


def _keyed_part(pieces, ps: list[int], kept: list[int], m: AccessMap, const_env: dict) -> list | None:
  """A part that ties kept indices (``kept``, the first of ``ps``) to element variables: per
  combination of the kept indices (in row-major order), what :func:`_part` gives with them fixed."""
  g = _grid(pieces, ps, m, const_env)
  if g is None: return None
  shape, total, mask = g
  n_keys = math.prod(shape[:len(kept)])
  key = np.broadcast_to(np.arange(n_keys).reshape(shape[:len(kept)] + (1,) * (len(ps) - len(kept))), shape)[mask]
  inside = np.bincount(key, minlength=n_keys)
  if total is None: return [(int(c), None) for c in inside]
  vals = total[mask]
  lo, width = (int(vals.min()), int(vals.max() - vals.min()) + 1) if vals.size else (0, 1)
  if n_keys * width >= 1 << 62: return None
  packed = _sorted_unique(key * width + (vals - lo))     # distinct (combination, value), in order
  cut = np.searchsorted(packed, np.arange(n_keys + 1) * width)
  return [(int(inside[k]), packed[cut[k]:cut[k + 1]] - k * width + lo if inside[k] else None) for k in range(n_keys)]


def _minkowski_count(value_sets: list[np.ndarray]) -> int | None:
  """``|A1 + A2 + ...|`` of sorted integer sets, or None when it cannot be had cheaply and exactly."""
  explicit = np.zeros(1, np.int64)      # the sum so far (sorted) while it is small enough to hold
  count, span, gap = 1, 0, math.inf     # its size, max - min, and smallest distance between neighbours
  for v in sorted(value_sets, key=lambda a: int(a[-1] - a[0])):
    v_span = int(v[-1] - v[0])
    v_gap = int(np.diff(v).min()) if len(v) > 1 else math.inf
    small = explicit is not None and len(explicit) * len(v) <= PAIR_LIMIT
    if v_gap > span:                    # the sum so far fits between neighbouring values of v
      gap = min(gap, v_gap - span)
      explicit = (v[:, None] + explicit[None, :]).reshape(-1) if small else None   # sorted, no repeats
    elif gap > v_span:                  # v fits between neighbouring values of the sum so far
      gap = min(v_gap, gap - v_span)
      explicit = (explicit[:, None] + v[None, :]).reshape(-1) if small else None
    elif small:                         # they overlap: every pairwise sum, deduplicated
      explicit = _sorted_unique((explicit[:, None] + v[None, :]).reshape(-1))
      gap = int(np.diff(explicit).min()) if len(explicit) > 1 else math.inf
      count = len(explicit)
      span = int(explicit[-1] - explicit[0])
      continue
    else:
      return None
    count, span = count * len(v), span + v_span
  return count
