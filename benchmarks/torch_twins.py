"""PyTorch twins of zoo models, for GPU benchmarks: the same architecture and shapes, PyTorch's own random weights
(times only: the outputs are not compared), timed as minicomp's ``mod.benchmark`` times a model.

- ``residual_block``: Conv3x3-BN-ReLU-Conv3x3-BN + input, ReLU (``zoo.residual_block``);
- ``inverted_residual``: 1x1 expand-BN-ReLU6, 3x3 depthwise-BN-ReLU6, 1x1 project-BN, + input;
- ``transformer_encoder``: ``nn.TransformerEncoderLayer(norm_first=True, activation="gelu")`` (the zoo's has no
  attention biases: PyTorch's twin does a little more work);
- ``bert``: ``nn.TransformerEncoderLayer(norm_first=False, activation="gelu")`` (a BERT layer);
- ``resnet18``: torchvision's ResNet-18 (written out here: stem, four stages of two basic blocks, pool, FC);
- ``mobilenet_v2``: torchvision's MobileNetV2 at width 1.0 (written out here, as ``zoo.mobilenet_v2``);
- ``bert_tiny``: a LayerNorm, then ``nn.TransformerEncoder`` of ``layers`` post-norm GELU layers (``zoo.bert_tiny``);
- ``lstm_tagger``: ``nn.Embedding``, a bidirectional ``nn.LSTM`` (cuDNN), ``nn.Linear``, ``log_softmax``.

Eager PyTorch in eval mode under ``torch.inference_mode``, replayed as one CUDA graph, cuDNN autotuning on, TF32
as PyTorch's defaults leave it unless ``tf32`` says (``tf32=False``: fp32 on the FP32 pipes, as minicomp's fp32); the
L2 flushed before each replay; the median of CUDA-event times.
"""
from __future__ import annotations

import statistics

TWINS = ("residual_block", "inverted_residual", "transformer_encoder", "bert", "resnet18", "mobilenet_v2", "bert_tiny",
         "lstm_tagger")


def _conv_bn(nn, cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, act=None) -> list:
  """Conv (padding k // 2, no bias), BatchNorm and the activation module class ``act`` (None: none)."""
  m = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
  return m + [act()] if act is not None else m


def _resnet18(nn, width: int = 64, classes: int = 1000):
  def cbr(cin, cout, k, stride, relu=True):
    return _conv_bn(nn, cin, cout, k, stride, act=nn.ReLU if relu else None)

  class Basic(nn.Module):
    def __init__(self, cin, cout, stride):
      super().__init__()
      self.a = nn.Sequential(*cbr(cin, cout, 3, stride), *cbr(cout, cout, 3, 1, relu=False))
      self.sc = nn.Sequential(*cbr(cin, cout, 1, stride, relu=False)) if stride != 1 or cin != cout else nn.Identity()

    def forward(self, x): return (self.a(x) + self.sc(x)).relu()
  blocks, c = [*cbr(3, width, 7, 2), nn.MaxPool2d(3, 2, 1)], width
  for stage in range(4):
    cout = width << stage
    blocks += [Basic(c, cout, 2 if stage else 1), Basic(cout, cout, 1)]
    c = cout
  return nn.Sequential(*blocks, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, classes))


def _mobilenet_v2(nn, classes: int = 1000):
  def cbr(cin, cout, k, stride=1, groups=1, relu=True):
    return _conv_bn(nn, cin, cout, k, stride, groups, nn.ReLU6 if relu else None)

  class Inverted(nn.Module):
    def __init__(self, cin, cout, t, stride):
      super().__init__()
      e = cin * t
      self.a = nn.Sequential(*(cbr(cin, e, 1) if t != 1 else []), *cbr(e, e, 3, stride, e),
                             *cbr(e, cout, 1, relu=False))
      self.res = stride == 1 and cin == cout

    def forward(self, x): return self.a(x) + x if self.res else self.a(x)
  blocks, c = cbr(3, 32, 3, 2), 32
  for t, cout, reps, stride in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                                (6, 160, 3, 2), (6, 320, 1, 1)):
    for r in range(reps):
      blocks.append(Inverted(c, cout, t, stride if r == 0 else 1))
      c = cout
  return nn.Sequential(*blocks, *cbr(c, 1280, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(1280, classes))


def _lstm_tagger(nn, vocab: int, emb: int, hidden: int, tags: int):
  class Tagger(nn.Module):
    def __init__(self):
      super().__init__()
      self.emb, self.lstm = nn.Embedding(vocab, emb), nn.LSTM(emb, hidden, bidirectional=True)
      self.out = nn.Linear(2 * hidden, tags)

    def forward(self, tokens): return self.out(self.lstm(self.emb(tokens))[0]).log_softmax(-1)
  return Tagger()


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
  if name == "bert_tiny":
    s, d, heads, ff = kw.get("s", 128), kw.get("d", 128), kw.get("heads", 2), kw.get("ff", 512)
    layer = nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, activation="gelu", batch_first=True)
    encoder = nn.TransformerEncoder(layer, kw.get("layers", 2), enable_nested_tensor=False)
    return nn.Sequential(nn.LayerNorm(d), encoder), (1, s, d)
  if name == "resnet18":
    hw = kw.get("hw", 224)
    return _resnet18(nn, kw.get("width", 64), kw.get("classes", 1000)), (kw.get("n", 1), 3, hw, hw)
  if name == "mobilenet_v2":
    hw = kw.get("hw", 224)
    return _mobilenet_v2(nn, kw.get("classes", 1000)), (kw.get("n", 1), 3, hw, hw)
  if name == "lstm_tagger":
    return _lstm_tagger(nn, kw.get("vocab", 40), kw.get("emb", 16), kw.get("hidden", 16), kw.get("tags", 5)), \
        (kw.get("t", 6), kw.get("batch", 2))
  raise KeyError(f"no PyTorch twin of {name!r}; twins: {', '.join(TWINS)}")


def torch_seconds(name: str, kw: dict, precision: str, repeat: int = 50, tf32: bool | None = None) -> float:
  """The median seconds of one run of ``name``'s twin in ``precision`` (fp32 / fp16 / bf16) on the GPU; ``tf32``
  True / False sets PyTorch's TF32 switches for matmuls and cuDNN (None: PyTorch's defaults)."""
  import torch
  torch.backends.cudnn.benchmark = True
  if tf32 is not None: torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
  dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[precision]
  module, shape = twin(name, kw)
  module = module.to("cuda", dtype).eval()
  x = torch.randint(0, kw.get("vocab", 40), shape, device="cuda") if name == "lstm_tagger" else \
      torch.randn(shape, device="cuda", dtype=dtype)
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
