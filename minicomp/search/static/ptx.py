"""Per-thread dynamic PTX instruction counts: Tuna's Algorithm 3 on NVRTC output.

Tuna (Wang et al., 2021, Sec. III-B "Number of PTX instructions" and Algorithm 3,
LOOP-MAP-PTX) finds the loops of a kernel's PTX, recovers each loop's iteration count from
its registers (a map of initial values, a map of per-iteration updates and the loop's
condition check) and multiplies every instruction by the iteration counts of the loops
around it. This module does that for one ``.entry`` of a PTX module:

1. The kernel body is split into basic blocks (a block starts at a label ``$L__BB0_3:`` or
   after a branch / ``ret``).
2. A loop is a backward branch ``bra $L`` to a label at or before it; its body is the
   instructions between the label (the header) and the last branch back to it. NVVM lays
   loops out contiguously, so program order gives the nesting.
3. The loop's test is the conditional back edge (``@%p bra $L_header``, the rotated
   do-while form NVVM emits for counted loops), or, when the back edge is unconditional
   (``bra.uni``), the conditional branch that leaves the loop (top-tested or
   entered-in-the-middle forms, which NVVM emits for partially unrolled loops with a
   peeled iteration). The entry point is the header, or the label a forward jump from
   before the loop lands on.
4. The trip count: the ``setp`` that defines the test's predicate compares ``r + c`` (``r``
   a register updated once per iteration by ``add r, r, step``, through ``mov`` / ``add``
   / ``sub`` chains) with a loop-invariant bound; ``r``'s value on entry comes from its last
   definition before the loop (``mov`` of an immediate, or ``mov`` / ``add`` / ``sub``
   chains of registers ending in immediates). Initial value and bound may also be the same
   unknown base plus constants (pointer inductions: ``p = base``, ``end = base + 2048``).
   Up-counters, down-counters and counters running from a negative value to 0 are the
   same case; the comparison may be ``eq ne lt le gt ge lo ls hi hs`` either way round, and
   a negated guard ``@!%p`` flips it.
5. Loops whose count cannot be recovered (thread-dependent bounds, runtime values) take
   their count from ``hints`` (the extents of minicomp's loop IR) or count once, are
   marked ``known=False`` and get a warning.

Execution counts: with ``T`` evaluations of a loop's test, the instructions from the
entry point to the test run ``T`` times and the rest of the loop ``T - 1`` times (all ``T``
times for the bottom-tested form). Branches inside a loop body (guards of partial tiles)
are not followed: guarded code counts as executed, as in Tuna.

The counts are per thread and by class (see :data:`CLASSES`); vector loads / stores
(``.v2`` / ``.v4``) count once, and ``bytes`` holds the bytes moved per memory class.
Register spills happen after PTX (in ptxas): take them from ``Resources.spill_*``.

Latency (Tuna's "ILP cost", Sec. III-B): every basic block is list-scheduled for one warp,
in order, one instruction per cycle, each waiting for the registers it reads to be ready
(:data:`LATENCY_CYCLES` after their producer issued); the block's length times its
executions, summed, is ``chain_cycles``: how long one warp takes when nothing else hides its
latencies.
"""
from __future__ import annotations

import bisect
import functools
import re
from dataclasses import dataclass, field

from minicomp.errors import PTXAnalysisError

CLASSES = ("fp32_fma", "fp32_arith", "fp64", "int", "sfu", "conversion", "ld_global", "st_global", "ld_shared",
           "st_shared", "ld_local", "st_local", "ld_param", "ld_const", "atomic", "bar_sync", "shfl", "branch", "other")
MEMORY_CLASSES = ("ld_global", "st_global", "ld_shared", "st_shared", "ld_local", "st_local", "ld_param", "ld_const",
                  "atomic")


@dataclass(frozen=True)
class LoopInfo:
  """One loop of the PTX: header label, iterations (evaluations of its test), nesting depth (0 = outermost)."""
  header_label: str
  trip_count: int
  known: bool
  depth: int
  source: str = "ptx"            # "ptx" (recovered from registers) | "hint" | "assumed" (counted once)
  induction: str | None = None   # the induction register, when recovered
  step: int | None = None        # its change per iteration (the unroll factor, for a unit-stride counter)


@dataclass(frozen=True)
class BasicBlock:
  label: str | None              # None for a block that follows a branch without a label
  first: int                     # instruction indices, inclusive
  last: int
  executions: float              # per thread
  loop_depth: int


@dataclass(frozen=True)
class PTXProfile:
  """Per-thread dynamic instruction counts of one kernel, by class (:data:`CLASSES`)."""
  kernel: str
  counts: dict = field(compare=False)          # class -> dynamic count per thread (float)
  total: float
  bytes: dict = field(compare=False)           # memory class -> bytes per thread
  loops: tuple[LoopInfo, ...]
  warnings: tuple[str, ...]
  static_counts: dict = field(default_factory=dict, compare=False)   # class -> instructions in the text
  blocks: tuple[BasicBlock, ...] = ()
  chain_cycles: float = 0.0                    # one warp's latency-bound cycles (Tuna's ILP cost)

  def __getitem__(self, cls: str) -> float: return self.counts[cls]

  @property
  def fp32_flops(self) -> float:
    """FP32 operations per thread: 2 per FMA, 1 per other FP32 arithmetic instruction."""
    return 2 * self.counts["fp32_fma"] + self.counts["fp32_arith"]

  @property
  def all_loops_known(self) -> bool: return all(l.known for l in self.loops)


# ---- parsing ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Instruction:
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


def _entry_body(ptx: str, kernel: str | None) -> tuple[str, str]:
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
  if base in _NO_DST or not operands:
    return ()
  d = operands[0]
  if d.startswith("{"):
    return tuple(r.strip() for r in d.strip("{}").split(",") if r.strip().startswith("%"))
  if "|" not in d: return (d,) if d.startswith("%") else ()
  return tuple(r.strip() for r in d.split("|") if r.strip().startswith("%"))


# ---- classification --------------------------------------------------------------------------

_TYPE_BYTES = {"b8": 1, "u8": 1, "s8": 1, "b16": 2, "u16": 2, "s16": 2, "f16": 2, "bf16": 2, "b32": 4, "u32": 4,
               "s32": 4, "f32": 4, "f16x2": 4, "bf16x2": 4, "b64": 8, "u64": 8, "s64": 8, "f64": 8, "b128": 16,
               "pred": 1}
_FLOAT32 = {"f32", "f16", "f16x2", "bf16", "bf16x2"}
_SFU = {"ex2", "lg2", "rsqrt", "sqrt", "rcp", "sin", "cos", "tanh"}
_INT = {"add", "sub", "mul", "mad", "mul24", "mad24", "sad", "div", "rem", "abs", "neg", "min", "max", "popc", "clz",
        "bfind", "fns", "brev", "bfe", "bfi", "dp4a", "dp2a", "and", "or", "xor", "not", "cnot", "lop3", "shf", "shl",
        "shr", "prmt", "setp", "set", "selp", "slct", "addc", "subc", "madc", "szext", "bmsk"}
_SPACES = ("global", "shared", "local", "param", "const")


@functools.lru_cache(maxsize=4096)
def classify(opcode: str) -> tuple[str, int]:
  """(class, bytes moved) of one PTX opcode such as ``ld.global.nc.v4.f32``; bytes is 0 for non-memory ops.

  f16 / bf16 arithmetic counts with FP32 (the same pipe on sm_70 .. sm_90); ``selp`` of any type
  is an integer-pipe select; ``div.f32`` (several SASS instructions around ``rcp``) is SFU.
  Generic loads / stores (no state space) count as global.
  """
  parts = opcode.split(".")
  base, mods = parts[0], parts[1:]
  types = [m for m in mods if m in _TYPE_BYTES]
  t = types[-1] if types else None
  if base in ("ld", "ldu", "st", "atom", "red"):
    width = next((int(m[1:]) for m in mods if re.fullmatch(r"v\d", m)), 1)
    nbytes = width * _TYPE_BYTES.get(t or "b32", 4)
    if base in ("atom", "red"):
      return "atomic", nbytes
    space = next((sp for m in mods for sp in _SPACES if m.startswith(sp)), "global")
    if base == "st" and space in ("param", "const"):
      return "other", 0
    return f"{'st' if base == 'st' else 'ld'}_{space}", nbytes
  if base == "cp":
    return "ld_global", 0
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


# ---- loops -----------------------------------------------------------------------------------

@dataclass
class _PTXLoop:
  """A loop of the PTX while it is analysed (a back edge to ``header``); :class:`LoopInfo` is what it becomes."""
  header: str
  q: int                  # first instruction of the loop (the header label's)
  p: int                  # the last back-edge branch
  ent: int = -1           # entry point
  test: int = -1          # the branch whose condition decides the next iteration
  cont_neg: bool = False  # continue when the test branch is *not* taken
  trip: int = 1
  known: bool = False
  source: str = "assumed"
  induction: str | None = None
  step: int | None = None
  depth: int = 0

  def contains(self, i: int) -> bool: return self.q <= i <= self.p


_IMM_RE = re.compile(r"^-?(0[xX][0-9a-fA-F]+|\d+)[uU]?$")


def _imm(op: str) -> int | None:
  if _IMM_RE.match(op):
    return int(op.rstrip("uU"), 0)
  return None


_NEGATE = {"eq": "ne", "ne": "eq", "lt": "ge", "ge": "lt", "le": "gt", "gt": "le", "lo": "hs", "hs": "lo",
           "ls": "hi", "hi": "ls"}
_SWAP = {"eq": "eq", "ne": "ne", "lt": "gt", "gt": "lt", "le": "ge", "ge": "le", "lo": "hi", "hi": "lo",
         "ls": "hs", "hs": "ls"}
_INT_TYPES = {"s16", "u16", "b16", "s32", "u32", "b32", "s64", "u64", "b64"}


def _first_exit(cmp: str, a: int, s: int, b: int) -> int | None:
  """Smallest k >= 0 with not (a + k*s  cmp  b), or None if there is none (or it cannot be decided)."""
  if cmp in ("lo", "ls", "hi", "hs"):           # unsigned: solve as signed, valid if no value wraps below 0
    if a < 0 or b < 0:
      return None
    k = _first_exit({"lo": "lt", "ls": "le", "hi": "gt", "hs": "ge"}[cmp], a, s, b)
    return k if k is not None and a + k * s >= 0 else None
  if cmp in ("gt", "ge"):                     # negate both sides: a+ks > b  <=>  -a-ks < -b
    a, s, b, cmp = -a, -s, -b, {"gt": "lt", "ge": "le"}[cmp]
  if cmp == "le":
    b, cmp = b + 1, "lt"
  if cmp == "lt":
    if a >= b:
      return 0
    return None if s <= 0 else -(-(b - a) // s)
  if cmp == "ne":
    if a == b:
      return 0
    return (b - a) // s if s and (b - a) % s == 0 and (b - a) // s > 0 else None
  if cmp == "eq":
    return 0 if a != b else 1
  return None


class _Analysis:
  def __init__(self, instrs: list[Instruction], labels: dict[str, int]):
    self.instrs, self.labels = instrs, labels
    self.defs: dict[str, list[int]] = {}
    for ins in instrs:
      for d in ins.dsts:
        self.defs.setdefault(d, []).append(ins.index)
    self.warnings: list[str] = []
    self.branches = [(ins.index, t) for ins in instrs if (t := self._branch_target(ins)) is not None]

  # -- values: (base, offset), base None for a constant, "start:%r" for the value of %r at the
  #    start of the current iteration, "sym:..." for an opaque loop-invariant value
  def value_before(self, reg: str, pos: int, depth: int = 0):
    ds = self.defs.get(reg, [])
    k = bisect.bisect_left(ds, pos) - 1
    if k < 0 or depth > 32:
      return (f"sym:{reg}", 0)
    d = ds[k]
    v = self._eval(self.instrs[d], lambda op: self.operand_before(op, d, depth + 1))
    return v if v is not None else (f"sym:{reg}@{d}", 0)

  def operand_before(self, op: str, pos: int, depth: int):
    c = _imm(op)
    if c is not None:
      return (None, c)
    if op.startswith("%"):
      return self.value_before(op, pos, depth)
    return None

  @staticmethod
  def _eval(ins: Instruction, val):
    """Value of the (single) destination of ``ins`` from its operands' values, or None."""
    ds = ins.dsts
    if len(ds) != 1 or ins.guard is not None:
      return None
    types = [m for m in ins.mods if m in _TYPE_BYTES]
    if not types or types[-1] not in _INT_TYPES:
      return None
    base, ops = ins.base, ins.operands[1:]
    if base in ("mov", "cvt") and len(ops) == 1:
      return val(ops[0])
    if base in ("add", "sub") and len(ops) == 2 and not any(m in ("sat", "cc") for m in ins.mods):
      x, y = val(ops[0]), val(ops[1])
      if x is None or y is None:
        return None
      if base == "add":
        if y[0] is None:
          return (x[0], x[1] + y[1])
        if x[0] is None:
          return (y[0], x[1] + y[1])
        return None
      if y[0] is None:
        return (x[0], x[1] - y[1])
      if x[0] == y[0]:
        return (None, x[1] - y[1])
      return None
    if base in ("mul", "shl") and len(ops) == 2:
      x, y = val(ops[0]), val(ops[1])
      if x is not None and y is not None and x[0] is None and y[0] is None:
        return (None, x[1] * y[1] if base == "mul" else x[1] << y[1])
    return None

  # -- loops
  def find_loops(self) -> list[_PTXLoop]:
    loops: dict[str, _PTXLoop] = {}
    for ins in self.instrs:
      if ins.base in ("bra", "brx") and ins.operands:
        tgt = ins.operands[-1]
        q = self.labels.get(tgt)
        if q is not None and q <= ins.index:
          lp = loops.setdefault(tgt, _PTXLoop(tgt, q, ins.index))
          lp.p = max(lp.p, ins.index)
    out = sorted(loops.values(), key=lambda l: (l.q, -l.p))
    for l in out:
      l.depth = sum(1 for o in out if o is not l and o.q <= l.q and l.p <= o.p)
      for o in out:
        if o is not l and o.q < l.q <= o.p < l.p:
          self.warnings.append(f"loops at {o.header} and {l.header} overlap without nesting (irreducible control flow)")
    return out

  def _branch_target(self, ins: Instruction) -> int | None:
    return self.labels.get(ins.operands[-1]) if ins.base in ("bra", "brx") and ins.operands else None

  def analyze_loop(self, l: _PTXLoop, loops: list[_PTXLoop]) -> None:
    inner = [o for o in loops if o is not l and l.q <= o.q and o.p <= l.p]
    in_inner = lambda i: any(o.contains(i) for o in inner)
    # entry point: a jump from outside the loop into its body, else the header
    l.ent = l.q
    for i, t in self.branches:
      if not l.contains(i) and l.q < t <= l.p:
        l.ent = t
        break
    back = self.instrs[l.p]
    if back.guard is not None:
      l.test, l.cont_neg = l.p, back.negated
    else:
      exits = [ins.index for ins in self.instrs[l.q:l.p] if ins.guard is not None and not in_inner(ins.index)
               and (t := self._branch_target(ins)) is not None and not l.q <= t <= l.p]
      if not exits:
        self.warnings.append(f"loop at {l.header}: no conditional exit found")
        return
      if len(exits) > 1:
        self.warnings.append(f"loop at {l.header}: {len(exits)} exits; the first one decides the trip count")
      l.test = exits[0]
      l.cont_neg = not self.instrs[l.test].negated
    order = list(range(l.ent, l.p + 1)) + list(range(l.q, l.ent))
    test_ins = self.instrs[l.test]
    pred = test_ins.guard
    walk_to_test = order[:order.index(l.test)]
    setp = next((i for i in reversed(walk_to_test) if pred in self.instrs[i].dsts), None)
    if setp is None or self.instrs[setp].base != "setp" or in_inner(setp):
      return
    sins = self.instrs[setp]
    if len(sins.operands) != 3 or "|" in sins.operands[0]:
      return
    cmp = sins.mods[0] if sins.mods else ""
    types = [m for m in sins.mods if m in _TYPE_BYTES]
    if cmp not in _NEGATE or not types or types[-1] not in _INT_TYPES:
      return
    in_loop = lambda reg: any(l.q <= d <= l.p for d in self.defs.get(reg, []))
    env: dict[str, object] = {}

    def val(op: str):
      c = _imm(op)
      if c is not None:
        return (None, c)
      if not op.startswith("%"):
        return None
      if op in env:
        return env[op]
      return (f"start:{op}", 0) if in_loop(op) else self.value_before(op, l.q)

    at_test = None
    for i in order:
      ins = self.instrs[i]
      if i == setp:
        at_test = (val(sins.operands[1]), val(sins.operands[2]))
      v = None if in_inner(i) else self._eval(ins, val)
      for d in ins.dsts:
        env[d] = v
    x, y = at_test
    if x is None or y is None:
      return
    if l.cont_neg:
      cmp = _NEGATE[cmp]
    ty = types[-1]
    if ty.startswith("u"):                    # lt / le / gt / ge of unsigned types compare unsigned
      cmp = {"lt": "lo", "le": "ls", "gt": "hi", "ge": "hs"}.get(cmp, cmp)
    is_ind = lambda v: isinstance(v[0], str) and v[0].startswith("start:")
    if is_ind(y) and not is_ind(x):
      x, y, cmp = y, x, _SWAP[cmp]
    if not is_ind(x):
      return
    reg = x[0][len("start:"):]
    end, init = env.get(reg), self.value_before(reg, l.q)
    if not is_ind(y) and end is not None and end[0] == x[0] and end[1] != 0 and init[0] == y[0]:
      k = _first_exit(cmp, init[1] + x[1], end[1], y[1])      # closed form: r += step per iteration
      if k is not None and k < 1 << 40:
        l.trip, l.known, l.source, l.induction, l.step = k + 1, True, "ptx", reg, end[1]
        return
    k = self._simulate(l, env, x, y, cmp, int(ty[1:]))
    if k is not None:
      l.trip, l.known, l.source, l.induction = k + 1, True, "ptx", reg

  def _simulate(self, l: _PTXLoop, env: dict, x, y, cmp: str, bits: int, limit: int = 1 << 16) -> int | None:
    """First k at which the test fails, iterating the loop's register transfer (``r -> r' + c`` or
    ``r -> c`` per iteration, e.g. NVVM's two-trip ``add r2, r, 1; mov r, 1; setp.lt r2, 2``)."""
    trans: dict[str, tuple] = {}
    todo = [v[0][len("start:"):] for v in (x, y) if isinstance(v[0], str) and v[0].startswith("start:")]
    while todo:
      r = todo.pop()
      if r in trans:
        continue
      e = env.get(r)
      if e is None:
        return None
      trans[r] = e
      if isinstance(e[0], str) and e[0].startswith("start:"):
        todo.append(e[0][len("start:"):])
    state = {r: self.value_before(r, l.q) for r in trans}

    def resolve(v):
      if isinstance(v[0], str) and v[0].startswith("start:"):
        b, o = state[v[0][len("start:"):]]
        return b, o + v[1]
      return v
    unsigned, mask = cmp in ("lo", "ls", "hi", "hs"), (1 << bits) - 1
    op = {"lo": "lt", "ls": "le", "hi": "gt", "hs": "ge"}.get(cmp, cmp)
    for k in range(limit):
      a, b = resolve(x), resolve(y)
      if a[0] != b[0]:
        return None
      av, bv = (a[1] & mask, b[1] & mask) if unsigned or op in ("eq", "ne") else (a[1], b[1])
      holds = {"eq": av == bv, "ne": av != bv, "lt": av < bv, "le": av <= bv, "gt": av > bv, "ge": av >= bv}[op]
      if not holds:
        return k
      state = {r: resolve(e) for r, e in trans.items()}
    return None


# ---- the profile -----------------------------------------------------------------------------

def analyze_ptx(ptx: str, kernel: str | None = None, hints=None) -> PTXProfile:
  """Per-thread dynamic instruction counts of the ``.entry`` named ``kernel`` (the only one if None).

  ``hints`` gives trip counts for loops the PTX does not reveal: a list of loop extents in
  nesting order (pre-order, outer loop first; e.g. from :func:`ir_loop_extents`), used by
  position when it has one entry per PTX loop or one per unknown loop, or a dict
  ``{header_label: trip_count}``. Loops with no count and no hint count once.
  """
  name, body = _entry_body(ptx, kernel)
  instrs, labels = parse_body(body)
  an = _Analysis(instrs, labels)
  loops = an.find_loops()
  for l in loops:
    an.analyze_loop(l, loops)
  _apply_hints(loops, hints, an.warnings)
  for l in loops:
    if not l.known:
      an.warnings.append(f"loop at {l.header}: trip count not recovered from the PTX; "
                         + (f"using hint {l.trip}" if l.source == "hint" else "counted once"))

  mult = [1.0] * len(instrs)
  for l in loops:
    for i in range(l.q, l.p + 1):
      if l.known and l.test >= 0 and not _in_cycle(i, l.ent, l.test):
        mult[i] *= max(l.trip - 1, 0)
      else:
        mult[i] *= l.trip

  counts = dict.fromkeys(CLASSES, 0.0)
  nbytes = dict.fromkeys(MEMORY_CLASSES, 0.0)
  static = dict.fromkeys(CLASSES, 0)
  generic = calls = 0
  for ins, m in zip(instrs, mult):
    cls, b = classify(ins.opcode)
    counts[cls] += m
    static[cls] += 1
    if cls in nbytes:
      nbytes[cls] += m * b
    if ins.base in ("ld", "st") and not any(sp in md for md in ins.mods for sp in _SPACES):
      generic += 1
    calls += ins.base == "call"
  if generic:
    an.warnings.append(f"{generic} generic-address loads/stores counted as global")
  if calls:
    an.warnings.append(f"{calls} calls: the callees' instructions are not counted")

  blocks = _basic_blocks(instrs, labels, mult, loops)
  infos = tuple(LoopInfo(l.header, int(l.trip), l.known, l.depth, l.source, l.induction, l.step) for l in loops)
  return PTXProfile(name, counts, float(sum(counts.values())), nbytes, infos, tuple(an.warnings), static, blocks,
                    chain_cycles(instrs, blocks))


# cycles from issue until a result can be used, by class: microbenchmarks of Volta to Hopper (Jia et
# al. 2018/2019 "Dissecting the NVIDIA Volta / Turing GPU architecture via microbenchmarking"; Luo et
# al. 2024, "Benchmarking and dissecting the Nvidia Hopper GPU architecture"): FP32 / INT32 ~4,
# MUFU ~20, shared memory ~30, L2 hit ~260 (a global load is taken to hit L2: the compulsory DRAM
# traffic is a bandwidth term of the model), shuffle ~24, barrier ~20. Local memory "has the same
# high latency ... as global memory" (CUDA C++ Programming Guide, "Device Memory Accesses").
LATENCY_CYCLES = {"fp32_fma": 4, "fp32_arith": 4, "fp64": 8, "int": 4, "sfu": 20, "conversion": 6, "ld_global": 260,
                  "st_global": 1, "ld_shared": 30, "st_shared": 1, "ld_local": 260, "st_local": 1, "ld_param": 30,
                  "ld_const": 30, "atomic": 260, "bar_sync": 20, "shfl": 24, "branch": 1, "other": 2}
_STORES = ("st_global", "st_shared", "st_local")
_REG_RE = re.compile(r"%[A-Za-z_]\w*")


def chain_cycles(instrs: list[Instruction], blocks: tuple[BasicBlock, ...]) -> float:
  """One warp's latency-bound cycles: each basic block list-scheduled in order (one issue per
  cycle, an instruction waiting for the registers it reads, a barrier for the warp's pending
  results), its length times its executions, summed. Dependencies between blocks are not
  followed (a loop-carried chain is counted inside its block)."""
  total = 0.0
  for bb in blocks:
    ready: dict[str, int] = {}
    t, pending = -1, 0
    for ins in instrs[bb.first:bb.last + 1]:
      cls = classify(ins.opcode)[0]
      start = t + 1
      for op in (ins.operands[1:] if ins.dsts else ins.operands):
        for r in _REG_RE.findall(op): start = max(start, ready.get(r, 0))
      if ins.guard: start = max(start, ready.get(ins.guard, 0))
      if cls == "bar_sync": start = max(start, pending)
      t = start
      done = start + LATENCY_CYCLES[cls]
      for d in ins.dsts: ready[d] = done
      pending = max(pending, start + 1 if cls in _STORES else done)
    total += (t + 1) * bb.executions
  return total


def _in_cycle(i: int, ent: int, test: int) -> bool:
  """Is instruction ``i`` on the path from the entry point to the test (run T times, not T - 1)?"""
  return ent <= i <= test if ent <= test else (i >= ent or i <= test)


def _apply_hints(loops: list[_PTXLoop], hints, warnings: list[str]) -> None:
  """Give loops the PTX left unknown a count from ``hints`` (see :func:`analyze_ptx`)."""
  if not hints:
    return
  if isinstance(hints, dict):
    for l in loops:
      if not l.known and l.header in hints:
        l.trip, l.source = int(hints[l.header]), "hint"
    return
  hints = [int(h) for h in hints]
  if all(l.known for l in loops):
    return
  # anchor the known loops on the hints they match (the extent, or the extent over the unroll
  # step); a run of unknown loops between two anchors takes the hints between them when the
  # numbers agree (NVVM may have unrolled some IR loops completely, so they often do not)
  matches = lambda l, h: h == l.trip or (l.step is not None and abs(l.step) > 1 and -(-h // abs(l.step)) == l.trip)
  pos: list[int | None] = []
  k = 0
  for l in loops:
    j = next((j for j in range(k, len(hints)) if matches(l, hints[j])), None) if l.known else None
    pos.append(j)
    k = j + 1 if j is not None else k
  i, prev = 0, -1
  while i < len(loops):
    if loops[i].known:
      prev = pos[i] if pos[i] is not None else prev
      i += 1
      continue
    j = i
    while j < len(loops) and not loops[j].known:
      j += 1
    nxt = next((pos[t] for t in range(j, len(loops)) if pos[t] is not None), len(hints))
    seg = hints[prev + 1:nxt]
    if len(seg) == j - i:
      for l, h in zip(loops[i:j], seg):
        l.trip, l.source = h, "hint"
    i = j
  if any(not l.known and l.source != "hint" for l in loops) and len(hints) == len(loops):
    for l, h in zip(loops, hints):             # no anchors to go by: position in the nest
      if not l.known and l.source != "hint":
        l.trip, l.source = h, "hint"
  left = sum(1 for l in loops if not l.known and l.source != "hint")
  if left:
    warnings.append(f"{len(hints)} hints for {len(loops)} loops: {left} unknown loop(s) could not be matched to a hint")


def _basic_blocks(instrs, labels, mult, loops) -> tuple[BasicBlock, ...]:
  starts = {0} | {i for i in labels.values() if i < len(instrs)}
  starts |= {ins.index + 1 for ins in instrs if ins.base in ("bra", "brx", "ret", "exit") and ins.index + 1 < len(instrs)}
  names = {i: n for n, i in labels.items()}
  order = sorted(starts)
  out = []
  for k, s in enumerate(order):
    e = (order[k + 1] if k + 1 < len(order) else len(instrs)) - 1
    if e < s:
      continue
    out.append(BasicBlock(names.get(s), s, e, mult[s], sum(1 for l in loops if l.contains(s))))
  return tuple(out)


# ---- helpers for minicomp kernels ------------------------------------------------------------

def ir_loop_extents(stmt, kinds: tuple[str, ...] = ("serial",)) -> list[int]:
  """Constant extents of the loops of a loop-IR statement (pre-order, outer first) whose kind is
  in ``kinds`` (the loops minicomp leaves rolled; NVVM may still unroll short ones)."""
  from minicomp.ir import loop as L
  out: list[int] = []

  def walk(s):
    if isinstance(s, L.For):
      if s.kind in kinds and getattr(s.extent, "is_const", False):
        out.append(int(s.extent.arg))
      walk(s.body)
    elif isinstance(s, L.Seq):
      for x in s.stmts:
        walk(x)
    elif isinstance(s, L.If):
      walk(s.then)
  walk(stmt)
  return out


def ptx_profiles(kernel, hints=None) -> dict[str, PTXProfile]:
  """:func:`analyze_ptx` for every launch of a built :class:`minicomp.codegen.kernel.Kernel`, by kernel name."""
  names = dict.fromkeys(l.kernel for l in kernel.plan.launches)
  return {n: analyze_ptx(kernel.binary.ptx, n, hints) for n in names}
