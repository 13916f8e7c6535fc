"""Sketch generation (Ansor's derivation rules) and random annotation.

Every sampled schedule is checked the only way that counts: built with NVRTC and run on the
CPU simulator against the workload's numpy reference.
"""
import math

import numpy as np
import pytest

import minicomp as mc
from minicomp import workloads as W
from minicomp.search import annotate as A
from minicomp.search.sketch import SketchError, generate_sketches, register_rule, sketches
from minicomp.search.sketch_rules import DEFAULT_RULES
from minicomp.search.sketch_types import Decision, SketchRule
from minicomp.target import Target

WORKLOADS = {
  "matmul": lambda: W.matmul(64, 48, 32),
  "matmul_bias_relu": lambda: W.matmul(40, 24, 36, True),
  "gemv_like": lambda: W.matmul(4, 4, 512),
  "gemv_bias_relu": lambda: W.matmul(2, 6, 300, True),
  "batch_matmul": lambda: W.batch_matmul(2, 16, 24, 8),
  "conv2d": lambda: W.conv2d(1, 3, 9, 9, 8, 3, 1, 1),
  "conv2d_stride2": lambda: W.conv2d(2, 4, 11, 11, 6, 3, 2, 1),
  "depthwise": lambda: W.depthwise_conv2d(1, 4, 9, 9, 3, 1, 1),
  "softmax": lambda: W.softmax(8, 100),
  "layernorm": lambda: W.layernorm(6, 300),
  "row_sum": lambda: W.row_sum(7, 1000),
  "broadcast": lambda: W.broadcast_chain(3, 17, 29),
}

EXPECTED_RULES = {
  "matmul": [("add_cache_write(C)", "multi_level_tiling_with_fusion(C.local -> C)", "add_cache_read(B)", "add_cache_read(A)")],
  "matmul_bias_relu": [("multi_level_tiling_with_fusion(C -> D)", "add_cache_read(B)", "add_cache_read(A)")],
  "softmax": [("cross_thread_reduction(expsum in softmax)", "cross_thread_reduction(rowmax in softmax)")],
  "row_sum": [("cross_thread_reduction(rowsum)",)],
  "broadcast": [("always_inline(relu)", "always_inline(add)", "always_inline(mul)", "thread_bind(out)")],
}


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_few_sketches_per_workload(name):
  sk = generate_sketches(WORKLOADS[name]().outputs)
  assert 1 <= len(sk) < 10
  if name in EXPECTED_RULES:
    assert [s.rules for s in sk] == EXPECTED_RULES[name]
  for s in sk:
    assert set(s.schedule.params()) == set(s.params)     # every variable has a domain
    assert s.tiles or s.choices


def test_long_reduction_with_small_output_gets_a_cross_thread_sketch_too():
  rules = [s.rules for s in generate_sketches(W.matmul(4, 4, 512).outputs)]
  assert ("cross_thread_reduction(C)",) in rules
  assert any("multi_level_tiling_with_fusion(C.local -> C)" in r for r in rules)


def test_a_cross_thread_reduction_runs_in_its_elementwise_consumers_kernel():
  """Ansor's fusion: the bias and ReLU that read a cross-thread reduction elementwise are its kernel (one output
  value per block, stored by one thread), not a second launch; every sample computes numpy's result."""
  wl = W.matmul(2, 6, 300, True)
  (sk,) = [s for s in generate_sketches(wl.outputs) if any(r.startswith("cross_thread") for r in s.rules)]
  assert sk.rules == ("cross_thread_reduction(C in D)",)
  ins = wl.random_inputs()
  for c in A.sample_population([sk], 3, np.random.default_rng(0), "sm_86"):
    kern = mc.build(c.schedule, target="sm_86")
    assert len(kern.plan.launches) == 1
    np.testing.assert_allclose(kern(*ins, device="cpu"), wl.reference(*ins), rtol=1e-4, atol=1e-4)


def test_an_output_read_elementwise_by_another_is_computed_in_its_kernel():
  """An LSTM cell's c and h = sigmoid(b) * tanh(c): one kernel, c stored by the thread that reads it; samples right."""
  X, Y = mc.placeholder((5, 40), name="X"), mc.placeholder((5, 40), name="Y")
  C = mc.compute((5, 40), lambda i, j: mc.tanh(X[i, j]) * Y[i, j] + 1.0, name="c")
  H = mc.compute((5, 40), lambda i, j: mc.sigmoid(Y[i, j]) * mc.tanh(C[i, j]), name="h")
  (sk,) = generate_sketches([C, H])
  assert sk.rules == ("thread_bind(h)", "compute_at(c in h)")
  rng = np.random.default_rng(0)
  a, b = (rng.standard_normal((5, 40)).astype(np.float32) for _ in range(2))
  c_ref = np.tanh(a) * b + 1
  for cand in A.sample_population([sk], 3, rng, "sm_86"):
    kern = mc.build(cand.schedule, target="sm_86")
    assert len(kern.plan.launches) == 1
    c, h = kern(a, b, device="cpu")
    np.testing.assert_allclose(c, c_ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(h, 1 / (1 + np.exp(-b)) * np.tanh(c_ref), rtol=1e-5, atol=1e-6)


def test_a_matmul_is_tiled_with_an_epilogue_that_reads_it_twice():
  """GELU after a matmul reads the product twice, through inlined stages (a diamond): still one kernel, the product
  kept in registers (Ansor's rule takes single chains only); samples compute numpy's result."""
  X, Wt = mc.placeholder((16, 24), name="X"), mc.placeholder((24, 20), name="W")
  k = mc.reduce_axis(24, "k")
  C = mc.compute((16, 20), lambda i, j: mc.sum(X[i, k] * Wt[k, j], axis=k), name="C")
  H = mc.compute((16, 20), lambda i, j: C[i, j] * 0.5, name="H")
  E = mc.compute((16, 20), lambda i, j: mc.erf(C[i, j] * 0.7071067811865476) + 1.0, name="E")
  G = mc.compute((16, 20), lambda i, j: H[i, j] * E[i, j], name="G")
  (sk,) = generate_sketches([G])
  assert "multi_level_tiling_with_fusion(C -> G)" in sk.rules
  rng = np.random.default_rng(0)
  x, w = rng.standard_normal((16, 24)).astype(np.float32), rng.standard_normal((24, 20)).astype(np.float32)
  c = x @ w
  from math import erf
  want = c * 0.5 * (np.vectorize(erf)(c * 0.7071067811865476) + 1.0)
  for cand in A.sample_population([sk], 3, rng, "sm_86"):
    kern = mc.build(cand.schedule, target="sm_86")
    assert len(kern.plan.launches) == 1
    np.testing.assert_allclose(kern(x, w, device="cpu"), want, rtol=1e-4, atol=1e-4)


def test_a_small_image_convolution_gets_a_cross_thread_sketch_too():
  """A conv whose output (here 4x4x128 = 2,048 values, past Ansor's one block) is smaller than twice its reduction
  (128 x 3 x 3) also gets a cross-thread sketch (CROSS_THREAD_SPACE); its samples compute numpy's result. A conv with
  a larger output (8x8x128) or a shorter reduction (32 channels) does not."""
  def cross(wl):
    return [s for s in generate_sketches(wl.outputs) if "cross_thread_reduction(conv)" in s.rules]
  wl = W.conv2d(1, 128, 4, 4, 128, 3, 1, 1)
  (sk,) = cross(wl)
  assert len(generate_sketches(wl.outputs)) == 3      # tiled, cross-thread, split reduction
  assert cross(W.conv2d(1, 128, 8, 8, 128, 3, 1, 1)) == [] and cross(W.conv2d(1, 32, 4, 4, 128, 3, 1, 1)) == []
  ins = wl.random_inputs()
  ref = wl.reference(*ins)
  for c in A.sample_population([sk], 2, np.random.default_rng(0), "sm_86"):
    out = mc.build(c.schedule, target="sm_86")(*ins, device="cpu")
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def _split(wl):
  return [s for s in generate_sketches(wl.outputs) if any(r.startswith("split_reduction") for r in s.rules)]


@pytest.mark.parametrize("wl", [W.conv2d(1, 128, 4, 4, 64, 3, 1, 1), W.matmul(16, 40, 700, True),
                                W.matmul(24, 32, 512)], ids=["conv_4x4", "matmul_bias_relu", "matmul"])
def test_a_small_output_of_a_long_reduction_gets_a_split_reduction_sketch(wl):
  """Split-K: the longest reduce axis in chunks (rfactor), a tiled kernel of partial sums and a kernel adding them
  with the elementwise consumer (bias, ReLU) in it; every sample computes numpy's result, the out-of-range terms of
  a chunk count that does not divide the axis (700 in 16 chunks of 44) included."""
  (sk,) = _split(wl)
  assert "multi_level_tiling" in " ".join(sk.rules) and "add_cache_read" in " ".join(sk.rules)
  ins = wl.random_inputs()
  ref = wl.reference(*ins)
  for c in A.sample_population([sk], 3, np.random.default_rng(0), "sm_86"):
    kern = mc.build(c.schedule, target="sm_86")
    assert len(kern.plan.launches) == 2
    np.testing.assert_allclose(kern(*ins, device="cpu"), ref, rtol=1e-4, atol=1e-4)


def test_no_split_reduction_for_a_large_output_or_a_short_reduction():
  assert _split(W.conv2d(1, 128, 16, 16, 64, 3, 1, 1)) == []      # 16,384 values
  assert _split(W.conv2d(1, 16, 4, 4, 64, 3, 1, 1)) == []         # 144 terms
  assert _split(W.matmul(64, 48, 32)) == []
  assert _split(W.matmul(2, 6, 300)) == []                         # 12 values: the cross-thread sketch's
  from minicomp.search.sketch_rules import split_chunks
  assert split_chunks(2048, 512) == 16 and split_chunks(4096, 2304) == 16 and split_chunks(8192, 64) == 2
  assert split_chunks(16, 40) == 0 and split_chunks(65536, 4096) == 0


def test_conv_caches_the_inlined_pad_stage():
  (sk,) = generate_sketches(W.conv2d(1, 3, 9, 9, 8, 3, 1, 1).outputs)
  assert "add_cache_read(pad)" in sk.rules and "always_inline(pad)" in sk.rules
  text = str(sk)
  assert "compute_at(stage=pad.shared, target=conv.local, iter=rx.0)" in text      # last R0 loop (Ansor)
  assert "tile conv.local.rc (extent 3, reduce)" in text


def test_sketches_print_readably():
  text = sketches(W.matmul(64, 48, 32).outputs)
  assert text.startswith("sketch 0:") and "rules: add_cache_write(C)" in text
  assert "split(stage=C, iter=ax0, factors=[C_local_i_1, C_local_i_2, C_local_i_3, C_local_i_4])" in text
  assert "choose A_shared_vec in [1, 2, 4]" in text


def test_factorizations():
  f = A.factorizations(12, 2)
  assert set(f) == {(a, b) for a in range(1, 13) for b in range(1, 13) if 12 % (a * b) == 0}
  assert all(t[-1] <= 64 for t in A.factorizations(4096, 4))
  assert len(A.factorizations(4096, 4)) == len({t for t in A.factorizations(4096, 4)})
  assert max(t[-1] for t in A.factorizations(4096, 4)) == 64
  assert A.factorizations(13, 3) == ((1, 1, 1), (1, 1, 13), (1, 13, 1), (13, 1, 1))


def test_tile_sizes_are_drawn_uniformly():
  (sk,) = generate_sketches(W.matmul(8, 8, 8).outputs)
  rng = np.random.default_rng(0)
  g = sk.tiles[0]
  n = len(A.factorizations(g.extent, len(g.vars)))
  counts = {}
  for _ in range(4000):
    v = A.draw_values(sk, rng)
    key = tuple(v[x] for x in g.vars)
    counts[key] = counts.get(key, 0) + 1
  assert len(counts) == n
  assert max(counts.values()) < 3 * min(counts.values())


def _check(wl, cand, arch="sm_86"):
  kern = mc.build(cand.schedule, target=arch)
  ins = wl.random_inputs(1)
  np.testing.assert_allclose(kern(*ins, device="cpu"), wl.reference(*ins), rtol=1e-4, atol=1e-4)
  return kern


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_sampled_schedules_match_numpy(name):
  wl = WORKLOADS[name]()
  sk = generate_sketches(wl.outputs)
  rng = np.random.default_rng(7)
  for k, s in enumerate(sk):
    for _ in range(2):
      _check(wl, A.sample(s, rng, "sm_86", k))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(6))
def test_more_sampled_schedules_match_numpy(seed):
  rng = np.random.default_rng(100 + seed)
  for name in sorted(WORKLOADS):
    wl = WORKLOADS[name]()
    cands = A.sample_population(generate_sketches(wl.outputs), 2, rng, "sm_80")
    assert cands
    for c in cands: _check(wl, c, "sm_80")


def test_samples_respect_the_target_limits():
  wl = W.matmul(1024, 1024, 1024)
  (sk,) = generate_sketches(wl.outputs)
  tgt = Target("sm_86")
  rng = np.random.default_rng(3)
  for c in A.sample_population([sk], 12, rng, tgt):
    prog = c.schedule.lower()
    (k,) = prog.kernels
    threads = math.prod(int(x) for x in k.block)
    assert 32 <= threads <= 1024
    assert math.prod(c.values[v] for v in sk.vthreads["C"]) <= 8
    smem = sum(int(b.size.arg) * 4 for b in k.allocs if b.scope == "shared")
    assert smem <= tgt.search_shared_bytes
    assert sum(int(b.size.arg) for b in k.allocs if b.scope == "local") <= tgt.max_registers_per_thread


def test_no_search_offers_a_register_tile_beyond_a_threads_registers():
  """A program whose thread-local buffers take more than the target's registers per thread (a 16 x 16 float
  accumulator, or 8 x 16 in each of 2 vthreads: 256 words) is no candidate of any search, with the reason, and the
  sketch's formulas (Felix's rounding, the learned strategies' pre-filter) refuse the same points; half the tile
  (128 words) is a candidate and passes the formulas."""
  from minicomp.search.features.formulas import SketchFormulas
  (sk,) = generate_sketches(W.matmul(256, 256, 64).outputs)
  tgt = Target("sm_86")
  base = {"C_local_k_1": 8, "C_local_k_2": 1, "A_shared_vec": 1, "B_shared_vec": 1}
  tile = lambda i, j: {**base, **dict(zip(sk.tiles[0].vars, i)), **dict(zip(sk.tiles[1].vars, j))}   # noqa: E731
  over = [tile((1, 8, 4, 4), (1, 8, 4, 4)), tile((2, 8, 2, 4), (1, 8, 4, 4))]      # 256 words: 16 x 16, 2 vthreads
  fit = [tile((1, 8, 4, 4), (1, 8, 2, 4)), tile((2, 8, 2, 4), (1, 8, 2, 4))]        # 128 words
  for v in over:
    c, why = A.make_candidate(sk, v, {}, tgt)
    assert c is None and "256 registers per thread" in why and "C_local[256]" in why, why
  for v in fit:
    c, why = A.make_candidate(sk, v, {}, tgt)
    assert c is not None, why
  assert SketchFormulas(sk).valid(over + fit, tgt).tolist() == [False, False, True, True]
  assert A.local_words([(256, 4), (3, 2), (2, 8)]) == 256 + 3 + 4 and A.local_words([]) == 0


def test_population_is_distinct_deterministic_and_skips_measured():
  sk = generate_sketches(W.matmul(64, 48, 32).outputs)
  a = A.sample_population(sk, 10, np.random.default_rng(5))
  b = A.sample_population(sk, 10, np.random.default_rng(5))
  assert [c.key for c in a] == [c.key for c in b]
  assert len({c.key for c in a}) == len(a) == 10
  c = A.sample_population(sk, 10, np.random.default_rng(5), exclude={x.key for x in a})
  assert not {x.key for x in a} & {x.key for x in c}


def test_impossible_sketch_raises_instead_of_looping():
  (sk,) = generate_sketches(W.matmul(256, 256, 64).outputs)
  tiny = Target("sm_86", max_shared_bytes_per_block=64)     # no A/B tile fits in 64 bytes of shared memory
  with pytest.raises(A.AnnotationError, match="no valid schedule in 20 draws"):
    A.sample(sk, np.random.default_rng(0), tiny, max_tries=20)


def test_user_rule_is_used():
  class Serial(SketchRule):
    """A rule that keeps elementwise outputs serial in one thread (for the test only)."""
    name = "serial_output"

    def condition(self, ctx, s, i, info):
      st = s.state.stages[i]
      return Decision.APPLY if st.name in s.state.outputs and not st.tensor.reduce_axes else Decision.SKIP

    def apply(self, ctx, s, i, info):
      s, info = s.copy(), info.copy()
      name = s.state.stages[i].name
      s.fuse(name, *s.axis(name))
      s.bind(name, s.loops(name)[0], "blockIdx.x")
      info.applied.append("serial_output")
      return [(s, i - 1, info)]

  wl = W.broadcast_chain(3, 5, 7)
  n_before = len(generate_sketches(wl.outputs))
  register_rule(Serial(), before="always_inline")
  try:
    sk = generate_sketches(wl.outputs)
  finally:
    DEFAULT_RULES[:] = [r for r in DEFAULT_RULES if r.name != "serial_output"]
  assert len(sk) == n_before + 1 and any("serial_output" in s.rules for s in sk)
  extra = next(s for s in sk if "serial_output" in s.rules)
  _check(wl, A.sample(extra, np.random.default_rng(0)))


def test_looping_rule_is_stopped():
  class Loop(SketchRule):
    name = "loop"
    def condition(self, ctx, s, i, info): return Decision.APPLY_AND_SKIP_REST
    def apply(self, ctx, s, i, info): return [(s, i, info)]
  with pytest.raises(SketchError, match="a rule loops"):
    generate_sketches(W.row_sum(4, 64).outputs, rules=[Loop()])
