"""Why the static model's favourites are not the GPU's fastest: its terms against real GPU timings.

``strategies_gpu.py`` timed on an H200 the programs the strategies benchmark ended with (and a sample
spread over each task's estimates): the estimate ranks them well overall (Spearman 0.5-0.9) but its
favourite runs 1.5-1.8x slower than the fastest program on most tasks. This script asks which part of
the static model does that, without a GPU, in two steps:

- ``facts``: every program those folders timed (or, with ``--measured-data``, every record of a
  ``measured.jsonl`` in the format of ``benchmarks/data/h100-2026-11-24``) is built again (sm_90, NVRTC)
  and the static model's analyses run once (``estimate.launch_facts``: PTX instruction counts, ptxas
  registers and occupancy, islpy data movement, the latency chain); the facts are saved, one JSON line
  per program, gzipped (``--facts``), next to the program's GPU time (the median over the folders that
  timed it). Resumes a file written before. A process per core; most of the time is NVRTC.
- ``report``: from the saved facts alone (no build, seconds): the formula of ``static/model.py``
  evaluated on them per task, as it is for an H100 (what the benchmark ranked by) and for the device
  entry of the GPU that timed them (``target.py``'s ``h200`` for the H200: the H100's SMs, clock and L2
  with 4.8 TB/s of HBM3e); what the estimate's ten favourites and the GPU's ten fastest differ in
  (threads, registers, occupancy, the term the model says binds, estimate over GPU time); what the
  estimate's error follows over all programs; and probes: the same formula with one constant or one
  rule changed (``VARIANTS``), scored by Spearman's rho and by the GPU times of the estimate's top five
  over those of the fastest five, with a leave-one-task-out choice among them (choose on the other
  tasks, score on the one left out), which is what a calibration on this data could honestly claim.
  Every latency the model gives is an ESTIMATE; every GPU time names its GPU and date.

  The model is the one minicomp estimates with: since 2026-11-29 the calibrated one for sm_90
  (minicomp/search/static/calibration.py); the saved reports were made before, with the uncalibrated formula,
  which ``MINICOMP_STATIC_MODEL=uncalibrated`` gives back.

  python research/static_top_end.py facts                  # every h200_* folder under results/strategies/gpu
  python research/static_top_end.py report --save research/results/static_top_end/report_h200_2026-11-27.md
  python research/static_top_end.py facts --measured-data benchmarks/data/h100-2026-11-24/measured.jsonl \
      --facts research/results/static_top_end/facts_h100_2026-11-24.jsonl.gz     # the random H100 schedules
  python research/static_top_end.py facts --folders DIR1,DIR2 --facts /tmp/f.jsonl.gz --jobs 2
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import dataclasses
import gzip
import json
import math
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent / "benchmarks"   # strategies.py, provenance.py and their results
sys.path[:0] = [str(HERE), str(BENCH)]

import strategies_gpu as G  # noqa: E402

OUT = HERE / "results" / "static_top_end"
FACTS = OUT / "facts_h200_2026-11-27.jsonl.gz"     # the strategies' programs timed on an H200 (the default)
H100_GPU = "NVIDIA H100 80GB HBM3, 2026-11-24"     # the GPU of benchmarks/data/h100-2026-11-24
TOP = 10            # favourites compared per task
PICK = 5            # the estimate's top-k whose GPU time scores a variant


# ---------------------------------------------------------------------------------------------- facts
def timed_programs(folders: list[Path]) -> dict[tuple[str, str], dict]:
  """(task, digest) -> {"task", "steps", "gpu_s": [median time of each folder that timed it correctly],
  "gpus": {gpu name}}; programs that failed or gave a wrong result anywhere are left out."""
  out: dict[tuple[str, str], dict] = {}
  bad: set[tuple[str, str]] = set()
  for d in folders:
    sel = G.read_jsonl(d / G.SELECTION)
    meta = json.loads((d / G.META).read_text()) if (d / G.META).exists() else {}
    for m in G.read_jsonl(d / G.MEASURED):
      p = sel[m["i"]]
      k = (p["task"], G.digest(p["steps"]))
      if k[1] != m["digest"]: raise ValueError(f"{d}: measured line {m['i']} does not match its selection")
      if not m.get("correct") or "median_s" not in m:
        bad.add(k); continue
      e = out.setdefault(k, {"task": p["task"], "steps": G.compact(p["steps"]), "estimate": p.get("estimate"),
                             "gpu_s": [], "gpus": set(), "call": None})
      e["gpu_s"].append(m["median_s"]); e["gpus"].add(f"{meta.get('gpu', '?')}, {meta.get('date', '?')}")
  return {k: v for k, v in out.items() if k not in bad}


def timed_records(path: Path, gpu: str) -> dict[tuple[str, str], dict]:
  """The same for a ``measured.jsonl`` in the format of ``benchmarks/data/h100-2026-11-24`` (a workload
  call, steps and a median time per line, timed on ``gpu``): its correct records, by workload and digest."""
  from static_model_fidelity import load_measured
  out = {}
  for r in load_measured(path):
    if not r.get("correct", True) or "median_s" not in r: continue
    steps = G.compact(json.dumps(r["steps"]))
    out[(r["workload"], G.digest(steps))] = {"task": r["workload"], "steps": steps, "estimate": None,
                                              "gpu_s": [r["median_s"]], "gpus": {gpu}, "call": r["workload_call"]}
  return out


def facts_of(task: str, steps: str, call: str | None = None) -> list[dict]:
  """The static model's facts of every launch of one program, built for sm_90 as it was timed: a task of
  the strategies benchmark, or (``call``) the workload a ``minicomp.workloads`` call builds."""
  from minicomp.search.measure import MeasureInput, build_candidate
  from minicomp.search.static.estimate import launch_facts
  from minicomp.target import get_device
  if call is None:
    kern = build_candidate(MeasureInput(G.dag_of(task), steps, "h100", key=task))
  else:
    import minicomp as mc
    from minicomp import workloads as W
    kern = mc.build(mc.Schedule.from_json(W.from_call(call).outputs, steps), target="sm_90")
  return [dataclasses.asdict(f) for f in launch_facts(kern, get_device("h100"))]


def _read_facts(path: Path) -> list[dict]:
  return G.read_jsonl(path) if path.exists() else []


def collect(progs: dict[tuple[str, str], dict], path: Path, jobs: int, limit: int = 0) -> int:
  """Compute and save the facts of every timed program (``timed_programs`` / ``timed_records``) that
  ``path`` does not hold yet; returns how many are new. Appends as each finishes (a gzip member per
  line), so a stopped run keeps its work; at the end the file is rewritten as one gzip stream."""
  have = {(r["task"], r["digest"]) for r in _read_facts(path)}
  todo = [k for k in sorted(progs) if k not in have][:limit or None]
  print(f"{len(progs)} timed programs, {len(have)} with facts already, {len(todo)} to do ({jobs} processes)",
        file=sys.stderr)
  t0, done = time.perf_counter(), 0
  ctx = mp.get_context("spawn")     # fresh interpreters: nothing of this process's NVRTC / islpy state
  with cf.ProcessPoolExecutor(jobs, mp_context=ctx) as ex:
    futs = {ex.submit(facts_of, progs[k]["task"], progs[k]["steps"], progs[k]["call"]): k for k in todo}
    for f in cf.as_completed(futs):
      task, dig = futs[f]
      p = progs[(task, dig)]
      row = {"task": task, "digest": dig, "gpu_s": statistics.median(p["gpu_s"]), "gpu": sorted(p["gpus"]),
             "estimate": p["estimate"]}
      try:
        row["facts"] = f.result()
      except Exception as e:  # noqa: BLE001 - a program the model cannot analyse now is reported, not fatal
        row["error"] = f"{type(e).__name__}: {e}"
      with gzip.open(path, "at") as out:
        out.write(json.dumps(row) + "\n")
      done += 1
      if done % 25 == 0 or done == len(todo):
        print(f"[{done}/{len(todo)} {time.perf_counter() - t0:6.0f} s]", file=sys.stderr, flush=True)
  if done: G.write_jsonl(path, _read_facts(path))   # one gzip stream instead of a member per line: 5x smaller
  return done


# --------------------------------------------------------------------------------------------- model
def _own_device(gpu: str) -> str:
  """The device entry of a GPU named in a facts row ("NVIDIA H200 (sm_90, ...), 2026-11-27" -> "h200");
  the sm_90 default where the table has none."""
  from minicomp.target import device_for_gpu
  return device_for_gpu(gpu.split(",")[0], "sm_90") or "h100"


def estimate(facts: list[dict], dev, variant: dict | None = None) -> float:
  """The static model's latency (seconds, an ESTIMATE) of one program from its saved facts on ``dev``,
  with ``variant``'s changes: ``consts`` (module constants of static/model.py), ``scale`` (a fact's field
  multiplied), ``barrier_cycles`` (cycles per warp of the block added to the latency chain at each
  ``__syncthreads``), ``combine="sum"`` (SM time + memory time instead of their maximum), ``sm_norm=p``
  (the SM time a p-norm of its units' times instead of their maximum, the p = infinity norm)."""
  from minicomp.search.static import model as M
  variant = variant or {}
  saved = {k: getattr(M, k) for k in variant.get("consts", {})}
  try:
    for k, v in variant.get("consts", {}).items(): setattr(M, k, v)
    total = 0.0
    for f in facts:
      lf = M.LaunchFacts(**f)
      for field, x in variant.get("scale", {}).items(): lf = dataclasses.replace(lf, **{field: getattr(lf, field) * x})
      if "barrier_cycles" in variant:    # each barrier waits for every warp of the block: a cost per warp
        warps = math.ceil(lf.threads_per_block / dev.warp_size)
        lf = dataclasses.replace(lf, chain_cycles=lf.chain_cycles + variant["barrier_cycles"] * warps
                                 * lf.per_thread.get("bar_sync", 0.0))
      le = M.launch_time(lf, dev)
      if variant.get("combine") == "sum": total += le.sm_s + le.memory_s + M.LAUNCH_OVERHEAD_S
      elif "sm_norm" in variant:     # the SM's units overlap less than perfectly: a p-norm of their times
        q = variant["sm_norm"]
        sm = sum(v ** q for k, v in le.parts.items() if k not in MEMORY_PARTS) ** (1 / q)
        total += max(sm, le.memory_s) + M.LAUNCH_OVERHEAD_S
      else: total += le.latency_s
    return total
  finally:
    for k, v in saved.items(): setattr(M, k, v)


MEMORY_PARTS = ("l2_s", "dram_s", "launch_s")     # the parts of a LaunchEstimate that are not the SM's
VARIANTS = {     # name -> (what changes, the change): one constant or one rule of static/model.py at a time
  "as is": ("the model for an H100, as the benchmark ranked", {}),
  "l2 x0.6": ("L2 -> SM bandwidth 1.5x DRAM instead of 2.5x", {"consts": {"L2_BW_FACTOR": 1.5}}),
  "l2 x1.6": ("L2 -> SM bandwidth 4x DRAM", {"consts": {"L2_BW_FACTOR": 4.0}}),
  "mlp 1": ("1 global load in flight per warp instead of 2 (more warps needed to hide DRAM)",
            {"consts": {"MLP_LOADS_PER_WARP": 1}}),
  "mlp 4": ("4 loads in flight per warp", {"consts": {"MLP_LOADS_PER_WARP": 4}}),
  "issue x1.5": ("an SM issues 2.7 warp instructions a cycle, not 4 (its four schedulers stall)",
                 {"consts": {"SCHEDULERS_PER_SM": 8 / 3}}),
  "issue x2": ("an SM issues 2 warp instructions a cycle", {"consts": {"SCHEDULERS_PER_SM": 2}}),
  "latency x2": ("one warp's latency chain twice as long", {"scale": {"chain_cycles": 2.0}}),
  "latency x0.5": ("the latency chain half as long", {"scale": {"chain_cycles": 0.5}}),
  "l1 x2": ("L1 cycles of global requests doubled", {"scale": {"l1_cycles_per_block": 2.0}}),
  "shared x2": ("shared-memory wavefronts doubled", {"scale": {"shared_wavefronts_per_block": 2.0}}),
  "sum": ("SM time + memory time instead of their maximum (no overlap)", {"combine": "sum"}),
  "sm norm 1": ("the SM's units do not overlap: the SM time is the sum of issue, pipes, shared, L1 and "
                "latency times", {"sm_norm": 1}),
  "sm norm 2": ("they overlap partly: the 2-norm of those times", {"sm_norm": 2}),
  "sm norm 4": ("the 4-norm", {"sm_norm": 4}),
  "barrier 32": ("each __syncthreads adds 32 cycles per warp of the block to the latency chain",
                 {"barrier_cycles": 32}),
  "shared x2, latency x0.5": ("the two best single changes together",
                              {"scale": {"shared_wavefronts_per_block": 2.0, "chain_cycles": 0.5}}),
}


# -------------------------------------------------------------------------------------------- report
def _score(rows: list[dict], est: list[float]) -> dict:
  """Spearman's rho of estimate and GPU time; the GPU time of the estimate's favourite over the fastest
  program's; the GPU times of its PICK favourites over those of the PICK fastest (geometric means: 1.00
  when the estimate's top PICK are the fastest PICK); where the fastest program stands under the estimate."""
  from static_model_fidelity import spearman
  gpu = [r["gpu_s"] for r in rows]
  order = sorted(range(len(rows)), key=lambda i: (est[i], gpu[i]))
  fastest = sorted(gpu)
  gm = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))
  return {"rho": spearman(est, gpu), "pick": gpu[order[0]] / fastest[0],
          "topk": gm([gpu[i] for i in order[:PICK]]) / gm(fastest[:PICK]),
          "rank_fastest": 1 + order.index(min(range(len(rows)), key=lambda i: gpu[i]))}


def _heaviest(facts: list[dict], dev) -> tuple:
  """(its LaunchEstimate, its facts) of a program's longest launch, and the program's estimate."""
  from minicomp.search.static import model as M
  les = [(M.launch_time(M.LaunchFacts(**f), dev), f) for f in facts]
  le, f = max(les, key=lambda x: x[0].latency_s)
  return le, f, sum(x[0].latency_s for x in les)


def _launch_view(facts: list[dict], dev) -> dict:
  """The heaviest launch's shape and the term the model says binds it."""
  le, f, _ = _heaviest(facts, dev)
  return {"threads": f["threads_per_block"], "blocks": f["blocks"], "regs": f["registers"],
          "warps_sm": f["active_warps_per_sm"], "bound": le.bound}


TRACKS = {   # what the estimate's error may follow: a fact of the heaviest launch, or a term's share of it
  "threads": lambda f, le: f["threads_per_block"],
  "registers": lambda f, le: f["registers"],
  "warps/SM": lambda f, le: f["active_warps_per_sm"],
  "FMAs/thread": lambda f, le: f["per_thread"].get("fp32_fma", 0.0),
  "latency share": lambda f, le: le.parts["latency_s"] / le.latency_s,
  "shared share": lambda f, le: le.parts["shared_s"] / le.latency_s,
  "issue share": lambda f, le: le.parts["issue_s"] / le.latency_s,
}


def error_tracks(by_task: dict, dev, min_programs: int = 50) -> list[str]:
  """Per task (with at least ``min_programs``), Spearman's rho between ln(estimate / GPU time) and each of
  ``TRACKS`` over its programs: what the model's error follows."""
  from static_model_fidelity import spearman
  L = ["", "### What the estimate's error follows", "",
       "Spearman's rho, over each task's programs, between ln(estimate / GPU time) and a fact of the program's "
       "heaviest launch (a term's share: that term's time over the launch's estimated time). Positive: the "
       "more of it, the more the model overestimates; negative: the more it underestimates.", "",
       "| task | programs | " + " | ".join(TRACKS) + " |", "|---|---:|" + "---:|" * len(TRACKS)]
  for t, rs in by_task.items():
    if len(rs) < min_programs: continue
    err, cols = [], {k: [] for k in TRACKS}
    for r in rs:
      le, f, total = _heaviest(r["facts"], dev)
      err.append(math.log(total / r["gpu_s"]))
      for k, fn in TRACKS.items(): cols[k].append(fn(f, le))
    L.append(f"| {t} | {len(rs)} | " + " | ".join(f"{spearman(cols[k], err):.2f}" for k in TRACKS) + " |")
  return L


def _med(xs) -> str:
  xs = [x for x in xs if x is not None]
  return f"{statistics.median(xs):.3g}" if xs else "-"


def report(rows: list[dict], header: list[str]) -> str:
  """The markdown report of a facts file's rows (rows whose build failed are left out)."""
  rows = [r for r in rows if "facts" in r]
  tasks = list(dict.fromkeys(r["task"] for r in rows))
  by_task = {t: [r for r in rows if r["task"] == t] for t in tasks}
  from minicomp.target import get_device
  h100 = get_device("h100")
  own = {g: get_device(_own_device(g)) for r in rows for g in r["gpu"]}    # each GPU's own device entry
  gpus = sorted(own)
  L = header + ["", f"GPU times: {'; '.join(gpus)} (median of timed runs, L2 flushed). `us*` and every "
                "estimate: the static model (an ESTIMATE, no GPU).", ""]
  carry = [r for r in rows if r["estimate"] is not None]
  same = sum(1 for r in carry if abs(estimate(r["facts"], h100) - r["estimate"]) <= 1e-6 * r["estimate"])
  L += [f"{len(rows)} programs with facts over {len(tasks)} tasks"
        + (f"; the formula re-evaluated on the saved facts gives the benchmark's own estimate for {same} of the "
           f"{len(carry)} that carry one" + (" (the rest: the model changed since they were estimated)" if same < len(carry)
                                              else "") + "." if carry else "."), "",
        "### The estimate against the GPU, per task", "",
        f"rho: Spearman's rank correlation of estimate and GPU time; pick: GPU time of the estimate's favourite "
        f"over the fastest program's; top{PICK}: the GPU times of its {PICK} favourites over those of the {PICK} "
        f"fastest programs (geometric means; 1.00: its top {PICK} are the fastest {PICK}); rank: where the fastest program stands under the estimate. `own`: the same facts on the device entry of "
        f"the GPU that timed them (" + ", ".join(f"{d.name} for the {g.split(' (')[0].split(',')[0]}: "
        f"{d.dram_bandwidth_gbs:g} GB/s" for g, d in own.items()) + f"; the h100's {h100.dram_bandwidth_gbs:g}).", "",
        f"| task | programs | rho h100 | pick | top{PICK} | rank of fastest | rho own | pick | top{PICK} |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
  for t, rs in by_task.items():
    a = _score(rs, [estimate(r["facts"], h100) for r in rs])
    b = _score(rs, [estimate(r["facts"], own[r["gpu"][0]]) for r in rs])
    L.append(f"| {t} | {len(rs)} | {a['rho']:.2f} | {a['pick']:.2f} | {a['topk']:.2f} | {a['rank_fastest']} | "
             f"{b['rho']:.2f} | {b['pick']:.2f} | {b['topk']:.2f} |")

  L += ["", f"### The estimate's {TOP} favourites against the GPU's {TOP} fastest", "",
        "Medians over each group (the heaviest launch of each program). est/GPU: estimate (h100) over GPU time "
        "(below 1: the model thinks the program faster than it ran); bound: the term the model says sets its time "
        "(count in the group).", "",
        "| task | group | GPU us | est us* | est/GPU | threads | blocks | registers | warps/SM | bound |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
  for t, rs in by_task.items():
    est = {id(r): estimate(r["facts"], h100) for r in rs}
    groups = {"estimate's": sorted(rs, key=lambda r: (est[id(r)], r["gpu_s"]))[:TOP],
              "GPU's": sorted(rs, key=lambda r: r["gpu_s"])[:TOP]}
    for g, grp in groups.items():
      v = [_launch_view(r["facts"], h100) for r in grp]
      bounds = {}
      for x in v: bounds[x["bound"]] = bounds.get(x["bound"], 0) + 1
      L.append(f"| {t} | {g} | {_med([r['gpu_s'] * 1e6 for r in grp])} | {_med([est[id(r)] * 1e6 for r in grp])} | "
               f"{_med([est[id(r)] / r['gpu_s'] for r in grp])} | {_med([x['threads'] for x in v])} | "
               f"{_med([x['blocks'] for x in v])} | {_med([x['regs'] for x in v])} | {_med([x['warps_sm'] for x in v])} | "
               + ", ".join(f"{k} {n}" for k, n in sorted(bounds.items(), key=lambda kv: -kv[1])) + " |")

  L += error_tracks(by_task, h100)
  scores = {name: {t: _score(rs, [estimate(r["facts"], h100, spec) for r in rs]) for t, rs in by_task.items()}
            for name, (_, spec) in VARIANTS.items()}
  gm = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))
  L += ["", "### Probes: one constant or rule of the model changed", "",
        f"Over the {len(tasks)} tasks: mean rho, and geometric means of pick and top{PICK} (lower is better; 1.00: "
        f"the estimate's favourites are the fastest programs); then top{PICK} per task.", "",
        f"| variant | mean rho | pick | top{PICK} | " + " | ".join(tasks) + " |",
        "|---|---:|---:|---:|" + "---:|" * len(tasks)]
  base = scores["as is"]
  for name in VARIANTS:
    s = scores[name]
    L.append(f"| {name} | {statistics.mean(x['rho'] for x in s.values()):.2f} | "
             f"{gm([x['pick'] for x in s.values()]):.2f} | {gm([x['topk'] for x in s.values()]):.2f} | "
             + " | ".join(f"{s[t]['topk']:.2f}" for t in tasks) + " |")
  L += [""] + [f"- {name}: {what}" for name, (what, _) in VARIANTS.items()]
  if len(tasks) > 1:
    held, chosen = [], []
    for t in tasks:
      others = [u for u in tasks if u != t]
      pick = min(VARIANTS, key=lambda n: (gm([scores[n][u]["topk"] for u in others]), n != "as is"))
      chosen.append(pick); held.append(scores[pick][t]["topk"])
    L += ["", f"Leave one task out (the variant with the best top{PICK} on the other tasks, scored on the one left "
          f"out): top{PICK} {gm(held):.2f} against {gm([base[t]['topk'] for t in tasks]):.2f} as is; chosen: "
          + "; ".join(f"{t}: {c}" for t, c in zip(tasks, chosen)) + "."]
  return "\n".join(L)


# ---------------------------------------------------------------------------------------------- main
def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                               formatter_class=argparse.RawDescriptionHelpFormatter)
  sub = ap.add_subparsers(dest="cmd", required=True)
  f = sub.add_parser("facts", help="build every timed program and save the static model's facts (no GPU)")
  f.add_argument("--folders", default="", help="comma-separated strategies_gpu folders (default: every h200_* one)")
  f.add_argument("--measured-data", type=Path, help="instead: a measured.jsonl of benchmarks/data's format "
                 "(e.g. benchmarks/data/h100-2026-11-24/measured.jsonl)")
  f.add_argument("--gpu", default=H100_GPU, help="the GPU and date of --measured-data (default: %(default)s)")
  f.add_argument("--facts", type=Path, default=FACTS)
  f.add_argument("--jobs", type=int, default=2)
  f.add_argument("--limit", type=int, default=0, help="at most this many new programs (0: all)")
  r = sub.add_parser("report", help="the tables, from the saved facts alone")
  r.add_argument("--facts", type=Path, default=FACTS)
  r.add_argument("--save", type=Path, help="also write the report (markdown) here")
  a = ap.parse_args(argv)
  if a.cmd == "facts":
    if a.measured_data is not None:
      if not a.measured_data.is_file():
        print(f"error: no such file: {a.measured_data}", file=sys.stderr)
        return 2
      progs = timed_records(a.measured_data, a.gpu)
    else:
      folders = [Path(x) for x in a.folders.split(",") if x] or sorted(G.GPU_OUT.glob("h200_*"))
      missing = [str(d) for d in folders if not (d / G.SELECTION).exists() or not (d / G.MEASURED).exists()]
      if missing:
        print(f"error: not a strategies_gpu folder (needs {G.SELECTION} and {G.MEASURED}): {', '.join(missing)}",
              file=sys.stderr)
        return 2
      progs = timed_programs(folders)
    a.facts.parent.mkdir(parents=True, exist_ok=True)
    collect(progs, a.facts, a.jobs, a.limit)
    return 0
  rows = _read_facts(a.facts)
  if not rows:
    print(f"error: no facts in {a.facts}; make them with `python research/static_top_end.py facts`", file=sys.stderr)
    return 2
  from provenance import header_lines
  text = report(rows, header_lines(__file__, argv))
  print(text)
  if a.save: a.save.write_text(text + "\n")
  return 0


if __name__ == "__main__":
  sys.exit(main())
