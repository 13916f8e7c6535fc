"""The docstring examples of the schedule primitives (minicomp/ir/schedule.py) are true (issue 19).

Every docstring's ``>>>`` example runs as a doctest, and what it prints (``print(s)``, the state's loop
structure before and after the primitive) must match the docstring character for character: whitespace is
compared exactly, so a changed loop nest fails; ``...`` is a wildcard only where a docstring writes it (in
the long step JSON of an error message).
"""
from __future__ import annotations

import doctest
import inspect

import pytest

import minicomp.ir.schedule as M

FLAGS = doctest.ELLIPSIS
# the user-facing primitives: each shows the printed state before and after on a tiny computation
PRIMITIVES = ("split", "fuse", "reorder", "tile", "bind", "unroll", "vectorize", "pragma", "cross_thread_reduce",
              "rfactor", "compute_at", "compute_inline", "compute_root", "cache_read", "cache_write", "storage_align",
              "tensorize", "pipeline")
# the rest of the public API with an example of its own
WITH_EXAMPLE = ("to_json", "from_json", "params", "substitute", "lower", "loops")


def _doctests() -> dict[str, doctest.DocTest]:
  """Doctests by short name (``"Schedule.split"``; the module docstring is ``"module"``), with fresh globals."""
  out = {}
  for t in doctest.DocTestFinder().find(M):
    if t.examples: out["module" if t.name == M.__name__ else t.name[len(M.__name__) + 1:]] = t
  return out


def _run(t: doctest.DocTest) -> tuple[int, str]:
  runner = doctest.DocTestRunner(optionflags=FLAGS)
  report: list[str] = []
  runner.run(t, out=report.append)
  return runner.failures, "".join(report)


def _public() -> list[str]:
  return [n for n, _ in inspect.getmembers(M.Schedule) if not n.startswith("_")]


@pytest.mark.parametrize("name", sorted(_doctests()))
def test_docstring_example_prints_what_it_shows(name):
  failures, report = _run(_doctests()[name])
  assert failures == 0, f"the example of {name} no longer prints what its docstring shows:\n{report}"


def test_every_primitive_has_numpydoc_and_a_before_after_example():
  tests = _doctests()
  assert "module" in tests, "the module docstring's example is not a doctest"
  for name in PRIMITIVES + WITH_EXAMPLE:
    doc = inspect.getdoc(getattr(M.Schedule, name)) or ""
    t = tests.get(f"Schedule.{name}")
    assert t is not None, f"Schedule.{name} has no >>> example"
    assert f".{name}(" in "".join(e.source for e in t.examples), f"the example of Schedule.{name} does not call it"
    for section in ("Returns", "Examples") + (("Parameters",) if name not in ("to_json", "params") else ()):
      assert f"\n{section}\n{'-' * len(section)}\n" in doc, f"Schedule.{name}: no numpydoc {section!r} section"
  for name in PRIMITIVES:
    t = tests[f"Schedule.{name}"]
    shown = [e for e in t.examples if e.source.startswith("print(s") and "Stage " in e.want]
    assert shown, f"the example of Schedule.{name} does not print the state"


def test_every_public_method_is_documented():
  undocumented = [n for n in _public() if not inspect.getdoc(getattr(M.Schedule, n))]
  assert not undocumented, f"public Schedule members without a docstring: {undocumented}"
  assert set(PRIMITIVES + WITH_EXAMPLE) <= set(_public())


def test_a_changed_loop_nest_fails_the_check():
  """The comparison is exact: the split example with its inner loop printed one level shallower must fail."""
  t = _doctests()["Schedule.split"]
  ex = next(e for e in t.examples if "\n    for i.1 in 0..16\n" in e.want)
  ex.want = ex.want.replace("\n    for i.1 in 0..16\n", "\n  for i.1 in 0..16\n")
  failures, report = _run(t)
  assert failures == 1 and "for i.1 in 0..16" in report
