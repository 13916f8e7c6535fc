"""Lowered programs kept on disk (minicomp/codegen/program_cache.py): a compile from the schedule cache reads each
schedule's loop nest back instead of lowering it, and gets the same CUDA C; another DAG, kernel name or target is
lowered anew; a file that does not read back is removed with a warning and written again."""
import dataclasses
import logging

import pytest

from minicomp import workloads as W
from minicomp.codegen import kernel as K
from minicomp.codegen import program_cache
from minicomp.codegen.cuda import emit_cuda
from minicomp.ir.schedule import Schedule
from minicomp.target import as_target
from test_workloads import mm_tiled_shared


@pytest.fixture
def lowered(monkeypatch, tmp_path):
  """The programs lowered (by kernel name) while the cache is on in ``tmp_path``."""
  monkeypatch.setenv("MINICOMP_CACHE_DIR", str(tmp_path))
  monkeypatch.setenv("MINICOMP_SCHEDULE_CACHE", "1")
  names = []
  real = K.lower_checked
  monkeypatch.setattr(K, "lower_checked", lambda s, t, name: names.append(name) or real(s, t, name))
  return names


def _tiled(n: int = 64) -> Schedule:
  return mm_tiled_shared(W.matmul(n, n, 32), tile=8, thread=2, kt=4)


def test_a_second_build_reads_the_program_back_and_emits_the_same_cuda(lowered, tmp_path):
  first = K.Builds(as_target("sm_86")).source(_tiled(), "mm")
  assert lowered == ["mm"] and len(list((tmp_path / "programs").rglob("*.pickle"))) == 1
  again = K.Builds(as_target("sm_86"))                   # (a new compile: nothing in memory)
  assert again.source(_tiled(), "mm") == first and lowered == ["mm"]
  assert emit_cuda(again.program(_tiled(), "mm")) == first


def test_another_dag_name_or_target_is_lowered_anew(lowered):
  K.Builds(as_target("sm_86")).program(_tiled(64), "mm")
  K.Builds(as_target("sm_86")).program(_tiled(128), "mm")      # another shape
  K.Builds(as_target("sm_86")).program(_tiled(64), "mm2")      # another kernel name
  K.Builds(as_target("sm_80")).program(_tiled(64), "mm")       # another target (its limits were checked)
  tight = dataclasses.replace(as_target("sm_80"), max_threads_per_block=512)
  K.Builds(tight).program(_tiled(64), "mm")                       # the same arch with another limit
  assert lowered == ["mm", "mm", "mm2", "mm", "mm"]
  K.Builds(as_target("sm_80")).program(_tiled(64), "mm")
  assert len(lowered) == 5


def test_a_file_that_does_not_read_back_is_removed_and_written_again(lowered, tmp_path, caplog):
  src = K.Builds(as_target("sm_86")).source(_tiled(), "mm")
  (f,) = (tmp_path / "programs").rglob("*.pickle")
  good = f.read_bytes()
  for broken in (b"not a pickle", good[: len(good) // 2], __import__("pickle").dumps({"a": 1})):
    f.write_bytes(broken)
    with caplog.at_level(logging.WARNING, logger="minicomp"):
      assert K.Builds(as_target("sm_86")).source(_tiled(), "mm") == src
    assert "does not read back" in caplog.text and f.read_bytes() == good
    caplog.clear()
  assert lowered == ["mm"] * 4


def test_the_schedule_cache_s_switch_turns_it_off(lowered, tmp_path, monkeypatch):
  monkeypatch.setenv("MINICOMP_SCHEDULE_CACHE", "0")
  K.Builds(as_target("sm_86")).program(_tiled(), "mm")
  K.Builds(as_target("sm_86")).program(_tiled(), "mm")
  assert lowered == ["mm", "mm"] and not list(tmp_path.rglob("*.pickle"))
  assert "off: MINICOMP_SCHEDULE_CACHE=0" in program_cache.info()
