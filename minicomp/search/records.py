"""Tuning records: an append-only JSON-lines log, one line per measured candidate (Ansor-style).

The log is what makes tuning resumable and reproducible: a resumed search loads it, skips every
program already measured (:func:`measured_keys`), and the compiler picks the best schedule per task
(:func:`best_records`) without measuring again. One line is one JSON object::

    {"v": 1, "workload_key": "2275bd0e9b285522", "target": "sm_86",
     "steps": [{"step": "fuse", "stage": "C", "iters": ["i", "j"]},
               {"step": "split", "stage": "C", "iter": "i.j.fused", "factors": [128]}, ...],
     "cost_s": 1.234e-05, "error": "ok", "message": "", "is_estimate": true,
     "timestamp": 1718000000.5, "version": "0.1.0", "strategy": "evolutionary", "trial": 17}

(written on one line; wrapped here). ``v`` is the line format version (:data:`FORMAT`). ``steps`` is
the schedule's step list embedded as JSON, not a string inside a string, so the log reads (and greps)
well; :attr:`Record.steps_json` is its text exactly as ``Schedule.to_json()`` writes it, byte for byte
after a round trip. A failed candidate has ``cost_s: null`` and ``error`` set to an
:class:`~minicomp.search.measure.ErrorKind` value (``"compile error"``, ...), ``message`` saying why.

Durability: :class:`RecordLog` appends in batches and fsyncs each, so a killed run loses at most the
line being written. :func:`load_records` skips such a torn last line with a warning; a bad line
anywhere else means the file was damaged or edited and raises :class:`RecordsError`.
"""
from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from typing import ClassVar

from minicomp.errors import MinicompError
from minicomp.search.measure import ErrorKind, MeasureResult

FORMAT = 1                # the line format version this module writes and reads
_log = logging.getLogger("minicomp")


class RecordsError(MinicompError):
  """A tuning log is damaged, of an unsupported format version, or a record is invalid.

  The message names the file and line. A log damaged in the middle can be repaired by deleting
  the named line: every line is independent."""


@cache
def minicomp_version() -> str:
  """The installed minicomp version (``"unknown"`` when run from a tree that is not installed)."""
  import importlib.metadata
  try:
    return importlib.metadata.version("minicomp")
  except importlib.metadata.PackageNotFoundError:
    return "unknown"


def _dump_steps(steps: list) -> str:
  # Must match minicomp.ir.steps.steps_to_json (json.dumps(..., indent=1)) so steps_json survives a
  # round trip byte for byte; tests/test_records.py checks this against Schedule.to_json().
  return json.dumps(steps, indent=1)


def canonical_steps(steps_json: str) -> str:
  """Whitespace- and key-order-free form of a step list: the identity of a program for deduplication."""
  return json.dumps(json.loads(steps_json), sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class Record:
  """One measured candidate. ``steps_json`` is normalised to ``Schedule.to_json()``'s layout on construction."""
  workload_key: str
  target: str
  steps_json: str
  cost_s: float | None
  error: str = ErrorKind.NONE.value
  message: str = ""
  is_estimate: bool = True
  timestamp: float = field(default_factory=time.time)
  version: str = field(default_factory=minicomp_version)
  strategy: str = ""
  trial: int = -1
  format: ClassVar[int] = FORMAT

  def __post_init__(self):
    try:
      steps = json.loads(self.steps_json)
    except (TypeError, json.JSONDecodeError) as e:
      raise RecordsError(f"steps_json is not JSON text ({e}): {str(self.steps_json)[:80]!r}") from None
    if not isinstance(steps, list): raise RecordsError(f"steps_json must be a JSON list of steps, got {type(steps).__name__}")
    object.__setattr__(self, "steps_json", _dump_steps(steps))
    if self.cost_s is not None:
      # NaN / inf would be written as non-standard JSON (jq and other readers reject it)
      if isinstance(self.cost_s, bool) or not isinstance(self.cost_s, (int, float)) or not math.isfinite(self.cost_s):
        raise RecordsError(f"cost_s must be a finite number or None, got {self.cost_s!r}")
      object.__setattr__(self, "cost_s", float(self.cost_s))
    if self.ok and self.cost_s is None: raise RecordsError("a successful record (error 'ok') needs a cost_s")

  @property
  def ok(self) -> bool: return self.error == ErrorKind.NONE.value

  @staticmethod
  def from_measure(key: str, target: str, steps_json: str, result: MeasureResult, strategy: str = "",
                   trial: int = -1) -> Record:
    """The record of one measurement of ``steps_json`` for workload ``key`` on ``target``."""
    return Record(key, target, steps_json, result.cost_s if result.ok else None, result.error.value, result.message,
                  result.is_estimate, strategy=strategy, trial=trial)

  def to_dict(self) -> dict:
    return {"v": FORMAT, "workload_key": self.workload_key, "target": self.target, "steps": json.loads(self.steps_json),
            "cost_s": self.cost_s, "error": self.error, "message": self.message, "is_estimate": self.is_estimate,
            "timestamp": self.timestamp, "version": self.version, "strategy": self.strategy, "trial": self.trial}

  def to_line(self) -> str:
    """The record as one JSON line (no trailing newline)."""
    return json.dumps(self.to_dict(), allow_nan=False)

  @staticmethod
  def from_dict(d: dict) -> Record:
    """Inverse of :meth:`to_dict`; raises :class:`RecordsError` on a missing field or an unsupported version."""
    if not isinstance(d, dict): raise RecordsError(f"a record is a JSON object, got {type(d).__name__}")
    v = d.get("v")
    if not isinstance(v, int) or isinstance(v, bool): raise RecordsError(f"missing or invalid format version 'v': {v!r}")
    if v > FORMAT:
      raise RecordsError(f"format version {v} is newer than this minicomp ({minicomp_version()}) supports "
                         f"(version {FORMAT}); upgrade minicomp to read this log")
    if v < 1: raise RecordsError(f"unknown format version {v}; supported: {FORMAT}")
    missing = [k for k in ("workload_key", "target", "steps", "cost_s", "error") if k not in d]
    if missing: raise RecordsError(f"record lacks field(s) {', '.join(missing)}")
    # unknown extra fields are ignored: a v1 writer may add informational fields without breaking readers
    try:
      return Record(str(d["workload_key"]), str(d["target"]), json.dumps(d["steps"]), d["cost_s"], str(d["error"]),
                    str(d.get("message", "")), bool(d.get("is_estimate", True)), float(d.get("timestamp", 0.0)),
                    str(d.get("version", "unknown")), str(d.get("strategy", "")), int(d.get("trial", -1)))
    except (TypeError, ValueError) as e:
      raise RecordsError(f"invalid field value: {e}") from None


class RecordLog:
  """Appends records to a JSON-lines file. Use from one process at a time.

  Each :meth:`append` writes its batch in one write, then flushes and fsyncs, so a killed run loses
  at most the batch in flight (in practice the line in flight). On opening, a torn last line left by
  such a kill is cut off (with a warning) so that new lines do not glue onto it and damage the log."""

  def __init__(self, path: str | os.PathLike):
    self.path = os.fspath(path)
    self._f = None

  def _open(self):
    if self._f is None:
      d = os.path.dirname(self.path)
      if d: os.makedirs(d, exist_ok=True)
      _repair_tail(self.path)
      self._f = open(self.path, "a", encoding="utf-8")   # noqa: SIM115 - held open across appends; close() closes it
    return self._f

  def append(self, records: Record | Iterable[Record]) -> int:
    """Append ``records`` (one or many) and make them durable; returns how many were written."""
    recs = [records] if isinstance(records, Record) else list(records)
    bad = [r for r in recs if not isinstance(r, Record)]
    if bad: raise RecordsError(f"RecordLog.append takes Record objects, got {type(bad[0]).__name__}")
    if not recs: return 0
    text = "".join(r.to_line() + "\n" for r in recs)     # serialise everything first: an error writes nothing
    f = self._open()
    f.write(text)
    f.flush()
    os.fsync(f.fileno())
    return len(recs)

  def close(self) -> None:
    if self._f is not None:
      self._f.close()
      self._f = None

  def __enter__(self): return self
  def __exit__(self, *exc) -> None: self.close()


def _repair_tail(path: str) -> None:
  """Cut a torn (unterminated, unparsable) last line; terminate an unterminated but complete one."""
  try:
    size = os.path.getsize(path)
  except FileNotFoundError:
    return
  if size == 0: return
  with open(path, "rb") as f:
    f.seek(size - 1)
    if f.read(1) == b"\n": return
    pos, nl = size, -1          # find the last newline, reading backwards in blocks
    while pos > 0 and nl < 0:
      start = max(0, pos - 65536)
      f.seek(start)
      block = f.read(pos - start)
      k = block.rfind(b"\n")
      if k >= 0: nl = start + k
      pos = start
    f.seek(nl + 1)
    tail = f.read()
  try:
    json.loads(tail)
    with open(path, "ab") as f: f.write(b"\n")
  except ValueError:
    _log.warning("%s: dropping a torn last line (%d bytes; an interrupted run) before appending", path, len(tail))
    os.truncate(path, nl + 1)


def load_records(path: str | os.PathLike, *, workload_key: str | None = None, target: str | None = None,
                 missing_ok: bool = True) -> list[Record]:
  """Records of a log in file order, optionally only those of one workload key and/or target.

  A missing file gives ``[]`` (a new run resuming from nothing) unless ``missing_ok=False``.
  A last line that is not valid JSON (a run killed mid-write) is skipped with a warning on the
  ``minicomp`` logger; any other bad line raises :class:`RecordsError` naming the file and line."""
  path = os.fspath(path)
  try:
    with open(path, encoding="utf-8", errors="replace") as f:
      lines = f.read().split("\n")
  except FileNotFoundError:
    if missing_ok: return []
    raise RecordsError(f"{path}: no such tuning log") from None
  numbered = [(n, ln) for n, ln in enumerate(lines, 1) if ln.strip()]
  out = []
  for k, (n, ln) in enumerate(numbered):
    try:
      d = json.loads(ln)
    except json.JSONDecodeError as e:
      if k == len(numbered) - 1:
        _log.warning("%s:%d: skipping a truncated last line (an interrupted run?): %s", path, n, e)
        continue
      raise RecordsError(f"{path}:{n}: malformed line ({e}); delete the line to use the rest of the log") from None
    try:
      r = Record.from_dict(d)
    except RecordsError as e:
      raise RecordsError(f"{path}:{n}: {e}") from None
    if (workload_key is None or r.workload_key == workload_key) and (target is None or r.target == target): out.append(r)
  return out


def best_records(records: Iterable[Record], *, is_estimate: bool | None = None) -> dict[tuple[str, str], Record]:
  """The lowest-cost successful record per ``(workload_key, target)``; ties go to the earliest.

  A log may mix static-model estimates and GPU timings, which do not compare; pass ``is_estimate``
  to pick one kind."""
  best: dict[tuple[str, str], Record] = {}
  for r in records:
    if not r.ok or (is_estimate is not None and r.is_estimate != is_estimate): continue
    k = (r.workload_key, r.target)
    if k not in best or r.cost_s < best[k].cost_s: best[k] = r
  return best


def measured_keys(records: Iterable[Record]) -> set[tuple[str, str, str]]:
  """``(workload_key, target, canonical_steps(steps_json))`` of every record, failed ones included, so a resumed
  search skips them: test a candidate with ``(key, target, canonical_steps(s.to_json())) in seen``."""
  return {(r.workload_key, r.target, canonical_steps(r.steps_json)) for r in records}


def curve(records: Iterable[Record]) -> dict[tuple[str, str], list[tuple[int, float, float | None]]]:
  """Tuning curves: per ``(workload_key, target)``, one ``(trial_index, elapsed_s, best_cost_so_far)`` per record.

  Log order is measurement order. ``trial_index`` counts that task's records from 0 (failures included),
  ``elapsed_s`` is the time since the first of all given records (so curves of tasks tuned in turn share
  one clock), ``best_cost_so_far`` is None until the task's first success."""
  recs = list(records)
  if not recs: return {}
  t0 = recs[0].timestamp
  out: dict[tuple[str, str], list[tuple[int, float, float | None]]] = {}
  for r in recs:
    pts = out.setdefault((r.workload_key, r.target), [])
    best = pts[-1][2] if pts else None
    if r.ok and (best is None or r.cost_s < best): best = r.cost_s
    pts.append((len(pts), r.timestamp - t0, best))
  return out
