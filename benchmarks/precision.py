"""fp32 / fp16 / bf16 per model: bytes the kernels move, the static model's latency ESTIMATE, and the accuracy.

For each model (minicomp.zoo builders at the sizes of benchmarks/defaults.py) and precision, ``compile(model,
target, precision=p)`` with the default (Gensor) schedules, then per target:

- ``MB``: the bytes of every kernel call's arguments and results (the traffic a kernel cannot avoid: each input
  read once, each output written once), summed over the calls;
- ``est us``: ``mod.estimate()``, the static model's latency of one run on the target's device: an ESTIMATE, no
  GPU (the static model counts 2-byte loads and stores as 2 bytes; no kernel uses the tensor cores);
- ``err``: on the first target only, the largest difference from the fp32 compile's output over the fp32 output's
  largest magnitude, in epsilons of the half type (2^-10 for fp16, 2^-7 for bf16), run in the CPU simulator on
  the same random input;
- ``int8-qdq``: the model quantized by onnxruntime's ``quantize_static`` (QDQ format, int8 activations calibrated
  on 8 random inputs, per-channel int8 weights) and compiled as it is: its convolutions and matmuls become
  QLinearConv / QLinearMatMul kernels (int8 reads, int32 sums; minicomp/frontend/qdq.py), the rest computes in
  float32 between its DequantizeLinear and QuantizeLinear, storing int8. Its ``err`` is the relative difference
  itself (not in eps); ``ort`` and ``ref`` say whether minicomp's output equals onnxruntime's and ONNX's reference
  evaluator's (``onnx.reference``, the model converted to opset 21) on that input, or by how much it differs. Both
  judge: onnxruntime 1.32.0 computes some integer convolutions wrongly (tests/test_qlinear.py), and the reference
  evaluator computes its float operators in its own order.

``--gpu`` (on a GPU machine) compiles for the GPU's own arch instead and MEASURES each model end to end
(``mod.benchmark``: CUDA-graph replay, L2 flushed, median of 50) beside its PyTorch twin in the same precision
(benchmarks/torch_twins.py: the same architecture and shapes; cuDNN / cuBLAS, tensor cores allowed); ``err``
then compares the GPU's outputs.

  python benchmarks/precision.py                                   # 4 models, sm_86 and h100 (~10 min, 2 cores)
  python benchmarks/precision.py --models transformer_encoder --targets h100
  python benchmarks/precision.py --gpu --precisions fp32 fp16 bf16 # measured, against PyTorch
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from defaults import MODELS  # noqa: E402  (the sizes of the defaults benchmark)

PRECISIONS = ("fp32", "fp16", "bf16", "int8-qdq")
EPS = {"fp16": 2.0**-10, "bf16": 2.0**-7}
DEFAULT_MODELS = ("residual_block", "inverted_residual", "transformer_encoder", "llama_block")


def kernel_bytes(mod) -> int:
  """Bytes of every call's kernel arguments and results, summed over the calls."""
  from minicomp.ir.ops import DTYPE_BYTES
  total = 0
  for c in mod.calls:
    plan = mod.kernels[c.kernel].plan
    total += sum(math.prod(b.shape) * DTYPE_BYTES[b.dtype] for b in plan.inputs + plan.outputs)
  return total


def qdq(model, feeds):
  """``model`` quantized by onnxruntime's static quantization (QDQ, int8, per-channel weights; the calibration
  data: 8 random inputs shaped like ``feeds``)."""
  import tempfile
  import numpy as np
  import onnx
  from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

  class Reader(CalibrationDataReader):
    def __init__(self):
      self.it = iter([{k: np.random.default_rng(s).standard_normal(v.shape).astype(v.dtype) for k, v in feeds.items()}
                      for s in range(8)])

    def get_next(self): return next(self.it, None)
  with tempfile.TemporaryDirectory() as d:
    fp, qp = os.path.join(d, "f.onnx"), os.path.join(d, "q.onnx")
    onnx.save(model, fp)
    quantize_static(fp, qp, Reader(), quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8, per_channel=True)
    return onnx.load(qp)


def gpu_row(name: str, builder: str, kw: dict, precision: str):
  """One model compiled for this machine's GPU in ``precision`` and measured end to end beside its PyTorch twin:
  (table cells: GPU us, kernels on tensor cores, PyTorch us, minicomp / PyTorch, compile s), and the GPU's output."""
  import numpy as np
  import minicomp
  from minicomp import zoo
  from torch_twins import torch_seconds
  model, feeds = getattr(zoo, builder)(**kw)
  t0 = time.perf_counter()
  mod = minicomp.compile(model, target="cuda", precision=precision, progress=False)
  secs = time.perf_counter() - t0
  out = mod.run(feeds, device="gpu")[0].astype(np.float32)
  ours = mod.benchmark(feeds, repeat=50, cuda_graph=True).median_s
  try:
    theirs = torch_seconds(name, kw, precision)
  except (ImportError, KeyError) as e:
    print(f"# no PyTorch time for {name}: {e}", file=sys.stderr)
    theirs = None
  return ([f"{ours * 1e6:.1f}", str(mod.stats.tensor_cores), f"{theirs * 1e6:.1f}" if theirs else "-",
           f"{ours / theirs:.2f}" if theirs else "-", f"{secs:.1f}"], out)


def gpu_main(a) -> int:
  import numpy as np
  import minicomp
  if not minicomp.gpu_available():
    print(f"no GPU: {minicomp.gpu_status()}; run without --gpu for the static model's estimates")
    return 1
  from datetime import datetime, timezone
  print(f"# python benchmarks/precision.py --gpu --models {' '.join(a.models)} --precisions {' '.join(a.precisions)}")
  print(f"# {datetime.now(timezone.utc).isoformat(timespec='seconds')}, {minicomp.gpu_status()}; MEASURED: CUDA-graph "
        "replay, L2 flushed, median of 50; PyTorch: its twin (benchmarks/torch_twins.py) in the same precision; err: "
        "max |out - fp32 out| / max |fp32 out| on the GPU, in eps of the type")
  head = ["model", "precision", "GPU us", "TC kernels", "PyTorch us", "minicomp / PyTorch", "compile s", "err (eps)"]
  print("| " + " | ".join(head) + " |")
  print("|" + "---|" * len(head))
  for name in a.models:
    builder, kw = MODELS[name]
    ref = None
    for p in [p for p in a.precisions if p != "int8-qdq"]:
      cells, out = gpu_row(name, builder, kw, p)
      if p == "fp32": ref = out
      err = "-" if ref is None or p == "fp32" else \
          f"{float(np.abs(out - ref).max() / max(np.abs(ref).max(), 1e-30)) / EPS[p]:.2f}"
      print("| " + " | ".join([name, p, *cells, err]) + " |", flush=True)
  return 0


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS), choices=sorted(MODELS))
  ap.add_argument("--targets", nargs="+", default=["sm_86", "h100"])
  ap.add_argument("--no-accuracy", action="store_true", help="skip running the models in the CPU simulator")
  ap.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=PRECISIONS)
  ap.add_argument("--gpu", action="store_true", help="measure on this machine's GPU against PyTorch (no int8-qdq)")
  a = ap.parse_args(argv)
  if a.gpu:
    return gpu_main(a)
  import numpy as np
  import minicomp
  from minicomp import zoo
  print(f"# python benchmarks/precision.py --models {' '.join(a.models)} --targets {' '.join(a.targets)} "
        f"--precisions {' '.join(a.precisions)}")
  print("# every latency is a static-model ESTIMATE (no GPU); err: max |half - fp32| / max |fp32|, in eps of the type")
  head = ["model", "precision"] + [f"{t} {c}" for t in a.targets for c in ("MB", "est us")] + ["err (eps)", "compile s"]
  print("| " + " | ".join(head) + " |")
  print("|" + "---|" * len(head))
  for name in a.models:
    builder, kw = MODELS[name]
    model, feeds = getattr(zoo, builder)(**kw)
    ref = None
    for p in a.precisions:
      row, t0 = [name, p], time.perf_counter()
      first = None
      src = qdq(model, feeds) if p == "int8-qdq" else model
      for tgt in a.targets:
        mod = minicomp.compile(src, target=tgt, precision="fp32" if p == "int8-qdq" else p, progress=False)
        first = first or mod
        row += [f"{kernel_bytes(mod) / 1e6:.2f}", f"{mod.estimate().latency_s * 1e6:.1f}"]
      secs = time.perf_counter() - t0
      err = "-"
      if not a.no_accuracy:
        out = first.run(feeds, device="cpu")[0].astype(np.float32)
        if p == "fp32": ref = out
        elif ref is not None and p == "int8-qdq":
          import onnxruntime as ort
          from onnx import version_converter
          from onnx.reference import ReferenceEvaluator
          want = ort.InferenceSession(src.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
          spec = ReferenceEvaluator(version_converter.convert_version(src, 21)).run(None, feeds)[0]
          same = lambda w: "equal" if np.array_equal(out, w) else f"differs by {np.abs(out - w).max():.3g}"
          err = f"{float(np.abs(out - ref).max() / max(np.abs(ref).max(), 1e-30)):.3f} (ort {same(want)}, ref {same(spec)})"
        elif ref is not None:
          err = f"{float(np.abs(out - ref).max() / max(np.abs(ref).max(), 1e-30)) / EPS[p]:.2f}"
      print("| " + " | ".join(row + [err, f"{secs:.1f}"]) + " |", flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
