"""Whole models on the GPU at trials=0, end to end against PyTorch: measured time, correctness, compile time.

Compiles each model for the GPU's own arch (``target="cuda"``, the default schedules, the machine's cores) and prints
one table row per model as it finishes:

- ``compile s``: ``minicomp.compile`` wall time, cold (no schedule cache: a fresh ``MINICOMP_CACHE_DIR`` is advised);
- ``err``: the GPU's output against onnxruntime's on the CPU, max |ours - ort| / max |ort|;
- ``minicomp us``: ``mod.benchmark`` (CUDA-graph replay, the L2 flushed before each run, the median of ``--repeat``);
- ``PyTorch us``: the model's twin (``torch_twins.py``: the same architecture and shapes, PyTorch's own weights)
  timed the same way (one CUDA graph, L2 flushed, median), fp32 with TF32 off unless ``--tf32``; ``-`` where no
  twin exists or PyTorch is missing;
- ``ort-cuda us``: onnxruntime's CUDA provider on the same ONNX model where it is installed (``session.run`` with
  I/O bound to the GPU, median): the reference for the int8 model, which PyTorch has no GPU kernels for.

``resnet18_int8`` is ResNet-18 quantized by onnxruntime's static quantization (QDQ, int8, per-channel weights;
precision.py's ``qdq``); its ``err`` is against onnxruntime running the same quantized model. ``lstm_tagger`` is an
embedding, a bidirectional LSTM and a linear layer (cuDNN's LSTM on PyTorch's side).

Without a GPU it says so and prints the static model's ESTIMATE of each model for an H100 instead (labelled).

    python benchmarks/gpu_models.py                                   # every model below (~2 minutes on an H200)
    python benchmarks/gpu_models.py --models resnet18 mobilenet_v2 bert_tiny --repeat 100
    python benchmarks/gpu_models.py --models transformer_encoder --precision fp16 --per-call
    python benchmarks/gpu_models.py --models resnet18 mobilenet_v2 bert_tiny --schedules compare   # comparing
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import minicomp as mc  # noqa: E402
from minicomp import zoo  # noqa: E402
from provenance import header_lines  # noqa: E402

# name -> (zoo builder, keyword arguments, PyTorch twin or None); the first four at benchmarks/defaults.py's sizes
MODELS = {
  "residual_block": ("residual_block", {"c": 64, "hw": 56}, "residual_block"),
  "inverted_residual": ("inverted_residual", {"c": 32, "hw": 28, "expand": 6}, "inverted_residual"),
  "transformer_encoder": ("transformer_encoder", {"s": 128, "d": 256, "heads": 4, "ff": 1024}, "transformer_encoder"),
  "llama_block": ("llama_block", {"s": 128, "heads": 8, "kv_heads": 2, "hd": 32, "ff": 512}, None),
  "resnet18": ("resnet18", {"hw": 224}, "resnet18"),
  "mobilenet_v2": ("mobilenet_v2", {"hw": 224}, "mobilenet_v2"),
  "bert_tiny": ("bert_tiny", {"s": 128}, "bert_tiny"),
  "lstm_tagger": ("lstm_tagger", {"t": 32, "batch": 8, "vocab": 1000, "emb": 128, "hidden": 128, "tags": 16},
                  "lstm_tagger"),
  "resnet18_int8": ("resnet18", {"hw": 224}, None),
}
HEAD = ("model", "kernels", "compile s", "err", "minicomp us", "PyTorch us", "minicomp / PyTorch", "ort-cuda us")


def build(name: str):
  """(ONNX model, feeds) of ``name``; the int8 one quantized by onnxruntime."""
  builder, kw, _ = MODELS[name]
  model, feeds = getattr(zoo, builder)(**kw)
  if name.endswith("_int8"):
    from precision import qdq
    model = qdq(model, feeds)
  return model, feeds


def ort_session(model, provider: str = "CPUExecutionProvider"):
  import onnxruntime as ort
  return ort.InferenceSession(model.SerializeToString(), providers=[provider])


def ort_cuda_seconds(model, feeds, repeat: int) -> float | None:
  """onnxruntime's CUDA provider on ``model``: the median seconds of a run with inputs and outputs on the GPU, or None
  where the provider is missing."""
  import onnxruntime as ort
  if "CUDAExecutionProvider" not in ort.get_available_providers(): return None
  sess = ort_session(model, "CUDAExecutionProvider")
  binding = sess.io_binding()
  for k, v in feeds.items(): binding.bind_ortvalue_input(k, ort.OrtValue.ortvalue_from_numpy(v, "cuda", 0))
  for o in sess.get_outputs(): binding.bind_output(o.name, "cuda")
  times = []
  for i in range(repeat + 5):
    t0 = time.perf_counter(); sess.run_with_iobinding(binding); times.append(time.perf_counter() - t0)
  return statistics.median(times[5:])


def row(name: str, a) -> list[str]:
  import numpy as np
  model, feeds = build(name)
  t0 = time.perf_counter()
  mod = mc.compile(model, target="cuda", precision=a.precision, progress=False, schedules=a.schedules)
  secs = time.perf_counter() - t0
  ours = mod.run(feeds, device="gpu")[0].astype(np.float32)
  ref = np.asarray(ort_session(model).run(None, feeds)[0], np.float32)
  err = float(np.abs(ours - ref).max() / max(float(np.abs(ref).max()), 1e-30))
  res = mod.benchmark(feeds, repeat=a.repeat, warmup=a.warmup, cuda_graph=True)
  if a.per_call: print(res, file=sys.stderr)
  theirs, twin = None, MODELS[name][2]
  if twin:
    try:
      from torch_twins import torch_seconds
      theirs = torch_seconds(twin, MODELS[name][1], a.precision or "fp32", a.repeat, tf32=a.tf32)
    except Exception as e:   # noqa: BLE001  (PyTorch missing or failing costs its column, not the row)
      print(f"# no PyTorch time for {name}: {type(e).__name__}: {e}", file=sys.stderr)
  try:
    cuda = ort_cuda_seconds(model, feeds, a.repeat)
  except Exception as e:   # noqa: BLE001  (a provider that fails to load is a missing reference, not a failed row)
    print(f"# onnxruntime's CUDA provider failed on {name}: {type(e).__name__}: {e}", file=sys.stderr)
    cuda = None
  us = lambda s: f"{s * 1e6:.1f}" if s else "-"   # noqa: E731
  return [name, str(len(mod.calls)), f"{secs:.1f}", f"{err:.1e}", us(res.median_s), us(theirs),
          f"{res.median_s / theirs:.2f}" if theirs else "-", us(cuda)]


def main(argv: list[str] | None = None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
  p.add_argument("--repeat", type=int, default=50)
  p.add_argument("--warmup", type=int, default=5)
  p.add_argument("--precision", default=None, choices=["fp32", "fp16", "bf16", "tf32"],
                 help="compile(precision=...): the model's own types by default")
  p.add_argument("--schedules", default="gensor", choices=["gensor", "compare", "rules"],
                 help="compile(schedules=...): the default's Gensor schedules, compare's, or the rules'")
  p.add_argument("--tf32", action="store_true", help="PyTorch with TF32 on (default: off, as minicomp's fp32)")
  p.add_argument("--per-call", action="store_true", help="also each model's per-kernel-call table (to stderr)")
  a = p.parse_args(argv)
  print("\n".join(header_lines(__file__, argv)))
  gpu = mc.gpu_available()
  print(f"gpu:      {mc.gpu_status()}")
  if not gpu:
    for name in a.models:
      model, _ = build(name)
      mod = mc.compile(model, target="sm_90", precision=a.precision, progress=False, schedules=a.schedules)
      print(f"\n## {name}: no GPU: static-model ESTIMATE (sm_90 / h100), not a measurement\n{mod.estimate('h100')}")
    return 0
  cache = os.environ.get("MINICOMP_CACHE_DIR", "(default cache folder)")
  print(f"MEASURED, schedules={a.schedules}, cold cache {cache}; PyTorch {'with' if a.tf32 else 'without'} TF32\n")
  print("| " + " | ".join(HEAD) + " |\n|" + "---|" * len(HEAD), flush=True)
  for name in a.models:
    try:
      print("| " + " | ".join(row(name, a)) + " |", flush=True)
    except Exception as e:   # noqa: BLE001  (one model's failure is reported and the others still run)
      print(f"| {name} | failed: {type(e).__name__}: {str(e)[:200]} |", flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
