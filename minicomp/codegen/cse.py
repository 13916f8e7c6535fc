"""Which subexpressions of a statement the emitter computes once, into a named local.

Expressions are hash-consed DAGs, but C prints trees: a node that two parents read is printed twice. A
fused chain of nodes that each read their input twice (``Relu`` is ``select(v < 0, 0, v)``; a written-out
GELU reads ``x`` five times) doubles its text per node: 16 Relus made 34 KB of CUDA, 40 did not finish in
NVRTC. The emitter instead declares ``const T mc_eK = ...;`` before the statement for each node returned
here and prints its name wherever the node recurs, so the text grows with the number of distinct nodes.

A node is named when it is read at least twice and printing it where it occurs would repeat at least
:data:`MIN_REPEAT` nodes of text (its text, counting named children as one, times its reads after the
first; so the short index expressions a guard and a load share stay inline), and computing it before the
statement is safe: the statement computes it anyway
(it is not only inside a ``select`` branch or the right operand of ``&&`` / ``||``), or it cannot fault
(no load, which a guard may keep in bounds, and no integer division).
"""
from __future__ import annotations

from typing import Sequence

from minicomp.ir.expr import Expr
from minicomp.ir.rewrite import children_first
from minicomp.ir.ops import Op

MIN_REPEAT = 32                    # nodes of text a repetition must save: smaller ones are printed where they occur
_LEAVES = (Op.CONST, Op.VAR)
_FAULTS = (Op.LOAD, Op.FLOORDIV, Op.FLOORMOD)   # (true division is float only: it never traps)


def _always_computed(order: list[Expr], roots: Sequence[Expr]) -> set[Expr]:
  """The nodes every evaluation of the roots computes (C evaluates one ``?:`` branch, and the right
  operand of ``&&`` / ``||`` only when the left does not decide)."""
  always = set(roots)
  for n in reversed(order):            # parents before children
    if n not in always: continue
    if n.op is Op.SELECT: always.add(n.src[0])
    elif n.op in (Op.AND, Op.OR): always.add(n.src[0])
    else: always.update(n.src)
  return always


def shared_subexpressions(roots: Sequence[Expr], min_repeat: int | None = None) -> list[Expr]:
  """The nodes under ``roots`` to name once, children before parents (see the module; ``min_repeat``:
  :data:`MIN_REPEAT` by default)."""
  min_repeat = MIN_REPEAT if min_repeat is None else min_repeat
  order = children_first(roots)
  uses: dict[Expr, int] = {r: 1 for r in roots}
  for n in order:
    for s in n.src: uses[s] = uses.get(s, 0) + 1
  always = _always_computed(order, roots)
  faults: dict[Expr, bool] = {}
  size: dict[Expr, int] = {}
  named: list[Expr] = []
  for n in order:
    faults[n] = n.op in _FAULTS or any(faults[s] for s in n.src)
    size[n] = 1 + sum(size[s] or 1 for s in n.src)
    if (uses.get(n, 0) >= 2 and size[n] * (uses[n] - 1) >= min_repeat and n.op not in _LEAVES and n.op is not Op.REDUCE
        and (n in always or not faults[n])):
      named.append(n)
      size[n] = 0                      # its parents print its name
  return named
