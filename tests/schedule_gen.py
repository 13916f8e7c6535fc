"""Seeded generator of valid random schedules, the tests' guard against silently wrong lowering.

Two workloads:

* ``matmul``: ``C[i, j] = sum_k A[i, k] * B[k, j]`` with non-divisible ``M, N, K``, optionally
  followed by ``D1 = C + bias`` (always inlined) and ``D = relu(D1)`` (the output);
* ``conv2d`` (NCHW): a pad stage ``P = select(in bounds, X[...], 0)`` that is inlined (or, in a
  rare serial variant, left as its own kernel) and ``Y = sum_{rc, ry, rx} P[..] * W[..]`` with
  random stride / padding / dilation, optionally followed by the same bias + relu epilogue.

A schedule is Ansor-like: the output stage ``T`` is tiled (every spatial axis split into 2-4
levels with random factors that need not divide: block / vthread / thread / inner), its block
loops fused and bound to ``blockIdx``, its vthread loops bound to ``vthread``, its thread loops
fused and bound to ``threadIdx``; the reduction ``R`` is either ``T`` itself (its reduction
loops split, sometimes one of them outside the thread loops) or a stage computed at a
thread-bound or inner loop of ``T`` (``cache_write(C, "local")`` or the reduction under a fused
epilogue), or at a loop outside the threads (then a shared-memory stage the block computes
together); the inputs of ``R`` are cached in shared memory at one of ``R``'s reduction loops
(cooperative fetch with all or some of the block's threads, or none; sometimes storage_align
and a vectorized inner part) and sometimes in local memory; unroll / vectorize annotations and
``auto_unroll_max_step`` pragmas are sprinkled on; a few schedules are serial (no binding at
all: grid (1, 1, 1)).

Every random choice draws from one ``numpy.random.Generator`` made from the seed, so a seed
names one schedule. A schedule that breaks a resource limit is *rejected* and resampled from
the same generator (``Sample.rejected`` counts them): minicomp's limits, checked with the same
``check_resources`` that ``mc.build`` runs, and two of the generator's own, the size of local
arrays (the simulator's thread stacks) and the code NVRTC would have to unroll (compile time;
the unroll annotations, which change no result, are dropped first). Any other error
(ScheduleError from lowering, LoweringError, ...) propagates: a schedule this generator makes
is meant to be valid, so such an error is a bug in minicomp (or here).

``sample(kind, seed)`` returns a :class:`Sample`; ``Sample.script()`` writes a standalone
Python reproducer (workload + one Schedule call per step + build + compare).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

import minicomp as mc
from minicomp.codegen.verify import check_resources
from minicomp.ir.expr import walk
from minicomp.ir.ops import Op
from minicomp.ir.loop import For, If, Seq, Store
from minicomp.ir.lower import lower
from minicomp.target import as_target

MATMUL_DIMS = (33, 47, 64, 100, 129)
MAX_ATTEMPTS = 40
LOCAL_LIMIT = 1024        # floats of local arrays per kernel (the simulator gives each thread a 64 KiB stack)
MAX_THREADS = 512         # threads per block we sample up to (the hardware allows 1024)
COST_LIMIT = 15000        # expression nodes once unrolled (see nvrtc_cost): keeps NVRTC under a few seconds
UNROLL_MAX = 8            # only loops of a known extent <= this are annotated "unroll"
AUTO_UNROLL = (0, 16, 64, 512)
PARTIAL_FETCH = 0.25      # how often a cooperative fetch uses fewer threads than the block has in a dim


class Rejected(Exception):
  """The sampled schedule breaks a resource limit; the generator samples another one."""


# ----------------------------------------------------------------------------------------------
# workloads

@dataclass
class Workload:
  kind: str
  params: dict
  placeholders: dict            # name -> Tensor, in DAG order
  red: mc.Tensor                # the reduction ("C" / "Y")
  outputs: list                 # [red] or [D]
  pad: mc.Tensor | None = None
  epi: tuple | None = None      # (D1, D) with the bias + relu epilogue
  cache_inputs: tuple = ()      # the tensors the reduction reads (cache_read candidates)

  def random_inputs(self, seed: int) -> dict:
    rng = np.random.default_rng((seed, 1))
    return {n: rng.standard_normal(t.shape).astype(np.float32) for n, t in self.placeholders.items()}

  def reference(self, a: dict) -> np.ndarray:
    if self.kind == "matmul":
      r = np.einsum("ik,kj->ij", a["A"].astype(np.float64), a["B"].astype(np.float64))
      bias = a.get("bias")
      if self.epi is not None: r = np.maximum(r + bias[None, :], 0.0)
    else:
      r = conv2d_nchw(a["X"], a["W"], **{k: self.params[k] for k in ("stride", "pad", "dil")})
      if self.epi is not None: r = np.maximum(r + a["bias"][None, :, None, None], 0.0)
    return r.astype(np.float32)

  def source(self) -> str:
    """Python code that rebuilds this workload (for reproducers)."""
    p = self.params
    if self.kind == "matmul":
      lines = [f"M, N, K = {p['M']}, {p['N']}, {p['K']}",
               'A = mc.placeholder((M, K), "float32", name="A")',
               'B = mc.placeholder((K, N), "float32", name="B")',
               'k = mc.reduce_axis(K, name="k")',
               'C = mc.compute((M, N), lambda i, j: mc.sum(A[i, k] * B[k, j], axis=k), name="C")']
      if self.epi is not None:
        lines += ['bias = mc.placeholder((N,), "float32", name="bias")',
                  'D1 = mc.compute((M, N), lambda i, j: C[i, j] + bias[j], name="D1")',
                  'D = mc.compute((M, N), lambda i, j: mc.max(D1[i, j], 0.0), name="D")']
      return "\n".join(lines)
    lines = [f"n, c, h, w, f, kh = {p['n']}, {p['c']}, {p['h']}, {p['w']}, {p['f']}, {p['k']}",
             f"stride, pad, dil = {p['stride']}, {p['pad']}, {p['dil']}",
             "oh, ow = (h + 2 * pad - dil * (kh - 1) - 1) // stride + 1, (w + 2 * pad - dil * (kh - 1) - 1) // stride + 1",
             'X = mc.placeholder((n, c, h, w), "float32", name="X")',
             'W = mc.placeholder((f, c, kh, kh), "float32", name="W")',
             "P = mc.compute((n, c, h + 2 * pad, w + 2 * pad), lambda b, ch, hh, ww: mc.select(",
             "  mc.all_of(hh >= pad, hh < h + pad, ww >= pad, ww < w + pad), X[b, ch, hh - pad, ww - pad], 0.0), name=\"P\")",
             'rc, ry, rx = mc.reduce_axis(c, name="rc"), mc.reduce_axis(kh, name="ry"), mc.reduce_axis(kh, name="rx")',
             "Y = mc.compute((n, f, oh, ow), lambda nn, ff, yy, xx: mc.sum(",
             "  P[nn, rc, yy * stride + ry * dil, xx * stride + rx * dil] * W[ff, rc, ry, rx], axis=[rc, ry, rx]), name=\"Y\")"]
    if self.epi is not None:
      lines += ['bias = mc.placeholder((f,), "float32", name="bias")',
                'D1 = mc.compute((n, f, oh, ow), lambda a, b, y, x: Y[a, b, y, x] + bias[b], name="D1")',
                'D = mc.compute((n, f, oh, ow), lambda a, b, y, x: mc.max(D1[a, b, y, x], 0.0), name="D")']
    return "\n".join(lines)


def conv2d_nchw(x: np.ndarray, w: np.ndarray, stride: int, pad: int, dil: int) -> np.ndarray:
  """Direct numpy conv2d (NCHW, OIHW), in float64."""
  x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
  w = w.astype(np.float64)
  n, _, hp, wp = x.shape
  f, _, kh, kw = w.shape
  oh, ow = (hp - dil * (kh - 1) - 1) // stride + 1, (wp - dil * (kw - 1) - 1) // stride + 1
  out = np.zeros((n, f, oh, ow))
  for ry in range(kh):
    for rx in range(kw):
      y0, x0 = ry * dil, rx * dil
      patch = x[:, :, y0:y0 + stride * (oh - 1) + 1:stride, x0:x0 + stride * (ow - 1) + 1:stride]
      out += np.einsum("nchw,fc->nfhw", patch, w[:, :, ry, rx])
  return out


def matmul_workload(M: int, N: int, K: int, epilogue: bool) -> Workload:
  A = mc.placeholder((M, K), "float32", name="A")
  B = mc.placeholder((K, N), "float32", name="B")
  k = mc.reduce_axis(K, name="k")
  C = mc.compute((M, N), lambda i, j: mc.sum(A[i, k] * B[k, j], axis=k), name="C")
  ph = {"A": A, "B": B}
  wl = Workload("matmul", {"M": M, "N": N, "K": K}, ph, C, [C], cache_inputs=(A, B))
  if epilogue:
    bias = mc.placeholder((N,), "float32", name="bias")
    D1 = mc.compute((M, N), lambda i, j: C[i, j] + bias[j], name="D1")
    D = mc.compute((M, N), lambda i, j: mc.max(D1[i, j], 0.0), name="D")
    ph["bias"] = bias
    wl.epi, wl.outputs = (D1, D), [D]
  return wl


def conv_workload(n, c, h, w, f, kh, stride, pad, dil, epilogue: bool) -> Workload:
  oh = (h + 2 * pad - dil * (kh - 1) - 1) // stride + 1
  ow = (w + 2 * pad - dil * (kh - 1) - 1) // stride + 1
  X = mc.placeholder((n, c, h, w), "float32", name="X")
  W = mc.placeholder((f, c, kh, kh), "float32", name="W")
  P = mc.compute((n, c, h + 2 * pad, w + 2 * pad), lambda b, ch, hh, ww: mc.select(
    mc.all_of(hh >= pad, hh < h + pad, ww >= pad, ww < w + pad), X[b, ch, hh - pad, ww - pad], 0.0), name="P")
  rc, ry, rx = mc.reduce_axis(c, name="rc"), mc.reduce_axis(kh, name="ry"), mc.reduce_axis(kh, name="rx")
  Y = mc.compute((n, f, oh, ow), lambda nn, ff, yy, xx: mc.sum(
    P[nn, rc, yy * stride + ry * dil, xx * stride + rx * dil] * W[ff, rc, ry, rx], axis=[rc, ry, rx]), name="Y")
  ph = {"X": X, "W": W}
  params = dict(n=n, c=c, h=h, w=w, f=f, k=kh, stride=stride, pad=pad, dil=dil)
  wl = Workload("conv2d", params, ph, Y, [Y], pad=P, cache_inputs=(P, W))
  if epilogue:
    bias = mc.placeholder((f,), "float32", name="bias")
    D1 = mc.compute((n, f, oh, ow), lambda a, b, y, x: Y[a, b, y, x] + bias[b], name="D1")
    D = mc.compute((n, f, oh, ow), lambda a, b, y, x: mc.max(D1[a, b, y, x], 0.0), name="D")
    ph["bias"] = bias
    wl.epi, wl.outputs = (D1, D), [D]
  return wl


def random_matmul(rng: np.random.Generator) -> Workload:
  M, N, K = (int(rng.choice(MATMUL_DIMS)) for _ in range(3))
  return matmul_workload(M, N, K, bool(rng.random() < 0.5))


def random_conv(rng: np.random.Generator) -> Workload:
  while True:
    n = int(rng.integers(1, 3))
    c, f = int(rng.integers(3, 17)), int(rng.integers(3, 17))
    h, w = int(rng.integers(7, 18)), int(rng.integers(7, 18))
    kh = int(rng.choice([1, 3, 5]))
    stride, pad, dil = int(rng.integers(1, 3)), int(rng.integers(0, 3)), int(rng.integers(1, 3))
    if min(h, w) + 2 * pad - dil * (kh - 1) >= 1: break
  return conv_workload(n, c, h, w, f, kh, stride, pad, dil, bool(rng.random() < 0.35))


# ----------------------------------------------------------------------------------------------
# schedules

class _Gen:
  """One attempt at a random schedule of a workload (all choices from ``rng``)."""

  def __init__(self, rng: np.random.Generator, wl: Workload):
    self.rng, self.wl = rng, wl
    self.s = mc.Schedule(wl.outputs)
    self.known: dict[tuple[str, str], int] = {}   # (stage, loop) -> extent, for loops made by our splits
    self.notes: list[str] = []
    self.tx = self.ty = 1                         # threads per block the output stage binds

  # -- random helpers
  def coin(self, p: float) -> bool: return bool(self.rng.random() < p)
  def pick(self, seq):
    seq = list(seq)
    return seq[int(self.rng.integers(len(seq)))]
  def perm(self, seq) -> list:
    seq = list(seq)
    return [seq[k] for k in self.rng.permutation(len(seq))]
  def weighted(self, seq, w):
    w = np.asarray(w, dtype=float)
    return list(seq)[int(self.rng.choice(len(w), p=w / w.sum()))]

  def split(self, st: str, loop: str, factors) -> tuple[str, ...]:
    out = self.s.split(st, loop, [int(f) for f in factors])
    for c, f in zip(out[1:], factors): self.known[(st, c)] = int(f)
    return out

  def fuse(self, st: str, loops) -> str:
    if len(loops) == 1: return loops[0]
    out = self.s.fuse(st, *loops)
    ext = [self.known.get((st, l)) for l in loops]
    if all(e is not None for e in ext): self.known[(st, out)] = math.prod(ext)
    return out

  def kind(self, st: str, loop: str) -> str: return self.s.state.stage(st).kind(loop)

  def groups(self, loops: list, n: int) -> list[list]:
    """Cut ``loops`` into ``n`` contiguous non-empty groups."""
    n = max(1, min(n, len(loops)))
    cuts = sorted(self.rng.choice(np.arange(1, len(loops)), size=n - 1, replace=False).tolist()) if n > 1 else []
    bounds = [0] + cuts + [len(loops)]
    return [loops[a:b] for a, b in zip(bounds, bounds[1:])]

  # -- the whole schedule
  def run(self) -> mc.Schedule:
    wl, s = self.wl, self.s
    C = wl.red.name
    serial = self.coin(0.12)
    if wl.pad is not None:
      if self.coin(0.3 if serial else 0.08):
        self.notes.append("pad stage left at root (its own kernel)")
        self.schedule_elementwise(wl.pad.name, serial)
      else: s.compute_inline(wl.pad)
    if serial and self.coin(0.3):
      if wl.epi is not None: s.compute_inline(wl.epi[0])
      self.notes.append("serial, unscheduled")
      return s
    self.notes.append("serial" if serial else "gpu")
    mode = "plain" if wl.epi is None else self.pick(["cw_inline", "at", "root"])
    self.notes.append(f"mode {mode}")
    if wl.epi is not None: s.compute_inline(wl.epi[0])
    if mode == "cw_inline":
      R = s.cache_write(C, "local"); s.compute_inline(C); T = wl.outputs[0].name
    elif mode == "at":
      R, T = C, wl.outputs[0].name
    else:
      T = C
      R = s.cache_write(C, "local") if self.coin(0.5) else C
    if mode == "root": self.schedule_elementwise(wl.outputs[0].name, serial)
    self.notes.append(f"tiled stage {T}, reduction stage {R}")
    tile = self.tile(T, serial, fused_reduction=(R == T))
    if R != T: self.attach_reduction(R, T, tile, serial)
    self.caches(R, T, serial)
    self.annotate(T, R)
    return s

  def schedule_elementwise(self, D: str, serial: bool):
    """An elementwise stage as its own kernel: unscheduled, or fused + split + bound."""
    if serial or self.coin(0.4):
      self.notes.append(f"{D} kernel unscheduled"); return
    f = self.fuse(D, self.s.loops(D))
    tpb = self.pick([32, 64, 100, 128, 256])
    if self.coin(0.3):
      bo, v, t = self.split(D, f, [self.pick([2, 3, 4]), tpb])
      self.s.bind(D, v, "vthread")
    else:
      bo, t = self.split(D, f, [tpb])
    self.s.bind(D, bo, "blockIdx.x"); self.s.bind(D, t, "threadIdx.x")

  def tile(self, T: str, serial: bool, fused_reduction: bool) -> dict:
    s = self.s
    axes = s.loops(T)
    spatial = [a for a in axes if self.kind(T, a) == "spatial"]
    ext = dict(zip(spatial, self.s.state.stage(T).tensor.shape))
    if self.coin(0.15):                      # flat tiling: fuse the spatial axes first, then split the fused loop
      order = self.perm(spatial)
      s.reorder(T, *order)
      f = s.fuse(T, *order)
      ext, spatial = {f: math.prod(ext.values())}, [f]
      self.notes.append(f"{T}: spatial axes {order} fused first")
    level_roles = {2: [["b", "t"], ["b", "i"]], 3: [["b", "t", "i"], ["b", "v", "t"]], 4: [["b", "v", "t", "i"]]}
    threads_left, vthreads_left, inner_left = MAX_THREADS, 8, 64
    by_role: dict[str, list[str]] = {"b": [], "v": [], "t": [], "i": []}
    for a in self.perm(spatial):
      nlev = int(self.weighted([2, 3, 4], [0.3, 0.4, 0.3]))
      roles = self.pick(level_roles[nlev])
      cap = max(2, 2 * ext[a])
      fs = []
      for r in roles[1:]:
        if r == "t":
          opts = [x for x in (1, 2, 3, 4, 5, 6, 8, 16, 32, 64, 128, 256) if x <= min(threads_left, cap)]
          f = int(self.weighted(opts, [1.0 / (1 + abs(math.log2(x / 8))) for x in opts])); threads_left //= f
        elif r == "v":
          opts = [x for x in (1, 2, 3, 4) if x <= min(vthreads_left, cap)]; f = self.pick(opts); vthreads_left //= f
        else:
          opts = [x for x in (1, 2, 3, 4, 5, 8) if x <= min(inner_left, cap)]; f = self.pick(opts); inner_left //= f
        fs.append(f)
      loops = self.split(T, a, fs)
      for r, l in zip(roles, loops): by_role[r].append(l)
      self.notes.append(f"{T}.{a} (extent {ext[a]}) -> {list(zip(roles, [math.ceil(ext[a] / max(1, math.prod(fs)))] + fs))}")
    for r in by_role: by_role[r] = self.perm(by_role[r])
    red_outer, red_rest = [], []
    if fused_reduction: red_outer, red_rest = self.split_reductions(T)
    if serial:
      order = self.perm(by_role["b"] + by_role["v"] + by_role["t"]) + self.perm(red_outer) + self.perm(by_role["i"] + red_rest)
      if self.coin(0.3): order = self.perm(order)
      s.reorder(T, *order)
      return {"order": order, "threads": [], "inner": by_role["i"], "vthreads": by_role["v"], "blocks": by_role["b"]}
    inner = by_role["i"]
    tail = self.perm(red_outer) + self.perm(inner + red_rest) if self.coin(0.7) else self.perm(red_outer + red_rest + inner)
    mid = []
    if red_outer and by_role["t"] and self.coin(0.12):     # a serial reduction loop between vthreads and threads
      mid = [tail[0]]; tail = tail[1:]
      self.notes.append(f"reduction loop {mid[0]} outside the thread loops")
    s.reorder(T, *(by_role["b"] + by_role["v"] + mid + by_role["t"] + tail))
    # blocks
    bgroups = self.groups(by_role["b"], int(self.pick([1, 2])))
    tags = self.perm(["blockIdx.x", "blockIdx.y"])
    for k, g in enumerate(bgroups):
      b = self.fuse(T, g)
      if len(bgroups) == 2 and k == 0 and self.coin(0.1): self.notes.append(f"block loop {b} left serial"); continue
      s.bind(T, b, tags[k])
    # virtual threads
    if by_role["v"]:
      if self.coin(0.2): self.notes.append("vthread loops left unbound")
      elif self.coin(0.4) and math.prod(self.known[(T, v)] for v in by_role["v"]) <= 8:
        s.bind(T, self.fuse(T, by_role["v"]), "vthread")
      else:
        for v in by_role["v"]: s.bind(T, v, "vthread")
    # threads
    threads = []
    if by_role["t"]:
      tgroups = self.groups(by_role["t"], int(self.pick([1, 2])))
      dims = ["threadIdx.x"] if len(tgroups) == 1 else self.pick([["threadIdx.y", "threadIdx.x"], ["threadIdx.x", "threadIdx.y"]])
      for g, tag in zip(tgroups, dims):
        t = self.fuse(T, g)
        s.bind(T, t, tag)
        threads.append(t)
        if tag == "threadIdx.x": self.tx = self.known[(T, t)]
        else: self.ty = self.known[(T, t)]
    self.notes.append(f"block threads x={self.tx} y={self.ty}")
    return {"order": s.loops(T), "threads": threads, "inner": inner, "vthreads": by_role["v"], "blocks": by_role["b"]}

  def bound_extent(self, n: int) -> int:
    """How many threads of a block dim of ``n`` a stage uses: usually all of them."""
    return n if self.coin(1 - PARTIAL_FETCH) else int(self.rng.integers(1, n + 1))

  def split_reductions(self, R: str) -> tuple[list[str], list[str]]:
    """Split each reduction axis of ``R`` into 1-3 levels; returns (outermost levels, the rest)."""
    outer, rest = [], []
    st = self.s.state.stage(R)
    ext = {a.name: int(a.extent.arg) for a in st.tensor.reduce_axes}
    for a in [l for l in self.s.loops(R) if self.kind(R, l) == "reduce"]:
      nlev = int(self.weighted([1, 2, 3], [0.25, 0.5, 0.25])) if ext[a] > 1 else 1
      if nlev == 1: outer.append(a); continue
      opts = [x for x in (1, 2, 3, 4, 8, 16) if x <= max(2, ext[a])]
      fs = [self.pick(opts) for _ in range(nlev - 1)]
      loops = self.split(R, a, fs)
      self.notes.append(f"{R}.{a} (extent {ext[a]}) -> factors {fs}")
      outer.append(loops[0]); rest += list(loops[1:])
    return outer, rest

  def attach_reduction(self, R: str, T: str, tile: dict, serial: bool):
    s = self.s
    order = s.loops(T)
    if not serial and R == self.wl.red.name and tile["threads"] and order.index(tile["threads"][0]) > 0 and self.coin(0.2):
      loc = order[order.index(tile["threads"][0]) - 1]      # outside the thread loops: a shared-memory stage
      s.compute_at(R, T, loc)
      self.notes.append(f"compute_at({R}, {T}, {loc}) (outside the threads)")
      sp = [l for l in s.loops(R) if self.kind(R, l) == "spatial"]
      front = []
      use = [(d, n) for d, n in (("threadIdx.y", self.ty), ("threadIdx.x", self.tx)) if n > 1]
      if use and self.coin(0.7):
        f = self.fuse(R, sp)
        exts = [self.bound_extent(n) for _, n in use]
        front = list(self.split(R, f, exts))
        for (d, _), l in zip(use, front[1:]): s.bind(R, l, d)
        self.notes.append(f"{R}: spatial loops fused, split by {exts} -> {[d for d, _ in use]}")
      outer, rest = self.split_reductions(R)
      rest += [l for l in s.loops(R) if self.kind(R, l) == "spatial" and l not in front]
      s.reorder(R, *(front + self.perm(outer) + self.perm(rest)))
      return
    vts = [l for l in order if s.state.stage(T).annotation(l) == "vthread"]
    if serial: loc = self.pick(order)
    elif vts and self.coin(0.1): loc = self.pick(vts)
    elif tile["threads"] and self.coin(0.6): loc = tile["threads"][-1] if self.coin(0.8) else tile["threads"][0]
    elif tile["inner"]: loc = self.pick([l for l in order if l in tile["inner"]])
    elif tile["threads"]: loc = tile["threads"][-1]
    else: loc = order[-1] if self.coin(0.5) else self.pick(order)
    s.compute_at(R, T, loc)
    self.notes.append(f"compute_at({R}, {T}, {loc})")
    for a in [l for l in s.loops(R) if self.kind(R, l) == "spatial"]:
      if self.coin(0.2): self.split(R, a, [self.pick([2, 3, 4])])
    outer, rest = self.split_reductions(R)
    sp = [l for l in s.loops(R) if self.kind(R, l) == "spatial"]
    order = self.perm(outer) + self.perm(rest + sp) if self.coin(0.7) else self.perm(s.loops(R))
    s.reorder(R, *order)

  def caches(self, R: str, T: str, serial: bool):
    s = self.s
    for X in self.wl.cache_inputs:
      red = [l for l in s.loops(R) if self.kind(R, l) == "reduce"]
      XS, at_pos = None, 0
      if self.coin(0.3 if serial else 0.6):
        # usually at a reduction loop of R; sometimes at any loop of R, or at a loop of T outside R
        if R != T: outer = s.loops(T)[:s.loops(T).index(s.state.stage(R).attach.iter) + 1]
        else: outer = s.loops(T)[:min([s.loops(T).index(l) for l in red] + [len(s.loops(T))])]
        u = self.rng.random()
        tgt, at = (T, self.pick(outer)) if outer and u < 0.1 else (R, self.pick(s.loops(R))) if u < 0.2 else \
          (R, self.weighted(red, [2.0 ** -k for k in range(len(red))]))
        XS = s.cache_read(X, "shared", [R])
        s.compute_at(XS, tgt, at)
        if self.coin(0.2):
          fct = self.pick([8, 16, 32])
          off = self.pick([0, 1, 2, 4])
          s.storage_align(XS, len(X.shape) - 2, fct, off)
          self.notes.append(f"storage_align({XS}, {len(X.shape) - 2}, {fct}, {off})")
        at_pos = s.loops(R).index(at) if tgt == R else 0
        self.notes.append(f"cache_read({X.name}, shared) at {tgt}.{at}")
        self.fetch(XS, serial)
      if self.coin(0.3):
        src = XS if XS is not None else X.name
        cand = s.loops(R)[at_pos:]
        at2 = self.pick(cand)
        XL = s.cache_read(src, "local", [R])
        s.compute_at(XL, R, at2)
        self.notes.append(f"cache_read({src}, local) at {R}.{at2}")

  def fetch(self, XS: str, serial: bool):
    """How the block fills a shared tile: cooperative (threads bound) or not."""
    s = self.s
    loops = s.loops(XS)
    dims = [(d, n) for d, n in (("threadIdx.y", self.ty), ("threadIdx.x", self.tx)) if n > 1]
    if serial or not dims or self.coin(0.15):
      self.notes.append(f"{XS}: no thread binding")
      if self.coin(0.5):
        f = self.fuse(XS, loops)
        _, fi = self.split(XS, f, [self.pick([2, 4])])
        s.vectorize(XS, fi) if self.coin(0.4) else s.unroll(XS, fi)
      return
    if self.coin(0.25):                          # no fuse: split the last axis across threadIdx.x (or .y)
      d, n = dims[-1]
      tn = self.bound_extent(n)
      _, ti = self.split(XS, loops[-1], [tn])
      s.bind(XS, ti, d)
      self.notes.append(f"{XS}: last axis split by {tn} -> {d}")
      return
    f = self.fuse(XS, loops)
    use = dims if self.coin(0.6) else [self.pick(dims)]
    exts = [self.bound_extent(n) for _, n in use]
    vec = [self.pick([2, 4])] if self.coin(0.2) else []
    parts = self.split(XS, f, exts + vec)
    for (d, _), l in zip(use, parts[1:]): s.bind(XS, l, d)
    if vec: s.vectorize(XS, parts[-1])
    self.notes.append(f"{XS}: fused, split by {exts} -> {[d for d, _ in use]}")

  def annotate(self, T: str, R: str):
    s = self.s
    last = s.loops(T)[-1]
    if s.state.stage(T).annotation(last) == "none" and self.known.get((T, last)) in (2, 4) and self.coin(0.25):
      s.vectorize(T, last)
    for st in dict.fromkeys([T, R]):
      state = s.state.stage(st)
      for l in s.loops(st)[-3:]:
        e = self.known.get((st, l))
        if state.annotation(l) == "none" and e is not None and e <= UNROLL_MAX and self.coin(0.3): s.unroll(st, l)
      if self.coin(0.5):
        v = int(self.pick(AUTO_UNROLL))
        s.pragma(st, s.loops(st)[0], "auto_unroll_max_step", v)
        self.notes.append(f"{st}: auto_unroll_max_step {v}")


# ----------------------------------------------------------------------------------------------
# samples

@dataclass
class Sample:
  kind: str
  seed: int
  target: str
  workload: Workload
  schedule: mc.Schedule
  notes: list = field(default_factory=list)
  rejected: int = 0
  reject_reasons: list = field(default_factory=list)

  @property
  def outputs(self) -> list: return self.workload.outputs

  def inputs(self) -> dict: return self.workload.random_inputs(self.seed)

  def args(self, kern: mc.Kernel, inputs: dict) -> list:
    """The input arrays in the kernel's parameter order."""
    return [inputs[b.name] for b in kern.program.inputs]

  def check(self, kern: mc.Kernel, rtol: float = 1e-4, atol: float = 1e-4) -> None:
    ins = self.inputs()
    out = kern(*self.args(kern, ins))
    np.testing.assert_allclose(out, self.workload.reference(ins), rtol=rtol, atol=atol,
                               err_msg=f"{self.kind} seed {self.seed}: {self.describe()}")

  def describe(self) -> str:
    return f"{self.workload.params}; " + "; ".join(self.notes)

  def script(self) -> str:
    """A standalone Python reproducer: the workload, one Schedule call per step, build, compare."""
    wl = self.workload
    lines = ["import numpy as np", "import minicomp as mc", "", wl.source(), "",
             f"s = mc.Schedule([{wl.outputs[0].name}])"]
    lines += [step_call(st) for st in self.schedule.steps]
    names = list(wl.placeholders)
    lines += ["", f'kern = mc.build(s, target="{self.target}")', "print(kern.source)",
              "rng = np.random.default_rng(0)",
              "ins = {" + ", ".join(f'"{n}": rng.standard_normal({n}.shape).astype(np.float32)' for n in names) + "}",
              "out = kern(*[ins[b.name] for b in kern.program.inputs])"]
    if wl.kind == "matmul":
      ref = 'ins["A"].astype(np.float64) @ ins["B"]'
      if wl.epi is not None: ref = f'np.maximum({ref} + ins["bias"], 0)'
    else:
      ref = "ref_conv(ins['X'], ins['W'])"
      if wl.epi is not None: ref = f'np.maximum({ref} + ins["bias"][None, :, None, None], 0)'
      lines[lines.index("rng = np.random.default_rng(0)"):0] = [
        "def ref_conv(x, w):",
        "  x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))",
        "  out = np.zeros((n, f, oh, ow))",
        "  for ry in range(kh):",
        "    for rx in range(kh):",
        "      p = x[:, :, ry * dil:ry * dil + stride * (oh - 1) + 1:stride, rx * dil:rx * dil + stride * (ow - 1) + 1:stride]",
        "      out += np.einsum('nchw,fc->nfhw', p, w[:, :, ry, rx])",
        "  return out"]
    lines += [f"ref = {ref}", 'print("max abs error:", np.abs(out - ref).max())',
              "np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)", ""]
    return "\n".join(lines)


def step_call(st) -> str:
  """The Schedule call that records ``st`` (a step)."""
  d = st.to_json()
  k = d["step"]
  if k == "split": return f"s.split({d['stage']!r}, {d['iter']!r}, {d['factors']!r})"
  if k == "fuse": return f"s.fuse({d['stage']!r}, *{d['iters']!r})"
  if k == "reorder": return f"s.reorder({d['stage']!r}, *{d['order']!r})"
  if k == "annotate":
    a = d["annotation"]
    if a in ("unroll", "vectorize"): return f"s.{a}({d['stage']!r}, {d['iter']!r})"
    return f"s.bind({d['stage']!r}, {d['iter']!r}, {a!r})"
  if k == "pragma": return f"s.pragma({d['stage']!r}, {d['iter']!r}, {d['pragma']!r}, {d['value']!r})"
  if k == "compute_at": return f"s.compute_at({d['stage']!r}, {d['target']!r}, {d['iter']!r})"
  if k in ("compute_inline", "compute_root"): return f"s.{k}({d['stage']!r})"
  if k == "cache_read": return f"s.cache_read({d['tensor']!r}, {d['scope']!r}, {d['readers']!r})"
  if k == "cache_write": return f"s.cache_write({d['stage']!r}, {d['scope']!r})"
  return f"# {d}"


def nvrtc_cost(stmt, unrolled: bool = False) -> int:
  """Expression nodes in a kernel once NVRTC unrolls every unroll / vthread loop and the loops inside
  them: a proxy for NVRTC's compile time (which grows fast with it)."""
  if isinstance(stmt, For):
    un = unrolled or stmt.kind in ("unroll", "vectorize", "vthread")
    n = nvrtc_cost(stmt.body, un)
    return n * int(stmt.extent.arg) if un else n + 1
  if isinstance(stmt, Seq): return sum(nvrtc_cost(x, unrolled) for x in stmt.stmts)
  if isinstance(stmt, If): return _nodes(stmt.cond) + nvrtc_cost(stmt.then, unrolled)
  if isinstance(stmt, Store): return _nodes(stmt.index) + _nodes(stmt.value)
  return 1


def _nodes(e) -> int:
  return sum(3 if n.op in (Op.FLOORDIV, Op.FLOORMOD) else 1 for n in walk(e))   # div / mod cost NVRTC more


def _is_unroll(step) -> bool:
  return step.kind == "pragma" or (step.kind == "annotate" and step.annotation == "unroll")


def _tame_unrolling(s: mc.Schedule, wl: Workload, notes: list):
  """Drop the unroll annotations and pragmas of a schedule whose unrolled kernel would take NVRTC long
  to compile (they change no result); returns the schedule and its lowered program."""
  prog = lower(s.state)
  if max(nvrtc_cost(k.body) for k in prog.kernels) <= COST_LIMIT or not any(_is_unroll(st) for st in s.steps):
    return s, prog
  s = mc.Schedule.from_json(wl.outputs, [st.to_json() for st in s.steps if not _is_unroll(st)])
  notes.append("unroll annotations and pragmas dropped (NVRTC compile time)")
  return s, lower(s.state)


def _limits(s: mc.Schedule, prog, target: str) -> None:
  """Raise Rejected when ``s`` breaks a resource limit: minicomp's (as ``mc.build`` checks) or ours."""
  try:
    check_resources(s.state, prog, as_target(target))
  except mc.ScheduleError as e:
    raise Rejected(str(e)) from None
  for k in prog.kernels:
    local = sum(int(b.size.arg) for b in k.allocs if b.scope == "local")
    if local > LOCAL_LIMIT: raise Rejected(f"kernel {k.name}: {local} floats of local arrays > {LOCAL_LIMIT}")
    n = nvrtc_cost(k.body)
    if n > COST_LIMIT: raise Rejected(f"kernel {k.name}: {n} expression nodes once unrolled > {COST_LIMIT}")


def target_for(kind: str, seed: int) -> str:
  """Most samples build for sm_80, every seventh for sm_86."""
  return "sm_86" if seed % 7 == 3 else "sm_80"


def sample(kind: str, seed: int, target: str | None = None) -> Sample:
  """The valid random schedule that ``seed`` names (resampled from the same generator past rejections)."""
  rng = np.random.default_rng(seed)
  target = target or target_for(kind, seed)
  reasons = []
  for _ in range(MAX_ATTEMPTS):
    wl = random_matmul(rng) if kind == "matmul" else random_conv(rng)
    g = _Gen(rng, wl)
    s, prog = _tame_unrolling(g.run(), wl, g.notes)
    try:
      _limits(s, prog, target)
    except Rejected as e:
      reasons.append(str(e)); continue
    return Sample(kind, seed, target, wl, s, g.notes, len(reasons), reasons)
  raise RuntimeError(f"{kind} seed {seed}: no valid schedule in {MAX_ATTEMPTS} attempts; last: {reasons[-3:]}")
