"""benchmarks/gpu_models.py through the fake GPU (tests/fake_gpu.py: every kernel runs in the CPU simulator): a row
compiles, checks the GPU's output against onnxruntime and times the model, an int8 row quantizes with onnxruntime
first; PyTorch and onnxruntime's CUDA provider, absent here, cost their columns, not the row."""
import sys
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))


def test_a_row_checks_against_onnxruntime_and_times_the_model(fake_gpu, monkeypatch):
  import gpu_models as G
  monkeypatch.setitem(G.MODELS, "tiny", ("residual_block", {"c": 8, "hw": 8}, "residual_block"))
  monkeypatch.setitem(G.MODELS, "tiny_int8", ("residual_block", {"c": 8, "hw": 8}, None))
  monkeypatch.setitem(sys.modules, "torch", None)                      # PyTorch missing: its column says "-"
  a = types.SimpleNamespace(precision=None, repeat=2, warmup=1, per_call=False, tf32=False, schedules="compare")
  for name in ("tiny", "tiny_int8"):
    row = G.row(name, a)
    assert row[0] == name and int(row[1]) >= 2 and float(row[2]) > 0
    assert float(row[3]) < (1e-5 if name == "tiny" else 1e-6), row          # the int8 model: onnxruntime's own output
    assert float(row[4]) > 0 and row[5:] == ["-", "-", "-"], row
