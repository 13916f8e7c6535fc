"""Loading a saved compiled model: every file is untrusted input, checked before anything in it is used.

The folder (docs/saved_models.md; written by ``saved_model.py``): ``manifest.json``,
``kernels/kN.cu|.ptx|.cubin|.log`` and ``weights.npz``. ``load`` refuses, with a
:class:`SaveFormatError` naming the file and field:

* a manifest that breaks the schema (exact JSON types, bool is not int; dims, CUDA launch limits,
  kernel indices, names, dtypes, the ``kernels/kN`` file form);
* a graph that does not add up: every value defined before use, with the shape and dtype the
  kernel reading it was compiled for; views keep the element count; launches name plan buffers;
* a file or manifest whose sha256 differs from the digest written at save;
* a symlink, or a path leaving the folder;
* CUDA source minicomp never emits (preprocessor directives other than ``#pragma unroll``,
  ``asm``, attributes): the CPU simulator compiles the .cu with the host C++ compiler.

The digests detect corruption and inconsistent edits, not a deliberate attacker, who can recompute
them: a saved model IS compiled code (the GPU runs its cubin, the simulator compiles its .cu).
Load only models you trust.
"""
from __future__ import annotations

import io
import json
import math
import os
import re
from pathlib import Path

import numpy as np

from minicomp.codegen.cuda import C_TYPE
from minicomp.codegen.kernel import BufferSpec, Kernel, Launch, LaunchPlan
from minicomp.codegen.nvrtc import CudaBinary, parse_ptxas_log
from minicomp.compiled_model import CompiledModel
from minicomp.errors import SaveFormatError
from minicomp.ir.ops import NP_DTYPE
from minicomp.model_parts import IndexCheck, IOSpec, KernelCall, ViewStep
from minicomp.search.static.model import FACT_FLOATS, FACT_INTS
from minicomp.saved_model import (
  FORMAT,
  READ_VERSIONS,
  SUFFIXES,
  BadField,
  array_specs,
  check_boundary,
  check_graph,
  kernel_inputs,
  manifest_digest,
  sha256,
)
from minicomp.target import MAX_SHARED_OPTIN_BYTES, Target, TargetError

MAX_DIM, MAX_NDIM, MAX_ELEMENTS = 2**31 - 1, 32, 2**40
MAX_BLOCK, MAX_GRID, MAX_THREADS = (1024, 1024, 64), (2**31 - 1, 65535, 65535), 1024
MAX_MANIFEST_BYTES = 64 << 20
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_SIGNATURE = re.compile(r'^extern "C" __global__ void __launch_bounds__\((\d+)\) (\w+)\((.*)\) \{$', re.M)
_NOT_EMITTED = re.compile(r"#|/\*|\\|%:|\[\[|_Pragma|__attribute|\b(?:asm|__asm|__asm__)\b")
DIRECTIVES = frozenset({"#pragma unroll"})    # the only preprocessor lines codegen/cuda.py emits


def load(path: str | Path) -> CompiledModel:
  """Load a model written by :func:`save`, after the checks in this module's docstring."""
  p = Path(path)
  if not os.path.lexists(p / "manifest.json"):
    raise SaveFormatError(f"{str(p)!r} is not a saved minicomp model (no manifest.json)")
  root = p.resolve()
  mf = root / "manifest.json"
  m = _parse(_read(root, "manifest.json", MAX_MANIFEST_BYTES), mf)
  try:
    parsed = _schema(m)
    if m["digest"] != manifest_digest(m):
      raise BadField("digest", "does not match the manifest's content: it was edited or corrupted after save")
  except BadField as e:
    raise SaveFormatError(f"{mf}: {e.args[0]}: {e.args[1]}") from None
  target, inputs, outputs, plans, options, facts, steps, const_names, boundary, checks = parsed
  data = {rel: _read(root, rel) for rel in sorted(m["files"])}
  for rel, raw in data.items():
    if sha256(raw) != m["files"][rel]:
      raise SaveFormatError(f"{root / rel}: sha256 differs from the one in manifest.json: the file was edited or corrupted")
  weights, consts = _weights(data["weights.npz"], root / "weights.npz", set(const_names))
  try:
    known = check_graph(kernel_inputs(inputs, boundary), [o.name for o in outputs], plans, steps, array_specs(weights),
                         array_specs(consts))
    check_boundary(boundary, checks, inputs, [o.name for o in outputs], known)
    for j, o in enumerate(outputs):
      if known[o.name] != (o.shape, o.dtype):
        raise BadField(f"outputs[{j}]", f"{o.name!r} is {list(o.shape)} {o.dtype} but its producer makes "
                   f"{list(known[o.name][0])} {known[o.name][1]}")
  except BadField as e:
    raise SaveFormatError(f"{mf}: {e.args[0]}: {e.args[1]}") from None
  kernels = []
  for k, plan in enumerate(plans):
    text = {s: _text(data[f"kernels/k{k}{s}"], root / f"kernels/k{k}{s}") for s in (".cu", ".ptx", ".log")}
    _check_source(text[".cu"], plan, k, root / f"kernels/k{k}.cu")
    try:
      _check_facts(k, facts[k], plan)
    except BadField as e:
      raise SaveFormatError(f"{mf}: {e.args[0]}: {e.args[1]}") from None
    binary = CudaBinary(target.arch, text[".ptx"], data[f"kernels/k{k}.cubin"], text[".log"],
                        parse_ptxas_log(text[".log"]), options[k], text[".cu"])
    kernels.append(Kernel(plan, text[".cu"], binary, target, saved_facts=facts[k]))
  return CompiledModel(target, inputs, [o.name for o in outputs], kernels, steps, weights, consts, m["name"],
                       boundary, checks)


def _read(root: Path, rel: str, limit: int | None = None) -> bytes:
  """The bytes of ``root/rel``: a regular file inside ``root`` reached through no symlink."""
  cur = root
  for part in Path(rel).parts:
    cur = cur / part
    if cur.is_symlink(): raise SaveFormatError(f"{cur}: is a symlink; a saved model holds only plain files and folders")
  f = root / rel
  if not f.resolve().is_relative_to(root): raise SaveFormatError(f"{f}: lies outside the saved model's folder {root}")
  if not f.is_file(): raise SaveFormatError(f"{f}: missing or not a file; the saved model is incomplete or corrupted")
  try:
    if limit is not None and f.stat().st_size > limit: raise SaveFormatError(f"{f}: larger than {limit} bytes")
    return f.read_bytes()
  except OSError as e:
    raise SaveFormatError(f"{f}: unreadable ({e})") from None


def _text(raw: bytes, f: Path) -> str:
  try:
    return raw.decode("utf-8")
  except UnicodeDecodeError as e:
    raise SaveFormatError(f"{f}: not UTF-8 text ({e})") from None


def _parse(raw: bytes, mf: Path) -> dict:
  def pairs(kv):
    d = {}
    for k, v in kv:
      if k in d: raise ValueError(f"duplicate key {k!r}")
      d[k] = v
    return d

  def constant(c):
    raise ValueError(f"{c} is not JSON")
  try:
    m = json.loads(raw.decode("utf-8"), object_pairs_hook=pairs, parse_constant=constant)
  except (ValueError, RecursionError) as e:   # (UnicodeDecodeError and JSONDecodeError are ValueErrors)
    raise SaveFormatError(f"{mf}: corrupted manifest ({type(e).__name__}: {str(e)[:200]})") from None
  if type(m) is not dict: raise SaveFormatError(f"{mf}: corrupted manifest (a JSON {_kind(m)}, not an object)")
  if m.get("format") != FORMAT: raise SaveFormatError(f"{mf}: not a minicomp compiled-model manifest (format {FORMAT!r})")
  v = m.get("format_version")
  if type(v) is not int or v not in READ_VERSIONS:
    raise SaveFormatError(f"{mf}: format version {v!r} is not supported by this minicomp (it reads versions "
                          f"{', '.join(map(str, READ_VERSIONS))}, an integer); recompile the model from its ONNX file "
                          "and save it again")
  return m


def _weights(raw: bytes, f: Path, const_names: set[str]) -> tuple[dict, dict]:
  try:
    with np.load(io.BytesIO(raw), allow_pickle=False) as z:
      arrays = {k: z[k] for k in z.files}
  except Exception as e:   # numpy's zip/format errors are many types; any of them means a corrupted file
    raise SaveFormatError(f"{f}: corrupted ({type(e).__name__}: {e})") from None
  weights, consts = {}, {}
  for k, a in arrays.items():
    if k[:2] not in ("w:", "c:"): raise SaveFormatError(f"{f}: array {k!r} is neither a weight (w:) nor a constant (c:)")
    if a.dtype == np.dtype("V2"): a = a.view(NP_DTYPE["bfloat16"])   # how np.savez writes bfloat16 (ml_dtypes)
    if a.dtype.fields is not None or (a.dtype.kind not in "biufc" and a.dtype != NP_DTYPE["bfloat16"]):
      raise SaveFormatError(f"{f}: array {k!r} has dtype {a.dtype}, not a numeric one")
    (weights if k[0] == "w" else consts)[k[2:]] = a
  if set(consts) != const_names:
    raise SaveFormatError(f"{f}: holds constants {sorted(consts)} but manifest.json consts lists {sorted(const_names)}")
  return weights, consts


def _check_source(src: str, plan: LaunchPlan, k: int, f: Path) -> None:
  """Only what the emitter writes: no directive but ``#pragma unroll``, no asm / attributes (the CPU
  simulator compiles this text with g++); each launched kernel's signature matches its plan."""
  for n, line in enumerate(src.splitlines(), 1):
    code = line.split("//", 1)[0]
    bad = _NOT_EMITTED.search(code)
    if bad and code.strip() not in DIRECTIVES:
      raise SaveFormatError(f"{f}: line {n}: {code.strip()[:80]!r} is not CUDA that minicomp emits "
                            "(no #include or other directive but '#pragma unroll', no asm, no attributes)")
  dtype = {b.name: b.dtype for b in plan.inputs + plan.outputs + plan.temps}
  sigs = {name: (int(n), params.split(", ") if params else []) for n, name, params in _SIGNATURE.findall(src)}
  for j, l in enumerate(plan.launches):
    want = (math.prod(l.block), [f"{'' if n in l.written else 'const '}{C_TYPE[dtype[n]]}* __restrict__ {n}"
                                 for n in l.params])
    if sigs.get(l.kernel) != want:
      raise SaveFormatError(f"{f}: kernel {l.kernel!r} is missing or differs from manifest.json kernels[{k}].plan"
                            f".launches[{j}] ({want[0]} threads per block; parameters {', '.join(want[1])})")


# -- the manifest schema
_TYPE = {dict: "an object", list: "a list", str: "a string", int: "an integer", bool: "true/false"}


def _kind(v) -> str:
  return {dict: "object", list: "list", str: "string", int: "integer", float: "number", bool: "boolean",
          type(None): "null"}.get(type(v), type(v).__name__)


def _typed(v, at: str, typ: type):
  if type(v) is not typ:
    shown = f" {v!r}"[:42] if type(v) in (str, int, float, bool) else ""
    raise BadField(at, f"expected {_TYPE[typ]}, got a {_kind(v)}{shown}")
  return v


def _obj(v, at: str, keys: tuple[str, ...]) -> dict:
  """A dict with exactly ``keys``."""
  _typed(v, at, dict)
  for k in keys:
    if k not in v: raise BadField(f"{at}.{k}".lstrip("."), "missing")
  extra = [k for k in v if k not in keys]
  if extra: raise BadField(at or "top level", f"unexpected field(s) {extra[:5]}")
  return v


def _list(v, at: str, item=None, nonempty: bool = False) -> list:
  _typed(v, at, list)
  if nonempty and not v: raise BadField(at, "is empty")
  return [item(x, f"{at}[{j}]") for j, x in enumerate(v)] if item else v


def _name(v, at: str) -> str:
  if not _typed(v, at, str): raise BadField(at, "is an empty name")
  return v


def _ident(v, at: str) -> str:
  if not _IDENT.fullmatch(_typed(v, at, str)): raise BadField(at, f"{v!r} is not a C identifier")
  return v


def _int(v, at: str, lo: int, hi: int) -> int:
  if not lo <= _typed(v, at, int) <= hi: raise BadField(at, f"{v} is outside [{lo}, {hi}]")
  return v


def _shape(v, at: str) -> tuple[int, ...]:
  s = tuple(_list(v, at, lambda x, a: _int(x, a, 0, MAX_DIM)))
  if len(s) > MAX_NDIM or math.prod(s) > MAX_ELEMENTS: raise BadField(at, f"{list(s)} is too large")
  return s


def _dtype(v, at: str) -> str:
  if _typed(v, at, str) not in NP_DTYPE: raise BadField(at, f"unknown dtype {v!r} (known: {', '.join(NP_DTYPE)})")
  return v


def _dims(v, at: str, limit: tuple[int, int, int]) -> tuple[int, int, int]:
  if len(_typed(v, at, list)) != 3: raise BadField(at, f"expected 3 dims (x, y, z), got {len(v)}")
  return tuple(_int(x, f"{at}[{d}]", 1, limit[d]) for d, x in enumerate(v))


def _spec(v, at: str) -> BufferSpec:
  d = _obj(v, at, ("name", "shape", "dtype"))
  return BufferSpec(_name(d["name"], f"{at}.name"), _shape(d["shape"], f"{at}.shape"), _dtype(d["dtype"], f"{at}.dtype"))


def _plan(v, at: str) -> LaunchPlan:
  d = _obj(v, at, ("inputs", "outputs", "temps", "launches"))
  bufs = {}
  groups = []
  for key in ("inputs", "outputs", "temps"):
    specs = _list(d[key], f"{at}.{key}", _spec, nonempty=key == "outputs")
    for j, b in enumerate(specs):
      if b.name in bufs: raise BadField(f"{at}.{key}[{j}].name", f"buffer {b.name!r} is defined twice")
      _ident(b.name, f"{at}.{key}[{j}].name")
      bufs[b.name] = b
    groups.append(tuple(specs))
  launches = []
  for j, x in enumerate(_list(d["launches"], f"{at}.launches", nonempty=True)):
    a = f"{at}.launches[{j}]"
    x = _obj(x, a, ("kernel", "grid", "block", "params", "written") + (("shared_bytes",) if type(x) is dict and
                                                                         "shared_bytes" in x else ()))
    block = _dims(x["block"], f"{a}.block", MAX_BLOCK)
    if math.prod(block) > MAX_THREADS: raise BadField(f"{a}.block", f"{list(block)} is more than {MAX_THREADS} threads")
    params = _list(x["params"], f"{a}.params", _name)
    for i, n in enumerate(params):
      if n not in bufs: raise BadField(f"{a}.params[{i}]", f"{n!r} is not a buffer of the plan")
    if len(set(params)) != len(params): raise BadField(f"{a}.params", "names a buffer twice")
    written = _list(x["written"], f"{a}.written", _name)
    if not set(written) <= set(params): raise BadField(f"{a}.written", "names a buffer that is not a parameter")
    launches.append(Launch(_ident(x["kernel"], f"{a}.kernel"), _dims(x["grid"], f"{a}.grid", MAX_GRID), block,
                           tuple(params), tuple(written), _int(x.get("shared_bytes", 0), f"{a}.shared_bytes", 0,
                                                               MAX_SHARED_OPTIN_BYTES)))
  return LaunchPlan(*groups, tuple(launches))


def _step(v, at: str, n_kernels: int):
  if type(v) is dict and len(v) == 1 and "view" in v:
    d, a = _obj(v["view"], f"{at}.view", ("src", "dst", "shape", "op")), f"{at}.view"
    return ViewStep(_name(d["src"], f"{a}.src"), _name(d["dst"], f"{a}.dst"), _shape(d["shape"], f"{a}.shape"),
                    _name(d["op"], f"{a}.op"))
  if not (type(v) is dict and len(v) == 1 and "call" in v): raise BadField(at, 'expected {"view": ...} or {"call": ...}')
  a = f"{at}.call"
  d = _obj(v["call"], a, ("kernel", "inputs", "outputs", "task", "ops", "flops"))
  if n_kernels == 0: raise BadField(f"{a}.kernel", "the model has no kernels")
  kernel = _int(d["kernel"], f"{a}.kernel", 0, n_kernels - 1)

  def arg(x, b):
    if len(_typed(x, b, list)) != 2 or x[0] not in ("value", "const"): raise BadField(b, 'expected ["value" | "const", name]')
    return (x[0], _name(x[1], f"{b}[1]"))
  return KernelCall(kernel, _list(d["inputs"], f"{a}.inputs", arg), _list(d["outputs"], f"{a}.outputs", _name),
                    _typed(d["task"], f"{a}.task", str), _list(d["ops"], f"{a}.ops", lambda x, b: _typed(x, b, str)),
                    _int(d["flops"], f"{a}.flops", 0, 2**63 - 1))


def _number(v, at: str) -> float:
  """A finite, non-negative JSON number (an integer or a float, not a boolean)."""
  if type(v) not in (int, float): raise BadField(at, f"expected a number, got a {_kind(v)}")
  if not (math.isfinite(v) and v >= 0): raise BadField(at, f"{v} is not a finite number >= 0")
  return float(v)


def _facts(v, at: str, plan: LaunchPlan):
  """(device name, LaunchFacts per launch) of a kernel's static facts, or None (``null``: none saved)."""
  from minicomp.search.static.model import LaunchFacts
  if v is None: return None
  d = _obj(v, at, ("device", "launches"))
  launches = _list(d["launches"], f"{at}.launches")
  if len(launches) != len(plan.launches):
    raise BadField(f"{at}.launches", f"{len(launches)} entries for the plan's {len(plan.launches)} launches")
  out = []
  for j, x in enumerate(launches):
    a = f"{at}.launches[{j}]"
    x = _obj(x, a, ("name", "per_thread") + FACT_FLOATS + FACT_INTS)
    per = {_name(c, f"{a}.per_thread"): _number(n, f"{a}.per_thread[{c!r}]")
           for c, n in _typed(x["per_thread"], f"{a}.per_thread", dict).items()}
    out.append(LaunchFacts(name=_name(x["name"], f"{a}.name"), per_thread=per,
                           **{n: _number(x[n], f"{a}.{n}") for n in FACT_FLOATS},
                           **{n: _int(x[n], f"{a}.{n}", 0, 2**63 - 1) for n in FACT_INTS}))
  return _name(d["device"], f"{at}.device"), tuple(out)


def _check_facts(k: int, facts, plan: LaunchPlan) -> None:
  """Kernel ``k``'s saved facts describe its launches: the same kernel names, blocks and threads."""
  for j, (x, l) in enumerate(zip(facts[1] if facts is not None else (), plan.launches)):
    a = f"kernels[{k}].facts.launches[{j}]"
    if x.name != l.kernel: raise BadField(f"{a}.name", f"{x.name!r} is not the launch's kernel {l.kernel!r}")
    if x.blocks != math.prod(l.grid) or x.threads_per_block != math.prod(l.block):
      raise BadField(a, f"{x.blocks} blocks of {x.threads_per_block} threads, but the launch is "
                     f"{list(l.grid)} x {list(l.block)}")


def _schema(m: dict):
  """The typed content of a manifest (already known to be a dict of this format and version)."""
  _obj(m, "", ("format", "format_version", "name", "target", "inputs", "outputs", "kernels", "steps", "consts",
                "files", "digest", "boundary", "index_checks"))
  if not _SHA256.fullmatch(_typed(m["digest"], "digest", str)): raise BadField("digest", "is not a sha256 hex digest")
  _typed(m["name"], "name", str)
  try:
    target = Target(_typed(m["target"], "target", str))
  except TargetError as e:
    raise BadField("target", str(e)) from None
  inputs = [IOSpec(b.name, b.shape, b.dtype) for b in _list(m["inputs"], "inputs", _spec)]
  outputs = _list(m["outputs"], "outputs", _spec, nonempty=True)
  plans, options, facts = [], [], []
  for k, kd in enumerate(_list(m["kernels"], "kernels")):
    kd = _obj(kd, f"kernels[{k}]", ("file", "plan", "options") + (("facts",) if m["format_version"] >= 3 else ()))
    if _typed(kd["file"], f"kernels[{k}].file", str) != f"kernels/k{k}":
      raise BadField(f"kernels[{k}].file", f"{kd['file']!r}: kernel {k} must be stored as 'kernels/k{k}'")
    plans.append(_plan(kd["plan"], f"kernels[{k}].plan"))
    options.append(tuple(_list(kd["options"], f"kernels[{k}].options", lambda x, b: _typed(x, b, str))))
    facts.append(_facts(kd.get("facts"), f"kernels[{k}].facts", plans[-1]))
  steps = _list(m["steps"], "steps", lambda x, a: _step(x, a, len(plans)))
  consts = _list(m["consts"], "consts", _name)
  if len(set(consts)) != len(consts): raise BadField("consts", "lists a name twice")
  want = {f"kernels/k{k}{s}" for k in range(len(plans)) for s in SUFFIXES} | {"weights.npz"}
  files = _typed(m["files"], "files", dict)
  if set(files) != want: raise BadField("files", f"lists {sorted(files)[:8]}, expected {sorted(want)[:8]}")
  for rel, h in files.items():
    if not _SHA256.fullmatch(_typed(h, f"files[{rel!r}]", str)): raise BadField(f"files[{rel!r}]", "is not a sha256 hex digest")
  boundary = {_name(k, "boundary"): _typed(v, f"boundary[{k!r}]", str) for k, v in _typed(m["boundary"], "boundary", dict).items()}

  def check(x, a):
    d = _obj(x, a, ("input", "size", "node", "op"))
    return IndexCheck(_name(d["input"], f"{a}.input"), _int(d["size"], f"{a}.size", 1, MAX_DIM),
                      _typed(d["node"], f"{a}.node", str), _name(d["op"], f"{a}.op"))
  return target, inputs, outputs, plans, options, facts, steps, consts, boundary, _list(m["index_checks"], "index_checks", check)
