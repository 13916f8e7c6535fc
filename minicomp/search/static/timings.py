"""The timings dataset: programs minicomp built, timed on a real GPU, with the static model's facts of each.

One JSON object per line (``.jsonl``, or gzipped ``.jsonl.gz``), so a collection appends as it goes and a
stopped one keeps its lines. Every line is one program timed on one GPU:

| field | meaning |
| --- | --- |
| ``v`` | the format's version (:data:`VERSION`) |
| ``task`` | a name for the computation; programs of one task compute the same thing and are ranked together |
| ``workload`` | the ``minicomp.workloads`` call that builds it (``"minicomp.workloads.matmul(1024, 1024, 1024)"``), or null |
| ``arch`` | the arch the program was built for (``"sm_90"``) |
| ``steps`` | the schedule, as ``Schedule.to_json()`` writes it |
| ``gpu``, ``date`` | the GPU that timed it (its name as the driver gives it) and the day |
| ``median_s`` | the median kernel time in seconds (CUDA events, L2 flushed before each run) |
| ``correct`` | whether its output matched numpy on that GPU; incorrect programs are kept, never fitted on |
| ``facts`` | ``{"device", "minicomp", "launches": [LaunchFacts as a dict, ...]}``: the static model's analyses of the program (for that device entry, by that minicomp version), or null |

The facts are what :mod:`.fit` calibrates on, so a calibration needs no build; they are computed when the
program is timed (or later, from ``workload`` and ``steps``). ``benchmarks/data/`` holds the project's own
timings in this format.
"""
from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path

from minicomp.errors import DatasetError

VERSION = 1
REQUIRED = {"task": str, "arch": str, "steps": str, "gpu": str, "date": str, "median_s": (int, float),
            "correct": bool}


@dataclass(frozen=True)
class Timing:
  task: str
  workload: str | None
  arch: str
  steps: str
  gpu: str
  date: str
  median_s: float
  correct: bool
  facts: dict | None

  def to_json(self) -> str:
    return json.dumps({"v": VERSION, "task": self.task, "workload": self.workload, "arch": self.arch,
                       "steps": self.steps, "gpu": self.gpu, "date": self.date, "median_s": self.median_s,
                       "correct": self.correct, "facts": self.facts})


def default_path(arch: str) -> Path:
  """Where ``minicomp collect`` keeps an arch's timings: the cache folder's ``timings/<arch>.jsonl``."""
  from minicomp.codegen.cache import cache_root
  return cache_root() / "timings" / f"{arch}.jsonl"


def _open(path: Path, mode: str):
  return gzip.open(path, mode + "t") if path.suffix == ".gz" else open(path, mode)


def parse(line: str, where: str) -> Timing:
  """One line of a dataset; ``where`` ("file:line") names it in the :class:`DatasetError` a bad line raises."""
  try:
    d = json.loads(line)
  except json.JSONDecodeError as e:
    raise DatasetError(f"{where}: not JSON ({e.msg})") from None
  if not isinstance(d, dict): raise DatasetError(f"{where}: a line must be a JSON object")
  if d.get("v") != VERSION:
    raise DatasetError(f"{where}: timings format version {d.get('v')!r}; this minicomp reads version {VERSION}")
  for k, t in REQUIRED.items():
    v = d.get(k)
    if not isinstance(v, t) or (t is not bool and isinstance(v, bool)):
      raise DatasetError(f"{where}: field {k!r} is missing or not a {getattr(t, '__name__', 'number')}")
  if not d["median_s"] > 0: raise DatasetError(f"{where}: 'median_s' must be positive, not {d['median_s']!r}")
  facts = d.get("facts")
  if facts is not None and not (isinstance(facts, dict) and isinstance(facts.get("launches"), list)
                                and isinstance(facts.get("device"), str)):
    raise DatasetError(f"{where}: 'facts' must be null or an object with 'device' and a list of 'launches'")
  wl = d.get("workload")
  if wl is not None and not isinstance(wl, str): raise DatasetError(f"{where}: 'workload' must be a string or null")
  return Timing(d["task"], wl, d["arch"], d["steps"], d["gpu"], d["date"], float(d["median_s"]), d["correct"], facts)


def read(path: str | Path) -> list[Timing]:
  """Every line of a dataset file (a missing file is a :class:`DatasetError`)."""
  path = Path(path)
  try:
    with _open(path, "r") as f:
      lines = f.readlines()
  except (OSError, EOFError, UnicodeDecodeError) as e:
    raise DatasetError(f"{path}: cannot read the timings: {e}") from None
  return [parse(ln, f"{path}:{i}") for i, ln in enumerate(lines, 1) if ln.strip()]


def append(path: str | Path, rows: list[Timing]) -> None:
  """Add lines to a dataset (created if missing); each line one write, so a crash loses at most the last."""
  path = Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  with _open(path, "a") as f:
    for r in rows:
      f.write(r.to_json() + "\n")


__all__ = ["Timing", "VERSION", "append", "default_path", "parse", "read"]
