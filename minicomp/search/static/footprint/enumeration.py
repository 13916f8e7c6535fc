"""Distinct elements of access relations by enumeration: every instance's index evaluated with numpy.

The counting engine (``counting.py``) enumerates a set of accesses when it is small (isl's point scan
is slower there) or when isl ran out of its operation budget. The instances of an access are the
grid of its *relevant* input dimensions (the kept hardware indices and the dimensions its index or
conditions read; :func:`relevant`), visited in chunks of about :data:`ENUM_CHUNK`; each instance
the conditions let through gives a column (kept hardware indices..., element), and the distinct
columns are counted:

- packed into one int64 each by a mixed radix (:func:`_radix`: the range of every kept index and of
  the element offset, from :func:`~minicomp.ir.linear.bounds`), then marked in a bitmap (small key
  spaces) or sorted and deduplicated chunk by chunk;
- or, when the columns do not pack, deduplicated as rows (``np.unique(axis=1)``).

A gather (an index that reads memory, not affine) covers its whole buffer; ``counting.DistinctCounter`` then bounds
the count by the instances (a lookup reads its rows, not the table).
"""
from __future__ import annotations

import math

import numpy as np

from minicomp.errors import ExprError
from minicomp.ir.evaluate import evaluate_again
from minicomp.ir.linear import bounds
from minicomp.search.static.footprint.isl_build import AccessMap

ENUM_CHUNK = 1 << 20      # instances evaluated in one numpy chunk


def relevant(m: AccessMap, keep: int) -> list[int]:
  """Input dimensions that can change the kept key or the element: kept ones, and those the
  index or a condition reads (an inner loop shadows an outer one of the same name)."""
  names = m.names
  return [p for p, n in enumerate(names) if p < keep or (n in m.used and n not in names[p + 1:])]


def instances(m: AccessMap, keep: int, fix: dict[int, int]) -> int:
  """Instances an enumeration of ``m`` visits: the product of its relevant dimensions' spans."""
  return math.prod(len(m.span(p)) for p in relevant(m, keep) if p not in fix)


def kept_span(ms, p: int) -> range:
  """The values hardware index ``p`` takes in any of the accesses ``ms``."""
  spans = [m.span(p) for m in ms]
  lo, hi = min(r.start for r in spans), max(r.stop for r in spans)
  return range(lo, max(lo, hi))


def enumerate_count(fixes: list[tuple[AccessMap, dict[int, int]]], keep: int) -> int:
  """The count of :class:`DistinctCounter`, by evaluating every instance's index with numpy."""
  packed = _keys(fixes, keep, count=True)
  return packed[0] if packed is not None else distinct_rows(fixes, keep).shape[1]


def _chunks(m: AccessMap, fix: dict[int, int], keep: int, values: dict[int, list[int]]):
  """The instances of access ``m`` (dimensions ``fix`` fixed, ``values`` restricting some), in
  chunks of about :data:`ENUM_CHUNK`: ``(env, mask, full)`` per chunk, ``env`` the loop variables
  as broadcastable arrays over the chunk's grid, ``mask`` its instances the conditions let through
  and ``full(x, dtype)`` an array of the grid flattened."""
  dims = [p for p in relevant(m, keep) if p not in fix]
  axes = [np.asarray(values.get(p, m.span(p))) for p in dims]
  names = m.names
  lens = [len(x) for x in axes]
  split = len(dims)                              # dims[split:] form a grid of at most ENUM_CHUNK
  while split > 0 and math.prod(lens[split - 1:]) <= ENUM_CHUNK: split -= 1
  inner = lens[split:]
  per = max(1, ENUM_CHUNK // max(1, math.prod(inner)))
  outer_total = math.prod(lens[:split])
  nd = 1 + len(inner)
  for start in range(0, outer_total, per):       # a chunk: (outer instances) x (the inner grid)
    flat = np.arange(start, min(outer_total, start + per))
    coords = np.unravel_index(flat, lens[:split]) if split else ()
    shape = (flat.size, *inner)
    env = {n: 0 for n in names}
    env.update({names[p]: v for p, v in fix.items()})
    env.update({names[dims[k]]: axes[k][coords[k]].reshape((-1,) + (1,) * (nd - 1)) for k in range(split)})
    env.update({names[dims[k]]: axes[k].reshape(tuple(-1 if q == k - split + 1 else 1 for q in range(nd)))
                for k in range(split, len(dims))})
    full = lambda x, dt, shape=shape: np.broadcast_to(np.asarray(x, dt), shape).reshape(-1)
    mask = np.ones(math.prod(shape), bool)
    for c in m.access.conds:
      try: mask &= full(evaluate_again(c, env), bool)
      except ExprError: pass                     # data-dependent: taken (as isl over-approximates)
    yield env, mask, full


def _radix(fixes, keep: int, values: dict[int, list[int]]) -> list[tuple[int, int]] | None:
  """(lowest value, number of values) of each kept hardware index and, last, of the element
  offset, over the accesses: the mixed radix that packs a (kept indices, element) column into one
  int64. None when an offset has no bound or the packed keys would not fit."""
  out = []
  for p in range(keep):
    vals = []
    for m, fix in fixes:
      if p in fix: vals += [fix[p]]
      elif p in relevant(m, keep):
        ax = values.get(p, m.span(p))
        if len(ax): vals += [min(ax), max(ax)]
      else: vals += [0]
    out.append((min(vals), max(vals) - min(vals) + 1))
  lo, hi = [], []
  for m, fix in fixes:
    a = m.access
    if not m.affine_index:                       # a gather covers its buffer
      lo.append(0); hi.append(int(a.buffer.size.arg) - 1)
      continue
    names = m.names
    ranges = {n: (0, 0) for n in names}
    for p in relevant(m, keep):
      ax = [fix[p]] if p in fix else values.get(p, m.span(p))
      if len(ax): ranges[names[p]] = (int(min(ax)), int(max(ax)))
    for p, v in fix.items(): ranges[names[p]] = (v, v)
    b = bounds(a.index, ranges)
    if b[0] is None or b[1] is None: return None
    lo.append(b[0]); hi.append(b[1])
  out.append((min(lo), max(hi) - min(lo) + 1))
  return out if math.prod(n for _, n in out) < 1 << 62 else None


BITMAP_MIN, BITMAP_PER_INSTANCE = 1 << 20, 16   # key spaces up to max(these, 16 x instances) use a bitmap


def _sorted_unique(keys: np.ndarray) -> np.ndarray:
  """np.unique by sorting (numpy 2's hash-based unique is several times slower on int64 keys)."""
  k = np.sort(keys)
  return k[np.concatenate(([True], k[1:] != k[:-1]))] if k.size else k


def _keys(fixes, keep: int, values: dict[int, list[int]] | None = None, count: bool = False):
  """The distinct (kept hardware indices..., element) columns of the accesses, each packed into
  one int64 by :func:`_radix` (sorted), with the radix; None when the columns do not pack.
  With ``count``, their number instead of the columns. Small key spaces are marked in one
  bitmap; larger ones are sorted chunk by chunk."""
  values = values or {}
  radix = _radix(fixes, keep, values)
  if radix is None: return None
  strides = [math.prod(n for _, n in radix[q + 1:]) for q in range(len(radix))]
  space = strides[0] * radix[0][1]
  n = sum(math.prod(len(values.get(p, m.span(p))) for p in relevant(m, keep) if p not in fix) for m, fix in fixes)
  bitmap = np.zeros(space, bool) if space <= max(BITMAP_MIN, BITMAP_PER_INSTANCE * n) else None
  # counted, not listed, over a large key space: a gather's (kept, element) pairs are its distinct kept keys times the
  # buffer, never materialised (a thread reading an embedding table would make billions of them)
  sizes = {int(m.access.buffer.size.arg) for m, _ in fixes if not m.affine_index}
  defer = count and bitmap is None and len(sizes) == 1
  parts, gathered = [], []
  for m, fix in fixes:
    names = m.names
    for env, mask, full in _chunks(m, fix, keep, values):
      kept = sum((np.asarray(env[names[p]], np.int64) - radix[p][0]) * strides[p] for p in range(keep))
      if m.affine_index:
        keys = full(np.asarray(evaluate_again(m.access.index, env), np.int64) - radix[-1][0] + kept, np.int64)[mask]
      else:                                      # a gather: every element of the buffer
        size = int(m.access.buffer.size.arg)
        kk = _sorted_unique(full(kept, np.int64)[mask])
        if defer:
          gathered.append(kk); continue
        keys = (kk[:, None] + (np.arange(size) - radix[-1][0])[None, :]).reshape(-1)
      if keys.size and (keys.min() < 0 or keys.max() >= space): return None   # (bounds were too tight)
      if bitmap is not None: bitmap[keys] = True
      else: parts.append(_sorted_unique(keys))
  if bitmap is not None: return (int(np.count_nonzero(bitmap)) if count else np.flatnonzero(bitmap)), radix
  keys = np.zeros(0, np.int64) if not parts else parts[0] if len(parts) == 1 else _sorted_unique(np.concatenate(parts))
  if gathered:   # the gathers cover elements [0, size) of every kept key they saw; the other keys add what they miss
    (lo, n_elem), size = radix[-1], sizes.pop()
    g = _sorted_unique(np.concatenate(gathered))
    element = keys % n_elem + lo
    covered = np.isin(keys - keys % n_elem, g) & (element >= 0) & (element < size)
    return len(g) * size + int(np.count_nonzero(~covered)), radix
  return (len(keys) if count else keys), radix


def distinct_rows(fixes, keep: int, values: dict[int, list[int]] | None = None) -> np.ndarray:
  """Distinct (kept hardware indices..., element) columns of the accesses, each with its fixed
  dimensions; ``values`` restricts some dimensions to a few values. A gather covers its buffer.
  Instances are evaluated with numpy in chunks of :data:`ENUM_CHUNK`."""
  packed = _keys(fixes, keep, values)
  if packed is not None:
    keys, radix = packed
    cols, rest = [], keys
    for lo, n in reversed(radix):
      cols.append(rest % n + lo); rest = rest // n
    return np.stack(cols[::-1]) if len(keys) else np.zeros((keep + 1, 0), np.int64)
  values = values or {}
  out = []                                       # columns that do not pack: deduplicated as rows
  for m, fix in fixes:
    names = m.names
    for env, mask, full in _chunks(m, fix, keep, values):
      kept = np.stack([full(env[names[p]], np.int64) for p in range(keep)] + [np.zeros(mask.size, np.int64)])[:keep, mask]
      if m.affine_index:
        addr = full(evaluate_again(m.access.index, env), np.int64)[mask]
      else:                                      # a gather: every element of the buffer
        size = int(m.access.buffer.size.arg)
        kept = np.repeat(np.unique(kept, axis=1), size, axis=1)
        addr = np.tile(np.arange(size), kept.shape[1] // size if size else 0)
      out.append(_distinct_columns(np.concatenate([kept, addr[None]], axis=0)))
  return _distinct_columns(np.concatenate(out, axis=1)) if out else np.zeros((keep + 1, 0), np.int64)


def _distinct_columns(rows: np.ndarray) -> np.ndarray:
  return np.unique(rows, axis=1) if rows.shape[1] > 1 else rows

