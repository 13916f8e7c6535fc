"""fp32 / fp16 / bf16 per model: bytes the kernels move, the static model's latency ESTIMATE, and the accuracy.

For each model (minicomp.zoo builders at the sizes of benchmarks/defaults.py) and precision, ``compile(model,
target, precision=p)`` with the default (Gensor) schedules, then per target:

- ``MB``: the bytes of every kernel call's arguments and results (the traffic a kernel cannot avoid: each input
  read once, each output written once), summed over the calls;
- ``est us``: ``mod.estimate()``, the static model's latency of one run on the target's device: an ESTIMATE, no
  GPU (the static model counts 2-byte loads and stores as 2 bytes; no kernel uses the tensor cores);
- ``err``: on the first target only, the largest difference from the fp32 compile's output over the fp32 output's
  largest magnitude, in epsilons of the half type (2^-10 for fp16, 2^-7 for bf16), run in the CPU simulator on
  the same random input.

  python benchmarks/precision.py                                   # 4 models, sm_86 and h100 (~10 min, 2 cores)
  python benchmarks/precision.py --models transformer_encoder --targets h100
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from defaults import MODELS  # noqa: E402  (the sizes of the defaults benchmark)

PRECISIONS = ("fp32", "fp16", "bf16")
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


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS), choices=sorted(MODELS))
  ap.add_argument("--targets", nargs="+", default=["sm_86", "h100"])
  ap.add_argument("--no-accuracy", action="store_true", help="skip running the models in the CPU simulator")
  a = ap.parse_args(argv)
  import numpy as np
  import minicomp
  from minicomp import zoo
  print(f"# python benchmarks/precision.py --models {' '.join(a.models)} --targets {' '.join(a.targets)}")
  print("# every latency is a static-model ESTIMATE (no GPU); err: max |half - fp32| / max |fp32|, in eps of the type")
  head = ["model", "precision"] + [f"{t} {c}" for t in a.targets for c in ("MB", "est us")] + ["err (eps)", "compile s"]
  print("| " + " | ".join(head) + " |")
  print("|" + "---|" * len(head))
  for name in a.models:
    builder, kw = MODELS[name]
    model, feeds = getattr(zoo, builder)(**kw)
    ref = None
    for p in PRECISIONS:
      row, t0 = [name, p], time.perf_counter()
      first = None
      for tgt in a.targets:
        mod = minicomp.compile(model, target=tgt, precision=p, progress=False)
        first = first or mod
        row += [f"{kernel_bytes(mod) / 1e6:.2f}", f"{mod.estimate().latency_s * 1e6:.1f}"]
      secs = time.perf_counter() - t0
      err = "-"
      if not a.no_accuracy:
        out = first.run(feeds, device="cpu")[0].astype(np.float32)
        if p == "fp32": ref = out
        elif ref is not None:
          err = f"{float(np.abs(out - ref).max() / max(np.abs(ref).max(), 1e-30)) / EPS[p]:.2f}"
      print("| " + " | ".join(row + [err, f"{secs:.1f}"]) + " |", flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
