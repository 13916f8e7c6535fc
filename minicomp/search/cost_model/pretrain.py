"""Pre-training data for the learned cost model: other tasks' programs, their features and costs.

Felix's reported 2.8-3.4x sample efficiency over Ansor comes from descending on a cost model that is
*pre-trained* (on TenSet) before the first measurement; without one, a model-guided strategy's first
round is random and its model learns from as few programs as it has measured. ``benchmarks/
strategies.py`` found the same here: Felix with a model pre-trained on the static model's labels of the
*other* benchmark tasks is 8.7x as sample-efficient as Ansor at 16 measurements, and plain Felix is no
better than Ansor (docs/search.md, "Comparing the strategies").

A :class:`PretrainData` is a set of programs, each with its feature matrix (``features.py``, the
definition the strategies score with), its cost (seconds; None for a program that failed), the task
it belongs to and its schedule steps (JSON, so the features can be re-derived and checked). A
strategy given one (``FelixStrategy(pretrain=...)``, ``AnsorStrategy(pretrain=...)``, or
``strategy="felix-pre"``) keeps its rows in its training data through every retraining, the way
the benchmark's ``felix-pre`` does; labels are normalised per task, so the data's tasks and the
tuned ones never mix their scales.

minicomp ships one set, :func:`shipped`: 256 programs of each of the eight tasks of the strategies
benchmark (conv 3x3, conv 512, depthwise, matmul, batch matmul, softmax, ConvTranspose, Conv3d),
drawn from the programs the benchmark's strategies measured, with the **static model's estimates for
an H100** as costs (no GPU was used). ``research/pretrain_data.py`` rebuilds it, or builds one from
your own measurements. What the labels are, and which commit made them, is in :attr:`PretrainData.
meta`. If the feature definition changes, the shipped features go stale:
``tests/test_pretrain.py`` re-derives a sample of them from their steps and fails when they differ.

File format (``.npz``, no pickles): ``X`` (all feature rows, stacked), ``offsets`` (program ``i`` is
``X[offsets[i]:offsets[i+1]]``), ``costs`` (NaN = failed), ``tasks``, ``steps`` and ``meta`` (JSON).
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import numpy as np

from minicomp.errors import CostModelError, MinicompError

FORMAT = 1
SHIPPED = Path(__file__).parent / "data" / "pretrain_h100_static.npz"
TASK_PREFIX = "pretrain:"              # task ids of pre-training rows: they never equal a workload key


@dataclass(frozen=True, eq=False)
class PretrainData:
  """Programs of other tasks with their features and costs (module docstring)."""
  features: tuple[np.ndarray, ...]        # one (n_rows, n_features) float32 matrix per program
  costs: tuple[float | None, ...]         # seconds; None: the program failed
  tasks: tuple[str, ...]                  # the task each program belongs to
  steps: tuple[str, ...]                  # its schedule steps (Schedule.to_json)
  meta: dict = field(default_factory=dict)

  def __post_init__(self):
    n = len(self.features)
    if not (len(self.costs) == len(self.tasks) == len(self.steps) == n):
      raise CostModelError(f"pre-training data: {n} feature matrices but {len(self.costs)} costs, "
                           f"{len(self.tasks)} tasks and {len(self.steps)} steps")
    widths = {f.shape[1] for f in self.features if f.ndim == 2 and len(f)}
    if len(widths) > 1: raise CostModelError(f"pre-training data: programs with {sorted(widths)} features")

  def __len__(self) -> int:
    return len(self.features)

  @property
  def n_features(self) -> int | None:
    return next((f.shape[1] for f in self.features if f.ndim == 2 and len(f)), None)

  def task_names(self) -> list[str]:
    return sorted(set(self.tasks))

  def without(self, *tasks: str) -> PretrainData:
    """The data less every program of ``tasks`` (leave-one-task-out evaluation)."""
    keep = [i for i, t in enumerate(self.tasks) if t not in set(tasks)]
    return self._subset(keep)

  def _subset(self, idx: Sequence[int]) -> PretrainData:
    return PretrainData(tuple(self.features[i] for i in idx), tuple(self.costs[i] for i in idx),
                        tuple(self.tasks[i] for i in idx), tuple(self.steps[i] for i in idx), dict(self.meta))

  def rows(self, n_features: int | None = None) -> list[tuple[np.ndarray, float | None, str]]:
    """Training rows (features, cost, task id) as the learned strategies keep them; task ids carry
    ``TASK_PREFIX``. ``n_features``: the width the caller's model expects (checked)."""
    if n_features is not None and self.n_features not in (None, n_features):
      raise CostModelError(f"pre-training data has {self.n_features} features per row, the cost model "
                           f"expects {n_features}: the data was made with another feature definition; "
                           "rebuild it (research/pretrain_data.py)")
    return [(f, c, TASK_PREFIX + t) for f, c, t in zip(self.features, self.costs, self.tasks)]

  # -- files
  def save(self, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    width = self.n_features or 0
    mats = [f if len(f) else np.zeros((0, width), np.float32) for f in self.features]
    X = np.concatenate(mats).astype(np.float32) if mats else np.zeros((0, width), np.float32)
    offsets = np.cumsum([0] + [len(f) for f in mats]).astype(np.int64)
    costs = np.array([np.nan if c is None else c for c in self.costs], np.float64)
    meta = dict(self.meta, format=FORMAT)
    with path.open("wb") as fh:
      np.savez_compressed(fh, X=X, offsets=offsets, costs=costs, tasks=np.array(self.tasks, dtype=str),
                          steps=np.array(self.steps, dtype=str), meta=np.array(json.dumps(meta, sort_keys=True)))
    return path

  @staticmethod
  def load(path: str | Path) -> PretrainData:
    path = Path(path)
    try:
      with np.load(path, allow_pickle=False) as z:
        X, offsets, costs = z["X"], z["offsets"], z["costs"]
        tasks, steps, meta = [str(t) for t in z["tasks"]], [str(s) for s in z["steps"]], json.loads(str(z["meta"]))
    except FileNotFoundError:
      raise CostModelError(f"pre-training data {path}: no such file") from None
    except (OSError, KeyError, ValueError) as e:
      raise CostModelError(f"pre-training data {path}: not a minicomp pre-training file ({e})") from None
    if meta.get("format") != FORMAT:
      raise CostModelError(f"pre-training data {path}: format {meta.get('format')!r}, this minicomp reads {FORMAT}")
    feats = tuple(X[offsets[i]:offsets[i + 1]] for i in range(len(offsets) - 1))
    return PretrainData(feats, tuple(None if np.isnan(c) else float(c) for c in costs), tuple(tasks),
                        tuple(steps), meta)


@cache
def shipped() -> PretrainData:
  """The pre-training data minicomp ships (module docstring); loaded once."""
  return PretrainData.load(SHIPPED)


def resolve(pretrain) -> PretrainData | None:
  """What a strategy's ``pretrain=`` argument names: None or False (none), True or ``"shipped"`` (the
  shipped set), a path to a ``.npz`` file, or a :class:`PretrainData`."""
  if pretrain is None or pretrain is False: return None
  if pretrain is True or pretrain == "shipped": return shipped()
  if isinstance(pretrain, PretrainData): return pretrain
  if isinstance(pretrain, (str, Path)): return PretrainData.load(pretrain)
  raise CostModelError(f"pretrain={pretrain!r}: expected None, True, 'shipped', a path or a PretrainData")


def build(programs: Iterable[tuple[str, object, str, float | None]], meta: dict | None = None,
          on_skip=None) -> PretrainData:
  """Pre-training data from ``(task name, ComputeDAG, steps JSON, cost)`` tuples: each program is
  rebuilt from its steps, lowered and its features extracted. A program that no longer lowers is left
  out (``on_skip(task, steps, error)`` is told)."""
  from minicomp.ir.schedule import Schedule
  from minicomp.search.features import extract_features
  feats, costs, tasks, steps = [], [], [], []
  for task, dag, st, cost in programs:
    try: f = extract_features(Schedule.from_json(dag, st).lower())
    except MinicompError as e:   # a program this version cannot rebuild is left out, and said so
      if on_skip is not None: on_skip(task, st, e)
      continue
    feats.append(np.asarray(f, np.float32)); costs.append(cost); tasks.append(task); steps.append(st)
  return PretrainData(tuple(feats), tuple(costs), tuple(tasks), tuple(steps), dict(meta or {}))


def stale(data: PretrainData, dags: dict[str, object], sample: int = 8, seed: int = 0) -> list[str]:
  """Programs of ``data`` (up to ``sample`` per task of ``dags``) whose features, re-derived from their
  steps, differ from the stored ones: one line per program. Empty when the data is current."""
  from minicomp.ir.schedule import Schedule
  from minicomp.search.features import extract_features
  rng, out = np.random.default_rng(seed), []
  for task, dag in dags.items():
    idx = [i for i, t in enumerate(data.tasks) if t == task]
    for i in rng.permutation(idx)[:sample] if idx else []:
      i = int(i)
      now = np.asarray(extract_features(Schedule.from_json(dag, data.steps[i]).lower()), np.float32)
      if now.shape != data.features[i].shape or not np.allclose(now, data.features[i], rtol=1e-5, atol=1e-6):
        out.append(f"{task} program {i}: features {data.features[i].shape} stored, {now.shape} now"
                   + ("" if now.shape != data.features[i].shape else
                      f", max difference {float(np.abs(now - data.features[i]).max()):.3g}"))
  return out


__all__ = ["PretrainData", "build", "resolve", "shipped", "stale"]
