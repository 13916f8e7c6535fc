"""The schedule cache: each task's chosen default schedule, kept on disk so the next compile of any model
with that layer skips Gensor's construction and the static model's comparison.

A compile without ``trials`` spends almost all its time choosing schedules (Gensor's walks, then building
and estimating the candidates against the rule-based schedule). The choice depends only on the task's
computation (its workload key), the target, the ``schedules=`` mode and minicomp's own code, so it is
stored under those: ``cache_dir("schedules")/<code version>.jsonl``, one JSON line per choice (the
steps, where they came from, and the task's stage names so a task of another model whose stages are
named otherwise still replays them). The code version is a digest of minicomp's source: any change to
the code starts a new file, and a cached choice is never one an older minicomp made.

Appends are single ``write`` calls on a file opened for appending, so two processes compiling at once
interleave whole lines; a line that does not parse is skipped with a warning; a cached schedule that no
longer replays or builds is ignored and chosen again. ``MINICOMP_SCHEDULE_CACHE=0`` turns the cache off;
``minicomp cache info`` / ``minicomp cache clear`` show and empty it.
"""
from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from minicomp.codegen.cache import cache_dir, switched_on

_log = logging.getLogger("minicomp")
KIND = "schedules"


def enabled() -> bool:
  return switched_on("MINICOMP_SCHEDULE_CACHE")


@functools.cache
def code_version() -> str:
  """A digest of minicomp's source (its .py files, __init__'s version among them, and package data), so a
  code change starts a new cache."""
  root = Path(__file__).resolve().parent
  h = hashlib.sha256()
  for p in sorted(root.rglob("*")):
    if p.suffix in (".py", ".h", ".txt", ".json") and p.is_file():
      h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes())
  return h.hexdigest()[:16]


@dataclass(frozen=True)
class Entry:
  steps: str                 # the schedule, as Schedule.to_json() writes it
  origin: str                # "gensor" or "rules"
  stages: tuple[str, ...]    # the task's tensor names in DAG order when it was chosen


def _path() -> Path:
  return cache_dir(KIND) / f"{code_version()}.jsonl"


class ScheduleCache:
  """The cached choices of this code version, read once; :meth:`get` and :meth:`put` by (workload key,
  target, schedules mode)."""

  def __init__(self):
    self._entries: dict[tuple[str, str, str], Entry] = {}
    self._path: Path | None = None
    if not enabled(): return
    try:
      self._path = _path()
      lines = self._path.read_text(encoding="utf-8", errors="replace").splitlines() if self._path.is_file() else []
    except OSError as e:
      _log.warning("the schedule cache cannot be read (%s); choosing every schedule", e.strerror or e)
      self._path, lines = None, []
    bad = 0
    for ln in lines:
      try:
        d = json.loads(ln)
        self._entries[(d["key"], d["target"], d["mode"])] = Entry(json.dumps(d["steps"]), str(d["origin"]),
                                                                   tuple(d["stages"]))
      except (ValueError, KeyError, TypeError):
        bad += 1
    if bad: _log.warning("%s: skipped %d unreadable schedule-cache line(s)", self._path, bad)

  def get(self, key: str, target: str, mode: str) -> Entry | None:
    return self._entries.get((key, target, mode))

  def put(self, key: str, target: str, mode: str, steps_json: str, origin: str, stages: list[str]) -> None:
    entry = Entry(steps_json, origin, tuple(stages))
    self._entries[(key, target, mode)] = entry
    if self._path is None: return
    line = json.dumps({"key": key, "target": target, "mode": mode, "origin": origin, "stages": list(stages),
                       "steps": json.loads(steps_json)}, separators=(",", ":")) + "\n"
    try:
      fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
      try: os.write(fd, line.encode())   # one write: concurrent appends interleave whole lines
      finally: os.close(fd)
    except OSError as e:                  # a full or read-only cache folder costs the next compile time only
      _log.warning("could not store a schedule in the cache (%s)", e.strerror or e)
      self._path = None


def rename_stages(steps_json: str, mapping: dict[str, str]) -> str:
  """``steps_json`` with every stage name ``mapping`` names replaced (``"conv"`` -> ``"conv_1"``; derived
  stages too: ``"conv.local"``)."""
  if not mapping: return steps_json

  def ren(v):
    if isinstance(v, str):
      for a, b in mapping.items():
        if v == a or v.startswith(a + "."): return b + v[len(a):]
      return v
    if isinstance(v, list): return [ren(x) for x in v]
    if isinstance(v, dict): return {k: ren(x) for k, x in v.items()}
    return v
  return json.dumps(ren(json.loads(steps_json)))


def info() -> str:
  """What ``minicomp cache info`` prints: the folder, and per code version its entries and size."""
  d = cache_dir(KIND)
  files = sorted(d.glob("*.jsonl"))
  lines = [f"schedule cache: {d} ({'on' if enabled() else 'off: MINICOMP_SCHEDULE_CACHE=0'})"]
  for f in files:
    n = sum(1 for _ in f.open(encoding="utf-8", errors="replace"))
    lines.append(f"  {f.name}: {n} schedules, {f.stat().st_size / 1024:.1f} KiB"
                 + ("  (this minicomp)" if f.stem == code_version() else "  (another version: unused)"))
  if not files: lines.append("  empty")
  return "\n".join(lines)


def clear() -> int:
  """Remove every cached schedule; returns how many files went."""
  files = list(cache_dir(KIND).glob("*.jsonl"))
  for f in files: f.unlink(missing_ok=True)
  return len(files)
