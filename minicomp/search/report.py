"""Reports of a tuning log: per-task best latencies and the tuning curve (``minicomp report``).

The log knows tasks by workload key and target only (not how often a task runs in a model),
so the "total" here is the sum of the per-task bests, each task counted once. Costs from the
static model are labelled estimates everywhere they are printed or plotted. Records of default
schedules (strategy ``"default"``, measured once per task so that tuning never makes a task
slower) are shown in their own column and are not trials; a task's "kept" latency is the better
of its default and its best trial, which is what ``compile`` applies.
"""
from __future__ import annotations

from dataclasses import dataclass

from minicomp.errors import ReportError
from minicomp.search.records import Record, load_records


@dataclass
class TaskSummary:
  workload_key: str
  target: str
  trials: int
  failed: int
  best_s: float | None
  is_estimate: bool
  strategy: str
  default_s: float | None = None

  @property
  def kept_s(self) -> float | None:
    """What compile applies: the better of the default schedule and the best trial."""
    known = [x for x in (self.best_s, self.default_s) if x is not None]
    return min(known) if known else None


def summarize(records: list[Record]) -> list[TaskSummary]:
  from minicomp.search.tune import DEFAULT
  out: dict[tuple[str, str], TaskSummary] = {}
  for r in records:
    k = (r.workload_key, r.target)
    s = out.setdefault(k, TaskSummary(r.workload_key, r.target, 0, 0, None, r.is_estimate, ""))
    if r.strategy == DEFAULT:
      if r.ok: s.default_s = r.cost_s
      continue
    s.trials += 1
    s.strategy = s.strategy or r.strategy
    if not r.ok: s.failed += 1
    elif s.best_s is None or r.cost_s < s.best_s: s.best_s = r.cost_s
  return list(out.values())


def total_curve(records: list[Record]) -> list[tuple[int, float, float]]:
  """(trials, seconds since the first record, sum of per-task bests) after each trial record
  (default-schedule records are not trials); only points where every task seen so far has a
  valid program."""
  from minicomp.search.tune import DEFAULT
  records = [r for r in records if r.strategy != DEFAULT]
  best: dict[tuple[str, str], float | None] = {}
  t0 = records[0].timestamp if records else 0.0
  pts = []
  for n, r in enumerate(records, 1):
    k = (r.workload_key, r.target)
    cur = best.get(k)
    if r.ok and (cur is None or r.cost_s < cur): best[k] = r.cost_s
    else: best.setdefault(k, cur)
    if best and all(v is not None for v in best.values()):
      pts.append((n, r.timestamp - t0, sum(best.values())))
  return pts


def text_report(path: str) -> str:
  records = load_records(path, missing_ok=False)
  if not records: raise ReportError(f"{path}: the log holds no records")
  rows = summarize(records)
  est = any(r.is_estimate for r in rows)
  n_trials = sum(r.trials for r in rows)
  n_default = len(records) - n_trials
  us = lambda x: "-" if x is None else f"{x * 1e6:.2f}"
  lines = [f"{path}: {n_trials} records, {len(rows)} tasks"
           + (f" (+ {n_default} default-schedule records)" if n_default else "")
           + (" (costs from the static model: estimates, not GPU measurements)" if est else "")]
  head = ("workload key", "target", "trials", "failed", "best trial (us)" + (" ESTIMATE" if est else ""),
          "default (us)", "kept (us)", "strategy")
  table = [(r.workload_key, r.target, str(r.trials), str(r.failed), us(r.best_s), us(r.default_s), us(r.kept_s),
            r.strategy) for r in rows]
  w = [max(len(h), *(len(t[i]) for t in table)) for i, h in enumerate(head)]
  lines.append("  ".join(h.ljust(w[i]) for i, h in enumerate(head)))
  lines.append("  ".join("-" * x for x in w))
  lines += ["  ".join(c.ljust(w[i]) for i, c in enumerate(t)) for t in table]
  total = sum(r.kept_s for r in rows if r.kept_s is not None)
  lines.append(f"sum of per-task kept latencies (each task once): {total * 1e6:.2f} us" + (" (estimate)" if est else ""))
  return "\n".join(lines)


def plot_curve(path: str, png: str) -> str:
  """Write the tuning curve (sum of per-task bests vs trials and vs seconds) to ``png``."""
  try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
  except ImportError as e:
    raise ReportError("writing a PNG needs matplotlib: pip install 'minicomp[plot]'") from e
  records = load_records(path, missing_ok=False)
  pts = total_curve(records)
  if not pts: raise ReportError(f"{path}: no point where every task has a valid program; nothing to plot")
  est = any(r.is_estimate for r in records)
  ylabel = "sum of per-task best latency (us)" + (", ESTIMATE (static model)" if est else "")
  fig, axes = plt.subplots(1, 2, figsize=(10, 4))
  for ax, xi, xlabel in ((axes[0], 0, "trials"), (axes[1], 1, "seconds")):
    ax.plot([p[xi] for p in pts], [p[2] * 1e6 for p in pts], drawstyle="steps-post")
    ax.set_xlabel(xlabel); ax.set_ylabel(ylabel); ax.grid(alpha=0.3)
    if max(p[2] for p in pts) / max(min(p[2] for p in pts), 1e-30) > 20: ax.set_yscale("log")
  fig.suptitle(f"tuning curve: {path} ({len(records)} records)")
  fig.tight_layout()
  fig.savefig(png, dpi=100)
  plt.close(fig)
  return png
