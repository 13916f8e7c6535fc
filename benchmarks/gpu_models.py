"""Whole models on the GPU: CUDA-event times per kernel call and end to end (``mod.benchmark``).

Compiles zoo models for the GPU's own arch (``target="cuda"``) with their default schedules and
prints, per model, the measured table with and without CUDA-graph replay. Without a GPU it says
so and prints the static model's ESTIMATE of each model instead (labelled as an estimate).

    python benchmarks/gpu_models.py                          # residual block and transformer encoder
    python benchmarks/gpu_models.py --models resnet18 --repeat 100
    python benchmarks/gpu_models.py --models transformer_encoder --precision fp16
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import minicomp as mc  # noqa: E402
from minicomp import zoo  # noqa: E402
from provenance import header_lines  # noqa: E402

MODELS = {
  "residual_block": lambda: zoo.residual_block(c=64, hw=56),
  "transformer_encoder": lambda: zoo.transformer_encoder(s=128, d=256, heads=4, ff=1024),
  "resnet18": lambda: zoo.resnet18(hw=224),
}


def main(argv: list[str] | None = None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--models", nargs="+", default=["residual_block", "transformer_encoder"], choices=sorted(MODELS))
  p.add_argument("--repeat", type=int, default=50)
  p.add_argument("--warmup", type=int, default=5)
  p.add_argument("--precision", default=None, choices=["fp32", "fp16", "bf16", "tf32"],
                 help="compile(precision=...): the model's own types by default")
  a = p.parse_args(argv)
  print("\n".join(header_lines(__file__, argv)))
  gpu = mc.gpu_available()
  print(f"gpu:      {mc.gpu_status()}")
  for name in a.models:
    model, feeds = MODELS[name]()
    mod = mc.compile(model, target="cuda" if gpu else "sm_90", precision=a.precision)
    feeds = feeds or mod.random_feeds()
    print(f"\n## {name}: {len(mod.calls)} kernel calls, default schedules")
    if not gpu:
      print("no GPU: static-model ESTIMATE (sm_90 / h100), not a measurement")
      print(mod.estimate("h100"))
      continue
    for cuda_graph in (False, True):
      print(mod.benchmark(feeds, repeat=a.repeat, warmup=a.warmup, cuda_graph=cuda_graph))
  return 0


if __name__ == "__main__":
  sys.exit(main())
