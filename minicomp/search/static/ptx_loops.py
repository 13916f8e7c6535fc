"""Trip counts of the loops of one PTX kernel, recovered from its registers (Tuna's Algorithm 3, LOOP-MAP-PTX).

1. A loop is a backward branch ``bra $L`` to a label at or before it; its body is the
   instructions between the label (the header) and the last branch back to it. NVVM lays
   loops out contiguously, so program order gives the nesting (:meth:`LoopAnalysis.find_loops`).
2. The loop's test is the conditional back edge (``@%p bra $L_header``, the rotated
   do-while form NVVM emits for counted loops), or, when the back edge is unconditional
   (``bra.uni``), the conditional branch that leaves the loop (top-tested or
   entered-in-the-middle forms, which NVVM emits for partially unrolled loops with a
   peeled iteration). The entry point is the header, or the label a forward jump from
   before the loop lands on.
3. The trip count: the ``setp`` that defines the test's predicate compares ``r + c`` (``r``
   a register updated once per iteration by ``add r, r, step``, through ``mov`` / ``add``
   / ``sub`` chains) with a loop-invariant bound; ``r``'s value on entry comes from its last
   definition before the loop (``mov`` of an immediate, or ``mov`` / ``add`` / ``sub``
   chains of registers ending in immediates). Initial value and bound may also be the same
   unknown base plus constants (pointer inductions: ``p = base``, ``end = base + 2048``).
   Up-counters, down-counters and counters running from a negative value to 0 are the
   same case; the comparison may be ``eq ne lt le gt ge lo ls hi hs`` either way round, and
   a negated guard ``@!%p`` flips it. A closed form solves the usual case
   (:func:`_first_exit`); other register transfers are iterated (:meth:`LoopAnalysis._simulate`).
4. Loops whose count cannot be recovered (thread-dependent bounds, runtime values) take
   their count from ``hints`` (:func:`apply_hints`: the extents of minicomp's loop IR) or count
   once, and stay ``known=False``.

Register values are ``(base, offset)`` pairs: base None for a constant, ``"start:%r"`` for the
value of ``%r`` at the start of the current iteration, ``"sym:..."`` for an opaque loop-invariant
value.
"""
from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from minicomp.search.static.ptx_parse import TYPE_BYTES, Instruction


@dataclass
class PTXLoop:
  """A loop of the PTX while it is analysed (a back edge to ``header``); what it becomes is a
  :class:`~minicomp.search.static.ptx.LoopInfo`."""
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


def _is_start(v) -> bool:
  """Is value ``v`` a register's value at the start of the iteration plus a constant?"""
  return isinstance(v[0], str) and v[0].startswith("start:")


def _continue_while(x, y, cmp: str, ty: str, negated: bool):
  """The condition under which the loop goes on, ``(x, y, cmp)`` with ``x`` the induction value: the
  ``setp`` comparison of ``x`` and ``y``, negated when the loop continues on a false test, unsigned for
  ``.u`` types, swapped when the induction value is on the right. None when neither side is one or a
  value is unknown."""
  if x is None or y is None:
    return None
  if negated:
    cmp = _NEGATE[cmp]
  if ty.startswith("u"):                    # lt / le / gt / ge of unsigned types compare unsigned
    cmp = {"lt": "lo", "le": "ls", "gt": "hi", "ge": "hs"}.get(cmp, cmp)
  if _is_start(y) and not _is_start(x):
    x, y, cmp = y, x, _SWAP[cmp]
  if not _is_start(x):
    return None
  return x, y, cmp


class LoopAnalysis:
  """The loops of one kernel's instructions and their trip counts; ``warnings`` collects what could not be
  recovered."""

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
    types = [m for m in ins.mods if m in TYPE_BYTES]
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
  def find_loops(self) -> list[PTXLoop]:
    loops: dict[str, PTXLoop] = {}
    for ins in self.instrs:
      if ins.base in ("bra", "brx") and ins.operands:
        tgt = ins.operands[-1]
        q = self.labels.get(tgt)
        if q is not None and q <= ins.index:
          lp = loops.setdefault(tgt, PTXLoop(tgt, q, ins.index))
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

  def analyze_loop(self, l: PTXLoop, loops: list[PTXLoop]) -> None:
    """Find the entry point and the test of loop ``l`` and, when the registers reveal it, its trip count
    (``loops``: every loop, for the ones nested in ``l``, whose instructions do not count as ``l``'s)."""
    inner = [o for o in loops if o is not l and l.q <= o.q and o.p <= l.p]
    in_inner = lambda i: any(o.contains(i) for o in inner)
    l.ent = self._entry_point(l)
    if not self._find_test(l, in_inner):
      return
    order = list(range(l.ent, l.p + 1)) + list(range(l.q, l.ent))    # one iteration, from the entry point
    found = self._test_setp(l, order, in_inner)
    if found is None:
      return
    setp, cmp, ty = found
    env, (x, y) = self._one_iteration(l, order, setp, in_inner)
    cont = _continue_while(x, y, cmp, ty, l.cont_neg)
    if cont is not None:
      self._solve(l, env, *cont, ty)

  def _entry_point(self, l: PTXLoop) -> int:
    """Where an iteration starts: the target of a jump from outside the loop into its body, else the header."""
    for i, t in self.branches:
      if not l.contains(i) and l.q < t <= l.p:
        return t
    return l.q

  def _find_test(self, l: PTXLoop, in_inner) -> bool:
    """Set ``l.test`` (the branch that decides the next iteration) and ``l.cont_neg``: the conditional back
    edge, else the first conditional branch out of the loop (not of an inner one). False when there is none."""
    back = self.instrs[l.p]
    if back.guard is not None:
      l.test, l.cont_neg = l.p, back.negated
      return True
    exits = [ins.index for ins in self.instrs[l.q:l.p] if ins.guard is not None and not in_inner(ins.index)
             and (t := self._branch_target(ins)) is not None and not l.q <= t <= l.p]
    if not exits:
      self.warnings.append(f"loop at {l.header}: no conditional exit found")
      return False
    if len(exits) > 1:
      self.warnings.append(f"loop at {l.header}: {len(exits)} exits; the first one decides the trip count")
    l.test = exits[0]
    l.cont_neg = not self.instrs[l.test].negated
    return True

  def _test_setp(self, l: PTXLoop, order: list[int], in_inner) -> tuple[int, str, str] | None:
    """(index, comparison, integer type) of the ``setp`` that last defines the test's predicate before the
    test in iteration ``order``; None when it is not a plain integer ``setp`` of the loop itself."""
    pred = self.instrs[l.test].guard
    walk_to_test = order[:order.index(l.test)]
    setp = next((i for i in reversed(walk_to_test) if pred in self.instrs[i].dsts), None)
    if setp is None or self.instrs[setp].base != "setp" or in_inner(setp):
      return None
    sins = self.instrs[setp]
    if len(sins.operands) != 3 or "|" in sins.operands[0]:
      return None
    cmp = sins.mods[0] if sins.mods else ""
    types = [m for m in sins.mods if m in TYPE_BYTES]
    if cmp not in _NEGATE or not types or types[-1] not in _INT_TYPES:
      return None
    return setp, cmp, types[-1]

  def _one_iteration(self, l: PTXLoop, order: list[int], setp: int, in_inner):
    """Run one iteration symbolically: every register the loop defines starts as ``start:%r``; returns the
    registers' values at the end of the iteration and the two operands of the ``setp`` when it runs
    (instructions of inner loops give unknown values)."""
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

    sins, at_test = self.instrs[setp], None
    for i in order:
      ins = self.instrs[i]
      if i == setp:
        at_test = (val(sins.operands[1]), val(sins.operands[2]))
      v = None if in_inner(i) else self._eval(ins, val)
      for d in ins.dsts:
        env[d] = v
    return env, at_test

  def _solve(self, l: PTXLoop, env: dict, x, y, cmp: str, ty: str) -> None:
    """The trip count of a loop that continues while ``x cmp y`` (``x`` the induction value): in closed form
    when the induction register steps by a constant from an initial value on ``y``'s base, else by
    iterating the register transfer."""
    reg = x[0][len("start:"):]
    end, init = env.get(reg), self.value_before(reg, l.q)
    if not _is_start(y) and end is not None and end[0] == x[0] and end[1] != 0 and init[0] == y[0]:
      k = _first_exit(cmp, init[1] + x[1], end[1], y[1])      # closed form: r += step per iteration
      if k is not None and k < 1 << 40:
        l.trip, l.known, l.source, l.induction, l.step = k + 1, True, "ptx", reg, end[1]
        return
    k = self._simulate(l, env, x, y, cmp, int(ty[1:]))
    if k is not None:
      l.trip, l.known, l.source, l.induction = k + 1, True, "ptx", reg

  def _simulate(self, l: PTXLoop, env: dict, x, y, cmp: str, bits: int, limit: int = 1 << 16) -> int | None:
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


def apply_hints(loops: list[PTXLoop], hints, warnings: list[str]) -> None:
  """Give loops the PTX left unknown a count from ``hints`` (see :func:`~minicomp.search.static.ptx.analyze_ptx`)."""
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
