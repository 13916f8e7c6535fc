"""How well the static model (an estimate, no GPU) matches published GPU measurements.

The published figures: Simon Boehm's SGEMM worklog ("How to Optimize a CUDA Matmul Kernel for
cuBLAS-like Performance", 2022, https://siboehm.com/articles/22/CUDA-MMM), measured on an
NVIDIA RTX A6000 with 4096 x 4096 x 4096 float32 matrices, GFLOP/s per kernel:

  1 naive 309.0, 2 global-memory coalescing 1986.5, 3 shared-memory caching 2980.3,
  4 1D block tiling 8474.7, 5 2D block tiling 15971.7, 6 vectorized memory access 18237.3
  (cuBLAS: 23249.6).

Each of those kernels is written here as a minicomp schedule with the worklog's block tile
sizes, thread mapping and per-thread tiles (the kernels are not byte-identical to the worklog's
hand-written CUDA: e.g. minicomp's kernel 6 vectorizes the global loads of the shared fetch but
does not transpose A in shared memory). minicomp builds each one for sm_86 and the static model
estimates it on Target("a6000"). Printed: estimated vs measured GFLOP/s, their ratio, and the
Spearman rank correlation over the kernels. The goal (issue 4): rank correlation >= 0.9, every
kernel within 2x.

The second table compares the static model with real H100 timings of minicomp's own kernels:
``benchmarks/data/h100-2026-11-24/measured.jsonl`` (204 random valid schedules of five workloads,
median kernel time with CUDA events and the L2 flushed; see the README there). Every record's
steps are replayed on the workload its ``workload_call`` builds, built for sm_90 and estimated on
Target("h100"), in a process pool (``--jobs``) with a per-kernel time limit (``--timeout``: a
kernel that exceeds it is reported as timed out, not waited for). Per workload it prints the
Spearman rank correlation of estimate and measured median, the overlap of the estimate's best 10 %
with the measured best 10 %, the measured time of the estimate's pick against the best measured
one, and the typical size of the error (median |ln(estimate / measured)|). The goal (issue 14):
Spearman >= 0.9 on every workload.

  python benchmarks/static_model_fidelity.py            # both tables (H100: ~10 min on 2 cores)
  python benchmarks/static_model_fidelity.py --no-measured             # the SGEMM table only
  python benchmarks/static_model_fidelity.py --no-boehm --limit 8      # 8 H100 records per workload
  python benchmarks/static_model_fidelity.py --save /tmp/h100.jsonl    # also every record's estimate terms
  python benchmarks/static_model_fidelity.py --markdown
  python benchmarks/static_model_fidelity.py --calibration --markdown  # issue 48: calibrated vs not, leave one task out
  python benchmarks/static_model_fidelity.py --picks --markdown        # issue 48: compile's choices under each model
"""
from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import sys
import time
from collections import deque
from multiprocessing.connection import wait as wait_conns
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from provenance import ROOT, header_lines  # noqa: E402

import minicomp as mc
from minicomp import workloads as W
from minicomp.search.static.estimate import estimate

N = 4096
DEVICE = "a6000"
# (name, measured GFLOP/s on an RTX A6000, from the worklog's results table)
PUBLISHED = [
  ("1 naive", 309.0),
  ("2 gmem coalescing", 1986.5),
  ("3 smem caching", 2980.3),
  ("4 1D blocktiling", 8474.7),
  ("5 2D blocktiling", 15971.7),
  ("6 vectorized", 18237.3),
]
CUBLAS = 23249.6


def _naive(coalesced: bool) -> mc.Schedule:
  """Kernels 1 and 2: one output per thread, accumulated in a register, 32 x 32 threads per
  block. Kernel 1 puts threadIdx.x on the rows of C (A and C strided across a warp); kernel 2
  on the columns."""
  wl = W.matmul(N, N, N)
  s = mc.Schedule(wl.outputs)
  C = wl.outputs[0]
  CL = s.cache_write(C, "local")
  i, j = s.axis(C)
  io, ii = s.split(C, i, 32)
  jo, ji = s.split(C, j, 32)
  s.reorder(C, io, jo, ii, ji)
  s.bind(C, io, "blockIdx.y"); s.bind(C, jo, "blockIdx.x")
  s.bind(C, ii, "threadIdx.y" if coalesced else "threadIdx.x")
  s.bind(C, ji, "threadIdx.x" if coalesced else "threadIdx.y")
  s.compute_at(CL, C, ji)
  return s


def _tiled(bm: int, bn: int, bk: int, tm: int, tn: int, vector: int = 1) -> mc.Schedule:
  """Kernels 3-6: a BM x BN block tile, A and B staged through shared memory BK columns / rows
  at a time (all threads fetch cooperatively), each thread accumulating a TM x TN register tile
  (contiguous rows and columns, as in the worklog). ``vector`` > 1 fetches that many
  consecutive floats per thread (float4 global loads)."""
  wl = W.matmul(N, N, N)
  s = mc.Schedule(wl.outputs)
  C = wl.outputs[0]
  CL = s.cache_write(C, "local")
  i, j = s.axis(C)
  io, ii = s.split(C, i, bm)
  jo, ji = s.split(C, j, bn)
  ty, ii = s.split(C, ii, tm)
  tx, ji = s.split(C, ji, tn)
  s.reorder(C, io, jo, ty, tx, ii, ji)
  s.bind(C, io, "blockIdx.y"); s.bind(C, jo, "blockIdx.x")
  s.bind(C, ty, "threadIdx.y"); s.bind(C, tx, "threadIdx.x")
  s.compute_at(CL, C, tx)
  ci, cj, ck = s.loops(CL)
  ko, ki = s.split(CL, ck, bk)
  s.reorder(CL, ko, ki, ci, cj)
  nty, ntx = bm // tm, bn // tn
  for X in wl.inputs[:2]:
    XS = s.cache_read(X, "shared", [CL])
    s.compute_at(XS, CL, ko)
    f = s.fuse(XS, *s.loops(XS))
    if vector > 1:
      f, v = s.split(XS, f, vector)
      s.vectorize(XS, v)
    _, t = s.split(XS, f, nty * ntx)
    y, x = s.split(XS, t, ntx)
    s.bind(XS, y, "threadIdx.y"); s.bind(XS, x, "threadIdx.x")
  return s


SCHEDULES = {
  "1 naive": lambda: _naive(False),
  "2 gmem coalescing": lambda: _naive(True),
  "3 smem caching": lambda: _tiled(32, 32, 32, 1, 1),
  "4 1D blocktiling": lambda: _tiled(64, 64, 8, 8, 1),
  "5 2D blocktiling": lambda: _tiled(128, 128, 8, 8, 8),
  "6 vectorized": lambda: _tiled(128, 128, 8, 8, 8, vector=4),
}


MEASURED = Path(__file__).resolve().parent / "data" / "h100-2026-11-24" / "measured.jsonl"
MEASURED_DEVICE = "h100"
TOP_FRACTION = 0.1


# ---- rank statistics ----

def ranks(x) -> np.ndarray:
  """Ranks 0..n-1 of ``x``, tied values sharing the mean of their ranks."""
  x = np.asarray(x, dtype=float)
  order = np.argsort(x, kind="stable")
  r = np.empty(len(x))
  r[order] = np.arange(len(x), dtype=float)
  _, inv = np.unique(x, return_inverse=True)
  return (np.bincount(inv, weights=r) / np.bincount(inv))[inv]


def spearman(a, b) -> float:
  """Spearman rank correlation (ties averaged); nan when either side is constant."""
  ra, rb = ranks(a), ranks(b)
  ra -= ra.mean(); rb -= rb.mean()
  den = math.sqrt((ra * ra).sum() * (rb * rb).sum())
  return float((ra * rb).sum() / den) if den > 0 else float("nan")


def top_overlap(est, meas, fraction: float = TOP_FRACTION) -> tuple[float, int]:
  """(fraction of the ``k`` measured-fastest that are among the ``k`` lowest estimates, k), with
  k = max(1, round(fraction * n)). Estimates tied at the boundary are taken as a random
  tie-break would, on average: each of ``m`` tied candidates for ``r`` remaining places counts r/m."""
  est, meas = np.asarray(est, dtype=float), np.asarray(meas, dtype=float)
  k = max(1, round(fraction * len(est)))
  v = np.sort(est)[k - 1]
  below, tied = est < v, est == v
  p_in = np.where(below, 1.0, np.where(tied, (k - below.sum()) / tied.sum(), 0.0))
  best = np.argsort(meas, kind="stable")[:k]
  return float(p_in[best].sum() / k), k


def pick_time(est, meas) -> tuple[float, int]:
  """(measured time of the schedule with the lowest estimate, how many share that estimate); a tie
  gives the mean measured time of the tied schedules (a random pick's expectation)."""
  est, meas = np.asarray(est, dtype=float), np.asarray(meas, dtype=float)
  tied = est == est.min()
  return float(meas[tied].mean()), int(tied.sum())


# ---- the H100 records ----

def load_measured(path=MEASURED) -> list[dict]:
  """The records of a measured.jsonl file, one dict per line (see its README)."""
  with open(path) as f:
    return [json.loads(ln) for ln in f if ln.strip()]


def replay(rec: dict) -> mc.Schedule:
  """The record's schedule: its steps replayed on a fresh build of its workload."""
  return mc.Schedule.from_json(W.from_call(rec["workload_call"]).outputs, json.dumps(rec["steps"]))


def estimate_record(rec: dict, device: str = MEASURED_DEVICE) -> dict:
  """Build one record's schedule for its target (sm_90) and estimate it on ``device``: the estimate,
  every launch's terms and bound, ptxas registers, and the seconds building and estimating took."""
  t0 = time.perf_counter()
  kern = mc.build(replay(rec), target=rec.get("target", "sm_90"))
  t1 = time.perf_counter()
  e = estimate(kern, device)
  t2 = time.perf_counter()
  launches = []
  for pl, le in zip(kern.plan.launches, e.launches):
    res = kern.binary.resources.get(pl.kernel)
    launches.append({"name": le.name, "grid": list(pl.grid), "block": list(pl.block),
                     "registers": res.registers if res else None, "shared_bytes": res.shared_bytes if res else None,
                     "latency_s": le.latency_s, "bound": le.bound, "parts": le.parts, "efficiency": le.efficiency,
                     "blocks_on_busiest_sm": le.blocks_on_busiest_sm})
  return {"estimate_s": e.latency_s, "launches": launches, "build_s": t1 - t0, "estimate_time_s": t2 - t1}


def _worker(conn) -> None:
  """A pool process: estimates the records it is sent until it is sent None."""
  conn.send("ready")
  while (job := conn.recv()) is not None:
    i, rec = job
    try:
      out = estimate_record(rec)
    except Exception as e:  # noqa: BLE001 - reported per record, the run goes on
      out = {"error": f"{type(e).__name__}: {e}"}
    conn.send((i, out))


def run_pool(items: list[dict], jobs: int, timeout: float, on_done=None) -> list[dict]:
  """``estimate_record`` of every item in ``jobs`` processes. A record still running after
  ``timeout`` seconds gets ``{"timeout": timeout}``; its process is killed and replaced (so a
  slow estimate cannot hang the run). ``on_done(i, result)`` is called as each one finishes."""
  ctx = mp.get_context("spawn")   # fresh interpreters: nothing of the parent's NVRTC / islpy state
  for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"): os.environ.setdefault(var, "1")
  pending, results = deque(enumerate(items)), [None] * len(items)

  def start() -> dict:
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_worker, args=(child,), daemon=True)
    proc.start(); child.close()
    return {"proc": proc, "conn": parent, "ready": False, "job": None, "since": 0.0}

  def finish(i: int, out: dict) -> None:
    results[i] = out
    if on_done: on_done(i, out)

  slots = [start() for _ in range(max(1, min(jobs, len(items))))]
  try:
    while pending or any(s["job"] is not None for s in slots):
      for s in slots:
        if s["ready"] and s["job"] is None and pending:
          s["job"], rec = pending.popleft()
          s["since"] = time.monotonic()
          s["conn"].send((s["job"], rec))
      ready = wait_conns([s["conn"] for s in slots], timeout=0.5)
      for k, s in enumerate(slots):
        if s["conn"] in ready:
          try:
            msg = s["conn"].recv()
          except EOFError:   # the process died (e.g. out of memory): report and replace it
            if s["job"] is not None: finish(s["job"], {"error": f"worker exited with code {s['proc'].exitcode}"})
            s["proc"].join(); slots[k] = start()
            continue
          if msg == "ready": s["ready"] = True
          else:
            finish(*msg); s["job"] = None
        elif s["job"] is not None and time.monotonic() - s["since"] > timeout:
          s["proc"].kill(); s["proc"].join()
          finish(s["job"], {"timeout": timeout})
          slots[k] = start()
  finally:
    for s in slots:
      if s["proc"].is_alive():
        try:
          s["conn"].send(None)
        except OSError:
          pass
        s["proc"].join(timeout=5)
        if s["proc"].is_alive(): s["proc"].kill()
  return results


def fidelity(recs: list[dict], results: list[dict]) -> dict:
  """The per-workload figures of the H100 table for one workload's records and their estimates."""
  ok = [(r, o) for r, o in zip(recs, results) if "estimate_s" in o]
  est = np.array([o["estimate_s"] for _, o in ok]); meas = np.array([r["median_s"] for r, _ in ok])
  row = {"workload": recs[0]["workload"], "records": len(recs), "n": len(ok),
         "timeouts": sum("timeout" in o for o in results), "errors": sum("error" in o for o in results),
         "estimate_times": [o["estimate_time_s"] for _, o in ok],
         "same_regs": sum([l["registers"] for l in o["launches"]] == r.get("registers") for r, o in ok)}
  if len(ok) >= 2:
    row["spearman"] = spearman(est, meas)
    row["all_equal"] = bool((est == est[0]).all())
    row["overlap"], row["k"] = top_overlap(est, meas)
    row["pick_s"], row["pick_tied"] = pick_time(est, meas)
    row["best_s"] = float(meas.min())
    lr = np.log(est / meas)
    row["med_abs_log"], row["med_ratio"] = float(np.median(np.abs(lr))), float(np.exp(np.median(lr)))
  return row


def _table(head, rows, markdown: bool, left=(0,)) -> list[str]:
  if markdown:
    cells = lambda r: "| " + " | ".join(c.replace("|", "\\|") for c in r) + " |"
    return [cells(head), "|" + "|".join(" --- " for _ in head) + "|"] + [cells(r) for r in rows]
  w = [max(len(h), *(len(r[k]) for r in rows)) for k, h in enumerate(head)]
  return ["  ".join(h.ljust(w[k]) for k, h in enumerate(head)).rstrip(), "  ".join("-" * x for x in w)] + \
         ["  ".join(c.ljust(w[k]) if k in left else c.rjust(w[k]) for k, c in enumerate(r)).rstrip() for r in rows]


def measured_section(args) -> list[str]:
  """Estimate every record of ``args.measured`` and return the H100 fidelity table's lines."""
  recs = load_measured(args.measured)
  groups: dict[str, list[dict]] = {}
  for r in recs:
    if not args.only or any(o in r["workload"] for o in args.only.split(",")):
      groups.setdefault(r["workload"], []).append(r)
  if args.limit:
    groups = {w: rs[:args.limit] for w, rs in groups.items()}
  items = [r for rs in groups.values() for r in rs]
  done, t0 = [0], time.perf_counter()

  def progress(i: int, out: dict) -> None:
    done[0] += 1
    r = items[i]
    k = groups[r["workload"]].index(r)
    if "estimate_s" in out:
      what = (f"est {out['estimate_s'] * 1e6:9.1f} us*  meas {r['median_s'] * 1e6:9.1f} us  "
              f"(build {out['build_s']:.1f} s, estimate {out['estimate_time_s']:.1f} s)")
    else:
      what = f"TIMED OUT after {out['timeout']:g} s" if "timeout" in out else f"ERROR {out['error']}"
    print(f"[{done[0]:3d}/{len(items)} {time.perf_counter() - t0:6.0f} s] {r['workload']} #{k}: {what}",
          file=sys.stderr, flush=True)

  results = run_pool(items, args.jobs, args.timeout, progress)
  wall = time.perf_counter() - t0
  if args.save:
    with open(args.save, "w") as f:
      for k, (r, o) in enumerate(zip(items, results)):
        f.write(json.dumps({"workload": r["workload"], "index": groups[r["workload"]].index(r),
                            "median_s": r["median_s"], "registers_measured": r.get("registers"), **o}) + "\n")

  rows, off = [], 0
  for w, rs in groups.items():
    rows.append(fidelity(rs, results[off:off + len(rs)])); off += len(rs)
  table = []
  for r in rows:
    et = r["estimate_times"]
    if "spearman" in r:
      rho = "n/a (estimates all equal)" if r["all_equal"] else "n/a" if math.isnan(r["spearman"]) else f"{r['spearman']:.3f}"
      table.append((r["workload"], f"{r['n']}/{r['records']}", str(r["timeouts"]), rho,
                    f"{r['overlap']:.2f} (k={r['k']})",
                    f"{r['pick_s'] * 1e6:.1f}" + (f" ({r['pick_tied']} tied)" if r["pick_tied"] > 1 else ""),
                    f"{r['best_s'] * 1e6:.1f}", f"{r['pick_s'] / r['best_s']:.2f}",
                    f"{r['med_abs_log']:.2f} ({math.exp(r['med_abs_log']):.2f}x)", f"{r['med_ratio']:.2f}",
                    f"{r['same_regs']}/{r['n']}", f"{np.median(et):.1f} / {max(et):.1f}"))
    else:
      table.append((r["workload"], f"{r['n']}/{r['records']}", str(r["timeouts"])) + ("-",) * 8
                   + (f"{np.median(et):.1f} / {max(et):.1f}" if et else "-",))
  head = ("workload", "n", "timeouts", "Spearman", "top-10% overlap", "pick meas us", "best meas us",
          "pick/best", "med |ln(est/meas)|", "med est/meas", "same regs", "estimate s med/max")
  out = [f"estimated: static-model ESTIMATE for Target({MEASURED_DEVICE!r}), each record built for sm_90 "
         f"(minicomp now, not the measured commit)",
         f"measured:  {os.path.relpath(args.measured, ROOT)}: "
         + ("NVIDIA H100 80GB HBM3, median kernel time (CUDA events, L2 flushed), minicomp @ 566ec3c"
            if Path(args.measured).resolve() == MEASURED else "median_s of each record (see the README next to it)"),
         f"run:       {len(items)} records, {args.jobs} processes, {args.timeout:g} s limit per kernel (build + "
         f"estimate), wall {wall:.0f} s", ""]
  out += _table(head, table, args.markdown)
  sp = [r["spearman"] for r in rows if not math.isnan(r.get("spearman", float("nan")))]
  below = [r["workload"] for r in rows if not r.get("spearman", -1) >= 0.9]
  out += ["", "* n: records estimated / records; Spearman: rank correlation of estimate and measured median (ties",
          "  averaged); top-10% overlap: share of the k measured-fastest among the k lowest estimates; pick: the",
          "  measured time of the schedule with the lowest estimate (the mean of tied ones); med est/meas: the",
          "  median ratio (below 1: the model is optimistic); same regs: rebuilt kernels whose ptxas registers per",
          "  thread equal the measured kernels' (a check that today's minicomp emits the kernels that were timed).",
          "  Estimates are static-model ESTIMATES, not GPU timings."]
  out.append((f"mean Spearman over the {len(sp)} workloads that have one: {np.mean(sp):.3f}; " if sp else "")
             + "goal (issue 14) >= 0.9 on every workload: " + ("met" if not below else "NOT met on " + ", ".join(below))
             + (f" (without the {missing} records below, which have no estimate)" if (missing := len(items) - sum(r["n"] for r in rows)) else ""))
  for r, o in zip(items, results):
    if "estimate_s" not in o:
      why = f"timed out after {o['timeout']:g} s" if "timeout" in o else f"error: {o['error']}"
      out.append(f"  {r['workload']} #{groups[r['workload']].index(r)} (measured {r['median_s'] * 1e6:.1f} us): {why}")
  return out


def boehm_section(args) -> list[str]:
  """The SGEMM table: Boehm's six kernels, estimated on an RTX A6000, against the published GFLOP/s."""
  flops = 2.0 * N ** 3
  rows = []
  for name, measured in PUBLISHED:
    t0 = time.perf_counter()
    kern = mc.build(SCHEDULES[name](), target="sm_86")
    t1 = time.perf_counter()
    e = estimate(kern, DEVICE)
    t2 = time.perf_counter()
    est = flops / e.latency_s / 1e9
    rows.append((name, measured, est, est / measured, e.launches[0].bound, t1 - t0, t2 - t1))
  rho = spearman([r[1] for r in rows], [r[2] for r in rows])
  worst = max(max(r[3], 1 / r[3]) for r in rows)
  out = [f"workload: C = A @ B, {N}x{N}x{N} float32; built for sm_86, estimated on {DEVICE} "
         f"(ESTIMATE from the static model, no GPU)",
         f"measured: Simon Boehm's SGEMM worklog on an RTX A6000 (published GFLOP/s; cuBLAS {CUBLAS:.1f})", ""]
  head = ("kernel", "measured GFLOP/s", "estimated GFLOP/s*", "est/meas", "bound (est.)", "build s", "estimate s")
  table = [(n, f"{m:.1f}", f"{e:.1f}", f"{r:.2f}", b, f"{tb:.1f}", f"{te:.1f}") for n, m, e, r, b, tb, te in rows]
  out += _table(head, table, args.markdown, left=(0, 4))
  out += ["", "* estimated = static-model ESTIMATE for an RTX A6000 (no GPU measurement).",
          f"Spearman rank correlation (estimated vs measured): {rho:.3f}  (goal >= 0.9)",
          f"largest ratio either way: {worst:.2f}x  (goal <= 2x)"]
  return out


TIMINGS = {"H200": ROOT / "benchmarks/data/h200-2026-11-27/timings.jsonl.gz",
           "H100": ROOT / "benchmarks/data/h100-2026-11-24/timings.jsonl.gz"}


def calibration_section(args) -> list[str]:
  """The static model's ranking, uncalibrated against calibrated, leave one task out: for each task, the
  calibration is fitted on the H200 timings of the other tasks and scored on this task's H200 and H100
  timings (none of it is fitted on the H100 ones). From the timings' saved facts: no build, ~1 minute."""
  from minicomp.search.static import fit as F
  from minicomp.search.static import timings as T
  data = {g: F.tasks_of(T.read(p), "sm_90") for g, p in TIMINGS.items()}
  train = data["H200"]
  names = sorted({k for d in data.values() for k, t in d.items() if len(t.gpu_s) >= F.MIN_PROGRAMS})
  head = ("GPU", "task", "programs", "pick uncal", "pick cal", "top-10 uncal", "top-10 cal", "rho uncal", "rho cal",
          "error uncal", "error cal")
  rows, picks = [], {"uncal": [], "cal": []}
  for k in names:
    cal = F.fit({j: d for j, d in train.items() if j != k}, "sm_90")
    for g, d in data.items():
      if k not in d or len(d[k].gpu_s) < F.MIN_PROGRAMS: continue
      est = {m: F.predict(cal if m == "cal" else None, d[k]) for m in ("uncal", "cal")}
      u, c = (F.rank_quality(est[m], d[k].gpu_s) for m in ("uncal", "cal"))
      err = {m: math.exp(float(np.median(np.abs(np.log(e / d[k].gpu_s))))) for m, e in est.items()}
      picks["uncal"].append(u["pick"]); picks["cal"].append(c["pick"])
      rows.append((g, k, str(c["programs"]), f"{u['pick']:.2f}", f"{c['pick']:.2f}", str(u["top10"]), str(c["top10"]),
                   f"{u['rho']:.2f}", f"{c['rho']:.2f}", f"{err['uncal']:.2f}x", f"{err['cal']:.2f}x"))
  gm = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))
  out = ["Calibration (issue 48): the static model's ranking of GPU-timed programs, uncalibrated against calibrated,",
         "leave one task out (the calibration is fitted on the H200 timings of the other tasks). GPU times: NVIDIA",
         "H200 2026-11-27 (the strategies' programs) and NVIDIA H100 80GB HBM3 2026-11-24 (random schedules).", ""]
  out += _table(head, rows, args.markdown, left=(0, 1))
  out += ["", "* pick: GPU time of the estimate's favourite / the fastest program's; top-10: the GPU's ten fastest among",
          "  the estimate's ten; rho: Spearman; error: the median factor between estimate and GPU time. Goal (issue 48): pick <= 1.10, top-10 >= 5, rho >= 0.85 on every task.",
          f"geometric mean pick: uncalibrated {gm(picks['uncal']):.3f}, calibrated {gm(picks['cal']):.3f}"]
  return out


def _pick(task: str, model: str, mode: str = "gensor") -> tuple[str, float]:
  """What ``compile(trials=0)`` chooses for a strategies task on an H200 under ``model`` (calibrated /
  uncalibrated; ``mode``: compile's ``schedules=``): its steps and its estimate (seconds, under that model)."""
  import strategies as S
  from minicomp.compiler import choose_default
  from minicomp.graph.tasks import Task, task_kind
  from minicomp.search.static.estimate import estimate as est
  before = os.environ.get("MINICOMP_STATIC_MODEL")
  os.environ["MINICOMP_STATIC_MODEL"] = model
  try:
    dag = S.task_dag(task)
    tgt = mc.Target("h200")
    steps, _, _, _ = choose_default(Task(task, dag, task_kind(dag)), tgt, f"pick_{task}", mode)
    return steps, est(mc.build(mc.Schedule.from_json(dag, steps), tgt), tgt).latency_s
  finally:
    if before is None: del os.environ["MINICOMP_STATIC_MODEL"]
    else: os.environ["MINICOMP_STATIC_MODEL"] = before


def picks_section(args) -> list[str]:
  """Gensor's trials=0 choice (compile's default schedule) for the strategies' eight tasks on an H200, chosen
  under the uncalibrated and the calibrated model: where the program was among those timed on the H200, its
  GPU time over the fastest timed program's; else "not timed" (a GPU run must time it)."""
  import strategies_gpu as G
  from minicomp.search.static import timings as T
  timed: dict[tuple[str, str], float] = {}
  fastest: dict[str, float] = {}
  fastest_steps: dict[str, str] = {}
  for r in T.read(TIMINGS["H200"]):
    if not r.correct: continue
    timed[(r.task, G.digest(r.steps))] = r.median_s
    if r.median_s < fastest.get(r.task, math.inf): fastest_steps[r.task] = r.steps
    fastest[r.task] = min(fastest.get(r.task, math.inf), r.median_s)
  head = ("task", "uncal pick: GPU / fastest", "est us*", "cal pick: GPU / fastest", "est us*", "same program")
  rows, picked, untimed = [], {}, 0
  for task in sorted(fastest):
    cells = []
    for model in ("uncalibrated", "calibrated"):
      steps, e = _pick(task, model)
      t = timed.get((task, G.digest(steps)))
      e0 = picked.setdefault(G.digest(steps), {"task": task, "steps": steps, "estimate": e, "roles": []})
      e0["roles"].append([f"gensor pick, {model}", 0, 0])
      untimed += t is None
      cells.append((G.digest(steps), f"{t / fastest[task]:.2f}" if t else "not timed", f"{e * 1e6:.1f}"))
    rows.append((task, cells[0][1], cells[0][2], cells[1][1], cells[1][2], "yes" if cells[0][0] == cells[1][0] else "no"))
    print(f"  {task}: done", file=sys.stderr, flush=True)
  out = ["Gensor's trials=0 choice (compile's default schedule, target h200) under each model, against the programs",
         "timed on an NVIDIA H200 on 2026-11-27. Estimates (us*) are each model's own, not comparable across models.", ""]
  out += _table(head, rows, args.markdown, left=(0,))
  if args.selection:
    # every pick, timed before or not, and each task's fastest program of 2026-11-27: a GPU run times them side by side
    best = [{"task": t, "steps": fastest_steps[t], "estimate": None, "roles": [["fastest of 2026-11-27", 0, 0]]}
            for t in sorted(fastest_steps) if G.digest(fastest_steps[t]) not in picked]
    G.write_jsonl(Path(args.selection), list(picked.values()) + best)
    out += ["", f"{untimed} picks never timed; every pick and each task's fastest of 2026-11-27: "
            f"{args.selection} (on a GPU: python benchmarks/strategies_gpu.py measure --selection {args.selection} "
            "--out DIR)"]
  return out


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--markdown", action="store_true", help="tables as markdown")
  ap.add_argument("--no-boehm", action="store_true", help="skip the SGEMM table (Boehm's worklog, RTX A6000)")
  ap.add_argument("--measured", default=str(MEASURED), help="measured.jsonl of real GPU timings (default: %(default)s)")
  ap.add_argument("--no-measured", action="store_true", help="skip the H100 table")
  ap.add_argument("--only", default="", help="H100 table: only workloads whose name contains one of these (comma-separated)")
  ap.add_argument("--limit", type=int, default=0, help="H100 table: the first N records of each workload")
  ap.add_argument("--jobs", type=int, default=2, help="processes estimating the H100 records (default: %(default)s)")
  ap.add_argument("--timeout", type=float, default=120.0, help="seconds per H100 record, build + estimate (default: %(default)s)")
  ap.add_argument("--calibration", action="store_true", help="only the calibration table (leave one task out on the "
                                                                 "H200 / H100 timings' saved facts; ~1 minute)")
  ap.add_argument("--picks", action="store_true", help="only compile's trials=0 choice per strategies task under both "
                                                           "models, against the H200 timings (~5 minutes)")
  ap.add_argument("--selection", default="", help="--picks: write every pick and each task's fastest timed program "
                                                  "as a strategies_gpu.py selection (gpu_selection.jsonl.gz) to time "
                                                  "on a GPU")
  ap.add_argument("--save", default="", help="write every H100 record's estimate, terms and bound to this JSONL file")
  args = ap.parse_args(argv)
  header = header_lines(__file__, argv)
  if args.calibration or args.picks:
    print("\n".join(header + [""] + (calibration_section(args) if args.calibration else picks_section(args))))
    return 0
  if not args.no_boehm:
    print("\n".join(header + [""] + boehm_section(args)), flush=True)
    header = []
  if not args.no_measured:
    lines = measured_section(args)
    print("\n".join(header + [""] + ["H100: static-model estimates vs real H100 measurements"] + lines))
  return 0


if __name__ == "__main__":
  sys.exit(main())
