"""Gensor's construction (search/strategies/gensor.py) and the analytic model it walks with
(search/static/analytic.py): constructed kernels are right (simulator vs numpy / onnxruntime),
valid for every target, deterministic, and never estimated slower than the rule-based ones."""
import json
import logging

import numpy as np
import pytest

import minicomp as mc
from minicomp import workloads as W
from minicomp import zoo
from minicomp.codegen.kernel import build
from minicomp.errors import CompileError
from minicomp.graph.schedules import default_schedule
from minicomp.ir.dag import ComputeDAG
from minicomp.search.annotate import concretize, sample
from minicomp.search.sketch import generate_sketches
from minicomp.search.static.analytic import SketchModel
from minicomp.search.static.estimate import estimate
import minicomp.search.strategies.gensor as G
from minicomp.search.strategies.gensor import LEVELS, SketchWalker, construct, unroll_of
from minicomp.target import as_target
from onnx_harness import make_model, run_ort

# every workload of minicomp/workloads.py, small enough for the simulator
WORKLOADS = {
  "matmul": lambda: W.matmul(64, 48, 40),
  "matmul_bias_relu": lambda: W.matmul(32, 64, 24, bias_relu=True),
  "batch_matmul": lambda: W.batch_matmul(3, 16, 24, 20),
  "embedding": lambda: W.embedding(6, 20, 16),
  "embedding_matmul": lambda: W.embedding(6, 20, 16, N=12),
  "conv2d": lambda: W.conv2d(1, 8, 10, 10, 16, 3, 1, 1),
  "conv2d_strided": lambda: W.conv2d(2, 4, 9, 9, 8, 3, 2, 0),
  "conv2d_dilated": lambda: W.conv2d(1, 4, 10, 10, 8, 3, 1, 2, 2),
  "depthwise_conv2d": lambda: W.depthwise_conv2d(1, 8, 10, 10, 3, 1, 1),
  "softmax": lambda: W.softmax(12, 40),
  "layernorm": lambda: W.layernorm(10, 48),
  "row_sum": lambda: W.row_sum(16, 100),
  "broadcast_chain": lambda: W.broadcast_chain(4, 6, 8),
}


def _ranks(x):
  r = np.empty(len(x)); r[np.argsort(x, kind="stable")] = np.arange(len(x)); return r


def _spearman(a, b) -> float:
  return float(np.corrcoef(_ranks(np.asarray(a)), _ranks(np.asarray(b)))[0, 1])


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_constructed_schedule_matches_numpy(name):
  wl = WORKLOADS[name]()
  res = construct(ComputeDAG(wl.outputs), "sm_86", seed=0)
  assert res.candidates, res.reasons
  kern = build(res.candidates[0].schedule, "sm_86")
  ins = wl.random_inputs(1)
  got = kern(*ins, device="cpu")
  got = got if isinstance(got, (list, tuple)) else [got]
  np.testing.assert_allclose(got[0], wl.reference(*ins), rtol=1e-4, atol=1e-4)
  assert res.costs == sorted(res.costs)


def test_a_prime_extent_is_tiled_as_a_padded_one_and_stays_correct():
  """A loop of 197 iterations (a ViT's tokens: prime, its only tiles 1 and 197) is tiled as 224 = 32 x 7 (the
  sketch's tile group, which every search draws from), the tiles
  overhanging it behind lowering's guards; extents with a divisor from 8 to 64, or up to 64, stay as they are.
  A 197 x 96 x 64 matmul's construction tiles its rows in pieces that do not divide 197, and matches numpy."""
  from minicomp.search.sketch_types import tile_extent
  assert [tile_extent(n) for n in (197, 194, 1000, 196, 61, 128)] == [224, 224, 1000, 196, 61, 128]
  wl = W.matmul(197, 96, 64)
  dag = ComputeDAG(wl.outputs)
  res = construct(dag, "sm_86", seed=0)
  assert res.candidates, res.reasons
  cand = res.candidates[0]
  rows = next(g for g in generate_sketches(dag, as_target("sm_86"))[cand.sketch_index].tiles if g.extent == 224)
  assert 197 % np.prod([cand.values[v] for v in rows.vars]) != 0
  kern = build(cand.schedule, "sm_86")
  ins = wl.random_inputs(1)
  np.testing.assert_allclose(kern(*ins, device="cpu"), wl.reference(*ins), rtol=1e-4, atol=1e-4)


def test_construction_is_deterministic_per_seed():
  dag = ComputeDAG(W.conv2d(1, 16, 14, 14, 32, 3, 1, 1).outputs)
  a, b = construct(dag, "sm_86", seed=3), construct(dag, "sm_86", seed=3)
  assert [c.key for c in a.candidates] == [c.key for c in b.candidates]
  assert a.costs == b.costs


@pytest.mark.parametrize("arch", ["sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90"])
def test_construction_respects_the_target_limits(arch):
  tgt = as_target(arch)
  for wl in (W.conv2d(1, 64, 28, 28, 64, 3, 1, 1), W.matmul(512, 512, 512)):
    res = construct(ComputeDAG(wl.outputs), tgt, seed=0)
    assert res.candidates, res.reasons
    for c in res.candidates:
      for k in c.program.kernels:
        assert int(np.prod([int(getattr(d, "arg", d)) for d in k.block])) <= tgt.max_threads_per_block
        smem = sum(int(b.size.arg) * 4 for b in k.allocs if b.scope == "shared")
        assert smem <= tgt.search_shared_bytes
    kern = build(res.candidates[0].schedule, tgt)            # NVRTC compiles it for this arch
    for r in kern.binary.resources.values():
      assert r.registers <= tgt.device.max_regs_per_thread


def test_the_walk_goes_through_the_levels_in_order_and_keeps_valid_states():
  sk = generate_sketches(ComputeDAG(W.matmul(256, 256, 256).outputs), "sm_86")[0]
  walker = SketchWalker(sk, as_target("sm_86"))
  trace = []
  out = walker.walk(np.random.default_rng(0), walks=3, trace=trace)
  for w in range(3):
    levels = [LEVELS.index(lv) for (ww, lv, _, _) in trace if ww == w]
    assert levels and all(a <= b for a, b in zip(levels, levels[1:]))    # never back to an outer level
  assert any(m.startswith("tile") for _, _, m, _ in trace) and any(m == "cache" for _, _, m, _ in trace)
  costs = [c for c, _ in out]
  assert costs == sorted(costs) and np.isfinite(costs).all()
  assert costs[0] < walker.costs[walker.key(walker.initial())] / 10      # the walk improved on the naive state


def test_the_analytic_model_ranks_like_the_full_static_model():
  """The walk's model against ``estimate`` (PTX + ptxas + islpy) on random valid schedules."""
  tgt = as_target("h100")
  for wl in (W.conv2d(1, 32, 14, 14, 32, 3, 1, 1), W.matmul(256, 256, 256)):
    sk = generate_sketches(ComputeDAG(wl.outputs), tgt)[0]
    model = SketchModel(sk, tgt)
    rng = np.random.default_rng(0)
    ana, full = [], []
    while len(ana) < 10:
      c = sample(sk, rng, tgt)
      a = model([c.values])[0]
      if not np.isfinite(a): continue          # the analytic register check is stricter than ptxas
      ana.append(a)
      full.append(estimate(build(concretize(sk, c.values, unroll_of(sk)), tgt), tgt).latency_s)
    assert _spearman(ana, full) > 0.6, (ana, full)


def _facts_of_both(wl, seed: int):
  """(analytic facts, full facts) of the first kernel of one random valid schedule of ``wl``."""
  from minicomp.search.static.estimate import launch_facts
  tgt = as_target("h100")
  sk = generate_sketches(ComputeDAG(wl.outputs), tgt)[0]
  model, rng = SketchModel(sk, tgt), np.random.default_rng(seed)
  while True:
    c = sample(sk, rng, tgt)
    if np.isfinite(model([c.values])[0]): break
  ana = model.facts([c.values])[0][0]
  full = launch_facts(build(concretize(sk, c.values, unroll_of(sk)), tgt), tgt.device)[0]
  return ana, full


def test_the_analytic_shared_wavefronts_are_per_block_like_the_full_models():
  """Both models count a block's shared-memory wavefronts. The analytic one divided its per-block
  count by the number of blocks once more (until 2026-11-27), so shared memory never bound it."""
  ratios = []
  for seed in range(4):        # 16 to 512 blocks: dividing by them again puts the median near 0.05
    ana, full = _facts_of_both(W.matmul(256, 256, 256), seed)
    ratios.append(ana.shared_wavefronts_per_block / full.shared_wavefronts_per_block)
  assert 0.5 < float(np.median(ratios)) < 5, ratios


def test_divisions_of_thread_and_block_indices_alone_cost_nothing_per_element():
  """A fetch index's divisions and modulos of thread / block indices are loop-invariant: the
  compiler computes them once per thread. Counting them per element made the analytic model see
  several times the integer instructions of the PTX on convolutions."""
  from minicomp.ir.expr import var
  from minicomp.search.static.analytic import _divmods
  tx, k, b = var("threadIdx_x"), var("k"), var("blockIdx_x")
  index = (tx // 4) % 4 * 58 + b // 14 % 14 * 4 + (k * 64 + tx) // 8
  assert _divmods(index, {"k": 2}, {"k"}) == (frozenset({2}),) and _divmods(index, {}, set()) == ()
  ratios = []
  for seed in range(3):        # charging them per element put the median at 5.6
    ana, full = _facts_of_both(W.depthwise_conv2d(1, 32, 56, 56, 3, 1, 1), seed)
    ratios.append(ana.per_thread["int"] / max(full.per_thread["int"], 1.0))
  assert 0.25 < float(np.median(ratios)) < 4, ratios


def test_a_fetchs_divisions_are_computed_once_per_value_of_the_loops_they_read():
  """A fetch's divisions of its own (unrolled) loop and the thread index do not change with the reduction loop
  around the fetch: the compiler computes them once per value and the addresses then step. Charged per element
  copied, conv 512's fastest program on the H200 had 49,471 integer instructions per thread where the PTX has 673
  (and Gensor's walk ranked the GPU's fastest conv 512 programs ~150th of 724 instead of first)."""
  ratios = []
  for seed in range(4):
    ana, full = _facts_of_both(W.conv2d(1, 128, 8, 8, 256, 3, 2, 1), seed)
    ratios.append(ana.per_thread["int"] / max(full.per_thread["int"], 1.0))
  assert 0.25 < float(np.median(ratios)) < 4, ratios


def test_the_analytic_shared_loads_merge_along_any_unrolled_contiguous_loop():
  """NVRTC merges a register tile's contiguous shared reads into ld.shared.v4 along whichever unrolled loop they are
  contiguous in; the analytic model merged them along the innermost loop the index uses only, and counted a matmul's
  A-tile reads along k as scalars (2.5x the PTX's shared loads at the median on the H200's 233 matmul programs)."""
  ratios = []
  for seed in range(4):
    ana, full = _facts_of_both(W.matmul(256, 256, 256), seed)
    ratios.append(ana.per_thread["ld_shared"] / full.per_thread["ld_shared"])
  assert 0.6 < float(np.median(ratios)) < 1.6, ratios


def test_the_analytic_l2_traffic_follows_the_warps_lanes():
  """A convolution's fetch of its padded input (a fused index broken into rows mid-warp) and of its weights (lanes
  filters apart) touch more sectors than the step from thread 0 to thread 1 says: the analytic model's L2 traffic
  was 0.37x the full model's on the tenth of the H200's conv 512 programs where it erred most; from the 32 lanes it
  stays within 0.9-1.2x."""
  ratios = []
  for seed in range(4):
    ana, full = _facts_of_both(W.conv2d(1, 128, 8, 8, 256, 3, 2, 1), seed)
    ratios.append(ana.l2_bytes / full.l2_bytes)
  assert all(0.7 < r < 1.5 for r in ratios), ratios


def test_the_analytic_bank_conflicts_are_the_warps_lanes():
  """Bank conflicts from the 32 lanes' addresses, per 128-byte phase, as the full model counts them; the step from
  thread 0 to thread 1 put a convolution's conflicts at 2.1-2.25x the full model's (the H200's conv 3x3 programs)."""
  from minicomp.search.static.analytic import _bank_degree
  lanes = np.arange(32)
  t = np.ones((32, 1), bool)                                 # every lane of the warp in the block
  def degree(byte_stride, width):
    return int(_bank_degree((lanes * byte_stride)[:, None], t, np.array([width]))[0])
  assert [degree(4, 4), degree(8, 4), degree(128, 4), degree(0, 4), degree(68, 4)] == [1, 2, 32, 1, 1]
  assert degree(16, 16) == 1 and degree(32, 16) == 2 and degree(8, 8) == 1     # float4 / float2 lanes, per phase
  assert degree(32, 32) == 1 and degree(64, 32) == 2                           # 32-byte lanes (int64 x 4): 8 phases
  assert int(_bank_degree((lanes * 128)[:, None], lanes[:, None] < 4, np.array([4]))[0]) == 4   # a 4-thread block
  # a walk's model remembers each point's degree by its lanes' addresses, live lanes and width: the same numbers,
  # whether a point's pattern is new, repeated within the call or seen in an earlier call
  tgt = as_target("sm_86")
  (sk,) = generate_sketches(W.matmul(64, 64, 32).outputs, tgt)
  model = SketchModel(sk, tgt)
  rng = np.random.default_rng(0)
  for _ in range(3):
    strides, widths = rng.choice([0, 4, 8, 16, 68, 128], 12), rng.choice([4, 8, 16], 12)
    first = lanes[:, None] * strides[None, :] + rng.integers(0, 3, 12)[None, :] * 4
    live = lanes[:, None] < rng.choice([4, 32], 12)[None, :]
    first, live, widths = first[:, [0, 1, 0, 2] * 3], live[:, [0, 1, 0, 2] * 3], widths[[0, 1, 0, 2] * 3]
    assert model._remembered(_bank_degree, first, live, widths).tolist() == _bank_degree(first, live, widths).tolist()
  ratios = []
  for seed in range(4):
    ana, full = _facts_of_both(W.conv2d(1, 32, 14, 14, 32, 3, 1, 1), seed)
    ratios.append(ana.shared_wavefronts_per_block / full.shared_wavefronts_per_block)
  assert 0.4 < float(np.median(ratios)) < 2.5, ratios


def test_the_analytic_sectors_are_the_warps_lanes():
  """The 32-byte sectors one warp request touches, from its lanes' first bytes, per point; remembered per point
  like the bank degrees, the same whether a point is new or seen before."""
  from minicomp.search.static.analytic import _lane_sectors
  lanes = np.arange(32)[:, None]
  one = lambda first, n_el=1, apart=0, piece=4: int(_lane_sectors(first, np.array([n_el]), np.array([apart]),  # noqa
                                                                  np.array([piece]))[0])
  assert one(lanes * 4) == 4 and one(lanes * 128) == 32 and one(lanes * 0) == 1 and one(lanes * 4 + 16) == 5
  assert one(lanes * 16, piece=16) == 16 and one(lanes * 8, piece=8) == 8          # float4 / float2 lanes
  assert one(lanes * 4, n_el=2, apart=4096) == 8                                   # a vector split in 2, far apart
  assert one(np.where(lanes < 4, lanes * 4, 0)) == 1                               # 4 live lanes (others at lane 0's)
  tgt = as_target("sm_86")
  (sk,) = generate_sketches(W.matmul(64, 64, 32).outputs, tgt)
  model = SketchModel(sk, tgt)
  first = np.concatenate([lanes * 4, lanes * 128, lanes * 4 + 16, lanes * 128], axis=1)
  cols = (first, np.array([1, 1, 2, 1]), np.array([0, 0, 256, 0]), np.array([4, 4, 4, 4]))
  for _ in range(2):
    assert model._remembered(_lane_sectors, *cols).tolist() == _lane_sectors(*cols).tolist() == [4, 32, 10, 32]


@pytest.mark.parametrize("name", sorted(zoo.TEST_MODELS))
def test_zoo_default_compile_is_never_estimated_slower_than_the_rules(name):
  model, feeds = zoo.TEST_MODELS[name]()
  tgt = as_target("sm_86")
  cm = mc.compile(model, target=tgt)
  rules = mc.compile(model, target=tgt, schedules="rules")
  by_key = {t.key: i for i, t in enumerate(cm.tasks)}
  for t in rules.tasks:
    mine = estimate(cm.kernels[by_key[t.key]], tgt).latency_s
    theirs = estimate(rules.kernels[by_key[t.key]], tgt).latency_s
    assert mine <= theirs * 1.01, (t.ops, mine, theirs)
  want = run_ort(model, feeds)
  for g, w in zip(cm.run(feeds, device="cpu"), want):
    np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


def test_conv_models_get_constructed_kernels_much_faster_than_the_rules():
  model, _ = zoo.residual_block(c=32, hw=28)
  cm = mc.compile(model, target="sm_86")
  rules = mc.compile(model, target="sm_86", schedules="rules")
  assert cm.stats.constructed == len(cm.tasks)
  assert cm.estimate().latency_s < rules.estimate().latency_s / 2


def test_the_rules_are_compared_only_where_they_can_win(monkeypatch):
  """Conv / MatMul tasks do not build the rule-based schedule (it never wins there); a softmax row does."""
  import minicomp.compiler as C
  built = []
  real = C.build_rule_based
  monkeypatch.setattr(C, "build_rule_based", lambda dag, *a, **k: built.append(dag) or real(dag, *a, **k))
  model, _ = zoo.residual_block()
  cm = mc.compile(model, target="sm_86", jobs=1, progress=False)
  assert built == [] and cm.stats.constructed == len(cm.tasks) == 2
  from onnx import helper
  m = make_model([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], {"x": np.zeros((64, 256), np.float32)}, ["y"])
  mc.compile(m, target="sm_86", jobs=1, progress=False)
  assert len(built) == 1


def test_compile_lowers_a_compared_candidate_once(monkeypatch):
  """compile builds the program construct lowered to check a candidate (renamed to the task), which gives the kernel a
  fresh lowering under the task's name gives."""
  import minicomp.codegen.kernel as K
  res = construct(ComputeDAG(W.conv2d(1, 8, 10, 10, 16, 3, 1, 1).outputs), "sm_86", seed=0)
  for c in res.candidates[:2]:
    reused, fresh = K.Builds(as_target("sm_86")), K.Builds(as_target("sm_86"))
    a, b = reused.kernel(c.schedule, "task7", c.program), fresh.kernel(c.schedule, "task7")
    assert a.source == b.source and "task7_kernel" in a.source and a.plan == b.plan
  lowered = []
  real = K.lower_checked
  monkeypatch.setattr(K, "lower_checked", lambda sched, *a, **k: lowered.append(sched) or real(sched, *a, **k))
  cm = mc.compile(zoo.residual_block()[0], target="sm_86", jobs=1, progress=False)
  assert cm.stats.constructed == len(cm.tasks) == 2 and lowered == []


def _unroll_values(schedule) -> list[int]:
  return [s["value"] for s in json.loads(schedule.to_json()) if s.get("pragma") == "auto_unroll_max_step"]


def test_a_ranking_copy_is_the_candidate_unrolled_less():
  """Same tiles, threads and vectors, every auto_unroll_max_step capped at RANK_UNROLL, and numpy's result."""
  wl = W.conv2d(1, 32, 12, 12, 16, 3, 1, 1)
  dag, tgt = ComputeDAG(wl.outputs), as_target("sm_86")
  sks = generate_sketches(dag, tgt)
  c = construct(dag, tgt, seed=0, sketches=sks).candidates[0]
  assert max(_unroll_values(c.schedule)) > G.RANK_UNROLL      # (the construction unrolls 512 steps)
  copy = G.ranking_copy(c, sks, tgt)
  assert copy.values == c.values and copy.sketch_index == c.sketch_index
  assert _unroll_values(copy.schedule) == [min(v, G.RANK_UNROLL) for v in _unroll_values(c.schedule)]
  ins = wl.random_inputs(1)
  np.testing.assert_allclose(build(copy.schedule, tgt)(*ins, device="cpu"), wl.reference(*ins), rtol=1e-4, atol=1e-4)
  few = c.__class__(c.schedule, c.values, c.sketch_index, {k: 16 for k in c.unroll}, c.program)
  assert G.ranking_copy(few, sks, tgt) is few                     # nothing above the cap: itself


def test_compare_builds_one_full_program_per_constructed_task(monkeypatch):
  """schedules="compare": the compared candidates are ranked on their copies; only the first is built with its full
  unroll, and it is the one the copies' estimates put first (ties: the analytic model's order)."""
  import minicomp.codegen.kernel as K
  from minicomp.compiler import choose_default
  full: list[str] = []
  real = K.Builds.kernel
  def spy(self, schedule, name, lowered=None):
    if max(_unroll_values(schedule), default=0) > G.RANK_UNROLL: full.append(schedule.to_json())
    return real(self, schedule, name, lowered)
  monkeypatch.setattr(K.Builds, "kernel", spy)
  tgt = as_target("sm_86")
  task = mc.compile(zoo.residual_block(c=32, hw=28)[0], target=tgt, schedules="rules").tasks[0]
  steps, origin, _, _ = choose_default(task, tgt, "task0", "compare")
  assert origin == "gensor" and full == [steps]
  sks = generate_sketches(task.dag, tgt)
  cands = G.compared(construct(task.dag, tgt, seed=G.CONSTRUCT_SEED, sketches=sks, keep=G.COMPARE))
  assert len(cands) > 1                                           # (a task whose choice is a ranking)
  costs = [estimate(build(G.ranking_copy(c, sks, tgt).schedule, tgt), tgt).latency_s for c in cands]
  assert steps == cands[costs.index(min(costs))].schedule.to_json()


def test_default_schedules_keep_the_analytic_models_first_candidate(monkeypatch):
  """The default (schedules="gensor"): per constructed task the analytic model's first candidate, built once (no
  ranking copies, nothing estimated to compare candidates); onnxruntime's result. (The block's two convolutions share
  a walk: the second's candidates are the first's best states, ranked by its own model.)"""
  import minicomp.codegen.kernel as K
  from minicomp.compiler import constructed_sketches
  built: list[str] = []
  real = K.Builds.kernel
  monkeypatch.setattr(K.Builds, "kernel",
                      lambda self, sched, *a, **k: built.append(sched.to_json()) or real(self, sched, *a, **k))
  model, feeds = zoo.residual_block(c=32, hw=28)
  tgt = as_target("sm_86")
  cm = mc.compile(model, target=tgt, jobs=1, progress=False)
  assert cm.stats.constructed == len(cm.tasks) == len(set(built)) == 2 and cm.stats.estimate == 0
  walked = None
  for task, kern in zip(cm.tasks, cm.kernels):
    sks = constructed_sketches(task.dag, tgt)
    res = construct(task.dag, tgt, seed=G.CONSTRUCT_SEED, sketches=sks, keep=1,
                    seeded=walked.states if walked is not None else None)
    walked = walked or res
    first = G.compared(res)[0]
    assert first.schedule.to_json() in built
    assert kern.source == build(first.schedule, tgt, kern.launches[0][0][:-len("_kernel")]).source
  np.testing.assert_allclose(cm.run(feeds, device="cpu")[0], run_ort(model, feeds)[0], rtol=1e-4, atol=1e-4)


def test_a_task_of_the_same_domain_ranks_a_walk_instead_of_walking():
  """construct(seeded=): residual_block's convolution with the residual add takes the best states of the plain one's
  walk (the same tiles and choices: gensor.domain), ranked by its own analytic model, for a fraction of a walk's
  evaluations; its first candidate is as good by that model as its own walk's here, and a valid program."""
  from minicomp.compiler import constructed_sketches
  tgt = as_target("sm_86")
  tasks = mc.compile(zoo.residual_block(c=16, hw=12)[0], target=tgt, schedules="rules").tasks
  plain, added = sorted(tasks, key=lambda t: len(t.ops))
  assert "Add" in added.ops and "Add" not in plain.ops
  sp, sa = (constructed_sketches(t.dag, tgt) for t in (plain, added))
  assert G.domain(sp) == G.domain(sa) != G.domain(constructed_sketches(ComputeDAG(W.matmul(64, 48, 40).outputs), tgt))
  walked = construct(plain.dag, tgt, seed=0, sketches=sp, keep=1)
  assert 0 < len(walked.states) <= G.SEEDS
  own = construct(added.dag, tgt, seed=0, sketches=sa, keep=1)
  seeded = construct(added.dag, tgt, sketches=sa, keep=1, seeded=walked.states)
  assert 0 < seeded.evaluations < own.evaluations / 10
  assert seeded.costs[0] <= own.costs[0] * 1.01, (seeded.costs, own.costs)
  assert seeded.candidates[0].program is not None          # (lowered and checked, as every construction's)
  assert construct(added.dag, tgt, sketches=sa, keep=1, seeded=[]).candidates == []


def test_compile_walks_once_for_tasks_of_one_domain(monkeypatch, capsys):
  """residual_block's two convolutions (one with the residual add) share a walk: the first walks, the second ranks
  its best states (stats.seeded, said in the summary line); both kernels compute what onnxruntime does."""
  import minicomp.compiler as C
  from minicomp.compiler import constructed_sketches
  walks = []
  real = G.SketchWalker.walk
  monkeypatch.setattr(G.SketchWalker, "walk", lambda self, *a, **k: walks.append(1) or real(self, *a, **k))
  model, feeds = zoo.residual_block(c=16, hw=12)
  tgt = as_target("sm_86")
  cm = mc.compile(model, target=tgt, jobs=1)
  assert cm.stats.constructed == len(cm.tasks) == 2 and cm.stats.seeded == 1
  assert "2 constructed by Gensor (1 from a like task's walk)" in capsys.readouterr().err
  assert C.walk_key(cm.tasks[0]) == C.walk_key(cm.tasks[1]) is not None
  sks = [constructed_sketches(t.dag, tgt) for t in cm.tasks]
  assert G.domain(sks[0]) == G.domain(sks[1]) and len(walks) == len(sks[0])
  np.testing.assert_allclose(cm.run(feeds, device="cpu")[0], run_ort(model, feeds)[0], rtol=1e-4, atol=1e-4)


def test_fallback_to_the_rules_is_logged(caplog, monkeypatch):
  import minicomp.search.strategies.gensor as G
  monkeypatch.setattr(G, "SketchWalker", lambda *a, **k: (_ for _ in ()).throw(mc.EstimateError("no model")))
  model, feeds = zoo.residual_block()
  with caplog.at_level(logging.INFO, logger="minicomp"):
    cm = mc.compile(model, target="sm_86")
  assert cm.stats.constructed == 0
  assert "Gensor construction found no valid schedule" in caplog.text and "no analytic model" in caplog.text
  np.testing.assert_allclose(cm.run(feeds, device="cpu")[0], run_ort(model, feeds)[0], rtol=1e-4, atol=1e-4)


def test_unknown_schedules_option_is_a_clear_error():
  model, _ = zoo.residual_block()
  with pytest.raises(CompileError, match="schedules"):
    mc.compile(model, target="sm_86", schedules="fast")


def test_gensor_strategy_tunes_from_its_constructions(tmp_path):
  from minicomp.search.measure import StaticMeasurer
  model, feeds = zoo.residual_block(c=16, hw=14)
  log = str(tmp_path / "log.jsonl")
  with StaticMeasurer(workers=1) as meas:
    cm = mc.compile(model, "sm_86", trials=6, strategy="gensor", measurer=meas, measures_per_round=3,
                    log_file=log)
  from minicomp.search.records import load_records
  recs = [r for r in load_records(log) if r.strategy == "gensor"]
  assert len(recs) == 6 and all(r.ok for r in recs)
  assert len({r.steps_json for r in recs}) == 6                       # never the same program twice
  np.testing.assert_allclose(cm.run(feeds, device="cpu")[0], run_ort(model, feeds)[0], rtol=1e-4, atol=1e-4)


def test_constructed_tiles_beat_the_rules_on_a_large_convolution():
  """The issue's motivating case (conv 3x3 56x56x64): the rules' tiles are far from the best."""
  tgt = as_target("h100")
  dag = ComputeDAG(W.conv2d(1, 64, 56, 56, 64, 3, 1, 1).outputs)
  res = construct(dag, tgt, seed=0)
  mine = estimate(build(res.candidates[0].schedule, tgt), tgt).latency_s
  rules = estimate(build(default_schedule(dag, tgt), tgt), tgt).latency_s
  assert mine < rules / 4, (mine, rules)
  assert res.seconds < 10


def test_cli_compile_takes_the_schedules_option(tmp_path):
  import subprocess
  import sys

  import onnx
  model, _ = zoo.residual_block()
  mp = tmp_path / "m.onnx"
  onnx.save(model, str(mp))
  run = lambda *a: subprocess.run([sys.executable, "-m", "minicomp.cli", *map(str, a)], capture_output=True,  # noqa: E731
                                  text=True)
  r = run("compile", mp, "--schedules", "rules", "-o", tmp_path / "out", "-q")
  assert r.returncode == 0, r.stderr
  assert mc.load(str(tmp_path / "out")).kernels
  for mode in ("compare", "quick"):                                   # (quick: the default's former name)
    r = run("compile", mp, "--schedules", mode, "-o", tmp_path / mode, "-q")
    assert r.returncode == 0, r.stderr
    assert mc.load(str(tmp_path / mode)).kernels
  r = run("compile", mp, "--schedules", "fast", "-o", tmp_path / "out2")
  assert r.returncode != 0 and "invalid choice" in r.stderr


@pytest.mark.parametrize("target", ["sm_86", "h100"])     # uncalibrated; calibrated (a p-norm)
def test_the_analytic_model_costs_many_points_as_launch_time_costs_each(target):
  """The walk's costs (every point at once, numpy arrays through ``model.launch_times``) are what
  ``launch_time`` gives each point's facts: exactly by the uncalibrated formula, within rounding by the
  calibrated p-norm (numpy's vectorized power rounds the last bit otherwise); points no SM can hold are inf."""
  from minicomp.search.static.model import launch_time
  tgt = as_target(target)
  sk = generate_sketches(ComputeDAG(W.conv2d(1, 16, 14, 14, 32, 3, 1, 1).outputs), tgt)[0]
  model, rng = SketchModel(sk, tgt), np.random.default_rng(3)
  points = [sample(sk, rng, tgt).values for _ in range(12)]
  got = model(points)
  assert np.isfinite(got).sum() >= 6, got
  one_by_one = [sum(launch_time(f, tgt.device, model.calibration).latency_s for f in fs)
                if all(f.blocks_per_sm for f in fs) else np.inf for fs in model.facts(points)]
  if model.calibration is None: np.testing.assert_array_equal(got, one_by_one)
  else: np.testing.assert_allclose(got, one_by_one, rtol=1e-12)
  assert (model.calibration is None) == (target == "sm_86")


def test_the_analytic_model_counts_a_dot4_operand_as_one_word_load(monkeypatch):
  """Four consecutive bytes a dot4 takes are one 32-bit load in the emitted kernel (codegen/cuda.py ``_word``): the
  analytic model counts one shared load per word (a quarter of one per byte), as the PTX does where the model's
  other counting is exact (seed 0)."""
  from types import SimpleNamespace

  from minicomp.search.static import analytic
  M, K, N = 128, 256, 128
  A, B = mc.placeholder((M, K), "uint8", "A"), mc.placeholder((N, K), "int8", "B")
  k = mc.reduce_axis(K // 4, "k")
  C = mc.compute((M, N), lambda i, j: mc.sum(mc.dot4([A[i, 4 * k + t] for t in range(4)],
                                                    [B[j, 4 * k + t] for t in range(4)]), axis=k), "C")
  wl = SimpleNamespace(outputs=[C])
  words = [_facts_of_both(wl, seed) for seed in range(3)]
  assert words[0][0].per_thread["ld_shared"] == words[0][1].per_thread["ld_shared"]
  monkeypatch.setattr(analytic, "_dot4_words", lambda value: (set(), set()))
  for seed, (ana, _) in enumerate(words):
    assert _facts_of_both(wl, seed)[0].per_thread["ld_shared"] >= 3.5 * ana.per_thread["ld_shared"]


def test_compile_constructs_without_the_split_reduction_sketch_unless_asked(monkeypatch):
  """compile(trials=0) leaves the split-reduction sketch to tuning (compiler.CONSTRUCT_SPLIT_SKETCH); asked, Gensor's
  construction walks it too, and its best split candidate builds into two kernels computing numpy's result."""
  import minicomp.compiler as C
  from minicomp.search.sketch_rules import SplitReduction
  wl = W.conv2d(1, 128, 4, 4, 64, 3, 1, 1)
  tgt = mc.target.as_target("sm_86")
  split = lambda sk: any(r.startswith(SplitReduction.name) for r in sk.rules)  # noqa: E731
  assert not any(split(sk) for sk in C.constructed_sketches(wl.outputs, tgt))
  monkeypatch.setattr(C, "CONSTRUCT_SPLIT_SKETCH", True)
  sks = C.constructed_sketches(wl.outputs, tgt)
  res = G.construct(wl.outputs, tgt, seed=G.CONSTRUCT_SEED, sketches=sks, keep=16)
  best = next(c for c in res.candidates if split(sks[c.sketch_index]))
  kern = build(best.schedule, tgt)
  assert len(kern.plan.launches) == 2
  ins = wl.random_inputs()
  np.testing.assert_allclose(kern(*ins, device="cpu"), wl.reference(*ins), rtol=1e-4, atol=1e-4)
