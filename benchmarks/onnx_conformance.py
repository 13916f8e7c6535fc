"""ONNX's own backend node test cases run through minicomp, each case classified.

    python benchmarks/onnx_conformance.py                   # every case: the table in benchmarks/README.md
    python benchmarks/onnx_conformance.py --filter resize   # the cases whose name matches a regex
    python benchmarks/onnx_conformance.py --show refused    # also one line per case of that outcome

The cases are ``onnx.backend.test.case.node.collect_testcases`` (about 1,900 one-node models with
reference inputs and outputs, shipped with the onnx package). Each is compiled with the rule-based
schedules and run on the CPU simulator. A case is one of:

- ``pass``: every output has the reference's shape and dtype and is close to it (ONNX's backend rule:
  ``assert_allclose`` with the case's rtol / atol, 1e-3 / 1e-7 by default; bfloat16 at least 2**-6 and float16
  at least 2**-9, two units in the last place: the reference rounds every step to the half type, minicomp
  computes in float32 and rounds once, and the two differ by that much where ONNX's data is fp16; a float32
  output's atol at least 4 float32 epsilons of its largest magnitude: a reference computed in float32 by another
  algorithm is that noisy where the exact value is 0, as test_dft_inverse's FFT, 1.9e-7 among values of 54, where
  minicomp's float64 sum gives 5.5e-15);
- ``refused (reason)``: minicomp raised a ``MinicompError``; ``REASONS`` lists every reason it may give;
- ``unsupported op``: the model uses an op minicomp has no lowering for, nor ONNX a function body of ops it
  lowers (not run, or refused by the import);
- ``wrong``: minicomp ran it and its answer differs from the reference;
- ``error``: an exception that is not a ``MinicompError``, or a refusal whose reason is not listed.

Goal (issue 16): no ``wrong``, no ``error``. minicomp compiles static shapes, so a graph input that
feeds a shape-like operand (Reduce axes, Resize sizes, Slice starts, ...: ``SHAPE_OPERANDS``) is bound
to the case's value as an initializer first, as a user compiling for that value would do (and so is an
input no node reads).
"""
from __future__ import annotations

import argparse
import re
import sys
import time
import warnings
from collections import Counter
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

TARGET = "sm_80"
OUTCOMES = ("pass", "refused", "unsupported op", "wrong", "error")

# (reason, pattern in the error message): every refusal minicomp may give a conformance case, in
# the order they are tried. docs/onnx.md lists them; a refusal matching none is an ``error``.
REASONS = [
  ("element type", r"element type \S+ is not supported|expected dtype|dtype \S+ is not supported|"
                   r"cast to \S+ is not supported|inputs have different element types|element types .* not supported|"
                   r"integer ReduceLogSumExp"),
  ("empty tensor", r"zero-size dim|empty (runtime )?tensor|empty constant|empty output|to nothing"),
  ("runtime shape operand", r"must be (a )?constant"),
  ("sequence / optional type", r"not a tensor"),
  ("op version", r"version \d+ \(opset \d+\) is newer than its lowering"),
  ("opset", r"newer than the installed onnx|could not be converted to opset"),
  ("training mode", r"training"),
  ("runtime control flow", r"trip count is not a constant|loop ends on a condition|runtime condition with branches|"
                           r"condition is not a constant true"),
  ("op form not implemented", r"is not supported|are supported|not one of|at most \d"),
]

# operands that set output shapes (or must be known to lower the op), and CastLike's type-only operand
SHAPE_OPERANDS = {
  **{op: (1,) for op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare",
                         "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "Squeeze", "Unsqueeze",
                         "Reshape", "Expand", "Tile", "Trilu", "CumSum", "CumProd", "Split", "TopK", "OneHot",
                         "CastLike")},
  "Slice": (1, 2, 3, 4), "Pad": (1, 3), "Resize": (1, 2, 3), "ConstantOfShape": (0,), "Range": (0, 1, 2),
  "Dropout": (1, 2), "BlackmanWindow": (0,), "HannWindow": (0,), "HammingWindow": (0,), "Upsample": (1,),
  "Loop": (0, 1), "AffineGrid": (1,),   # a loop's trip count and condition: how far it unrolls
  "DFT": (1, 2), "STFT": (1, 3),
}
SHAPE_ONLY = {"Shape", "Size"}   # ops that read only the shape of their input

@dataclass
class Result:
  case: str
  outcome: str
  reason: str = ""          # the refusal reason, the missing ops, or what went wrong
  detail: str = ""
  frozen: bool = False      # shape operands were bound to initializers
  seconds: float = 0.0


def cases(pattern: str = "") -> list:
  """ONNX's node test cases (sorted by name), those whose name matches ``pattern``."""
  from onnx.backend.test.case.node import collect_testcases
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    found = collect_testcases(None)
  return sorted((c for c in found if c.kind == "node" and re.search(pattern, c.name)), key=lambda c: c.name)


FOLDED = {"Constant"}   # ops the importer always evaluates (no lowering needed)


def missing_ops(model: onnx.ModelProto) -> list[str]:
  """The ops of ``model`` minicomp has no lowering for (by name: a newer op version is a refusal), after the
  import's expansion of ops ONNX defines by a function body (minicomp.frontend.expand)."""
  from minicomp.frontend.expand import expand_model
  from onnx import version_converter

  from minicomp.frontend.onnx_import import MIN_OPSET
  opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
  try:
    if opset < MIN_OPSET:             # what the importer does first (Upsample-9 becomes a Resize, Scatter-10 ...)
      model, opset = version_converter.convert_version(model, MIN_OPSET), MIN_OPSET
    # as the importer does; control flow it cannot unroll yet stays (a trip count is bound only when the case runs)
    model = expand_model(onnx.shape_inference.infer_shapes(model), opset, onnx.shape_inference.infer_shapes,
                         refuse=False)
  except Exception:  # noqa: BLE001 -- a model ONNX cannot infer: its ops as they are
    pass
  have = known_ops()
  return sorted({n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}"
                 for n in _all_nodes(model.graph) if n.domain not in ("", "ai.onnx") or n.op_type not in have})


def known_ops() -> set[str]:
  """The ops minicomp compiles: its lowerings, the ops the importer evaluates, and control flow (unrolled)."""
  from minicomp.frontend.control_flow import OPS as CONTROL_FLOW
  from minicomp.graph.registry import supported_ops
  return set(supported_ops()) | FOLDED | set(CONTROL_FLOW)


def _all_nodes(g: onnx.GraphProto) -> list:
  """The nodes of ``g`` and of every subgraph in it (control flow left: its bodies' ops count)."""
  from minicomp.frontend.control_flow import subgraphs
  return list(g.node) + [b for n in g.node for s in subgraphs(n) for b in _all_nodes(s)]


def reason_of(err: Exception) -> str | None:
  """The listed reason of a MinicompError's message, or None."""
  msg = str(err)
  for key, pat in REASONS:
    if re.search(pat, msg): return key
  return None


def _arrays(xs) -> list:
  return [numpy_helper.to_array(x) if isinstance(x, onnx.TensorProto) else np.asarray(x) for x in xs]


def _input_names(model: onnx.ModelProto) -> list[str]:
  inits = {t.name for t in model.graph.initializer}
  return [i.name for i in model.graph.input if i.name not in inits]


def shape_inputs(model: onnx.ModelProto) -> set[str]:
  """The graph inputs whose values reach a shape operand (through any nodes but Shape / Size), and
  those no node reads (CastLike's expanded form keeps its type-only input that way)."""
  producer = {o: n for n in model.graph.node for o in n.output}
  todo = [x for n in model.graph.node if n.domain in ("", "ai.onnx")
          for k, x in enumerate(n.input) if x and k in SHAPE_OPERANDS.get(n.op_type, ())]
  seen: set[str] = set()
  while todo:
    x = todo.pop()
    if x in seen: continue
    seen.add(x)
    n = producer.get(x)
    if n is not None and n.op_type not in SHAPE_ONLY: todo += [i for i in n.input if i]
  read = {i for n in model.graph.node for i in n.input} | {o.name for o in model.graph.output}
  return {x for x in _input_names(model) if x in seen or x not in read}


def freeze_shape_operands(case) -> tuple[onnx.ModelProto, bool]:
  """The case's model with the graph inputs that reach shape operands turned into initializers holding
  the data set's values (when every data set holds the same); the model as it is when there are none."""
  m = case.model
  names = _input_names(m)
  sets = [dict(zip(names, _arrays(ins))) for ins, _ in case.data_sets]
  frozen = {x for x in shape_inputs(m) if all(x in s and np.array_equal(s[x], sets[0][x]) for s in sets)}
  if not frozen: return m, False
  f = onnx.ModelProto(); f.CopyFrom(m)
  keep = [i for i in f.graph.input if i.name not in frozen]
  del f.graph.input[:]
  f.graph.input.extend(keep)
  f.graph.initializer.extend(numpy_helper.from_array(sets[0][x], x) for x in sorted(frozen))
  return f, True


def compare(got: list, want: list, rtol: float, atol: float) -> str:
  """'' when ``got`` matches ``want`` by ONNX's backend rule, else what differs."""
  if len(got) != len(want): return f"{len(got)} outputs, expected {len(want)}"
  for k, (g, w) in enumerate(zip(got, want)):
    g, w = np.asarray(g), np.asarray(w)
    if g.shape != w.shape: return f"output {k}: shape {g.shape}, expected {w.shape}"
    if g.dtype != w.dtype: return f"output {k}: dtype {g.dtype}, expected {w.dtype}"
    r, a = rtol, atol
    if w.dtype.name == "bfloat16": g, w, r = g.astype(np.float32), w.astype(np.float32), max(rtol, 2 ** -6)
    if w.dtype.name == "float16": r = max(rtol, 2 ** -9)
    if w.dtype == np.float32 and w.size and np.isfinite(w).all():    # 4 float32 ulps of the output's scale
      a = max(atol, 4 * float(np.finfo(np.float32).eps) * float(np.abs(w).max()))
    try:
      np.testing.assert_allclose(g, w, rtol=r, atol=a)
    except AssertionError as e:
      return f"output {k}: " + " ".join(str(e).split())[:300]
  return ""


def run_case(case, freeze: bool = True) -> Result:
  """Compile and run one case on the CPU simulator; never raises."""
  import minicomp as mc
  from minicomp.errors import MinicompError, UnsupportedOpError
  t0 = time.perf_counter()
  miss = missing_ops(case.model)
  if miss: return Result(case.name, "unsupported op", ", ".join(miss))
  frozen = False

  def done(outcome, reason="", detail=""):
    return Result(case.name, outcome, reason, detail, frozen, time.perf_counter() - t0)
  try:
    model, frozen = freeze_shape_operands(case) if freeze else (case.model, False)
    names = _input_names(model)
    cm = mc.compile(model, target=TARGET, schedules="rules")
    for ins, outs in case.data_sets:
      feeds = {n: v for n, v in zip(_input_names(case.model), _arrays(ins)) if n in names}
      bad = compare(cm.run(feeds, device="cpu"), _arrays(outs), case.rtol, case.atol)
      if bad: return done("wrong", "", bad)
  except MinicompError as e:
    lacking = sorted({op for op, _ in e.nodes if op not in known_ops()}) if isinstance(e, UnsupportedOpError) else []
    if lacking: return done("unsupported op", ", ".join(lacking))   # an op ONNX's body could not replace
    reason = reason_of(e)
    first = str(e).splitlines()[0][:300]
    return done("refused", reason, first) if reason else done("error", "unlisted refusal", f"{type(e).__name__}: {first}")
  except Exception as e:  # noqa: BLE001 -- any other exception is a bug: recorded, never raised
    return done("error", type(e).__name__, str(e).splitlines()[0][:300] if str(e) else "")
  return done("pass")


def table(results: list[Result]) -> str:
  """The outcome table (markdown), refusals per reason and the ops most often missing."""
  n = Counter(r.outcome for r in results)
  reasons = Counter(r.reason for r in results if r.outcome == "refused")
  rows = ["| outcome | cases |", "| --- | ---: |"]
  for o in OUTCOMES:
    rows.append(f"| {o} | {n[o]} |")
    if o == "refused":
      rows += [f"| &nbsp;&nbsp;refused: {k} | {v} |" for k, v in sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))]
  rows.append(f"| **total** | {len(results)} |")
  ops = Counter(op for r in results if r.outcome == "unsupported op" for op in r.reason.split(", "))
  frozen = sum(r.frozen for r in results if r.outcome not in ("unsupported op",))
  rows.append("")
  rows.append(f"{frozen} of the cases run had shape operands bound to initializers. "
              f"Missing ops ({len(ops)}), most used: " + ", ".join(f"{k} {v}" for k, v in ops.most_common(12)))
  return "\n".join(rows)


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--filter", default="", help="regex on the case name")
  ap.add_argument("--show", action="append", default=[], choices=OUTCOMES, help="list the cases of this outcome")
  ap.add_argument("--no-freeze", action="store_true", help="leave shape operands as runtime inputs")
  a = ap.parse_args(argv)
  print("command: python benchmarks/onnx_conformance.py " + " ".join(sys.argv[1:] if argv is None else argv))
  print(f"onnx {onnx.__version__} (opset {onnx.defs.onnx_opset_version()}), target {TARGET}, CPU simulator, rule schedules")
  warnings.simplefilter("ignore", RuntimeWarning)   # numpy's, from ONNX's reference evaluator folding log(0) ...
  t0 = time.perf_counter()
  results = [run_case(c, not a.no_freeze) for c in cases(a.filter)]
  for r in results:
    if r.outcome in a.show or r.outcome in ("wrong", "error"):
      print(f"  {r.outcome:14s} {r.case}: {r.reason} {r.detail}")
  print(table(results))
  print(f"{time.perf_counter() - t0:.0f} s")
  return 0


if __name__ == "__main__":
  sys.exit(main())
