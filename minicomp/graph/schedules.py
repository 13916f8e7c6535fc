"""Default (rule-based) schedules: always valid, reasonably fast, the baseline search must beat.

``default_schedule(dag, target)`` returns a Schedule for any ComputeDAG:

1. every non-output stage without a reduction is inlined (Ansor's GPU always-inline rule);
2. every remaining stage is its own kernel, scheduled by its kind:
   - a stage with data reuse (matmul, conv): multi-level tiling of the spatial axes with
     a register tile per thread (``cache_write("local")``), block tiles, and a split reduction;
   - a reduction over many elements per output (row sums, softmax / layernorm statistics):
     one block per output row, reduced across the threads (warp shuffles);
   - anything else: spatial axes fused and spread over blocks of up to 256 threads.
"""
from __future__ import annotations

import math

from minicomp.ir.dag import ComputeDAG, has_data_reuse, has_fusible_consumer
from minicomp.ir.schedule import Schedule
from minicomp.target import Target, as_target


def _parallel(s: Schedule, name: str, threads: int = 256) -> None:
  sp = s.axis(name)
  if not sp: return
  f = s.fuse(name, *sp) if len(sp) > 1 else sp[0]
  ext = math.prod(s.state.stage(name).tensor.shape)
  t = min(threads, max(32, 1 << (ext - 1).bit_length())) if ext > 1 else 1
  if ext <= 1: return
  bo, ti = s.split(name, f, t)
  s.bind(name, bo, "blockIdx.x"); s.bind(name, ti, "threadIdx.x")


def _row_reduce(s: Schedule, name: str) -> None:
  st = s.state.stage(name)
  sp, rd = s.axis(name), s.reduce_axis(name)
  red = math.prod(int(a.extent.arg) for a in st.tensor.reduce_axes)
  threads = 32 if red <= 256 else 128 if red <= 4096 else 256
  r = s.fuse(name, *rd) if len(rd) > 1 else rd[0]
  ro, ri = s.split(name, r, threads)
  if sp:
    f = s.fuse(name, *sp) if len(sp) > 1 else sp[0]
    s.bind(name, f, "blockIdx.x")
  s.cross_thread_reduce(name, ri, "shuffle")


def _tile(s: Schedule, name: str, producer: str | None = None) -> None:
  """Block tiles of up to 64x64 outputs over the last two spatial axes, 4x4 per thread, the
  reduction split by 8 and accumulated in registers: ``producer`` (a reduction whose only
  consumer is ``name``, elementwise) is computed per thread, else a ``cache_write`` of ``name``."""
  shape = s.state.stage(name).tensor.shape
  local = producer or s.cache_write(name, "local")
  sp = s.axis(name)
  outer, inner = (sp[:-2], sp[-2:]) if len(sp) >= 2 else ([], sp)
  tiles = []
  for ax, ext in zip(inner, shape[len(outer):]):
    per_thread = min(4, ext)
    threads = min(16, -(-ext // per_thread))
    tiles.append(s.split(name, ax, [threads, per_thread]))    # (block, thread, inner)
  s.reorder(name, *outer, *[t[0] for t in tiles], *[t[1] for t in tiles], *[t[2] for t in tiles])
  for t, b_tag, t_tag in zip(reversed(tiles), ("blockIdx.x", "blockIdx.y"), ("threadIdx.x", "threadIdx.y")):
    s.bind(name, t[0], b_tag); s.bind(name, t[1], t_tag)
  if outer and math.prod(shape[:len(outer)]) > 1:
    o = s.fuse(name, *outer) if len(outer) > 1 else outer[0]
    s.bind(name, o, "blockIdx.z")
  s.compute_at(local, name, tiles[-1][1])
  rd = s.reduce_axis(local)
  if rd:
    r = s.fuse(local, *rd) if len(rd) > 1 else rd[0]
    ro, ri = s.split(local, r, 8)
    s.reorder(local, ro, ri, *[l for l in s.loops(local) if l not in (ro, ri)])
    s.pragma(local, ro, "auto_unroll_max_step", 64)


def default_schedule(outputs, target: Target | str = "sm_86") -> Schedule:
  """A valid, reasonably fast schedule for any computation (see module docstring)."""
  tgt = as_target(target)
  dag = outputs if isinstance(outputs, ComputeDAG) else ComputeDAG(outputs)
  s = Schedule(dag)
  out_names = {t.name for t in dag.outputs}
  for t in dag.tensors:
    if not t.is_placeholder and t.name not in out_names and not t.reduce_axes:
      s.compute_inline(t.name)
  fused_into: dict[str, str] = {}    # reduction -> its elementwise output consumer (tiled together)
  for t in dag.tensors:
    if t.reduce_axes and has_data_reuse(t) and t.name not in out_names and has_fusible_consumer(dag, t) \
        and dag.consumers(t)[0].name in out_names:
      fused_into[dag.consumers(t)[0].name] = t.name
  for t in dag.tensors:
    if t.is_placeholder or (t.name not in out_names and not t.reduce_axes) or t.name in fused_into.values(): continue
    if t.name in fused_into:
      _tile(s, t.name, fused_into[t.name])
    elif t.reduce_axes and has_data_reuse(t) and len(t.axes) >= 1:
      _tile(s, t.name)
    elif t.reduce_axes and math.prod(int(a.extent.arg) for a in t.reduce_axes) >= 64:
      _row_reduce(s, t.name)
    else:
      _parallel(s, t.name)
  return s
