"""Random annotation: turn a sketch into concrete, valid schedules (Ansor's init population).

For every tile group of a :class:`~minicomp.search.sketch.Sketch` the sizes are drawn uniformly
from all ordered factorizations of the loop extent whose innermost factor is at most 64
(InitFillTileSize); thread counts and vector widths from their candidate lists; every stage
the sketch marks gets ``auto_unroll_max_step`` from Ansor's GPU list {0, 16, 64, 512, 1024}
(InitUnroll). A draw is kept only when it is valid for the target, checked in two steps:

1. cheap checks on the values: threads per block <= the target's limit and >= the warp size
   (unless the stage has at most two warps of work, Ansor's exception), vthreads <= 8;
2. the schedule is lowered and checked against the target's resource limits (shared memory,
   threads; ``codegen.verify``), without compiling, and its thread-local buffers against the
   registers a thread can have (more only spill, and take NVVM long to compile).

So nothing invalid is ever measured (Ansor's users lost whole runs to invalid GPU samples,
apache/tvm#6713). A sketch that yields no valid draw in ``max_tries`` raises
:class:`AnnotationError` instead of looping forever (as MetaSchedule once did, apache/tvm#12330).

Every loop here is bounded by time as well as by tries (``SAMPLE_TIME_S`` per ``sample``,
``POPULATION_TIME_S`` per ``sample_population``): a draw that passes the value checks is lowered
(20-200 ms), so a sketch whose draws all fail after lowering would otherwise cost ``max_tries``
lowerings per ``sample`` and ``4n`` times that per ``sample_population``. On time out ``sample``
raises :class:`AnnotationError` and ``sample_population`` returns what it found (possibly
nothing: the task scheduler then retires the task).
"""
from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, field

import numpy as np

from minicomp.errors import AnnotationError, LoweringError, ScheduleError
from minicomp.ir.schedule import Schedule
from minicomp.search.sketch_types import Sketch
from minicomp.target import Target, as_target

UNROLL_CHOICES = (0, 16, 64, 512, 1024)      # Ansor's GPU auto_unroll_max_step candidates
MAX_TRIES = 200
SAMPLE_TIME_S = 10.0        # wall-clock bound of one sample call (module docstring)
POPULATION_TIME_S = 60.0    # ... of one sample_population call, and of lowering a round's chosen programs


@dataclass(frozen=True, eq=False)
class Candidate:
  """A concrete schedule drawn from a sketch: the values chosen for its variables, the
  ``auto_unroll_max_step`` per marked loop, and the lowered program (kept for features)."""
  schedule: Schedule
  values: dict
  sketch_index: int
  unroll: dict = field(default_factory=dict)
  program: object = field(default=None, repr=False)

  @property
  def key(self) -> str:
    """Identity of the program (steps as JSON): the search never measures the same key twice."""
    return self.schedule.to_json()


def divisors(n: int) -> list[int]:
  small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
  return sorted(set(small + [n // d for d in small]))


def prime_factors(n: int) -> list[int]:
  """The prime factors of ``n`` with multiplicity, smallest first (12 -> [2, 2, 3])."""
  out, d = [], 2
  while d * d <= n:
    while n % d == 0: out.append(d); n //= d
    d += 1
  return out + ([n] if n > 1 else [])


@functools.lru_cache(maxsize=4096)
def factorizations(extent: int, parts: int, inner_limit: int = 64) -> tuple[tuple[int, ...], ...]:
  """Ordered ``parts``-tuples of inner tile sizes whose product divides ``extent`` and whose last
  entry is at most ``inner_limit`` (the outermost level takes ``extent / product``)."""
  def rec(rest: int, k: int) -> list[tuple[int, ...]]:
    if k == 0: return [()]
    out = []
    for d in divisors(rest):
      if k == 1 and d > inner_limit: continue
      out.extend((d,) + tail for tail in rec(rest // d, k - 1))
    return out
  return tuple(rec(extent, parts))


def draw_values(sketch: Sketch, rng: np.random.Generator) -> dict[str, int]:
  """One uniform draw of every variable of the sketch (no validity check)."""
  values: dict[str, int] = {}
  for g in sketch.tiles:
    opts = factorizations(g.extent, len(g.vars), g.inner_limit)
    values.update(zip(g.vars, opts[int(rng.integers(len(opts)))]))
  for c in sketch.choices:
    values[c.var] = int(c.candidates[int(rng.integers(len(c.candidates)))])
  return values


def check_values(sketch: Sketch, values: dict[str, int], target: Target) -> str | None:
  """The reason ``values`` are invalid for ``target`` before lowering, or None."""
  for root, vs in sketch.threads.items():
    n = math.prod(values[v] for v in vs)
    if n > target.max_threads_per_block: return f"{root}: {n} threads per block > {target.max_threads_per_block}"
    work = math.prod(int(getattr(d, "arg", d)) for d in sketch.schedule.state.stage(root).tensor.shape)
    if n < target.warp_size and work > 2 * target.warp_size: return f"{root}: {n} threads per block < a warp"
  for root, vs in sketch.vthreads.items():
    n = math.prod(values[v] for v in vs)
    if n > target.max_vthread_extent: return f"{root}: vthread {n} > {target.max_vthread_extent}"
  return None


def concretize(sketch: Sketch, values: dict[str, int], unroll: dict | None = None) -> Schedule:
  """The sketch with ``values`` substituted and ``auto_unroll_max_step`` pragmas added."""
  s = sketch.schedule.substitute(values)
  for (stage, loop) in sketch.unroll:
    v = (unroll or {}).get((stage, loop), 0)
    if v: s.pragma(stage, loop, "auto_unroll_max_step", int(v))
  return s


def validate(schedule: Schedule, target: Target, shared_limit: int | None = None):
  """Lower and check resources (no NVRTC; shared memory within ``shared_limit`` where given, else the target's
  limit): (the lowered program, None) or (None, the reason it is invalid)."""
  from minicomp.codegen.verify import check_resources
  from minicomp.ir.lower import lower
  try:
    prog = lower(schedule.state)
    check_resources(schedule.state, prog, target, shared_limit)
  except (ScheduleError, LoweringError) as e:
    return None, str(e)
  return prog, None


def local_words(buffers):
  """The 32-bit registers a thread's local (register) buffers take: ``buffers`` as (elements, bytes per element)
  pairs, the elements ints, numpy arrays (a population at once) or Exprs (a sketch's formula); an element of up to
  4 bytes takes one. 0 for no buffers."""
  words = [n * -(-b // 4) for n, b in buffers]
  return sum(words[1:], words[0]) if words else 0


def _local_registers(prog, target: Target) -> str | None:
  """Why ``prog``'s thread-local buffers are more than the search offers, or None: at most the registers a thread
  can have (``Target.max_registers_per_thread``). Beyond them every further value spills to local memory, so such
  a program is slow on any GPU, and NVVM's time grows with the unrolled register tile (one of Felix's proposals, a
  2048-element accumulator, took NVRTC 26 s). A schedule written by hand is not held to this (``codegen.verify``)."""
  limit = target.max_registers_per_thread
  for k in prog.kernels:
    local = [b for b in k.allocs if b.scope == "local"]
    words = local_words((int(b.size.arg), b.element_bytes) for b in local)
    if words > limit:
      return (f"kernel {k.name}: its thread-local buffers take {words} registers per thread; the search offers at "
              f"most {limit} ({', '.join(f'{b.name}[{int(b.size.arg)}]' for b in local)})")
  return None


def make_candidate(sketch: Sketch, values: dict[str, int], unroll: dict, target: Target,
                   sketch_index: int = 0) -> tuple[Candidate | None, str | None]:
  """The candidate for these values if it is valid, else (None, why): the value checks, then lowered and checked
  against the target's resources, the search's shared memory and the search's registers (:func:`_local_registers`)."""
  why = check_values(sketch, values, target)
  if why is not None: return None, why
  s = concretize(sketch, values, unroll)
  prog, why = validate(s, target, target.search_shared_bytes)   # (no tile the search does not offer)
  if why is None: why = _local_registers(prog, target)
  if why is not None: return None, why
  return Candidate(s, dict(values), sketch_index, dict(unroll), prog), None


def draw_unroll(sketch: Sketch, rng: np.random.Generator) -> dict:
  return {at: int(UNROLL_CHOICES[int(rng.integers(len(UNROLL_CHOICES)))]) for at in sketch.unroll}


def sample(sketch: Sketch, rng: np.random.Generator, target: Target | str = "sm_86", sketch_index: int = 0,
           max_tries: int = MAX_TRIES, time_limit_s: float | None = SAMPLE_TIME_S) -> Candidate:
  """One valid concrete schedule from ``sketch``; AnnotationError after ``max_tries`` invalid draws
  or ``time_limit_s`` seconds (None: no time bound), whichever comes first."""
  tgt = as_target(target)
  t0 = time.perf_counter()
  reasons: dict[str, int] = {}
  tries = 0
  while tries < max_tries:
    tries += 1
    cand, why = make_candidate(sketch, draw_values(sketch, rng), draw_unroll(sketch, rng), tgt, sketch_index)
    if cand is not None: return cand
    key = why.split(":")[0][:80]
    reasons[key] = reasons.get(key, 0) + 1
    if time_limit_s is not None and time.perf_counter() - t0 > time_limit_s: break
  top = ", ".join(f"{k} ({n}x)" for k, n in sorted(reasons.items(), key=lambda kv: -kv[1])[:3])
  raise AnnotationError(f"no valid schedule in {tries} draws ({time.perf_counter() - t0:.1f} s) from sketch "
                        f"{sketch_index} ({', '.join(sketch.rules)}); most common reasons: {top}")


def sample_population(sketches: list[Sketch], n: int, rng: np.random.Generator, target: Target | str = "sm_86",
                      exclude: set[str] | None = None, max_tries: int | None = None,
                      time_limit_s: float | None = POPULATION_TIME_S) -> list[Candidate]:
  """Up to ``n`` distinct valid candidates, each from a sketch drawn uniformly; programs whose key
  is in ``exclude`` (already measured) are skipped. Stops after ``max_tries`` calls of ``sample``
  (default 4n) or ``time_limit_s`` seconds (None: no time bound), returning what it found."""
  out, seen = [], set(exclude or ())
  tries = max_tries if max_tries is not None else 4 * n
  t0 = time.perf_counter()
  for _ in range(tries):
    if len(out) >= n: break
    left = None if time_limit_s is None else min(SAMPLE_TIME_S, time_limit_s - (time.perf_counter() - t0))
    if left is not None and left <= 0: break
    k = int(rng.integers(len(sketches)))
    try: c = sample(sketches[k], rng, target, k, time_limit_s=left)
    except AnnotationError: continue
    if c.key in seen: continue
    seen.add(c.key)
    out.append(c)
  return out
