"""The shared measuring pool (minicomp/search/workers.py): started once, reused warm by every measurer
without an executor, replaced when what its workers copied at start no longer holds or they died."""
from __future__ import annotations

import os

import pytest

from minicomp.search import workers as WK
from minicomp.search.measure import StaticMeasurer


def _pids(pool, n: int = 4) -> set[int]:
  return {f.result(timeout=120) for f in [pool.submit(WK.ping) for _ in range(n)]}


@pytest.fixture
def fresh_pools():
  WK.shutdown_pools()
  yield
  WK.shutdown_pools()


def test_measurers_without_an_executor_share_one_warm_pool(fresh_pools):
  with StaticMeasurer(workers=1) as a:
    first = _pids(a.executor)
  with StaticMeasurer(workers=1) as b:       # a later measurer: the same pool, the same live worker
    assert b.executor is a.executor
    assert _pids(b.executor) == first
  assert len(first) == 1 and os.getpid() not in first
  assert WK._pools[(1, False)][1] is a.executor     # (whose workers skip the main script: nothing registered here)
  assert StaticMeasurer(workers=2).executor is not a.executor     # another worker count, another pool


def test_a_changed_environment_gets_a_new_pool_whose_workers_see_it(fresh_pools, monkeypatch):
  old = WK.shared_pool(1)
  assert old.submit(os.getenv, "MINICOMP_TEST_POOL_ENV").result(timeout=120) is None
  monkeypatch.setenv("MINICOMP_TEST_POOL_ENV", "on")
  new = WK.shared_pool(1)
  assert new is not old
  assert new.submit(os.getenv, "MINICOMP_TEST_POOL_ENV").result(timeout=120) == "on"
  with pytest.raises(RuntimeError):          # the stale pool was stopped
    old.submit(WK.ping)
  monkeypatch.setenv("PYTEST_CURRENT_TEST", "another test")     # pytest's own per-test variable: ignored
  assert WK.shared_pool(1) is new


def test_restart_kills_the_workers_and_the_next_measurer_uses_the_fresh_pool(fresh_pools):
  pool = WK.work_pool(1)                     # (the measurers' pool: workers that skip the main script)
  procs = list(pool._processes.values()) if _pids(pool) else []
  fresh = WK.restart_pool(pool, 1)
  assert fresh is not pool and not any(p.is_alive() for p in procs)
  assert StaticMeasurer(workers=1).executor is fresh
  assert _pids(fresh).isdisjoint({p.pid for p in procs})


def test_a_pool_whose_workers_died_is_replaced(fresh_pools):
  pool = WK.shared_pool(1)
  _pids(pool)
  for p in list(pool._processes.values()): p.kill()
  with pytest.raises(Exception):             # the pool notices its dead worker: BrokenProcessPool
    pool.submit(WK.ping).result(timeout=120)
  again = WK.shared_pool(1)
  assert again is not pool and len(_pids(again)) == 1



def test_a_session_that_measured_exits_quietly(tmp_path):
  """The shared pool is stopped at exit, before Python tears its modules down: a pytest session (which
  keeps the test's objects to the end) that compiled with trials once printed concurrent.futures'
  ignored ``AttributeError: 'NoneType' object has no attribute 'util'`` as it ended."""
  import subprocess
  import sys
  (tmp_path / "test_one_compile.py").write_text(
    "import minicomp as mc\nfrom minicomp import zoo\n\n\n"
    "def test_compile(tmp_path):\n"
    "  model, _ = zoo.residual_block(c=4, hw=6)\n"
    "  mc.compile(model, target='sm_86', trials=2, strategy='random', measurer='static', progress=False,\n"
    "             log_file=str(tmp_path / 'log.jsonl'))\n")
  r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "test_one_compile.py"],
                     capture_output=True, text=True, timeout=300, cwd=tmp_path)
  out = r.stdout + r.stderr
  assert r.returncode == 0 and "1 passed" in out, out[-2000:]
  assert "Exception ignored" not in out and "Traceback" not in out, out[-2000:]


def test_a_script_without_a_main_guard_chooses_schedules_in_workers_that_skip_it(tmp_path):
  """The README's first script has no ``if __name__ == "__main__":``; spawned workers re-import the main script, so
  compile chose every schedule in one process (ResNet-18 at 224: 41 s against 21 s with the guard, 2 cores). Now
  its workers skip the script: it runs once, its kernels are those of one process, and the work left it. (A
  grouped block: its three convolutions are two groups of compile's, compiler.choose_defaults, so the pool is used.)"""
  import subprocess
  import sys
  ran = tmp_path / "ran.txt"
  script = tmp_path / "first.py"
  script.write_text(
    "import os, pathlib\nimport minicomp as mc\nfrom minicomp import zoo\nfrom minicomp.search import workers\n"
    f"with open({str(ran)!r}, 'a') as f: f.write(str(os.getpid()) + '\\n')\n"
    "model, _ = zoo.grouped_block(c=4, hw=6)\n"
    "one = mc.compile(model, target='sm_86', jobs=1, progress=False)\n"
    "two = mc.compile(model, target='sm_86', jobs=2, progress=False)\n"
    "print('same', [k.source for k in one.kernels] == [k.source for k in two.kernels], len(two.kernels))\n"
    "print('pools', sorted(workers._pools))\n")
  env = dict(os.environ, MINICOMP_CACHE_DIR=str(tmp_path / "cache"))     # (cold: nothing chosen before)
  env.pop("MINICOMP_JOBS", None)
  r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
  assert r.returncode == 0, r.stderr[-3000:]
  assert len(ran.read_text().split()) == 1                          # the script ran once: no worker ran it
  same = next(line for line in r.stdout.splitlines() if line.startswith("same")).split()
  assert same[1] == "True" and int(same[2]) >= 2
  assert "(2, False)" in r.stdout                                   # the main-free pool did the work


def test_a_script_that_registered_its_own_sketch_rule_keeps_the_work_here(fresh_pools, monkeypatch, caplog):
  """Workers that skip the main script would not know a rule it registered: such a script's work stays here."""
  import logging

  from minicomp.search.sketch_rules import DEFAULT_RULES
  from minicomp.search.sketch_types import SketchRule
  monkeypatch.setattr(WK, "_main_reimportable", lambda: False)
  assert WK._added_outside() is None
  pool = WK.own_work_pool(1, "testing")
  assert pool is not None and WK._pools[(1, False)][1] is pool
  assert pool.submit(WK.ping).result(timeout=120) != os.getpid()
  mine = type("MyRule", (SketchRule,), {"__module__": "__main__", "name": "mine"})
  DEFAULT_RULES.append(mine())
  try:
    with caplog.at_level(logging.INFO, logger="minicomp"):
      assert WK.own_work_pool(1, "testing") is None
    assert "sketch rule MyRule" in caplog.text and "testing in this process" in caplog.text
  finally:
    DEFAULT_RULES.pop()


def test_workers_import_the_main_script_only_for_a_rule_registered_outside_minicomp(monkeypatch):
  """The workers skip the main script, guarded or not (its imports would cost each worker seconds), unless a sketch
  rule is registered from outside minicomp: then they import a script they can re-import, and the work of one
  they cannot stays in this process (named in the log)."""
  from minicomp.search.sketch_rules import DEFAULT_RULES
  from minicomp.search.sketch_types import SketchRule
  monkeypatch.setattr(WK, "_main_reimportable", lambda: True)
  assert WK._main_needed() == (False, None)
  mine = type("TheirRule", (SketchRule,), {"__module__": "their_rules", "name": "theirs"})
  DEFAULT_RULES.append(mine())
  try:
    assert WK._main_needed() == (True, None)
    monkeypatch.setattr(WK, "_main_reimportable", lambda: False)
    assert WK._main_needed() == (True, "sketch rule TheirRule (module their_rules)")
  finally:
    DEFAULT_RULES.pop()
  assert WK._main_needed() == (False, None)


def test_share_work_runs_every_item_once_here_and_in_the_pool_and_takes_back_a_broken_pools():
  """share_work: each item runs once, here or in the pool (whose results come back through ``done``); a pool that
  breaks hands what it held back to this process, and is sent nothing more."""
  import concurrent.futures as cf
  import threading
  import time
  from concurrent.futures.process import BrokenProcessPool

  main = threading.get_ident()
  ran_here, got = [], {}

  def here(i):
    assert threading.get_ident() == main
    ran_here.append(i)
    time.sleep(0.01)

  def done(i, r):
    assert threading.get_ident() == main
    got[i] = r
  with cf.ThreadPoolExecutor(1) as pool:
    def submit(i):
      return pool.submit(lambda: (time.sleep(0.01), i * i)[1])
    returned, error = WK.share_work(list(range(12)), 1, here, submit, done)
  assert returned == [] and error is None
  assert sorted(ran_here + list(got)) == list(range(12)) and ran_here and got
  assert all(r == i * i for i, r in got.items())

  sent = []

  def broken(i):
    sent.append(i)
    f = cf.Future()
    f.set_exception(BrokenProcessPool("a worker died"))
    return f
  ran_here.clear()
  returned, error = WK.share_work(list(range(6)), 1, here, broken, done)
  assert isinstance(error, BrokenProcessPool) and returned and set(returned) <= set(sent)
  assert sorted(ran_here) == list(range(6)) and len(sent) == 1
