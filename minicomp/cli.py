"""The ``minicomp`` command: compile, run and inspect ONNX models.

    minicomp info model.onnx                        ops, which are supported, the tasks it would make
    minicomp compile model.onnx --target sm_86 -o out/
    minicomp compile model.onnx --dump-after lower  the loop nest of every kernel (phases: docs/architecture.md)
    minicomp run out/ --input input=x.npy --output y.npy
    minicomp bench out/ --repeat 100                GPU time per kernel and end to end (CUDA events)
    minicomp collect                                time programs on this GPU into a timings dataset
    minicomp calibrate --data timings.jsonl.gz      fit the static model to GPU timings (docs/static_model.md)
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

from minicomp.errors import MinicompError, UsageError


def _parse_shapes(items: list[str] | None) -> dict[str, tuple[int, ...]] | None:
  if not items: return None
  out = {}
  for it in items:
    name, _, dims = it.partition("=")
    try:
      shape = tuple(int(d) for d in dims.replace("x", ",").split(","))
    except ValueError:
      shape = ()
    if not name or not shape or any(d <= 0 for d in shape):
      raise UsageError(f"--input-shape expects NAME=D1,D2,... with positive integer dims, got {it!r}")
    out[name] = shape
  return out


def _npy_header(path: str, what: str) -> tuple[tuple[int, ...], np.dtype]:
  """The shape and dtype an .npy file declares, read from its header alone (nothing allocated)."""
  try:
    with open(path, "rb") as f:
      major, _ = np.lib.format.read_magic(f)
      read = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
      shape, _, dtype = read(f)
  except (OSError, ValueError, EOFError, SyntaxError) as e:
    raise UsageError(f"{what}: {path!r} is not a readable .npy file ({e})") from None
  return tuple(shape), dtype


def _feed_paths(items: list[str] | None) -> list[tuple[str, str, tuple, np.dtype]]:
  """``NAME=FILE.npy`` items -> (name, path, shape, dtype), each FILE a regular .npy file (a FIFO or a
  device is refused, never waited on) whose shape and dtype are read from its header alone."""
  pairs = []
  for it in items or []:
    name, _, path = it.partition("=")
    if not name or not path: raise UsageError(f"--input expects NAME=FILE.npy, got {it!r}")
    if not Path(path).exists(): raise UsageError(f"--input {name}: no file {path!r}")
    if not Path(path).is_file(): raise UsageError(f"--input {name}: {path!r} is not a regular file")
    pairs.append((name, path, *_npy_header(path, f"--input {name}")))
  return pairs


def _load_feeds(pairs: list[tuple[str, str, tuple, np.dtype]], inputs) -> dict[str, np.ndarray]:
  """The arrays of :func:`_feed_paths`' files. Each file's header is checked against the model's input
  (``inputs``: its IOSpecs) before the array is read, so a header claiming 2^40 elements allocates
  nothing; an unreadable or non-.npy file is a UsageError, a name, shape or dtype mismatch a FeedError."""
  from minicomp.ir.ops import NP_DTYPE
  from minicomp.errors import FeedError
  specs = {i.name: i for i in inputs}
  feeds = {}
  for name, path, shape, dtype in pairs:
    if name not in specs:
      raise FeedError(f"--input {name}: the model has no input {name!r}; its inputs are "
                      + ", ".join(f"{i.name} {list(i.shape)} {i.dtype}" for i in specs.values()))
    spec = specs[name]
    if shape != tuple(spec.shape): raise FeedError(f"input {name!r}: expected shape {list(spec.shape)}, {path!r} holds {list(shape)}")
    if dtype != np.dtype(NP_DTYPE[spec.dtype]): raise FeedError(f"input {name!r}: expected dtype {spec.dtype}, {path!r} holds {dtype}")
    try:
      feeds[name] = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
      raise UsageError(f"--input {name}: {path!r} is not a readable .npy file ({e})") from None
  return feeds


def _check_save_path(path: str) -> None:
  """Refuse, before compiling, a -o folder the save would refuse (a file, a folder of other files, or a place
  where no folder can be made)."""
  from minicomp.saved_model import check_can_save
  check_can_save(Path(path).resolve())


def _check_output_paths(paths: list[str]) -> None:
  """Refuse, before any work, an --output that is a folder or whose folder does not exist."""
  for p in map(Path, paths):
    if p.is_dir(): raise UsageError(f"--output {str(p)!r} is a folder; give a file name")
    if not p.parent.is_dir(): raise UsageError(f"--output {str(p)!r}: no folder {str(p.parent)!r}")


def _save_npy(path: str, arr: np.ndarray) -> None:
  """Write ``arr`` to exactly ``path`` (np.save appends .npy to a name without it, and the user would
  read a stale file), through a temporary file in the same folder renamed into place."""
  p = Path(path)
  tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
  try:
    with open(tmp, "wb") as f: np.save(f, arr)
    os.replace(tmp, p)
  except OSError as e:
    tmp.unlink(missing_ok=True)
    raise UsageError(f"--output {path!r}: {e.strerror or e}") from None


def _ops_only(model, why: str) -> int:
  """``info`` of a model whose dims are not all known: its ops from the file as it is, no kernels."""
  from collections import Counter

  from minicomp.frontend.onnx_import import read_model
  from minicomp.graph.registry import lookup
  m = read_model(model)
  opset = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), 0)
  print(f"model {m.graph.name}: opset {opset}, {len(m.graph.node)} nodes (not folded: {why})")
  print("inputs:  " + ", ".join(f"{i.name} {[d.dim_value or d.dim_param or '?' for d in i.type.tensor_type.shape.dim]}"
                                for i in m.graph.input))
  print("\nops:")
  for op_type, count in sorted(Counter(n.op_type for n in m.graph.node).items()):
    print(f"  {op_type:<24} x{count:<4} {'supported' if lookup(op_type, opset) is not None else 'NOT SUPPORTED'}")
  print("\nthe kernels it would make: give every dynamic dim a size with --input-shape (NAME=D1,D2,... or DIM=N)")
  return 0


def cmd_info(a) -> int:
  from collections import Counter
  from minicomp.compiler import onnx_loader, rewrite_graph
  from minicomp.errors import ShapeError
  from minicomp.graph.partition import partition
  from minicomp.graph.registry import lookup
  if Path(a.model).is_dir():       # a folder `minicomp compile` wrote: its kernels, as compile printed them
    from minicomp.saved_model_load import load
    print(load(a.model).summary())
    return 0
  try:
    g = onnx_loader()(a.model, _parse_shapes(a.input_shape), check_ops=False)
  except ShapeError as e:
    if "dynamic or unknown dims" not in str(e): raise
    return _ops_only(a.model, "dynamic dims")
  print(f"model {g.name}: opset {g.opset}, {len(g.nodes)} nodes after constant folding")
  print("inputs:  " + ", ".join(f"{n} {list(g.values[n].shape)} {g.values[n].dtype}" for n in g.inputs))
  print("outputs: " + ", ".join(g.outputs))
  sizes = Counter()
  for v in g.values.values():
    if v.is_const: sizes[v.dtype] += v.const.nbytes
  if sizes: print("weights: " + ", ".join(f"{b / 1e6:.2f} MB {t}" for t, b in sizes.most_common())
                  + " (compiled in the model's own float types; --precision fp32|tf32|fp16|bf16 changes them)")
  print("\nops:")
  bad = 0
  for op_type, count in sorted(g.op_counts().items()):
    ok = lookup(op_type, g.opset) is not None
    bad += not ok
    print(f"  {op_type:<24} x{count:<4} {'supported' if ok else 'NOT SUPPORTED'}")
  if bad:
    print(f"\n{bad} op type(s) are not supported; `minicomp compile` would stop with UnsupportedOpError.")
    return 1
  part = partition(rewrite_graph(g))      # (compile's: batch norms folded, sibling matmuls merged)
  print(f"\n{len(part.groups)} kernels (fused groups), {len(part.steps) - len(part.groups)} views:")
  for k, grp in enumerate(part.groups):
    print(f"  {k:>3}: {'+'.join(n.op_type for n in grp.nodes)}  -> {', '.join(grp.outputs)}")
  return 0


def cmd_compile(a) -> int:
  from minicomp.compiler import compile as mc_compile
  dumping = bool(a.dump_after or a.dump_dir)
  if not a.output and not dumping:
    raise UsageError("compile needs -o/--output FOLDER (or --dump-after / --dump-dir to only look at the phases)")
  if a.output: _check_save_path(a.output)
  cm = mc_compile(a.model, target=a.target, input_shapes=_parse_shapes(a.input_shape), progress=not a.quiet,
                  schedules=a.schedules, dump_after=a.dump_after, dump_dir=a.dump_dir, jobs=a.jobs,
                  precision=a.precision)
  print(cm.summary())
  if a.output: print(f"\nsaved to {cm.save(a.output)}")
  if a.dump_dir: print(f"phase dumps written to {a.dump_dir}")
  return 0


def cmd_tune(a) -> int:
  from minicomp.compiler import compile as mc_compile
  if a.output: _check_save_path(a.output)
  cm = mc_compile(a.model, target=a.target, input_shapes=_parse_shapes(a.input_shape), progress=not a.quiet,
                  trials=a.trials, strategy=a.strategy, log_file=a.log, seed=a.seed,
                  measures_per_round=a.per_round, time_budget_s=a.time_budget, jobs=a.jobs,
                  precision=a.precision, cluster=a.cluster)
  print(cm.estimate(progress=not a.quiet))
  if a.output:
    print(f"saved to {cm.save(a.output)}")
  return 0


def cmd_report(a) -> int:
  from minicomp.search.report import plot_curve, text_report
  print(text_report(a.log))
  if a.png: print(f"tuning curve written to {plot_curve(a.log, a.png)}")
  return 0


def cmd_run(a) -> int:
  from minicomp.saved_model_load import load
  paths, inputs = a.output or [], _feed_paths(a.input)
  _check_output_paths(paths)
  cm = load(a.compiled)
  if len(paths) > len(cm.output_names):
    raise UsageError(f"{len(paths)} --output files given for {len(cm.output_names)} output(s)")
  if cm.inputs and not inputs:
    from minicomp.errors import FeedError
    raise FeedError("feeds: none given; run needs --input NAME=FILE.npy for each model input: "
                    + ", ".join(f"{i.name} {list(i.shape)} {i.dtype}" for i in cm.inputs))
  outs = cm.run(_load_feeds(inputs, cm.inputs), device=a.device)
  print(f"ran on {_device_line(a.device)}", file=sys.stderr)
  for k, (name, arr) in enumerate(zip(cm.output_names, outs)):
    if k < len(paths):
      _save_npy(paths[k], arr)
      print(f"{name}: {list(arr.shape)} {arr.dtype} -> {paths[k]}")
    else:
      print(f"{name}: {list(arr.shape)} {arr.dtype} min={arr.min() if arr.size else 0:.6g} max={arr.max() if arr.size else 0:.6g}")
  return 0


def cmd_cache(a) -> int:
  from minicomp import schedule_cache
  from minicomp.codegen import program_cache
  from minicomp.search.static import cache as static_cache
  if a.action == "clear":
    print(f"schedule cache: {schedule_cache.clear()} file(s) removed")
    print(f"lowered programs: {program_cache.clear()} file(s) removed")
    print(f"static facts: {static_cache.clear_disk()} file(s) removed")
  else:
    print(schedule_cache.info())
    print(program_cache.info())
    print(static_cache.info())
  return 0


def cmd_collect(a) -> int:
  """Time a spread of programs on this machine's GPU into the timings dataset (for `minicomp calibrate`)."""
  from minicomp.search.collect import STANDARD, collect
  workloads = a.workload or (() if a.model is not None else STANDARD)
  done = collect(workloads, per_task=a.per_task, seed=a.seed, out=a.out, backend=a.device, model=a.model,
                 input_shapes=_parse_shapes(a.input_shape), precision=a.precision, max_tasks=a.tasks)
  print(done)
  print(f"next: `minicomp calibrate --arch {done.arch}" + (f" --data {done.path}`" if a.out else "`")
        + " fits the static model to these timings")
  return 0


def cmd_calibrate(a) -> int:
  """Fit the static model's calibration for an arch on timed programs and make it the one estimates use."""
  from minicomp.search.static import calibration as C
  from minicomp.search.static import fit as F
  from minicomp.search.static import timings as T
  arch = C.family(a.arch)
  if a.reset:
    p = C.user_path(arch)
    print(f"removed {p}" if p.exists() else f"no calibration of yours for {arch} ({p})")
    p.unlink(missing_ok=True)
    return 0
  files = a.data or [str(T.default_path(arch))]
  if not a.data and not Path(files[0]).exists():
    raise UsageError(f"no timings for {arch} at {files[0]}: time programs on a GPU with `minicomp collect`, or give "
                     "--data FILE (a timings dataset: docs/static_model.md)")
  rows = [r for f in files for r in T.read(f)]
  cal, loto = F.calibrate(rows, arch, check=not a.no_check, progress=True)
  if loto:
    print(f"leave-one-task-out (fitted without the task, scored on it; GPU times of {', '.join(cal.provenance['gpus'])}):")
    print(f"{'task':<14}{'programs':>9}  {'pick':>12}  {'top-10':>10}  {'Spearman':>13}")
    print(f"{'':<14}{'':>9}  {'uncal -> cal':>12}  {'':>10}  {'':>13}")
    for k, v in loto.items():
      u = v["uncalibrated"]
      print(f"{k:<14}{v['programs']:>9}  {u['pick']:5.2f} -> {v['pick']:4.2f}  {u['top10']:>3} -> {v['top10']:<3}  "
            f"{u['rho']:5.2f} -> {v['rho']:4.2f}")
  out = cal.save(a.out or C.user_path(arch))
  print(f"calibration for {arch} ({cal.provenance['programs']} programs, {len(cal.provenance['tasks'])} tasks) written "
        f"to {out}" + ("" if a.out else f"; estimates for {arch} use it now (`minicomp calibrate --reset` undoes it)"))
  return 0


def _device_line(device: str | None) -> str:
  """What ``run(device=...)`` ran on: the GPU by name, or the CPU simulator and why."""
  from minicomp.codegen.driver import backend_for, gpu_status
  backend = backend_for(device)
  if backend is not None: return f"the GPU: {gpu_status(backend)}"
  return "the CPU simulator" + (" (asked for)" if device == "cpu" else f" ({gpu_status()})")


def _load_or_compile(path: str, target: str, shapes):
  from pathlib import Path
  if Path(path).is_dir():
    from minicomp.saved_model_load import load
    return load(path)
  from minicomp.compiler import compile as mc_compile
  return mc_compile(path, target=target, input_shapes=shapes, progress=True)


def cmd_bench(a) -> int:
  from minicomp.codegen.driver import NoGPUError
  pairs = _feed_paths(a.input)
  cm = _load_or_compile(a.model, a.target, _parse_shapes(a.input_shape))
  feeds = _load_feeds(pairs, cm.inputs) or None
  try:
    print(cm.benchmark(feeds, repeat=a.repeat, warmup=a.warmup, flush_l2=not a.no_flush, cuda_graph=a.cuda_graph,
                       device=a.device))
  except NoGPUError as e:
    print(f"minicomp: no GPU to measure on ({e.reason.rstrip('.')}); the static model's estimate instead:",
          file=sys.stderr)
    print(cm.estimate(progress=True))
  return 0


class _Parser(argparse.ArgumentParser):
  """argparse, but a usage error is one line (``minicomp: error: ...``) with exit status 2."""

  def error(self, message: str):
    self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
  from minicomp import __version__
  from minicomp.compiler import PHASE_NAMES
  from minicomp.search.collect import MODEL_TASKS
  p = _Parser(prog="minicomp", description="A tensor compiler: ONNX models to CUDA kernels it writes itself.")
  p.add_argument("--version", action="version", version=f"minicomp {__version__}")
  sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
  from minicomp.frontend.precision import PRECISIONS
  precision_help = ("the float types to compute in: fp32, tf32 (fp32, with matmuls and convolutions on TF32 tensor "
                    "cores), fp16 or bf16 (an fp32 model autocast as torch.autocast does: matmuls and convolutions in "
                    "the half type, exp / sums / softmax / norms in fp32); default: the model's own")
  shape_help = "a size for dynamic dims: an input's shape, NAME=D1,D2,..., or one dim by its name, DIM=N (repeatable)"

  pi = sub.add_parser("info", help="list a model's ops, whether each is supported, and the kernels it would compile to",
                      description="Import an ONNX model (with constant folding) and report its ops and fused kernels "
                                  "(exit status 1 if some op is not supported); or list the kernels of a folder "
                                  "`minicomp compile` wrote.")
  pi.add_argument("model", help="path to an .onnx file, or a compiled model's folder")
  pi.add_argument("--input-shape", action="append", help=shape_help)
  pi.set_defaults(fn=cmd_info)

  pc = sub.add_parser("compile", help="compile a model to a folder of CUDA kernels, PTX/CUBIN and weights",
                      description="Compile an ONNX model for a GPU architecture (no GPU needed) and save it; "
                                  "load it with `minicomp run` or minicomp.load().")
  pc.add_argument("model", help="path to an .onnx file")
  pc.add_argument("--target", default="sm_86", help="CUDA architecture, e.g. sm_80, sm_86, sm_90 (default sm_86)")
  pc.add_argument("-o", "--output", help="folder to write the compiled model to (required unless dumping)")
  pc.add_argument("-j", "--jobs", type=int, default=None, help="processes choosing default schedules at once (default: $MINICOMP_JOBS, else one per core)")
  pc.add_argument("--precision", choices=list(PRECISIONS), default=None, help=precision_help)
  pc.add_argument("--input-shape", action="append", help=shape_help)
  pc.add_argument("--schedules", default="gensor", choices=["gensor", "compare", "rules", "quick"],
                  help="gensor (default): Gensor's constructed schedules (its analytic model's first candidate) where "
                       "the static model estimates them faster than the rule-based ones; compare: also build the "
                       "candidates that model cannot separate and keep the static model's pick (1.3-1.9x the compile "
                       "time, kernels ~1%% faster by the static model, up to 6%%); rules: the rule-based schedules "
                       "only (fastest to compile, slowest kernels); quick: the default's former name")
  pc.add_argument("-q", "--quiet", action="store_true", help="no progress lines or bars")
  pc.add_argument("--dump-after", action="append", metavar="PHASE",
                  help=f"print the output of a compiler phase to stderr (repeatable or comma-separated; 'all'): "
                       f"{', '.join(PHASE_NAMES)}")
  pc.add_argument("--dump-dir", metavar="DIR", help="write the phase dumps to files in DIR instead (every phase "
                                                    "unless --dump-after names some)")
  pc.set_defaults(fn=cmd_compile)

  pt = sub.add_parser("tune", help="search schedules for a model's kernels and log every measurement",
                      description="Tune every task of an ONNX model (Ansor-style search), appending each measured "
                                  "candidate to --log; re-running the same command resumes. Without a GPU every "
                                  "cost is a static-model ESTIMATE. Prints the end-to-end estimate.")
  pt.add_argument("model", help="path to an .onnx file")
  pt.add_argument("--target", default="sm_86", help="arch (sm_86) or device (rtx3090, a100, ...); default sm_86")
  pt.add_argument("--trials", type=int, required=True, help="measurements in total for this model (the log counts)")
  pt.add_argument("--log", required=True, help="JSON-lines tuning log to append to / resume from")
  pt.add_argument("--strategy", default="ansor", help="ansor (default), felix, felix-pre (Felix on the shipped "
                                                      "pre-trained cost model), gensor, opevo, tuna or random")
  pt.add_argument("--seed", type=int, default=0)
  pt.add_argument("--per-round", type=int, default=64, help="measurements per round (default 64, Ansor's)")
  pt.add_argument("--time-budget", type=float, default=None, help="stop searching after this many seconds")
  pt.add_argument("--cluster", metavar="ADDRESS", default=None,
                  help="measure on a Ray cluster: ray://HOST:PORT, HOST:PORT (its GCS) or auto (docs/cluster.md)")
  pt.add_argument("-o", "--output", help="also save the compiled model to this folder")
  pt.add_argument("-j", "--jobs", type=int, default=None, help="processes choosing default schedules at once (default: $MINICOMP_JOBS, else one per core)")
  pt.add_argument("--precision", choices=list(PRECISIONS), default=None, help=precision_help)
  pt.add_argument("--input-shape", action="append", help=shape_help)
  pt.add_argument("-q", "--quiet", action="store_true", help="no progress lines or bars")
  pt.set_defaults(fn=cmd_tune)

  pp = sub.add_parser("report", help="per-task best latencies of a tuning log, and its tuning curve as a PNG",
                      description="Summarise a tuning log written by `minicomp tune` / compile(log_file=...).")
  pp.add_argument("log", help="the JSON-lines tuning log")
  pp.add_argument("--png", help="write the tuning curve (best total vs trials and vs seconds) to this PNG")
  pp.set_defaults(fn=cmd_report)

  pr = sub.add_parser("run", help="run a compiled model on .npy inputs",
                      description="Run a compiled model folder: on the GPU when one is usable, else on the CPU simulator.")
  pr.add_argument("compiled", help="folder written by `minicomp compile`")
  pr.add_argument("--input", action="append", help="NAME=FILE.npy for each model input (repeatable)")
  pr.add_argument("-o", "--output", action="append", help="FILE for each output, in graph order (repeatable; written "
                                                          "as .npy to exactly that name); without it outputs are summarised")
  pr.add_argument("--device", choices=["cpu", "gpu", "cuda", "pycuda"], default=None,
                  help="cpu (the simulator), gpu (the default GPU backend), or a backend: cuda (driver API, "
                       "the default) or pycuda; default: the GPU when one is usable, else cpu")
  pr.set_defaults(fn=cmd_run)

  pc2 = sub.add_parser("cache", help="the schedule cache and the kernels' static facts: what they hold (info), or "
                                     "empty them (clear)",
                       description="Show or empty the schedule cache (the default schedule chosen for each layer, "
                                   "kept so that compiling a model with that layer again is fast), its lowered "
                                   "programs, and the static model's facts of the kernels (kept so that saving or "
                                   "estimating them again is fast).")
  pc2.add_argument("action", choices=["info", "clear"])
  pc2.set_defaults(fn=cmd_cache)

  pl = sub.add_parser("collect", help="time programs on this GPU for `minicomp calibrate` (resumable)",
                      description="Build a spread of programs for each workload or each of a model's heaviest "
                                  "layers (Gensor's best few and random ones), check each against numpy, time it "
                                  "on this machine's GPU (CUDA events, "
                                  "L2 flushed) and append it with the static model's analyses to the timings "
                                  "dataset. Programs already there are skipped, so an interrupted run resumes.")
  pl.add_argument("--workload", action="append", help="a minicomp.workloads call, e.g. 'matmul(1024, 1024, 1024)' "
                                                      "(repeatable; default: the six standard workloads, unless "
                                                      "--model is given)")
  pl.add_argument("--model", help="an ONNX model: collect its heaviest layers (their tasks as compile makes them), "
                                  "checked against its tensor expressions evaluated in numpy")
  pl.add_argument("--tasks", type=int, default=MODEL_TASKS,
                  help=f"with --model: how many of its tasks, the heaviest first (default {MODEL_TASKS})")
  pl.add_argument("--input-shape", action="append", help="with --model: " + shape_help)
  pl.add_argument("--precision", choices=list(PRECISIONS), default=None, help="with --model: " + precision_help)
  pl.add_argument("--per-task", type=int, default=32, help="programs per workload or layer (default 32)")
  pl.add_argument("--seed", type=int, default=0, help="of the random programs and inputs (default 0)")
  pl.add_argument("-o", "--out", help="timings file (default: the cache folder's timings/<arch>.jsonl)")
  pl.add_argument("--device", choices=["cuda", "pycuda"], default=None, help="GPU backend (default: the default one)")
  pl.set_defaults(fn=cmd_collect)

  pk = sub.add_parser("calibrate", help="fit the static model to GPU timings (for tuning without that GPU)",
                      description="Fit the static model's calibration for an arch on timed programs (a timings "
                                  "dataset: `minicomp collect` writes one; docs/static_model.md) after judging it "
                                  "leave-one-task-out, and make it the one estimates for that arch use.")
  pk.add_argument("--arch", default="sm_90", help="the arch whose timings to fit (default sm_90)")
  pk.add_argument("--data", action="append", help="a timings file (.jsonl or .jsonl.gz; repeatable; default: what "
                                                  "`minicomp collect` wrote to the cache folder)")
  pk.add_argument("-o", "--out", help="write the calibration here instead of making it the active one")
  pk.add_argument("--no-check", action="store_true", help="skip the leave-one-task-out check (a fit per task)")
  pk.add_argument("--reset", action="store_true", help="remove your calibration for --arch: estimates go back to "
                                                       "the shipped one")
  pk.set_defaults(fn=cmd_calibrate)

  pb = sub.add_parser("bench", help="time a model on the GPU: per kernel call and end to end (CUDA events)",
                      description="Measure a compiled model folder (or an .onnx file, compiled first) on the GPU with "
                                  "CUDA events and print a table. Without a GPU it says so and prints the static "
                                  "model's ESTIMATE instead.")
  pb.add_argument("model", help="folder written by `minicomp compile`, or an .onnx file")
  pb.add_argument("--target", default="auto", help="for an .onnx file: the arch to compile for (default auto: the "
                                                   "GPU's arch, sm_86 without a GPU)")
  pb.add_argument("--input", action="append", help="NAME=FILE.npy (default: random inputs)")
  pb.add_argument("--input-shape", action="append", help=shape_help)
  pb.add_argument("--repeat", type=int, default=50, help="timed runs (default 50)")
  pb.add_argument("--warmup", type=int, default=5, help="untimed runs first (default 5)")
  pb.add_argument("--no-flush", action="store_true", help="do not flush the L2 cache before each timed run")
  pb.add_argument("--cuda-graph", action="store_true", help="replay the launches as one captured CUDA graph")
  pb.add_argument("--device", choices=["gpu", "cuda", "pycuda"], default="gpu", help="GPU backend (default: gpu)")
  pb.set_defaults(fn=cmd_bench)
  return p


def main(argv: list[str] | None = None) -> int:
  """Run the command; a MinicompError (bad input, unsupported model, ...) is one line on stderr and
  exit status 2, Ctrl-C is exit status 130; any other exception is a bug and shows its traceback."""
  from minicomp.progress import deferred_interrupts
  args = build_parser().parse_args(argv)
  try:
    if args.fn not in (cmd_compile, cmd_tune, cmd_collect): return args.fn(args)
    with deferred_interrupts():            # (their long loops stop at the next safe point)
      return args.fn(args)
  except MinicompError as e:
    print(f"minicomp: error: {type(e).__name__}: {e}", file=sys.stderr)
    return 2
  except KeyboardInterrupt:
    print("minicomp: interrupted", file=sys.stderr)
    return 130
  except BrokenPipeError:                  # `minicomp info model.onnx | head`: the reader left; say nothing
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())   # (so the exit's flush does not raise again)
    return 141


if __name__ == "__main__":   # pragma: no cover
  sys.exit(main())
