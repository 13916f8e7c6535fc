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
  name: str = ""                    # from the records (ops and output shape); the key's head for older logs

  @property
  def kept_s(self) -> float | None:
    """What compile applies: the better of the default schedule and the best trial."""
    known = [x for x in (self.best_s, self.default_s) if x is not None]
    return min(known) if known else None

  @property
  def why(self) -> str:
    """Which schedule ``compile`` keeps for the task, and why."""
    if self.default_s is None: return "best trial (no default measured)" if self.best_s is not None else "nothing valid"
    if self.trials == 0: return "default: no trials"
    if self.best_s is None: return "default: every trial failed"
    if self.best_s < self.default_s: return "tuned"
    return "default: faster than every trial"


def summarize(records: list[Record]) -> list[TaskSummary]:
  from minicomp.search.tune import DEFAULT
  out: dict[tuple[str, str], TaskSummary] = {}
  for r in records:
    k = (r.workload_key, r.target)
    s = out.setdefault(k, TaskSummary(r.workload_key, r.target, 0, 0, None, r.is_estimate, ""))
    s.name = s.name or r.task
    if r.strategy == DEFAULT:
      if r.ok: s.default_s = r.cost_s
      continue
    s.trials += 1
    s.strategy = s.strategy or r.strategy
    if not r.ok: s.failed += 1
    elif s.best_s is None or r.cost_s < s.best_s: s.best_s = r.cost_s
  return list(out.values())


def total_curve(records: list[Record]) -> list[tuple[int, float, float]]:
  """(trials, seconds since the first trial, kept total) at the start and after each trial record: the kept
  total is the sum over every task of the log of the better of its default and its best trial so far (each
  task once), so it never rises. Points before every task has a value (a task with neither a default record
  nor a valid trial yet) are left out: a partial sum is not a total."""
  from minicomp.search.tune import DEFAULT
  keys = list(dict.fromkeys((r.workload_key, r.target) for r in records))
  kept: dict[tuple[str, str], float | None] = dict.fromkeys(keys)
  for r in records:
    if r.strategy == DEFAULT and r.ok: kept[(r.workload_key, r.target)] = r.cost_s
  trials = [r for r in records if r.strategy != DEFAULT]
  t0 = trials[0].timestamp if trials else 0.0
  pts = [(0, 0.0, sum(kept.values()))] if all(v is not None for v in kept.values()) else []
  for n, r in enumerate(trials, 1):
    k = (r.workload_key, r.target)
    if r.ok and (kept[k] is None or r.cost_s < kept[k]): kept[k] = r.cost_s
    if all(v is not None for v in kept.values()): pts.append((n, r.timestamp - t0, sum(kept.values())))
  return pts


def default_total(rows: list[TaskSummary]) -> float | None:
  """The sum of the tasks' default-schedule costs (each task once; ``rows`` from :func:`summarize`), or None
  when a task has none."""
  return sum(r.default_s for r in rows) if rows and all(r.default_s is not None for r in rows) else None


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
           + (" (costs from the static model: ESTIMATES, not GPU measurements)" if est else "")]
  head = ("task", "workload key", "target", "trials", "failed", "default (us)", "best trial (us)", "kept (us)",
          "kept", "strategy")
  table = [(r.name or "-", r.workload_key[:12], r.target, str(r.trials), str(r.failed), us(r.default_s), us(r.best_s),
            us(r.kept_s), r.why, r.strategy) for r in rows]
  w = [max(len(h), *(len(t[i]) for t in table)) for i, h in enumerate(head)]
  lines.append("  ".join(h.ljust(w[i]) for i, h in enumerate(head)))
  lines.append("  ".join("-" * x for x in w))
  lines += ["  ".join(c.ljust(w[i]) for i, c in enumerate(t)).rstrip() for t in table]
  total = sum(r.kept_s for r in rows if r.kept_s is not None)
  base = default_total(rows)
  tuned = sum(r.why == "tuned" for r in rows)
  lines.append(f"sum of per-task kept latencies (each task once): {total * 1e6:.2f} us" + (" (estimate)" if est else "")
               + (f"; defaults {base * 1e6:.2f} us, {tuned} of {len(rows)} tasks tuned ({base / total:.3f}x)"
                  if base is not None and total > 0 else ""))
  return "\n".join(lines)


def plot_curve(path: str, png: str) -> str:
  """Write the tuning curve to ``png``: the kept total (every task once, the better of its default and its best
  trial so far) against trials and against seconds, with the defaults' total as a line."""
  try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
  except ImportError as e:
    raise ReportError("writing a PNG needs matplotlib: pip install 'minicomp[plot]'") from e
  import os
  records = load_records(path, missing_ok=False)
  pts = total_curve(records)
  if not pts: raise ReportError(f"{path}: no point where every task has a valid program; nothing to plot")
  est = any(r.is_estimate for r in records)
  rows = summarize(records)
  base = default_total(rows)
  fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
  for ax, xi, xlabel in ((axes[0], 0, "trials"), (axes[1], 1, "seconds of tuning")):
    ax.plot([p[xi] for p in pts], [p[2] * 1e6 for p in pts], drawstyle="steps-post", label="kept (tuned or default)")
    if base is not None: ax.axhline(base * 1e6, color="grey", linestyle="--", label="defaults (trials=0)")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("sum over tasks (us)" + (", estimate" if est else ""))
    ax.ticklabel_format(axis="y", useOffset=False, style="plain")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right", fontsize=8)
  tuned = sum(r.why == "tuned" for r in rows)
  fig.suptitle(f"{os.path.basename(path)}: {len(rows)} tasks (each once), {len(pts) - 1 if pts[0][0] == 0 else len(pts)} "
               f"trials plotted, {tuned} tuned" + (" -- static-model estimates, no GPU" if est else " -- GPU measurements"),
               fontsize=10)
  fig.tight_layout(rect=(0, 0, 1, 0.94))
  fig.savefig(png, dpi=100)
  plt.close(fig)
  return png
