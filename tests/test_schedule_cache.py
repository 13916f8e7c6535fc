"""The schedule cache (minicomp/schedule_cache.py): a second compile of a model takes every default schedule
from it and builds the same kernels; a changed target misses; a corrupt line is skipped; two processes
writing at once leave only whole lines; another model with the same layer reuses it under its own names."""
import json
import subprocess
import sys

import numpy as np
import pytest

import minicomp as mc
from minicomp import schedule_cache, zoo
from minicomp.cli import main
from onnx_harness import run_ort


@pytest.fixture
def cache_on(monkeypatch, tmp_path):
  monkeypatch.setenv("MINICOMP_SCHEDULE_CACHE", "1")
  monkeypatch.setenv("MINICOMP_CACHE_DIR", str(tmp_path / "cache"))
  return tmp_path / "cache" / "schedules"


def test_a_second_compile_takes_every_schedule_from_the_cache(cache_on):
  model, feeds = zoo.residual_block()
  first = mc.compile(model, target="sm_86")
  assert first.stats.cached == 0 and first.stats.construct > 0
  again = mc.compile(model, target="sm_86")
  assert again.stats.cached == len(again.tasks) and again.stats.construct == 0 and again.stats.estimate == 0
  assert list(cache_on.parent.glob("programs/*/*.pickle"))           # (their lowered programs too)
  from minicomp.codegen import program_cache
  program_cache.clear()                                               # the steps replayed and lowered anew
  assert [k.source for k in mc.compile(model, target="sm_86").kernels] == [k.source for k in first.kernels]
  assert again.stats.constructed == first.stats.constructed
  assert [k.source for k in again.kernels] == [k.source for k in first.kernels]
  np.testing.assert_allclose(again.run(feeds, device="cpu")[0], run_ort(model, feeds)[0], rtol=1e-4, atol=1e-4)
  other = mc.compile(model, target="sm_80")                       # another target: chosen again
  assert other.stats.cached == 0


def test_compare_and_default_choices_are_cached_apart(cache_on):
  """schedules="compare" chooses other kernels than the default: neither mode takes the other's choices, and
  "quick" (the default's former name) takes the default's."""
  model, _ = zoo.residual_block()
  compared = mc.compile(model, target="sm_86", schedules="compare")
  assert compared.stats.cached == 0
  default = mc.compile(model, target="sm_86")
  assert default.stats.cached == 0 and default.stats.construct > 0
  again = mc.compile(model, target="sm_86", schedules="compare")
  assert again.stats.cached == len(again.tasks)
  assert [k.source for k in again.kernels] == [k.source for k in compared.kernels]
  quick = mc.compile(model, target="sm_86", schedules="quick")
  assert quick.stats.cached == len(quick.tasks)
  assert [k.source for k in quick.kernels] == [k.source for k in default.kernels]


def test_a_corrupt_line_is_skipped_with_a_warning(cache_on, caplog):
  model, _ = zoo.residual_block()
  mc.compile(model, target="sm_86")
  (f,) = cache_on.glob("*.jsonl")
  f.write_text("not json\n" + f.read_text() + '{"key": 1}\n')
  cm = mc.compile(model, target="sm_86")
  assert cm.stats.cached == len(cm.tasks) and "skipped 2 unreadable schedule-cache line(s)" in caplog.text


def test_a_cached_schedule_replays_under_another_model_s_stage_names(cache_on):
  """The same layer in another model (an Add written as Sum): its stages are named otherwise, the cached
  steps are renamed to fit."""
  from onnx import helper
  from onnx_harness import make_model
  x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
  add = make_model([helper.make_node("Add", ["x", "x"], ["y"])], {"x": x}, ["y"])
  sum_ = make_model([helper.make_node("Sum", ["x", "x"], ["y"])], {"x": x}, ["y"])
  a = mc.compile(add, target="sm_86")
  s = mc.compile(sum_, target="sm_86")
  assert [t.key for t in a.tasks] == [t.key for t in s.tasks] and s.stats.cached == 1
  np.testing.assert_allclose(s.run({"x": x}, device="cpu")[0], 2 * x, rtol=1e-6)


def test_two_processes_compiling_at_once_leave_whole_lines(cache_on, tmp_path):
  code = "import minicomp as mc; from minicomp import zoo; mc.compile(zoo.residual_block()[0], target='sm_86')"
  env = {**__import__("os").environ}
  ps = [subprocess.Popen([sys.executable, "-c", code], env=env) for _ in range(2)]
  assert [p.wait(timeout=600) for p in ps] == [0, 0]
  (f,) = cache_on.glob("*.jsonl")
  lines = f.read_text().splitlines()
  assert lines and all(json.loads(ln)["steps"] for ln in lines)
  assert mc.compile(zoo.residual_block()[0], target="sm_86").stats.cached == 2


def test_cache_info_and_clear(cache_on, capsys):
  mc.compile(zoo.residual_block()[0], target="sm_86")
  assert main(["cache", "info"]) == 0
  out = capsys.readouterr().out
  assert "2 schedules" in out and "(this minicomp)" in out and "lowered programs:" in out
  assert main(["cache", "clear"]) == 0 and not list(cache_on.glob("*.jsonl"))
  assert "lowered programs: " in capsys.readouterr().out and not list(cache_on.parent.rglob("*.pickle"))
  assert schedule_cache.code_version() in out


def test_the_cache_can_be_turned_off(cache_on, monkeypatch):
  monkeypatch.setenv("MINICOMP_SCHEDULE_CACHE", "0")
  mc.compile(zoo.residual_block()[0], target="sm_86")
  assert not cache_on.exists() or not list(cache_on.glob("*.jsonl"))
