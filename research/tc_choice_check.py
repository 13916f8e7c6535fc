"""Per kernel call of a half model: the static model's estimate and the GPU's time, with and without the tensor cores.

compile keeps a task's tensor-core schedule where the static model estimates it faster than Gensor's FP32-pipe
kernel (compiler._construct). On an H200 (2026-11-29, benchmarks/README.md) ResNet-18 at 64 x 64 in fp16 ran
slower with its 5 tensor-core tasks (371.5 us) than without (341.9): some choice is wrong. This compiles a model
twice (``MINICOMP_TENSOR_CORES`` on, off), pairs the kernel calls by position (the same partition both times) and
prints, per call, both estimates and, on a GPU, both measured medians (CUDA events, L2 flushed before each run,
stream launches: a call's time includes its launch), marking the calls where the model and the GPU disagree on
which is faster.

    python research/tc_choice_check.py                       # estimates only, for an H100 (no GPU here)
    python research/tc_choice_check.py --target h200         # estimates for the GPU of the recorded timings
    python research/tc_choice_check.py --gpu --repeat 30     # on a GPU machine: measured beside the estimates
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import minicomp as mc  # noqa: E402
from minicomp import zoo  # noqa: E402

MODELS = {"resnet18": lambda: zoo.resnet18(hw=64),
          "bert_tiny": lambda: zoo.transformer_encoder(s=128, d=128, heads=2, ff=512),
          "bert_base_layer": lambda: zoo.bert_tiny(s=128, layers=1, d=768, heads=12, ff=3072)}   # (tensor_cores.py's)


def per_call(model, feeds, target: str, precision: str, gpu: bool, repeat: int, jobs: int | None = None):
  """[(ops, on tensor cores, estimate s, measured s or None)] per kernel call, and the end-to-end times."""
  mod = mc.compile(model, target=target, precision=precision, jobs=jobs)
  est = mod.estimate()
  meas = mod.benchmark(feeds or mod.random_feeds(), repeat=repeat) if gpu else None
  rows = []
  for k, (c, e) in enumerate(est.calls):
    tc = "mc_mma_" in (getattr(mod.kernels[c.kernel], "source", "") or "")
    rows.append(("+".join(c.ops), tc, e.latency_s, meas.calls[k][2] if meas else None))
  return rows, est.latency_s, meas.median_s if meas else None


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--model", default="resnet18", choices=sorted(MODELS))
  ap.add_argument("--precision", default="fp16", choices=["fp16", "bf16", "tf32", "int8-qdq"],
                  help="int8-qdq: the model quantized by onnxruntime (benchmarks/precision.py's qdq), dp4a or mma")
  ap.add_argument("--gpu", action="store_true", help="measure on this machine's GPU (target='cuda')")
  ap.add_argument("--repeat", type=int, default=30)
  ap.add_argument("--gensor-tc", action="store_true", help="the tensor-core side with Gensor's constructions on the "
                  "tensor-core sketch as well as the template (compiler.CONSTRUCT_TENSOR_CORE_SKETCH)")
  ap.add_argument("--all-calls", action="store_true", help="every kernel call, not only the tensor-core ones (a "
                  "layout the tensor cores ask for can change their neighbours too)")
  ap.add_argument("--target", default=None, help="without --gpu: the device estimated for (default h100; h200 to "
                  "set estimates beside the timings of research/results/tc_choice/)")
  a = ap.parse_args(argv)
  target = "cuda" if a.gpu else a.target or "h100"
  model, feeds = MODELS[a.model]()
  precision = a.precision
  if precision == "int8-qdq":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from precision import qdq
    model, precision = qdq(model, feeds), "fp32"
  runs = {}
  import minicomp.compiler
  for tc in ("1", "0"):
    os.environ["MINICOMP_TENSOR_CORES"] = tc
    minicomp.compiler.CONSTRUCT_TENSOR_CORE_SKETCH = a.gensor_tc and tc == "1"
    # int8: compile offers no tensor-core template unless switched on (compiler.INT8_TENSOR_CORE_TEMPLATE)
    minicomp.compiler.INT8_TENSOR_CORE_TEMPLATE = a.precision == "int8-qdq" and tc == "1"
    switched = a.gensor_tc or a.precision == "int8-qdq"
    if switched: os.environ["MINICOMP_SCHEDULE_CACHE"] = "0"   # (the cache keys no such switch; workers re-import)
    runs[tc] = per_call(model, feeds, target, precision, a.gpu, a.repeat, jobs=1 if switched else None)
  os.environ.pop("MINICOMP_TENSOR_CORES")
  (on, est_on, med_on), (off, est_off, med_off) = runs["1"], runs["0"]
  if len(on) != len(off):
    print(f"the two compiles have {len(on)} and {len(off)} kernel calls: not paired")
    return 1
  where = mc.gpu_status() if a.gpu else f"no GPU: estimates for {target} only"
  print(f"# python research/tc_choice_check.py --model {a.model} --precision {a.precision}"
        f"{' --gpu' if a.gpu else ''}{' --gensor-tc' if a.gensor_tc else ''}: {where}; us* static-model ESTIMATE, us measured (median of {a.repeat})")
  print("| # | ops | TC | est TC us* | est FP32 us* | GPU TC us | GPU FP32 us | model and GPU agree |")
  print("|---|---|---|---|---|---|---|---|")
  for k, ((ops, tc, e1, m1), (_, _, e0, m0)) in enumerate(zip(on, off)):
    if not tc and not a.all_calls: continue        # (the same FP32 kernel both times)
    agree = "" if m1 is None or not tc else ("yes" if (e1 < e0) == (m1 < m0) else "**no**")
    fmt = lambda x: "-" if x is None else f"{x * 1e6:.1f}"   # noqa: E731
    print(f"| {k} | {ops[:40]} | {'yes' if tc else 'no'} | {fmt(e1)} | {fmt(e0)} | {fmt(m1)} | {fmt(m0)} | {agree} |")
  fmt = lambda x: "-" if x is None else f"{x * 1e6:.1f}"     # noqa: E731
  print(f"end to end: estimate {fmt(est_on)} (TC) / {fmt(est_off)} (FP32) us*; GPU {fmt(med_on)} / {fmt(med_off)} us")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
