"""research/favourite_profile.py: a task's favourites by the static model next to the GPU's fastest, read from the
shipped H200 timings (no build, no GPU)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path[:0] = [str(Path(__file__).resolve().parent.parent / "research")]
import favourite_profile as F  # noqa: E402


def _rows(out: str, title: str) -> list[list[str]]:
  block = out.split(title, 1)[1].split("\n\n", 1)[0].splitlines()[2:]     # (the title's line, then the header)
  return [line.split() for line in block]


def test_favourites_are_sorted_by_estimate_and_the_fastest_by_gpu_time(capsys):
  assert F.main(["--task", "conv512", "--top", "4"]) == 0
  out = capsys.readouterr().out
  fav, fast = _rows(out, "the model's favourites"), _rows(out, "the GPU's fastest")
  assert len(fav) == len(fast) == 4
  est = [float(r[1]) for r in fav]
  gpu = [float(r[0]) for r in fast]
  assert est == sorted(est) and gpu == sorted(gpu)
  assert gpu[0] <= min(float(r[0]) for r in fav) and est[0] <= min(float(r[1]) for r in fast)
  assert "conv512: " in out and "NVIDIA H200" in out


def test_a_task_without_timings_is_refused():
  with pytest.raises(SystemExit, match="no correct program of task 'nope'"):
    F.main(["--task", "nope"])
