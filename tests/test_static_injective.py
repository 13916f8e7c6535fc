"""The static model's injectivity test (``AccessMap.injective``) against an enumeration of the access
relation's points, on small kernels whose index expressions have digit variables (fused and split
loops, padded convolutions), and on a Conv3d map that took isl 127 s when asked with its digits."""
from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

import islpy as isl
import pytest

from minicomp.search.static.footprint.enumeration import relevant
from minicomp.search.static.footprint.isl_build import AccessMap, access_map, collect_accesses, isl_context
from test_static_footprint import PROGRAMS, check_against_brute_force

SLOW_MAPS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "strategies" / "slow_isl_maps.txt"


def enumerated_injective(m: AccessMap, keep: int, fix: dict[int, int], drop: frozenset[int]) -> bool:
  """Whether distinct instances (``drop`` left out) touch distinct (kept indices, element) pairs,
  from every point of the relation; also checks that the digit variables are functions of the
  instance (the premise of projecting them out)."""
  r = m.isl_map(keep)
  for p, v in fix.items(): r = r.fix_input_si(p, v)
  n_in, n_out, n = r.dim(isl.dim_type.in_), r.dim(isl.dim_type.out), len(m.extents)
  pts = []
  r.wrap().foreach_point(lambda pt: pts.append(
    tuple(pt.get_coordinate_val(isl.dim_type.set, i).to_python() for i in range(n_in + n_out))))
  digits_of: dict[tuple, set] = {}
  keys_of: dict[tuple, set] = {}
  for c in pts:
    digits_of.setdefault(c[:n], set()).add(c[n:n_in])
    keys_of.setdefault(c[n_in:], set()).add(tuple(v for i, v in enumerate(c[:n]) if i not in drop))
  assert all(len(d) == 1 for d in digits_of.values()), "a digit variable that is not a function of the instance"
  return all(len(k) == 1 for k in keys_of.values())


@pytest.mark.parametrize("name", ["conv_shared", "conv_global", "depthwise", "mm_tiled_bias", "mm_vthread", "vectorized"])
def test_injective_matches_enumeration(name):
  """Every access, per block and per thread, with the first block / thread fixed or not, as the
  counting code asks it (the dimensions nothing reads dropped): isl's answer with no budget
  equals the enumeration's (an empty relation counts as injective). Every kernel but the
  depthwise (the control) has accesses with digit variables; both answers occur."""
  answers = {True: 0, False: 0}
  with_digits = 0
  for k in PROGRAMS[name]().lower().kernels:
    for a in collect_accesses(k)[0]:
      m = access_map(k, a)
      if not (m.affine_index and m.exact): continue
      with_digits += m.isl_map(6).dim(isl.dim_type.in_) > len(m.extents)
      for keep in (3, 6):
        for fix in ({}, {p: 0 for p in range(keep)}):
          drop = frozenset(range(len(m.extents))) - set(relevant(m, keep)) - set(fix)
          got = m.injective(keep, fix, drop, 0)
          assert got == enumerated_injective(m, keep, fix, drop), (a.buffer.name, keep, fix)
          answers[got] += 1
  assert answers[False] > 0 and (answers[True] > 0 or name == "conv_global"), answers
  if name != "depthwise": assert with_digits


@pytest.mark.parametrize("name", ["conv_shared", "conv_global", "mm_local", "vectorized"])
def test_sums_through_the_injectivity_test_match_the_trace(name, monkeypatch):
  """Per-block and per-thread sums with enumeration and class sums turned off: where the test says
  an access is injective, its sum is its instance count, counted exact, and equal to the
  simulator's trace (``check_against_brute_force``: exact sums must be equal)."""
  import minicomp.search.static.footprint.counting as C
  monkeypatch.setattr(C, "SUM_EXACT_LIMIT", 1)
  monkeypatch.setattr(C, "SUM_ENUM_LIMIT", 0)
  monkeypatch.setattr(C, "SUM_CLASSES_LIMIT", 0)
  said = []
  test = AccessMap.injective
  monkeypatch.setattr(AccessMap, "injective", lambda self, *a: said.append(test(self, *a)) or said[-1])
  for k in PROGRAMS[name]().lower().kernels: check_against_brute_force(k)
  assert True in said


class _Parsed:
  """An AccessMap stand-in holding one saved relation (its first ``instance_dims`` inputs the
  instance), in the thread's isl context as the model's maps are (the budget is that context's)."""

  def __init__(self, text: str, instance_dims: int):
    self.map, self.extents = isl.Map.read_from_str(isl_context(), text), (0,) * instance_dims

  def isl_map(self, keep): return self.map


def _slowest_saved_map() -> tuple[str, int]:
  rows = [ln for ln in SLOW_MAPS.read_text().splitlines() if not ln.startswith("#") and "map=" in ln]
  secs = lambda ln: float(ln.split()[1].rstrip("s"))
  text = max(rows, key=secs).split("map=", 1)[1].strip()
  names = text[text.index("[") + 1:text.index("]")].split(", ")
  return text, sum(1 for v in names if not v.startswith("dg"))


def _answer(text, n, conn):
  conn.send(AccessMap.injective(_Parsed(text, n), 3, {}, frozenset(), 3000))


def test_slow_conv3d_map_ends_within_its_budget():
  """The saved Conv3d padded-input relation on which isl, asked with its 12 digit variables, ran
  127 s past a 300-operation budget (one lattice compression): with them projected out the test
  ends within its 3000 operations in a fraction of a second; 20 s is the regression bound."""
  text, n = _slowest_saved_map()
  assert isl.Map(text).dim(isl.dim_type.in_) - n >= 6        # the digit-heavy case
  ctx = mp.get_context("spawn")                # (the pytest worker runs JAX's threads: no fork)
  recv, send = ctx.Pipe(duplex=False)
  p = ctx.Process(target=_answer, args=(text, n, send))
  p.start()
  done = recv.poll(20)
  if not done: p.kill()
  p.join()
  assert done, "AccessMap.injective ran past 20 s on the slow Conv3d map"
  assert recv.recv() in (True, False, None)
