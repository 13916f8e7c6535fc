"""Fitting a :class:`~.calibration.Calibration` on a timings dataset, and judging one on tasks it never saw.

The loss and the model are the module docstring of :mod:`.calibration`. :func:`fit` learns from the correct
programs of every task in the timings given; :func:`leave_one_task_out` fits once per task without it and
scores the held-out task, which is what a user's new model (tasks the calibration has not seen) can expect.
:func:`rank_quality` is the score: the GPU time of the estimate's favourite over the fastest program's,
how many of the GPU's ten fastest are among the estimate's ten, and Spearman's rank correlation.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from minicomp.errors import CalibrationError
from minicomp.search.static import calibration as C
from minicomp.search.static.model import LAUNCH_OVERHEAD_S, LaunchFacts, combine, unit_times

MIN_PROGRAMS = 20      # a task with fewer is fitted on but not scored (its ranks say little)
TOP = 10


@dataclass
class TaskData:
  """One task's correct programs: every launch's unit times (launches x units), which program each launch
  belongs to, and each program's GPU time."""
  name: str
  times: np.ndarray
  program: np.ndarray
  gpu_s: np.ndarray
  gpus: set


def device_of(t) -> object:
  """The device entry whose clock and bandwidths a timing's unit times use: the GPU that timed it where
  ``target.py`` knows it (an H200's timings use the h200 entry), else the device its facts were made for."""
  from minicomp.target import device_for_gpu, get_device
  return get_device(device_for_gpu(t.gpu, t.arch) or t.facts["device"])


def tasks_of(rows, arch: str) -> dict[str, TaskData]:
  """The timings of ``arch``'s family that are correct and carry facts, grouped by task."""
  acc: dict[str, list] = defaultdict(lambda: [[], [], [], set()])
  for r in rows:
    if not r.correct or not r.facts or C.family(r.arch) != C.family(arch): continue
    dev = device_of(r)
    a = acc[r.task]
    prog = len(a[2])
    for f in r.facts["launches"]:
      ut, _, _ = unit_times(LaunchFacts(**f), dev)
      a[0].append([ut.get(u, 0.0) for u in C.UNITS]); a[1].append(prog)
    a[2].append(r.median_s); a[3].add(f"{r.gpu}, {r.date}")
  return {k: TaskData(k, np.array(v[0], float).reshape(-1, len(C.UNITS)), np.array(v[1]), np.array(v[2]), v[3])
          for k, v in sorted(acc.items())}


def fit(tasks: dict[str, TaskData], arch: str, provenance: dict | None = None) -> C.Calibration:
  """The calibration that ranks ``tasks``' programs best (module docstring); at least two tasks needed."""
  if len([t for t in tasks.values() if len(t.gpu_s) >= 2]) < 2:
    raise CalibrationError(f"fitting a calibration for {arch} needs timed programs of at least two tasks, each "
                           f"with two or more correct programs; have {len(tasks)} task(s)")
  import jax
  import jax.numpy as jnp
  import optax
  used = np.array([i for i, u in enumerate(C.UNITS) if any(t.times[:, i].any() for t in tasks.values())])
  data = list(tasks.values())

  def predict_us(theta, d: TaskData):
    """Calibration.combine's p-norm (each launch scaled by its largest term) in JAX, summed per program."""
    w = jnp.ones(len(C.UNITS)).at[used].set(jnp.exp(theta[:-1]))
    p = 1.0 + jnp.exp(theta[-1])
    z = d.times * w * 1e6 + 1e-12                    # microseconds: the norm in a well-scaled range
    top = jnp.max(z, axis=1, keepdims=True)
    per_launch = top[:, 0] * jnp.sum((z / top) ** p, axis=1) ** (1 / p) + LAUNCH_OVERHEAD_S * 1e6
    return jax.ops.segment_sum(per_launch, d.program, num_segments=len(d.gpu_s))

  def loss(theta):
    total = 0.0
    for d in data:
      lt, lg = jnp.log(predict_us(theta, d)), jnp.log(d.gpu_s * 1e6)
      pg = jax.nn.softmax(-lg / C.TAU)
      total += -jnp.sum(pg * jax.nn.log_softmax(-lt / C.TAU)) + C.MSE_WEIGHT * jnp.mean((lt - lg) ** 2)
    return total / len(data) + C.RIDGE * jnp.sum(theta ** 2)

  theta = jnp.zeros(len(used) + 1)
  opt = optax.adam(C.LEARNING_RATE)
  state = opt.init(theta)
  step = jax.jit(jax.value_and_grad(loss))
  for _ in range(C.STEPS):
    _, g = step(theta)
    upd, state = opt.update(g, state)
    theta = optax.apply_updates(theta, upd)
  theta = np.asarray(theta, float)
  weights = {C.UNITS[i]: round(float(math.exp(v)), 6) for i, v in zip(used, theta[:-1])}
  return C.Calibration(C.family(arch), weights, round(1.0 + math.exp(theta[-1]), 6), provenance or {})


def predict(cal: C.Calibration | None, d: TaskData) -> np.ndarray:
  """Estimated seconds of each of ``d``'s programs under ``cal`` (None: the uncalibrated maxima), by the
  formula :func:`.model.launch_time` uses."""
  per = np.array([combine(dict(zip(C.UNITS, row)), cal)[3] for row in d.times])
  return np.bincount(d.program, per + LAUNCH_OVERHEAD_S, minlength=len(d.gpu_s))


def _ranks(x: np.ndarray) -> np.ndarray:
  order = np.argsort(x, kind="stable")
  r = np.empty(len(x))
  r[order] = np.arange(len(x))
  for v in np.unique(x):            # ties share their mean rank
    m = x == v
    if m.sum() > 1: r[m] = r[m].mean()
  return r


def rank_quality(est: np.ndarray, gpu: np.ndarray) -> dict:
  """``pick``: GPU time of the estimate's favourite over the fastest (ties broken by the slower: no luck);
  ``top10``: the GPU's ten fastest among the estimate's ten; ``rho``: Spearman's rank correlation."""
  best = est.min()
  pick = gpu[est <= best * (1 + 1e-12)].max() / gpu.min()
  k = min(TOP, len(gpu))
  top = len(set(np.argsort(est, kind="stable")[:k]) & set(np.argsort(gpu, kind="stable")[:k]))
  rho = float(np.corrcoef(_ranks(est), _ranks(gpu))[0, 1]) if len(gpu) > 2 else float("nan")
  return {"programs": len(gpu), "pick": float(pick), "top10": top, "rho": rho}


def leave_one_task_out(tasks: dict[str, TaskData], arch: str, progress=None) -> dict[str, dict]:
  """Per task with at least :data:`MIN_PROGRAMS` programs: the calibration fitted on the other tasks, scored
  on it (:func:`rank_quality`), next to the uncalibrated model's score (``"uncalibrated"``)."""
  out = {}
  scored = [k for k, d in tasks.items() if len(d.gpu_s) >= MIN_PROGRAMS]
  for k in scored:
    cal = fit({j: d for j, d in tasks.items() if j != k}, arch)
    d = tasks[k]
    out[k] = {**rank_quality(predict(cal, d), d.gpu_s), "uncalibrated": rank_quality(predict(None, d), d.gpu_s)}
    if progress is not None: progress(k)
  return out


def calibrate(rows, arch: str, check: bool = True, progress: bool = False) -> tuple[C.Calibration, dict]:
  """Fit ``arch``'s calibration on every task of ``rows`` (timings), with its provenance; with ``check``, first
  judge the method leave-one-task-out on the same rows (returned, and summarised in the provenance)."""
  import datetime
  from minicomp import __version__
  from minicomp.progress import bar
  tasks = tasks_of(rows, arch)
  loto = {}
  if check:
    scored = sum(len(d.gpu_s) >= MIN_PROGRAMS for d in tasks.values())
    with bar(scored, "leave-one-task-out", enabled=progress, unit="task") as b:
      loto = leave_one_task_out(tasks, arch, progress=lambda _: b.update())
  prov = {"gpus": sorted({g.rsplit(", ", 1)[0] for d in tasks.values() for g in d.gpus}),
          "dates": sorted({g.rsplit(", ", 1)[1] for d in tasks.values() for g in d.gpus}),
          "programs": int(sum(len(d.gpu_s) for d in tasks.values())), "tasks": sorted(tasks),
          "fitted": datetime.date.today().isoformat(), "minicomp": __version__,
          "leave_one_task_out": {k: {m: round(v[m], 3) for m in ("programs", "pick", "top10", "rho")} for k, v in loto.items()}}
  return fit(tasks, arch, prov), loto


__all__ = ["TaskData", "calibrate", "fit", "leave_one_task_out", "predict", "rank_quality", "tasks_of"]
