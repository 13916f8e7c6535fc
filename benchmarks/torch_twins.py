"""PyTorch twins of zoo models, for GPU benchmarks: the same architecture and shapes, PyTorch's own random weights
(times only: the outputs are not compared), timed as minicomp's ``mod.benchmark`` times a model.

- ``residual_block``: Conv3x3-BN-ReLU-Conv3x3-BN + input, ReLU (``zoo.residual_block``);
- ``inverted_residual``: 1x1 expand-BN-ReLU6, 3x3 depthwise-BN-ReLU6, 1x1 project-BN, + input;
- ``transformer_encoder``: ``nn.TransformerEncoderLayer(norm_first=True, activation="gelu")`` (the zoo's has no
  attention biases: PyTorch's twin does a little more work);
- ``bert``: ``nn.TransformerEncoderLayer(norm_first=False, activation="gelu")`` (a BERT layer);
- ``resnet18``: ``torchvision.models.resnet18()``.

Eager PyTorch in eval mode under ``torch.inference_mode``, replayed as one CUDA graph, cuDNN autotuning on, TF32
as PyTorch's defaults leave it; the L2 flushed before each replay; the median of CUDA-event times.
"""
from __future__ import annotations

import statistics

TWINS = ("residual_block", "inverted_residual", "transformer_encoder", "bert", "resnet18")


def twin(name: str, kw: dict):
  """(module, input shape) of the twin of zoo model ``name`` built with keyword arguments ``kw``."""
  import torch.nn as nn
  if name == "residual_block":
    c, hw = kw.get("c", 8), kw.get("hw", 10)

    class Block(nn.Module):
      def __init__(self):
        super().__init__()
        self.a = nn.Sequential(nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU(),
                               nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c))

      def forward(self, x): return (self.a(x) + x).relu()
    return Block(), (kw.get("n", 1), c, hw, hw)
  if name == "inverted_residual":
    c, hw, e = kw.get("c", 8), kw.get("hw", 10), kw.get("c", 8) * kw.get("expand", 4)

    class Inverted(nn.Module):
      def __init__(self):
        super().__init__()
        self.a = nn.Sequential(nn.Conv2d(c, e, 1, bias=False), nn.BatchNorm2d(e), nn.ReLU6(),
                               nn.Conv2d(e, e, 3, padding=1, groups=e, bias=False), nn.BatchNorm2d(e), nn.ReLU6(),
                               nn.Conv2d(e, c, 1, bias=False), nn.BatchNorm2d(c))

      def forward(self, x): return self.a(x) + x
    return Inverted(), (kw.get("n", 1), c, hw, hw)
  if name in ("transformer_encoder", "bert"):
    s, d, heads, ff = kw.get("s", 8), kw.get("d", 32), kw.get("heads", 4), kw.get("ff", 64)
    layer = nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, activation="gelu", batch_first=True,
                                       norm_first=name == "transformer_encoder")
    return layer, (1, s, d)
  if name == "resnet18":
    import torchvision
    hw = kw.get("hw", 224)
    return torchvision.models.resnet18(), (1, 3, hw, hw)
  raise KeyError(f"no PyTorch twin of {name!r}; twins: {', '.join(TWINS)}")


def torch_seconds(name: str, kw: dict, precision: str, repeat: int = 50) -> float:
  """The median seconds of one run of ``name``'s twin in ``precision`` (fp32 / fp16 / bf16) on the GPU."""
  import torch
  torch.backends.cudnn.benchmark = True
  dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[precision]
  module, shape = twin(name, kw)
  module = module.to("cuda", dtype).eval()
  x = torch.randn(shape, device="cuda", dtype=dtype)
  flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
  with torch.inference_mode():
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
      for _ in range(3): module(x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
      module(x)
    a, b, times = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True), []
    for _ in range(repeat):
      flush.zero_()
      a.record(); graph.replay(); b.record(); b.synchronize()
      times.append(a.elapsed_time(b) / 1e3)
  return statistics.median(times)
