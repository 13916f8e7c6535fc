"""Schedule steps: JSON round trip, replay determinism, state printing, and bad schedules."""
import json

import numpy as np
import pytest

import minicomp as mc
from minicomp import workloads as W
from minicomp.ir.steps import Step, steps_from_json


def tiled(wl, tile=32, thread=4):
  import test_workloads as T
  return T.mm_tiled_shared(wl, tile=tile, thread=thread)


def test_json_round_trip_and_byte_identical_replay():
  wl = W.matmul(70, 50, 33, bias_relu=True)
  s = tiled(wl)
  text = s.to_json()
  steps = steps_from_json(text)
  assert [st.to_json() for st in steps] == json.loads(text)
  s2 = mc.Schedule.from_json(wl.outputs, text)
  assert s2.to_json() == text
  k1, k2 = mc.build(s, "sm_80"), mc.build(s2, "sm_80")
  assert k1.source == k2.source
  # and a third, rebuilt from scratch, is identical too (determinism)
  assert mc.build(tiled(W.matmul(70, 50, 33, bias_relu=True)), "sm_80").source == k1.source


def test_symbolic_split_factor_round_trip_and_symbolic_extents():
  wl = W.matmul(64, 64, 64)
  s = mc.Schedule(wl.outputs)
  f = mc.var("f")
  i, j = s.axis("C")
  io, ii = s.split("C", i, f)
  d = json.loads(s.to_json())
  assert d[0]["factors"] == [{"var": "f"}]
  s2 = mc.Schedule.from_json(wl.outputs, s.to_json())
  assert s2.state.steps[0].factors == (f,)
  ext = s.state.stage("C").leaf_extents()
  assert ext[ii] == f
  from minicomp.ir.evaluate import evaluate
  assert evaluate(ext[io], {"f": 16}) == 4 and evaluate(ext[io], {"f": 5}) == 13


def test_state_print_lists_loops():
  wl = W.matmul(64, 64, 64)
  s = mc.Schedule(wl.outputs)
  io, ii = s.split("C", "i", 8)
  s.bind("C", io, "blockIdx.x")
  text = str(s)
  assert "for i.0 in 0..8  @blockIdx.x" in text and "for i.1 in 0..8" in text


def test_print_shows_the_extents_bound_inference_gives():
  """A stage computed inside another prints the region one iteration of its attach loop needs, as lowering builds
  it (the 4 x 4 tile of a thread, not the 64 x 48 matrix); ``str(s.state)`` keeps the extents as scheduled."""
  wl = W.matmul(64, 48, 40)
  s = mc.Schedule(wl.outputs)
  cl = s.cache_write("C", "local")
  i0, i1 = s.split("C", "ax0", 4)
  j0, j1 = s.split("C", "ax1", 4)
  s.reorder("C", i0, j0, i1, j1)
  s.compute_at(cl, "C", j0)
  s.unroll(cl, "i")
  assert "for i in 0..4  @unroll" in str(s) and "for j in 0..4\n" in str(s)
  assert "for i in 0..64  @unroll" in str(s.state) and "for j in 0..48\n" in str(s.state)
  assert [b.size.arg for b in s.lower().kernels[0].allocs] == [16]        # what the print says: 4 x 4 registers


def test_print_of_a_schedule_lowering_refuses_shows_the_extents_as_scheduled():
  A = mc.placeholder((64, 32), name="A")
  B = mc.compute((64, 32), lambda i, j: A[i, j] * 2, name="B")
  C = mc.compute((64, 32), lambda i, j: B[i, 31 - j] + 1, name="C")
  s = mc.Schedule([B, C])
  s.compute_at(B, C, "j")                  # an output computed where it is not read elementwise: lowering refuses
  with pytest.raises(mc.ScheduleError, match="not elementwise"):
    s.lower()
  assert str(s) == str(s.state) and "Stage B (at C.j)\n  for i in 0..64\n    for j in 0..32" in str(s)


def test_steps_return_new_names():
  wl = W.matmul(64, 64, 64)
  s = mc.Schedule(wl.outputs)
  assert s.split("C", "i", [4, 2]) == ("i.0", "i.1", "i.2")
  assert s.fuse("C", "i.1", "i.2") == "i.1.i.2.fused"
  assert s.cache_read("A", "shared", ["C"]) == "A.shared"
  assert s.loops("C") == ["i.0", "i.1.i.2.fused", "j", "k"]


# ---------------------------------------------------------------------------------------------
# bad schedules raise ScheduleError naming the step

def _mm():
  wl = W.matmul(64, 48, 40)
  return wl, mc.Schedule(wl.outputs)


@pytest.mark.parametrize("factor", [0, -3, 2.5, True])
def test_bad_split_factor(factor):
  _, s = _mm()
  with pytest.raises(mc.ScheduleError, match=r"step 0 .*split"):
    s.split("C", "i", factor)


def test_split_unknown_loop_names_the_loops():
  _, s = _mm()
  with pytest.raises(mc.ScheduleError, match=r"has no loop 'q'; its loops are \['i', 'j', 'k'\]"):
    s.split("C", "q", 4)


def test_bind_reduction_axis_without_cross_thread_reduction():
  _, s = _mm()
  s.split("C", "i", 8)
  with pytest.raises(mc.ScheduleError, match=r"step 1 .*reduction loop.*cross_thread_reduce"):
    s.bind("C", "k", "threadIdx.x")


def test_too_many_threads_per_block():
  _, s = _mm()
  f = s.fuse("C", "i", "j")
  fo, fi = s.split("C", f, 2048)
  s.bind("C", fo, "blockIdx.x")
  s.bind("C", fi, "threadIdx.x")
  with pytest.raises(mc.ScheduleError, match=r"2048 threads.*allows 1024.*step 3 .*threadIdx.x"):
    mc.build(s, "sm_80")


def test_shared_memory_over_limit():
  wl = W.matmul(256, 256, 256)
  s = mc.Schedule(wl.outputs)
  i, j = s.axis("C")
  io, ii = s.split("C", i, 128)
  s.bind("C", io, "blockIdx.x")
  AS = s.cache_read("A", "shared", ["C"])
  s.cache_read("B", "shared", ["C"])
  s.compute_at(AS, "C", io)    # A tile 128 x 256 floats = 128 KiB: past sm_86's opt-in 99 KiB
  with pytest.raises(mc.ScheduleError, match=r"131072 bytes of shared memory \(A_shared\); sm_86 allows 101376.*cache_read"):
    mc.build(s, "sm_86")


def test_compute_at_non_ancestor():
  wl = W.softmax(8, 16)
  s = mc.Schedule(wl.outputs)
  with pytest.raises(mc.ScheduleError, match=r"step 0 .*compute_at.*does not consume"):
    s.compute_at("expsum", "rowmax", "i")


def _cell(shift: bool = False, other_reader: bool = False):
  """An LSTM cell's two outputs: c, and h = sigmoid(b) * tanh(c) (read one element off with ``shift``); with
  ``other_reader``, a third output reads c too."""
  A, B = mc.placeholder((3, 50), name="A"), mc.placeholder((3, 50), name="B")
  C = mc.compute((3, 50), lambda i, j: mc.tanh(A[i, j]) * B[i, j] + 1.0, name="c")
  H = mc.compute((3, 50), lambda i, j: mc.sigmoid(B[i, j]) * mc.tanh(C[i, (j + 1) % 50 if shift else j]), name="h")
  outs = [C, H] + ([mc.compute((3, 50), lambda i, j: C[i, j] * 2.0, name="d")] if other_reader else [])
  s = mc.Schedule(outs)
  for t in s.state.outputs:
    if t == "c": continue
    f = s.fuse(t, *s.axis(t))
    bo, ti = s.split(t, f, 32)
    s.bind(t, bo, "blockIdx.x"); s.bind(t, ti, "threadIdx.x")
  return s, (np.random.default_rng(0).standard_normal((3, 50)).astype(np.float32),
             np.random.default_rng(1).standard_normal((3, 50)).astype(np.float32))


def test_an_output_computed_in_its_elementwise_reader_is_one_kernel():
  s, (a, b) = _cell()
  s.compute_at("c", "h", "i.j.fused.1")
  k = mc.build(s, "sm_86")
  assert len(k.plan.launches) == 1
  c, h = k(a, b, device="cpu")
  c_ref = np.tanh(a) * b + 1
  np.testing.assert_allclose(c, c_ref, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(h, 1 / (1 + np.exp(-b)) * np.tanh(c_ref), rtol=1e-5, atol=1e-6)


def test_an_output_computed_elsewhere_is_refused():
  """Wherever some element would be computed by another thread than its reader's, or not at all: an error naming
  the step, never a kernel."""
  s, _ = _cell(shift=True)
  s.compute_at("c", "h", "i.j.fused.1")
  with pytest.raises(mc.ScheduleError, match=r"compute_at.*\(an output of the DAG\): 'h' reads it at .*not elementwise"):
    mc.build(s, "sm_86")
  s, _ = _cell(other_reader=True)
  s.compute_at("c", "h", "i.j.fused.1")
  with pytest.raises(mc.ScheduleError, match=r"compute_at.*'h' must be its only reader"):
    mc.build(s, "sm_86")
  s, _ = _cell()
  s.compute_at("c", "h", "i.j.fused.0")
  with pytest.raises(mc.ScheduleError, match=r"compute_at.*outside a thread loop"):
    mc.build(s, "sm_86")
  wl = W.softmax(8, 16)
  s = mc.Schedule(wl.outputs)
  with pytest.raises(mc.ScheduleError, match=r"compute_inline softmax: 'softmax' is an output"):
    s.compute_inline("softmax")


def test_vthread_extent_limit():
  _, s = _mm()
  io, ii = s.split("C", "i", 16)
  s.bind("C", ii, "vthread")
  with pytest.raises(mc.ScheduleError, match=r"vthread.*16 > 8.*step 1"):
    mc.build(s, "sm_80")


def test_other_bad_steps():
  wl, s = _mm()
  with pytest.raises(mc.ScheduleError, match="not a reduction loop"):
    s.cross_thread_reduce("C", "i")
  with pytest.raises(mc.ScheduleError, match="adjacent"):
    s.fuse("C", "i", "k")
  with pytest.raises(mc.ScheduleError, match="placeholder"):
    s.compute_inline("A")
  with pytest.raises(mc.ScheduleError, match="output"):
    s.compute_at("C", "C", "i")
  with pytest.raises(mc.ScheduleError, match="no stage named"):
    s.split("Z", "i", 2)
  with pytest.raises(mc.ScheduleError, match="unknown annotation"):
    s.bind("C", "i", "warpIdx.x")
  with pytest.raises(mc.ScheduleError, match="a reduction cannot be inlined"):
    wl2 = W.softmax(4, 4); s2 = mc.Schedule(wl2.outputs); s2.compute_inline("rowmax")
  s.split("C", "i", 4)
  with pytest.raises(mc.ScheduleError, match="before any other step"):
    s.cache_write("C", "local")
  with pytest.raises(mc.ScheduleError, match="unknown step"):
    Step.from_json({"step": "teleport"})
  assert len(s.steps) == 1   # failed steps are not recorded


def test_block_binding_only_on_kernel_root():
  wl = W.softmax(8, 64)
  s = mc.Schedule(wl.outputs)
  s.compute_at("rowmax", "softmax", "i")
  with pytest.raises(mc.ScheduleError, match=r"step 0 .*compute_at.*consumer 'expsum' is computed outside loop softmax.i"):
    mc.build(s, "sm_80")
  s.compute_at("expsum", "softmax", "i")
  s.bind("rowmax", "i", "blockIdx.x")
  with pytest.raises(mc.ScheduleError, match="only the kernel's root stage may bind blockIdx"):
    mc.build(s, "sm_80")


def test_bad_inputs_to_kernel():
  wl, s = _mm()
  k = mc.build(s, "sm_80")
  a, b = wl.random_inputs()
  with pytest.raises(mc.RuntimeLaunchError, match="expected shape"):
    k(a.T, b)
  with pytest.raises(mc.RuntimeLaunchError, match="expected dtype float32"):
    k(a.astype(np.float64), b)
  with pytest.raises(mc.RuntimeLaunchError, match="takes 2 inputs"):
    k(a)


def test_te_errors():
  A = mc.placeholder((4, 4), name="A")
  with pytest.raises(mc.TEError, match="has 2 dims"):
    A[1]
  k = mc.reduce_axis(4, "k")
  with pytest.raises(mc.TEError, match="top-level"):
    mc.compute((4,), lambda i: mc.sum(A[i, k], axis=k) + 1.0, name="bad")
  with pytest.raises(mc.TEError, match="positive"):
    mc.placeholder((0, 3))
  B = mc.compute((4,), lambda i: A[i, i], name="A")
  with pytest.raises(mc.TEError, match="unique"):
    mc.ComputeDAG([B])


# ---------------------------------------------------------------------------------------------
# symbolic schedules

def _symbolic_matmul():
  wl = W.matmul(128, 96, 64)
  s = mc.Schedule(wl.outputs)
  f1, f2, f3, kf = mc.var("f1"), mc.var("f2"), mc.var("f3"), mc.var("kf")
  CL = s.cache_write("C", "local")
  i, j = s.axis("C")
  io, ii = s.split("C", i, f1); jo, ji = s.split("C", j, f2)
  ty, ii = s.split("C", ii, f3)
  s.reorder("C", io, jo, ty, ii, ji)
  s.bind("C", io, "blockIdx.y"); s.bind("C", jo, "blockIdx.x"); s.bind("C", ty, "threadIdx.y")
  s.compute_at(CL, "C", ty)
  ci, cj, ck = s.loops(CL)
  ko, ki = s.split(CL, ck, kf)
  s.reorder(CL, ko, ki, ci, cj)
  AS = s.cache_read("A", "shared", [CL])
  s.compute_at(AS, CL, ko)
  return wl, s


def _loop_extents(stmt, env):
  """Extents (> 1) of every loop in program order, evaluated with ``env``."""
  from minicomp.ir.evaluate import evaluate
  from minicomp.ir.loop import For, If, Seq
  out = []

  def go(x):
    if isinstance(x, For):
      e = int(evaluate(x.extent, env))
      if e > 1: out.append(e)
      go(x.body)
    elif isinstance(x, Seq): [go(y) for y in x.stmts]
    elif isinstance(x, If): go(x.then)
  go(stmt)
  return out


def test_symbolic_program_agrees_with_concrete_lowering():
  from minicomp.ir.evaluate import evaluate
  wl, s = _symbolic_matmul()
  assert s.params() == ["f1", "f2", "f3", "kf"]
  sym = s.lower()
  assert not isinstance(sym.kernels[0].grid[0], int)   # grid is an expression of f1, f2
  with pytest.raises(mc.ScheduleError, match="symbolic"):
    mc.build(s, "sm_80")
  rng = np.random.default_rng(0)
  for _ in range(12):
    vals = {"f1": int(rng.choice([8, 16, 32])), "f2": int(rng.choice([4, 8, 12])), "f3": int(rng.choice([2, 4])),
            "kf": int(rng.choice([4, 8, 16]))}
    conc_s = s.substitute(vals)
    conc = conc_s.lower()
    ks, kc = sym.kernels[0], conc.kernels[0]
    assert tuple(int(evaluate(mc.const(0) + d, vals)) for d in ks.grid) == kc.grid
    assert tuple(int(evaluate(mc.const(0) + d, vals)) for d in ks.block) == kc.block
    assert [int(evaluate(b.size, vals)) for b in ks.allocs] == [int(b.size.arg) for b in kc.allocs]
    assert _loop_extents(ks.body, vals) == _loop_extents(kc.body, vals)
  kern = mc.build(conc_s, "sm_80")
  ins = wl.random_inputs()
  np.testing.assert_allclose(kern(*ins), wl.reference(*ins), rtol=1e-4, atol=1e-4)
  with pytest.raises(mc.ScheduleError, match="no value"):
    s.substitute({"f1": 4})


def test_stage_inside_a_narrower_thread_loop_runs_only_on_those_threads():
  """C.local is computed inside C's threadIdx.x loop of extent 4 while the block has 8 threads
  (B.shared's cooperative fetch uses all 8). Threads 4..7 must not compute C.local: they would
  read B_shared past its 16 elements (k_1 * 4 + threadIdx.x up to 19)."""
  from minicomp.ir.loop import For, If, Seq, Store
  wl = W.matmul(16, 16, 16)
  s = mc.Schedule(wl.outputs)
  C = wl.outputs[0]
  CL = s.cache_write(C, "local")
  i, j = s.axis(C)
  io, ii = s.split(C, i, 4); jo, ji = s.split(C, j, 4)
  s.reorder(C, io, jo, ii, ji)
  s.bind(C, io, "blockIdx.y"); s.bind(C, jo, "blockIdx.x"); s.bind(C, ji, "threadIdx.x")
  s.compute_at(CL, C, ji)
  ko, ki = s.split(CL, s.loops(CL)[2], 4)
  s.reorder(CL, ko, ki, *s.loops(CL)[:2])
  BS = s.cache_read("B", "shared", [CL])
  s.compute_at(BS, CL, ko)
  _, t = s.split(BS, s.fuse(BS, *s.loops(BS)), 8)
  s.bind(BS, t, "threadIdx.x")
  (k,) = s.lower().kernels
  assert k.block[0] == 8
  found = []

  def walk(st, conds):
    if isinstance(st, Seq):
      for x in st.stmts: walk(x, conds)
    elif isinstance(st, For): walk(st.body, conds)
    elif isinstance(st, If): walk(st.then, conds + [repr(st.cond)])
    elif isinstance(st, Store) and st.buffer.name in ("C_local", "B_shared"): found.append((st.buffer.name, conds))
  walk(k.body, [])
  assert {n for n, _ in found} == {"C_local", "B_shared"}
  for name, conds in found:
    guarded = any("threadIdx.x" in c for c in conds)
    assert guarded == (name == "C_local"), (name, conds)     # the fetch runs on all 8 threads
  kern = mc.build(s, "sm_86")
  ins = wl.random_inputs(1)
  np.testing.assert_allclose(kern(*ins, device="cpu"), wl.reference(*ins), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("inner", [1, 2])
def test_a_register_tile_read_with_gaps_keeps_only_the_values_read(inner):
  """Thread g computes rows g + 8 r + 16 m (r < 2, m < 2) and columns t + 32 c (c < inner) of a matmul: its
  accumulator tile (cache_write local) holds those 4 x inner values, not the 25 x (32 inner - 31) of their box
  (ir/lower.py, a strided region), and the kernel computes numpy's product."""
  wl = W.matmul(64, 64, 32)
  C = wl.stages["C"]
  s = mc.Schedule([C])
  CL = s.cache_write(C, "local")
  i, j = s.axis(C)
  io, m, r, g = s.split(C, i, [2, 2, 8])
  jo, c, t = s.split(C, j, [inner, 32 // inner])
  s.reorder(C, io, jo, g, t, m, r, c)
  s.bind(C, s.fuse(C, io, jo), "blockIdx.x")
  tx = s.fuse(C, g, t)
  s.bind(C, tx, "threadIdx.x")
  s.compute_at(CL, C, tx)
  k = mc.build(s, target="sm_86")
  assert f"float C_local[{4 * inner}];" in k.source
  a, b = wl.random_inputs()
  np.testing.assert_allclose(k(a, b, device="cpu"), a @ b, rtol=1e-4, atol=1e-4)


def test_storage_align_of_a_root_stage_is_refused():
  """A root stage's global buffer is dense: padded strides would index past its end (a wrong kernel)."""
  import minicomp as mc
  A = mc.placeholder((64, 32), name="A")
  B = mc.compute((64, 32), lambda i, j: A[i, j] * 2, name="B")
  s = mc.Schedule([B])
  s.storage_align(B, 0, 32, 1)
  with pytest.raises(mc.ScheduleError, match="storage_align B: a root stage"):
    s.lower()


@pytest.mark.parametrize("text, match", [("not json", "not JSON"), ('{"step": "split"}', "must be a JSON list"),
                                         ('[3]', "step 0 is not a JSON object"),
                                         ('[{"step": "split", "stage": "C"}]', "step 0 .*missing or malformed field")])
def test_malformed_steps_are_a_schedule_error(text, match):
  A = mc.placeholder((8,), name="A")
  C = mc.compute((8,), lambda i: A[i] + 1.0, name="C")
  with pytest.raises(mc.ScheduleError, match=match):
    mc.Schedule.from_json([C], text)
