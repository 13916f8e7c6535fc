"""TVM's default GPU pipeline on an ONNX file, for compile_model.py's side-by-side column.

Run with an interpreter where ``apache-tvm`` (0.27; never a minicomp dependency) and ``onnx`` are installed:

    /path/to/tvm-venv/bin/python benchmarks/tvm_compile.py model.onnx sm_86 out.cu

It times relax's ONNX import, the "zero" pipeline with dlight's default GPU schedules (Matmul, GEMV,
Reduction, GeneralReduction, Fallback) and ``relax.build`` for CUDA, and prints one JSON line of seconds. The
pip wheel is built without CUDA, so its build stops at CUDA C (written to ``out.cu``): compile_model.py
compiles that text with NVRTC itself and adds the time, as TVM built with CUDA would spend in nvcc/NVRTC.
"""
import json
import sys
import time

import onnx
import tvm
from tvm import relax
from tvm.relax.frontend.onnx import from_onnx

try:
  import tvm.s_tir.dlight as dl          # 0.27
except ImportError:                      # older releases
  import tvm.dlight as dl


def main(path: str, arch: str, out: str) -> None:
  t0 = time.perf_counter()
  mod = from_onnx(onnx.load(path), keep_params_in_input=False)
  t1 = time.perf_counter()
  target = tvm.target.Target({"kind": "cuda", "arch": arch})
  with target:
    mod = relax.get_pipeline("zero")(mod)
    mod = dl.ApplyDefaultSchedule(dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(),
                                  dl.gpu.Fallback())(mod)
  t2 = time.perf_counter()
  ex = relax.build(mod, target=target)
  t3 = time.perf_counter()

  def cuda_module(m):
    if m.kind == "cuda": return m
    return next((r for r in map(cuda_module, m.imports) if r is not None), None)
  cu = cuda_module(ex.mod if hasattr(ex, "mod") else ex)
  with open(out, "w") as f: f.write(cu.inspect_source("") if cu is not None else "")
  print(json.dumps({"version": tvm.__version__, "import_s": t1 - t0, "schedule_s": t2 - t1, "build_s": t3 - t2}))


if __name__ == "__main__":
  main(*sys.argv[1:4])
