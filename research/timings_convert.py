"""Convert the project's GPU timings to the timings dataset format (``minicomp.search.static.timings``).

The H200 timings of 2026-11-27 (``benchmarks/results/strategies/gpu/h200_*``: selections + measurements,
joined by digest; a program timed in several folders gets the median) and the H100 timings of 2026-11-24
(``benchmarks/data/h100-2026-11-24/measured.jsonl``) are joined with the static model's facts of each
program that ``static_top_end.py facts`` saved (``research/results/static_top_end/facts_*.jsonl.gz``), and
written as ``benchmarks/data/<gpu>-<date>/timings.jsonl.gz``, the files ``minicomp calibrate``, the tests and
``benchmarks/static_model_fidelity.py --calibration`` read. Run once; kept to say how the files were made.

``--measured DIR`` converts one later ``strategies_gpu.py measure`` folder instead (its selection beside it), with
the facts computed now, for the H200 (as ``minicomp collect`` computes them), to ``--out``:

  python research/timings_convert.py
  python research/timings_convert.py --measured benchmarks/results/strategies/gpu/picks_2026-11-30 \
    --out benchmarks/data/h200-2026-11-30/picks.jsonl.gz
"""
from __future__ import annotations

import gzip
import os
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "benchmarks")]

import static_top_end as S  # noqa: E402
from minicomp.search.static import timings as T  # noqa: E402

DATA = HERE.parent / "benchmarks" / "data"
FACTS_BY = "4b6299e"        # the minicomp commit static_top_end.py computed the facts with (its reports' header)
CALLS = {   # strategies.py's tasks as minicomp.workloads calls (the ConvTranspose and Conv3d are ONNX nodes: none)
  "conv3x3": "minicomp.workloads.conv2d(1, 64, 56, 56, 64, 3, 1, 1)",
  "conv512": "minicomp.workloads.conv2d(1, 512, 7, 7, 512, 3, 1, 1)",
  "depthwise": "minicomp.workloads.depthwise_conv2d(1, 32, 112, 112, 3, 1, 1)",
  "matmul": "minicomp.workloads.matmul(1024, 1024, 1024)",
  "bmm": "minicomp.workloads.batch_matmul(12, 128, 128, 64)",
  "softmax": "minicomp.workloads.softmax(4096, 1024)",
}
H100_TASKS = {"conv_resnet_56x56x64": "conv3x3", "depthwise_112x112x32": "depthwise", "matmul_1024": "matmul",
              "softmax_4096x1024": "softmax", "layernorm_4096x768": "layernorm"}


def _facts(path: Path) -> dict:
  return {(r["task"], r["digest"]): r for r in S._read_facts(path) if "facts" in r}


def convert(progs: dict, facts: dict, gpu: str, date: str, rename=lambda t: t) -> list[T.Timing]:
  out = []
  for (task, dig), p in sorted(progs.items()):
    f = facts.get((task, dig))
    out.append(T.Timing(rename(task), p["call"] or CALLS.get(task), "sm_90", p["steps"], gpu, date,
                        float(statistics.median(p["gpu_s"])), True,
                        {"device": "h100", "minicomp": FACTS_BY, "launches": f["facts"]} if f else None))
  return out


def write(rows: list[T.Timing], path: Path) -> None:
  with gzip.open(path, "wt") as f:
    for r in rows: f.write(r.to_json() + "\n")
  print(f"{path}: {len(rows)} programs, {sum(r.facts is not None for r in rows)} with facts")


def _timing(task: str, p: dict, gpu: str, date: str) -> T.Timing:
  import minicomp as mc
  from minicomp.search.collect import program_facts
  from minicomp.target import get_device
  kern = mc.build(mc.Schedule.from_json(S.G.dag_of(task).outputs, S.G.replayable(p["steps"])), target="sm_90")
  return T.Timing(task, CALLS.get(task), "sm_90", p["steps"], gpu, date, float(statistics.median(p["gpu_s"])), True,
                  program_facts(kern, get_device("h200")))


def measured_folder(folder: Path, out: Path, jobs: int) -> None:
  """One measure folder's correct programs, their facts computed by this checkout for the H200 (``jobs``
  processes build them)."""
  import concurrent.futures as cf
  import json
  meta = json.loads((folder / S.G.META).read_text())
  progs = sorted(S.timed_programs([folder]).items())
  with cf.ProcessPoolExecutor(jobs) as pool:
    rows = list(pool.map(_timing, [t for (t, _), _ in progs], [p for _, p in progs],
                         [meta["gpu"].split(" (")[0]] * len(progs), [meta["date"]] * len(progs), chunksize=8))
  out.parent.mkdir(parents=True, exist_ok=True)
  write(rows, out)


def main() -> None:
  import argparse
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--measured", type=Path, help="a strategies_gpu.py measure folder to convert instead")
  ap.add_argument("--out", type=Path, help="with --measured: the timings file to write")
  ap.add_argument("--jobs", type=int, default=os.cpu_count(), help="with --measured: processes building programs")
  a = ap.parse_args()
  if a.measured:
    if not a.out: ap.error("--measured needs --out")
    return measured_folder(a.measured, a.out, a.jobs)
  folders = sorted((HERE.parent / "benchmarks/results/strategies/gpu").glob("h200_*"))
  h200 = convert(S.timed_programs(folders), _facts(S.OUT / "facts_h200_2026-11-27.jsonl.gz"), "NVIDIA H200",
                 "2026-11-27")
  write(h200, DATA / "h200-2026-11-27" / "timings.jsonl.gz")
  h100 = convert(S.timed_records(DATA / "h100-2026-11-24/measured.jsonl", S.H100_GPU),
                 _facts(S.OUT / "facts_h100_2026-11-24.jsonl.gz"), "NVIDIA H100 80GB HBM3", "2026-11-24",
                 rename=lambda t: H100_TASKS.get(t, t))
  write(h100, DATA / "h100-2026-11-24" / "timings.jsonl.gz")


if __name__ == "__main__":
  main()
