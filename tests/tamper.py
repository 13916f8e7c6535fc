"""Ways to break a saved model folder, as ``CASES``: ``(name, fn)`` pairs (tests and benchmarks/fuzz.py).

``fn(folder)`` edits a copy of a folder written by ``CompiledModel.save`` in place and returns a
regex that the ``SaveFormatError`` of ``minicomp.load(folder)`` must match (it names the file and,
for the manifest, the field), or None, leaving the folder as it was, when the model has nothing
to break that way (no view step, one kernel only, ...). Any saved model with a graph input and a
weight works; tests/test_saved_model.py's model is one every case applies to.

Manifest edits recompute the manifest digest unless ``rehash=False``: with the digest stale the
digest check catches them; recomputed (a consistent edit) they reach the schema and graph checks.
"""
from __future__ import annotations

import io
import json
import os
import re
import shutil
from pathlib import Path
from typing import Callable

import numpy as np

from minicomp.ir.ops import NP_DTYPE
from minicomp.saved_model import manifest_digest, sha256

Tamper = Callable[[Path], "str | None"]
MF = r"manifest\.json: "
DIGEST = MF + r"digest: does not match"


def read_manifest(folder: Path) -> dict:
  return json.loads((folder / "manifest.json").read_text())


def write_manifest(folder: Path, m, rehash: bool = True) -> None:
  if rehash: m["digest"] = manifest_digest(m)
  (folder / "manifest.json").write_text(json.dumps(m))


def rehash_file(folder: Path, rel: str) -> None:
  """Record ``rel``'s current sha256 in the manifest (and recompute the manifest digest)."""
  m = read_manifest(folder)
  m["files"][rel] = sha256((folder / rel).read_bytes())
  write_manifest(folder, m)


def edit(fn: Callable[[dict], "str | None"], rehash: bool = True) -> Tamper:
  """A tamper from ``fn(manifest) -> pattern`` editing the parsed manifest (None: not applicable)."""
  def tamper(folder: Path) -> str | None:
    m = read_manifest(folder)
    pattern = fn(m)
    if pattern is not None: write_manifest(folder, m, rehash)
    return pattern
  return tamper


def raw(data: bytes) -> Tamper:
  """Replace manifest.json by ``data``."""
  def tamper(folder: Path) -> str:
    (folder / "manifest.json").write_bytes(data)
    return MF + "corrupted manifest"
  return tamper


def edit_file(rel: str, fn: Callable[[bytes], bytes], pattern: str, rehash: bool = False) -> Tamper:
  def tamper(folder: Path) -> str:
    (folder / rel).write_bytes(fn((folder / rel).read_bytes()))
    if rehash: rehash_file(folder, rel)
    return pattern
  return tamper


def symlink_out(rel: str) -> Tamper:
  """Move ``rel`` outside the folder (same content, so its digest still matches) and link to it."""
  def tamper(folder: Path) -> str:
    out = folder.parent / f"{folder.name}-outside-{rel.replace('/', '_')}"
    shutil.move(folder / rel, out)
    os.symlink(out, folder / rel)
    return rf"{re.escape(rel)}: is a symlink"
  return tamper


def weights(fn: Callable[[np.ndarray], np.ndarray], pattern: str) -> Tamper:
  """Replace the first weight ``a`` of weights.npz by ``fn(a)`` and record the file's new sha256."""
  def tamper(folder: Path) -> str | None:
    with np.load(folder / "weights.npz") as z: arrays = {k: z[k] for k in z.files}
    k = next((k for k in arrays if k.startswith("w:")), None)
    if k is None or arrays[k].ndim == 0: return None
    arrays[k] = fn(arrays[k])
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    (folder / "weights.npz").write_bytes(buf.getvalue())
    rehash_file(folder, "weights.npz")
    return pattern
  return tamper


def _set(path: str, value, pattern: str, rehash: bool = True) -> Tamper:
  """Set manifest field ``path`` (written as in the error messages) to ``value`` (or ``value(old)``)."""
  def fn(m: dict) -> str:
    keys = [int(k) if k.lstrip("-").isdigit() else k for k in path.replace("[", ".").replace("]", "").split(".")]
    node = m
    for k in keys[:-1]: node = node[k]
    node[keys[-1]] = value(node[keys[-1]]) if callable(value) else value
    return pattern
  return edit(fn, rehash)


def _steps(m: dict, kind: str) -> list[int]: return [k for k, s in enumerate(m["steps"]) if kind in s]


def _biggest_grid(m: dict) -> tuple[int, dict]:
  """(kernel index, launch) of the launch with the most blocks along x."""
  return max(((k, l) for k, kd in enumerate(m["kernels"]) for l in kd["plan"]["launches"]), key=lambda x: x[1]["grid"][0])


def _grid(scale: Callable[[int], int]) -> Tamper:
  def fn(m: dict) -> str | None:
    if not m["kernels"]: return None
    _, l = _biggest_grid(m)
    l["grid"][0] = scale(l["grid"][0])
    return DIGEST
  return edit(fn, rehash=False)


def _produced_output(m: dict) -> tuple[int, int, int] | None:
  """(graph output index, kernel index, plan output index) of the first graph output a call writes."""
  for j, o in enumerate(m["outputs"]):
    for k in _steps(m, "call"):
      c = m["steps"][k]["call"]
      if o["name"] in c["outputs"]: return j, c["kernel"], c["outputs"].index(o["name"])
  return None


def _shrink_output(rehash: bool) -> Tamper:
  def fn(m: dict) -> str | None:
    found = _produced_output(m)
    if found is None or not m["kernels"][found[1]]["plan"]["outputs"][found[2]]["shape"]: return None
    j, k, i = found
    shape = m["kernels"][k]["plan"]["outputs"][i]["shape"]
    shape[0] = shape[0] - 1 if shape[0] > 1 else 2
    return MF + rf"outputs\[{j}\]: '{re.escape(m['outputs'][j]['name'])}' is" if rehash else DIGEST
  return edit(fn, rehash)


def _input(fn: Callable[[dict, str], str | None]) -> Tamper:
  """``fn(input 0, its name as a regex)`` (not applicable without inputs or with a 0-d first input)."""
  def go(m: dict) -> str | None:
    if not m["inputs"] or not m["inputs"][0]["shape"]: return None
    return fn(m["inputs"][0], re.escape(m["inputs"][0]["name"]))
  return edit(go)


def _reshaped(i: dict, x: str) -> str:
  _halve(i["shape"])
  return MF + rf"steps\[\d+\]\.(call\.inputs\[\d+\]: value '{x}' is|view\.shape: .* of '{x}')"


def _renamed(i: dict, x: str) -> str:
  i["name"] += "_renamed"
  return MF + rf"steps\[\d+\]\.(call\.inputs\[\d+\]: value|view\.src:) '{x}' is used before"


def _first_call(fn: Callable[[int, dict], str | None], last: bool = False) -> Tamper:
  def go(m: dict) -> str | None:
    calls = _steps(m, "call")
    if not calls: return None
    k = calls[-1 if last else 0]
    return fn(k, m["steps"][k]["call"])
  return edit(go)


def _first_view(fn: Callable[[int, dict], str | None]) -> Tamper:
  def go(m: dict) -> str | None:
    views = _steps(m, "view")
    return fn(views[0], m["steps"][views[0]]["view"]) if views else None
  return edit(go)


def _defined_twice(m: dict) -> str | None:
  calls = _steps(m, "call")
  if not calls or not m["inputs"]: return None
  m["steps"][calls[-1]]["call"]["outputs"][0] = m["inputs"][0]["name"]
  return MF + rf"steps\[{calls[-1]}\]\.call\.outputs\[0\]: .* is defined twice"


def _kernel_index(v) -> Tamper:
  def fn(k: int, c: dict) -> str:
    c["kernel"] = v
    return MF + rf"steps\[{k}\]\.call\.kernel: "
  return _first_call(fn)


def _first_launch(fn: Callable[[dict], object], pattern: str) -> Tamper:
  """Edit launch 0 of kernel 0 (``pattern`` follows its field path)."""
  def go(m: dict) -> str | None:
    if not m["kernels"]: return None
    fn(m["kernels"][0]["plan"]["launches"][0])
    return pattern
  return edit(go)


def _dim0(i: dict, v) -> None: i["shape"][0] = v


def _halve(b: list) -> None: b[0] = b[0] // 2 if b[0] > 1 else 2


def _flip(b: bytes) -> bytes: return b[:-40] + bytes([b[-40] ^ 1]) + b[-39:]


def _one_shorter(a: np.ndarray) -> np.ndarray: return a[:-1] if a.shape[0] > 1 else np.concatenate([a, a])


def _drop(key: str, pattern: str) -> Tamper:
  """Remove manifest field ``key`` (``files/REL``: one entry of ``files``)."""
  def fn(m: dict) -> str:
    top, _, sub = key.partition("/")
    (m[top] if sub else m).pop(sub or top)
    return pattern
  return edit(fn)


def _facts0(fn: Callable[[dict], object], pattern: str) -> Tamper:
  """Edit kernel 0's first launch's static facts (not applicable where they were not saved)."""
  def edit_facts(m: dict) -> str | None:
    facts = m["kernels"][0]["facts"] if m["kernels"] else None
    if facts is None: return None
    fn(facts["launches"][0])
    return MF + r"kernels\[0\]\.facts\.launches\[0\]" + pattern
  return edit(edit_facts)


L0 = MF + r"kernels\[0\]\.plan\.launches\[0\]"
K0 = "kernels/k0"
CASES: list[tuple[str, Tamper]] = [
  # edits with a stale digest (what the probe did): the digest check
  ("grid_x64", _grid(lambda g: min(g * 64, 2**31 - 1))),
  ("grid_halved", _grid(lambda g: g // 2 if g > 1 else 2)),
  ("output_shape_shrunk", _shrink_output(rehash=False)),
  ("cu_edited_not_ptx", edit_file(f"{K0}.cu", lambda b: b + b"// edited\n", r"k0\.cu: sha256 differs")),
  ("cu_constructor_appended", edit_file(f"{K0}.cu", lambda b: b + b"\nstruct P { P() { } } p;\n",
                                        r"k0\.cu: sha256 differs")),
  ("ptx_edited", edit_file(f"{K0}.ptx", lambda b: b + b"// edited\n", r"k0\.ptx: sha256 differs")),
  ("cubin_bit_flipped", edit_file(f"{K0}.cubin", _flip, r"k0\.cubin: sha256 differs")),
  ("weights_bit_flipped", edit_file("weights.npz", _flip, r"weights\.npz: sha256 differs")),
  ("file_deleted", lambda f: (f / f"{K0}.ptx").unlink() or r"k0\.ptx: missing"),
  # consistent edits (digests recomputed): the schema and graph checks
  ("output_shape_shrunk_rehashed", _shrink_output(rehash=True)),
  ("input_shape_shrunk", _input(_reshaped)),
  ("weight_shape_shrunk", weights(_one_shorter, MF + r"steps\[\d+\]\.call\.inputs\[\d+\]: const .* was compiled for")),
  ("weight_dtype_changed", weights(lambda a: a.astype(np.float64 if a.dtype != np.float64 else np.float32),
                                   MF + r"steps\[\d+\]\.call\.inputs\[\d+\]: const .* was compiled for")),
  ("weight_as_bfloat16", weights(lambda a: a.astype(NP_DTYPE["bfloat16"]),   # (npz: 2-byte records, read as bfloat16)
                                 MF + r"steps\[\d+\]\.call\.inputs\[\d+\]: const .* was compiled for")),
  ("weight_as_records", weights(lambda a: np.zeros(a.shape, "V4"), r"weights\.npz: array .* not a numeric one")),
  ("weights_not_npz", edit_file("weights.npz", lambda b: b"PK\x03\x04garbage", r"weights\.npz: corrupted", rehash=True)),
  ("view_count_changed", _first_view(lambda k, v: v.update(shape=v["shape"] + [2]) or MF + rf"steps\[{k}\]\.view\.shape")),
  ("input_renamed", _input(_renamed)),
  ("output_never_produced", _set("outputs[0].name", "nope", MF + r"outputs\[0\]: 'nope' is never produced")),
  ("outputs_empty", _set("outputs", [], MF + r"outputs: is empty")),
  ("value_defined_twice", edit(_defined_twice)),
  ("call_outputs_count", _first_call(lambda k, c: c["outputs"].append("extra") or MF + rf"steps\[{k}\]\.call\.outputs: ",
                                     last=True)),
  ("kernel_index_99", _kernel_index(99)),
  ("kernel_index_minus_1", _kernel_index(-1)),
  ("kernel_index_bool", _kernel_index(False)),
  ("flops_string", _first_call(lambda k, c: c.update(flops=str(c["flops"])) or MF + rf"steps\[{k}\]\.call\.flops: ")),
  ("dim_negative", _input(lambda i, _: _dim0(i, -3) or MF + r"inputs\[0\]\.shape\[0\]: -3 is outside")),
  ("dim_float", _input(lambda i, _: _dim0(i, float(i["shape"][0])) or MF + r"inputs\[0\]\.shape\[0\]: expected an int")),
  ("dtype_unknown", _set("kernels[0].plan.outputs[0].dtype", "float128",
                         MF + r"kernels\[0\]\.plan\.outputs\[0\]\.dtype: unknown")),
  ("name_empty", _set("inputs[0].name", "", MF + r"inputs\[0\]\.name: is an empty name")),
  ("grid_y_too_big", _first_launch(lambda l: l["grid"].__setitem__(1, 70000), L0 + r"\.grid\[1\]")),
  ("grid_zero", _first_launch(lambda l: l["grid"].__setitem__(0, 0), L0 + r"\.grid\[0\]")),
  ("block_dim_too_big", _first_launch(lambda l: l["block"].__setitem__(0, 2048), L0 + r"\.block\[0\]")),
  ("block_too_many_threads", _first_launch(lambda l: l.update(block=[32, 32, 2]), L0 + r"\.block: .*1024")),
  ("block_edited_consistently", _first_launch(lambda l: _halve(l["block"]), r"k0\.cu: kernel .* differs .*launches\[0\]")),
  ("params_reordered", _first_launch(lambda l: l["params"].reverse(), r"k0\.cu: kernel .* differs")),
  ("param_not_a_buffer", _first_launch(lambda l: l["params"].__setitem__(0, "nope"), L0 + r"\.params\[0\]")),
  ("file_parent_escape", _set("kernels[0].file", "../outside/k0", MF + r"kernels\[0\]\.file")),
  ("file_absolute", _set("kernels[0].file", "/etc/k0", MF + r"kernels\[0\]\.file")),
  ("file_other_kernel", _set("kernels[0].file", "kernels/k1", MF + r"kernels\[0\]\.file")),
  ("target_unknown", _set("target", "sm_1", MF + r"target: unknown target")),
  ("files_entry_dropped", _drop(f"files/{K0}.log", MF + r"files: lists")),
  ("unknown_field", _set("extra", 1, MF + r"top level: unexpected field")),
  ("field_missing", _drop("steps", MF + r"steps: missing")),
  ("facts_other_kernel", _facts0(lambda l: l.update(name="other"), r"\.name: 'other' is not the launch's kernel")),
  ("facts_negative_bytes", _facts0(lambda l: l.update(dram_bytes=-1.0), r"\.dram_bytes: -1\.0 is not a finite")),
  ("facts_registers_bool", _facts0(lambda l: l.update(registers=True), r"\.registers: expected an integer")),
  ("facts_blocks_edited", _facts0(lambda l: l.update(blocks=l["blocks"] + 1), r": \d+ blocks of \d+ threads, but")),
  ("facts_field_missing", _facts0(lambda l: l.pop("chain_cycles"), r"\.chain_cycles: missing")),
  ("facts_count_string", _facts0(lambda l: l["per_thread"].update(fp32_fma="many"), r"\.per_thread\['fp32_fma'\]: expected a number")),
  ("format_version_1", _set("format_version", 1, MF + r"format version 1 is not supported.*recompile", rehash=False)),
  ("format_version_float", _set("format_version", 2.0, MF + r"format version 2\.0 is not supported", rehash=False)),
  ("format_version_true", _set("format_version", True, MF + r"format version True is not supported", rehash=False)),
  ("digest_not_hex", _set("digest", "zz", MF + r"digest: is not a sha256", rehash=False)),
  ("boundary_not_half", _set("boundary", {"nope": "float64"}, MF + r"boundary\['nope'\]: is neither")),
  ("boundary_input_float64", edit(lambda m: m["boundary"].update({m["inputs"][0]["name"]: "float64"}) or
                                  MF + r"boundary\[.*\]: 'float64' is not a half type")),
  ("index_check_on_a_float_input", edit(lambda m: m["index_checks"].append(
    {"input": m["inputs"][0]["name"], "size": 4, "node": "g", "op": "Gather"}) or MF + r"index_checks\[0\]\.input")),
  # bytes that are not a manifest
  ("manifest_list", raw(b"[]")),
  ("manifest_string", raw(b'"minicomp"')),
  ("manifest_deep_nesting", raw(b"[" * 200000 + b"]" * 200000)),
  ("manifest_bad_bytes", raw(b'{"format": "\xff\xfe"}')),
  ("manifest_duplicate_key", lambda f: raw(b'{"format": 1, ' + (f / "manifest.json").read_bytes()[1:])(f)),
  ("manifest_nan", raw(b'{"format": NaN}')),
  # source minicomp never emits (digest recomputed, so only the source check stands)
  ("cu_include", edit_file(f"{K0}.cu", lambda b: b'#include "/etc/hostname"\n' + b, r"k0\.cu: line 1: '#include",
                           rehash=True)),
  ("cu_include_after_comment", edit_file(f"{K0}.cu", lambda b: b'/**/ #include "/etc/hostname"\n' + b, r"k0\.cu: line 1",
                                         rehash=True)),
  ("cu_include_digraph", edit_file(f"{K0}.cu", lambda b: b'%:include "/etc/hostname"\n' + b, r"k0\.cu: line 1",
                                   rehash=True)),
  ("cu_constructor_attribute", edit_file(f"{K0}.cu", lambda b: b + b"__attribute__((constructor)) static void f() {}\n",
                                         r"k0\.cu: line \d+: '__attribute__", rehash=True)),
  ("cu_asm", edit_file(f"{K0}.cu", lambda b: b + b'__device__ void f() { asm("trap;"); }\n', r"k0\.cu: line \d+: .*asm",
                       rehash=True)),
  ("log_not_utf8", edit_file(f"{K0}.log", lambda b: b + b"\xff", r"k0\.log: not UTF-8", rehash=True)),
  # files outside the folder
  ("log_symlink", symlink_out(f"{K0}.log")),
  ("weights_symlink", symlink_out("weights.npz")),
  ("kernels_dir_symlink", symlink_out("kernels")),
  ("manifest_symlink", symlink_out("manifest.json")),
]
