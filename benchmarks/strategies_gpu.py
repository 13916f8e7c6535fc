"""The strategies benchmark's schedules on a real GPU: does what the static model ranked best run best?

``strategies.py`` compares the five strategies with the static model as the measurer, so its figures are
ESTIMATES. This script takes the programs those runs ended with and times them on a GPU, in three steps:

- ``select`` (here, no GPU): per task, each strategy's final best after each budget (every seed), Gensor's
  first candidate, the rule-based schedule (``compile(schedules="rules")``, with its back-offs where a tile
  breaks a resource limit), and ``--sample`` programs of the memo spread evenly
  over the range of estimates (for the rank correlation of estimate and GPU time on every task). A
  strategy's final best is found in the memo by its cost; where programs tie on the estimate, the first
  one the memo holds stands for all of them. With ``--trials K``, instead: every program of the first K
  measurements of the random and Tuna runs (see ``select_trials``). Writes ``gpu_selection.jsonl.gz``
  (one line per distinct program: its steps, its estimate and the roles it plays).
- ``measure`` (on the GPU): builds every selected program (a process per core), runs it once and checks
  the result against the task's numpy reference, then times it like ``GPUMeasurer`` (CUDA events, the L2
  flushed before each run, the median); writes one JSON line per program to ``--out/gpu_measured.jsonl``
  as it goes, so a run stopped by ``--deadline-s`` keeps what it measured. ``pytorch`` times the same
  operations through PyTorch (cuDNN / cuBLAS, fp32, TF32 off, ``cudnn.benchmark``) the same way.
- ``report`` (anywhere): per task, the GPU time of each strategy's final best (mean over seeds, 95%
  confidence interval) next to what the estimate said, the rule-based schedule, Gensor and PyTorch;
  Spearman's rank correlation of estimate and GPU time over the task's measured programs; the
  geometric means over tasks of final / best as the benchmark's tables give them, estimated and measured;
  and, for a ``--trials`` selection, what each open-loop run keeps after k measurements when the static
  model or the GPU measures.

  python benchmarks/strategies_gpu.py select --budgets 64,256,1024 --sample 24 --selection DIR/gpu_selection.jsonl.gz
  python benchmarks/strategies_gpu.py select --trials 64 --selection DIR2/gpu_selection.jsonl.gz
  python benchmarks/strategies_gpu.py measure --selection DIR/gpu_selection.jsonl.gz --out DIR  # on the GPU machine
  python benchmarks/strategies_gpu.py pytorch --out DIR                                        # on the same machine
  python benchmarks/strategies_gpu.py report --measured DIR --save DIR/report.md
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import strategies as S  # noqa: E402

GPU_OUT = S.OUT / "gpu"            # one folder per GPU measurement: its selection, measurements and report
SELECTION = "gpu_selection.jsonl.gz"    # the programs' steps compress about 20x
MEASURED = "gpu_measured.jsonl"
PYTORCH = "gpu_pytorch.json"
META = "gpu_meta.json"
RTOL = ATOL = 2e-3          # the tolerance of the shared H100 data and of the strategies' tests
ROLE_NAMES = {"rules": "rule-based (no search)", "gensor": "gensor construction (no search)",
              "default": "rule-based (no search)"}     # "default": the rules' name in the first selection files


def compact(steps: str) -> str:
  """Schedule steps (JSON text) without whitespace."""
  return json.dumps(json.loads(steps), separators=(",", ":"))


def digest(steps: str) -> str:
  """A short name of a program: the hash of its steps, whitespace-insensitive."""
  return hashlib.sha1(compact(steps).encode()).hexdigest()[:12]


# Stages the ONNX-node tasks (Conv3d, ConvTranspose) were named by before 2026-11-30, as the programs timed on
# 2026-11-27 name them, and their names now: their steps replay after the rename (digests keep the old text).
STAGE_RENAMES = (("ConvTranspose_0_", "convtranspose_"), ("Conv_0_", "conv_"))


def replayable(steps: str) -> str:
  """``steps`` with the stages renamed since they were recorded (:data:`STAGE_RENAMES`)."""
  for old, new in STAGE_RENAMES: steps = steps.replace(f'"{old}', f'"{new}')
  return steps


def _smoke(task: str) -> bool: return task in S.tasks(smoke=True)


def dag_of(task: str):
  """The ComputeDAG of a benchmark task (the CI smoke tasks too)."""
  return S.task_dag(task, _smoke(task))


def workload_of(task: str):
  return S.tasks(_smoke(task))[task][1]()


# --------------------------------------------------------------------------------------------- select
def evenly(items: list, k: int) -> list:
  """``k`` items of a sorted list at evenly spaced ranks, both ends included (all of them when k >= len)."""
  if k >= len(items): return list(items)
  if k == 1: return [items[0]]
  return [items[round(i * (len(items) - 1) / (k - 1))] for i in range(k)]


def select(out: Path, names: list[str], budgets: list[int], sample: int, target: str, per_round: int,
           estimate=None, extra_memos=()) -> list[dict]:
  """The programs to time, one dict per distinct (task, program): ``task``, ``steps``, ``estimate``
  (seconds), ``roles`` (``[strategy, seed, budget]`` lists; ``sample``, ``gensor``, ``rules``).
  ``estimate(task, steps)`` gives the estimate of a program the memo lacks (default: the static model).
  ``extra_memos`` are other memo files searched for a final best the benchmark's memo lacks (a run made
  with another ``--out``); the sample is drawn from the benchmark's memo alone."""
  memo = S.MemoMeasurer(out / f"measured_{target}.jsonl", None).memo
  by_cost: dict[tuple[str, float], str] = {}
  for m in [memo] + [S.MemoMeasurer(Path(p), None).memo for p in extra_memos]:
    for (task, steps), (cost, _) in m.items():
      if cost is not None: by_cost.setdefault((task, cost), steps)
  longest: dict[tuple, dict] = {}       # the benchmark's rule: a budget-B result is the first B of the longest run
  for r in S.load_runs(out, target, per_round):
    k = (r["task"], r["strategy"], r["seed"])
    if k not in longest or r["budget"] > longest[k]["budget"]: longest[k] = r
  runs = list(longest.values())
  progs: dict[tuple[str, str], dict] = {}
  missing: list[str] = []

  def add(task: str, steps: str, est: float | None, role) -> None:
    p = progs.setdefault((task, digest(steps)), {"task": task, "steps": compact(steps), "estimate": est, "roles": []})
    if role not in p["roles"]: p["roles"].append(role)

  for t in names:
    for r in runs:
      if r["task"] != t: continue
      if r["strategy"] == "gensor":
        c = r["costs"][0]
        if c is not None and (t, c) in by_cost: add(t, by_cost[(t, c)], c, "gensor")
        continue
      for b in budgets:
        if r["budget"] < b: continue
        c = min((x for x in r["costs"][:b] if x is not None), default=None)
        if c is None: continue
        if (t, c) not in by_cost:
          missing.append(f"{t} {r['strategy']} s{r['seed']} @{b}")
          continue
        add(t, by_cost[(t, c)], c, [r["strategy"], r["seed"], b])
    ok = sorted((c, s) for (task, s), (c, _) in memo.items() if task == t and c is not None)
    for c, s in evenly(ok, sample): add(t, s, c, "sample")
    steps = rules_schedule(t, target)
    cost = memo.get((t, steps), (None,))[0]
    add(t, steps, cost if cost is not None else (estimate or _estimate)(t, steps), "rules")
  if missing:
    print(f"# {len(missing)} final bests are not in the memo (runs made with another memo), left out: "
          + ", ".join(missing), file=sys.stderr)
  return list(progs.values())


OPEN_LOOP = ("random", "tuna")   # strategies whose proposals do not depend on what was measured (within a budget)


def select_trials(out: Path, names: list[str], strategies: list[str], seeds: int, trials: int, target: str,
                  per_round: int) -> list[dict]:
  """Every program the first ``trials`` measurements of each seed's run proposed, in order, for the
  strategies whose proposals ignore the measurements (random; Tuna, whose archive lasts that long):
  timed on a GPU, they tell what the same run with the GPU as its measurer would have kept. The runs
  are re-made through the memo (the static model is deterministic, so that is cheap) to get their
  steps; a re-made run whose costs differ from the saved run's is reported. Roles are
  ``["trial", strategy, seed, position]``."""
  import types

  from minicomp.search.measure import StaticMeasurer
  args = types.SimpleNamespace(target=target, per_round=per_round, smoke=any(_smoke(t) for t in names))
  bad = [st for st in strategies if st not in OPEN_LOOP]
  if bad: raise ValueError(f"{', '.join(bad)} adapt(s) to the measurements: their trials cannot be replayed")
  progs: dict[tuple[str, str], dict] = {}
  runs = S.load_runs(out, target, per_round)
  with StaticMeasurer() as inner:
    meas = S.MemoMeasurer(out / f"measured_{target}.jsonl", inner)
    for t in names:
      for st in strategies:
        for seed in range(seeds):
          hist = _history(t, st, seed, trials, args, meas)
          saved = max((r for r in runs if (r["task"], r["strategy"], r["seed"]) == (t, st, seed)),
                      key=lambda r: r["budget"], default=None)
          if saved is not None and saved["costs"][:trials] != [c for _, c in hist][:len(saved["costs"][:trials])]:
            print(f"# {t} {st} seed {seed}: the re-made run differs from the saved one", file=sys.stderr)
          for pos, (steps, cost) in enumerate(hist):
            p = progs.setdefault((t, digest(steps)), {"task": t, "steps": compact(steps), "estimate": cost, "roles": []})
            p["roles"].append(["trial", st, seed, pos])
  return list(progs.values())


def _history(task: str, strategy: str, seed: int, trials: int, args, meas) -> list[tuple[str, float | None]]:
  """(steps, estimate) of each measurement of one run, in order (``strategies.run_one``'s run)."""
  tt, strat = S.prepare_run(task, dag_of(task), strategy, seed, args, meas)
  S.tune_run(tt, strat, seed, trials, args, meas)
  return list(tt.history)


def rules_schedule(task: str, target: str) -> str:
  """The steps of the rule-based schedule ``compile`` builds for the task without search, with the
  compiler's back-offs where a tile breaks a resource limit of ``target``."""
  from minicomp.codegen.kernel import Builds
  from minicomp.compiler import build_rule_based
  from minicomp.target import as_target
  return build_rule_based(dag_of(task), Builds(as_target(target)), "rules", task)[1].to_json()


def _estimate(task: str, steps: str) -> float | None:
  from minicomp.search.measure import MeasureInput, StaticMeasurer
  with StaticMeasurer(workers=1) as m:
    (r,) = m.measure([MeasureInput(dag_of(task), steps, "h100", key=task)])
  return r.cost_s


# -------------------------------------------------------------------------------------------- measure
def measure(selection: list[dict], out: Path, deadline_s: float, min_total_s: float, max_repeats: int,
            workers: int | None = None, executor=None) -> int:
  """Build, check and time every selected program on the GPU; one JSON line per program in
  ``out/gpu_measured.jsonl`` (appended as each finishes; programs that file holds already are skipped,
  so a run cut by its deadline resumes). Builds run in ``executor`` (default: a spawn process per core).
  Returns how many were timed."""
  import concurrent.futures as cf
  import multiprocessing as mp

  import numpy as np

  import minicomp as mc
  from minicomp.codegen.gpu_runtime import GpuModule, run_plan, time_plan
  from minicomp.ir.ops import NP_DTYPE
  from minicomp.search.measure import MeasureInput, build_plain
  t0 = time.perf_counter()
  out.mkdir(parents=True, exist_ok=True)
  (out / META).write_text(json.dumps({"gpu": mc.gpu_status(), "date": time.strftime("%Y-%m-%d"),
                                      "programs": len(selection), "min_total_s": min_total_s,
                                      "max_repeats": max_repeats}))
  from minicomp.codegen.driver import get_driver
  drv = get_driver()
  if drv.info().compute_capability[0] != 9:      # the benchmark's programs are built for the h100 target
    raise SystemExit(f"strategies_gpu.py measure: the programs are built for sm_90 (the benchmark's h100 "
                     f"target); this GPU is {drv.info().name} ({drv.info().arch}): use an H100 or H200")
  ex = executor or cf.ProcessPoolExecutor(workers or os.cpu_count(), mp_context=mp.get_context("spawn"))
  have = {m["i"] for m in read_jsonl(out / MEASURED)} if (out / MEASURED).exists() else set()
  todo = [i for i in range(len(selection)) if i not in have]     # a folder measured before: resumed
  if have: print(f"# {len(have)} programs measured before in {out}: {len(todo)} to go", flush=True)
  futs = [ex.submit(build_plain, MeasureInput(dag_of(selection[i]["task"]), replayable(selection[i]["steps"]),
                                              "h100", key=selection[i]["task"])) for i in todo]
  refs: dict[str, tuple[dict, np.ndarray]] = {}
  done = 0
  with (out / MEASURED).open("a") as f:
    for n_seen, (i, fut) in enumerate(zip(todo, futs), 1):
      p = selection[i]
      if time.perf_counter() - t0 > deadline_s:
        print(f"# deadline: stopped after {done} of {len(todo)} programs", flush=True)
        break
      t = p["task"]
      if t not in refs:
        wl = workload_of(t)
        by_name = dict(zip((x.name for x in wl.inputs), wl.random_inputs(0)))
        refs[t] = (by_name, np.asarray(wl.reference(*[by_name[x.name] for x in wl.inputs]), np.float32))
      by_name, want = refs[t]
      row = {"i": i, "task": t, "digest": digest(p["steps"])}
      try:
        try:
          plan, _, binary, _ = fut.result(timeout=max(1.0, deadline_s - (time.perf_counter() - t0)))
        except cf.TimeoutError:           # the deadline came while this program was building
          print(f"# deadline: stopped after {done} of {len(todo)} programs", flush=True)
          break
        mod = GpuModule(binary, drv)
        args = [by_name[b.name] for b in plan.inputs]
        (ob,) = plan.outputs
        got = np.empty(ob.shape, NP_DTYPE[ob.dtype])
        run_plan(mod, plan, args, [got])
        row["max_err"] = float(np.max(np.abs(got - want.reshape(got.shape))))
        row["correct"] = bool(np.allclose(got, want.reshape(got.shape), rtol=RTOL, atol=ATOL))
        ts = time_plan(mod, plan, args, min_total_s, max_repeats)
        row.update(median_s=float(np.median(ts)), min_s=float(min(ts)), repeats=len(ts))
        done += 1
      except Exception as e:       # one program's failure is recorded, the run goes on
        row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
      f.write(json.dumps(row) + "\n")
      f.flush()
      if n_seen % 50 == 0:
        print(f"# {n_seen}/{len(todo)} programs, {time.perf_counter() - t0:.0f} s", flush=True)
  if executor is None: ex.shutdown(wait=False, cancel_futures=True)
  return done


TORCH_OPS = {   # task -> (input shapes, the operation)
  "conv3x3": ([(1, 64, 56, 56), (64, 64, 3, 3)], lambda F, x, w: F.conv2d(x, w, padding=1)),
  "conv512": ([(1, 512, 7, 7), (512, 512, 3, 3)], lambda F, x, w: F.conv2d(x, w, padding=1)),
  "depthwise": ([(1, 32, 112, 112), (32, 1, 3, 3)], lambda F, x, w: F.conv2d(x, w, padding=1, groups=32)),
  "matmul": ([(1024, 1024), (1024, 1024)], lambda F, a, b: a @ b),
  "bmm": ([(12, 128, 64), (12, 64, 128)], lambda F, a, b: a @ b),
  "softmax": ([(4096, 1024)], lambda F, x: F.softmax(x, dim=-1)),
  "convT": ([(1, 64, 28, 28), (64, 32, 4, 4)], lambda F, x, w: F.conv_transpose2d(x, w, stride=2, padding=1)),
  "conv3d": ([(1, 32, 8, 28, 28), (32, 32, 3, 3, 3)], lambda F, x, w: F.conv3d(x, w, padding=1)),
}


def pytorch(names: list[str], out: Path, min_total_s: float, max_repeats: int) -> dict:
  """Seconds per task through PyTorch on the GPU, timed like the programs (events, L2 flushed, median)."""
  import statistics

  import torch
  import torch.nn.functional as F
  torch.backends.cudnn.benchmark = True
  torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
  flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
  g = torch.Generator(device="cuda").manual_seed(0)
  res = {"_gpu": torch.cuda.get_device_name(), "_torch": torch.__version__}
  for t in names:
    shapes, op = TORCH_OPS[t]
    xs = [torch.randn(s, device="cuda", generator=g) for s in shapes]
    for _ in range(3): op(F, *xs)           # cudnn.benchmark picks its algorithm here
    torch.cuda.synchronize()
    ts: list[float] = []
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    while len(ts) < max_repeats and (sum(ts) < min_total_s or len(ts) < 3):
      flush.zero_()
      a.record()
      op(F, *xs)
      b.record()
      b.synchronize()
      ts.append(a.elapsed_time(b) / 1e3)
    res[t] = statistics.median(ts)
  (out / PYTORCH).write_text(json.dumps(res))
  return res


# --------------------------------------------------------------------------------------------- report
def report(selection: list[dict], measured: list[dict], torch_s: dict, meta: dict, descr: dict,
           header: list[str]) -> str:
  """The markdown report: per task a table of roles, and the summary over tasks."""
  from static_model_fidelity import spearman      # ties share their mean rank (not at import: it needs islpy)
  by_i = {}
  for m in measured:
    p = selection[m["i"]]
    if m["digest"] != digest(p["steps"]) or m["task"] != p["task"]:
      raise ValueError(f"measured line {m['i']} does not match the selection (another selection file?)")
    by_i[m["i"]] = m
  wrong = [m for m in measured if m.get("correct") is False]
  failed = [m for m in measured if "error" in m]
  gpu = meta.get("gpu", "?")
  L = header + ["", f"GPU: {gpu}, {meta.get('date', '?')}. `us` = measured on that GPU (median of timed runs, L2 "
                f"flushed); `us*` = the static model's ESTIMATE (h100) that the benchmark ranked by.", "",
                f"{len(measured)} of {len(selection)} selected programs measured; {len(wrong)} gave a wrong result "
                f"(rtol = atol = {RTOL}), {len(failed)} failed to build or run."]
  for m in (wrong + failed)[:10]:
    L.append(f"- {m['task']} #{m['i']}: {m.get('error') or 'max abs error %.3g' % m['max_err']}")
  summary: dict[tuple[str, int], dict[str, dict[str, float]]] = {}   # (strategy, budget) -> kind -> task -> ratio
  corr_rows = []
  tasks = list(dict.fromkeys(p["task"] for p in selection))
  for t in tasks:
    idx = [i for i, p in enumerate(selection) if p["task"] == t and i in by_i and "median_s" in by_i[i]
           and by_i[i]["correct"]]
    if not idx: continue
    real = {i: by_i[i]["median_s"] for i in idx}
    est = {i: selection[i]["estimate"] for i in idx}
    best_real, best_est = min(real.values()), min(e for e in est.values() if e is not None)
    pairs = [(est[i], real[i]) for i in idx if est[i] is not None]
    rho = spearman([a for a, _ in pairs], [b for _, b in pairs])
    top_est = min((i for i in idx if est[i] is not None), key=lambda i: (est[i], real[i]))
    corr_rows.append(f"| {t} | {len(pairs)} | {rho:.2f} | {real[top_est] * 1e6:.1f} | {best_real * 1e6:.1f} | "
                     f"{real[top_est] / best_real:.2f} |")
    groups: dict[str, list[int]] = {}     # a program that was the final best of several seeds counts once per seed
    for i in idx:
      for role in selection[i]["roles"]:
        if isinstance(role, list):
          if role[0] != "trial": groups.setdefault(f"{role[0]} @{role[2]}", []).append(i)
        elif role != "sample": groups.setdefault(ROLE_NAMES[role], []).append(i)
    if not groups: continue               # a selection of whole runs (--trials): their own section below
    L += ["", f"### {t}: {descr.get(t, t)}", "",
          "| program | n | GPU us (mean ± 95% CI) | GPU / best measured | estimate us* | estimate / best estimate |",
          "|---|---:|---:|---:|---:|---:|"]
    for g in sorted(groups, key=lambda g: ("@" not in g, int(g.split("@")[1]) if "@" in g else 0, g)):
      ii = groups[g]
      rs, es = [real[i] * 1e6 for i in ii], [est[i] * 1e6 for i in ii if est[i] is not None]
      m, h = S.mean_ci(rs)
      L.append(f"| {g} | {len(ii)} | {m:.1f}" + (f" ± {h:.1f}" if h else "") +
               f" | {S.geomean([r / (best_real * 1e6) for r in rs]):.2f} | "
               + (f"{S.geomean(es):.1f} | {S.geomean([e / (best_est * 1e6) for e in es]):.2f} |" if es else "- | - |"))
      if "@" in g and es:
        s = summary.setdefault((g.split(" @")[0], int(g.split("@")[1])), {"real": {}, "est": {}})
        s["real"][t] = S.geomean([r / (best_real * 1e6) for r in rs])
        s["est"][t] = S.geomean([e / (best_est * 1e6) for e in es])
    if t in torch_s:
      L.append(f"| PyTorch ({torch_s.get('_torch', '?')}) | 1 | {torch_s[t] * 1e6:.1f} | "
               f"{torch_s[t] / best_real:.2f} | - | - |")
  L += trials_section(selection, by_i, torch_s)
  L += ["", "### Does the estimate rank the programs as the GPU does?", "",
        "Over each task's measured programs (whatever the selection holds: final bests, Gensor, the rule-based "
        "schedule and an evenly spread sample, or whole runs): "
        "Spearman's rho of estimate and GPU time, and the GPU time of the program the estimate ranks first "
        "against the fastest one measured (programs tied on the estimate: the fastest of them).", "",
        "| task | programs | Spearman rho | GPU us of the estimate's best | fastest measured us | ratio |",
        "|---|---:|---:|---:|---:|---:|"] + corr_rows
  if not summary: return "\n".join(L)
  L += ["", "### final / best over tasks (geometric mean), estimated and measured", "",
        "`estimate` is the benchmark's own view (best = the best estimate among these programs); `GPU` the "
        "same programs timed (best = the fastest program measured for the task). The last two columns are "
        "over the tasks where each of the five strategies has a final best at that budget.", "",
        "| strategy | budget | tasks | estimate | GPU | common tasks | estimate there | GPU there |",
        "|---|---:|---:|---:|---:|---:|---:|---:|"]
  for (s, b), v in sorted(summary.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    common = [t for t in v["real"] if all(t in summary.get((x, b), {"real": {}})["real"] for x in S.STRATEGIES)]
    there = (f"{len(common)} | {S.geomean([v['est'][t] for t in common]):.2f} | "
             f"{S.geomean([v['real'][t] for t in common]):.2f}" if common else "0 | - | -")
    L.append(f"| {s} | {b} | {len(v['real'])} | {S.geomean(list(v['est'].values())):.2f} | "
             f"{S.geomean(list(v['real'].values())):.2f} | {there} |")
  return "\n".join(L)


def reproducibility(a: list[dict], b: list[dict]) -> str:
  """One line: the programs timed in both of two measurements (by task and digest), and the spread of
  their ratio of times (median, 10th-90th percentile, extremes)."""
  ta = {(m["task"], m["digest"]): m["median_s"] for m in a if "median_s" in m}
  r = sorted(m["median_s"] / ta[(m["task"], m["digest"])] for m in b
             if "median_s" in m and (m["task"], m["digest"]) in ta)
  if not r: return "no program was timed in both measurements"
  q = lambda f: r[min(len(r) - 1, int(f * len(r)))]   # noqa: E731
  return (f"{len(r)} programs timed in both measurements: ratio of times median {q(0.5):.3f}, "
          f"10th-90th percentile {q(0.1):.3f}-{q(0.9):.3f}, extremes {r[0]:.2f}-{r[-1]:.2f}")


def trials_section(selection: list[dict], by_i: dict, torch_s: dict, ks=(1, 4, 16, 64)) -> list[str]:
  """For every run whose every program was timed (``select --trials``): the GPU time of the program the
  run keeps after k measurements when the measurer is the static model (the lowest estimate) and when it
  is the GPU (the fastest), mean over seeds; and the geometric means over tasks against PyTorch."""
  runs: dict[tuple[str, str, int], dict[int, int]] = {}
  for i, p in enumerate(selection):
    for role in p["roles"]:
      if isinstance(role, list) and role[0] == "trial": runs.setdefault((p["task"], role[1], role[2]), {})[role[3]] = i
  if not runs: return []
  ok = lambda i: i in by_i and by_i[i].get("correct") and "median_s" in by_i[i]   # noqa: E731
  cells: dict[tuple[str, str], dict[tuple[str, int], list[float]]] = {}
  for (t, st, seed), pos in sorted(runs.items()):
    order = [pos[k] for k in sorted(pos)]
    for k in ks:
      if len(order) < k or any(i not in by_i for i in order[:k]): continue    # not every program timed
      first = [i for i in order[:k] if ok(i) and selection[i]["estimate"] is not None]
      if not first: continue
      by_est = min(first, key=lambda i: selection[i]["estimate"])
      c = cells.setdefault((t, st), {})
      c.setdefault(("static", k), []).append(by_i[by_est]["median_s"])
      c.setdefault(("gpu", k), []).append(min(by_i[i]["median_s"] for i in first))
  L = ["", "### The open-loop runs with the GPU as the measurer", "",
       "Random sampling and Tuna propose the same programs whatever measures them, so timing every program "
       "of their runs tells what each run keeps after k measurements: `static` = the program with the lowest "
       "estimate (the benchmark's runs), `GPU` = the fastest on the GPU (the same run with `measurer=\"gpu\"`). "
       "GPU us, mean over seeds.", "",
       "| task | strategy | seeds | " + " | ".join(f"static @{k} | GPU @{k}" for k in ks) + " | PyTorch |",
       "|---|---|---:|" + "---:|---:|" * len(ks) + "---:|"]
  ratios: dict[tuple[str, str, int], list[float]] = {}
  for (t, st), c in cells.items():
    row = f"| {t} | {st} | {len(c.get(('gpu', ks[0]), []))} |"
    for k in ks:
      for kind in ("static", "gpu"):
        v = c.get((kind, k))
        row += f" {sum(v) / len(v) * 1e6:.1f} |" if v else " - |"
        if v and t in torch_s: ratios.setdefault((st, kind, k), []).append(sum(v) / len(v) / torch_s[t])
    L.append(row + (f" {torch_s[t] * 1e6:.1f} |" if t in torch_s else " - |"))
  if ratios:      # over the tasks every strategy and measurer has a value for at every k
    tasks = [t for t in dict.fromkeys(t for t, _ in cells) if t in torch_s
             and all(cells.get((t, st), {}).get((kind, k)) for st in {s for _, s in cells} for kind in ("static", "gpu")
                     for k in ks)]
    ratios = {}
    for (t, st), c in cells.items():
      if t not in tasks: continue
      for k in ks:
        for kind in ("static", "gpu"):
          v = c[(kind, k)]
          ratios.setdefault((st, kind, k), []).append(sum(v) / len(v) / torch_s[t])
  if ratios:
    L += ["", f"Geometric mean over {', '.join(tasks)} (every strategy's runs timed whole) of the mean GPU time "
          "over PyTorch's; below 1 is faster than PyTorch:", "",
          "| strategy | measurer | " + " | ".join(f"@{k}" for k in ks) + " |", "|---|---|" + "---:|" * len(ks)]
    for st in sorted({k[0] for k in ratios}):
      for kind in ("static", "gpu"):
        L.append(f"| {st} | {kind} | " + " | ".join(
          f"{S.geomean(ratios[(st, kind, k)]):.2f}" if (st, kind, k) in ratios else "-" for k in ks) + " |")
  return L


def read_jsonl(path: Path) -> list[dict]:
  """The JSON lines of ``path``, gzip-compressed when its name ends in ``.gz``."""
  text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
  return [json.loads(ln) for ln in text.splitlines() if ln.strip()]


def write_jsonl(path: Path, rows: list[dict]) -> None:
  text = "".join(json.dumps(r) + "\n" for r in rows)
  path.write_bytes(gzip.compress(text.encode(), mtime=0) if path.suffix == ".gz" else text.encode())


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  sub = ap.add_subparsers(dest="cmd", required=True)
  a_sel = sub.add_parser("select", help="choose the programs to time (no GPU)")
  a_sel.add_argument("--budgets", default="64,256")
  a_sel.add_argument("--sample", type=int, default=24, help="memo programs per task spread over the estimates")
  a_sel.add_argument("--tasks", default=None)
  a_sel.add_argument("--memo", action="append", default=[], help="another memo to look final bests up in")
  a_sel.add_argument("--trials", type=int, default=0,
                     help="instead of the final bests: every program of the first TRIALS measurements of each "
                          "seed's random and Tuna runs (see --trial-strategies)")
  a_sel.add_argument("--trial-strategies", default=",".join(OPEN_LOOP))
  a_sel.add_argument("--seeds", type=int, default=5, help="with --trials: seeds per strategy")
  for p in (a_meas := sub.add_parser("measure", help="time the selection on this machine's GPU"),
            a_pt := sub.add_parser("pytorch", help="time the tasks through PyTorch on this machine's GPU")):
    p.add_argument("--out", type=Path, required=True, help="folder for the measurements")
    p.add_argument("--min-total-s", type=float, default=0.02, help="kernel seconds to time each program for")
    p.add_argument("--max-repeats", type=int, default=50)
  a_meas.add_argument("--deadline-s", type=float, default=420.0, help="stop starting new programs after this")
  a_meas.add_argument("--workers", type=int, default=None)
  a_pt.add_argument("--tasks", default=None)
  a_rep = sub.add_parser("report", help="the tables from a measure (and pytorch) folder")
  a_rep.add_argument("--measured", type=Path, required=True)
  a_rep.add_argument("--save", type=Path, default=None, help="write the report here too")
  a_rep.add_argument("--also", type=Path, default=None,
                     help="another measure folder: how far the times of the programs both timed agree")
  a_sel.add_argument("--selection", type=Path, default=GPU_OUT / SELECTION, help="where to write the selection")
  a_meas.add_argument("--selection", type=Path, required=True, help="the selection to time")
  a_rep.add_argument("--selection", type=Path, default=None, help=f"default: the measure folder's {SELECTION}")
  a_sel.add_argument("--out", type=Path, default=S.OUT, help="the strategies benchmark's folder (runs and memo)")
  args = ap.parse_args(argv)
  from provenance import header_lines
  if args.cmd == "select":
    names = args.tasks.split(",") if args.tasks else list(S.tasks())
    known = {**S.tasks(), **S.tasks(smoke=True)}
    unknown = [n for n in names if n not in known]
    if unknown: ap.error(f"unknown task(s) {unknown}; known: {', '.join(known)}")
    try: budgets = sorted({int(b) for b in args.budgets.split(",")})
    except ValueError: ap.error(f"--budgets must be comma-separated integers, got {args.budgets!r}")
    if not (args.out / "measured_h100.jsonl").exists():
      ap.error(f"{args.out / 'measured_h100.jsonl'} is missing: run benchmarks/strategies.py first (its memo "
               "maps each run's costs to programs)")
    if args.trials:
      sel = select_trials(args.out, names, args.trial_strategies.split(","), args.seeds, args.trials, "h100", 16)
    else:
      sel = select(args.out, names, budgets, args.sample, "h100", 16, extra_memos=args.memo)
    args.selection.parent.mkdir(parents=True, exist_ok=True)
    write_jsonl(args.selection, sel)
    per = {t: sum(p["task"] == t for p in sel) for t in names}
    print(f"{len(sel)} programs -> {args.selection}: " + ", ".join(f"{t} {n}" for t, n in per.items()))
    return 0
  if args.cmd in ("measure", "pytorch"):
    import minicomp as mc
    if not mc.gpu_available():
      print(f"strategies_gpu.py {args.cmd}: no GPU here ({mc.gpu_status()}); run it on a machine with one",
            file=sys.stderr)
      return 2
    args.out.mkdir(parents=True, exist_ok=True)
    if args.cmd == "pytorch":
      names = args.tasks.split(",") if args.tasks else list(TORCH_OPS)
      if any(n not in TORCH_OPS for n in names): ap.error(f"--tasks: known to pytorch: {', '.join(TORCH_OPS)}")
      print(json.dumps(pytorch(names, args.out, args.min_total_s, args.max_repeats)))
      return 0
    n = measure(read_jsonl(args.selection), args.out, args.deadline_s, args.min_total_s, args.max_repeats,
                args.workers)
    print(f"# timed {n} programs -> {args.out / MEASURED}")
    return 0
  d = args.measured
  sel = read_jsonl(args.selection or d / SELECTION)
  torch_s = json.loads((d / PYTORCH).read_text()) if (d / PYTORCH).exists() else {}
  meta = json.loads((d / META).read_text()) if (d / META).exists() else {}
  measured = read_jsonl(d / MEASURED)
  descr = {k: v[0] for k, v in {**S.tasks(), **S.tasks(smoke=True)}.items()}
  text = report(sel, measured, torch_s, meta, descr, header_lines(__file__, argv))
  if args.also:
    text += f"\n\nRun to run (this folder against {args.also}): " + reproducibility(
      read_jsonl(args.also / MEASURED), measured)
  print(text)
  if args.save: args.save.write_text(text + "\n")
  return 0


if __name__ == "__main__":
  sys.exit(main())
