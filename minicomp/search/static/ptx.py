"""Per-thread dynamic PTX instruction counts: Tuna's Algorithm 3 on NVRTC output.

Tuna (Wang et al., 2021, Sec. III-B "Number of PTX instructions" and Algorithm 3,
LOOP-MAP-PTX) finds the loops of a kernel's PTX, recovers each loop's iteration count from
its registers (a map of initial values, a map of per-iteration updates and the loop's
condition check) and multiplies every instruction by the iteration counts of the loops
around it. This module does that for one ``.entry`` of a PTX module:

1. The kernel body is parsed into instructions (``ptx_parse.py``) and split into basic blocks
   (a block starts at a label ``$L__BB0_3:`` or after a branch / ``ret``).
2. Every loop (a backward branch) gets its trip count from the registers, or from ``hints``
   (the extents of minicomp's loop IR) when the PTX does not reveal it (``ptx_loops.py``);
   a loop with no count is marked ``known=False``, counts once and gets a warning.
3. Every instruction is multiplied by the trip counts of the loops around it and counted by
   class (:func:`analyze_ptx`); every basic block is list-scheduled for latency
   (:func:`chain_cycles`).

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
latencies. A block carries its pending results into the join it falls into where ptxas keeps the
guard a branch (more than :data:`PREDICATED_BLOCK` instructions): there a guarded fetch's store waits
for its load, element after element.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from minicomp.search.static.ptx_loops import LoopAnalysis, apply_hints
from minicomp.search.static.ptx_parse import (CLASSES, MEMORY_CLASSES, SPACES, Instruction, classify, entry_body,
                                              parse_body)


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
  """A straight run of instructions and how often one thread executes it."""
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


# ---- the profile -----------------------------------------------------------------------------

def analyze_ptx(ptx: str, kernel: str | None = None, hints=None) -> PTXProfile:
  """Per-thread dynamic instruction counts of the ``.entry`` named ``kernel`` (the only one if None).

  ``hints`` gives trip counts for loops the PTX does not reveal: a list of loop extents in
  nesting order (pre-order, outer loop first; e.g. from :func:`ir_loop_extents`), used by
  position when it has one entry per PTX loop or one per unknown loop, or a dict
  ``{header_label: trip_count}``. Loops with no count and no hint count once.
  """
  name, body = entry_body(ptx, kernel)
  instrs, labels = parse_body(body)
  an = LoopAnalysis(instrs, labels)
  loops = an.find_loops()
  for l in loops:
    an.analyze_loop(l, loops)
  apply_hints(loops, hints, an.warnings)
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
    if ins.base in ("ld", "st") and not any(sp in md for md in ins.mods for sp in SPACES):
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
                  "ld_const": 30, "atomic": 260, "bar_sync": 20, "shfl": 24, "branch": 1, "other": 2,
                  # mma.sync: ~32 cycles for m16n8k16 (the order published microbenchmarks of sm_80 report for
                  # HMMA.16816; not measured here, and the same on every arch: an approximation; IMMA.16832 taken
                  # as long)
                  "tensor_k16": 32, "tensor_k8": 16, "tensor_tf32": 32, "tensor_int8": 32}
_STORES = ("st_global", "st_shared", "st_local")
_REG_RE = re.compile(r"%[A-Za-z_]\w*")
_ENDS_BLOCK = ("bra", "brx", "ret", "exit")    # what ends a basic block (besides the label that starts the next)


# ptxas turns a guarded block of this many instructions (a guarded load alone) into predicated instructions, which it
# schedules with the code around them; a longer one stays a branch (research/README.md, fetch_chain.py: on 775 sm_90
# programs this bound tells which fetch stores wait on their load in the machine code for 741)
PREDICATED_BLOCK = 1


def chain_cycles(instrs: list[Instruction], blocks: tuple[BasicBlock, ...],
                 follow_after: int = PREDICATED_BLOCK) -> float:
  """One warp's latency-bound cycles: each basic block list-scheduled in order (one issue per
  cycle, an instruction waiting for the registers it reads, a barrier for the warp's pending
  results but not its asynchronous copies), its length times its executions, summed. Dependencies
  between blocks are not followed (a loop-carried chain is counted inside its block), except into a join
  from the block that falls into it where that block holds more than ``follow_after`` instructions (0: never):
  ptxas leaves such a guard a branch, so the join's first instructions wait for the guarded block's results
  (a guarded fetch's store for its load: each element of the fetch waits out a global load)."""
  total = 0.0
  prev = None
  for bb in blocks:
    ready: dict[str, int] = {}
    t, pending = -1, 0
    if (follow_after and prev is not None and _falls_into_join(instrs, prev[0], bb)
        and prev[0].last - prev[0].first + 1 > follow_after and prev[0].executions == bb.executions):
      shift = prev[1] + 1
      ready = {r: c - shift for r, c in prev[2].items() if c > shift}
      pending = max(prev[3] - shift, 0)
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
      # a store, or a cp.async (its wait_group, not the next barrier, waits for it: Schedule.pipeline), is left behind
      pending = max(pending, start + 1 if cls in _STORES or ins.base == "cp" else done)
    total += (t + 1) * bb.executions
    prev = (bb, t, ready, pending)
  return total


def _falls_into_join(instrs, a: BasicBlock, b: BasicBlock) -> bool:
  """Does block ``a`` fall through into ``b``, a join (a labelled block, which a branch reaches too)?"""
  return b.first == a.last + 1 and b.label is not None and instrs[a.last].base not in _ENDS_BLOCK


def _in_cycle(i: int, ent: int, test: int) -> bool:
  """Is instruction ``i`` on the path from the entry point to the test (run T times, not T - 1)?"""
  return ent <= i <= test if ent <= test else (i >= ent or i <= test)


def _basic_blocks(instrs, labels, mult, loops) -> tuple[BasicBlock, ...]:
  starts = {0} | {i for i in labels.values() if i < len(instrs)}
  starts |= {ins.index + 1 for ins in instrs if ins.base in _ENDS_BLOCK and ins.index + 1 < len(instrs)}
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
  from minicomp.ir.loop import For, walk_stmts
  return [int(s.extent.arg) for s in walk_stmts(stmt)
          if isinstance(s, For) and s.kind in kinds and getattr(s.extent, "is_const", False)]


def ptx_profiles(kernel, hints=None) -> dict[str, PTXProfile]:
  """:func:`analyze_ptx` for every launch of a built :class:`minicomp.codegen.kernel.Kernel`, by kernel name."""
  names = dict.fromkeys(l.kernel for l in kernel.plan.launches)
  return {n: analyze_ptx(kernel.binary.ptx, n, hints) for n in names}
