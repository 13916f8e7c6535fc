"""Sketch generation: Ansor's derivation rules, producing *symbolic* schedules.

A sketch is the high-level structure of a schedule (which stages are tiled, fused, cached,
reduced across threads, and where each is computed) with every tunable size left open.
minicomp writes those sizes as expression variables in the split steps, so a sketch is a
symbolic :class:`~minicomp.ir.schedule.Schedule`: annotation (``annotate.py``) substitutes
sampled values, and the Felix strategy lowers the same sketch to a symbolic program.

The engine follows Ansor (TVM's ``sketch_policy.cc`` and ``sketch_policy_rules.cc``): states ``(schedule, stage index)`` start at
the last stage; for each state the rules are tried in order, and each answers SKIP, APPLY
(its results are added and the next rules still see the unchanged state) or
APPLY_AND_SKIP_REST; a rule returns successor states with the index to visit next. A state
whose index drops below 0 is a finished sketch. The GPU rules, in Ansor's order after one of minicomp's own:

  tensor_core_tiling -> add_cache_read -> always_inline -> cross_thread_reduction -> add_cache_write
  -> multi_level_tiling_with_fusion -> multi_level_tiling -> skip_stage

The rules themselves are in ``sketch_rules.py``, the data types in ``sketch_types.py``. After the
rules, every root stage nothing scheduled is fused, split by a sampled thread count and bound.

Extra rules: :func:`register_rule` (or ``rules=`` of :func:`generate_sketches`).
"""
from __future__ import annotations

import math
import time

from minicomp.errors import SketchError
from minicomp.ir.dag import ComputeDAG
from minicomp.ir.schedule import Schedule
from minicomp.ir.state import ROOT
from minicomp.search.sketch_rules import DEFAULT_RULES, fusible_consumer, int_dims, is_bound, thread_choice
from minicomp.search.sketch_types import Context, Decision, Sketch, SketchInfo, SketchRule
from minicomp.target import Target, as_target

MAX_SKETCHES = 64                  # a guard against a rule set that loops
SKETCH_TIME_S = 30.0               # ... or one that is slow: generation raises after this many seconds


def register_rule(rule: SketchRule, before: str | None = "skip_stage") -> None:
  """Add a rule to the default GPU rule list, before the rule named ``before`` (None: at the end)."""
  names = [r.name for r in DEFAULT_RULES]
  DEFAULT_RULES.insert(names.index(before) if before in names else len(DEFAULT_RULES), rule)


# ---------------------------------------------------------------------------------------------
# the post-pass: bind root stages nothing scheduled

def _free(st) -> bool:
  return not st.is_placeholder and st.attach == ROOT and not is_bound(st) and not st.relations


def _outputs_in_readers(s: Schedule) -> dict[str, str]:
  """Output stages nothing scheduled whose one reader, a root stage of their shape nothing scheduled either, reads
  them elementwise (:func:`fusible_consumer`): each is computed in that reader's thread loop (an LSTM cell's ``c``
  in its ``h``: one kernel for both outputs, not two)."""
  out = {}
  for st in s.state.stages:
    if not _free(st) or st.name not in s.state.outputs or st.tensor.reduce_axes: continue
    c = fusible_consumer(s, st.name)
    if c is not None and _free(s.state.stage(c)) and not s.state.stage(c).tensor.reduce_axes and s.axis(c):
      out[st.name] = c
  return {o: c for o, c in out.items() if c not in out}


def _bind_rest(s: Schedule, info: SketchInfo) -> None:
  into = _outputs_in_readers(s)
  thread_loop = {}
  for st in list(s.state.stages):
    if not _free(st) or st.name in into: continue
    name = st.name
    sp = s.axis(name)
    ext = math.prod(int_dims(st.tensor.shape))
    if sp:
      f = s.fuse(name, *sp) if len(sp) > 1 else sp[0]
      t = thread_choice(info, name, ext, f"threads of {name}")
      bo, ti = s.split(name, f, [t])
      s.bind(name, bo, "blockIdx.x"); s.bind(name, ti, "threadIdx.x")
      info.threads[name] = [t.arg]
      thread_loop[name] = ti
    rl = [l for l in s.loops(name) if s.state.stage(name).kind(l) == "reduce"]
    if rl: info.unroll.append((name, rl[0]))
    info.applied.append(f"thread_bind({name})")
  for o, c in into.items():
    s.compute_at(o, c, thread_loop[c])
    info.applied.append(f"compute_at({o} in {c})")


def generate_sketches(dag, target: Target | str = "sm_86", rules: list[SketchRule] | None = None) -> list[Sketch]:
  """All sketches of ``dag`` (a ComputeDAG, a Task or a list of output tensors) for ``target``."""
  dag = getattr(dag, "dag", dag)
  dag = dag if isinstance(dag, ComputeDAG) else ComputeDAG(dag)
  ctx = Context(dag, as_target(target))
  rules = DEFAULT_RULES if rules is None else rules
  todo: list[tuple[Schedule, int, SketchInfo]] = [(Schedule(dag), len(dag.tensors) - 1, SketchInfo())]
  done: list[tuple[Schedule, SketchInfo]] = []
  steps, t0 = 0, time.perf_counter()
  while todo:
    s, i, info = todo.pop(0)
    if i < 0:
      done.append((s, info)); continue
    steps += 1
    if steps > 10000 or len(done) > MAX_SKETCHES or time.perf_counter() - t0 > SKETCH_TIME_S:
      raise SketchError(f"sketch generation did not finish ({len(done)} sketches, {steps} rule steps, "
                        f"{time.perf_counter() - t0:.1f} s): a rule loops")
    for rule in rules:
      d = rule.condition(ctx, s, i, info)
      if d is Decision.SKIP: continue
      todo.extend(rule.apply(ctx, s, i, info))
      if d is Decision.APPLY_AND_SKIP_REST: break
  out, seen = [], set()
  for s, info in done:
    _bind_rest(s, info)
    key = s.to_json()
    if key in seen: continue
    seen.add(key)
    out.append(Sketch(s, tuple(info.tiles), tuple(info.choices), {k: tuple(v) for k, v in info.threads.items()},
                      {k: tuple(v) for k, v in info.vthreads.items()}, tuple(info.unroll), tuple(info.applied)))
  if not out: raise SketchError("no sketch: every rule skipped every stage")
  return out


def sketches(task, target: Target | str = "sm_86") -> str:
  """The sketches of a task as readable text (``print(minicomp.search.sketches(task))``)."""
  sk = generate_sketches(task, target)
  return "\n\n".join(f"sketch {k}:\n{s}" for k, s in enumerate(sk))
