"""A calibration of the static model on real GPU timings: how much each unit's time weighs, and how they add.

The uncalibrated formula (:mod:`.model`) takes a launch's time as the largest of its units' times, as if
issue, pipes, shared memory, L1, the latency chain and memory overlapped perfectly. On 3,344 programs timed
on an H200 that flatters what a search favours (many threads, much shared memory, long issue streams) by
1.8-2.3x, so its favourite ran 1.55-1.80x slower than the fastest on five of eight tasks. A calibration
replaces the maximum with a weighted p-norm,

    time = (sum_k (w_k t_k)^p)^(1/p) + launch overhead,

over the units' times ``t_k`` of :func:`.model.unit_times` (``barrier`` among them: a warp's ``bar.sync``
count times the block's warps): ``p = 1`` is no overlap, ``p -> inf`` the uncalibrated maximum. The weights
and ``p`` are fitted per GPU arch (the SM's units are the arch's; the device entry's clock and bandwidths
set the times) by :func:`fit`: gradient descent (JAX) on a listwise ranking loss per task (the cross
entropy between softmax(-ln time / tau) of the GPU times and of the estimates: it weighs the fastest
programs, where a search's choice is made), plus a small squared error of ln time so the estimate stays
in seconds. A unit the timings never exercised (no program had it) keeps weight 1.

A calibration is a small JSON file (:data:`FORMAT`, :data:`VERSION`) with its provenance (GPUs, dates,
programs, tasks, how well it ranks tasks it was not fitted on). minicomp ships one per arch it has timings
for (``calibrations/<arch>.json``); ``minicomp calibrate`` writes the user's own to the cache folder
(``cache_dir("calibration")/<arch>.json``), which then takes precedence. ``MINICOMP_STATIC_MODEL`` chooses:
``calibrated`` (the default: the user's, else the shipped one, else the uncalibrated formula),
``uncalibrated``, or the path of a calibration file.
"""
from __future__ import annotations

import functools
import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from minicomp.errors import CalibrationError

FORMAT = "minicomp-static-calibration"
VERSION = 1
SHIPPED = Path(__file__).resolve().parent / "calibrations"
UNITS = ("issue", "fp32", "int", "sfu", "fp64", "lsu", "cvt", "tensor", "shared", "l1", "latency", "barrier",
         "l2", "dram")
MODEL_ENV = "MINICOMP_STATIC_MODEL"
TAU = 0.2          # the ranking loss's temperature (on ln time): 0.2 weighs the programs within ~20% of the fastest
MSE_WEIGHT = 0.1   # of the squared error of ln time (keeps estimates in seconds; ranking barely needs it)
RIDGE = 1e-3       # on the log-weights and ln(p - 1): units no program exercises stay at weight 1
STEPS, LEARNING_RATE = 500, 0.05


@dataclass(frozen=True)
class Calibration:
  """Weights per unit and the p of the norm that combines them, for one arch."""
  arch: str
  weights: dict[str, float]
  p: float
  provenance: dict = field(default_factory=dict, compare=False)
  source: str = field(default="", compare=False)     # the file it was read from ("" when fitted here)

  def weighted(self, times: dict[str, float]) -> dict[str, float]:
    return {k: self.weights.get(k, 1.0) * v for k, v in times.items()}

  def combine(self, xs: list):
    """The p-norm of the positive terms (numbers; or numpy arrays, one value per program, elementwise)."""
    if any(isinstance(x, np.ndarray) for x in xs):
      top = functools.reduce(np.maximum, xs)
      scale = np.where(top > 0, top, 1.0)
      total = sum(np.where(x > 0, x / scale, 0.0) ** self.p for x in xs)
      return np.where(top > 0, top * total ** (1 / self.p), 0.0)
    xs = [x for x in xs if x > 0]
    if not xs: return 0.0
    top = max(xs)                    # scaled: times are ~1e-6 s and p may be large
    return top * sum((x / top) ** self.p for x in xs) ** (1 / self.p)

  @property
  def digest(self) -> str:
    """What identifies it (the schedule cache keys choices by it)."""
    body = json.dumps({"arch": self.arch, "weights": self.weights, "p": self.p}, sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()[:12]

  def to_json(self) -> str:
    return json.dumps({"format": FORMAT, "version": VERSION, "arch": self.arch, "p": self.p,
                       "weights": self.weights, "provenance": self.provenance}, indent=1, sort_keys=True) + "\n"

  def save(self, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(self.to_json())
    tmp.replace(path)
    return path


def load(path: str | Path) -> Calibration:
  """Read a calibration file; a file that is not one, of another version, or with a missing or bad field is a
  :class:`CalibrationError` naming the file and what is wrong."""
  path = Path(path)
  try:
    d = json.loads(path.read_text())
  except OSError as e:
    raise CalibrationError(f"{path}: cannot read the calibration: {e.strerror or e}") from None
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise CalibrationError(f"{path}: not a calibration file (not JSON: {e})") from None
  if not isinstance(d, dict) or d.get("format") != FORMAT:
    raise CalibrationError(f"{path}: not a calibration file (its 'format' is not {FORMAT!r})")
  if d.get("version") != VERSION:
    raise CalibrationError(f"{path}: calibration version {d.get('version')!r}; this minicomp reads version {VERSION} "
                           "(run `minicomp calibrate` again, or update minicomp)")
  arch, p, w = d.get("arch"), d.get("p"), d.get("weights")
  if not isinstance(arch, str) or not arch.startswith("sm_"):
    raise CalibrationError(f"{path}: 'arch' must be a CUDA arch like 'sm_90', not {arch!r}")
  if not isinstance(p, (int, float)) or not 1.0 <= p <= 64.0:
    raise CalibrationError(f"{path}: 'p' must be a number in [1, 64], not {p!r}")
  if not isinstance(w, dict) or not w:
    raise CalibrationError(f"{path}: 'weights' must be a non-empty object of unit -> weight")
  for k, v in w.items():
    if k not in UNITS:
      raise CalibrationError(f"{path}: unknown unit {k!r} in 'weights' (units: {', '.join(UNITS)})")
    if not isinstance(v, (int, float)) or not (v > 0 and math.isfinite(v)):
      raise CalibrationError(f"{path}: the weight of {k!r} must be a positive number, not {v!r}")
  return Calibration(arch, {k: float(v) for k, v in w.items()}, float(p), d.get("provenance") or {}, str(path))


def user_path(arch: str) -> Path:
  """Where ``minicomp calibrate`` puts the user's calibration for ``arch`` (not created here: estimating
  must work with a read-only cache folder)."""
  from minicomp.codegen.cache import cache_root
  return cache_root() / "calibration" / f"{arch}.json"


def shipped_path(arch: str) -> Path:
  return SHIPPED / f"{arch}.json"


def family(arch: str) -> str:
  """The arch a calibration is kept under: ``sm_90a`` is ``sm_90``'s."""
  return arch.rstrip("af")


def active(dev) -> Calibration | None:
  """The calibration estimates on ``dev`` use (see the module docstring), or None for the uncalibrated model."""
  choice = os.environ.get(MODEL_ENV, "calibrated").strip() or "calibrated"
  arch = family(dev.arch)
  if choice == "uncalibrated": return None
  if choice != "calibrated":
    cal = _read(choice, _mtime(Path(choice)))
    return cal if family(cal.arch) == arch else None
  for path in (user_path(arch), shipped_path(arch)):
    m = _mtime(path)
    if m is not None: return _read(str(path), m)
  return None


def _mtime(path: Path):
  try:
    return path.stat().st_mtime_ns
  except OSError:
    return None


@functools.lru_cache(maxsize=16)
def _read(path: str, mtime) -> Calibration:    # (mtime in the key: a file rewritten by `calibrate` is read again)
  if mtime is None and not Path(path).exists():
    raise CalibrationError(f"{MODEL_ENV}={path}: no such calibration file (or name 'calibrated' / 'uncalibrated')")
  return load(path)


def describe(cal: Calibration | None) -> str:
  """How an estimate names its model: "static model", or "static model calibrated on <GPUs> timings"."""
  if cal is None: return "static model"
  return f"static model calibrated on {', '.join(cal.provenance.get('gpus') or [cal.arch + ' GPU'])} timings"


__all__ = ["Calibration", "FORMAT", "VERSION", "UNITS", "active", "describe", "load", "user_path", "shipped_path"]
