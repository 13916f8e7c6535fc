"""The data of sketch generation: a sketch, its variables' domains, and the rule interface.

A :class:`Sketch` is a symbolic :class:`~minicomp.ir.schedule.Schedule` (every tunable size an
expression variable in its split steps) plus the domains of those variables: a :class:`TileGroup`
per split loop, a :class:`Choice` per thread count or vector width. While the rules build one, they
record it in a :class:`SketchInfo`. A :class:`SketchRule` is a derivation rule of the engine
(``sketch.py``): ``condition`` answers a :class:`Decision`, ``apply`` returns successor states.
"""
from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field

from minicomp.ir.dag import ComputeDAG
from minicomp.ir.expr import Expr, var
from minicomp.ir.schedule import Schedule
from minicomp.target import Target


class Decision(enum.Enum):
  SKIP = 0
  APPLY = 1
  APPLY_AND_SKIP_REST = 2


@dataclass(frozen=True)
class TileGroup:
  """Split variables of one loop: their product must divide ``extent``; ``vars`` outer to inner
  (the outermost level takes ``extent / product``). ``inner_limit`` bounds the innermost var. ``extent`` is the
  loop's :func:`tile_extent`: the loop's own, or a padded one its tiles overhang."""
  stage: str
  iter: str
  extent: int
  vars: tuple[str, ...]
  kind: str                        # "spatial" | "reduce"
  inner_limit: int = 64


def tile_extent(n: int) -> int:
  """The extent the searches tile a loop of ``n`` iterations as: ``n``, unless it is over 64 and has no divisor from
  8 to 64 (a prime such as a ViT's 197 tokens, whose only tiles would be 1 and 197: the float32 ViT-B layer on the
  H100 by Gensor's construction, 766.1 us* against 380.3 for 196 tokens); then the first multiple of 32, 16 or 8 at
  most a sixth above it (197 -> 224 = 32 x 7: that layer 410.8 us*; 208 = 16 x 13, an eighth, gave 502.4). The
  tiles then overhang the loop, which lowering guards (a split that does not divide)."""
  if n <= 64 or any(n % d == 0 for d in range(8, 65)): return n
  for m in (32, 16, 8):
    if -(-n // m) * m <= n * 7 / 6: return -(-n // m) * m
  return n


@dataclass(frozen=True)
class Choice:
  """A variable drawn from a list of candidates (thread counts, vector widths)."""
  var: str
  candidates: tuple[int, ...]
  what: str


@dataclass
class SketchInfo:
  """What the rules record while building one sketch (copied when a state branches)."""
  tiles: list[TileGroup] = field(default_factory=list)
  choices: list[Choice] = field(default_factory=list)
  threads: dict[str, list[str]] = field(default_factory=dict)    # root stage -> vars whose product is blockDim.x
  vthreads: dict[str, list[str]] = field(default_factory=dict)   # root stage -> vars of its vthread loop
  unroll: list[tuple[str, str]] = field(default_factory=list)    # (stage, loop) for auto_unroll_max_step
  rows: dict[str, tuple[str, str]] = field(default_factory=dict)  # output -> (block loop, thread var) of a row kernel
  applied: list[str] = field(default_factory=list)
  names: set[str] = field(default_factory=set)

  def copy(self) -> SketchInfo:
    return SketchInfo(list(self.tiles), list(self.choices), {k: list(v) for k, v in self.threads.items()},
                      {k: list(v) for k, v in self.vthreads.items()}, list(self.unroll), dict(self.rows),
                      list(self.applied), set(self.names))

  def new_var(self, base: str) -> Expr:
    base = re.sub(r"\W", "_", base)
    name, k = base, 1
    while name in self.names: k += 1; name = f"{base}_{k}"
    self.names.add(name)
    return var(name)


@dataclass
class Sketch:
  """A symbolic schedule plus the domains of its variables."""
  schedule: Schedule
  tiles: tuple[TileGroup, ...]
  choices: tuple[Choice, ...]
  threads: dict[str, tuple[str, ...]]
  vthreads: dict[str, tuple[str, ...]]
  unroll: tuple[tuple[str, str], ...]
  rules: tuple[str, ...]

  @property
  def params(self) -> list[str]:
    return [v for g in self.tiles for v in g.vars] + [c.var for c in self.choices]

  def __str__(self) -> str:
    import json

    from minicomp.ir.steps import steps_to_json
    lines = ["rules: " + ", ".join(self.rules)]
    for g in self.tiles:
      lines.append(f"  tile {g.stage}.{g.iter} (extent {g.extent}, {g.kind}): {' x '.join(g.vars)}")
    for c in self.choices:
      lines.append(f"  choose {c.var} in {list(c.candidates)} ({c.what})")
    lines.append("steps:")
    for st in json.loads(steps_to_json(self.schedule.steps)):
      kind = st.pop("step")
      args = ", ".join(f"{k}={v['var'] if isinstance(v, dict) else v}" if not isinstance(v, list) else
                       f"{k}=[{', '.join(x['var'] if isinstance(x, dict) else str(x) for x in v)}]" for k, v in st.items())
      lines.append(f"  {kind}({args})")
    return "\n".join(lines)


@dataclass
class Context:
  dag: ComputeDAG
  target: Target


Apply = list[tuple[Schedule, int, SketchInfo]]


class SketchRule:
  """A derivation rule: ``condition`` decides, ``apply`` returns successor states."""
  name = "rule"

  def condition(self, ctx: Context, s: Schedule, i: int, info: SketchInfo) -> Decision: raise NotImplementedError
  def apply(self, ctx: Context, s: Schedule, i: int, info: SketchInfo) -> Apply: raise NotImplementedError
