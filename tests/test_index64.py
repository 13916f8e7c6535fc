"""64-bit indexing (docs/lowering.md, "Index type"): a kernel indexes with int32 when every index
provably fits, with long long otherwise. The int32 sources stay byte-identical to what the emitter
wrote before int64 existed; forced int64 kernels match numpy on the simulator; kernels over 2^31 or
more elements compile with 64-bit indices."""
import hashlib
import re

import numpy as np
import pytest

import minicomp as mc
from minicomp import workloads as W
from minicomp.codegen.cuda import emit_cuda
from minicomp.codegen.kernel import build
from minicomp.codegen.nvrtc import compile_cuda
from minicomp.codegen.simulator import build_simulator
from minicomp.errors import MinicompError
from minicomp.graph.schedules import default_schedule
from minicomp.ir.dag import ComputeDAG
from minicomp.ir.lower import force_index64, lower
from minicomp.search.static.estimate import estimate
from minicomp.search.strategies.gensor import construct


def softmax():
  """Row-fused softmax: two shuffle cross-thread reductions per block."""
  wl = W.softmax(12, 40); s = mc.Schedule(wl.outputs)
  _, ji = s.split("softmax", "j", 32)
  s.bind("softmax", "i", "blockIdx.x"); s.bind("softmax", ji, "threadIdx.x")
  for r in ("rowmax", "expsum"):
    s.compute_at(r, "softmax", "i")
    _, ki = s.split(r, "k", 32); s.cross_thread_reduce(r, ki, "shuffle")
  return wl, s


def row_sum_tree():
  """A shared-memory tree reduction, one block per row."""
  wl = W.row_sum(16, 100); s = mc.Schedule(wl.outputs)
  _, ki = s.split("rowsum", "k", 32)
  s.bind("rowsum", "i", "blockIdx.x"); s.cross_thread_reduce("rowsum", ki, "tree")
  return wl, s


def matmul_vthread():
  """Shared-memory tiles, register accumulators, 2x2 virtual threads, non-divisible shapes."""
  wl = W.matmul(72, 80, 33); s = mc.Schedule(wl.outputs)
  CL = s.cache_write("C", "local")
  i, j = s.axis("C")
  io, ii = s.split("C", i, 32); jo, ji = s.split("C", j, 32)
  vy, ii = s.split("C", ii, 16); vx, ji = s.split("C", ji, 16)
  ty, ii = s.split("C", ii, 4); tx, ji = s.split("C", ji, 4)
  s.reorder("C", io, jo, vy, vx, ty, tx, ii, ji)
  s.bind("C", io, "blockIdx.y"); s.bind("C", jo, "blockIdx.x")
  s.bind("C", vy, "vthread"); s.bind("C", vx, "vthread")
  s.bind("C", ty, "threadIdx.y"); s.bind("C", tx, "threadIdx.x")
  s.compute_at(CL, "C", tx)
  ci, cj, ck = s.loops(CL)
  ko, ki = s.split(CL, ck, 8)
  s.reorder(CL, ko, ki, ci, cj)
  s.pragma(CL, ko, "auto_unroll_max_step", 64)
  for X in ("A", "B"):
    XS = s.cache_read(X, "shared", [CL])
    s.compute_at(XS, CL, ko)
    _, t = s.split(XS, s.fuse(XS, *s.loops(XS)), 16)
    y, x = s.split(XS, t, 4)
    s.bind(XS, y, "threadIdx.y"); s.bind(XS, x, "threadIdx.x")
  return wl, s


def embedding():
  """A gather: the row index is read from an int64 tensor (and clamped with integer min / max)."""
  wl = W.embedding(6, 20, 16); wl.index_high = 20; s = mc.Schedule(wl.outputs)
  bo, ti = s.split("embed", s.fuse("embed", "t", "d"), 128)
  s.bind("embed", bo, "blockIdx.x"); s.bind("embed", ti, "threadIdx.x")
  return wl, s


def elementwise_float4():
  """relu(X + bias) with float4 loads and stores."""
  X = mc.placeholder((10, 64), "float32", name="X"); b = mc.placeholder((64,), "float32", name="b")
  Y = mc.compute((10, 64), lambda i, j: mc.max(X[i, j] + b[j], 0.0), name="Y")
  wl = W.Workload("bias_relu", [X, b], [Y], lambda x, b: np.maximum(x + b, 0))
  s = mc.Schedule(wl.outputs)
  bo, t, v = s.split("Y", s.fuse("Y", "i", "j"), [32, 4])
  s.bind("Y", bo, "blockIdx.x"); s.bind("Y", t, "threadIdx.x"); s.vectorize("Y", v)
  return wl, s


def floor_helpers():
  """Indices read from an int32 tensor that may be negative: mc_floordiv / mc_floormod."""
  n = 300
  X = mc.placeholder((n,), "float32", name="X"); I = mc.placeholder((n,), "int32", name="I")
  Y = mc.compute((n,), lambda i: X[I[i] % n] * 2.0 + X[(I[i] // 7) % n], name="Y")
  wl = W.Workload("floor", [I, X], [Y], lambda k, x: x[k % n] * 2 + x[(k // 7) % n])
  wl.random_inputs = lambda seed=0: [np.random.default_rng(seed).integers(-1000, 1000, n).astype(np.int32),
                                     np.random.default_rng(seed).standard_normal(n).astype(np.float32)]
  s = mc.Schedule(wl.outputs)
  bo, t = s.split("Y", "i", 64)
  s.bind("Y", bo, "blockIdx.x"); s.bind("Y", t, "threadIdx.x")
  return wl, s


SCHEDULES = [softmax, row_sum_tree, matmul_vthread, embedding, elementwise_float4, floor_helpers]

# sha256 of each schedule's CUDA source, recorded before the int64 path existed (matmul_vthread's re-recorded on
# 2026-12-01: its two tile fetches now share one pair of barriers and are staged through registers, docs/lowering.md)
INT32_SHA256 = {
  "softmax": "72a05913278f133abdc5d16d08e0c10e25edd47b5442e7d5cfcbefe772e4cb56",
  "row_sum_tree": "9ba534dd0ae80ba22515d0a56f19eacd46136104f82691110b9ce08a97c89781",
  "matmul_vthread": "3cfbd5210636a63de6cd70c10fa9a60a7be6c41154b10c6e569f4e7469118c73",
  "embedding": "07bb5d6259fb56295a2948496b31749c1b134930105aeb549a7f4b5b8eeb76db",
  "elementwise_float4": "5b86389f91558001b493f062e3655193a41dbf54abc12672cfc373c548e97096",
  "floor_helpers": "0b3b463e9f913f6cf3a8906df708ab19c76cb86f0373d693b08242eb75effd8d",
}


@pytest.mark.parametrize("make", SCHEDULES, ids=lambda f: f.__name__)
def test_int32_sources_are_unchanged(make):
  _, s = make()
  src = emit_cuda(lower(s.state))
  assert hashlib.sha256(src.encode()).hexdigest() == INT32_SHA256[make.__name__], src


def matmul_gensor():
  """Gensor's first construction: shared-memory tiles, register tiles, unrolled inner loops."""
  wl = W.matmul(64, 48, 40)
  return wl, construct(ComputeDAG(wl.outputs), "sm_86", seed=0).candidates[0].schedule


def conv2d_default():
  """The rule-based schedule of a padded conv2d: tiled, staged through shared memory."""
  wl = W.conv2d(1, 8, 10, 10, 16, 3, 1, 1)
  return wl, default_schedule(wl.outputs)


def _assert_int64(src: str) -> None:
  """Every index variable is long long; only the block-local helper loops of cross-thread
  reductions (mc_off, mc_w, mc_s) keep int."""
  assert re.search(r"const long long \w+ = (blockIdx|threadIdx)\.[xyz];", src), src
  assert [v for v in re.findall(r"\bint (\w+) =", src) if not v.startswith("mc_")] == [], src
  assert "(int)blockIdx" not in src and "mc_floordiv(" not in src and "mc_floormod(" not in src


@pytest.mark.parametrize("make", SCHEDULES + [matmul_gensor, conv2d_default], ids=lambda f: f.__name__)
def test_forced_int64_matches_numpy(make):
  wl, s = make()
  with force_index64():
    kern = build(s, "sm_86")
  assert [k.index_dtype for k in kern.program.kernels] == ["int64"] * len(kern.program.kernels)
  _assert_int64(kern.source)
  assert kern.source != emit_cuda(lower(s.state))   # outside the block: int32 again
  ins = wl.random_inputs(1)
  got = kern(*ins, device="cpu")
  np.testing.assert_allclose(got[0] if isinstance(got, list) else got, wl.reference(*ins), rtol=1e-4, atol=1e-4)
  assert estimate(kern, "sm_86").latency_s > 0   # the static model reads 64-bit index PTX


def _not(n):
  X = mc.placeholder((n,), "bool", name="X")
  return [mc.compute(X.shape, lambda i: ~X[i], name="Y")]


BIG = {   # 2^31 or more elements: never run here (gigabytes), only emitted and compiled
  "not_2^31+512": lambda: _not(2**31 + 512),
  "row_sum_65536x32768": lambda: W.row_sum(65536, 32768).outputs,
  "matmul_65536x32768x64": lambda: W.matmul(65536, 32768, 64).outputs,
}


@pytest.mark.parametrize("name", sorted(BIG))
def test_tensors_of_2_31_elements_index_with_int64(name):
  prog = lower(default_schedule(BIG[name]()).state)
  assert [k.index_dtype for k in prog.kernels] == ["int64"]
  src = emit_cuda(prog)
  _assert_int64(src)
  assert compile_cuda(src, "sm_86").ptx
  k = prog.kernels[0]
  ctype = {"bool": "bool", "float32": "float"}
  build_simulator(src, {k.name: [("" if b.name in k.written else "const ") + ctype[b.dtype] + "*" for b in k.params]})


def _serial_split(n, factor, threads=False):
  """An elementwise kernel over n elements, split by ``factor`` (bound to threads when asked)."""
  outs = _not(n)
  s = mc.Schedule(outs)
  o, i = s.split("Y", "i", factor)
  if threads: s.bind("Y", o, "blockIdx.x"); s.bind("Y", i, "threadIdx.x")
  return lower(s.state).kernels[0]


def test_int32_exactly_when_every_index_fits():
  assert _serial_split(2**31 - 1, 1024).index_dtype == "int32"     # indices up to 2^31 - 2
  assert _serial_split(2**31, 1024).index_dtype == "int64"         # a buffer of 2^31 elements
  # the buffer fits, but the last block's threads reach 2^31 + 255 (before their guard)
  assert _serial_split(2**31 - 1, 256, threads=True).index_dtype == "int64"
  # the buffer and every loop fit, but the guard i_0 * 1000 + i_1 reaches 2147483999
  assert _serial_split(2**31 - 1, 1000).index_dtype == "int64"


def test_beyond_what_a_launch_can_address_raises():
  with pytest.raises(MinicompError, match="grid"):   # 2^32 blocks of 256 threads
    build(default_schedule(_not(2**40)), "sm_86")
  s = mc.Schedule(_not(2**64))                          # a serial kernel: more than int64 can index
  with pytest.raises(MinicompError, match="64-bit"):
    lower(s.state)
