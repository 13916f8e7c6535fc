"""Memory features of a store site: Ansor's 18 per-buffer features (access type, bytes, cache lines,
reuse, stride) and the arithmetic-intensity curve (see ``docs/features.md``).

Ansor decides these by looking at values ("the innermost non-trivial loop that moves the access", "the
first curve point above x"); here every such choice is a chain of selects over the loops, inner to
outer, so the same code gives numbers on a concrete program and formulas on a symbolic one.
"""
from __future__ import annotations

from minicomp.ir.arith import (add, div, eq, fl, fmax, fmin, ge, gt, ifl, land, lnot, log2, lor, mul, ne, num,
                               onehot, slog, sub)
from minicomp.ir.expr import Expr
from minicomp.search.features.sites import Site, nontrivial, unit_steps

N_BUF_FEATURES = 18
N_CURVE = 10
CACHE_LINE = 64
_BIG = float(2 ** 40)   # "no stride found" sentinel inside a min
BUF_FEATURE_NAMES = (
  "acc_type.kRead", "acc_type.kWrite", "acc_type.kReadWrite", "bytes", "unique_bytes", "lines", "unique_lines",
  "reuse_type.kLoopMultipleRead", "reuse_type.kSerialMultipleReadWrite", "reuse_type.kNoReuse", "reuse_dis_iter",
  "reuse_dis_bytes", "reuse_ct", "bytes_d_reuse_ct", "unique_bytes_d_reuse_ct", "lines_d_reuse_ct",
  "unique_lines_d_reuse_ct", "stride")


def _entries(sites: list[Site], j: int, lv: int) -> list[tuple[Site, str]]:
  """(store, buffer) pairs touched under loop ``lv`` of store ``j``, by that store and the ones before it."""
  key = sites[j].loops[lv].key
  return [(s, b) for s in sites[:j + 1] if len(s.loops) > lv and s.loops[lv].key == key for b in s.acc]


def _bytes(s: Site, b: str) -> int: return s.acc[b][0].element_bytes


def buffer_features(sites: list[Site], j: int, name: str, outer_prod: Expr, loop_vars: set[str]) -> list[Expr]:
  """The N_BUF_FEATURES features of buffer ``name`` at store ``j`` (``outer_prod``: its loops' product)."""
  s = sites[j]
  buf, kind, _ = s.acc[name]
  eb = buf.element_bytes
  n = len(s.loops)
  bytes_ = mul(outer_prod, eb)
  unique_bytes = mul(s.regions[name][0], eb)
  # stride, lines: scan loops inner -> outer for the first non-trivial one that moves the access
  in_loop, first = num(True), num(True)
  stride_found, innermost, run, rr, inner_prod = fl(0.0), fl(0.0), fl(1.0), fl(1.0), fl(1.0)
  # reuse (ComputeReuse with Felix's selects; extent-1 loops skipped)
  r_in = num(True)
  mr_any, sr_any = num(False), num(False)
  dis_iter, dis_bytes, ct = fl(0.0), fl(0.0), fl(0.0)
  read_iter, prev_bytes, seen = fl(1.0), fl(0.0), num(False)
  for lv in range(n - 1, -1, -1):
    lp = s.loops[lv]
    nt = nontrivial(lp)
    steps = unit_steps(s, name, lp, loop_vars)
    moves = num(False)
    smin = fl(_BIG)
    for d in steps:
      moves = lor(moves, ne(d, 0.0))
      smin = fmin(smin, ifl(ne(d, 0.0), fmax(d, sub(0.0, d)), _BIG))
    take = land(in_loop, nt, moves)
    stride_found = ifl(take, smin, stride_found)
    innermost = ifl(land(take, first), smin, innermost)
    run = ifl(land(take, first, eq(smin, 1.0)), lp.ext, run)
    rr = ifl(take, inner_prod, rr)
    in_loop = land(in_loop, lnot(take))
    first = land(first, lnot(nt))
    # reuse at this loop
    ent = _entries(sites, j, lv)
    serial = sum(1 for _, b in ent if b == name) - 1
    touched = fl(0.0)
    for s2, b2 in ent: touched = add(touched, mul(s2.regions[b2][lv], _bytes(s2, b2)))
    mr = land(r_in, nt, lnot(moves))
    sr = land(r_in, nt, moves) if serial > 0 else num(False)
    if serial > 0:
      least = None
      for s2, b2 in ent:
        if b2 == name: least = s2.regions[b2][lv] if least is None else fmin(least, s2.regions[b2][lv])
      dis_iter = ifl(sr, div(least, lp.ext), dis_iter)
      dis_bytes = ifl(sr, div(touched, lp.ext), dis_bytes)
      ct = ifl(sr, serial, ct)
    elem_only = fl(0.0)
    for s2, b2 in ent: elem_only = add(elem_only, _bytes(s2, b2))
    dis_iter = ifl(mr, read_iter, dis_iter)
    dis_bytes = ifl(mr, ifl(seen, prev_bytes, elem_only), dis_bytes)
    ct = ifl(mr, lp.ext, ct)
    mr_any, sr_any = lor(mr_any, mr), lor(sr_any, sr)
    r_in = land(r_in, lor(lnot(nt), land(moves, num(serial <= 0))))
    read_iter = mul(read_iter, lp.ext)
    prev_bytes = ifl(nt, touched, prev_bytes)
    seen = lor(seen, nt)
    inner_prod = mul(inner_prod, lp.ext)
  rr = ifl(in_loop, inner_prod, rr)
  lines = fmax(mul(div(outer_prod, rr), fmin(1.0, div(mul(stride_found, eb), CACHE_LINE))), 1.0)
  unique_lines = fmax(div(unique_bytes, fmin(mul(run, eb), CACHE_LINE)), 1.0)
  coef = ifl(ne(ct, 0.0), ct, 0.5)
  acc = [onehot(kind == "R"), onehot(kind == "W"), onehot(kind == "RW")]
  reuse = [onehot(mr_any), onehot(sr_any), onehot(lnot(lor(mr_any, sr_any)))]
  scal = [bytes_, unique_bytes, lines, unique_lines]
  return (acc + [slog(x) for x in scal] + reuse + [slog(dis_iter), slog(dis_bytes), slog(ct)]
          + [slog(div(x, coef)) for x in scal] + [slog(innermost)])


def intensity_curve(s: Site, float_ops: int) -> list[Expr]:
  """Ansor's arithmetic-intensity curve: log2(ops) vs log2(bytes) per loop level (inner -> outer),
  sampled at 10 evenly spaced log-ops and linearly interpolated; the ``while`` search is a select chain."""
  n = len(s.loops)
  if float_ops <= 0 or n == 0: return [fl(0.0)] * N_CURVE
  ops, mem, cur = [], [], fl(float(float_ops))
  for lv in range(n - 1, -1, -1):
    cur = mul(cur, s.loops[lv].ext)
    ops.append(log2(cur))
    m = fl(0.0)
    for b in s.acc: m = add(m, mul(s.regions[b][lv], _bytes(s, b)))
    mem.append(log2(m))
  # a loop of extent 1 (there in a symbolic program, gone from the concrete one) takes the point of the
  # next outer non-trivial loop: a duplicate point, which the interpolation below does not see
  nts = [nontrivial(s.loops[lv]) for lv in range(n - 1, -1, -1)]
  co, cm = ops[-1], mem[-1]
  for p in range(n - 1, -1, -1):
    co, cm = ifl(nts[p], ops[p], co), ifl(nts[p], mem[p], cm)
    ops[p], mem[p] = co, cm
  ai = [div(o, m) for o, m in zip(ops, mem)]
  out = []
  for i in range(N_CURVE):
    x = div(mul(ops[-1], float(i + 1)), float(N_CURVE))
    v = None
    for pt in range(n - 1, -1, -1):
      if pt == 0: val = ai[0]
      else:
        dx = sub(ops[pt], ops[pt - 1])
        val = add(ai[pt - 1], mul(div(sub(ai[pt], ai[pt - 1]), ifl(gt(dx, 0.0), dx, 1.0)), sub(x, ops[pt - 1])))
      v = val if v is None else ifl(ge(ops[pt], sub(x, 1e-4)), val, v)
    out.append(v)
  return out
