"""The loop-IR reference interpreter (minicomp/ir/interp.py), a second oracle beside the CPU simulator.

Lowered programs of several workloads, each under the rule-based default schedule, Gensor's construction
and two random samples of the sketch space, plus a few hand-written schedules (2-D thread blocks with
virtual threads, a shared-memory tree reduction per row of threads, a serial multi-kernel program,
int64 indices, negative floor division), must give numpy's answer in the interpreter; a selection of them
(each statement form at least once) must also agree with the CPU simulator of the emitted CUDA C. Then:
broken programs (a barrier removed, an index shifted, a guard dropped, a barrier under a thread-dependent
branch) are caught, and a statement the interpreter does not know is named. Shapes are tiny: the
interpreter runs about ten thousand statements a second.
"""
from dataclasses import dataclass, replace

import numpy as np
import pytest

import minicomp as mc
from minicomp import workloads as W
from minicomp.codegen.kernel import build
from minicomp.errors import SimulatorError
from minicomp.graph.schedules import default_schedule
from minicomp.ir.dag import ComputeDAG
from minicomp.ir.expr import Expr, var
from minicomp.ir.interp import run_program
from minicomp.ir.loop import For, If, Seq, Store, Sync
from minicomp.ir.lower import force_index64, lower
from minicomp.ir.ops import Op
from minicomp.search.annotate import sample
from minicomp.search.sketch import generate_sketches
from minicomp.search.strategies.gensor import construct

TOL = dict(rtol=1e-4, atol=1e-4)
WORKLOADS = {
  "matmul": lambda: W.matmul(8, 8, 8), "batch_matmul": lambda: W.batch_matmul(2, 8, 8, 8),
  "conv2d": lambda: W.conv2d(1, 2, 5, 5, 4, 3, 1, 1),
  "depthwise_conv2d": lambda: W.depthwise_conv2d(1, 2, 5, 5, 3, 1, 1),
  "softmax": lambda: W.softmax(4, 40), "layernorm": lambda: W.layernorm(4, 40), "row_sum": lambda: W.row_sum(4, 100),
  "embedding": lambda: W.embedding(6, 20, 16), "broadcast_chain": lambda: W.broadcast_chain(2, 3, 8)}
# Gensor's construction costs about a second per tiled workload even with 2 walks: matmul and conv2d stand for the rest
GENSOR = {"matmul", "conv2d", "softmax", "layernorm", "row_sum", "embedding", "broadcast_chain"}
# also run on the simulator (a g++ build each, about 0.4 s cold): shared tiles and barriers, vthreads, vectorized
# loops (float4 / float2 in the CUDA C), guards, warp-shuffle reductions, a gather
SIMULATED = {("matmul", "default"), ("matmul", "gensor"), ("batch_matmul", "sample0"), ("conv2d", "sample0"),
             ("softmax", "default"), ("embedding", "default")}


def make_schedule(wl, how: str):
  if how == "default": return default_schedule(wl.outputs)
  if how == "gensor": return construct(ComputeDAG(wl.outputs), "sm_86", seed=0, walks=2).candidates[0].schedule
  seed = int(how.removeprefix("sample"))
  sketches = generate_sketches(ComputeDAG(wl.outputs), "sm_86")
  return sample(sketches[seed % len(sketches)], np.random.default_rng(seed), "sm_86").schedule


def check(wl, schedule, simulate: bool, seed: int = 0):
  ins = wl.random_inputs(seed)
  got = run_program(lower(schedule.state), *ins)
  np.testing.assert_allclose(got, wl.reference(*ins), **TOL)
  if simulate: np.testing.assert_allclose(got, build(schedule, "sm_86")(*ins, device="cpu"), **TOL)


CASES = [pytest.param(w, how, id=f"{w}-{how}") for w in WORKLOADS
         for how in ("default",) + (("gensor",) if w in GENSOR else ()) + ("sample0", "sample1")]


@pytest.mark.parametrize("name,how", CASES)
def test_matches_numpy_and_simulator(name, how):
  wl = WORKLOADS[name]()
  check(wl, make_schedule(wl, how), (name, how) in SIMULATED)


# ---- hand-written schedules for forms the generated ones above do not reach

def matmul_2d_vthread():
  """threadIdx.y and .x, 2x2 virtual threads, register accumulators, shared tiles fetched by the whole block."""
  wl = W.matmul(10, 12, 9); s = mc.Schedule(wl.outputs)
  CL = s.cache_write("C", "local")
  i, j = s.axis("C")
  io, ii = s.split("C", i, 8); jo, ji = s.split("C", j, 8)
  vy, ii = s.split("C", ii, 4); vx, ji = s.split("C", ji, 4)
  ty, ii = s.split("C", ii, 2); tx, ji = s.split("C", ji, 2)
  s.reorder("C", io, jo, vy, vx, ty, tx, ii, ji)
  s.bind("C", io, "blockIdx.y"); s.bind("C", jo, "blockIdx.x")
  s.bind("C", vy, "vthread"); s.bind("C", vx, "vthread")
  s.bind("C", ty, "threadIdx.y"); s.bind("C", tx, "threadIdx.x")
  s.compute_at(CL, "C", tx)
  ci, cj, ck = s.loops(CL)
  ko, ki = s.split(CL, ck, 4)
  s.reorder(CL, ko, ki, ci, cj)
  for X in ("A", "B"):
    XS = s.cache_read(X, "shared", [CL])
    s.compute_at(XS, CL, ko)
    _, t = s.split(XS, s.fuse(XS, *s.loops(XS)), 4)
    y, x = s.split(XS, t, 2)
    s.bind(XS, y, "threadIdx.y"); s.bind(XS, x, "threadIdx.x")
  return wl, s


def row_sum_tree_2d():
  """A shared-memory tree reduction over threadIdx.x, two rows per block on threadIdx.y."""
  wl = W.row_sum(6, 40); s = mc.Schedule(wl.outputs)
  io, ii = s.split("rowsum", "i", 2)
  _, ki = s.split("rowsum", "k", 16)
  s.bind("rowsum", io, "blockIdx.x"); s.bind("rowsum", ii, "threadIdx.y")
  s.cross_thread_reduce("rowsum", ki, "tree")
  return wl, s


def softmax_serial():
  """No steps: three serial kernels, the row statistics in global temporaries between them."""
  wl = W.softmax(3, 5)
  return wl, mc.Schedule(wl.outputs)


def floor_negative():
  """Indices read from an int32 tensor that may be negative: floor // and % (not C's truncation)."""
  n = 40
  X = mc.placeholder((n,), "float32", name="X"); I = mc.placeholder((n,), "int32", name="I")
  Y = mc.compute((n,), lambda i: X[I[i] % n] * 2.0 + X[(I[i] // 7) % n], name="Y")
  wl = W.Workload("floor", [I, X], [Y], lambda k, x: x[k % n] * 2 + x[(k // 7) % n])
  rng = np.random.default_rng
  wl.random_inputs = lambda seed=0: [rng(seed).integers(-1000, 1000, n).astype(np.int32),
                                     rng(seed + 1).standard_normal(n).astype(np.float32)]
  s = mc.Schedule(wl.outputs)
  bo, t = s.split("Y", "i", 16)
  s.bind("Y", bo, "blockIdx.x"); s.bind("Y", t, "threadIdx.x")
  return wl, s


@pytest.mark.parametrize("make", [matmul_2d_vthread, row_sum_tree_2d, softmax_serial, floor_negative],
                         ids=lambda f: f.__name__)
def test_hand_written_schedules(make):
  wl, s = make()
  check(wl, s, simulate=make is not softmax_serial)


def test_int64_indices():
  wl = W.matmul(8, 8, 8); ins = wl.random_inputs(0)
  with force_index64():
    prog = lower(default_schedule(wl.outputs).state)
  assert [k.index_dtype for k in prog.kernels] == ["int64"]
  np.testing.assert_allclose(run_program(prog, *ins), wl.reference(*ins), **TOL)
  by_name = {b.name: a for b, a in zip(prog.inputs, ins)}
  np.testing.assert_allclose(run_program(prog, by_name), wl.reference(*ins), **TOL)


# ---- broken programs

def edit(s, fn):
  """Rebuild statement ``s`` bottom-up with ``fn(stmt) -> stmt`` applied to every statement."""
  if isinstance(s, Seq): s = Seq(tuple(edit(x, fn) for x in s.stmts))
  elif isinstance(s, For): s = replace(s, body=edit(s.body, fn))
  elif isinstance(s, If): s = replace(s, then=edit(s.then, fn))
  return fn(s)


def edited(prog, fn):
  return replace(prog, kernels=[replace(k, body=edit(k.body, fn)) for k in prog.kernels])


def tiled_matmul():
  """Two k-steps of shared tiles: barriers before each fetch (write after read) and after it (read after write)."""
  wl = W.matmul(8, 8, 16)
  prog = lower(default_schedule(wl.outputs).state)
  return wl, prog, wl.random_inputs(0)


def test_removed_barrier_is_a_race():
  wl, prog, ins = tiled_matmul()
  np.testing.assert_allclose(run_program(prog, *ins), wl.reference(*ins), **TOL)
  # the barrier that opens each k-step: without it, a fast thread refills a tile the others still read
  loop = [s for s in _stmts(prog.kernels[0].body) if isinstance(s, For) and isinstance(s.body, Seq)
          and isinstance(s.body.stmts[0], Sync)]
  assert len(loop) == 1
  broken = edited(prog, lambda s: replace(s, body=Seq(s.body.stmts[1:])) if s == loop[0] else s)
  with pytest.raises(SimulatorError, match=r"data race on [AB]_shared\[\d+\].*missing __syncthreads"):
    run_program(broken, *ins)
  # unchecked, the thread order of a barrier interval shows: a wrong answer
  assert not np.allclose(run_program(broken, *ins, check_races=False), wl.reference(*ins), **TOL)


def test_shifted_index_gives_a_wrong_answer():
  wl, prog, ins = tiled_matmul()

  def shift(e: Expr) -> Expr:   # A_shared[i] -> A_shared[(i + 1) % size]: in bounds, every element written
    if e.op is Op.LOAD and e.arg.name == "A_shared": return e.replace(src=((e.src[0] + 1) % e.arg.size,))
    return e.replace(src=tuple(shift(x) for x in e.src)) if e.src else e
  broken = edited(prog, lambda s: replace(s, value=shift(s.value)) if isinstance(s, Store) else s)
  assert not np.allclose(run_program(broken, *ins), wl.reference(*ins), **TOL)


def test_dropped_guard_reads_out_of_bounds():
  wl = W.softmax(4, 40)          # rows of 40 over 32 threads: guarded second pass
  prog = lower(default_schedule(wl.outputs).state)
  broken = edited(prog, lambda s: s.then if isinstance(s, If) else s)
  with pytest.raises(SimulatorError, match=r"X\[\d+\], out of bounds \(size 160\)"):
    run_program(broken, *wl.random_inputs(0), check_races=False)


def test_barrier_under_a_thread_branch_is_divergent():
  wl, prog, ins = tiled_matmul()
  # thread 0 waits at an extra barrier, the others at the next one
  broken = edited(prog, lambda s: Seq((If(var("threadIdx.x") < 1, Sync()), s)) if isinstance(s, Sync) else s)
  with pytest.raises(SimulatorError, match="divergent barrier"):
    run_program(broken, *ins)


@dataclass(frozen=True)
class Prefetch:
  """A statement form the interpreter has never heard of."""
  buffer: str


def test_unsupported_statement_is_named():
  wl, prog, ins = tiled_matmul()
  broken = edited(prog, lambda s: Seq((Prefetch("A_shared"), s)) if isinstance(s, Sync) else s)
  with pytest.raises(SimulatorError, match=r"does not support Prefetch statements: Prefetch\(buffer='A_shared'\)"):
    run_program(broken, *ins)


def _stmts(s):
  yield s
  kids = s.stmts if isinstance(s, Seq) else (s.body,) if isinstance(s, For) else (s.then,) if isinstance(s, If) else ()
  for x in kids: yield from _stmts(x)
