"""Coalescing (global memory) and bank conflicts (shared memory) of every access, from the first warp.

Each index is evaluated for the 32 lanes of the first warp (``threadIdx`` linearised x fastest,
block 0) at a few loop iterations: every loop at 0, and each loop in turn at 1 and at its last
value; the lanes of ``vectorize`` loops form one request where the emitter writes one vector access (2 or 4
float32, 8 as two; 2, 4 or 8 float16 / bfloat16 values held as such). A global access gets the
distinct 32-byte sectors and 128-byte lines per warp request and its efficiency (requested bytes
over moved bytes); a shared access the largest number of distinct words one bank serves in a
phase (1: no conflict).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from minicomp.errors import ExprError
from minicomp.ir.evaluate import evaluate_again
from minicomp.ir.loop import LoopKernel
from minicomp.search.static.footprint.isl_build import HW_TAGS

SECTOR = 32
LINE = 128                # L1 / L2 cache line: four sectors


@dataclass(frozen=True)
class AccessPattern:
  """Warp-level behaviour of one global or shared access."""
  buffer: str
  scope: str
  kind: str             # "read" | "write"
  index: str
  count: int            # dynamic accesses
  sectors_per_request: float | None = None    # global: distinct 32-byte sectors per warp request
  efficiency: float | None = None             # global: requested bytes / moved bytes (<= 1)
  requests: float | None = None               # global: estimated warp requests
  bank_conflict: float | None = None          # shared: max distinct words per bank (1 = none)
  lines_per_request: float | None = None      # global: distinct 128-byte lines per warp request


def _lanes(kernel: LoopKernel) -> dict[str, np.ndarray]:
  """The hardware indices of the first warp's lanes (block 0, threadIdx linearised x fastest)."""
  bx, by, bz = (int(x) for x in kernel.block)
  lane = np.arange(min(32, bx * by * bz))
  env = {t: np.zeros_like(lane) for t in HW_TAGS[:3]}
  env.update({"threadIdx.x": lane % bx, "threadIdx.y": (lane // bx) % by, "threadIdx.z": lane // (bx * by)})
  return env


# the vector widths the emitter writes as one access, by the type a buffer holds (codegen/cuda.py; 8 float32 values,
# which a float tile cast into a half one fetches, as two float4 loads: their sectors are counted as one request's)
VECTOR_WIDTHS = {"float32": (2, 4, 8), "float16": (2, 4, 8), "bfloat16": (2, 4, 8)}


def _requests(a, lanes: dict[str, np.ndarray], widths: tuple[int, ...]):
  """Per sampled iteration: (active-lane mask over the flattened lanes x vector elements, element indices, lane ids)."""
  vloops = [lp for lp in a.loops if lp.kind == "vectorize" and lp.extent in widths]
  others = [lp for lp in a.loops if lp not in vloops]
  samples = [{}] + [{lp.var: v} for lp in others for v in sorted({1, lp.extent - 1}) if v > 0]
  nl = len(lanes["threadIdx.x"])
  combos = [dict(zip([lp.var for lp in vloops], c)) for c in np.ndindex(*[lp.extent for lp in vloops])]
  for s in samples:
    idx, act, lid = [], [], []
    for c in combos:
      env = {**lanes, **{lp.var: 0 for lp in a.loops}, **s, **c}
      mask = np.ones(nl, bool)
      for cond in a.conds:
        try: mask &= np.broadcast_to(np.asarray(evaluate_again(cond, env), bool), (nl,))
        except ExprError: pass                 # a data-dependent condition: assume taken
      idx.append(np.broadcast_to(np.asarray(evaluate_again(a.index, env), np.int64), (nl,)))
      act.append(mask); lid.append(np.arange(nl))
    yield np.concatenate(act), np.concatenate(idx), np.concatenate(lid)


def access_patterns(kernel: LoopKernel, maps, dyn, nbytes) -> list[AccessPattern]:
  """The warp-level behaviour of every global and shared access (``dyn``: their dynamic counts)."""
  lanes = _lanes(kernel)
  out = []
  for m, count in zip(maps, dyn):
    a = m.access
    b = a.buffer
    if b.scope not in ("global", "shared"): continue
    size = nbytes[b.name]
    widths = VECTOR_WIDTHS.get(b.stored_dtype, ())
    pat = {"buffer": b.name, "scope": b.scope, "kind": a.kind, "index": repr(a.index), "count": count}
    if not m.affine_index:
      out.append(AccessPattern(**pat)); continue
    try: reqs = [(act, idx[act], lid[act]) for act, idx, lid in _requests(a, lanes, widths) if act.any()]
    except ExprError:
      out.append(AccessPattern(**pat)); continue
    if not reqs:
      out.append(AccessPattern(**pat, **({"sectors_per_request": 0.0, "efficiency": 1.0, "requests": 0.0,
                                          "lines_per_request": 0.0}
                                         if b.scope == "global" else {"bank_conflict": 1.0})))
      continue
    if b.scope == "global":
      sec = [len(np.unique(idx * size // SECTOR)) for _, idx, _ in reqs]
      lines = [len(np.unique(idx * size // LINE)) for _, idx, _ in reqs]
      eff = [min(1.0, len(idx) * size / (s * SECTOR)) for (_, idx, _), s in zip(reqs, sec)]
      per_req = float(np.mean([len(idx) for _, idx, _ in reqs]))
      out.append(AccessPattern(**pat, sectors_per_request=float(np.mean(sec)), efficiency=float(np.mean(eff)),
                               requests=count / per_req, lines_per_request=float(np.mean(lines))))
    else:
      deg = []
      for _, idx, lid in reqs:
        width = size * max(1, len(idx) // max(1, len(np.unique(lid))))
        phase = lid // max(1, 128 // width)
        worst = 1
        for ph in np.unique(phase):
          sel = idx[phase == ph] * size
          words = np.unique(np.concatenate([sel // 4 + k for k in range(max(1, size // 4))]))
          worst = max(worst, int(np.bincount(words % 32, minlength=32).max()))
        deg.append(worst)
      out.append(AccessPattern(**pat, bank_conflict=float(np.mean(deg))))
  return out
