"""Reading PTX: one kernel's instructions (opcode, operands, guard, destination registers) and their classes.

:func:`entry_body` cuts the body of one ``.entry`` out of a PTX module (comments stripped);
:func:`parse_body` splits it into :class:`Instruction` values and finds its labels
(``$L__BB0_3:`` -> the index of the instruction that follows); :func:`classify` names the class
of an opcode (:data:`CLASSES`: FP32 FMA, integer, shared load, barrier, ...) and the bytes a memory
instruction moves. The counting built on them is ``ptx_loops.py`` (trip counts) and ``ptx.py``
(the per-thread profile).
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

from minicomp.errors import PTXAnalysisError

CLASSES = ("fp32_fma", "fp32_arith", "fp64", "int", "sfu", "conversion", "ld_global", "st_global", "ld_shared",
           "st_shared", "ld_local", "st_local", "ld_param", "ld_const", "atomic", "bar_sync", "shfl", "branch", "other",
           "tensor_k16", "tensor_k8", "tensor_tf32", "tensor_int8")
# a warp's mma.sync by the FMAs it does and their type: m16n8k16 fp16 / bf16 (2048), m16n8k8 fp16 (1024), m16n8k8 tf32
# (1024), m16n8k32 8-bit integers (4096)
TENSOR_FMAS = {"tensor_k16": (2048, "fp16"), "tensor_k8": (1024, "fp16"), "tensor_tf32": (1024, "tf32"),
               "tensor_int8": (4096, "int8")}
MEMORY_CLASSES = ("ld_global", "st_global", "ld_shared", "st_shared", "ld_local", "st_local", "ld_param", "ld_const",
                  "atomic")


@dataclass(frozen=True)
class Instruction:
  """One PTX instruction: ``@!%p3 add.s32 %r5, %r5, 1`` is opcode ``add.s32``, operands ``(%r5, %r5, 1)``,
  guard ``%p3``, negated."""
  index: int
  opcode: str
  operands: tuple[str, ...]
  guard: str | None = None
  negated: bool = False
  text: str = ""
  base: str = field(init=False, compare=False)            # "ld" of "ld.global.v4.f32"
  mods: tuple[str, ...] = field(init=False, compare=False)  # ("global", "v4", "f32")
  dsts: tuple[str, ...] = field(init=False, compare=False)  # the registers it writes

  def __post_init__(self):
    base, *mods = self.opcode.split(".")
    object.__setattr__(self, "base", base)
    object.__setattr__(self, "mods", tuple(mods))
    object.__setattr__(self, "dsts", _dsts(base, self.operands))


_ENTRY_RE = re.compile(r"\.entry\s+([\w$]+)\s*\(")
_LABEL_RE = re.compile(r"^([\w$.]+):(?!:)(.*)$")
_INSTR_RE = re.compile(r"^(?:@(!)?(%?[\w$.]+)\s+)?([A-Za-z_][\w.:]*)\s*(.*)$")
_NO_DST = {"st", "bar", "barrier", "bra", "brx", "call", "ret", "exit", "red", "membar", "fence", "prefetch",
           "prefetchu", "cp", "trap", "nanosleep", "pmevent", "mbarrier"}


def list_entries(ptx: str) -> list[str]:
  """Names of the ``.entry`` functions (kernels) of a PTX module, in order."""
  return _ENTRY_RE.findall(_strip_comments(ptx))


def _strip_comments(ptx: str) -> str:
  return re.sub(r"//[^\n]*", "", re.sub(r"/\*.*?\*/", "", ptx, flags=re.DOTALL))


def entry_body(ptx: str, kernel: str | None) -> tuple[str, str]:
  """(name, body text) of the ``.entry`` named ``kernel`` (the only one if None)."""
  text = _strip_comments(ptx)
  entries = [(m.group(1), m.end()) for m in _ENTRY_RE.finditer(text)]
  if not entries:
    raise PTXAnalysisError("the PTX text has no .entry function")
  if kernel is None:
    if len(entries) > 1:
      raise PTXAnalysisError(f"the PTX has {len(entries)} kernels ({', '.join(n for n, _ in entries)}); name one")
    name, pos = entries[0]
  else:
    found = [e for e in entries if e[0] == kernel]
    if not found:
      raise PTXAnalysisError(f"no .entry {kernel!r} in the PTX; it has {', '.join(n for n, _ in entries)}")
    name, pos = found[0]
  i = _matching(text, pos, "(", ")")      # skip the parameter list
  start = text.index("{", i)
  j = _matching(text, start + 1, "{", "}")
  return name, text[start + 1:j - 1]


def _matching(text: str, pos: int, open_: str, close: str) -> int:
  """The position just past the ``close`` that balances an ``open_`` before ``pos``."""
  depth = 1
  for m in re.finditer(re.escape(open_) + "|" + re.escape(close), text[pos:]):
    depth += 1 if m.group() == open_ else -1
    if not depth: return pos + m.end()
  return len(text)


_OPERAND_RE = re.compile(r"(?:\{[^}]*\}|\[[^\]]*\]|\([^)]*\)|[^,{\[(])+")


def _split_operands(s: str) -> tuple[str, ...]:
  """Operands split at the commas outside ``{}``, ``[]`` and ``()`` (PTX nests them one deep)."""
  if "{" not in s and "[" not in s and "(" not in s:    # the common case: no nested commas
    return tuple(x for x in (p.strip() for p in s.split(",")) if x)
  return tuple(x for x in (m.strip() for m in _OPERAND_RE.findall(s)) if x)


def parse_body(body: str) -> tuple[list[Instruction], dict[str, int]]:
  """Instructions of a kernel body and ``label -> index of the instruction that follows it``."""
  instrs: list[Instruction] = []
  labels: dict[str, int] = {}
  for line in body.splitlines():
    for stmt in line.split(";"):
      s = stmt.strip().lstrip("{}").strip()
      if not s or s.startswith("."):
        continue
      if m := _LABEL_RE.match(s):               # "$L__BB0_3:" (possibly followed by an instruction)
        labels[m.group(1)] = len(instrs)
        s = m.group(2).strip()
        if not s:
          continue
      m = _INSTR_RE.match(s)
      if m is None:
        continue
      neg, guard, opcode, rest = m.groups()
      instrs.append(Instruction(len(instrs), opcode, _split_operands(rest), guard, bool(neg), s))
  return instrs, labels


def _dsts(base: str, operands: tuple[str, ...]) -> tuple[str, ...]:
  """The registers an instruction writes: its first operand (a vector ``{..}`` or a predicate pair ``%p|%q``)."""
  if base in _NO_DST or not operands:
    return ()
  d = operands[0]
  if d.startswith("{"):
    return tuple(r.strip() for r in d.strip("{}").split(",") if r.strip().startswith("%"))
  if "|" not in d: return (d,) if d.startswith("%") else ()
  return tuple(r.strip() for r in d.split("|") if r.strip().startswith("%"))


# ---- classification --------------------------------------------------------------------------

TYPE_BYTES = {"b8": 1, "u8": 1, "s8": 1, "b16": 2, "u16": 2, "s16": 2, "f16": 2, "bf16": 2, "b32": 4, "u32": 4,
               "s32": 4, "f32": 4, "f16x2": 4, "bf16x2": 4, "b64": 8, "u64": 8, "s64": 8, "f64": 8, "b128": 16,
               "pred": 1}
_FLOAT32 = {"f32", "f16", "f16x2", "bf16", "bf16x2"}
_SFU = {"ex2", "lg2", "rsqrt", "sqrt", "rcp", "sin", "cos", "tanh"}
_INT = {"add", "sub", "mul", "mad", "mul24", "mad24", "sad", "div", "rem", "abs", "neg", "min", "max", "popc", "clz",
        "bfind", "fns", "brev", "bfe", "bfi", "dp4a", "dp2a", "and", "or", "xor", "not", "cnot", "lop3", "shf", "shl",
        "shr", "prmt", "setp", "set", "selp", "slct", "addc", "subc", "madc", "szext", "bmsk"}
SPACES = ("global", "shared", "local", "param", "const")


@functools.lru_cache(maxsize=4096)
def classify(opcode: str) -> tuple[str, int]:
  """(class, bytes moved) of one PTX opcode such as ``ld.global.nc.v4.f32``; bytes is 0 for non-memory ops.

  f16 / bf16 arithmetic counts with FP32 (the same pipe on sm_70 .. sm_90); ``selp`` of any type
  is an integer-pipe select; ``div.f32`` (several SASS instructions around ``rcp``) is SFU.
  Generic loads / stores (no state space) count as global.
  """
  parts = opcode.split(".")
  base, mods = parts[0], parts[1:]
  types = [m for m in mods if m in TYPE_BYTES]
  t = types[-1] if types else None
  if base in ("ld", "ldu", "st", "atom", "red"):
    width = next((int(m[1:]) for m in mods if re.fullmatch(r"v\d", m)), 1)
    nbytes = width * TYPE_BYTES.get(t or "b32", 4)
    if base in ("atom", "red"):
      return "atomic", nbytes
    space = next((sp for m in mods for sp in SPACES if m.startswith(sp)), "global")
    if base == "st" and space in ("param", "const"):
      return "other", 0
    return f"{'st' if base == 'st' else 'ld'}_{space}", nbytes
  if base == "cp":
    return "ld_global", 0
  if base == "ldmatrix":     # a shared-memory load of 1, 2 or 4 8x8 b16 matrices: a 32-bit register each per lane
    return "ld_shared", 4 * next((int(m[1:]) for m in mods if re.fullmatch(r"x[124]", m)), 1)
  if base == "mma":
    if "s8" in mods or "u8" in mods: return "tensor_int8", 0
    return "tensor_tf32" if "tf32" in mods else "tensor_k16" if "m16n8k16" in mods else "tensor_k8", 0
  if base in ("bar", "barrier"):
    return ("other", 0) if "warp" in mods else ("bar_sync", 0)
  if base == "shfl":
    return "shfl", 0
  if base in ("bra", "brx", "call"):
    return "branch", 0
  if base == "cvt":
    return "conversion", 0
  if base == "selp":
    return "int", 0
  if t == "f64" and base != "mov":
    return "fp64", 0
  if base in _SFU or (base == "div" and t in _FLOAT32):
    return "sfu", 0
  if base in ("fma", "mad") and t in _FLOAT32:
    return "fp32_fma", 0
  if t in _FLOAT32 and base not in ("mov", "cvta"):
    return "fp32_arith", 0
  if base in _INT:
    return "int", 0
  return "other", 0
