"""Tensor cores against the FP32 pipes, by the static model: what ``compile`` would keep, and what it costs.

    python benchmarks/tensor_cores.py                        # a100 and h100; fp16 and bf16
    python benchmarks/tensor_cores.py --targets h100 --dtypes float16 --only matmul_4096
    python benchmarks/tensor_cores.py --gpu                  # on a GPU machine: measured, and PyTorch's time
    python benchmarks/tensor_cores.py --tune 64 --targets a100 --dtypes float16   # the tuners on the same kernels

``--gpu`` measures the same kernels (built for the GPU's own arch) with ``GPUMeasurer`` (CUDA events, L2 flushed,
median, the result checked against the CPU simulator for small outputs) and times ``torch.matmul`` /
``torch.nn.functional.conv2d`` in the same dtype where torch is importable (cuBLAS / cuDNN, tensor cores allowed);
without a GPU it says so and stops.

Per workload, dtype and device: the ESTIMATE (no GPU) of the best tensor-core schedule of
``graph/tensor_core_schedules.py`` and of the best of Gensor's constructed FP32-pipe candidates (what
``compile`` compares, ``compiler._construct``), their ratio, and the seconds each took to construct and build.
Models are compiled whole (autocast with ``precision="fp16"`` / ``"bf16"``), with and without tensor-core
candidates: a BERT-base layer (``zoo.bert_tiny(layers=1, d=768, heads=12, ff=3072)``, sequence 128), a ViT-B layer
(the same at 197 tokens) and ResNet-18 at 64 x 64 (``zoo.resnet18(hw=64)``) and at 224 x 224 (its 28 x 28, 14 x 14
and 7 x 7 stages: output rows no multiple of 8 pixels). Workloads: matmul 4096^3; ResNet's 3 x 3 convolutions on
56 x 56 x 64, 14 x 14 x 256 and 7 x 7 x 512, their weights channels-last as ``compile`` stores them for the tensor
cores (graph/layout.py).
"""
from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import minicomp as mc  # noqa: E402
from minicomp import workloads as W  # noqa: E402

KERNELS = {
  "matmul_4096": lambda dt: W.matmul(4096, 4096, 4096, dtype=dt),
  "conv3x3_56x56x64": lambda dt: W.conv2d(1, 64, 56, 56, 64, 3, pad=1, dtype=dt, channels_last_weights=True),
  # ResNet's later stages: rows of 14 and 7 pixels, in 2-D tiles of 16 and 8 that overhang them
  "conv3x3_14x14x256": lambda dt: W.conv2d(1, 256, 14, 14, 256, 3, pad=1, dtype=dt, channels_last_weights=True),
  "conv3x3_7x7x512": lambda dt: W.conv2d(1, 512, 7, 7, 512, 3, pad=1, dtype=dt, channels_last_weights=True),
}
MODELS = {"bert": ("bert_base_layer (s128)", "bert_tiny", {"s": 128, "layers": 1, "d": 768, "heads": 12, "ff": 3072}),
          "vit": ("vit_base_layer (s197)", "bert_tiny", {"s": 197, "layers": 1, "d": 768, "heads": 12, "ff": 3072}),
          "resnet18": ("resnet18 (64x64)", "resnet18", {"hw": 64}),
          "resnet18_224": ("resnet18 (224x224)", "resnet18", {"hw": 224})}


def _best(scheds, tgt):
  from minicomp.search.static.estimate import estimate
  best = None
  for s in scheds:
    k = mc.build(s, target=tgt)
    us = estimate(k, tgt).latency_s * 1e6
    best = us if best is None else min(best, us)
  return best


def kernel_row(name: str, dtype: str, device: str) -> list[str]:
  from minicomp.graph.tensor_core_schedules import tensor_core_schedules
  from minicomp.ir.dag import ComputeDAG
  from minicomp.search.strategies.gensor import CONSTRUCT_SEED, compared, construct
  tgt = mc.Target(device)
  dag = ComputeDAG(KERNELS[name](dtype).outputs)
  t0 = time.perf_counter()
  tc = _best(tensor_core_schedules(dag, tgt), tgt)
  t1 = time.perf_counter()
  fp32 = _best([c.schedule for c in compared(construct(dag, tgt, seed=CONSTRUCT_SEED))], tgt)
  t2 = time.perf_counter()
  ratio = f"{fp32 / tc:.2f}" if tc and fp32 else "-"
  return [name, dtype, device, f"{tc:.1f}" if tc else "-", f"{fp32:.1f}" if fp32 else "-", ratio,
          f"{t1 - t0:.1f}", f"{t2 - t1:.1f}"]


def tune_rows(name: str, dtype: str, device: str, trials: int, strategies: list[str]) -> list[list[str]]:
  """``trials`` static-model measurements of each strategy on one workload (the sketches include the tensor-core
  one, docs/search.md) against compile's template: the best program found, and whether it is tensorized."""
  import json
  from minicomp.graph.tasks import Task, task_kind, workload_key
  from minicomp.graph.tensor_core_schedules import tensor_core_schedules
  from minicomp.ir.dag import ComputeDAG
  from minicomp.search.tune import tune_tasks
  tgt = mc.Target(device)
  dag = ComputeDAG(KERNELS[name](dtype).outputs)
  template = _best(tensor_core_schedules(dag, tgt), tgt)
  task = Task(workload_key(dag), dag, task_kind(dag), 1, [name], dag.flop_count())
  rows = []
  for strat in strategies:
    with tempfile.TemporaryDirectory() as d:
      log = Path(d) / "tune.jsonl"
      t0 = time.perf_counter()
      tune_tasks([task], tgt, trials=trials, strategy=strat, log_file=str(log), measurer="static", seed=0)
      secs = time.perf_counter() - t0
      recs = [json.loads(line) for line in log.read_text().splitlines()]
    ok = [r for r in recs if r["error"] == "ok"]
    best = min(ok, key=lambda r: r["cost_s"])
    n_tc = sum('"tensorize"' in json.dumps(r["steps"]) for r in ok)
    rows.append([name, dtype, device, f"{template:.1f}", strat, f"{len(recs)} ({n_tc} TC)", f"{best['cost_s'] * 1e6:.1f}",
                 "yes" if '"tensorize"' in json.dumps(best["steps"]) else "no", f"{best['cost_s'] * 1e6 / template:.2f}",
                 f"{secs:.0f}"])
    print("  " + "  ".join(rows[-1]), file=sys.stderr, flush=True)
  return rows


def _print_table(rows: list[list[str]]) -> None:
  widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
  for k, r in enumerate(rows):
    print("  ".join(x.ljust(w) for x, w in zip(r, widths)).rstrip())
    if k == 0: print("  ".join("-" * w for w in widths))


TORCH = {   # the same workloads through PyTorch: (input shapes, call)
  "matmul_4096": ([(4096, 4096), (4096, 4096)], lambda F, a, b: a @ b),
  "conv3x3_56x56x64": ([(1, 64, 56, 56), (64, 64, 3, 3)], lambda F, x, w: F.conv2d(x, w, padding=1)),
  "conv3x3_14x14x256": ([(1, 256, 14, 14), (256, 256, 3, 3)], lambda F, x, w: F.conv2d(x, w, padding=1)),
  "conv3x3_7x7x512": ([(1, 512, 7, 7), (512, 512, 3, 3)], lambda F, x, w: F.conv2d(x, w, padding=1)),
}


def _torch_s(name: str, dtype: str) -> float | None:
  """PyTorch's median seconds for ``name`` in ``dtype`` (events, L2 flushed), or None without torch."""
  try:
    import torch
    import torch.nn.functional as F
  except ImportError:
    return None
  import statistics
  torch.backends.cudnn.benchmark = True
  t = {"float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
  shapes, op = TORCH[name]
  xs = [torch.randn(sh, device="cuda", dtype=t) for sh in shapes]
  flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
  for _ in range(3): op(F, *xs)
  torch.cuda.synchronize()
  a, b, ts = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True), []
  while len(ts) < 200 and (sum(ts) < 0.2 or len(ts) < 5):
    flush.zero_()
    a.record(); op(F, *xs); b.record(); b.synchronize()
    ts.append(a.elapsed_time(b) / 1e3)
  return statistics.median(ts)


def gpu_rows(dtypes: list[str], names: list[str]) -> list[list[str]]:
  """Measured on this machine's GPU: the best-estimated tensor-core and FP32-pipe kernels, and PyTorch."""
  from minicomp.graph.tensor_core_schedules import tensor_core_schedules
  from minicomp.ir.dag import ComputeDAG
  from minicomp.search.measure import GPUMeasurer, MeasureInput
  from minicomp.search.static.estimate import estimate
  from minicomp.search.strategies.gensor import CONSTRUCT_SEED, compared, construct
  tgt = mc.Target("cuda")
  measurer = GPUMeasurer()
  rows = []
  for dtype in dtypes:
    for name in [n for n in names if n in KERNELS]:
      dag = ComputeDAG(KERNELS[name](dtype).outputs)
      best = {}
      for side, scheds in (("tc", tensor_core_schedules(dag, tgt)),
                           ("fp32", [c.schedule for c in compared(construct(dag, tgt, seed=CONSTRUCT_SEED))])):
        est = [(estimate(mc.build(sc, target=tgt), tgt).latency_s, sc) for sc in scheds]
        if est: best[side] = min(est, key=lambda e: e[0])[1]
      got = {side: measurer.measure([MeasureInput(dag, sc.to_json(), tgt.arch, name)])[0] for side, sc in best.items()}
      us = {side: f"{r.cost_s * 1e6:.1f}" if r.ok else f"failed: {r.error.name}" for side, r in got.items()}
      torch_s = _torch_s(name, dtype)
      ratio = f"{got['tc'].cost_s / torch_s:.2f}" if torch_s and "tc" in got and got["tc"].ok else "-"
      rows.append([name, dtype, tgt.device_name or tgt.arch, us.get("tc", "-"), us.get("fp32", "-"),
                   f"{torch_s * 1e6:.1f}" if torch_s else "-", ratio])
      print("  " + "  ".join(rows[-1]), file=sys.stderr, flush=True)
    for name in [n for n in names if n in MODELS]:
      rows.append(gpu_model_row(name, dtype, tgt.device_name or tgt.arch))
      print("  " + "  ".join(rows[-1]), file=sys.stderr, flush=True)
  return rows


def gpu_model_row(name: str, dtype: str, gpu: str) -> list[str]:
  """One of MODELS autocast to ``dtype``, compiled for this GPU with and without tensor-core candidates, measured
  end to end (CUDA-graph replay) beside its PyTorch twin (benchmarks/precision.py's ``gpu_row``)."""
  from precision import gpu_row
  label, builder, kw = MODELS[name]
  precision = {"float16": "fp16", "bfloat16": "bf16"}[dtype]
  cells = {}
  for tc in ("1", "0"):
    old = os.environ.get("MINICOMP_TENSOR_CORES")
    os.environ["MINICOMP_TENSOR_CORES"] = tc
    try:
      cells[tc], _ = gpu_row(name, builder, kw, precision)
    finally:
      if old is None: os.environ.pop("MINICOMP_TENSOR_CORES")
      else: os.environ["MINICOMP_TENSOR_CORES"] = old
  (us, n_tc, torch_us, ratio, _), (fp_us, *_) = cells["1"], cells["0"]
  return [label, dtype, gpu, f"{us} ({n_tc} TC)", fp_us, torch_us, ratio]


def model_row(name: str, dtype: str, device: str) -> list[str]:
  """One of MODELS compiled whole in fresh processes, with and without tensor-core candidates."""
  out = {}
  for tc in (True, False):
    with tempfile.TemporaryDirectory() as cache:
      env = dict(os.environ, MINICOMP_CACHE_DIR=cache, MINICOMP_TENSOR_CORES="1" if tc else "0")
      r = subprocess.run([sys.executable, __file__, "--model-child", name, dtype, device], env=env,
                         capture_output=True, text=True, check=True)
      out[tc] = [float(x) for x in r.stdout.split()[-3:]]
  (tc_us, n, tc_s), (fp_us, _, fp_s) = out[True], out[False]
  return [MODELS[name][0], dtype, device, f"{tc_us:.1f} ({int(n)} TC)", f"{fp_us:.1f}", f"{fp_us / tc_us:.2f}",
          f"{tc_s:.1f}", f"{fp_s:.1f}"]


def model_child(name: str, dtype: str, device: str) -> None:
  from minicomp import zoo
  _, builder, kwargs = MODELS[name]
  model, _ = getattr(zoo, builder)(**kwargs)
  t0 = time.perf_counter()
  cm = mc.compile(model, target=device, precision={"float16": "fp16", "bfloat16": "bf16"}[dtype], progress=False)
  secs = time.perf_counter() - t0
  print(cm.estimate().latency_s * 1e6, cm.stats.tensor_cores, secs)


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--targets", nargs="+", default=["a100", "h100"])
  ap.add_argument("--dtypes", nargs="+", default=["float16", "bfloat16"])
  ap.add_argument("--only", nargs="+", default=[*KERNELS, *MODELS], choices=[*KERNELS, *MODELS])
  ap.add_argument("--model-child", nargs=3, help=argparse.SUPPRESS)
  ap.add_argument("--gpu", action="store_true", help="measure on this machine's GPU (and PyTorch, where importable)")
  ap.add_argument("--tune", type=int, metavar="TRIALS", help="tune each kernel workload with --strategies instead "
                  "(TRIALS static-model measurements each) and compare the best program with compile's template")
  ap.add_argument("--strategies", nargs="+", default=["random", "ansor", "opevo"])
  args = ap.parse_args()
  if args.model_child:
    model_child(*args.model_child)
    return 0
  if args.tune:
    rows = [["workload", "dtype", "device", "template us", "strategy", "measured", "best us", "best on TC",
             "best / template", "s"]]
    for device in args.targets:
      for dtype in args.dtypes:
        for name in [n for n in args.only if n in KERNELS]:
          rows += tune_rows(name, dtype, device, args.tune, args.strategies)
    print(f"command:  python benchmarks/tensor_cores.py {' '.join(sys.argv[1:])}")
    print(f"date:     {datetime.now(timezone.utc).isoformat(timespec='seconds')}")
    print(f"machine:  nproc={os.cpu_count()}, {platform.processor() or platform.machine()}; every latency a static-model "
          "ESTIMATE (no GPU); template: the best of compile's tensor-core candidates; measured: the log's records "
          "(those on tensor cores)")
    _print_table(rows)
    return 0
  if args.gpu:
    if not mc.gpu_available():
      print(f"no GPU: {mc.gpu_status()}; run without --gpu for the static model's estimates")
      return 1
    rows = [["workload", "dtype", "GPU", "tensor cores us", "FP32 pipes us", "PyTorch us", "TC / PyTorch"]] + \
        gpu_rows(args.dtypes, args.only)
    print(f"command:  python benchmarks/tensor_cores.py {' '.join(sys.argv[1:])}")
    print(f"date:     {datetime.now(timezone.utc).isoformat(timespec='seconds')}")
    print(f"gpu:      {mc.gpu_status()}; measured (CUDA events, L2 flushed, median); the kernels: the best by the static "
          "model of each side, built for this GPU's arch")
    _print_table(rows)
    return 0
  head = ["workload", "dtype", "device", "tensor cores us", "FP32 pipes us", "speedup", "TC s", "FP32 s"]
  rows = [head]
  for device in args.targets:
    for dtype in args.dtypes:
      for name in args.only:
        rows.append(model_row(name, dtype, device) if name in MODELS else kernel_row(name, dtype, device))
        print("  " + "  ".join(rows[-1]), file=sys.stderr, flush=True)
  print(f"command:  python benchmarks/tensor_cores.py {' '.join(sys.argv[1:])}".rstrip())
  print(f"date:     {datetime.now(timezone.utc).isoformat(timespec='seconds')}")
  print(f"machine:  nproc={os.cpu_count()}, {platform.processor() or platform.machine()}; every latency a static-model "
        "ESTIMATE (no GPU)")
  print("kernels: best tensor-core schedule vs best of Gensor's FP32 candidates; TC s / FP32 s: seconds to construct "
        "and build them. bert, resnet18: the whole model compiled with / without tensor-core candidates (TC s / FP32 s: "
        "compile)")
  _print_table(rows)
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
