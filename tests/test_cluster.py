"""Tuning on a real Ray cluster of two nodes on this machine (issue 50): each node is its own `ray start`
process with its own raylet and one CPU; the second also offers a (fake) GPU and the `sm_90` resource.
Ray is part of the test extras: these tests run in CI, without a GPU."""
import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import minicomp
from minicomp import zoo
from minicomp.errors import ClusterError, TuneError
from minicomp.ir.dag import ComputeDAG
from minicomp.search import cluster
from minicomp.search.measure import ErrorKind, MeasureInput
from minicomp.search.ray_nodes import LocalCluster, free_port
from minicomp.search.records import load_records
from minicomp.search.strategies.gensor import construct
from minicomp.target import as_target
from minicomp.workloads import matmul

TESTS = str(Path(__file__).parent)
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def two_nodes():
  """A head (1 CPU) and a node with 1 CPU, a GPU and `sm_90` (fake_gpu.setup_worker makes it a fake H100)."""
  with LocalCluster(cpus=1, env={"PYTHONPATH": TESTS}) as lc:
    lc.add_node(cpus=1, gpus=1, resources={"sm_90": 1})
    yield lc


def _ort(m, feeds):
  import onnxruntime as ort
  s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
  return s.run(None, feeds)


def _fields(path):
  """What a record says about the search (not when or by which process): sorted by trial."""
  return sorted((r.trial, r.strategy, r.workload_key, r.steps_json, r.cost_s, r.error) for r in load_records(path))


TUNE = dict(target="sm_90", trials=32, measurer="static", measures_per_round=8, seed=3, progress=False)


def test_tuning_over_two_nodes_logs_what_a_local_run_logs(two_nodes, tmp_path):
  m, feeds = zoo.residual_block()
  minicomp.compile(m, log_file=str(tmp_path / "local.jsonl"), **TUNE)
  with cluster.connect(two_nodes.address) as c:
    cm = minicomp.compile(m, log_file=str(tmp_path / "cluster.jsonl"), cluster=c, **TUNE)
    per_node = c.tasks_per_node()
  assert len(per_node) == 2 and min(per_node.values()) > 0, per_node        # both nodes measured
  got = _fields(tmp_path / "cluster.jsonl")
  trials = [f[0] for f in got if f[1] != "default"]
  assert trials == list(range(32))                                          # 32 records, none twice
  assert all(f[5] == "ok" for f in got)
  assert got == _fields(tmp_path / "local.jsonl")                           # the same search, the same costs
  for a, b in zip(cm.run(feeds), _ort(m, feeds)): np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_a_node_killed_mid_run_costs_at_most_its_candidates_in_flight(tmp_path):
  m, feeds = zoo.residual_block()
  log = tmp_path / "kill.jsonl"
  with LocalCluster(cpus=1) as lc:
    doomed = lc.add_node(cpus=1)
    seen = {}

    def kill_after(n: int):
      while not log.exists() or len(log.read_text().splitlines()) < n: time.sleep(0.01)
      seen["lines"] = len(log.read_text().splitlines())
      lc.kill_raylet(doomed)
    killer = threading.Thread(target=kill_after, args=(10,), daemon=True)
    with cluster.connect(lc.address) as c:
      killer.start()
      cm = minicomp.compile(m, log_file=str(log), cluster=c, **{**TUNE, "trials": 48})
      killer.join(timeout=30)
      deadline = time.monotonic() + 30
      while c.watch() > 1 and time.monotonic() < deadline: time.sleep(0.2)
      assert c.watch() == 1                                                  # the node is gone ...
  assert 10 <= seen["lines"] < 48                                            # ... and went mid-run
  recs = [r for r in load_records(log) if r.strategy != "default"]
  assert sorted(r.trial for r in recs) == list(range(48))                    # nothing lost, nothing twice
  lost = [r for r in recs if r.error == ErrorKind.LOST.value]
  assert all(r.ok or r in lost for r in recs) and len(lost) <= 2             # at most the node's in-flight ones
  for a, b in zip(cm.run(feeds), _ort(m, feeds)): np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def _matmul_inputs(n: int) -> list[MeasureInput]:
  dag = ComputeDAG(matmul(32, 32, 32).outputs)
  cands = construct(dag, as_target("sm_90"), seed=0).candidates[:n]
  return [MeasureInput(dag, c.key, "sm_90", key="mm") for c in cands]


def test_gpu_measurements_run_on_the_node_with_the_arch_and_a_gpu(two_nodes):
  with cluster.connect(two_nodes.address, setup="fake_gpu.setup_worker") as c:
    tgt = as_target("sm_90")
    assert not minicomp.search.tune.measures_estimates(None, tgt, c)          # a GPU of the arch: timings
    assert minicomp.search.tune.measures_estimates(None, as_target("sm_80"), c)
    gpu_node = c.gpu_nodes("sm_90")[0]["NodeID"]
    m = c.measurer(False, "sm_90")
    res = m.measure(_matmul_inputs(2))
    assert [r.error for r in res] == [ErrorKind.NONE] * 2, [str(r) for r in res]
    assert not any(r.is_estimate for r in res) and all(r.cost_s > 0 for r in res)
    assert set(m.timings.per_node) == {gpu_node} and sum(m.timings.per_node.values()) == 2
    with pytest.raises(ClusterError, match="no alive node .* 'sm_80'"):
      c.measurer(False, "sm_80")


def test_nodes_that_estimate_otherwise_are_refused_before_any_measurement(two_nodes, monkeypatch):
  monkeypatch.setenv("MINICOMP_STATIC_MODEL", "uncalibrated")                 # the driver only
  with cluster.connect(two_nodes.address) as c:
    with pytest.raises(ClusterError, match="calibration"):
      c.measurer(True, "sm_90")


def test_an_unreachable_cluster_fails_fast_and_clearly(tmp_path):
  m, _ = zoo.residual_block()
  port = free_port()
  t0 = time.monotonic()
  with pytest.raises(ClusterError, match=f"cannot reach the Ray cluster at ray://127.0.0.1:{port}"):
    cluster.connect(f"ray://127.0.0.1:{port}")
  with pytest.raises(ClusterError, match="cannot reach"):
    minicomp.compile(m, trials=8, log_file=str(tmp_path / "x.jsonl"), cluster=f"127.0.0.1:{port}")
  assert time.monotonic() - t0 < 20 and not (tmp_path / "x.jsonl").exists()   # before any work
  with pytest.raises(ClusterError, match="expected 'ray://HOST:PORT'"):
    cluster.connect("no-port-here")
  with pytest.raises(TuneError, match="cluster must be"):
    minicomp.compile(m, trials=8, cluster=42)


def test_cli_tune_on_a_cluster_through_ray_client(two_nodes, tmp_path):
  from minicomp.cli import main
  m, _ = zoo.residual_block()
  path = tmp_path / "m.onnx"
  path.write_bytes(m.SerializeToString())
  # sm_86: no node offers it, so the static model measures (the CLI has no --measurer)
  rc = main(["tune", str(path), "--target", "sm_86", "--trials", "8", "--per-round", "8", "--log",
             str(tmp_path / "t.jsonl"), "--cluster", two_nodes.client_address, "-q"])   # through Ray Client
  assert rc == 0
  recs = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
  assert sum(r["strategy"] != "default" for r in recs) == 8


def test_a_driver_killed_mid_run_resumes_from_its_log(two_nodes, tmp_path):
  import signal
  import subprocess
  import sys
  m, _ = zoo.residual_block()
  model, log = tmp_path / "m.onnx", tmp_path / "d.jsonl"
  model.write_bytes(m.SerializeToString())
  cmd = [sys.executable, "-m", "minicomp.cli", "tune", str(model), "--target", "sm_86", "--trials", "40",
         "--per-round", "4", "--log", str(log), "--cluster", two_nodes.address, "-q"]
  p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
  deadline = time.monotonic() + 240
  while (not log.exists() or len(log.read_text().splitlines()) < 12) and p.poll() is None and time.monotonic() < deadline:
    time.sleep(0.02)
  p.send_signal(signal.SIGKILL)
  p.wait(timeout=30)
  done = [r for r in load_records(log) if r.strategy != "default"]
  assert 0 < len(done) < 40, p.stderr.read().decode()[-2000:]               # killed mid-run
  r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr[-2000:]
  recs = [r for r in load_records(log) if r.strategy != "default"]
  assert len(recs) == 40 and len({r.trial for r in recs}) == 40              # resumed: none lost, none twice
  assert recs[:len(done)] == done
