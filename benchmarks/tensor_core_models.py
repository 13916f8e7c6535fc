"""The zoo's models with every layer the tensor cores take on them, against onnxruntime (the CPU simulator).

    python benchmarks/tensor_core_models.py                                  # sm_75, sm_86, sm_90; fp16, bf16, tf32
    python benchmarks/tensor_core_models.py --targets sm_90 --precisions fp16
    python benchmarks/tensor_core_models.py --odd-sizes --targets sm_86 --precisions fp16   # sizes no tile divides

Each model is compiled with ``precision=`` and ``MINICOMP_TENSOR_CORES=always`` (a tensor-core schedule on every task
one exists for, whatever the static model prefers), run in the simulator and compared with onnxruntime's float32
run: the largest error over the output's largest value, in the precision's epsilons (2^-10 for fp16 and tf32, 2^-7
for bf16). A row is flagged where the error passes 4 epsilons (tests/test_precision.py's bound) or a task the
template takes is not on the tensor cores. Sizes are the zoo's, widened so their channels and k reach the template's
multiples of 32; ``--odd-sizes`` builds the models of :data:`ODD` instead, at sizes no tile divides (37 to 100
tokens, 14 x 14 images, k of 48 and 80), whose tiles overhang them (docs/tensor_cores.md). No GPU: this checks what
the kernels compute, not how fast.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

CASES = [("residual_block", dict(c=32, hw=16)), ("inverted_residual", dict(c=32, hw=16)),
         ("grouped_block", dict(c=64, hw=8, groups=2)), ("transformer_encoder", dict(s=32, d=64, heads=2, ff=128)),
         ("decoder_block", dict(s=32, d=64, heads=2, ff=128)),
         ("llama_block", dict(s=32, heads=2, kv_heads=1, hd=32, ff=128)),
         ("llama_block_23", dict(s=32, heads=2, kv_heads=1, hd=32, ff=128)), ("generator", dict(z=32, c=32)),
         ("conv3d_block", dict(c=32, d=6)), ("mobilenet_v2", dict(hw=32)), ("bert_tiny", dict(s=32, layers=1)),
         ("resnet18", dict(hw=32)), ("lstm_tagger", dict(emb=32, hidden=32))]
ODD = [("transformer_encoder", dict(s=50, d=64, heads=2, ff=96)), ("decoder_block", dict(s=37, d=48, heads=2, ff=80)),
       ("llama_block", dict(s=45, heads=2, kv_heads=1, hd=24, ff=80)), ("bert_tiny", dict(s=100, layers=1)),
       ("inverted_residual", dict(c=32, hw=14)), ("residual_block", dict(c=32, hw=14))]
EPS = {"fp16": 2.0 ** -10, "bf16": 2.0 ** -7, "tf32": 2.0 ** -10}


def row(name: str, kwargs: dict, target: str, precision: str) -> list[str]:
  import onnxruntime as ort

  import minicomp as mc
  from minicomp import zoo
  from minicomp.graph.tensor_core_schedules import tensor_core_schedules
  model, feeds = getattr(zoo, name)(**kwargs)
  t0 = time.perf_counter()
  cm = mc.compile(model, target=target, precision=precision, progress=False)
  got = cm.run(feeds, device="cpu")
  ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
  err = max(np.abs(g.astype(np.float64) - r).max() / max(float(np.abs(r).max()), 1e-30)
            for g, r in zip(got, ref) if r.dtype.kind == "f") / EPS[precision]
  takes = sum(bool(tensor_core_schedules(t.dag, cm.target, tf32=precision == "tf32")) for t in cm.tasks)
  bad = err > 4 or cm.stats.tensor_cores != takes
  return [name, target, precision, f"{cm.stats.tensor_cores} / {takes} / {len(cm.tasks)}", f"{err:.2f}",
          f"{time.perf_counter() - t0:.1f}", "**check**" if bad else ""]


def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--targets", nargs="+", default=["sm_75", "sm_86", "sm_90"])
  ap.add_argument("--precisions", nargs="+", default=["fp16", "bf16", "tf32"], choices=sorted(EPS))
  ap.add_argument("--models", nargs="+", default=None, choices=[n for n, _ in CASES],
                  help="(default: every model of the list run)")
  ap.add_argument("--odd-sizes", action="store_true", help="ODD's models at sizes no tile divides")
  a = ap.parse_args()
  os.environ["MINICOMP_TENSOR_CORES"] = "always"
  print(f"command: python benchmarks/tensor_core_models.py {' '.join(sys.argv[1:])}".rstrip())
  print(f"date:    {time.strftime('%Y-%m-%d %H:%M')}; the CPU simulator (no GPU); s: compile and run\n")
  print("| model | target | precision | tensor-core tasks / tasks they take / tasks | error (eps) | s | |")
  print("| --- | --- | --- | --- | ---: | ---: | --- |")
  flagged = 0
  for name, kwargs in ODD if a.odd_sizes else CASES:
    if a.models and name not in a.models: continue
    for target in a.targets:
      for precision in a.precisions:
        try:
          cells = row(name, kwargs, target, precision)
        except Exception as e:   # noqa: BLE001 (a failure is a row of the table, and flagged)
          cells = [name, target, precision, "-", "-", "-", f"**{type(e).__name__}: {str(e)[:120]}**"]
        flagged += bool(cells[-1])
        print("| " + " | ".join(cells) + " |", flush=True)
  print(f"\n{flagged} flagged")
  return 1 if flagged else 0


if __name__ == "__main__":
  sys.exit(main())
