"""Where the strategies' programs sit in OpEvo's space: does a run look around what it found?

Reads the strategies benchmark's memo (``results/strategies/measured_h100.jsonl``: the programs the runs
measured, with their static-model costs) and its saved runs; builds nothing and measures nothing. Each
program is read back as a point of OpEvo's space (``opevo_space.Space.recover``) and found from a run's
cost (the runs save costs, not programs; several programs may share a cost: a tie at the model's
resolution). The memo lacks some runs' programs (it was started afresh at some point; the runs' costs
are still the measurer's, re-measuring gives them again): such a program is "not in the memo".

Four tables, a row per task and strategy (or run):

* **finals**: for each run at ``--budget``, its final program: its cost over the task's best (the best
  any selected run found, as in the strategies report), how many parameters differ from the best
  program and how many walk steps apart they are (the sum over parameters of their distance on OpEvo's
  graphs), its one-step neighbours (``Space.neighbours``), how many of them are valid (lowered and
  checked: ``make_candidate``), how many any run measured, and how many of those are better. Where
  several programs share the final (or the best) cost, the distance is the nearest pair's and the
  neighbourhood is not given (which of them the run measured, its costs do not say).
* **locality**: for each strategy, every measured program after the run's first round against the
  nearest program (fewest parameters apart) its own run had measured before it: the share 1, 2, 3 and
  4 or more parameters apart (a program whose cost other programs share is left out). A model-free
  evolution that refines what it found shows many 1s. With OpEvo's runs, the walk steps its mutations
  took per walk (``stats``: steps / (mutations + remutations)).
* **parents**: a run's 8 best programs (OpEvo's parents, whichever strategy ran) after a quarter, half
  and all of the budget: the median number of parameters two of them differ in, and their costs'
  spread (worst / best; fitness-proportional recombination draws each parameter from them in that
  ratio at most). One task at a time: "movable params" counts its sketch's parameters with more than
  one value.
* **landscape**: a row per task. How rare good programs are: the share of random sampling's programs
  (every saved random run, its longest budget per seed) within 1.5, 2, 3 and 5x of the task's best.
  What a program's cost says about where it is: the fitness-distance correlation (Jones and Forrest),
  over every memo program in the best program's sketch, of its log cost over the best against its walk
  steps to the nearest best program (high: the closer, the cheaper, which an evolution follows). How
  alike one-step neighbours are: the correlation of log cost over the pairs of memo programs one walk
  step apart (low: a rugged landscape). And where OpEvo's runs ended (median final / best). The memo's
  programs are the ones the searches chose, not a uniform sample: its correlations describe the
  regions the strategies visited.

    python research/opevo_neighbourhood.py --budget 1024 --save research/results/opevo_neighbourhood/b1024.md

Reproduces exactly only with the memo the runs were made with (gitignored, 0.7 GB).
"""
from __future__ import annotations

import argparse
import collections
import itertools
import json
import math
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent / "benchmarks"   # strategies.py, provenance.py and their results
sys.path[:0] = [str(HERE), str(BENCH)]
import strategies as S  # noqa: E402

LOCAL_STRATEGIES = ("random", "ansor", "felix", "tuna", "opevo", "opevo-pre", "opevo-one", "opevo-p2")


def load_memo(path: Path, task: str) -> dict[str, float]:
  """steps -> cost of the task's programs the memo holds a cost for."""
  tag, out = f'"task": "{task}"', {}
  with path.open() as f:
    for ln in f:
      if tag not in ln[:60]: continue
      try: r = json.loads(ln)
      except json.JSONDecodeError: continue         # a torn last line
      if r.get("task") == task and r.get("cost"): out[r["steps"]] = r["cost"]
  return out


def _walk_distances(par, x) -> dict:
  """Walk steps from value ``x`` to every value of the parameter's graph that it reaches (breadth-first
  over its neighbours)."""
  dist, frontier = {x: 0}, [x]
  while frontier:
    nxt = []
    for v in frontier:
      for w in par.neighbours(v):
        if w not in dist: dist[w] = dist[v] + 1; nxt.append(w)
    frontier = nxt
  return dist


class Placed:
  """The task's memo programs as points of OpEvo's space, looked up by cost."""

  def __init__(self, task: str, memo: dict[str, float], target: str = "h100"):
    from minicomp.search.strategies.base import TuneTask
    from minicomp.search.strategies.opevo.space import Space
    from minicomp.target import as_target
    dag = S.task_dag(task)
    self.task = TuneTask(task, dag, as_target(target), 1, dag.flop_count(), "", task)
    self.space = Space(self.task.sketches)
    self.by_cost: dict[float, list[str]] = collections.defaultdict(list)
    for steps, c in memo.items(): self.by_cost[c].append(steps)
    self._points: dict[str, object] = {}
    self._dist: dict[tuple[int, object], dict] = {}      # (id of a parameter of self.space, value) -> distances
    self.cost_of_point: dict[tuple, float] = {}
    for steps, c in memo.items():
      p = self.point(steps)
      if p is not None: self.cost_of_point[p.key] = c

  def point(self, steps: str):
    if steps not in self._points: self._points[steps] = self.space.recover(steps)
    return self._points[steps]

  def at_cost(self, cost: float | None):
    """The point of the one program with this cost (None: no such program, a tie, or not in OpEvo's space)."""
    progs = self.by_cost.get(cost, []) if cost else []
    return self.point(progs[0]) if len(progs) == 1 else None

  def all_at_cost(self, cost: float | None) -> list:
    """The points of every program with this cost (a tie: the model cannot tell them apart)."""
    pts = [self.point(s) for s in (self.by_cost.get(cost, []) if cost else [])]
    return [p for p in pts if p is not None]

  def vector(self, p) -> tuple:
    return (p.sketch_index,) + tuple(par.get(p.values, p.unroll) for par in self.space.params[p.sketch_index])

  def apart(self, p, q) -> tuple[int, int] | None:
    """(parameters that differ, walk steps between them); None across sketches."""
    if p.sketch_index != q.sketch_index: return None
    pars = self.space.params[p.sketch_index]
    xs = [(par, par.get(p.values, p.unroll), par.get(q.values, q.unroll)) for par in pars]
    return sum(x != y for _, x, y in xs), sum(self.steps_apart(par, x, y) for par, x, y in xs)

  def distances(self, par, x) -> dict:
    """Walk steps from value ``x`` of ``par`` (a parameter of this space) to every value it reaches."""
    k = (id(par), x)
    if k not in self._dist: self._dist[k] = _walk_distances(par, x)
    return self._dist[k]

  def steps_apart(self, par, x, y) -> int:
    d = self.distances(par, x).get(y)
    if d is None: raise ValueError(f"{y} is not reachable from {x}")
    return d

  def neighbourhood(self, p, cost: float) -> tuple[int, int, int, int]:
    """(neighbours, valid ones, measured ones, better ones) of the point ``p``."""
    from minicomp.search.annotate import make_candidate
    nbrs = self.space.neighbours(p)
    valid = sum(make_candidate(self.task.sketches[q.sketch_index], q.values, q.unroll, self.task.target,
                               q.sketch_index)[0] is not None for q in nbrs)
    costs = [self.cost_of_point[q.key] for q in nbrs if q.key in self.cost_of_point]
    return len(nbrs), valid, len(costs), sum(c < cost for c in costs)


def finals_rows(pl: Placed, by: dict, task: str, budget: int, strategies: list[str]) -> list[str]:
  best = S.task_best(by, task, budget)
  best_ps = pl.all_at_cost(best)
  rows = []
  for s in strategies:
    for seed, r in sorted(by.get((task, s), {}).items()):
      final = min((c for c in r["costs"][:budget] if c is not None), default=None)
      ps = pl.all_at_cost(final)
      head = f"| {task} | {s} | {seed} | " + (f"{final * 1e6:.2f} ({final / best:.2f}x)" if final else "failed")
      if not ps:
        why = "" if not final else " | outside OpEvo's space" if final in pl.by_cost else " | not in the memo"
        rows.append(head + (why or " |") + " | | | | | |"); continue
      aparts = [a for p in ps for b in best_ps for a in [pl.apart(p, b)] if a is not None]
      ap = min(aparts, key=lambda a: (a[1], a[0])) if aparts else None
      where = f" | {len(ps)} | " + (f"{ap[0]} / {ap[1]}" if ap else "other sketch")
      if len(ps) > 1:                    # which of the tied programs the run measured, its costs do not say
        rows.append(head + where + " | a tie | | | |"); continue
      n, valid, meas, better = pl.neighbourhood(ps[0], final)
      rows.append(head + where + f" | {n} | {valid} | {meas} | {better} |")
  return rows


def locality_row(pl: Placed, by: dict, task: str, budget: int, s: str, per_round: int) -> str | None:
  hist, placed, unplaced, walk = collections.Counter(), 0, 0, []
  for r in by.get((task, s), {}).values():
    seen: list[tuple] = []
    for i, c in enumerate(r["costs"][:budget]):
      p = pl.at_cost(c)
      if p is None:
        unplaced += 1; continue
      v = pl.vector(p)
      if i >= per_round and seen:
        d = min(sum(a != b for a, b in zip(v[1:], w[1:])) if v[0] == w[0] else len(v) for w in seen)
        hist[min(d, 4)] += 1; placed += 1
      seen.append(v)
    st = r.get("stats", {})
    if s.startswith("opevo") and st.get("mutations"): walk.append(st["steps"] / (st["mutations"] + st["remutations"]))
  if not placed: return None
  share = " | ".join(f"{hist[k] / placed:.2f}" for k in (1, 2, 3, 4))
  steps = f"{statistics.median(walk):.1f}" if walk else ""
  return f"| {task} | {s} | {len(by[(task, s)])} | {placed} | {unplaced} | {share} | {steps} |"


def parents_row(pl: Placed, by: dict, task: str, budget: int, s: str, parents: int = 8) -> str | None:
  """How far apart a run's ``parents`` best programs are after a quarter, a half and all of ``budget``
  (median over the placed pairs, then over seeds), and how far their costs spread (worst / best)."""
  cells = []
  for n in (budget // 4, budget // 2, budget):
    apart, spread = [], []
    for r in by.get((task, s), {}).values():
      top = sorted(c for c in r["costs"][:n] if c is not None)[:parents]
      if not top: continue
      spread.append(top[-1] / top[0])
      ps = [p for p in (pl.at_cost(c) for c in top) if p is not None]
      d = [a[0] for x, y in itertools.combinations(ps, 2) for a in [pl.apart(x, y)] if a is not None]
      if d: apart.append(statistics.median(d))
    if not spread: return None
    cells.append((f"{statistics.median(apart):.1f}" if apart else "?") + f" | {statistics.median(spread):.2f}")
  movable = max(sum(par.size > 1 for par in ps) for ps in pl.space.params)
  return f"| {task} | {s} | {movable} | " + " | ".join(cells) + " |"


def _pearson(xs, ys) -> float | None:
  import numpy as np
  if len(xs) < 3 or np.std(xs) == 0 or np.std(ys) == 0: return None
  return float(np.corrcoef(xs, ys)[0, 1])


def random_costs(runs: list[dict], task: str) -> list[float]:
  """Every cost random sampling measured on ``task`` among the saved ``runs``: the longest run of each
  seed, whatever its budget (a uniform sample of the sketches' space, as Ansor's sampler draws it)."""
  longest: dict[int, dict] = {}
  for r in runs:
    if r["task"] == task and r["strategy"] == "random" and r["budget"] > longest.get(r["seed"], {}).get("budget", 0):
      longest[r["seed"]] = r
  return [c for r in longest.values() for c in r["costs"] if c is not None]


LANDSCAPE_RATIOS = (1.5, 2.0, 3.0, 5.0)


def landscape_row(pl: Placed, by: dict, task: str, budget: int, randoms: list[float]) -> str:
  """How rare good programs are (random sampling's programs within 1.5-5x of the task's best), how much
  a program's cost says about its distance from the best (fitness-distance correlation over every
  memo program in the best's sketch: log cost over the best against walk steps to the nearest best
  program), how alike one-step neighbours are (correlation of log cost over the pairs of memo programs
  one walk step apart), and where OpEvo's runs ended (median final / best over seeds)."""
  best = S.task_best(by, task, budget)
  cells = [f"{len(randoms)}"]
  cells += [f"{100 * sum(c <= q * best for c in randoms) / len(randoms):.2f}%" if randoms and best else ""
            for q in LANDSCAPE_RATIOS]
  pts = {}
  for steps, p in pl._points.items():
    if p is not None and p.key in pl.cost_of_point: pts[p.key] = p
  best_ps = pl.all_at_cost(best)
  tables = [(b.sketch_index, [(par, pl.distances(par, par.get(b.values, b.unroll)))
                              for par in pl.space.params[b.sketch_index]]) for b in best_ps]
  ds, cs = [], []
  for k, p in pts.items():
    d = [sum(dist.get(par.get(p.values, p.unroll), 10 ** 6) for par, dist in t) for sk, t in tables
         if sk == p.sketch_index]
    if d and min(d) < 10 ** 6: ds.append(min(d)); cs.append(math.log(pl.cost_of_point[k] / best))
  a, b = [], []
  for k, p in pts.items():
    for q in pl.space.neighbours(p):
      if q.key in pl.cost_of_point and k < q.key:
        x, y = math.log(pl.cost_of_point[k]), math.log(pl.cost_of_point[q.key])
        a += [x, y]; b += [y, x]
  fdc, r1 = _pearson(ds, cs), _pearson(a, b)
  cells += [f"{len(ds)}", f"{fdc:.2f}" if fdc is not None else "", f"{len(a) // 2}", f"{r1:.2f}" if r1 is not None else ""]
  finals = [min((c for c in r["costs"][:budget] if c is not None), default=None) for r in by.get((task, "opevo"), {}).values()]
  finals = [c / best for c in finals if c]
  cells.append(f"{statistics.median(finals):.2f}x ({len(finals)})" if finals else "")
  return f"| {task} | " + " | ".join(cells) + " |"


def report(memo_path: Path, runs_dir: Path, tasks: list[str], strategies: list[str], budget: int,
           target: str = "h100", per_round: int = 16) -> list[str]:
  runs = S.load_runs(runs_dir, target, per_round)
  by = S.select_runs(runs, budget)
  finals = [f"### The runs' final programs at budget {budget} and their neighbourhoods", "",
            "| task | strategy | seed | final us* (/ best) | programs at that cost | params / walk steps from the best "
            "| neighbours | valid | measured | better |", "|---|---|---:|---|---:|---|---:|---:|---:|---:|"]
  local = [f"### Locality at budget {budget}: each program against the nearest its run measured before", "",
           "| task | strategy | seeds | programs placed | not placed (ties, outside the space, or not in the memo) | 1 param | 2 | 3 | 4+ "
           "| walk steps per walk (median over seeds) |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
  q = [budget // 4, budget // 2, budget]
  parents = [f"### The 8 best programs of a run (OpEvo's parents) after {q[0]}, {q[1]} and {q[2]} measurements", "",
             "| task | strategy | movable params | " + " | ".join(f"params apart @{n} | cost spread @{n}" for n in q)
             + " |", "|---|---|---:|" + "---:|" * 6]
  land = [f"### The landscape at budget {budget}: how rare good programs are, and what cost says about distance", "",
          "| task | random programs | " + " | ".join(f"within {q:g}x of the best" for q in LANDSCAPE_RATIOS)
          + " | memo programs in the best's sketch | fitness-distance correlation | neighbour pairs measured "
          "| neighbours' log-cost correlation | OpEvo final / best (seeds) |", "|---|" + "---:|" * 10]
  for task in tasks:
    pl = Placed(task, load_memo(memo_path, task), target)
    land.append(landscape_row(pl, by, task, budget, random_costs(runs, task)))
    finals += finals_rows(pl, by, task, budget, strategies)
    for s in strategies:
      row = locality_row(pl, by, task, budget, s, per_round)
      if row: local.append(row)
      row = parents_row(pl, by, task, budget, s)
      if row: parents.append(row)
  return finals + [""] + local + [""] + parents + [""] + land + ["", "* us*: the static model's ESTIMATE, not measured on a GPU"]


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--budget", type=int, default=1024)
  ap.add_argument("--tasks", default="convT,conv3d,conv3x3,conv512,matmul,bmm,depthwise")
  ap.add_argument("--strategies", default=",".join(LOCAL_STRATEGIES))
  ap.add_argument("--memo", type=Path, default=S.OUT / "measured_h100.jsonl")
  ap.add_argument("--runs", type=Path, default=S.OUT, help="the folder that holds runs/")
  ap.add_argument("--save", type=Path, help="also write the tables (with the command) here")
  args = ap.parse_args(argv)
  if not args.memo.exists(): ap.error(f"no memo at {args.memo} (the strategies benchmark writes it)")
  tasks = [t for t in args.tasks.split(",") if t]
  unknown = [t for t in tasks if t not in S.tasks()]
  if unknown: ap.error(f"unknown tasks {unknown}; known: {', '.join(S.tasks())}")
  lines = report(args.memo, args.runs, tasks, [s for s in args.strategies.split(",") if s], args.budget)
  print("\n".join(lines))
  if args.save:
    cmd = "python research/opevo_neighbourhood.py " + " ".join(argv if argv is not None else sys.argv[1:])
    args.save.parent.mkdir(parents=True, exist_ok=True)
    args.save.write_text("\n".join([f"`{cmd}`", ""] + lines) + "\n")
  return 0


if __name__ == "__main__":
  sys.exit(main())
