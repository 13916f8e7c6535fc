"""Five search strategies on equal terms: random, Ansor, Felix, OpEvo and Tuna (and Gensor's construction).

Every strategy tunes each task alone, from several seeds, with the same measurer (the static model:
every latency here is an ESTIMATE, no GPU), the same trial budget and the same measurements per
round. For each task and budget B, "best" is the lowest estimate any run of any strategy found within
its first B measurements; a run reaches X% when its best-so-far is within best / X. Per task and
strategy the table gives the mean over seeds (with a 95% confidence interval, Student's t) of:

- ``meas@X%``: measurements until the run reaches X% (a run that never does counts as B, and the cell
  is marked ``>``);
- ``search s@X%``: the strategy's own seconds until then (proposing and learning, measurement time
  excluded: the measurer is shared, and its cost depends on the machine, not on the strategy; a
  measurement took ``measure s/cand`` seconds here, printed in the header);
- ``final``: the run's best after B measurements over the task's best (1.00 = the best any strategy
  found).

A second table per budget gives each (task, strategy)'s seeds one by one: the range of their final bests,
how many ended at the task's best program, and the measurements they took to come within 1.10x of it and
to reach it.

Gensor's construction (``compile(trials=0)``'s default, no measurement) is the zero-trial point:
its first candidate, measured once, in the ``gensor@0`` row. The last rows are geometric means over
tasks. No strategy reads the budget, so a budget-B result is the first B measurements of the
shortest saved run of at least B measurements of that task, strategy and seed (the same as a run of
budget B made on the same machine: the learned models train in float32 XLA, whose last bits differ
between CPUs, so a longer run made on another machine may differ from its second round on).

Every run is saved in ``--out`` (one JSON file per task, strategy, seed and budget) and is skipped
when it is there already, so a long benchmark can be run in pieces and resumed; the tables and plots
are made from every run in ``--out``. Measurements are memoised per program (the static model is
deterministic) in ``--out/measured.jsonl``.

  python benchmarks/strategies.py                                   # 8 tasks x 5 strategies x 5 seeds, budgets 64,256,1024 (a day)
  python benchmarks/strategies.py --budgets 64 --seeds 5            # the 64-trial table (an hour or two)
  python benchmarks/strategies.py --tasks matmul,softmax --strategies random,tuna --seeds 2 --budgets 64
  python benchmarks/strategies.py --tasks conv3d --strategies random --seeds 5 --first-seed 3   # seeds 3, 4 only
  python benchmarks/strategies.py --report                           # tables and plots from the runs in --out
  python benchmarks/strategies.py --todo --budgets 1024              # the runs still missing, and about how long they take
  python benchmarks/strategies.py --smoke --out /tmp/s               # what CI runs: tiny tasks, 1 seed, budget 8
"""
from __future__ import annotations

import argparse
import gzip
import json
import math
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
LEVELS = (0.90, 0.95, 0.99)
STRATEGIES = ("random", "ansor", "felix", "opevo", "tuna")
# variants run on request (--strategies), reported beside the five: Felix with its cost model pre-trained on
# the static model's labels of the other tasks' programs (Felix pre-trains on TenSet); OpEvo whose offspring
# the learned cost model pre-screens (8 generated per proposed), OpEvo's operators with Ansor's kind of model;
# Felix descending from 32 starts a round (its network-tuning script's setting) instead of the paper's 8;
# OpEvo with one q-random walk per child (walk="one": about one step in all) instead of one per parameter;
# OpEvo with 2 parents (lambda) instead of 8
VARIANTS = ("felix-pre", "opevo-pre", "felix-32", "opevo-one", "opevo-p2")
PRETRAIN_PER_TASK = 256        # programs per other task that felix-pre's model is pre-trained on
OUT = HERE / "results" / "strategies"
# Student's t, 97.5% quantile, by degrees of freedom (a 95% two-sided interval of a mean)
T975 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26, 10: 2.23}


# ---------------------------------------------------------------------------------------------- tasks
def _onnx_workload(name: str, node, x_shape, w, y_shape, reference):
  """The one task of a one-node ONNX model, as the compiler partitions it (ConvTranspose and Conv3d
  come only through the importer), as a Workload: inputs (x, w) in DAG order, a numpy reference."""
  import minicomp
  from minicomp.workloads import Workload
  from onnx import TensorProto, helper, numpy_helper
  g = helper.make_graph([node], name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(y_shape))],
                        [numpy_helper.from_array(w, "w")])
  m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
  (task,) = minicomp.compile(m, target="sm_86", schedules="rules", progress=False).tasks
  ph = list(task.dag.placeholders)
  x = next(p for p in ph if tuple(p.shape) == tuple(x_shape))
  wt = next(p for p in ph if p is not x)
  return Workload(name, [x, wt], list(task.dag.outputs), reference)


def _conv_transpose():
  """DCGAN generator: 28x28x64 -> 56x56x32, kernel 4, stride 2, pad 1."""
  import numpy as np
  from onnx import helper

  def ref(x, w):
    full = np.zeros((1, 32, 58, 58), np.float32)
    for kh in range(4):
      for kw in range(4):
        full[:, :, kh:kh + 55:2, kw:kw + 55:2] += np.einsum("nchw,cf->nfhw", x, w[:, :, kh, kw])
    return full[:, :, 1:57, 1:57]
  node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], pads=[1, 1, 1, 1])
  return _onnx_workload("convT", node, (1, 64, 28, 28), np.zeros((64, 32, 4, 4), np.float32), (1, 32, 56, 56), ref)


def _conv3d():
  """A video model's 3x3x3 convolution, 32 -> 32 channels, 8x28x28, pad 1."""
  import numpy as np
  from onnx import helper

  def ref(x, w):
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1), (1, 1)))
    y = np.zeros((1, 32, 8, 28, 28), np.float32)
    for a in range(3):
      for b in range(3):
        for c in range(3):
          y += np.einsum("ncdhw,fc->nfdhw", xp[:, :, a:a + 8, b:b + 28, c:c + 28], w[:, :, a, b, c])
    return y
  node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1, 1, 1])
  return _onnx_workload("conv3d", node, (1, 32, 8, 28, 28), np.zeros((32, 32, 3, 3, 3), np.float32),
                        (1, 32, 8, 28, 28), ref)


def tasks(smoke: bool = False) -> dict:
  """name -> (description, Workload builder); the task is ``ComputeDAG(workload.outputs)``."""
  from minicomp import workloads as W
  if smoke:
    return {"matmul64": ("matmul 64x64x64", lambda: W.matmul(64, 64, 64)),
            "softmax64": ("softmax 64x256", lambda: W.softmax(64, 256))}
  return {
    "conv3x3": ("conv 3x3, 64->64, 56x56 (ResNet)", lambda: W.conv2d(1, 64, 56, 56, 64, 3, 1, 1)),
    "conv512": ("conv 3x3, 512->512, 7x7 (ResNet)", lambda: W.conv2d(1, 512, 7, 7, 512, 3, 1, 1)),
    "depthwise": ("depthwise 3x3, 32ch, 112x112 (MobileNet)", lambda: W.depthwise_conv2d(1, 32, 112, 112, 3, 1, 1)),
    "matmul": ("matmul 1024^3", lambda: W.matmul(1024, 1024, 1024)),
    "bmm": ("batch matmul 12 x 128x128x64 (attention)", lambda: W.batch_matmul(12, 128, 128, 64)),
    "softmax": ("softmax 4096x1024", lambda: W.softmax(4096, 1024)),
    "convT": ("ConvTranspose 4x4 s2, 64->32, 28->56 (DCGAN)", _conv_transpose),
    "conv3d": ("Conv3d 3x3x3, 32->32, 8x28x28", _conv3d),
  }


_DAGS: dict[tuple[str, bool], object] = {}


def task_dag(name: str, smoke: bool = False):
  """The ComputeDAG of task ``name`` (built once)."""
  from minicomp.ir.dag import ComputeDAG
  if (name, smoke) not in _DAGS: _DAGS[(name, smoke)] = ComputeDAG(tasks(smoke)[name][1]().outputs)
  return _DAGS[(name, smoke)]


# the benchmark's variants: a strategy of the library with other options
VARIANT_OPTIONS = {"opevo-pre": ("opevo", {"prescreen": True}), "opevo-one": ("opevo", {"walk": "one"}),
                   "opevo-p2": ("opevo", {"parents": 2}), "felix-32": ("felix", {"n_seeds": 32})}
# smaller populations with --smoke, so CI stays fast
SMOKE = {"ansor": {"population": 128, "generations": 2}, "felix": {"n_seeds": 4, "n_steps": 20},
         "felix-pre": {"n_seeds": 4, "n_steps": 20}, "felix-32": {"n_steps": 20}}


def make_strategy(name: str, seed: int, smoke: bool, pretrain=None):
  """The strategy with the library's defaults (``minicomp.search.tune.make_strategy``), a variant's options
  (:data:`VARIANT_OPTIONS`) and, with ``smoke``, smaller populations (:data:`SMOKE`). ``felix-pre``: Felix whose cost
  model starts trained on ``pretrain()`` (a PretrainData: the other tasks' programs)."""
  from minicomp.search.tune import make_strategy as library
  base, options = VARIANT_OPTIONS.get(name, (name, {}))
  options = {**options, **(SMOKE.get(name, {}) if smoke else {})}
  if name == "felix-pre":
    strat = library("felix", seed, pretrain=pretrain(), **options)   # its rows stay in every retraining
    strat.model  # noqa: B018 -- trained on the pre-training data now, before the clock starts
    return strat
  return library(base, seed, **options)


# ------------------------------------------------------------------------------------------ measuring
class MemoMeasurer:
  """The static measurer, memoised per (task, program) in a JSON-lines file: the static model is
  deterministic, so a program another run measured already costs nothing. A timeout (a build that took
  over the measurer's limit, as happens on a loaded machine) is written but not read back. Counts the seconds spent
  measuring (``spent``), so a run can subtract them from its wall time."""
  is_estimate = True

  def __init__(self, path: Path, inner):
    self.path, self.inner, self.spent, self.fresh = path, inner, 0.0, 0
    self.memo: dict[tuple[str, str], tuple[float | None, str]] = {}   # (task, steps) -> (cost, error kind)
    if path.exists():
      for ln in path.read_text().splitlines():
        try: r = json.loads(ln)
        except json.JSONDecodeError: continue       # a torn last line
        if r.get("error") == "timeout": continue    # the machine's load, not the program's: measured again
        self.memo[(r["task"], r["steps"])] = (r["cost"], r.get("error", "none"))

  def measure_iter(self, inputs):
    from minicomp.search.measure import ErrorKind, MeasureResult, measure_iter
    t0 = time.perf_counter()
    todo = [i for i, inp in enumerate(inputs) if (inp.key, inp.steps_json) not in self.memo]
    if todo:
      with self.path.open("a") as f:
        for j, r in measure_iter(self.inner, [inputs[i] for i in todo]):
          inp = inputs[todo[j]]
          self.memo[(inp.key, inp.steps_json)] = (r.cost_s if r.ok else None, r.error.value)
          f.write(json.dumps({"task": inp.key, "steps": inp.steps_json, "cost": r.cost_s if r.ok else None,
                              "error": r.error.value}) + "\n")
          f.flush()         # one write per line: runs in parallel processes append whole lines to one memo
      self.fresh += len(todo)
    self.spent += time.perf_counter() - t0
    for i, inp in enumerate(inputs):
      cost, err = self.memo[(inp.key, inp.steps_json)]
      yield i, MeasureResult(cost, ErrorKind(err), "" if cost is not None else "failed (memoised)", True)

  @property
  def seconds_per_measurement(self) -> float | None:
    """Wall seconds per fresh measurement here (the measurer's workers in parallel)."""
    return self.spent / self.fresh if self.fresh else None

  def measure(self, inputs):
    out = [None] * len(inputs)
    for i, r in self.measure_iter(inputs): out[i] = r
    return out


# --------------------------------------------------------------------------------------------- a run
def prepare_run(task: str, dag, strategy: str, seed: int, args, meas) -> tuple:
  """The task (sketches generated) and the strategy (felix-pre's model pre-trained) of one run, made
  before its clock starts: the same for every strategy. ``tune_run`` tunes them."""
  from minicomp.search.strategies.base import TuneTask
  from minicomp.target import as_target
  tt = TuneTask(f"{task}", dag, as_target(args.target), 1, dag.flop_count(), "", task)
  tt.sketches  # noqa: B018 -- generates them
  return tt, make_strategy(strategy, seed, args.smoke, lambda: pretrain_data(meas, task, args))


def tune_run(tt, strat, seed: int, budget: int, args, meas, on_round=None):
  """Tune the one task ``tt`` alone for ``budget`` measurements; its ``history`` then holds each
  measurement's steps and cost, in order."""
  from minicomp.search.task_scheduler import tune
  return tune([tt], strat, meas, budget, seed=seed, measures_per_round=args.per_round, on_round=on_round)


def run_one(task: str, dag, strategy: str, seed: int, budget: int, args, meas: MemoMeasurer) -> dict:
  """One tuning run of one task: the cost of each measurement, and after each round the measurements
  so far and the strategy's own seconds so far (wall minus measuring)."""
  tt, strat = prepare_run(task, dag, strategy, seed, args, meas)   # before the clock
  rounds = []
  spent0 = meas.spent
  t0 = time.perf_counter()

  def on_round(info):
    rounds.append((info.trials_used, time.perf_counter() - t0 - (meas.spent - spent0)))
  res = tune_run(tt, strat, seed, budget, args, meas, on_round)
  wall = time.perf_counter() - t0
  return {"task": task, "strategy": strategy, "seed": seed, "budget": budget, "target": args.target,
          "per_round": args.per_round, "costs": [c for _, c in tt.history], "rounds": rounds,
          "wall_s": wall, "search_s": wall - (meas.spent - spent0), "measured": res.trials,
          "stats": {k: v for k, v in getattr(strat, "stats", {}).items() if isinstance(v, (int, float))}}


_FEATURES: dict[tuple[str, str], object] = {}     # (task, steps) -> features of the lowered program


def pretrain_data(meas: MemoMeasurer, task: str, args):
  """Pre-training data for ``felix-pre`` on ``task``: up to ``PRETRAIN_PER_TASK`` measured programs of
  every *other* task in the memo (a fixed random sample), with their static-model costs."""
  import numpy as np

  from minicomp.ir.schedule import Schedule
  from minicomp.search.features import extract_features
  from minicomp.search.cost_model.pretrain import PretrainData
  builders = tasks(args.smoke)
  by_task: dict[str, list[tuple[str, float | None]]] = {}
  for (t, steps), (cost, _) in sorted(meas.memo.items()):
    if t != task and t in builders: by_task.setdefault(t, []).append((steps, cost))
  rows, rng = [], np.random.default_rng(0)
  for t, progs in by_task.items():
    dag = task_dag(t, args.smoke)
    for i in rng.permutation(len(progs))[:PRETRAIN_PER_TASK]:
      steps, cost = progs[int(i)]
      f = _FEATURES.get((t, steps))
      if f is None:
        try: f = _FEATURES[(t, steps)] = extract_features(Schedule.from_json(dag, steps).lower())
        except Exception:  # noqa: BLE001 -- a program the extractor cannot take is left out
          continue
      rows.append((f, cost, t, steps))
  return PretrainData(*(tuple(col) for col in zip(*rows)), {"labels": "static-model estimates"}) if rows else None


def gensor_point(task: str, dag, args, meas: MemoMeasurer) -> dict:
  """Gensor's construction (no measurement): its first candidate, measured once."""
  from minicomp.search.measure import MeasureInput
  from minicomp.search.strategies.gensor import construct
  from minicomp.target import as_target
  tgt = as_target(args.target)
  t0 = time.perf_counter()
  res = construct(dag, tgt)
  search = time.perf_counter() - t0
  cost = None
  if res.candidates:
    (r,) = meas.measure([MeasureInput(dag, res.candidates[0].key, tgt.device_name or tgt.arch, key=task)])
    cost = r.cost_s if r.ok else None
  return {"task": task, "strategy": "gensor", "seed": 0, "budget": 0, "target": args.target, "costs": [cost],
          "rounds": [(1, search)], "search_s": search, "wall_s": search}


def run_path(out: Path, task: str, strategy: str, seed: int, budget: int, target: str, per_round: int) -> Path:
  """Where a run is saved: gzipped JSON (hundreds of runs are kept in git)."""
  return out / "runs" / f"{target}_r{per_round}_{task}_{strategy}_s{seed}_b{budget}.json.gz"


def write_run(path: Path, run: dict) -> None:
  path.write_bytes(gzip.compress(json.dumps(run).encode(), mtime=0))


def read_run(path: Path) -> dict:
  """A saved run, gzipped (``.json.gz``) or not (``.json``)."""
  data = path.read_bytes()
  return json.loads(gzip.decompress(data) if path.name.endswith(".gz") else data)


def _budget_of(path: Path) -> int:
  return int(path.name.split(".json")[0].rsplit("_b", 1)[1])


# -------------------------------------------------------------------------------------------- report
def best_so_far(costs) -> list[float]:
  best, out = math.inf, []
  for c in costs:
    if c is not None: best = min(best, c)
    out.append(best)
  return out


def reach(run: dict, target_cost: float, budget: int) -> tuple[int | None, float | None]:
  """(measurements, search seconds) until the run's best-so-far is <= target_cost within ``budget``."""
  for n, b in enumerate(best_so_far(run["costs"][:budget]), 1):
    if b <= target_cost:
      for used, s in run["rounds"]:
        if used >= n: return n, s
      return n, run["search_s"]
  return None, None


def search_at(run: dict, n: int) -> float:
  """The run's search seconds by the end of the round that holds its ``n``-th measurement."""
  return next((sec for used, sec in run["rounds"] if used >= n), run["search_s"])


def geomean(xs) -> float:
  return math.exp(sum(math.log(x) for x in xs) / len(xs))


def mean_ci(xs: list[float]) -> tuple[float, float]:
  """Mean and the half-width of its 95% confidence interval (0 for a single value)."""
  n = len(xs)
  m = sum(xs) / n
  if n < 2: return m, 0.0
  sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1))
  return m, T975.get(n - 1, 1.96) * sd / math.sqrt(n)


def _cell(xs: list[float], censored: bool, fmt: str = ".0f") -> str:
  m, h = mean_ci(xs)
  return f"{'>' if censored else ''}{m:{fmt}}" + (f" ± {h:{fmt}}" if h > 0 else "")


def longest_run(out: Path, task: str, strategy: str, seed: int, target: str, per_round: int) -> int:
  """The largest budget of the runs saved for this task, strategy and seed (0: none)."""
  done = run_path(out, task, strategy, seed, 0, target, per_round).name.rsplit("_b", 1)[0]
  return max((_budget_of(p) for p in (out / "runs").glob(f"{done}_b*.json*")), default=0)


def load_runs(out: Path, target: str, per_round: int) -> list[dict]:
  runs = []
  for p in sorted((out / "runs").glob(f"{target}_r{per_round}_*.json*")):
    try: runs.append(read_run(p))
    except (OSError, ValueError, EOFError): continue   # (JSONDecodeError, a damaged gzip)
  return runs


def select_runs(runs: list[dict], budget: int) -> dict[tuple[str, str], dict[int, dict]]:
  """Per (task, strategy), per seed, the shortest saved run that covers ``budget`` (and Gensor's point)."""
  by: dict[tuple[str, str], dict[int, dict]] = {}
  for r in runs:
    if r["strategy"] == "gensor" or r["budget"] >= budget:
      cur = by.setdefault((r["task"], r["strategy"]), {}).get(r["seed"])
      if cur is None or r["budget"] < cur["budget"]: by[(r["task"], r["strategy"])][r["seed"]] = r
  return by


def task_best(by: dict, task: str, budget: int) -> float | None:
  """The lowest cost any selected run of ``task`` measured within ``budget`` (Gensor's point included)."""
  costs = [c for (t, s), seeds in by.items() if t == task for r in seeds.values()
           for c in (r["costs"] if s == "gensor" else r["costs"][:budget]) if c is not None]
  return min(costs, default=None)


def table(runs: list[dict], budget: int, names: list[str], descr: dict) -> tuple[list[str], dict]:
  """The markdown table for one budget, and per (task, strategy) the mean best-so-far curves (for the plot)."""
  by = select_runs(runs, budget)
  strategies = [s for s in STRATEGIES + VARIANTS if any((t, s) in by for t in names)]
  head = ["task", "strategy", "seeds"] + [f"meas@{int(x * 100)}%" for x in LEVELS] \
    + [f"search s@{int(x * 100)}%" for x in LEVELS] + ["final / best"]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * 2 + "---:|" * (len(head) - 2)]
  finals: dict[str, dict[str, float]] = {}     # strategy -> task -> final / best (geometric mean over seeds)
  reach95: dict[str, list[list[int]]] = {}      # strategy -> per task, measurements to 95% per seed
  censored95: set[str] = set()
  curves: dict[tuple[str, str], list[list[float]]] = {}
  bests: dict[str, float] = {}
  for t in names:
    if not any((t, s) in by for s in strategies): continue     # no strategy has run this task at this budget yet
    best = task_best(by, t, budget)
    if best is None: continue
    bests[t] = best
    for s in strategies + ["gensor"]:
      rs = list(by.get((t, s), {}).values())
      if not rs: continue
      cells_n, cells_s = [], []
      for lvl in LEVELS:
        hits = [reach(r, best / lvl, budget if s != "gensor" else 1) for r in rs]
        miss = any(h[0] is None for h in hits)
        if s == "gensor":
          cells_n.append("0" if not miss else "never"); cells_s.append(f"{rs[0]['search_s']:.1f}" if not miss else "")
          continue
        cells_n.append(_cell([h[0] if h[0] is not None else budget for h in hits], miss))
        if lvl == 0.95:
          reach95.setdefault(s, []).append([h[0] if h[0] is not None else budget for h in hits])
          if miss: censored95.add(s)
        cells_s.append(_cell([h[1] if h[1] is not None else search_at(r, budget) for h, r in zip(hits, rs)], miss, ".1f"))
      fin = [best_so_far(r["costs"][:budget] if s != "gensor" else r["costs"])[-1] / best for r in rs]
      finals.setdefault(s, {})[t] = geomean(fin)
      label = "gensor@0" if s == "gensor" else s
      lines.append("| " + " | ".join([t, label, str(len(rs))] + cells_n + cells_s + [_cell(fin, False, ".2f")]) + " |")
      if s != "gensor": curves[(t, s)] = [[c / best for c in best_so_far(r["costs"][:budget])] for r in rs]
      else: curves[(t, s)] = [[fin[0]]]
  # a budget not yet run everywhere: the strategies compared on the tasks that every one of the five (and
  # gensor) has run; a variant run on fewer tasks gets no cell there rather than shrinking the comparison
  five = [s for s in finals if s not in VARIANTS]
  common = [t for t in names if all(t in finals[s] for s in five)]
  lines += ["", f"| strategy | tasks | final / best, geomean over tasks | meas@95%, geomean over tasks | "
            f"final / best on the {len(common)} tasks the five ran |", "|---|---:|---:|---:|---:|"]
  for s in strategies + ["gensor"]:
    if s not in finals: continue
    m95 = ["0" if s == "gensor" else None]
    if s != "gensor":
      per = [sum(m) / len(m) for m in reach95.get(s, [])]
      m95 = [(">" if s in censored95 else "") + f"{geomean(per):.0f}" if per else ""]
    on_common = f"{geomean([finals[s][t] for t in common]):.2f}" if common and all(t in finals[s] for t in common) else ""
    lines.append(f"| {'gensor@0' if s == 'gensor' else s} | {len(finals[s])} | "
                 f"{geomean(finals[s].values()):.2f} | {m95[0]} | {on_common} |")
  lines += efficiency(by, names, strategies, budget)
  return lines, {"curves": curves, "best": bests}


def _spread(ns: list[float], fmt: str = ".0f", median: bool = True) -> str:
  """``lo-hi (median m)`` of some numbers (the median when there are more than two), or the one value."""
  lo, hi = min(ns), max(ns)
  if f"{lo:{fmt}}" == f"{hi:{fmt}}": return f"{lo:{fmt}}"
  return f"{lo:{fmt}}-{hi:{fmt}}" + (f" (median {statistics.median(ns):{fmt}})" if median and len(ns) > 2 else "")


TIE = 1e-3  # two estimates closer than this (relative) are the same cost to the seed table


def seed_table(runs: list[dict], budget: int, names: list[str]) -> list[str]:
  """Per task and strategy, what the seeds did within ``budget``: the range of their final bests (us*, and over
  the task's best), how many ended at the best program, the measurements they took to come within 1.10x of it and
  to reach it (range and median over the seeds that did; ``never`` for the others), and each run's search seconds
  (strategy's own time, measuring excluded). "At the best" means within ``TIE`` of it: the static model's estimates
  of two programs 0.003% apart are a tie, not a ranking."""
  by = select_runs(runs, budget)
  order = {s: i for i, s in enumerate(STRATEGIES + VARIANTS)}
  out = ["", f"Per seed at budget {budget}: final best (us*, and over the task's best), seeds that ended at the best "
         f"program (within {TIE:.1%}: a tie), measurements to come within 1.10x of it and to reach it (range, median "
         f"over the seeds that did), search seconds per run.", "",
         "| task | best us* | strategy | seeds | final us* (/ best) | at the best | meas to 1.10x | meas to the best "
         "| search s |", "|---|---:|---|---:|---|---:|---|---|---|"]
  for t in names:
    best = task_best(by, t, budget)
    if best is None: continue
    for s in sorted((s for (tt, s) in by if tt == t and s in order), key=order.get):
      rs = [by[(t, s)][k] for k in sorted(by[(t, s)])]
      fin = [best_so_far(r["costs"][:budget])[-1] for r in rs]
      ok = [f for f in fin if math.isfinite(f)]
      final = f"{_spread([f * 1e6 for f in ok], '.2f')} ({_spread([f / best for f in ok], '.2f', False)}x)" if ok else "none ran"
      if len(ok) < len(fin): final += f", {len(fin) - len(ok)} with no program"
      cells = []
      for level in (best * 1.10, best * (1 + TIE)):
        ns = [n for n, _ in (reach(r, level, budget) for r in rs) if n is not None]
        cells.append((_spread(ns) if ns else "never") + (f"; {len(rs) - len(ns)} never" if ns and len(ns) < len(rs) else ""))
      at = sum(f <= best * (1 + TIE) for f in ok)
      out.append(f"| {t} | {best * 1e6:.2f} | {s} | {len(rs)} | {final} | {at} | {cells[0]} | {cells[1]} | "
                 f"{_spread([search_at(r, budget) for r in rs])} |")
  return out


def efficiency(by: dict, names: list[str], strategies: list[str], budget: int) -> list[str]:
  """Felix's measure of sample efficiency against Ansor: per task, the measurements Ansor's mean curve (geometric
  mean over seeds of the best-so-far) takes to reach its value at the budget, over the measurements the strategy's
  mean curve takes to reach it; geometric mean over tasks. A curve that does not reach it within the budget
  counts the budget, so its ratio is an upper bound (``<``)."""
  if "ansor" not in strategies: return []

  def mean_curve(rs):
    cs = [best_so_far(r["costs"][:budget]) for r in rs]
    cs = [c + [c[-1]] * (budget - len(c)) for c in cs if c]       # a run that used up the space keeps its best
    if not cs: return [math.inf] * budget                           # no run measured anything
    return [geomean([c[i] for c in cs]) for i in range(budget)]
  ratios: dict[str, list[float]] = {}
  below: set[str] = set()
  for t in names:
    ans = list(by.get((t, "ansor"), {}).values())
    if not ans: continue
    target = mean_curve(ans)[-1] * (1 + 1e-9)
    first = lambda rs: next((i + 1 for i, c in enumerate(mean_curve(rs)) if c <= target), None)   # noqa: E731
    n_ansor = first(ans)
    for s in strategies:
      rs = list(by.get((t, s), {}).values())
      if not rs: continue
      n = first(rs)
      if n is None: below.add(s)
      ratios.setdefault(s, []).append(n_ansor / (n or budget))
  out = ["", f"Sample efficiency against Ansor at budget {budget} (Felix's measure): per task, the measurements "
         f"Ansor's mean curve (geometric mean over seeds) takes to reach its value at {budget}, over those the "
         f"strategy's mean curve takes to reach it; geometric mean over tasks (`<`: on some task it did not within "
         f"{budget}, counted as {budget}).", "",
         "| strategy | tasks | sample efficiency vs Ansor |", "|---|---:|---:|"]
  for s in strategies:
    if s in ratios:
      out.append(f"| {s} | {len(ratios[s])} | {'<' if s in below else ''}{geomean(ratios[s]):.2f} |")
  return out


def missing_runs(out: Path, names: list[str], strategies: list[str], seeds: int, budget: int, target: str,
                 per_round: int) -> list[str]:
  """The runs still missing for ``budget`` (seeds 0..seeds-1), with a rough wall-time estimate per run: the median
  wall of the saved runs of that task and strategy at ``budget``, else at the largest smaller budget scaled by the
  ratio of budgets (fresh NVRTC builds are most of a run; a longer run re-measures its prefix from the memo, so
  the scaled figure is an upper bound)."""
  runs = load_runs(out, target, per_round)
  lines = [f"| task | strategy | seeds to run at {budget} | minutes per run (est.) | minutes |", "|---|---|---|---:|---:|"]
  total, unknown = 0.0, 0
  for t in names:
    for s in strategies:
      missing = [k for k in range(seeds) if longest_run(out, t, s, k, target, per_round) < budget]
      if not missing: continue
      walls: dict[int, list[float]] = {}
      for r in runs:
        if r["task"] == t and r["strategy"] == s and r["budget"] <= budget: walls.setdefault(r["budget"], []).append(r["wall_s"])
      if walls:
        b = max(walls)
        per = sorted(walls[b])[len(walls[b]) // 2] * budget / b / 60
        total += per * len(missing)
        cells = [f"{per:.0f}" + ("" if b == budget else f" (from {b})"), f"{per * len(missing):.0f}"]
      else:
        unknown += len(missing)
        cells = ["?", "?"]
      lines.append(f"| {t} | {s} | {','.join(map(str, missing))} | " + " | ".join(cells) + " |")
  if len(lines) == 2: return [f"every run of budget {budget} is saved in {out}"]
  lines += ["", f"about {total / 60:.1f} run-hours (the saved runs' wall times; most of them ran two at a time on 2 cores)"
            + (f", plus {unknown} runs with no saved run to go by" if unknown else "")]
  return lines


def plot(curves: dict, names: list[str], descr: dict, budget: int, path: Path, title: str) -> None:
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  import numpy as np
  from matplotlib import ticker
  shown = [t for t in names if any(k[0] == t for k in curves)]
  cols = min(4, len(shown)) or 1
  rows = math.ceil(len(shown) / cols)
  fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
  colors = dict(zip(STRATEGIES + VARIANTS, ("tab:gray", "tab:blue", "tab:orange", "tab:green", "tab:red", "tab:brown",
                                           "tab:olive", "tab:purple", "tab:pink", "tab:cyan")))
  for ax, t in zip(axes.flat, shown):
    for s in STRATEGIES + VARIANTS:
      cs = curves.get((t, s))
      if not cs: continue
      n = min(len(c) for c in cs)
      a = np.array([c[:n] for c in cs])
      a = np.where(np.isfinite(a), a, np.nan)
      x = np.arange(1, n + 1)
      ax.plot(x, np.exp(np.nanmean(np.log(a), 0)), color=colors[s], label=s, lw=1.4)
      if len(cs) > 1: ax.fill_between(x, np.nanmin(a, 0), np.nanmax(a, 0), color=colors[s], alpha=0.15, lw=0)
    g = curves.get((t, "gensor"))
    if g and math.isfinite(g[0][0]): ax.axhline(g[0][0], color="black", ls="--", lw=1, label="gensor@0")
    ax.set_xscale("log"); ax.set_yscale("log")
    ax.set_ylim(0.95, None)
    for axis in (ax.xaxis, ax.yaxis):
      axis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
      axis.set_minor_formatter(ticker.NullFormatter())
    ax.set_title(descr.get(t, t), fontsize=8)
    ax.set_xlabel("measurements", fontsize=8); ax.set_ylabel("best / best of all", fontsize=8)
    ax.tick_params(labelsize=7)
  for ax in list(axes.flat)[len(shown):]: ax.axis("off")
  legend: dict = {}                      # every line any panel drew (a variant may run on a few tasks only)
  for ax in axes.flat:
    for h, lab in zip(*ax.get_legend_handles_labels()): legend.setdefault(lab, h)
  axes.flat[0].legend(legend.values(), legend.keys(), fontsize=7)
  fig.suptitle(title, fontsize=9)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


def report(out: Path, names: list[str], descr: dict, budgets: list[int], args, header: list[str],
           measure_s: float | None) -> str:
  runs = load_runs(out, args.target, args.per_round)
  text = []
  for b in budgets:
    lines, data = table(runs, b, names, descr)
    if not data["best"]: continue
    lines += seed_table(runs, b, names)
    png = out / f"strategies_{args.target}_r{args.per_round}_b{b}.png"
    plot(data["curves"], names, descr, b, png,
         f"budget {b}: best-so-far / best of all, geometric mean over seeds (band: min to max)\n"
         f"static-model ESTIMATES for {args.target}, not GPU timings")
    text += [f"### Budget {b} ({args.target}; every latency an ESTIMATE of the static model, no GPU)", "", "```"] + header \
      + ([f"measuring: {measure_s:.2f} wall s per program (static model: NVRTC build + estimate, workers in parallel)"]
         if measure_s else []) + ["```", "", *lines, "",
                                  f"Plot: `{png.relative_to(HERE.parent) if png.is_relative_to(HERE.parent) else png}`", ""]
  md = out / f"strategies_{args.target}_r{args.per_round}.md"
  md.write_text("\n".join(text) + "\n")
  return "\n".join(text)


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--tasks", default=None, help="comma-separated task names (default: all)")
  ap.add_argument("--strategies", default=",".join(STRATEGIES))
  ap.add_argument("--budgets", default="64,256,1024")
  ap.add_argument("--seeds", type=int, default=5)
  ap.add_argument("--first-seed", type=int, default=0,
                  help="run seeds FIRST_SEED..SEEDS-1 only: two processes can share one task and strategy")
  ap.add_argument("--per-round", type=int, default=16,
                  help="measurements per round (16: a budget of 64 is four rounds, so the learned strategies learn)")
  ap.add_argument("--target", default="h100")
  ap.add_argument("--out", type=Path, default=OUT)
  ap.add_argument("--report", action="store_true", help="only make the tables and plots from the runs in --out")
  ap.add_argument("--smoke", action="store_true", help="tiny tasks and strategies (CI)")
  ap.add_argument("--todo", action="store_true",
                  help="only list the runs still missing for the largest budget, with their estimated wall time")
  args = ap.parse_args(argv)
  if args.smoke and args.per_round == 16: args.per_round = 4
  all_tasks = tasks(args.smoke)
  names = args.tasks.split(",") if args.tasks else list(all_tasks)
  unknown = [n for n in names if n not in all_tasks]
  if unknown: ap.error(f"unknown task(s) {unknown}; known: {', '.join(all_tasks)}")
  strategies = args.strategies.split(",")
  bad = [s for s in strategies if s not in STRATEGIES + VARIANTS]
  if bad: ap.error(f"unknown strategies {bad}; known: {', '.join(STRATEGIES + VARIANTS)}")
  try: budgets = sorted({int(b) for b in args.budgets.split(",")})
  except ValueError: ap.error(f"--budgets must be comma-separated integers, got {args.budgets!r}")
  if not budgets or budgets[0] < 1: ap.error("--budgets must be positive")
  if args.seeds < 1: ap.error("--seeds must be at least 1")
  if not 0 <= args.first_seed < args.seeds: ap.error(f"--first-seed must be in 0..{args.seeds - 1}")
  descr = {k: v[0] for k, v in all_tasks.items()}
  (args.out / "runs").mkdir(parents=True, exist_ok=True)
  if args.todo:
    print("\n".join(missing_runs(args.out, names, strategies, args.seeds, budgets[-1], args.target, args.per_round)))
    return 0

  from provenance import header_lines
  header = header_lines(__file__, argv)
  measure_s = None
  if not args.report:
    from minicomp.search.measure import StaticMeasurer
    with StaticMeasurer() as inner:
      meas = MemoMeasurer(args.out / f"measured_{args.target}.jsonl", inner)
      top = budgets[-1]
      for t in names:
        dag = None
        # seed-major: a run stopped part-way leaves every strategy the same seeds
        todo = [(s, seed) for seed in range(args.first_seed, args.seeds) for s in strategies
                if longest_run(args.out, t, s, seed, args.target, args.per_round) < top]
        gpath = run_path(args.out, t, "gensor", 0, 0, args.target, args.per_round)
        if not todo and gpath.exists(): continue
        dag = task_dag(t, args.smoke)
        if not gpath.exists():
          write_run(gpath, gensor_point(t, dag, args, meas))
        for s, seed in todo:
          t0 = time.perf_counter()
          r = run_one(t, dag, s, seed, top, args, meas)
          write_run(run_path(args.out, t, s, seed, top, args.target, args.per_round), r)
          best = min((c for c in r["costs"] if c is not None), default=math.inf)
          print(f"# {t:9s} {s:6s} seed {seed}: best {best * 1e6:9.2f} us* after {len(r['costs'])} measurements, "
                f"search {r['search_s']:.0f} s, wall {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
      measure_s = meas.seconds_per_measurement
  print(report(args.out, names, descr, budgets, args, header, measure_s))
  print("* every latency is an ESTIMATE of the static model, not measured on a GPU")
  return 0


if __name__ == "__main__":
  sys.exit(main())
