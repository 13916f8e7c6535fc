"""Closed-form distinct counts of accesses whose index separates (search/static/footprint/separable.py):
exact against the simulator's trace, against numpy enumeration of every access, and the Minkowski
sum against brute force."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from minicomp import workloads as W
from minicomp.search.static.footprint import separable as SP
from minicomp.search.static.footprint.enumeration import enumerate_count
from minicomp.search.static.footprint import data_movement
from minicomp.search.static.footprint.isl_build import N_HW, access_map, collect_accesses
from test_static_footprint import PROGRAMS, check_against_brute_force, conv_small
from test_workloads import conv_schedule, mm_tiled_shared


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_separable_counts_match_brute_force(name, monkeypatch):
  """Every count of one access tried in closed form first (not only the large ones): the analysis
  still equals the simulator's trace, and the closed form took some of the counts."""
  import minicomp.search.static.footprint.counting as C
  monkeypatch.setattr(C, "SEPARABLE_MIN", -1)
  monkeypatch.setattr(SP, "MIN_SAVING", 0)
  prog = PROGRAMS[name]().lower()
  taken = 0
  for k in prog.kernels:
    dm = check_against_brute_force(k)
    taken += dict(dm.counts)["separable"]
  assert taken > 0


def _kernels():
  """Kernels with a tiled shared-memory fetch, a padded convolution (conditions over several
  variables, tied to the block index) and a strided depthwise convolution."""
  yield mm_tiled_shared(W.matmul(64, 48, 32), tile=16, thread=4, kt=8).lower().kernels[0]
  yield conv_schedule(W.conv2d(1, 8, 14, 14, 8, 3, 1, 1, 1)).lower().kernels[0]
  yield conv_small(True).lower().kernels[0]
  yield PROGRAMS["depthwise"]().lower().kernels[0]


def test_separable_count_equals_enumeration_on_every_access(monkeypatch):
  """For every access, kept prefix (grid, block, thread) and fixed hardware index: the closed form,
  where it applies, is the enumerated count; it applies to most, including accesses under
  conditions and accesses whose conditions tie a kept index to the element's variables."""
  keyed = []
  monkeypatch.setattr(SP, "MIN_SAVING", 0)          # also where it saves nothing over enumeration
  real = SP._keyed_part
  monkeypatch.setattr(SP, "_keyed_part", lambda *a: keyed.append(1) or real(*a))
  tried = closed = guarded = 0
  for k in _kernels():
    accesses, _ = collect_accesses(k)
    for a in accesses:
      m = access_map(k, a)
      for keep, fixed in itertools.product((0, 3, 6), ((), (5,), (2, 5))):
        fix = {p: 0 for p in fixed if p < N_HW}
        got = SP.separable_count(m, fix, keep)
        tried += 1
        if got is None: continue
        closed += 1
        guarded += bool(a.conds)
        assert got == enumerate_count([(m, fix)], keep), (a.buffer.name, a.index, a.conds, keep, fix)
  assert closed >= 0.8 * tried and guarded > 0 and keyed


@pytest.mark.parametrize("seed", range(6))
def test_minkowski_count_matches_brute_force(seed, monkeypatch):
  """|A1 + A2 + ...| of random integer sets (overlapping, separated, single values): exact when not
  None; with the explicit sum forbidden (PAIR_LIMIT 1), separated sets are still counted."""
  rng = np.random.default_rng(seed)
  for trial in range(40):
    sets = []
    for _ in range(rng.integers(1, 5)):
      kind = rng.integers(3)
      if kind == 0: v = rng.integers(0, 30, rng.integers(1, 8))                     # overlapping
      elif kind == 1: v = np.arange(rng.integers(1, 6)) * int(rng.integers(1, 4) * 10 ** rng.integers(0, 4))
      else: v = np.array([rng.integers(-50, 50)])
      sets.append(np.unique(v).astype(np.int64))
    want = len({sum(c) for c in itertools.product(*[s.tolist() for s in sets])})
    assert SP._minkowski_count(sets) == want
    monkeypatch.setattr(SP, "PAIR_LIMIT", 1)
    got = SP._minkowski_count(sets)
    assert got is None or got == want
    monkeypatch.setattr(SP, "PAIR_LIMIT", 1 << 20)
  mixed_radix = [np.arange(4), np.arange(8) * 4, np.arange(16) * 100]    # 100 > 3 + 28: separated
  monkeypatch.setattr(SP, "PAIR_LIMIT", 1)
  assert SP._minkowski_count(mixed_radix) == 4 * 8 * 16
  assert SP._minkowski_count([np.arange(4), np.arange(4) * 2]) is None  # overlapping, not held: no answer


def test_large_tiled_matmul_fetch_is_counted_in_closed_form():
  """The shared-memory fetch of a 1024^3 tiled matmul (tens of millions of instances per count,
  numpy enumeration's slowest case before) is counted in closed form, and exactly: every block
  reads whole rows of A and whole columns of B."""
  k = mm_tiled_shared(W.matmul(1024, 1024, 1024), tile=64, thread=4, kt=16).lower().kernels[0]
  dm = data_movement(k)
  a, b = dm.buffer("A"), dm.buffer("B")
  assert dict(dm.counts)["separable"] > 0 and dm.exact
  assert a.unique == b.unique == 1024 * 1024
  assert a.block_sum == b.block_sum == (1024 // 64) ** 2 * 64 * 1024
