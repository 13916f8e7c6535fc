"""The static model's injectivity test on real access maps: with the digit variables, and without.

``AccessMap.injective`` asks isl whether distinct instances of one access touch distinct (kept
indices, element) pairs; when they do, a distinct count is the instance count and isl's harder
counting is skipped. An access map's inputs are the instance's indices and the *digit variables*
that rewrite its floor divisions and remainders (``isl_text.Digits``), which are functions of the
indices. Asked with the digits as inputs (``digits``, the test until 2026-11-28), isl compresses
their lattice of equalities; on padded Conv3d inputs that ran 2-128 s on one map although isl had an
operation budget of 300 (its operations are coarse: one Hermite normal form took seconds). Asked
with the digits projected out (``projected``), the question is the same (the digits follow from
the indices) and isl keeps them as existential variables.

Three steps:

- ``collect``: programs of the strategies benchmark's memo (a seeded sample per task, and every
  program the static measurer timed out on), lowered (no NVRTC) and analysed by
  ``footprint.analyze_program`` with ``AccessMap.injective`` recording each question (map, fixed and
  dropped inputs, budget) and answering None, so the model takes its other counts: the questions
  asked are those of the old test's worst case (a superset of what either form asks). Distinct
  questions are saved, gzipped JSON lines (``--queries``).
- ``compare``: each question asked both ways, each in its own process with a wall cap (``--cap``,
  seconds): ``digits`` at the old budget (3000 isl operations, 300 with more than two digits),
  ``projected`` at ``--budget``. Per task: questions, answers of each (True / False / None: out of
  budget or capped), disagreements (two answers that differ; must be 0), answers only one form
  gives, and the seconds (median, 99th percentile, max; capped runs count as the cap).
- ``movement``: what the change does to the model: the same programs' data movement
  (``analyze_program``, everything the static model takes from isl) with the test asked each way,
  each program in its own process with a wall cap. Per task: programs, those whose data movement
  figures are identical, those that differ, which figures and by how much at most (relative;
  an exactness flag is not a figure), the figures that are estimates each way (sampled distinct
  counts, and block / thread sums taken from the first and last blocks), and the seconds.

  python research/isl_injective.py collect --per-task 40          # a few minutes on 2 cores
  python research/isl_injective.py compare --budget 3000 --cap 30 --save research/results/isl_injective/compare.md
  python research/isl_injective.py movement --per-task 40 --cap 150 --save research/results/isl_injective/movement.md

``collect`` and ``movement`` read the memo ``strategies.py`` writes (``results/strategies/measured_h100.jsonl``,
not in git: 0.7 GB; run ``strategies.py`` first). It grows while ``strategies.py`` runs, so a sample is of
the memo as it stood on the table's date, and another machine's memo gives another sample: those two
tables reproduce in kind, not figure for figure. ``compare`` reads the saved questions
(``results/isl_injective/queries.jsonl.gz``, in git) and reproduces exactly but for the seconds. No GPU and no latency here: only isl's answers, the data
movement figures and the CPU seconds they take.
"""
from __future__ import annotations

import argparse
import gzip
import json
import math
import multiprocessing as mp
import random
import statistics
import sys
import time
from pathlib import Path

import islpy as isl

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent / "benchmarks"   # strategies.py, provenance.py and their results
sys.path[:0] = [str(HERE), str(BENCH)]
MEMO = BENCH / "results" / "strategies" / "measured_h100.jsonl"
OUT = HERE / "results" / "isl_injective"
OLD_BUDGET = 3000   # counting.INJECTIVE_BUDGET until 2026-11-28 (a tenth with more than two digits)
START = "fork"      # how capped children start ("spawn" where threads are running, as in the tests: JAX's)


def memo_programs(tasks, per_task: int, seed: int, memo: Path = MEMO) -> list[tuple[str, str, bool]]:
  """``(task, steps JSON, timed out)``: per task, ``per_task`` programs of ``memo`` drawn with ``seed``
  and every program whose static measurement timed out."""
  if not memo.exists():
    raise SystemExit(f"no memo at {memo}: run benchmarks/strategies.py first (it writes one), or pass --memo")
  by_task: dict[str, list] = {}
  for ln in memo.read_text().splitlines():
    try: r = json.loads(ln)
    except json.JSONDecodeError: continue
    if r.get("task") in tasks: by_task.setdefault(r["task"], []).append(r)
  rng = random.Random(seed)
  out = []
  for t in tasks:
    rows = by_task.get(t, [])
    slow = [r for r in rows if r.get("error") == "timeout"]
    ok = [r for r in rows if r.get("cost") is not None]
    out += [(t, r["steps"], True) for r in slow]
    out += [(t, r["steps"], False) for r in rng.sample(ok, min(per_task, len(ok)))]
  return out


def _questions(task: str, steps: str) -> list[dict]:
  """The injectivity questions the static model's footprint analysis asks of one program (answered None)."""
  import strategies as S

  from minicomp.ir.lower import lower
  from minicomp.ir.schedule import Schedule
  from minicomp.search.static.footprint import isl_build
  from minicomp.search.static.footprint import analyze_program
  asked = []

  def record(self, keep, fix, drop, budget):
    m = self.isl_map(keep)
    asked.append({"map": m.to_str(), "instance_dims": len(self.extents), "keep": keep,
                  "fix": sorted(fix.items()), "drop": sorted(drop)})
    return None

  isl_build.AccessMap.injective = record
  prog = lower(Schedule.from_json(S.task_dag(task), steps).state, "q")
  analyze_program(prog)
  return asked


def _collect_one(args):
  task, steps, slow = args
  t0 = time.perf_counter()
  try: qs = _questions(task, steps)
  except Exception as e: return task, slow, [], f"{type(e).__name__}: {e}", time.perf_counter() - t0
  return task, slow, qs, "", time.perf_counter() - t0


def collect(a) -> None:
  tasks = a.tasks.split(",")
  progs = memo_programs(tasks, a.per_task, a.seed, a.memo)
  seen, n_q, failed = set(), 0, 0
  a.queries.parent.mkdir(parents=True, exist_ok=True)
  print(f"{len(progs)} programs ({sum(p[2] for p in progs)} that timed out) from {a.memo.name}; {a.jobs} processes")
  ctx = mp.get_context("spawn")
  with ctx.Pool(a.jobs, maxtasksperchild=20) as pool, gzip.open(a.queries, "wt") as f:
    for i, (task, slow, qs, err, s) in enumerate(pool.imap_unordered(_collect_one, progs)):
      failed += bool(err)
      for q in qs:
        key = (q["map"], tuple(map(tuple, q["fix"])), tuple(q["drop"]))
        if key in seen: continue
        seen.add(key)
        f.write(json.dumps({"task": task, "from_timeout": slow, **q}) + "\n")
        n_q += 1
      if (i + 1) % 25 == 0 or i + 1 == len(progs):
        print(f"[{i + 1}/{len(progs)}] {n_q} distinct questions, {failed} programs failed", flush=True)
  print(f"saved {a.queries}")


class Relation:
  """An ``AccessMap`` stand-in holding one saved relation, for ``AccessMap.injective``: its first
  ``instance_dims`` inputs are the instance, the rest digit variables."""

  def __init__(self, text: str, instance_dims: int):
    from minicomp.search.static.footprint.isl_build import isl_context
    self.map, self.extents = isl.Map.read_from_str(isl_context(), text), (0,) * instance_dims

  def isl_map(self, keep: int): return self.map


def ask(q: dict, form: str, budget: int):
  """``(answer, seconds)``: the question ``q`` asked by ``AccessMap.injective`` (``projected``) or by
  :func:`injective_with_digits` (``digits``, at the old budget), within ``budget`` isl operations
  (None: isl ran out)."""
  from minicomp.search.static.footprint.isl_build import AccessMap
  t0 = time.perf_counter()
  test = AccessMap.injective if form == "projected" else injective_with_digits
  r = test(Relation(q["map"], q["instance_dims"]), q["keep"], dict(q["fix"]), frozenset(q["drop"]), budget)
  return r, time.perf_counter() - t0


def _ask_child(q, form, budget, conn):
  conn.send(ask(q, form, budget))
  conn.close()


def run_capped(target, args: tuple, cap: float):
  """``target(*args, conn)`` in a child process (started by :data:`START`) that sends one
  ``(result, seconds)`` on ``conn``: ``(result, seconds, False)``, or ``(None, cap, True)`` when it
  sent nothing within ``cap`` seconds (it is killed)."""
  ctx = mp.get_context(START)
  recv, send = ctx.Pipe(duplex=False)
  p = ctx.Process(target=target, args=(*args, send))
  p.start()
  send.close()
  if recv.poll(cap):
    r, s = recv.recv()
    p.join()
    return r, s, False
  p.kill()
  p.join()
  return None, cap, True


def ask_capped(q: dict, form: str, budget: int, cap: float):
  """:func:`ask` in a child process killed after ``cap`` seconds: ``(answer, seconds, capped)``."""
  return run_capped(_ask_child, (q, form, budget), cap)


def injective_with_digits(self, keep, fix, drop, budget):
  """``AccessMap.injective`` until 2026-11-28: the digit variables kept as inputs, a tenth of the
  budget past two of them."""
  from minicomp.search.static.footprint.isl_build import isl_budgeted
  m = self.isl_map(keep)
  for p, v in fix.items(): m = m.fix_input_si(p, v)
  for p in sorted(drop, reverse=True): m = m.project_out(isl.dim_type.in_, p, 1)
  digits = m.dim(isl.dim_type.in_) - len(self.extents) + len(drop)
  return isl_budgeted(m.is_injective, budget if digits <= 2 else budget // 10)


def _movement_child(task, steps, form, conn):
  import strategies as S

  from minicomp.ir.lower import lower
  from minicomp.ir.schedule import Schedule
  from minicomp.search.static.footprint import isl_build
  from minicomp.search.static.footprint import analyze_program
  if form == "digits": isl_build.AccessMap.injective = injective_with_digits
  t0 = time.perf_counter()
  try: dms = analyze_program(lower(Schedule.from_json(S.task_dag(task), steps).state, "q"))
  except Exception as e:                # reported by the parent, not mistaken for a capped run
    dms = f"{type(e).__name__}: {e}"
  conn.send((dms, time.perf_counter() - t0))
  conn.close()


def movement_capped(task: str, steps: str, form: str, cap: float):
  """``(data movement of every kernel or None, seconds, capped)`` of one program, the injectivity
  test asked in ``form``, in a child process killed after ``cap`` seconds."""
  dms, s, capped = run_capped(_movement_child, (task, steps, form), cap)
  if isinstance(dms, str):
    print(f"  {task} ({form}): the analysis failed: {dms}", flush=True)
    return None, s, False
  return dms, s, capped


def _figures(dms) -> list[tuple[str, float]]:
  """Every number of a program's data movement (buffers, loop levels, access patterns), named by
  its field (``buffers.thread_sum``), in a fixed order."""
  import dataclasses
  out = []

  def walk(x, name: str) -> None:
    if dataclasses.is_dataclass(x):
      for f in dataclasses.fields(x):
        if f.name != "counts": walk(getattr(x, f.name), f"{name}.{f.name}" if name else f.name)
    elif isinstance(x, (tuple, list)):
      for y in x: walk(y, name)
    elif _number(x): out.append((name, float(x)))
  for d in dms: walk(d, "")
  return out


def _number(v) -> bool:
  return isinstance(v, (int, float)) and not isinstance(v, bool)


def _estimated(dms) -> int:
  """Figures of a program's data movement that are estimates: sampled distinct counts, and sums
  over blocks or threads taken from the first and last ones (``sums_exact`` False)."""
  return sum(dict(d.counts).get("sampled", 0) + sum(not b.sums_exact for b in d.buffers) for d in dms)


def movement(a) -> None:
  import concurrent.futures as cf
  progs = memo_programs(a.tasks.split(","), a.per_task, a.seed, a.memo)
  print(f"{len(progs)} programs ({sum(p[2] for p in progs)} that timed out) from {a.memo.name}; cap {a.cap} s; "
        f"{a.jobs} at a time", flush=True)
  one = lambda p: (p, movement_capped(p[0], p[1], "digits", a.cap), movement_capped(p[0], p[1], "projected", a.cap))
  rows = []
  with cf.ThreadPoolExecutor(a.jobs) as ex:
    for i, r in enumerate(ex.map(one, progs)):
      rows.append(r)
      if (i + 1) % 25 == 0: print(f"[{i + 1}/{len(progs)}]", flush=True)
  head = ["| task | programs | identical | differ | figures that differ | largest relative difference | "
          "estimated figures: digits / projected | capped: digits / projected | seconds, sum: digits / projected | "
          "seconds, max: digits / projected |",
          "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|"]
  groups: dict[str, list] = {}
  for r in rows: groups.setdefault(r[0][0], []).append(r)
  groups["all"] = rows
  for task, rs in groups.items():
    both = [(d[0], p[0]) for _, d, p in rs if d[0] is not None and p[0] is not None]
    same, worst, names = 0, 0.0, set()
    for d, p in both:
      fd, fp = _figures(d), _figures(p)
      if [n for n, _ in fd] != [n for n, _ in fp]:       # a figure one side has and the other not
        names.add("(which figures exist)"); worst = math.inf
        continue
      diff = [(n, x, y) for (n, x), (_, y) in zip(fd, fp) if x != y and not (math.isnan(x) and math.isnan(y))]
      same += not diff
      for n, x, y in diff:
        names.add(n); worst = max(worst, abs(x - y) / max(abs(x), abs(y)))
    est = lambda k: sum(_estimated(pair[k]) for pair in both)
    cap = lambda k: sum(1 for r in rs if r[k][2])
    tot = lambda k: sum(r[k][1] for r in rs)
    mx = lambda k: max(r[k][1] for r in rs)
    head.append(f"| {task} | {len(rs)} | {same} | {len(both) - same} | {', '.join(sorted(names)) or '-'} | {worst:.3f} | "
                f"{est(0)} / {est(1)} | {cap(1)} / {cap(2)} | {tot(1):.0f} / {tot(2):.0f} | {mx(1):.1f} / {mx(2):.1f} |")
  head += ["", "identical / differ: programs both forms analysed within the cap whose figures are all equal / not "
           "(an exactness flag is not a figure); estimated figures: over those programs; seconds: a capped run "
           "counts as the cap."]
  text = "\n".join(_header("### Data movement with the injectivity test asked with the digits (until 2026-11-28) "
                            "and with them projected out", a) + head) + "\n"
  print(text)
  if a.save:
    a.save.parent.mkdir(parents=True, exist_ok=True)
    a.save.write_text(text)
    print(f"saved {a.save}")


def _header(title: str, a) -> list[str]:
  import platform
  return [title, "", "```", "command: python research/isl_injective.py " + " ".join(sys.argv[1:]),
          f"date:    {time.strftime('%Y-%m-%dT%H:%M:%S%z')}",
          f"machine: nproc={mp.cpu_count()}, {platform.processor() or platform.machine()}, islpy "
          f"{__import__('islpy').version.VERSION_TEXT}; each in its own process, cap {a.cap} s, {a.jobs} at a time",
          "```", ""]


def _compare_one(args):
  q, budget, cap = args
  return q, ask_capped(q, "digits", OLD_BUDGET, cap), ask_capped(q, "projected", budget, cap)


def compare(a) -> None:
  with gzip.open(a.queries, "rt") as f: qs = [json.loads(ln) for ln in f]
  if a.limit: qs = qs[:a.limit]
  print(f"{len(qs)} questions from {a.queries}; projected at budget {a.budget}, cap {a.cap} s; {a.jobs} at a time",
        flush=True)
  rows = []
  import concurrent.futures as cf
  with cf.ThreadPoolExecutor(a.jobs) as ex:
    for i, r in enumerate(ex.map(_compare_one, [(q, a.budget, a.cap) for q in qs])):
      rows.append(r)
      if (i + 1) % 200 == 0: print(f"[{i + 1}/{len(qs)}]", flush=True)
  text = report(rows, a)
  print(text)
  if a.save:
    a.save.parent.mkdir(parents=True, exist_ok=True)
    a.save.write_text(text)
    print(f"saved {a.save}")


def _pct(xs, q):
  xs = sorted(xs)
  return xs[min(len(xs) - 1, math.ceil(q * len(xs)) - 1)] if xs else float("nan")


def report(rows, a) -> str:
  """The markdown table of one comparison."""
  lines = _header(f"### AccessMap.injective: digits as inputs (budget {OLD_BUDGET}, /10 past two digits) "
                  f"against digits projected out (budget {a.budget})", a) + [
           "| task | questions | digits: T / F / None | projected: T / F / None | disagree | only digits answers | "
           "only projected answers | digits s p50 / p99 / max | projected s p50 / p99 / max |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
  groups: dict[str, list] = {}
  for q, d, p in rows:
    groups.setdefault(q["task"], []).append((q, d, p))
  groups["all"] = rows
  for task, rs in groups.items():
    cnt = lambda k, v: sum(1 for r in rs if r[k][0] is v)
    dis = sum(1 for _, d, p in rs if d[0] is not None and p[0] is not None and d[0] != p[0])
    only_d = sum(1 for _, d, p in rs if d[0] is not None and p[0] is None)
    only_p = sum(1 for _, d, p in rs if p[0] is not None and d[0] is None)
    secs = lambda k: [r[k][1] for r in rs]
    capped = lambda k: sum(1 for r in rs if r[k][2])
    tm = lambda k: (f"{statistics.median(secs(k)):.3f} / {_pct(secs(k), 0.99):.2f} / {max(secs(k)):.1f}"
                    + (f" ({capped(k)} capped)" if capped(k) else ""))
    lines.append(f"| {task} | {len(rs)} | {cnt(1, True)} / {cnt(1, False)} / {cnt(1, None)} | "
                 f"{cnt(2, True)} / {cnt(2, False)} / {cnt(2, None)} | {dis} | {only_d} | {only_p} | {tm(1)} | {tm(2)} |")
  return "\n".join(lines) + "\n"


def main(argv=None) -> None:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  sub = ap.add_subparsers(dest="cmd", required=True)
  c = sub.add_parser("collect", help="record the questions the static model asks of the memo's programs")
  c.add_argument("--tasks", default="conv3x3,conv512,depthwise,matmul,bmm,convT,conv3d")
  c.add_argument("--per-task", type=int, default=40)
  c.add_argument("--seed", type=int, default=0)
  c.add_argument("--jobs", type=int, default=2)
  c.add_argument("--memo", type=Path, default=MEMO, help="a strategies.py memo (measured_*.jsonl)")
  c.add_argument("--queries", type=Path, default=OUT / "queries.jsonl.gz")
  k = sub.add_parser("compare", help="ask every recorded question both ways")
  k.add_argument("--queries", type=Path, default=OUT / "queries.jsonl.gz")
  k.add_argument("--budget", type=int, default=3000, help="isl operations for the projected form")
  k.add_argument("--cap", type=float, default=30.0, help="wall seconds before a question's process is killed")
  k.add_argument("--jobs", type=int, default=2)
  k.add_argument("--limit", type=int, default=0, help="only the first N questions (0: all)")
  k.add_argument("--save", type=Path)
  v = sub.add_parser("movement", help="the programs' data movement with the test asked each way")
  v.add_argument("--tasks", default="conv3x3,conv512,depthwise,matmul,bmm,convT,conv3d")
  v.add_argument("--per-task", type=int, default=40)
  v.add_argument("--seed", type=int, default=0)
  v.add_argument("--cap", type=float, default=150.0, help="wall seconds before a program's process is killed")
  v.add_argument("--jobs", type=int, default=2)
  v.add_argument("--memo", type=Path, default=MEMO, help="a strategies.py memo (measured_*.jsonl)")
  v.add_argument("--save", type=Path)
  a = ap.parse_args(argv)
  {"collect": collect, "compare": compare, "movement": movement}[a.cmd](a)


if __name__ == "__main__":
  main()
