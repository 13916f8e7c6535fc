"""Gensor: construct a schedule by a Markov walk over construction states (no measurement).

Gensor ("Gensor: A Graph-based Construction Tensor Compilation Method for Deep Learning", 2025) builds a tensor program the way an expert tiles one by hand: start
from the unscheduled loop nest, tile it for the outer memory level, cache to the next level, tile
again, and stop; each step picks among the possible actions at random, with probabilities from
the *benefit* each action promises. minicomp runs that walk on a sketch (``sketch.py``), whose
tile sizes are what the construction decides.

**States.** A state is a point of a sketch (every split variable's value, every choice made) plus
the memory level the walk is at (Gensor's ETIR: the tile of each level). A spatial axis of a
tiled stage is split ``S0 x S1 x S2 x S3 x S4`` (blocks, vthreads, threads, register tiles), a
reduction axis ``R0 x R1 x R2`` (steps through shared memory, the shared tile, the register
tile). The initial state has every size 1: one thread per output, the whole reduction serial.

**Actions**, moving a prime factor ``p`` of an axis between levels (an action and its inverse
keep each level's chain irreducible, as Gensor's tile / invTile):

========== ============================================ =========================================
level      tile                                         inverse tile
========== ============================================ =========================================
shared     S0 -> S2 (a larger block tile, more threads)  S2 -> S0
           R0 -> R1 (a larger reduction step in shared)  R1 -> R0
register   S0 -> S4 or S2 -> S4 (a larger thread tile)   S4 -> S0, S4 -> S2, S3 -> S4
           S4 -> S3 (part of it outside the innermost
           reduction loop)
           R1 -> R2                                      R2 -> R1
vthread    S4 -> S1 (the thread tile split in vthreads)   S1 -> S4
========== ============================================ =========================================

plus ``cache`` (go to the next level; after the last level: finish). At ``finish`` the
sketch's choices (threads of a row kernel, vector widths of the cooperative fetches) are set
one at a time to their best value, and every marked loop gets ``auto_unroll_max_step`` 512.

**Benefits and probabilities.** The benefit of an action is the speedup it promises under the
static model's analytic part (:class:`~minicomp.search.static.analytic.SketchModel`: data
movement per memory level, shared-memory bank conflicts, occupancy from registers and shared
memory, parallelism and waves, the latency a warp cannot hide): ``b = cost(state) /
cost(next state)``. An action that breaks a limit of the target (threads per block, shared
memory, registers, vthreads, the innermost tile) has benefit 0: Gensor's memory check. Actions
are drawn by roulette wheel with weights ``b ** (1 / T)`` and ``cache`` with weight ``c / T``:
simulated annealing, the temperature ``T`` halving every ``halving`` steps, so a walk first
explores, then climbs, and then moves on to the next level and ends.

**Walks.** ``walks`` walks per sketch run in lockstep (one model call scores the next states of
all of them); every state they visit is kept with its cost, and the best distinct states are
lowered and checked exactly (``annotate.make_candidate``), so a returned schedule is valid by
construction or was rejected before NVRTC. The walk is deterministic per seed.

**Seeded construction.** Tasks whose sketches have the same :func:`domain` (tile groups and choices: a
convolution with and without its residual add) take the same states: ``construct(..., seeded=states)`` ranks
another task's best states (:attr:`Construction.states`) by this task's own model instead of walking.

:func:`construct` is what ``compile(trials=0)`` calls per task (``compiler.construct_task``, seeded within a group of
like tasks); :class:`GensorStrategy` is the
iterative mode (``strategy="gensor"`` with ``trials > 0``): each round walks again from the best
measured states and proposes the best unmeasured states it finds.
"""
from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, field

import numpy as np

from minicomp.errors import MinicompError
from minicomp.search.annotate import Candidate, check_values, make_candidate, prime_factors
from minicomp.search.sketch import generate_sketches
from minicomp.search.sketch_types import Sketch, TileGroup
from minicomp.search.static.analytic import UNROLL_DEFAULT, SketchModel, sketch_model
from minicomp.search.strategies.base import Strategy, TuneTask
from minicomp.target import Target, as_target

LEVELS = ("shared", "register", "vthread")
WALKS = 16                  # walks per sketch
MAX_STEPS = 36              # steps per level at most
HALVING = 6                 # the temperature halves every this many steps
T0 = 1.0                    # initial temperature
CACHE_WEIGHT = 0.05         # weight of "cache" (go to the next level) at T = 1
KEEP = 4                    # valid candidates construct() returns per task
LOWER_TRIES = 16            # distinct best states lowered exactly, at most, to find them
SEEDS = 16                  # best states a construction hands on to a task of the same domain (``seeded``)
# what compile(trials=0) does with a construction (compiler._construct): from a fixed seed (a task's default depends
# on the task, the target and the like tasks compiled with it, not on the tuning seed, so the default records of a
# tuning log stay valid across tuning seeds), it builds the first candidate and keeps it unless a tensor-core or the
# rule-based schedule is estimated faster; with schedules="compare" it first takes the first COMPARE candidates the
# analytic model puts within TIE of its best -- the ones it cannot separate (research/compile_choice.py: on 118
# tasks no candidate further away was ever the full static model's choice) -- and ranks them by the full static
# model on their ranking copies (ranking_copy)
CONSTRUCT_SEED = 0
COMPARE = 3
TIE = 0.05
# The ranking copies' unroll cap. NVVM's time grows faster than the unrolled body (NVRTC 12.9, one fp32 FMA
# chain over shared memory: 0.11 s at 128 steps, 0.29 at 256, 0.87 at 512), and the construction unrolls 512
# steps (UNROLL_DEFAULT). On 88 tasks with 2-3 candidates (64x64 ResNet-18 and MobileNetV2, BERT-tiny; sm_86 and
# h100; research/compile_ranking.py, 2026-11-30) the copies at 128 steps ranked first the full programs' best on
# 80; what they kept instead cost at most 0.4% of a model's total estimate, where keeping the analytic model's
# first cost up to 3.0% (64 steps: 74 of 88; 256: 82, at twice NVVM's time); ResNet-18 at 224x224: 17 of 18 tasks
# on sm_86 (0.1%), 12 of 18 on h100 (0.8%)
RANK_UNROLL = 128


@dataclass(frozen=True)
class Move:
  """Move a factor ``p`` of tile group ``g`` from level ``src`` to level ``dst`` (0 = the outermost)."""
  g: int
  src: int
  dst: int
  p: int
  kind: str        # "tile" | "inv_tile" | "vthread"

  def __str__(self) -> str: return f"{self.kind}(group {self.g}: x{self.p} level {self.src} -> {self.dst})"


def _moves(group: TileGroup, level: str) -> list[tuple[int, int, str]]:
  """(src, dst, kind) of the moves of one tile group at ``level`` (positions in [outer] + vars)."""
  if group.kind == "spatial" and len(group.vars) == 4:     # S0 | S1 vthread, S2 threads, S3, S4
    return {"shared": [(0, 2, "tile"), (2, 0, "inv_tile")],
            "register": [(0, 4, "tile"), (2, 4, "tile"), (4, 3, "tile"), (4, 0, "inv_tile"), (4, 2, "inv_tile"),
                         (3, 4, "inv_tile")],
            "vthread": [(4, 1, "vthread"), (1, 4, "inv_tile")]}[level]
  if group.kind == "reduce" and len(group.vars) == 2:      # R0 | R1, R2
    return {"shared": [(0, 1, "tile"), (1, 0, "inv_tile")], "register": [(1, 2, "tile"), (2, 1, "inv_tile")],
            "vthread": []}[level]
  return []


@functools.lru_cache(maxsize=4096)
def _distinct_primes(n: int) -> tuple[int, ...]:
  return tuple(dict.fromkeys(prime_factors(n)))


class SketchWalker:
  """Gensor's walks over one sketch (see the module docstring)."""

  def __init__(self, sketch: Sketch, target: Target, model: SketchModel | None = None):
    self.sketch, self.target = sketch, target
    self.model = model or sketch_model(sketch, target)
    self.groups = list(sketch.tiles)
    self.costs: dict[tuple, float] = {}
    self.evaluations = 0

  # -- states
  def initial(self) -> dict[str, int]:
    """Every tile size 1, except that the innermost spatial axes of a tiled stage give their factors
    to the threads until a block has a warp (a block of fewer threads is not a valid state, so the
    walk starts from the smallest valid one)."""
    values = {v: 1 for g in self.groups for v in g.vars}
    for c in self.sketch.choices:
      values[c.var] = max((x for x in c.candidates if x <= 256), default=c.candidates[0])
    spatial = [gi for gi, g in enumerate(self.groups) if g.kind == "spatial" and len(g.vars) == 4]
    threads = 1
    for gi in reversed(spatial):
      for p in prime_factors(self.groups[gi].extent):
        if threads >= self.target.warp_size: break
        nxt = self.apply(values, Move(gi, 0, 2, p, "tile"))
        if nxt is not None: values, threads = nxt, threads * p
    return values

  def key(self, values: dict) -> tuple:
    return tuple(map(values.__getitem__, self.model.names))

  def cost(self, states: list[dict]) -> np.ndarray:
    """Analytic cost of each state (memoised by its values)."""
    keys = [self.key(s) for s in states]
    todo = {}
    for k, s in zip(keys, states):
      if k not in self.costs: todo[k] = s
    if todo:
      self.evaluations += len(todo)
      for (k, s), c in zip(todo.items(), self.model(list(todo.values()))):
        ok = math.isfinite(c) and check_values(self.sketch, s, self.target) is None
        self.costs[k] = float(c) if ok else math.inf
    return np.array([self.costs[k] for k in keys])

  def _lengths(self, g: TileGroup, values: dict) -> list[int]:
    inner = [values[v] for v in g.vars]
    return [g.extent // max(1, math.prod(inner))] + inner

  def apply(self, values: dict, m: Move) -> dict | None:
    """The state after ``m``, or None when the move does not fit (limits checked by the model)."""
    g = self.groups[m.g]
    lengths = self._lengths(g, values)
    if lengths[m.src] % m.p: return None
    lengths[m.src] //= m.p
    lengths[m.dst] *= m.p
    if lengths[-1] > g.inner_limit: return None
    out = dict(values)
    out.update(zip(g.vars, lengths[1:]))
    return out

  def moves(self, values: dict, level: str) -> list[Move]:
    out = []
    for gi, g in enumerate(self.groups):
      if g.extent <= 1: continue
      lengths = self._lengths(g, values)
      for src, dst, kind in _moves(g, level):
        for p in _distinct_primes(lengths[src]): out.append(Move(gi, src, dst, p, kind))
    return out

  def finish(self, states: list[dict]) -> list[dict]:
    """Each state with its choices set to their best values under the model, one choice at a time (the
    states are independent; their options are costed together, one model call per choice)."""
    states = [dict(v) for v in states]
    for c in self.sketch.choices:
      opts = [[{**v, c.var: x} for x in c.candidates] for v in states]
      costs = self.cost([o for os in opts for o in os]).reshape(len(states), len(c.candidates))
      states = [os[int(np.argmin(cs))] for os, cs in zip(opts, costs)]
    return states

  # -- the walk
  def walk(self, rng: np.random.Generator, starts: list[dict] | None = None, walks: int = WALKS,
           max_steps: int = MAX_STEPS, halving: int = HALVING, trace: list | None = None) -> list[tuple[float, dict]]:
    """Run ``walks`` walks in lockstep (from ``starts``, cycled, or the initial state); return every
    finished state with its cost, best first. ``trace`` (a list) receives (walk, level, move, cost)."""
    starts = starts or [self.initial()]
    states = [dict(starts[w % len(starts)]) for w in range(walks)]
    self.cost(states)
    done: dict[tuple, tuple[float, dict]] = {}

    def keep(v: dict) -> None:
      k = self.key(v)
      c = self.costs.get(k, math.inf)
      if math.isfinite(c) and k not in done:
        done[k] = (c, v)
    for s in self.finish(states): keep(s)
    for level in LEVELS:
      active = list(range(walks))
      for step in range(max_steps):
        if not active: break
        T = T0 * 0.5 ** (step / halving)
        options: list[list[tuple[Move, dict]]] = []
        for w in active:
          nxt = [(m, self.apply(states[w], m)) for m in self.moves(states[w], level)]
          options.append([(m, v) for m, v in nxt if v is not None])
        flat = [v for opts in options for _, v in opts]
        flat_costs, at = self.cost(flat), 0
        still = []
        for w, opts in zip(active, options):
          here = self.costs[self.key(states[w])]
          costs, at = flat_costs[at:at + len(opts)], at + len(opts)
          with np.errstate(divide="ignore", invalid="ignore"):
            benefit = np.where(np.isfinite(costs), here / costs, 0.0) if math.isfinite(here) else \
              np.where(np.isfinite(costs), 1.0, 0.0)
          weights = np.append(np.where(benefit > 0, benefit ** (1.0 / T), 0.0), CACHE_WEIGHT / T)
          weights = np.nan_to_num(weights, nan=0.0, posinf=1e300)
          total = weights.sum()
          k = int(rng.choice(len(weights), p=weights / total)) if np.isfinite(total) and total > 0 else len(opts)
          if k == len(opts):                                  # cache: on to the next level
            if trace is not None: trace.append((w, level, "cache", here))
            continue
          m, v = opts[k]
          states[w] = v
          if trace is not None: trace.append((w, level, str(m), float(costs[k])))
          keep(v)
          still.append(w)
        active = still
    for s in self.finish(states): keep(s)
    best = sorted(done.values(), key=lambda cv: cv[0])
    return self.ranked([v for _, v in best[:4 * walks]])     # (the best states' choices finished again)

  def ranked(self, states: list[dict]) -> list[tuple[float, dict]]:
    """``states`` with their choices finished (:meth:`finish`), each distinct valid one with its cost, best first."""
    finished = self.finish(states)
    out, seen = [], set()
    for f, c in zip(finished, self.cost(finished)):
      k = self.key(f)
      if k in seen or not math.isfinite(c): continue
      seen.add(k)
      out.append((float(c), f))
    return sorted(out, key=lambda cv: cv[0])


def unroll_of(sketch: Sketch) -> dict:
  return {at: UNROLL_DEFAULT for at in sketch.unroll}


@dataclass
class Construction:
  """What :func:`construct` found for one task: valid candidates, best (by the analytic model) first."""
  candidates: list[Candidate]
  costs: list[float]               # analytic estimates (seconds) of the candidates
  seconds: float
  evaluations: int
  reasons: list[str]
  states: list[tuple[int, dict]] = field(default_factory=list)   # the best (sketch index, values), for ``seeded``


def domain(sketches: list[Sketch]) -> tuple:
  """What a walk over ``sketches`` chooses among: per sketch, its tile groups (kind, extent, variables, innermost
  limit) and its choices. Two tasks of one domain (a convolution with and without its residual add, say) take
  each other's states as they are (:func:`construct`'s ``seeded``)."""
  return tuple((tuple((g.kind, g.extent, g.vars, g.inner_limit) for g in sk.tiles),
                tuple((c.var, c.candidates) for c in sk.choices)) for sk in sketches)


def construct(dag, target: Target | str = "sm_86", seed: int = 0, walks: int = WALKS, keep: int = KEEP,
              sketches: list[Sketch] | None = None, starts: dict[int, list[dict]] | None = None,
              exclude: set[str] | None = None, seeded: list[tuple[int, dict]] | None = None) -> Construction:
  """Gensor's construction for one task (a ComputeDAG, Task or output tensors): up to ``keep`` valid
  candidates, best first by the analytic model. ``starts`` (sketch index -> states) begins the
  walks there instead of the initial state; ``exclude`` skips programs already measured. ``seeded``
  ((sketch index, values), another task's :attr:`Construction.states` over the same :func:`domain`): no walk;
  those states are ranked by this task's own analytic model instead."""
  t0 = time.perf_counter()
  tgt = as_target(target)
  sks = sketches if sketches is not None else generate_sketches(getattr(dag, "dag", dag), tgt)
  rng = np.random.default_rng(seed)
  found: list[tuple[float, int, dict]] = []
  reasons: list[str] = []
  evaluations = 0
  for k, sk in enumerate(sks):
    mine = None if seeded is None else [dict(v) for i, v in seeded if i == k]
    if mine == []: continue
    try:
      walker = SketchWalker(sk, tgt)
      res = walker.ranked(mine) if mine is not None else walker.walk(rng, (starts or {}).get(k), walks=max(2, walks))
    except (MinicompError, ArithmeticError) as e:   # a sketch whose symbolic program cannot be modelled (or walked) is skipped
      reasons.append(f"sketch {k}: no analytic model ({type(e).__name__}: {str(e)[:120]})")
      continue
    evaluations += walker.evaluations
    found += [(c, k, v) for c, v in res]
  found.sort(key=lambda t: t[0])
  states = [(k, v) for _, k, v in found[:SEEDS]]
  # distinct tilings first: states that differ only in a choice (a vector width) tie in the
  # analytic model more often than in the full one, so they go after the other tilings
  tiles = lambda k, v: (k,) + tuple(v[x] for g in sks[k].tiles for x in g.vars)   # noqa: E731
  firsts, rest, seen_tiles = [], [], set()
  for f in found:
    t = tiles(f[1], f[2])
    (rest if t in seen_tiles else firsts).append(f)
    seen_tiles.add(t)
  found = firsts + rest
  out, costs, seen = [], [], set(exclude or ())
  if found:
    # a hedge on the vector widths: the analytic model counts a vector fetch whose lanes it cannot
    # prove contiguous as scalar, the emitter sometimes can; the best tiling with the widest
    # vectors goes second, for the full model to decide
    c, k, v = found[0]
    wide = {**v, **{ch.var: max(ch.candidates) for ch in sks[k].choices if ch.var.endswith("_vec")}}
    if wide != v: found.insert(1, (c, k, wide))
  for c, k, v in found[:LOWER_TRIES]:
    if len(out) >= keep: break
    cand, why = make_candidate(sks[k], v, unroll_of(sks[k]), tgt, k)
    if cand is None:
      reasons.append(f"sketch {k}: a constructed state was rejected ({why})")
      continue
    if cand.key in seen: continue
    seen.add(cand.key)
    out.append(cand); costs.append(c)
  return Construction(out, costs, time.perf_counter() - t0, evaluations, reasons, states)


def explain(dag, target: Target | str = "sm_86", seed: int = 0, sketch: int = 0) -> str:
  """One walk on one sketch of a task, step by step, as text (docs/search.md shows one):
  each accepted action with the analytic estimate after it, and the state it ends in."""
  tgt = as_target(target)
  sk = generate_sketches(getattr(dag, "dag", dag), tgt)[sketch]
  walker = SketchWalker(sk, tgt)
  trace: list = []
  out = walker.walk(np.random.default_rng(seed), walks=1, trace=trace)
  start = walker.initial()
  lines = [f"sketch {sketch}: {', '.join(sk.rules)}",
           "tile groups: " + "; ".join(f"[{i}] {g.stage}.{g.iter} {g.kind} {g.extent} = "
                                      + " x ".join(["outer"] + list(g.vars)) for i, g in enumerate(walker.groups)),
           f"start: {_sizes(walker, start)}  ~{walker.costs[walker.key(start)] * 1e6:.2f} us (analytic estimate)"]
  for _, level, move, cost in trace:
    lines.append(f"  {level:8s} {move:45s} ~{cost * 1e6:.2f} us")
  if out:
    lines.append(f"best state: {_sizes(walker, out[0][1])}  ~{out[0][0] * 1e6:.2f} us")
  return "\n".join(lines)


def _sizes(walker: SketchWalker, values: dict) -> str:
  parts = [f"[{i}] " + "x".join(str(x) for x in walker._lengths(g, values)) for i, g in enumerate(walker.groups)]
  parts += [f"{c.var}={values[c.var]}" for c in walker.sketch.choices]
  return " ".join(parts)


def compared(res: Construction, n: int = COMPARE) -> list[Candidate]:
  """The candidates of ``res`` that ``compile`` compares with the full static model (above): the first ``n``
  within TIE of the best."""
  return [c for c, cost in zip(res.candidates[:n], res.costs) if cost <= res.costs[0] * (1 + TIE)]


def ranking_copy(c: Candidate, sketches: list[Sketch], target: Target, cap: int = RANK_UNROLL) -> Candidate | None:
  """``c`` with every ``auto_unroll_max_step`` capped at ``cap`` (``c`` itself where none is above it;
  ``sketches``: the list ``c.sketch_index`` points into): the same tiles, threads and vectors, and a program
  NVRTC builds in a fraction of the time. None where the copy is not valid."""
  if all(v <= cap for v in c.unroll.values()): return c
  copy, _ = make_candidate(sketches[c.sketch_index], c.values, {k: min(v, cap) for k, v in c.unroll.items()},
                           target, c.sketch_index)
  return copy


class GensorStrategy(Strategy):
  """Gensor's iterative mode: every round walks again from the best measured states of the task
  (the initial state in the first round) and proposes the best unmeasured states it finds."""
  name = "gensor"

  def __init__(self, seed: int = 0, walks: int = WALKS, restarts: int = 4):
    # ``seed`` is accepted like every strategy's; the task scheduler's rng seeds each round's walks
    self.walks, self.restarts = walks, restarts
    self.points: dict[str, tuple[int, dict]] = {}     # candidate key -> (sketch index, values)

  def propose(self, task: TuneTask, n: int, rng: np.random.Generator) -> list[Candidate]:
    ranked = sorted((c, k) for k, c in task.measured.items() if c is not None and k in self.points)
    starts: dict[int, list[dict]] = {}
    for _, key in ranked[:self.restarts]:
      k, v = self.points[key]
      starts.setdefault(k, []).append(v)
    seed = int(rng.integers(1 << 31))
    res = construct(task.dag, task.target, seed=seed, walks=self.walks, keep=n, sketches=task.sketches,
                    starts=starts or None, exclude=set(task.measured))
    for c in res.candidates: self.points[c.key] = (c.sketch_index, dict(c.values))
    return res.candidates

  def update(self, task: TuneTask, candidates: list[Candidate], costs: list[float | None]) -> None:
    """Measured programs of the task's sketches that this strategy did not propose (the task's seeds) become
    states its walks can restart from."""
    for c in candidates:
      if c.key not in self.points and 0 <= c.sketch_index < len(task.sketches) and c.values:
        self.points[c.key] = (c.sketch_index, dict(c.values))


__all__ = ["CONSTRUCT_SEED", "Construction", "GensorStrategy", "SketchWalker", "compared", "construct", "domain",
           "explain"]
