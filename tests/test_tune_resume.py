"""Tuning runs that end badly: killed mid-round, killed outright, or started where workers cannot start.
Each runs a small tuning script in a subprocess; none should mislead the next run or leave processes behind."""
import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from minicomp import workloads as W
from minicomp.graph.tasks import Task, task_kind, workload_key
from minicomp.ir.dag import ComputeDAG
from minicomp.search.measure import ErrorKind, Measurer, MeasureResult
from minicomp.search.records import load_records
from minicomp.search.tune import tune_tasks

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc, sends SIGKILL")

HEADER = """
import hashlib, sys, time
from minicomp import workloads as W
from minicomp.graph.tasks import Task, task_kind, workload_key
from minicomp.ir.dag import ComputeDAG
from minicomp.search.measure import Measurer, MeasureResult, StaticMeasurer
from minicomp.search.tune import tune_tasks

def task(wl):
  dag = ComputeDAG(wl.outputs)
  return Task(workload_key(dag), dag, task_kind(dag), 1, ["MatMul"], dag.flop_count())
"""


def _task(wl):
  dag = ComputeDAG(wl.outputs)
  return Task(workload_key(dag), dag, task_kind(dag), 1, ["MatMul"], dag.flop_count())


def _cost(steps: str) -> float:
  return 1e-6 * (1 + int(hashlib.sha256(steps.encode()).hexdigest()[:8], 16) % 1000)


class Fast(Measurer):
  def measure(self, inputs): return [MeasureResult(_cost(i.steps_json)) for i in inputs]


def _script(tmp_path, body: str) -> str:
  p = tmp_path / "tune_script.py"
  p.write_text(HEADER + textwrap.dedent(body))
  return str(p)


def _wait_for_lines(path: str, n: int, proc, timeout_s: float = 60.0) -> None:
  t0 = time.monotonic()
  while time.monotonic() - t0 < timeout_s:
    if os.path.exists(path) and len(open(path).read().splitlines()) >= n: return
    if proc.poll() is not None: pytest.fail(f"the tuning script ended early: {proc.communicate()[1].decode()[-2000:]}")
    time.sleep(0.02)
  proc.kill()
  pytest.fail(f"no {n} records in {timeout_s} s")


def _stat(pid: int) -> list[str] | None:
  try:
    text = open(f"/proc/{pid}/stat").read()
  except OSError:
    return None
  return text[text.rindex(")") + 2:].split()        # fields from the 3rd (state) on


def _descendants(pid: int) -> dict[int, str]:
  """pid -> start time of every process below ``pid`` (the start time tells a reused pid apart)."""
  kids: dict[int, list[int]] = {}
  for d in os.listdir("/proc"):
    if d.isdigit() and (st := _stat(int(d))) is not None: kids.setdefault(int(st[1]), []).append(int(d))
  out, todo = {}, [pid]
  while todo:
    for c in kids.get(todo.pop(), []):
      if (st := _stat(c)) is not None: out[c] = st[19]
      todo.append(c)
  return out


def _alive(pid: int, start: str) -> bool:
  st = _stat(pid)
  return st is not None and st[19] == start and st[0] != "Z"     # a zombie has exited


def _cmdline(pid: int) -> str:
  try: return open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()[:120]
  except OSError: return "?"


def test_a_killed_run_leaves_no_processes_behind(tmp_path):
  """SIGKILL the tuning process while its pool workers (and their NVRTC children: the NVRTC cache is off)
  measure: every process below it exits within seconds (they once lived on for minutes)."""
  log = str(tmp_path / "orphans.jsonl")
  script = _script(tmp_path, """
    if __name__ == "__main__":
      with StaticMeasurer(workers=2) as m:
        tune_tasks([task(W.matmul(32, 32, 32))], "sm_86", trials=100000, strategy="random", log_file=sys.argv[1],
                   measurer=m, measures_per_round=8)
  """)
  proc = subprocess.Popen([sys.executable, script, log], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          env={**os.environ, "MINICOMP_NVRTC_CACHE": "0"})
  try:
    _wait_for_lines(log, 1, proc)
    below = _descendants(proc.pid)
    names = {p: _cmdline(p) for p in below}
    assert sum("multiprocessing" in n for n in names.values()) >= 2, names       # the pool's workers
    assert any("nvrtc_worker" in n for n in names.values()), names
  finally:
    proc.send_signal(signal.SIGKILL)
    proc.wait()
  t0 = time.monotonic()
  while time.monotonic() - t0 < 10 and any(_alive(p, s) for p, s in below.items()): time.sleep(0.1)
  left = {p: names[p] for p, s in below.items() if _alive(p, s)}
  for p in left: os.kill(p, signal.SIGKILL)
  assert not left, f"alive 10 s after their tuning process was killed: {left}"


def test_a_script_without_a_main_guard_tunes_in_workers_that_skip_it(tmp_path):
  """Spawned workers re-import the main script; one without a __main__ guard once re-ran in every worker, which
  died, and the run stopped with a MeasureError. The workers now skip such a script (workers.work_pool): it
  tunes, and runs once."""
  log, ran = str(tmp_path / "noguard.jsonl"), tmp_path / "ran.txt"
  script = _script(tmp_path, f"""
    open({str(ran)!r}, "a").write("ran\\n")
    with StaticMeasurer(workers=1) as m:
      tune_tasks([task(W.matmul(16, 16, 16))], "sm_86", trials=4, strategy="random", log_file=sys.argv[1],
                 measurer=m, measures_per_round=4)
  """)
  proc = subprocess.run([sys.executable, script, log], capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert ran.read_text().split() == ["ran"]
  assert len(load_records(log)) == 4 and all(r.cost_s is not None for r in load_records(log))


def test_workers_that_cannot_start_stop_the_run_with_the_fix_and_use_no_budget(tmp_path):
  """A script without a __main__ guard that registers its own sketch rule: workers must re-import it to know the
  rule, re-run it and die. The run stops with a MeasureError that says how to fix it, and logs nothing, so the
  fixed script gets the whole budget (every trial was once logged as an internal error, the run exited 0 and a
  fixed rerun did no tuning)."""
  log = str(tmp_path / "guard.jsonl")
  script = _script(tmp_path, """
    from minicomp.search.sketch import register_rule
    from minicomp.search.sketch_types import Decision, SketchRule
    class Never(SketchRule):
      name = "never"
      def condition(self, ctx, s, i, info): return Decision.SKIP
    register_rule(Never())
    with StaticMeasurer(workers=1) as m:
      tune_tasks([task(W.matmul(16, 16, 16))], "sm_86", trials=4, strategy="random", log_file=sys.argv[1],
                 measurer=m, measures_per_round=4)
  """)
  proc = subprocess.run([sys.executable, script, log], capture_output=True, text=True, timeout=120)
  assert proc.returncode != 0
  assert "MeasureError" in proc.stderr and 'if __name__ == "__main__":' in proc.stderr, proc.stderr[-3000:]
  assert load_records(log) == []


def test_a_run_killed_mid_round_resumes_its_numbering_and_task_order(tmp_path):
  """Results are logged as they are measured: a kill in the second round keeps that round's finished
  results. The resume numbers trials on, and its first round goes to the task never measured (a resume once
  restarted the warm-up at task 0, so the last tasks of a killed run were never measured)."""
  log = str(tmp_path / "mid.jsonl")
  script = _script(tmp_path, """
    class Stalls(Measurer):              # stalls after 6 results, in the second round: the kill comes there
      done = 0
      def measure_iter(self, inputs):
        for i, inp in enumerate(inputs):
          if Stalls.done == 6: time.sleep(600)
          Stalls.done += 1
          yield i, MeasureResult(1e-6 * (1 + int(hashlib.sha256(inp.steps_json.encode()).hexdigest()[:8], 16) % 1000))
      def measure(self, inputs): return [r for _, r in self.measure_iter(inputs)]
    tasks = [task(W.matmul(16, 16, n)) for n in (16, 32, 48)]
    tune_tasks(tasks, "sm_86", trials=24, strategy="random", log_file=sys.argv[1], measurer=Stalls(),
               measures_per_round=4)
  """)
  proc = subprocess.Popen([sys.executable, script, log], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
  try:
    _wait_for_lines(log, 6, proc)
  finally:
    proc.send_signal(signal.SIGKILL)
    proc.wait()
  tasks = [_task(W.matmul(16, 16, n)) for n in (16, 32, 48)]
  recs = load_records(log)
  n = len(recs)
  assert n == 6 and [r.trial for r in recs] == list(range(n))               # mid-round: 4 + 2 of 4
  assert [r.workload_key for r in recs] == [tasks[0].key] * 4 + [tasks[1].key] * 2
  tune_tasks(tasks, "sm_86", trials=n + 6, strategy="random", log_file=log, measurer=Fast(), measures_per_round=4)
  recs = load_records(log)
  assert [r.trial for r in recs] == list(range(n + 6))
  assert recs[n].workload_key == tasks[2].key


def test_a_candidate_that_kills_its_worker_fails_alone():
  """A worker that dies on one candidate (here: its input ends the process as it is unpickled) is not a broken
  machinery: that candidate is an internal error, the others are measured in a fresh pool."""
  from minicomp.search.measure import MeasureInput, StaticMeasurer

  class Killer:
    def __reduce__(self): return os._exit, (3,)
  t = _task(W.matmul(16, 16, 16))
  from minicomp.ir.schedule import Schedule
  s = Schedule(t.dag)
  f = s.fuse("C", *s.axis("C"))
  bo, th = s.split("C", f, 64)
  s.bind("C", bo, "blockIdx.x"); s.bind("C", th, "threadIdx.x")
  good = MeasureInput(t.dag, s.to_json(), "sm_86")
  with StaticMeasurer(workers=1) as m:
    res = m.measure([good, MeasureInput(Killer(), "[]", "sm_86"), good])
  assert [r.error for r in res] == [ErrorKind.NONE, ErrorKind.INTERNAL, ErrorKind.NONE], [str(r) for r in res]
  assert "died measuring this candidate" in res[1].message
