"""Compile time of whole models, cold and warm, by phase; and TVM's default pipeline on the same model.

    python benchmarks/compile_model.py                       # ResNet-18, MobileNetV2, BERT-tiny (64x64 images)
    python benchmarks/compile_model.py --only resnet18 --hw 224
    python benchmarks/compile_model.py --tvm-python /path/to/tvm-venv/bin/python
    python benchmarks/compile_model.py --schedules gensor compare   # compile's default and schedules="compare"
    python benchmarks/compile_model.py --tvm-python ... --repeat 5   # medians of 5 rounds, TVM and minicomp in turn
    python benchmarks/compile_model.py --only --onnx model.onnx     # any ONNX file instead

Each compile runs in a fresh process (what a user's script or ``minicomp compile`` pays; library imports
excluded) with ``compile(model, target, jobs=--jobs, schedules=S)``, for each S of ``--schedules``:

- **cold**: an empty cache folder (no NVRTC binaries, no schedule cache);
- **warm**: a second process on the same folder (the schedule cache and NVRTC's binaries are there).

Per model: tasks, kernel calls, cold seconds with Gensor's construction, the static estimates that compare
candidates, lowering + emission and NVRTC (these four are summed over the worker processes, so together they
can exceed the wall time), warm seconds, and the chosen kernels' end-to-end static-model ESTIMATE (to check
that a faster compile keeps the same kernels).

TVM: with ``--tvm-python`` (an interpreter where ``apache-tvm`` is installed: an optional benchmark extra, never a
minicomp dependency) or when ``import tvm`` works here, ``benchmarks/tvm_compile.py`` runs relax's ONNX import,
dlight's default schedules and ``relax.build`` for CUDA on the same ONNX file; the wheel stops at CUDA C, which
is compiled here with NVRTC (the same library minicomp uses; CCCL headers from ``--cccl-include``, default:
the first ``/usr/local/cuda*/include/cccl``) and added. minicomp's bytecode is compiled first (``compileall``: a
Python told to write none would compile minicomp's sources in every worker again, which a user's installation does
once). "cold / TVM" is minicomp's cold time over TVM's; with ``--repeat N`` every figure is the median of N rounds
(TVM, cold, warm in turn per round, so a drift of the machine's speed, 20% within minutes on a shared 2-core
machine, moves both), the ratio the median of the rounds'.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODELS = {   # name -> (zoo builder, keyword arguments; "hw" is replaced by --hw)
  "resnet18": ("resnet18", {"hw": None}),
  "mobilenet_v2": ("mobilenet_v2", {"hw": None}),
  "bert_tiny": ("bert_tiny", {"s": 128}),
}


def one(args) -> int:
  """Child: compile one model (ONNX file) and print its figures as JSON."""
  import onnx

  import minicomp as mc
  model = onnx.load(args.one)
  t0 = time.perf_counter()
  cm = mc.compile(model, target=args.target, jobs=args.jobs, progress=False, schedules=args.schedules[0])
  secs = time.perf_counter() - t0
  s = cm.stats
  print(json.dumps({"s": secs, "tasks": s.tasks, "calls": s.calls, "construct": s.construct, "estimate": s.estimate,
                    "build": s.build, "nvrtc": s.nvrtc, "cached": s.cached, "phases": s.phases,
                    "estimate_us": cm.estimate().latency_s * 1e6}))
  return 0


def _child(onnx_path: str, cache: str, args, schedules: str) -> dict:
  env = dict(os.environ, MINICOMP_CACHE_DIR=cache, MINICOMP_SCHEDULE_CACHE="1", MINICOMP_NVRTC_CACHE="1")
  r = subprocess.run([sys.executable, __file__, "--one", onnx_path, "--target", args.target, "--jobs", str(args.jobs),
                      "--schedules", schedules],
                     env=env, capture_output=True, text=True, check=False)
  if r.returncode != 0: raise SystemExit(f"compiling {onnx_path} failed:\n{r.stderr[-3000:]}")
  return json.loads(r.stdout.strip().splitlines()[-1])


def _tvm(onnx_path: str, args, tmp: str) -> dict | None:
  py = args.tvm_python or sys.executable
  cu = os.path.join(tmp, "tvm.cu")
  r = subprocess.run([py, str(HERE / "tvm_compile.py"), onnx_path, args.target, cu], capture_output=True, text=True,
                     check=False)
  if r.returncode != 0:
    print(f"TVM failed on {onnx_path}: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}")
    return None
  out = json.loads(r.stdout.strip().splitlines()[-1])
  from cuda.bindings import nvrtc as nv
  cccl = args.cccl_include or next(iter(sorted(glob.glob("/usr/local/cuda*/include/cccl"))), None)
  opts = [f"--gpu-architecture={args.target}", "--std=c++17"] + ([f"-I{cccl}"] if cccl else [])
  err, prog = nv.nvrtcCreateProgram(Path(cu).read_bytes(), b"tvm.cu", 0, [], [])
  t0 = time.perf_counter()
  err, = nv.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
  out["nvrtc_s"] = time.perf_counter() - t0
  nv.nvrtcDestroyProgram(prog)
  if err != nv.nvrtcResult.NVRTC_SUCCESS:
    print(f"NVRTC could not compile TVM's CUDA C for {onnx_path} ({err}; CCCL headers: {cccl})")
    return None
  out["total_s"] = out["import_s"] + out["schedule_s"] + out["build_s"] + out["nvrtc_s"]
  return out


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--only", nargs="*", default=list(MODELS), help=f"of {', '.join(MODELS)}")
  ap.add_argument("--onnx", nargs="*", default=[], metavar="FILE",
                  help="ONNX files to compile as well (named by the file's stem; with --only and no names: these alone)")
  ap.add_argument("--hw", type=int, default=64, help="image size of the convolutional models")
  ap.add_argument("--target", default="sm_86")
  ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
  ap.add_argument("--schedules", nargs="+", default=["gensor"], choices=["gensor", "compare", "rules"],
                  help="compile's schedules= modes, a row each (default: gensor)")
  ap.add_argument("--tvm-python", default=None, help="an interpreter with apache-tvm installed")
  ap.add_argument("--cccl-include", default=None, help="CCCL headers for NVRTC on TVM's CUDA C")
  ap.add_argument("--repeat", type=int, default=1,
                  help="rounds per model (TVM, cold, warm in turn): medians, and the median of the rounds' ratios")
  ap.add_argument("--one", help=argparse.SUPPRESS)
  args = ap.parse_args(argv)
  if args.one: return one(args)
  sys.path.insert(0, str(HERE))
  import onnx
  from provenance import header_lines

  import minicomp
  from minicomp import zoo
  _bytecode(Path(minicomp.__file__).parent)
  have_tvm = args.tvm_python is not None or subprocess.run([sys.executable, "-c", "import tvm"],
                                                           capture_output=True, check=False).returncode == 0
  rows = []
  for name in args.only + args.onnx:
    if name in args.onnx:
      model, name = onnx.load(name), Path(name).stem
    else:
      fn, kw = MODELS[name]
      model, _ = getattr(zoo, fn)(**{k: (args.hw if v is None else v) for k, v in kw.items()})
    with tempfile.TemporaryDirectory(prefix="mc-compile-") as tmp:
      path = os.path.join(tmp, f"{name}.onnx")
      onnx.save(model, path)
      runs: dict[str, list] = {mode: [] for mode in args.schedules}
      for r in range(args.repeat):       # (in turn, so that the machine's drift moves both compilers alike)
        tvm = _tvm(path, args, tmp) if have_tvm else None
        for mode in args.schedules:
          cache = os.path.join(tmp, f"cache-{mode}-{r}")
          cold, warm = _child(path, cache, args, mode), _child(path, cache, args, mode)
          runs[mode].append((cold, warm, tvm))
          print(f"  {name} ({mode}, round {r + 1}): cold {cold['s']:.2f} s, warm {warm['s']:.2f} s"
                + (f", TVM {tvm['total_s']:.2f} s" if tvm else ""), file=sys.stderr, flush=True)
      rows += [(name, mode, *_medians(rs)) for mode, rs in runs.items()]
  for line in header_lines(__file__, argv): print(line)
  print(f"target:   {args.target}; jobs {args.jobs}; zoo images {args.hw}x{args.hw}; every latency a static-model ESTIMATE")
  tvm_v = next((t["version"] for *_, t in rows if t), None)
  print(f"TVM:      {tvm_v} (relax ONNX import + dlight default schedules + build; its CUDA C compiled by NVRTC here)"
        if tvm_v else "TVM:      not run (no --tvm-python and `import tvm` fails here)")
  head = ("model", "schedules", "tasks", "calls", "cold s", "construct s*", "estimate s*", "lower+emit s*", "nvrtc s*",
          "warm s", "estimate us", "TVM s", "TVM nvrtc s", "cold / TVM")
  table = []
  for name, mode, c, w, t in rows:
    table.append((name, mode, str(c["tasks"]), str(c["calls"]), f"{c['s']:.2f}", f"{c['construct']:.2f}",
                  f"{c['estimate']:.2f}", f"{c['build']:.2f}", f"{c['nvrtc']:.2f}", f"{w['s']:.2f}",
                  f"{c['estimate_us']:.1f}", f"{t['total_s']:.2f}" if t else "-", f"{t['nvrtc_s']:.2f}" if t else "-",
                  f"{t['ratio']:.2f}" if t else "-"))
  widths = [max(len(h), *(len(r[i]) for r in table)) for i, h in enumerate(head)]
  print("  ".join(h.ljust(x) for h, x in zip(head, widths)))
  print("  ".join("-" * x for x in widths))
  for r in table: print("  ".join(v.ljust(x) for v, x in zip(r, widths)))
  print("* summed over the worker processes (jobs); warm: a second process on the same cache folder")
  if args.repeat > 1:
    print(f"medians of {args.repeat} rounds (TVM, cold, warm in turn); cold / TVM: the median of the rounds' ratios:")
    for name, mode, c, _, t in rows:
      if t: print(f"  {name} ({mode}): " + ", ".join(f"{x:.2f}" for x in t["ratios"]))
  return 0


def _bytecode(package: Path) -> None:
  """Compile minicomp's modules to bytecode (``__pycache__``) where it is missing or stale: every compile's
  workers import minicomp, and a Python that writes no bytecode (``PYTHONDONTWRITEBYTECODE``, set on some CI and
  sandbox machines) compiles its sources again in every process (0.15-0.2 s each on 2 cores), which a user's
  installation, whose bytecode Python wrote on its first import, does not pay. TVM's wheel ships compiled."""
  import compileall
  compileall.compile_dir(str(package), quiet=2)


def _medians(rounds: list) -> tuple[dict, dict, dict | None]:
  """(cold, warm, TVM) figures of one model and mode over its rounds, each the median of the rounds'; TVM's with
  the median of the rounds' cold / TVM ratios ("ratio") and the ratios themselves."""
  import statistics

  def med(runs: list[dict]) -> dict:
    return {k: statistics.median(r[k] for r in runs) if isinstance(v, float) else v for k, v in runs[0].items()}
  cold, warm = med([c for c, _, _ in rounds]), med([w for _, w, _ in rounds])
  if any(t is None for *_, t in rounds): return cold, warm, None
  ratios = [c["s"] / t["total_s"] for c, _, t in rounds]
  return cold, warm, {**med([t for *_, t in rounds]), "ratio": statistics.median(ratios), "ratios": ratios}


if __name__ == "__main__":
  sys.exit(main())
