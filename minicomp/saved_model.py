"""Saved compiled models: the folder format, and ``save``, which writes a folder atomically.

The folder (docs/saved_models.md): ``manifest.json``, ``kernels/kN.cu|.ptx|.cubin|.log`` and
``weights.npz``. The manifest records the sha256 of every file and of itself (:func:`manifest_digest`).
Before writing, ``save`` runs the graph check that ``load`` (``saved_model_load.py``, which checks a
folder before using it) runs too, so an inconsistent model is never written.

The digests detect corruption and inconsistent edits, not a deliberate attacker, who can recompute
them: a saved model IS compiled code (the GPU runs its cubin, the simulator compiles its .cu).
Load only models you trust.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
import os
import shutil
import tempfile
import uuid
from pathlib import Path

import numpy as np

from minicomp.errors import SaveError, SaveFormatError
from minicomp.ir.ops import HALF_DTYPES
from minicomp.model_parts import IOSpec, ViewStep
from minicomp.search.static.model import facts_json

FORMAT = "minicomp-compiled-model"
FORMAT_VERSION = 3       # 2: sha256 of every file and of the manifest, output specs, strict schema; 3: static facts
READ_VERSIONS = (2, 3)   # a version-2 folder loads; its kernels have no static facts (estimate() says so)
SUFFIXES = (".cu", ".ptx", ".cubin", ".log")


def sha256(data: bytes) -> str: return hashlib.sha256(data).hexdigest()


def manifest_digest(manifest: dict) -> str:
  """sha256 of the manifest's canonical JSON (``sort_keys``), its ``digest`` field left out."""
  return sha256(json.dumps({k: v for k, v in manifest.items() if k != "digest"}, sort_keys=True).encode())


# -- save
def save(model, path: str | Path) -> Path:
  """Write ``model`` (a :class:`~minicomp.compiled_model.CompiledModel`) to folder ``path``: built in a temp
  folder beside it, then renamed into place (an existing saved model there is renamed aside first and
  deleted last). Refuses to replace a file or a non-empty folder that is not a saved model.

  One save to a folder at a time: a save holds a lock beside it (``.NAME.lock``) and another process saving
  to the same folder meanwhile gets a SaveError at once. A save that cannot write (a full disk, a file-size
  limit) raises SaveError and leaves what was there before. Leftovers of a save that was killed (its
  temporary folder; a previous model renamed aside) are tidied by the next save to the folder."""
  work = Path(path).resolve()
  check_replaceable(work)
  try:
    work.parent.mkdir(parents=True, exist_ok=True)
    with _save_lock(work):
      _tidy_leftovers(work)
      check_replaceable(work)
      tmp = work.parent / f".{work.name}.saving-{uuid.uuid4().hex[:12]}"
      tmp.mkdir()
      try:
        _write(model, tmp)
        _swap_in(tmp, work)
      except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
  except OSError as e:
    raise SaveError(f"could not save to {work}: {e.strerror or e}; anything saved there before is unchanged") from None
  return Path(path)


@contextlib.contextmanager
def _save_lock(work: Path):
  """An exclusive lock on ``.NAME.lock`` beside the folder for the save's duration (removed after), or a
  SaveError when another process holds it. A lock file its holder removed while this one waited for it is
  not a lock any more: taken again on the file now at the path."""
  try:
    import fcntl
  except ImportError:                 # (no flock on this platform: saves are not serialised)
    yield
    return
  path = work.parent / f".{work.name}.lock"
  while True:
    f = open(path, "a")  # noqa: SIM115 -- held for the save, closed below
    try:
      fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      f.close()
      raise SaveError(f"another process is saving to {work} at this moment; nothing was written (save again "
                      "when it is done, or to another folder)") from None
    try:
      same = os.stat(path).st_ino == os.fstat(f.fileno()).st_ino
    except FileNotFoundError:
      same = False
    if same: break
    f.close()
  try:
    yield
  finally:
    path.unlink(missing_ok=True)      # while still held: no leftover file beside the model
    f.close()


def _tidy_leftovers(work: Path) -> None:
  """What a killed save left beside ``work`` (called holding the lock, so no save is in progress): a model
  renamed aside while the folder itself is gone is renamed back; temporary folders are removed."""
  olds = sorted(work.parent.glob(f".{work.name}.old-*"), key=lambda p: p.stat().st_mtime)
  if not work.exists() and olds and _is_saved_model(olds[-1]):
    os.rename(olds.pop(), work)
  for p in olds + list(work.parent.glob(f".{work.name}.saving-*")):
    shutil.rmtree(p, ignore_errors=True)


def check_replaceable(p: Path) -> None:
  """Refuse to save over a file or a non-empty folder that is not a saved model (SaveFormatError)."""
  if not p.exists(): return
  if not p.is_dir(): raise SaveFormatError(f"{p}: exists and is not a folder; not overwriting it")
  if any(p.iterdir()) and not _is_saved_model(p):
    raise SaveFormatError(f"{p}: a non-empty folder that is not a saved minicomp model; not replacing its files "
                          "(save to another path, or empty it first)")


def check_can_save(p: Path) -> None:
  """What ``minicomp compile -o`` checks before compiling: :func:`check_replaceable`, and that the folder can be
  made where :func:`save` makes it (a folder made and removed in the nearest existing parent; SaveError, with
  the system's reason, where one cannot be: a read-only or special file system, a parent that is a file)."""
  check_replaceable(p)
  if p.exists(): return
  at = p.parent
  while not at.exists() and at != at.parent: at = at.parent
  if not at.is_dir(): raise SaveError(f"could not save to {p}: {at} is not a folder")
  try:
    os.rmdir(tempfile.mkdtemp(dir=at, prefix=f".{p.name}.probe-"))
  except OSError as e:
    raise SaveError(f"could not save to {p}: cannot make a folder in {at} ({e.strerror or e})") from None


def _is_saved_model(p: Path) -> bool:
  mf = p / "manifest.json"
  try:
    m = json.loads(mf.read_bytes()) if mf.is_file() and not mf.is_symlink() else None
  except (OSError, ValueError, RecursionError):
    return False
  return isinstance(m, dict) and m.get("format") == FORMAT


def _swap_in(tmp: Path, p: Path) -> None:
  if not p.exists():
    os.rename(tmp, p)
    return
  old = p.parent / f".{p.name}.old-{uuid.uuid4().hex[:12]}"
  os.rename(p, old)
  try:
    os.rename(tmp, p)
  except BaseException:
    os.rename(old, p)
    raise
  shutil.rmtree(old, ignore_errors=True)


def _write(model, d: Path) -> None:
  (d / "kernels").mkdir()
  files: dict[str, str] = {}

  def put(rel: str, data: bytes) -> None:
    (d / rel).write_bytes(data)
    files[rel] = sha256(data)
  kernels = []
  from minicomp.search.static.estimate import analyse
  analyse(model.kernels, model.target.device)   # (the static facts below, over the cores)
  for k, kern in enumerate(model.kernels):
    b = kern.binary
    for suffix, data in zip(SUFFIXES, (kern.source.encode(), b.ptx.encode(), bytes(b.cubin), b.log.encode())):
      put(f"kernels/k{k}{suffix}", data)
    kernels.append({"file": f"kernels/k{k}", "plan": kern.plan.to_dict(), "options": list(b.options),
                    "facts": static_facts(kern, model.target.device)})
  steps = []
  for st in model.steps:
    if isinstance(st, ViewStep): steps.append({"view": {"src": st.src, "dst": st.dst, "shape": list(st.shape), "op": st.op}})
    else: steps.append({"call": {"kernel": st.kernel, "inputs": [list(x) for x in st.inputs], "outputs": list(st.outputs),
                                 "task": st.task, "ops": list(st.ops), "flops": int(st.flops)}})
  try:
    known = check_graph(kernel_inputs(model.inputs, model.boundary), model.output_names,
                         [k.plan for k in model.kernels], model.steps, array_specs(model.weights), array_specs(model.consts))
    check_boundary(model.boundary, model.index_checks, model.inputs, model.output_names, known)
  except BadField as e:
    raise SaveFormatError(f"model {model.name!r} is inconsistent, not saving it: {e.args[0]}: {e.args[1]}") from None
  arrays = {f"w:{k}": v for k, v in model.weights.items()}
  arrays.update({f"c:{k}": v for k, v in model.consts.items()})
  buf = io.BytesIO()
  np.savez(buf, **arrays)
  put("weights.npz", buf.getvalue())
  spec = lambda n, s, dt: {"name": n, "shape": [int(x) for x in s], "dtype": dt}
  m = {"format": FORMAT, "format_version": FORMAT_VERSION, "name": model.name, "target": str(model.target),
       "inputs": [spec(i.name, i.shape, i.dtype) for i in model.inputs],
       "outputs": [spec(o, *known[o]) for o in model.output_names],
       "kernels": kernels, "steps": steps, "consts": sorted(model.consts), "files": files,
       "boundary": dict(sorted(model.boundary.items())),
       "index_checks": [{"input": c.input, "size": c.size, "node": c.node, "op": c.op} for c in model.index_checks]}
  m["digest"] = manifest_digest(m)
  (d / "manifest.json").write_text(json.dumps(m, indent=1), encoding="utf-8")


def static_facts(kern, dev) -> dict | None:
  """What the static model needs to estimate ``kern`` on ``dev`` without its loop IR (which is not saved):
  {"device": name, "launches": [LaunchFacts as a dict, ...]}, or None where the model cannot analyse it."""
  from minicomp.errors import EstimateError
  from minicomp.search.static.estimate import launch_facts
  try:
    out = facts_json(launch_facts(kern, dev))
  except EstimateError:
    return None
  return {"device": dev.name, "launches": out} if out is not None else None


def kernel_inputs(inputs: list[IOSpec], boundary: dict[str, str]) -> list[IOSpec]:
  """Graph inputs with the dtype the kernels read (float32 for a half input)."""
  return [IOSpec(i.name, i.shape, "float32" if i.name in boundary else i.dtype) for i in inputs]


def check_boundary(boundary: dict, checks: list, inputs: list[IOSpec], outputs: list[str], known: dict) -> None:
  """Half boundary values are graph inputs/outputs computed in float32; index checks name int inputs."""
  dtypes = {i.name: i.dtype for i in inputs}
  for n, dt in boundary.items():
    if n not in dtypes and n not in outputs: raise BadField(f"boundary[{n!r}]", "is neither a graph input nor an output")
    if dt not in HALF_DTYPES: raise BadField(f"boundary[{n!r}]", f"{dt!r} is not a half type ({', '.join(sorted(HALF_DTYPES))})")
    if n in dtypes and dtypes[n] != dt: raise BadField(f"boundary[{n!r}]", f"{dt} but the input is declared {dtypes[n]}")
    if n in outputs and known[n][1] != "float32": raise BadField(f"boundary[{n!r}]", "output is not computed in float32")
  for j, c in enumerate(checks):
    if dtypes.get(c.input) not in ("int32", "int64"): raise BadField(f"index_checks[{j}].input", f"{c.input!r} is not an integer graph input")


def array_specs(arrays: dict[str, np.ndarray]) -> dict[str, tuple[tuple[int, ...], str]]:
  return {n: (tuple(a.shape), a.dtype.name) for n, a in arrays.items()}


# -- the graph check (shared by save and load)
class BadField(Exception):
  """A manifest field that fails a check: ``(field, why)``; load names manifest.json in front."""


def check_graph(inputs, outputs, plans, steps, weights, consts) -> dict[str, tuple[tuple[int, ...], str]]:
  """Every value defined once before use with the shape/dtype its reader expects; returns value -> spec."""
  known: dict[str, tuple[tuple[int, ...], str]] = {}
  for j, i in enumerate(inputs):
    if i.name in known: raise BadField(f"inputs[{j}].name", f"{i.name!r} is defined twice")
    known[i.name] = (tuple(i.shape), i.dtype)
  for n, s in consts.items():
    if n in known: raise BadField("consts", f"{n!r} is also a graph input")
    known[n] = s

  def define(n: str, spec: tuple, at: str) -> None:
    if n in known: raise BadField(at, f"{n!r} is defined twice")
    known[n] = spec
  for k, st in enumerate(steps):
    if isinstance(st, ViewStep):
      at = f"steps[{k}].view"
      if st.src not in known: raise BadField(f"{at}.src", f"{st.src!r} is used before it is defined")
      shape, dt = known[st.src]
      if math.prod(st.shape) != math.prod(shape):
        raise BadField(f"{at}.shape", f"{list(st.shape)} does not hold the elements of {st.src!r} {list(shape)}")
      define(st.dst, (tuple(st.shape), dt), f"{at}.dst")
      continue
    at, plan = f"steps[{k}].call", plans[st.kernel]
    for what, got, want in (("inputs", st.inputs, plan.inputs), ("outputs", st.outputs, plan.outputs)):
      if len(got) != len(want):
        raise BadField(f"{at}.{what}", f"{len(got)} {what} but kernel {st.kernel} has {len(want)}")
    for j, ((kind, n), b) in enumerate(zip(st.inputs, plan.inputs)):
      have = (known if kind == "value" else weights).get(n)
      if have is None: raise BadField(f"{at}.inputs[{j}]", f"{kind} {n!r} is " + (
        "used before it is defined" if kind == "value" else "not in weights.npz"))
      if have != (b.shape, b.dtype):
        raise BadField(f"{at}.inputs[{j}]", f"{kind} {n!r} is {list(have[0])} {have[1]} but kernel {st.kernel} "
                   f"was compiled for {b.name} {list(b.shape)} {b.dtype}")
    for j, (n, b) in enumerate(zip(st.outputs, plan.outputs)): define(n, (b.shape, b.dtype), f"{at}.outputs[{j}]")
  for j, o in enumerate(outputs):
    if o not in known: raise BadField(f"outputs[{j}]", f"{o!r} is never produced")
  return known

