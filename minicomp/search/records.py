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

Validity: a line counts only if it parses as a record of a supported version with fields of the
right types, a positive finite ``cost_s`` (or null for a failure) and steps that parse; any other
line is skipped with a warning naming ``file:line`` (:func:`load_records`), so one damaged line
never costs the rest of the log. Only an unsupported format version (or a missing file, when
required) raises :class:`RecordsError`. Whether a record's steps still replay to a valid schedule
of its task is checked where it is used (:func:`replay_error`): the best *valid* record wins.

Durability: :class:`RecordLog` appends and fsyncs each batch, so a killed run loses at most the
line being written; on opening, it cuts off a last line that is not a valid record (torn by a
kill, or garbage) so that new lines never follow a bad one.
"""
from __future__ import annotations

import json
import logging
import math
import os
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from typing import ClassVar

from minicomp.errors import InvalidRecord, MinicompError, RecordsError
from minicomp.search.measure import ErrorKind, MeasureResult

FORMAT = 1                # the line format version this module writes and reads
_log = logging.getLogger("minicomp")


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


def _is_num(x) -> bool: return isinstance(x, (int, float)) and not isinstance(x, bool)


@dataclass(frozen=True)
class Record:
  """One measured candidate. ``steps_json`` is normalised to ``Schedule.to_json()``'s layout on construction;
  ``where`` (``"file:line"`` of a loaded record, else empty) is for messages only."""
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
  task: str = ""                 # the task's name for people (``Conv+Relu 1x64x56x56``); informational
  where: str = field(default="", compare=False, repr=False)
  format: ClassVar[int] = FORMAT

  def __post_init__(self):
    try:
      steps = json.loads(self.steps_json)
    except (TypeError, json.JSONDecodeError) as e:
      raise InvalidRecord(f"steps_json is not JSON text ({e}): {str(self.steps_json)[:80]!r}") from None
    if not isinstance(steps, list): raise InvalidRecord(f"steps_json must be a JSON list of steps, got {type(steps).__name__}")
    object.__setattr__(self, "steps_json", _dump_steps(steps))
    if self.cost_s is not None:
      # NaN / inf would be written as non-standard JSON; 0 or a negative cost would beat every real one
      if not _is_num(self.cost_s) or not math.isfinite(self.cost_s) or self.cost_s <= 0:
        raise InvalidRecord(f"cost_s must be a positive finite number of seconds or None, got {self.cost_s!r}")
      object.__setattr__(self, "cost_s", float(self.cost_s))
    if self.ok and self.cost_s is None: raise InvalidRecord("a successful record (error 'ok') needs a cost_s")

  @property
  def ok(self) -> bool: return self.error == ErrorKind.NONE.value

  @staticmethod
  def from_measure(key: str, target: str, steps_json: str, result: MeasureResult, strategy: str = "",
                   trial: int = -1, task: str = "") -> Record:
    """The record of one measurement of ``steps_json`` for workload ``key`` on ``target``."""
    return Record(key, target, steps_json, result.cost_s if result.ok else None, result.error.value, result.message,
                  result.is_estimate, strategy=strategy, trial=trial, task=task)

  def to_dict(self) -> dict:
    return {"v": FORMAT, "workload_key": self.workload_key, "target": self.target, "steps": json.loads(self.steps_json),
            "cost_s": self.cost_s, "error": self.error, "message": self.message, "is_estimate": self.is_estimate,
            "timestamp": self.timestamp, "version": self.version, "strategy": self.strategy, "trial": self.trial,
            **({"task": self.task} if self.task else {})}

  def to_line(self) -> str:
    """The record as one JSON line (no trailing newline)."""
    return json.dumps(self.to_dict(), allow_nan=False)

  @staticmethod
  def from_dict(d: dict, where: str = "") -> Record:
    """Inverse of :meth:`to_dict`. Raises :class:`RecordsError` for an unsupported format version and
    :class:`InvalidRecord` for anything else wrong: a missing field, a field of the wrong type, a bad
    cost, steps that do not parse (an unknown step, a missing step field)."""
    if not isinstance(d, dict): raise InvalidRecord(f"a record is a JSON object, got {type(d).__name__}")
    v = d.get("v")
    if not isinstance(v, int) or isinstance(v, bool): raise InvalidRecord(f"missing or invalid format version 'v': {v!r}")
    if v > FORMAT:
      raise RecordsError(f"format version {v} is newer than this minicomp ({minicomp_version()}) supports "
                         f"(version {FORMAT}); upgrade minicomp to read this log")
    if v < 1: raise RecordsError(f"unknown format version {v}; supported: {FORMAT}")
    missing = [k for k in ("workload_key", "target", "steps", "cost_s", "error") if k not in d]
    if missing: raise InvalidRecord(f"record lacks field(s) {', '.join(missing)}")
    # unknown extra fields are ignored: a v1 writer may add informational fields without breaking readers
    types = {"workload_key": str, "target": str, "steps": list, "error": str, "message": str, "is_estimate": bool,
             "version": str, "strategy": str, "task": str}
    for k, t in types.items():
      if k in d and not isinstance(d[k], t): raise InvalidRecord(f"field {k!r} must be a {t.__name__}, got {d[k]!r:.60}")
    if "timestamp" in d and not _is_num(d["timestamp"]):
      raise InvalidRecord(f"field 'timestamp' must be a number, got {d['timestamp']!r:.60}")
    if "trial" in d and (not isinstance(d["trial"], int) or isinstance(d["trial"], bool)):
      raise InvalidRecord(f"field 'trial' must be an int, got {d['trial']!r:.60}")
    _parse_steps(d["steps"])
    return Record(d["workload_key"], d["target"], json.dumps(d["steps"]), d["cost_s"], d["error"], d.get("message", ""),
                  d.get("is_estimate", True), float(d.get("timestamp", 0.0)), d.get("version", "unknown"),
                  d.get("strategy", ""), d.get("trial", -1), d.get("task", ""), where)


def _parse_steps(steps: list) -> None:
  """Raise InvalidRecord unless every step is a known step with its fields (whether it applies is replay's job)."""
  from minicomp.ir.steps import steps_from_json
  try:
    steps_from_json(steps)
  except MinicompError as e:
    raise InvalidRecord(f"steps do not parse: {e}") from None
  except (KeyError, TypeError, ValueError, AttributeError) as e:
    raise InvalidRecord(f"steps do not parse: {type(e).__name__}: {e}") from None


def replay_error(steps_json: str, dag, target) -> str | None:
  """Why ``steps_json`` does not replay to a valid schedule of ``dag`` on ``target`` (each step applied,
  the program lowered and checked against the target's limits, as measuring a candidate does), or None."""
  from minicomp.ir.schedule import Schedule
  from minicomp.search.annotate import validate
  try:
    _, why = validate(Schedule.from_json(dag, steps_json), target)
    return why
  except MinicompError as e:
    return str(e)
  except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:   # steps of the wrong shape
    return f"{type(e).__name__}: {e}"


class RecordLog:
  """Appends records to a JSON-lines file. Use from one process at a time.

  Each :meth:`append` writes its batch in one write, then flushes and fsyncs, so a killed run loses
  at most the batch in flight (in practice the line in flight). On opening, a last line that is not
  a valid record (torn by such a kill, or garbage) is cut off with a warning, so that new lines
  neither glue onto it nor follow it."""

  def __init__(self, path: str | os.PathLike):
    self.path = os.fspath(path)
    self._f = None

  def _open(self):
    if self._f is None:
      d = os.path.dirname(self.path)
      if d: os.makedirs(d, exist_ok=True)
      _check_regular(self.path)
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
  """Cut a last line that is not a valid record (torn or garbage); terminate an unterminated valid one.
  A line of a newer format version is kept: it is valid, only not for this minicomp."""
  try:
    size = os.path.getsize(path)
  except FileNotFoundError:
    return
  if size == 0: return
  with open(path, "rb") as f:
    f.seek(size - 1)
    terminated = f.read(1) == b"\n"
    end = size - 1 if terminated else size
    pos, nl = end, -1          # find the newline before the last line, reading backwards in blocks
    while pos > 0 and nl < 0:
      start = max(0, pos - 65536)
      f.seek(start)
      block = f.read(pos - start)
      k = block.rfind(b"\n")
      if k >= 0: nl = start + k
      pos = start
    f.seek(nl + 1)
    tail = f.read(end - nl - 1)
  if not tail.strip(): return
  why = None
  try:
    Record.from_dict(json.loads(tail))
  except ValueError as e:                 # JSONDecodeError, UnicodeDecodeError
    why = f"not JSON ({e})"
  except InvalidRecord as e:
    why = str(e)
  except RecordsError:
    pass
  if why is None:
    if not terminated:
      with open(path, "ab") as f: f.write(b"\n")
    return
  with open(path, "rb") as f: line = f.read(nl + 1).count(b"\n") + 1
  _log.warning("%s:%d: dropping a torn or invalid last line before appending (%d bytes; an interrupted run?): %s",
               path, line, len(tail), why)
  os.truncate(path, nl + 1)


MAX_WARNINGS = 10       # bad lines of one log warned about one by one; the rest are counted in one warning
MAX_LINE = 1 << 24      # bytes of one record line (a record is a few KB): a longer line is skipped, never read whole


def _kind(mode: int) -> str:
  return ("a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a device" if
          stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")


def _check_regular(path: str, mode: int | None = None) -> None:
  """A tuning log is a regular file: a FIFO would hang a reader, a device never end (``/dev/zero``).
  ``mode``: the file's ``st_mode`` when already known (of an open file), else the path's."""
  if mode is None:
    try:
      mode = os.stat(path).st_mode
    except FileNotFoundError:
      return
  if not stat.S_ISREG(mode): raise RecordsError(f"{path}: {_kind(mode)}, not a tuning log (a JSON-lines file)")


def _read_lines(path: str):
  """The lines of a tuning log, each cut at MAX_LINE bytes (the rest of a longer line dropped); opened without
  blocking, and refused unless it is a regular file."""
  _check_regular(path)
  fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))   # (and checked again: it may have changed)
  with os.fdopen(fd, "rb") as f:
    _check_regular(path, os.fstat(f.fileno()).st_mode)
    while True:
      line = f.readline(MAX_LINE)
      if not line: return
      if len(line) == MAX_LINE and not line.endswith(b"\n"):
        while True:                                 # skip the rest of an overlong line
          rest = f.readline(MAX_LINE)
          if not rest or rest.endswith(b"\n"): break
        line = b"{overlong line}"
      yield line.rstrip(b"\n").decode("utf-8", errors="replace")


def load_records(path: str | os.PathLike, *, workload_key: str | None = None, target: str | None = None,
                 missing_ok: bool = True) -> list[Record]:
  """Records of a log in file order, optionally only those of one workload key and/or target.

  A missing file gives ``[]`` (a new run resuming from nothing) unless ``missing_ok=False``.
  A line that is not a valid record (bad JSON, a missing field or one of the wrong type, a
  non-positive or non-finite cost, steps that do not parse) is skipped with a warning on the
  ``minicomp`` logger naming the file and line; a record of an unsupported format version raises
  :class:`RecordsError`. Each record's ``where`` is its ``"file:line"``."""
  path = os.fspath(path)
  try:
    lines = list(_read_lines(path))
  except FileNotFoundError:
    if missing_ok: return []
    raise RecordsError(f"{path}: no such tuning log") from None
  except OSError as e:
    raise RecordsError(f"{path}: cannot read the tuning log ({e.strerror or e})") from None
  numbered = [(n, ln) for n, ln in enumerate(lines, 1) if ln.strip()]
  out, skipped = [], 0
  for k, (n, ln) in enumerate(numbered):
    try:
      try:
        d = json.loads(ln)
      except json.JSONDecodeError as e:
        raise InvalidRecord(("truncated last line (an interrupted run?)" if k == len(numbered) - 1 else
                             "malformed line") + f": {e}") from None
      r = Record.from_dict(d, f"{path}:{n}")
    except InvalidRecord as e:
      skipped += 1
      if skipped <= MAX_WARNINGS: _log.warning("%s:%d: skipping an invalid record: %s", path, n, e)
      continue
    except RecordsError as e:
      raise RecordsError(f"{path}:{n}: {e}") from None
    if (workload_key is None or r.workload_key == workload_key) and (target is None or r.target == target): out.append(r)
  if skipped > MAX_WARNINGS:
    _log.warning("%s: skipped %d invalid records in all (%d more than shown)", path, skipped, skipped - MAX_WARNINGS)
  return out


def best_records(records: Iterable[Record], *, is_estimate: bool | None = None) -> dict[tuple[str, str], Record]:
  """The lowest-cost successful record per ``(workload_key, target)``; ties go to the earliest.

  Static-model estimates and GPU timings do not compare: pass ``is_estimate`` to pick one kind;
  without it, a task with records of both kinds raises :class:`RecordsError`. The records are not
  replayed here: check the winner with :func:`replay_error` (the compiler takes the best valid one)."""
  best: dict[tuple[str, str], Record] = {}
  kinds: dict[tuple[str, str], set[bool]] = {}
  for r in records:
    if not r.ok or (is_estimate is not None and r.is_estimate != is_estimate): continue
    k = (r.workload_key, r.target)
    kinds.setdefault(k, set()).add(r.is_estimate)
    if k not in best or r.cost_s < best[k].cost_s: best[k] = r
  mixed = [k for k, v in kinds.items() if len(v) > 1]
  if mixed:
    raise RecordsError(f"task {mixed[0][0]} on {mixed[0][1]} has both static-model estimates and GPU timings, which "
                       "do not compare: pass best_records(..., is_estimate=True) or is_estimate=False")
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
