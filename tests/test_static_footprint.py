"""islpy data-movement analysis (Tuna's Algorithm 2 on the loop IR): every isl count checked
against a brute-force enumeration of the accessed addresses of small concrete kernels."""
from __future__ import annotations

import time

import numpy as np
import pytest

import minicomp as mc
from minicomp import workloads as W
from minicomp.ir.evaluate import evaluate
from minicomp.ir.expr import var
from minicomp.ir.loop import Comment, CrossThreadReduce, For, If, Seq, Store, Sync
from minicomp.ir.ops import Op
from minicomp.search.static.footprint import DataMovement, data_movement, analyze_program
from minicomp.search.static.footprint.isl_build import collect_accesses
from test_workloads import _row_schedule, conv_schedule, mm_inline_simple, mm_local_cache_read, mm_tiled_shared

# ---------------------------------------------------------------------------------------------
# brute force: run the loop nest for every thread at once and record every address


class Trace:
  """Every access of a kernel: (buffer, kind, {loop node: value}, hardware-index rows, addresses)."""

  def __init__(self, kernel):
    self.k = kernel
    gx, gy, gz = kernel.grid
    bx, by, bz = kernel.block
    ids = np.indices((gz, gy, gx, bz, by, bx)).reshape(6, -1)
    self.hw = ids.T                                  # rows: bz, by, bx, tz, ty, tx
    tags = ("blockIdx.z", "blockIdx.y", "blockIdx.x", "threadIdx.z", "threadIdx.y", "threadIdx.x")
    self.env0 = {t: ids[i] for i, t in enumerate(tags)}
    self.env0.update({v: self.env0[t] for v, t in kernel.bindings})
    self.n = ids.shape[1]
    self.events: list[tuple[str, str, dict, np.ndarray, np.ndarray]] = []
    self.node = 0
    self._stmt(kernel.body, dict(self.env0), np.ones(self.n, bool), {})

  def _vec(self, x) -> np.ndarray:
    return np.broadcast_to(np.asarray(x), (self.n,))

  def _record(self, buf, kind, index, env, mask, loops):
    if not mask.any(): return
    addr = self._vec(evaluate(index, env)).astype(np.int64)
    self.events.append((buf.name, kind, dict(loops), mask.copy(), addr))

  def _loads(self, e, env, mask, loops):
    # one expression reads a load once per path of select conditions however often it appears
    # (nodes are interned; the CUDA compiler does the same common-subexpression elimination)
    seen = set()

    def go(n, m, cs):
      if (n, cs) in seen: return
      seen.add((n, cs))
      if n.op is Op.SELECT:
        c = self._vec(evaluate(n.src[0], env)).astype(bool)
        go(n.src[0], m, cs); go(n.src[1], m & c, cs + (n.src[0],)); go(n.src[2], m & ~c, cs + (~n.src[0],))
        return
      if n.op is Op.LOAD: self._record(n.arg, "read", n.src[0], env, m, loops)
      for s in n.src: go(s, m, cs)
    go(e, mask, ())

  def _stmt(self, s, env, mask, loops):
    if isinstance(s, Seq):
      for x in s.stmts: self._stmt(x, env, mask, loops)
    elif isinstance(s, For):
      node = self.node
      self.node += 1
      start = self.node
      for v in range(int(s.extent.arg)):
        self.node = start
        self._stmt(s.body, {**env, s.var: v}, mask, {**loops, node: v})
    elif isinstance(s, If):
      self._loads(s.cond, env, mask, loops)
      self._stmt(s.then, env, mask & self._vec(evaluate(s.cond, env)).astype(bool), loops)
    elif isinstance(s, Store):
      self._loads(s.value, env, mask, loops)
      self._loads(s.index, env, mask, loops)
      self._record(s.buffer, "write", s.index, env, mask, loops)
    elif isinstance(s, CrossThreadReduce):     # the model of isl_build: coarse scratch traffic
      self._loads(s.value, env, mask, loops)
      bx, by = self.k.block[0], self.k.block[1]
      tx, ty, tz = var("threadIdx.x"), var("threadIdx.y"), var("threadIdx.z")
      row = tz * by + ty
      cond = self._vec(evaluate(s.cond, env)).astype(bool)
      txv = self.env0["threadIdx.x"]
      if s.method == "shuffle" and bx % 32 == 0:
        self._record(s.scratch, "write", row * (bx // 32) + tx // 32, env, mask & (txv % 32 == 0), loops)
        self._record(s.scratch, "read", row * (bx // 32), env, mask & cond, loops)
      else:
        self._record(s.scratch, "write", row * bx + tx, env, mask, loops)
        self._record(s.scratch, "read", row * bx + tx, env, mask, loops)
        self._record(s.scratch, "read", row * bx, env, mask & cond, loops)
      if s.init is not None: self._loads(s.init, env, mask & cond, loops)
      self._loads(s.index, env, mask & cond, loops)
      self._record(s.dst, "write", s.index, env, mask & cond, loops)
    else:
      assert isinstance(s, (Sync, Comment))

  # -- queries
  def select(self, name, kinds=("read", "write"), where=None):
    rows, addrs = [], []
    for b, kind, loops, mask, addr in self.events:
      if b != name or kind not in kinds or (where is not None and not where(loops)): continue
      rows.append(self.hw[mask]); addrs.append(addr[mask])
    if not rows: return np.zeros((0, 6), np.int64), np.zeros(0, np.int64)
    return np.concatenate(rows), np.concatenate(addrs)

  def count(self, name, kind):
    return len(self.select(name, (kind,))[1])

  @staticmethod
  def distinct(rows, addrs, keep=0, fix=0):
    sel = np.all(rows[:, :fix] == 0, axis=1)
    return len(np.unique(np.column_stack([rows[sel, :keep], addrs[sel]]), axis=0))


def check_against_brute_force(kernel, dm: DataMovement | None = None) -> DataMovement:
  dm = dm or data_movement(kernel)
  tr = Trace(kernel)
  names = {e[0] for e in tr.events}
  assert names == {b.name for b in dm.buffers}
  for b in dm.buffers:
    assert b.exact, b.name
    assert b.reads == tr.count(b.name, "read"), b.name
    assert b.writes == tr.count(b.name, "write"), b.name
    rows, addrs = tr.select(b.name)
    got = (b.unique, b.per_block, b.per_thread)
    want = (tr.distinct(rows, addrs), tr.distinct(rows, addrs, 0, 3), tr.distinct(rows, addrs, 0, 6))
    assert got == want, (b.name, got, want)
    sums = (b.block_sum, b.thread_sum)
    want_sums = (tr.distinct(rows, addrs, 3), tr.distinct(rows, addrs, 6))
    if b.sums_exact:
      assert sums == want_sums, (b.name, sums, want_sums)
    else:   # estimated from sampled block / thread indices (labelled so): close, not exact
      for g, w in zip(sums, want_sums): assert abs(g - w) <= 0.3 * w, (b.name, sums, want_sums)
    assert b.unique_read == tr.distinct(*tr.select(b.name, ("read",)))
    assert b.unique_write == tr.distinct(*tr.select(b.name, ("write",)))
  # loop levels: one iteration / the whole loop of block 0, outer loops at 0 (reads of global buffers)
  parents = _parents(kernel)
  for lv in dm.levels:
    if lv.node is None: continue
    outer = parents[lv.node]
    for name, it, al, _ in lv.buffers:
      size = next(b.dtype_bytes for b in dm.buffers if b.name == name) if any(b.name == name for b in dm.buffers) else 4
      for one, got in ((True, it), (False, al)):
        where = lambda lp, one=one, node=lv.node, outer=outer: (
          node in lp and all(lp.get(o, 0) == 0 for o in outer) and (not one or lp[node] == 0))
        rows, addrs = tr.select(name, ("read",), where)
        assert got == tr.distinct(rows, addrs, 0, 3) * size, (lv.loop, name, one)
  return dm


def _parents(kernel) -> dict[int, list[int]]:
  out, counter = {}, [0]

  def go(s, stack):
    if isinstance(s, Seq):
      for x in s.stmts: go(x, stack)
    elif isinstance(s, For):
      node = counter[0]; counter[0] += 1
      out[node] = list(stack)
      go(s.body, stack + [node])
    elif isinstance(s, If): go(s.then, stack)
  go(kernel.body, [])
  return out


# ---------------------------------------------------------------------------------------------
# schedules

def conv_small(cache):
  wl = W.conv2d(1, 3, 7, 6, 4, 3, 1, 1, 1)
  return conv_schedule(wl, cache)


def softmax(method, threads):
  wl = W.softmax(3, 70)
  s = mc.Schedule(wl.outputs)
  _row_schedule(s, wl, ["rowmax", "expsum"], wl.outputs[0], threads, method)
  return s


def elementwise(width=1, threads=32, shape=(3, 5, 20)):
  wl = W.broadcast_chain(*shape)
  s = mc.Schedule(wl.outputs)
  for n in ("mul", "add", "relu"): s.compute_inline(n)
  Z = wl.outputs[0]
  f = s.fuse(Z, *s.axis(Z))
  if width > 1:
    f, fv = s.split(Z, f, width)
  fo, t = s.split(Z, f, threads)
  s.bind(Z, fo, "blockIdx.x"); s.bind(Z, t, "threadIdx.x")
  if width > 1: s.vectorize(Z, fv)
  return s


def depthwise():
  wl = W.depthwise_conv2d(1, 3, 9, 9, 3, 2, 1)
  s = mc.Schedule(wl.outputs)
  s.compute_inline("pad")
  Y = wl.outputs[0]
  n, c, y, x = s.axis(Y)
  nc = s.fuse(Y, n, c)
  yo, yi = s.split(Y, y, 2)
  s.reorder(Y, nc, yo, x, yi)
  s.bind(Y, nc, "blockIdx.y"); s.bind(Y, yo, "blockIdx.x"); s.bind(Y, x, "threadIdx.x")
  return s


PROGRAMS = {
  "mm_tiled": lambda: mm_tiled_shared(W.matmul(16, 12, 8), tile=8, thread=2, kt=4),
  "mm_tiled_bias": lambda: mm_tiled_shared(W.matmul(19, 13, 7, True), tile=8, thread=2, kt=4),
  "mm_vthread": lambda: mm_tiled_shared(W.matmul(18, 12, 8, True), tile=8, thread=2, kt=4, vthread=True),
  "mm_aligned": lambda: mm_tiled_shared(W.matmul(16, 12, 8), tile=8, thread=2, kt=4, align=True),
  "mm_local": lambda: mm_local_cache_read(W.matmul(40, 36, 9)),
  "mm_inline": lambda: mm_inline_simple(W.matmul(20, 18, 5, True)),
  "mm_default": lambda: mc.Schedule(W.matmul(6, 5, 4).outputs),
  "conv_shared": lambda: conv_small(True),
  "conv_global": lambda: conv_small(False),
  "depthwise": depthwise,
  "softmax_shuffle": lambda: softmax("shuffle", 64),
  "softmax_tree": lambda: softmax("tree", 24),
  "elementwise": lambda: elementwise(),
  "vectorized": lambda: elementwise(width=4, threads=8, shape=(2, 4, 16)),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_isl_counts_match_brute_force(name):
  prog = PROGRAMS[name]().lower()
  for k, dm in zip(prog.kernels, analyze_program(prog)):
    check_against_brute_force(k, dm)
    assert dm.exact


@pytest.mark.parametrize("name", ["mm_tiled_bias", "mm_inline", "mm_local", "conv_shared", "softmax_tree", "depthwise"])
def test_isl_only_counts_match_brute_force(name, monkeypatch):
  """The same checks with every distinct count taken by isl (no numpy enumeration, no sampling)."""
  import minicomp.search.static.footprint.counting as C
  monkeypatch.setattr(C, "ENUM_CHEAP", 0)
  monkeypatch.setattr(C, "ENUM_HARD_LIMIT", 0)
  monkeypatch.setattr(C, "SUM_EXACT_LIMIT", 1 << 40)
  monkeypatch.setattr(C, "SEPARABLE_MIN", 1 << 62)            # (no closed form either)
  prog = PROGRAMS[name]().lower()
  for k in prog.kernels:
    dm = check_against_brute_force(k)
    assert dict(dm.counts)["enumerated"] == 0 and dict(dm.counts)["isl"] > 0


@pytest.mark.parametrize("path", ["bitmap", "sorted", "unpacked"])
@pytest.mark.parametrize("name", ["mm_tiled_bias", "conv_shared", "softmax_tree", "depthwise", "vectorized"])
def test_every_enumeration_path_matches_brute_force(name, path, monkeypatch):
  """Enumerated counts pack (kept indices, element) columns into one int64 and mark them in a
  bitmap or sort them; columns that do not pack are deduplicated as rows: all three agree with
  the simulator's trace."""
  import minicomp.search.static.footprint.counting as C
  import minicomp.search.static.footprint.enumeration as E
  monkeypatch.setattr(C, "ENUM_CHEAP", 1 << 40)             # enumerate everything
  monkeypatch.setattr(C, "SEPARABLE_MIN", 1 << 62)
  if path == "sorted":
    monkeypatch.setattr(E, "BITMAP_MIN", 0); monkeypatch.setattr(E, "BITMAP_PER_INSTANCE", 0)
  if path == "unpacked": monkeypatch.setattr(E, "_radix", lambda *a: None)
  prog = PROGRAMS[name]().lower()
  for k in prog.kernels:
    dm = check_against_brute_force(k)
    assert dict(dm.counts)["enumerated"] > 0 and dict(dm.counts)["isl"] == 0


@pytest.mark.parametrize("path", ["numpy", "isl", "sampled"])
@pytest.mark.parametrize("name", ["mm_tiled_bias", "conv_shared", "depthwise", "softmax_tree"])
def test_instance_counts_of_guarded_accesses(name, path, monkeypatch):
  """Dynamic access counts of accesses under guards (dimensions tied by conditions): counted with
  numpy over the tied dimensions, by isl, or (isl out of budget on a large grid) from random
  points: the first two equal the simulator's trace, the sampled one is within 1 %."""
  import minicomp.search.static.footprint.isl_build as IB
  if path != "numpy": monkeypatch.setattr(IB, "ENUM_PART_LIMIT", 4)
  if path == "sampled": monkeypatch.setattr(IB, "COUNT_BUDGET", 1)
  prog = PROGRAMS[name]().lower()
  guarded = 0
  for k in prog.kernels:
    dm = data_movement(k)
    guarded += sum(1 for a in collect_accesses(k)[0] if a.conds)
    tr = Trace(k)
    for b in dm.buffers:
      for kind, got in (("read", b.reads), ("write", b.writes)):
        want = tr.count(b.name, kind)
        if path == "sampled": assert got == pytest.approx(want, rel=0.01), (b.name, kind)
        else: assert got == want, (b.name, kind)
  assert guarded


def test_sampled_sums_are_estimates_close_to_exact(monkeypatch):
  import minicomp.search.static.footprint.counting as C
  monkeypatch.setattr(C, "SUM_EXACT_LIMIT", 1)
  monkeypatch.setattr(C, "SUM_ENUM_LIMIT", 0)
  monkeypatch.setattr(C, "SUM_CLASSES_LIMIT", 0)
  k = PROGRAMS["mm_tiled_bias"]().lower().kernels[0]
  dm = data_movement(k)
  tr = Trace(k)
  sampled = [b for b in dm.buffers if not b.sums_exact]
  assert sampled
  for b in sampled:
    rows, addrs = tr.select(b.name)
    assert b.thread_sum == pytest.approx(tr.distinct(rows, addrs, 6), rel=0.3), b.name


@pytest.mark.parametrize("name", ["mm_tiled_bias", "mm_vthread", "conv_shared", "conv_global", "softmax_tree",
                                  "vectorized"])
def test_sums_by_classes_first_match_brute_force(name, monkeypatch):
  """Per-block and per-thread sums over many instances go by classes of equal counts before counting every block at
  once (fewer instances enumerated): exact, as the simulator's trace says, and taken that way somewhere."""
  import minicomp.search.static.footprint.counting as C
  monkeypatch.setattr(C, "SUM_ENUM_LIMIT", 0)
  taken, orig = [], C._class_sum
  monkeypatch.setattr(C, "_class_sum", lambda *a: taken.append(orig(*a)) or taken[-1])
  for k in PROGRAMS[name]().lower().kernels:
    dm = check_against_brute_force(k)
    assert all(b.sums_exact for b in dm.buffers)
  assert any(t is not None for t in taken)


def test_a_tensor_core_convolution_sums_its_blocks_by_classes(monkeypatch):
  """A tensor-core convolution over 14 x 14 pixels (tiles overhanging the image, its blocks fused into one index):
  the per-block sums by classes of blocks equal counting every block at once, and classes are what is taken."""
  import minicomp.search.static.footprint.counting as C
  from minicomp.graph.tensor_core_schedules import tensor_core_schedules
  from minicomp.ir.dag import ComputeDAG
  wl = W.conv2d(1, 64, 14, 14, 64, 3, pad=1, dtype="float16", channels_last_weights=True)
  k = tensor_core_schedules(ComputeDAG(wl.outputs), mc.Target("sm_80"))[0].lower().kernels[0]
  taken, orig = [], C._class_sum
  monkeypatch.setattr(C, "_class_sum", lambda *a: taken.append(orig(*a)) or taken[-1])
  by_classes = data_movement(k)
  assert sum(t is not None for t in taken) >= 2                 # the weights' and the input's block sums
  monkeypatch.setattr(C, "_class_sum", lambda *a: None if a[2] == 3 else orig(*a))   # all blocks at once, as before
  at_once = data_movement(k)
  assert by_classes.buffers == at_once.buffers and by_classes.levels == at_once.levels
  assert all(b.sums_exact for b in at_once.buffers) and by_classes.counts != at_once.counts


# ---------------------------------------------------------------------------------------------
# gathers, Algorithm 2 capacities

def test_gather_is_over_approximated_by_the_whole_table_within_its_reads():
  """A gather's index is data: it may touch any element of its table, but no more elements than it reads."""
  T = mc.placeholder((10, 8), "float32", name="T")
  I = mc.placeholder((6,), "int32", name="I")
  O = mc.compute((6, 8), lambda i, j: T[I[i], j], name="O")
  s = mc.Schedule([O])
  i, j = s.axis(O)
  s.bind(O, i, "blockIdx.x"); s.bind(O, j, "threadIdx.x")
  dm = data_movement(s.lower().kernels[0])
  t, idx, out = dm.buffer("T"), dm.buffer("I"), dm.buffer("O")
  assert not t.exact and t.unique == 48 and t.reads == 48 and t.per_thread == 1 and t.dram_bytes == 48 * 4
  assert idx.exact and idx.unique == 6 and idx.reads == 48 and idx.per_block == 1
  assert out.exact and out.unique == 48 and not dm.exact
  pat = next(p for p in dm.accesses if p.buffer == "T")
  assert pat.sectors_per_request is None


def test_a_gather_from_a_large_table_is_counted_without_listing_its_pairs():
  """Every thread of an embedding lookup may touch any element of the table (1000 x 128): 8192 threads x 128,000
  elements are a billion (thread, element) pairs, counted, not listed (listed, they took 31 GiB), and then bounded by
  the reads (two per thread)."""
  T = mc.placeholder((1000, 128), "float32", name="T")
  I = mc.placeholder((64,), "int32", name="I")
  O = mc.compute((64, 128), lambda i, j: T[I[i], j] + T[i, j], name="O")
  s = mc.Schedule([O])
  i, j = s.axis(O)
  s.bind(O, i, "blockIdx.x"); s.bind(O, j, "threadIdx.x")
  t = data_movement(s.lower().kernels[0]).buffer("T")
  assert not t.exact and t.reads == 2 * 64 * 128 and t.unique == t.reads and t.per_thread == 2


def test_algorithm2_capacity_misses():
  """A thread walks a row of A once per j: the rows of the block (2 KB) fit a 128 KB L1, so
  each element moves once; with a 1 KB L1 they move again for every j (Algorithm 2)."""
  n = 32
  wl = W.matmul(n, n, n)
  s = mc.Schedule(wl.outputs)
  C = wl.stages["C"]
  i, j = s.axis(C)
  io, ii = s.split(C, i, 16)
  s.reorder(C, io, ii, j)
  s.bind(C, io, "blockIdx.x"); s.bind(C, ii, "threadIdx.x")
  k = s.lower().kernels[0]
  big, small = data_movement(k), data_movement(k, l1_bytes=1024, l2_bytes=2048)
  a_big, a_small = big.buffer("A"), small.buffer("A")
  assert a_big.unique == n * n and a_big.block_sum == n * n and a_big.reads == n ** 3
  assert a_big.l2_read_bytes == a_big.block_sum_bytes == n * n * 4      # each row once per block
  assert a_small.l2_read_bytes == n * a_big.l2_read_bytes == a_small.read_bytes
  assert a_big.dram_bytes == a_big.unique_bytes and small.dram_bytes > big.dram_bytes
  jl, kl = (next(l for l in small.levels if l.loop == x) for x in ("j", "k"))
  assert (jl.trip, jl.fits, jl.iter_bytes) == (n, False, (16 * n + n + 16) * 4)   # A rows, a B column, C (+=)
  assert kl.fits and {b: mv for b, _, _, mv in jl.buffers}["A"] == n * 16 * n * 4
  assert all(l.movement_bytes >= l.footprint_bytes for l in small.levels)
  check_against_brute_force(k, big)


# ---------------------------------------------------------------------------------------------
# coalescing and bank conflicts (the first warp)

def _transpose(shared: bool, align: bool = False, n: int = 64):
  A = mc.placeholder((n, n), "float32", name="A")
  B = mc.compute((n, n), lambda i, j: A[j, i], name="B")
  s = mc.Schedule([B])
  i, j = s.axis(B)
  io, ii = s.split(B, i, 32); jo, ji = s.split(B, j, 32)
  s.reorder(B, io, jo, ii, ji)
  if shared:
    AS = s.cache_read(A, "shared", [B])
    s.compute_at(AS, B, jo)
    if align: s.storage_align(AS, 0, 32, 1)
    f = s.fuse(AS, *s.loops(AS))
    _, t = s.split(AS, f, 32 * 32)
    ty, tx = s.split(AS, t, 32)
    s.bind(AS, ty, "threadIdx.y"); s.bind(AS, tx, "threadIdx.x")
  s.bind(B, io, "blockIdx.y"); s.bind(B, jo, "blockIdx.x"); s.bind(B, ii, "threadIdx.y"); s.bind(B, ji, "threadIdx.x")
  return s.lower().kernels[0]


def test_coalesced_elementwise():
  dm = data_movement(elementwise(threads=64, shape=(4, 16, 32)).lower().kernels[0])
  for p in dm.accesses:
    if p.buffer in ("out", "x"):
      assert p.sectors_per_request == 4.0 and p.efficiency == 1.0, p
  assert dm.coalescing_efficiency == 1.0


def test_strided_read_takes_a_sector_per_lane():
  dm = data_movement(_transpose(shared=False))
  read = next(p for p in dm.accesses if p.buffer == "A")
  write = next(p for p in dm.accesses if p.buffer == "B")
  assert read.sectors_per_request == 32 and read.efficiency == pytest.approx(0.125)
  assert write.sectors_per_request == 4 and write.efficiency == 1.0
  assert dm.sectors_per_request == pytest.approx(18) and dm.load_sectors == 64 * 64


@pytest.mark.parametrize("align,degree", [(False, 32), (True, 1)])
def test_shared_bank_conflicts(align, degree):
  dm = data_movement(_transpose(shared=True, align=align))
  read = next(p for p in dm.accesses if p.buffer == "A_shared" and p.kind == "read")
  write = next(p for p in dm.accesses if p.buffer == "A_shared" and p.kind == "write")
  assert read.bank_conflict == degree and write.bank_conflict == 1
  assert next(p for p in dm.accesses if p.buffer == "A").efficiency == 1.0    # the tile load is coalesced
  check_against_brute_force(_transpose(shared=True, align=align), dm)


def test_vectorized_request_covers_the_vector():
  dm = data_movement(elementwise(width=4, threads=32, shape=(2, 8, 64)).lower().kernels[0])
  out = next(p for p in dm.accesses if p.buffer == "out")
  assert out.sectors_per_request == 16 and out.efficiency == 1.0      # 32 lanes x float4 = 512 bytes


def test_tiled_matmul_256():
  k = mm_tiled_shared(W.matmul(256, 256, 256)).lower().kernels[0]
  t0 = time.perf_counter()
  dm = data_movement(k)
  elapsed = time.perf_counter() - t0
  assert elapsed < 30
  a, b, c = dm.buffer("A"), dm.buffer("B"), dm.buffer("C")
  assert (a.unique, b.unique, c.unique) == (256 * 256,) * 3
  assert a.block_sum == b.block_sum == 16 * 64 * 256 and c.block_sum == 256 * 256
  assert a.reads == b.reads == 16 * 64 * 256 and c.writes == 256 * 256
  assert dm.dram_bytes == dm.unique_global_bytes == 3 * 256 * 256 * 4
  assert dm.l2_read_bytes == (a.block_sum + b.block_sum) * 4
  assert dm.buffer("A_shared").reads == 256 ** 3 and dm.buffer("A_shared").per_block == 512
  assert all(x.sums_exact for x in dm.buffers if x.scope == "global") and dm.exact
  ko = next(l for l in dm.levels if l.loop == "k_0")
  assert ko.trip == 32 and {n: it for n, it, _, _ in ko.buffers} == {"A": 2048, "B": 2048, "C": 0}


def test_symbolic_kernel_is_refused():
  from minicomp.search.static.footprint.isl_build import FootprintError
  wl = W.matmul(16, 12, 8)
  s = mc.Schedule(wl.outputs)
  C = wl.stages["C"]
  i, _ = s.axis(C)
  io, ii = s.split(C, i, mc.var("f"))
  s.bind(C, io, "blockIdx.x"); s.bind(C, ii, "threadIdx.x")
  with pytest.raises(FootprintError, match="concrete"):
    data_movement(s.lower().kernels[0])
  dm = data_movement(s.substitute({"f": 4}).lower().kernels[0])
  assert dm.buffer("A").unique == 16 * 8


@pytest.mark.parametrize("name", ["mm_tiled_bias", "conv_shared", "depthwise", "elementwise"])
def test_sampled_counts_stay_near_exact(name, monkeypatch):
  """Sets too large for isl's budgets and for enumeration get a sampled count (bounded time): it
  lies within its stated bounds and near the exact count (thinning a kept block / thread index
  partitions the count; a halo between thinned values overestimates, within the buffer size)."""
  import minicomp.search.static.footprint.counting as C
  k = PROGRAMS[name]().lower().kernels[0]
  exact = data_movement(k)
  monkeypatch.setattr(C, "ENUM_CHEAP", 0)
  monkeypatch.setattr(C, "ENUM_HARD_LIMIT", 0)
  monkeypatch.setattr(C, "ISL_BUDGETS", (1, 1))
  monkeypatch.setattr(C, "SAMPLE_LIMIT", 16)
  monkeypatch.setattr(C, "SEPARABLE_MIN", 1 << 62)
  dm = data_movement(k)
  assert dict(dm.counts)["sampled"] > 0 and not dm.exact
  for e, b in zip(exact.buffers, dm.buffers):
    for f in ("unique_read", "unique_write", "unique", "per_block", "per_thread"):
      got, want = getattr(b, f), getattr(e, f)
      assert want <= got <= max(2 * want, b.size), (b.name, f, got, want)


def test_analyses_in_threads_match_serial_ones(monkeypatch):
  """Each thread counts in its own isl context: budgets of one thread cannot fail or lift
  another's (a StaticMeasurer may run estimates in a thread pool)."""
  import concurrent.futures as cf
  import minicomp.search.static.footprint.counting as C
  monkeypatch.setattr(C, "ENUM_CHEAP", 0)                  # every count goes through isl budgets
  kernels = [k for n in ("mm_tiled_bias", "conv_shared", "softmax_tree", "depthwise")
             for k in PROGRAMS[n]().lower().kernels]
  serial = [data_movement(k) for k in kernels]
  with cf.ThreadPoolExecutor(4) as pool:
    for _ in range(3):
      assert list(pool.map(data_movement, kernels)) == serial


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_column_classes_match_numpy_unique(seed):
  """The packed class split gives numpy's column-wise unique: first occurrences and counts, same order."""
  from minicomp.search.static.footprint.counting import _column_classes
  rng = np.random.default_rng(seed)
  sig = np.stack([np.zeros(5000, np.int64)] + [np.clip(rng.integers(-40, 40, 5000), -3 - k, 5) for k in range(4)])
  first, sizes = _column_classes(sig)
  _, f0, c0 = np.unique(sig, axis=1, return_index=True, return_counts=True)
  assert first.tolist() == f0.tolist() and sizes.tolist() == c0.tolist()
  assert [len(x) for x in _column_classes(np.zeros((3, 0), np.int64))] == [0, 0]
  wide = np.stack([rng.integers(-(1 << 40), 1 << 40, 300) for _ in range(3)])   # too wide to pack
  first, sizes = _column_classes(wide)
  _, f0, c0 = np.unique(wide, axis=1, return_index=True, return_counts=True)
  assert first.tolist() == f0.tolist() and sizes.tolist() == c0.tolist()


@pytest.mark.parametrize("dtype, width", [("float32", 4), ("float32", 8), ("float16", 8), ("bfloat16", 8),
                                          ("float16", 4)])
def test_a_vectorized_access_is_one_request_per_warp(dtype, width):
  """The emitter writes a vectorize loop of 2 or 4 float32, or 2, 4 or 8 half values, as one access (8 float32 as
  two): the coalescing model counts one warp request per vector, not one per element (it counted half vectors
  lane by lane: 8x the L2 traffic of an 8-wide half fetch)."""
  A = mc.placeholder((8192,), dtype, name="A")
  B = mc.compute((8192,), lambda i: A[i] + 1.0, name="B")
  s = mc.Schedule([B])
  o, t, v = s.split(B, "i", [256, width])
  s.bind(B, o, "blockIdx.x"); s.bind(B, t, "threadIdx.x"); s.vectorize(B, v)
  kern = mc.build(s, target="sm_86")
  assert "reinterpret_cast" in kern.source            # (the emitter did vectorize it)
  dm = data_movement(kern.program.kernels[0], l1_bytes=128 * 1024, l2_bytes=6 * 2**20)
  a = next(x for x in dm.accesses if x.buffer == "A")
  assert a.requests == pytest.approx(8192 / (32 * width))
  assert a.sectors_per_request == pytest.approx(32 * width * (4 if dtype == "float32" else 2) / 32)


def test_a_load_under_a_data_dependent_select_is_one_access():
  """``x < 0 ? 0.1 * x : x`` reads x once per element (the condition, on loaded data, bounds neither branch):
  one access, not one under the condition, one under its negation and one in the condition; and the
  footprint's reads equal the elements."""
  from minicomp.ir import te
  from minicomp.ir.expr import select
  X = te.placeholder((4, 64), name="x")
  Y = te.compute((4, 64), lambda i, j: select(X[i, j] < 0.0, X[i, j] * 0.1, X[i, j]), name="y")
  s = mc.Schedule([Y])
  f = s.fuse(Y, *s.axis(Y))
  fo, t = s.split(Y, f, 64)
  s.bind(Y, fo, "blockIdx.x"); s.bind(Y, t, "threadIdx.x")
  k = s.lower().kernels[0]
  assert sum(a.buffer.name == "x" for a in collect_accesses(k)[0]) == 1
  x_traffic = next(b for b in data_movement(k).buffers if b.name == "x")
  assert x_traffic.reads == 256
