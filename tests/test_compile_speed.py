"""benchmarks/compile_speed.py keeps working: one workload's row has every stage timed and the simulator
output checked against numpy (it once broke silently when the Kernel constructor changed)."""
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

VARS = ("MINICOMP_CACHE_DIR", "MINICOMP_NVRTC_CACHE")   # the benchmark sets both when imported


def test_one_workload_row_is_complete_and_passes():
  before = {v: os.environ.get(v) for v in VARS}
  try:
    import compile_speed as cs
    os.environ["MINICOMP_CACHE_DIR"], os.environ["MINICOMP_NVRTC_CACHE"] = cs._TMP.name, "0"
    (name, make), = [(n, m) for n, m in cs.WORKLOADS if n.startswith("depthwise")]
    row = cs.measure(name, make, repeats=1)
  finally:
    for v, val in before.items():
      if val is None: os.environ.pop(v, None)
      else: os.environ[v] = val
  assert row.note == "" and row.check == "PASS", row.note
  assert row.kernels == 1 and row.nvrtc_ms > 0 and row.sim_build_ms > 0 and row.sim_run_ms > 0
  assert row.max_err < 1e-4
