"""How long each stage of turning a schedule into a kernel takes, for the standard workloads.

For one representative hand-written schedule per workload (the schedules of
``tests/test_workloads.py``, reused, not copied) this measures, separately:

  lower+emit ms   ``lower`` + ``check_resources`` + ``emit_cuda`` (median of --repeats runs);
                  ``(lower)`` is the median of the ``lower`` part alone
  nvrtc ms        one NVRTC compile for sm_86 with the disk cache off and the in-memory
                  cache cleared before every run (median of --repeats runs)
  sim build ms    building the CPU simulator .so with a cold cache (MINICOMP_CACHE_DIR points
                  at a fresh temporary folder; one g++ run per workload, not repeated)
  sim run ms      all launches of the kernel on the CPU simulator (median of --repeats runs)

plus the ptxas resources of the NVRTC build (registers, static shared memory, spill
stores/loads; the maximum / sum over kernels for multi-kernel programs) and a check of the
simulator output against the workload's numpy reference. Simulator times are CPU-simulator
times: they say nothing about the speed of the kernel on a GPU.

  python benchmarks/compile_speed.py [--repeats N] [--only NAME_SUBSTRING] [--markdown]
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import shlex
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARCH = "sm_86"

# Set before minicomp touches a cache: NVRTC disk cache off, every artefact in a fresh folder.
_TMP = tempfile.TemporaryDirectory(prefix="minicomp-compile-speed-")
os.environ["MINICOMP_CACHE_DIR"] = _TMP.name
os.environ["MINICOMP_NVRTC_CACHE"] = "0"

import numpy as np  # noqa: E402

import minicomp as mc  # noqa: E402
from minicomp import workloads as W  # noqa: E402
from minicomp.codegen import nvrtc  # noqa: E402
from minicomp.codegen.cuda import emit_cuda  # noqa: E402
from minicomp.codegen.kernel import Kernel, LaunchPlan  # noqa: E402
from minicomp.codegen.simulator import build_simulator  # noqa: E402
from minicomp.codegen.verify import check_resources  # noqa: E402
from minicomp.ir.lower import lower  # noqa: E402
from minicomp.target import as_target  # noqa: E402

sys.path.insert(0, str(ROOT / "tests"))
import test_workloads as TW  # noqa: E402
from provenance import cmd_out as _cmd_out, cpu_model as _cpu_model, loadavg as _loadavg  # noqa: E402
from provenance import nproc as _nproc, revision as _revision  # noqa: E402


# ---- the workloads -----------------------------------------------------------------------

class _Captured(Exception):
  """Raised by the stand-in for ``run_and_check``: carries the test's workload and schedule."""

  def __init__(self, wl, s, rtol=1e-4, atol=1e-4):
    super().__init__()
    self.wl, self.s, self.rtol, self.atol = wl, s, rtol, atol


def _raise_captured(wl, s, archs=None, rtol=1e-4, atol=1e-4):
  raise _Captured(wl, s, rtol=rtol, atol=atol)


def from_test(test, *args):
  """Run a test function of test_workloads up to its ``run_and_check`` call; return (wl, s, rtol, atol).

  Tests whose schedule is written inline in the test body are reused this way, so the
  benchmark times exactly the schedule the test checks.
  """
  def make():
    saved = TW.run_and_check
    TW.run_and_check = _raise_captured
    try:
      test(*args)
    except _Captured as c:
      return c.wl, c.s, c.rtol, c.atol
    finally:
      TW.run_and_check = saved
    raise RuntimeError(f"{test.__name__} did not call run_and_check")
  return make


def from_fn(build_wl, schedule, **kw):
  def make():
    wl = build_wl()
    return wl, schedule(wl, **kw), 1e-4, 1e-4
  return make


CONV_CFG = dict(N=1, C=3, H=13, W=11, F=6, KH=3, stride=1, pad=1, dil=1)
DW_CFG = dict(N=1, C=7, H=15, W=13, KH=3, stride=1, pad=1)

# (name, factory returning (workload, schedule, rtol, atol))
WORKLOADS = [
  ("matmul_bias_relu_300x200x129_tiled_shared",
   from_fn(lambda: W.matmul(300, 200, 129, True), TW.mm_tiled_shared)),
  ("matmul_bias_relu_300x200x129_vthread",
   from_fn(lambda: W.matmul(300, 200, 129, True), TW.mm_tiled_shared, vthread=True)),
  ("batch_matmul_3x45x70x33", from_test(TW.test_batch_matmul)),
  ("conv2d_1x3x13x11_f6k3p1_shared", from_fn(lambda: W.conv2d(**CONV_CFG), TW.conv_schedule, cache_input=True)),
  ("depthwise_1x7x15x13_k3p1", from_test(TW.test_depthwise_conv2d, DW_CFG)),
  ("softmax_9x250_shuffle64", from_test(TW.test_softmax, "shuffle", 64)),
  ("layernorm_6x300_shuffle128", from_test(TW.test_layernorm, "shuffle")),
  ("row_sum_7x1000_shuffle128", from_test(TW.test_row_sum_cross_thread, "shuffle", 128)),
  ("broadcast_3x17x29_t256", from_test(TW.test_broadcast_chain, 256)),
  ("matmul_128x128x128_tiled_256thr",
   from_fn(lambda: W.matmul(128, 128, 128), TW.mm_tiled_shared, tile=64, thread=4)),
]


# ---- measuring ---------------------------------------------------------------------------

@dataclass
class Row:
  name: str
  kernels: int = 0
  threads: int = 0  # threads per block, largest over the kernels
  codegen_ms: float = float("nan")
  lower_ms: float = float("nan")  # the lower() part of codegen_ms
  nvrtc_ms: float = float("nan")
  sim_build_ms: float = float("nan")
  sim_run_ms: float = float("nan")
  regs: int = 0
  smem: int = 0
  spill_st: int = 0
  spill_ld: int = 0
  max_err: float = float("nan")
  check: str = "ERROR"
  note: str = ""


def _median_ms(fn, repeats: int) -> tuple[float, object]:
  times, out = [], None
  for _ in range(repeats):
    t0 = time.perf_counter()
    out = fn()
    times.append((time.perf_counter() - t0) * 1e3)
  return statistics.median(times), out


def _compile_uncached(src: str, tgt):
  nvrtc.clear_memory_cache()
  return nvrtc.compile_cuda(src, tgt)


def measure(name: str, make, repeats: int) -> Row:
  row = Row(name)
  tgt = as_target(ARCH)
  try:
    wl, s, rtol, atol = make()
    state = s.state

    lower_ms = []

    def codegen():
      t0 = time.perf_counter()
      prog = lower(state, "default")
      lower_ms.append((time.perf_counter() - t0) * 1e3)
      check_resources(state, prog, tgt)
      return prog, emit_cuda(prog)
    row.codegen_ms, (prog, src) = _median_ms(codegen, repeats)
    row.lower_ms = statistics.median(lower_ms)
    row.kernels = len(prog.kernels)
    row.threads = max(int(np.prod(k.block)) for k in prog.kernels)

    row.nvrtc_ms, binary = _median_ms(lambda: _compile_uncached(src, tgt), repeats)
    res = [binary.resources.get(k.name, nvrtc.Resources()) for k in prog.kernels]
    row.regs = max(r.registers for r in res)
    row.smem = max(r.shared_bytes for r in res)
    row.spill_st = sum(r.spill_stores for r in res)
    row.spill_ld = sum(r.spill_loads for r in res)

    kern = Kernel(LaunchPlan.from_program(prog), src, binary, tgt, prog)
    t0 = time.perf_counter()
    kern.simulator()  # cold: this source was never built into MINICOMP_CACHE_DIR
    row.sim_build_ms = (time.perf_counter() - t0) * 1e3

    ins = wl.random_inputs(1)
    out = kern(*ins, device="cpu")
    ref = wl.reference(*ins)
    row.max_err = float(np.max(np.abs(out.astype(np.float64) - ref))) if out.size else 0.0
    row.check = "PASS" if out.shape == ref.shape and np.allclose(out, ref, rtol=rtol, atol=atol) else "FAIL"
    row.sim_run_ms, _ = _median_ms(lambda: kern(*ins, device="cpu"), repeats)
  except Exception as e:  # report it in the table and go on with the next workload
    row.note = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
  return row


def warm_up() -> None:
  """Load libnvrtc and run g++ once, so the first workload does not pay for process start-up."""
  src = 'extern "C" __global__ void warm(float* x) { x[threadIdx.x] += 1.0f; }\n'
  _compile_uncached(src, as_target(ARCH))
  build_simulator(src, {"warm": ["float*"]})


# ---- reporting ---------------------------------------------------------------------------

COLUMNS = [  # header, getter, format, right-aligned
  ("workload", lambda r: r.name, "{}", False),
  ("kernels", lambda r: r.kernels, "{}", True),
  ("threads", lambda r: r.threads, "{}", True),
  ("lower+emit ms", lambda r: r.codegen_ms, "{:.1f}", True),
  ("(lower)", lambda r: r.lower_ms, "{:.1f}", True),
  ("nvrtc ms", lambda r: r.nvrtc_ms, "{:.1f}", True),
  ("sim build ms*", lambda r: r.sim_build_ms, "{:.0f}", True),
  ("sim run ms*", lambda r: r.sim_run_ms, "{:.1f}", True),
  ("regs", lambda r: r.regs, "{}", True),
  ("smem B", lambda r: r.smem, "{}", True),
  ("spills st/ld B", lambda r: f"{r.spill_st}/{r.spill_ld}", "{}", True),
  ("max abs err", lambda r: r.max_err, "{:.1e}", True),
  ("check", lambda r: r.check, "{}", False),
]


def _cell(r: Row, get, fmt) -> str:
  v = get(r)
  if isinstance(v, float) and v != v:
    return "-"
  return fmt.format(v)


def table(rows: list[Row], markdown: bool) -> str:
  cells = [[_cell(r, get, fmt) for _, get, fmt, _ in COLUMNS] for r in rows]
  heads = [h for h, *_ in COLUMNS]
  if markdown:
    out = ["| " + " | ".join(heads) + " |",
           "| " + " | ".join("---:" if right else "---" for *_, right in COLUMNS) + " |"]
    out += ["| " + " | ".join(c) + " |" for c in cells]
    return "\n".join(out)
  widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(heads)]

  def line(vals):
    return "  ".join(v.rjust(w) if right else v.ljust(w)
                     for v, w, (*_, right) in zip(vals, widths, COLUMNS)).rstrip()
  return "\n".join([line(heads), line(["-" * w for w in widths])] + [line(c) for c in cells])


def header(args_line: str, repeats: int, load: str) -> list[str]:
  major, minor = nvrtc.nvrtc_version()
  return [
    f"command:  {args_line}",
    f"date:     {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
    f"machine:  nproc={_nproc()}, CPU: {_cpu_model()}, load average at start {load}",
    f"NVRTC:    {major}.{minor} (target {ARCH}; disk cache off, memory cache cleared before every compile)",
    f"g++:      {_cmd_out(['g++', '-dumpfullversion'])}; python {platform.python_version()}; "
    f"minicomp {mc.__version__} @ {_revision()}",
    f"repeats:  {repeats} (lower+emit, nvrtc and sim run are medians; sim build is one cold g++ build)",
    "* sim build / sim run are CPU-simulator times (g++ build of the emitted CUDA C, run on the host CPU);",
    "  they check correctness only and say nothing about the kernel's speed on a GPU.",
  ]


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--repeats", type=int, default=5, help="runs per timed stage; the median is shown (default 5)")
  ap.add_argument("--only", metavar="NAME_SUBSTRING", help="only the workloads whose name contains this")
  ap.add_argument("--markdown", action="store_true", help="print the table as markdown")
  args = ap.parse_args(argv)
  if args.repeats < 1:
    ap.error("--repeats must be at least 1")
  todo = [(n, m) for n, m in WORKLOADS if args.only is None or args.only in n]
  if not todo:
    ap.error(f"no workload name contains {args.only!r}; names: {', '.join(n for n, _ in WORKLOADS)}")

  load = _loadavg()
  cmd = shlex.join(["python", *sys.argv]) if argv is None else shlex.join(["python", sys.argv[0], *argv])
  t_start = time.perf_counter()
  try:
    warm_up()
    rows = [measure(n, m, args.repeats) for n, m in todo]
  finally:
    _TMP.cleanup()
  total = time.perf_counter() - t_start

  head = header(cmd, args.repeats, load)
  if args.markdown:
    print("```\n" + "\n".join(head) + "\n```\n")
  else:
    print("\n".join(head) + "\n")
  print(table(rows, args.markdown))
  notes = [f"{r.name}: {r.note}" for r in rows if r.note]
  if notes:
    print("\nerrors:\n" + "\n".join("  " + n for n in notes))
  print(f"\ntotal wall time {total:.1f} s")
  return 0 if all(r.check == "PASS" for r in rows) else 1


if __name__ == "__main__":
  sys.exit(main())
