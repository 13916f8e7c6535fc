"""Static-measured tuning throughput on a Ray cluster of 1 and 2 nodes on this machine, against the local
process pool; and, from measured per-candidate costs, what would limit it at 64 nodes.

    python benchmarks/cluster_throughput.py                 # ResNet-18 at 32x32, 192 trials per run
    python benchmarks/cluster_throughput.py --trials 384 --strategies ansor

Each run tunes the same model with the same seed from an empty log, once per strategy: ``random`` (the driver does
almost nothing: the executor's scaling) and ``ansor`` (the default: its cost model trains and its evolution
runs on the driver each round). Rounds hold ``trials / tasks`` candidates (at most 64). Trials per minute come from
the log's timestamps (first to last tuning record), so the compile before tuning does not count. Nodes are
``ray start`` processes of one CPU each (minicomp.search.ray_nodes); the local run uses the process pool of two
workers. The driver shares this machine's two cores with the nodes: 2 nodes cannot double 1 node here.

Per-candidate costs, for the 64-node estimate: a worker's seconds per candidate (replay, lower, emit, NVRTC,
static model), the driver's seconds per candidate (the strategy's proposals and cost-model training, appending
to the log: a run with a measurer that answers at once), Ray's overhead per task (no-op tasks through the
executor), and the bytes each candidate sends and receives.
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import tempfile
import time
from pathlib import Path


def _rate(log: Path) -> tuple[float, int]:
  recs = [json.loads(line) for line in log.read_text().splitlines()]
  ts = sorted(r["timestamp"] for r in recs if r["strategy"] != "default")
  return (len(ts) - 1) * 60.0 / (ts[-1] - ts[0]), len(ts)


def _tune(model, trials: int, strategy: str, log: Path, cluster=None) -> float:
  import minicomp
  minicomp.compile(model, target="sm_90", trials=trials, strategy=strategy, log_file=str(log), measurer="static",
                   seed=0, progress=False, cluster=cluster)
  return _rate(log)[0]


class _Instant:
  """A measurer that answers at once (a cost from the steps' hash): the driver's own time per candidate."""
  is_estimate = True

  def measure(self, inputs):
    import zlib
    from minicomp.search.measure import MeasureResult
    return [MeasureResult(1e-6 * (1 + zlib.crc32(i.steps_json.encode()) % 1000)) for i in inputs]


def _per_candidate(model, tmp: Path, c, trials: int, strategies: list[str]) -> dict:
  import minicomp
  from minicomp.search.measure import MeasureInput, _static_one
  from minicomp.search.records import load_records
  from minicomp.search.tune import tune_tasks
  recs = [r for r in load_records(tmp / f"{strategies[0]}-nodes2.jsonl") if r.strategy != "default"][:32]
  mod = minicomp.compile(model, target="sm_90", progress=False)
  tasks = {t.key: t for t in mod.tasks}
  inputs = [MeasureInput(tasks[r.workload_key].dag, r.steps_json, "sm_90", key=r.workload_key[:12]) for r in recs]
  t0 = time.perf_counter()
  results = [_static_one(i) for i in inputs]
  worker_s = (time.perf_counter() - t0) / len(inputs)
  driver_s = {}
  for s in strategies:
    tune_tasks(list({t.key: t for t in mod.tasks}.values()), "sm_90", trials=trials, strategy=s,
               log_file=str(tmp / f"{s}-instant.jsonl"), measurer=_Instant())
    driver_s[s] = 60.0 / _rate(tmp / f"{s}-instant.jsonl")[0]
  ex = c.executor(num_cpus=0)
  t0 = time.perf_counter()
  for f in [ex.submit(int, 1) for _ in range(200)]: f.result()
  ray_s = (time.perf_counter() - t0) / 200
  from ray import cloudpickle
  return {"worker_s": worker_s, "driver_s": driver_s, "ray_s": ray_s,
          "in_bytes": sum(len(cloudpickle.dumps(i)) for i in inputs) / len(inputs),
          "out_bytes": sum(len(pickle.dumps(r)) for r in results) / len(results)}


def _tasks(model):
  import minicomp
  return minicomp.compile(model, target="sm_90", progress=False).tasks


def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--trials", type=int, default=192)
  ap.add_argument("--strategies", default="random,ansor", help="comma-separated (default random,ansor)")
  ap.add_argument("--hw", type=int, default=32, help="ResNet-18's image side (default 32)")
  a = ap.parse_args()
  from minicomp import zoo
  from minicomp.search import cluster
  from minicomp.search.ray_nodes import LocalCluster
  model = zoo.resnet18(hw=a.hw, classes=10)[0]
  tmp = Path(tempfile.mkdtemp(prefix="minicomp-cluster-bench-"))
  strategies = a.strategies.split(",")
  runs = {}                                   # (strategy, run) -> trials/min
  for s in strategies: runs[s, "local"] = _tune(model, a.trials, s, tmp / f"{s}-local.jsonl")
  with LocalCluster(cpus=1) as lc:
    with cluster.connect(lc.address) as c:
      for s in strategies: runs[s, "nodes1"] = _tune(model, a.trials, s, tmp / f"{s}-nodes1.jsonl", c)
    lc.add_node(cpus=1)
    with cluster.connect(lc.address) as c:
      for s in strategies: runs[s, "nodes2"] = _tune(model, a.trials, s, tmp / f"{s}-nodes2.jsonl", c)
      costs = _per_candidate(model, tmp, c, a.trials, strategies)
  print(f"command: python benchmarks/cluster_throughput.py --trials {a.trials} --hw {a.hw} --strategies {a.strategies}"
        f"   ({os.cpu_count()} cores, {time.strftime('%Y-%m-%d')})")
  print(f"ResNet-18 {a.hw}x{a.hw} ({len({t.key for t in _tasks(model)})} tasks), static-model measurements, trials/min\n")
  print("| strategy | local pool (2 workers) | Ray, 1 node x 1 CPU | Ray, 2 nodes x 1 CPU | 2 nodes / 1 node |")
  print("|---|---:|---:|---:|---:|")
  for s in strategies:
    print(f"| {s} | {runs[s, 'local']:.0f} | {runs[s, 'nodes1']:.0f} | {runs[s, 'nodes2']:.0f} | "
          f"{runs[s, 'nodes2'] / runs[s, 'nodes1']:.2f}x |")
  w, r = costs["worker_s"], costs["ray_s"]
  print(f"\nper candidate: a worker's build + estimate {w * 1e3:.0f} ms; Ray {r * 1e3:.2f} ms per task (driver side); "
        f"{costs['in_bytes'] / 1e3:.1f} kB sent, {costs['out_bytes'] / 1e3:.2f} kB back; the driver's own time "
        + ", ".join(f"{s} {d * 1e3:.0f} ms" for s, d in costs["driver_s"].items()))
  workers = 64 * 60 / w
  for s, d in costs["driver_s"].items():
    ceiling = 60.0 / (d + r)
    print(f"64 nodes x 1 CPU, {s}: the workers could measure {workers:.0f}/min, the driver serves at most "
          f"{ceiling:.0f}/min -> {min(workers, ceiling):.0f}/min ({'the driver' if ceiling < workers else 'the workers'} "
          f"limit); traffic {min(workers, ceiling) * (costs['in_bytes'] + costs['out_bytes']) / 60e6:.2f} MB/s")


if __name__ == "__main__":
  main()
