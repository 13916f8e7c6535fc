"""Readable text of the loop-nest IR (:mod:`minicomp.ir.loop`): what ``compile(dump_after="lower")`` prints.

One statement per line, nested by indentation, Python-like; expressions print through ``repr``
(:func:`minicomp.ir.printer.expr_str`). The CUDA emitter (:mod:`minicomp.codegen.cuda`) prints the
same tree as C; this text is for reading the loop structure::

    kernel task0_kernel0  grid=(4, 1, 1)  block=(64, 1, 1)  index=int32
      param x: float32[800] global (input)
      alloc C.local: float32[4] local
      bind i.0 = blockIdx.x
      bind i.1 = threadIdx.x
      for k in range(16):
        C.local[0] = C.local[0] + x[i.0 * 64 + k]
"""
from __future__ import annotations

from minicomp.errors import LoweringError
from minicomp.ir.loop import (AsyncCommit, AsyncWait, Buffer, Comment, CrossThreadReduce, For, FragmentLoad, If, LoopKernel, Mma, Program, Seq, Store,
                               Sync, walk_scoped)

INDENT = "  "


def _buffer(b: Buffer, shape=None) -> str:
  dims = list(shape) if shape is not None else [b.size]
  return f"{b.name}: {b.dtype}{dims}"


def _line(s) -> str | None:
  """The line of one statement (None: a sequence, which is only its children)."""
  if isinstance(s, Seq): return None
  if isinstance(s, For):
    note = "" if s.kind == "serial" else f"  # {s.kind}" + (" (auto_unroll pragma)" if s.pragma_unroll else "")
    return f"for {s.var} in range({s.extent!r}):{note}"
  if isinstance(s, If): return f"if {s.cond!r}:"
  if isinstance(s, Store):
    return f"{s.buffer.name}[{s.index!r}] = {s.value!r}" + ("  # cp.async" if s.async_copy else "")
  if isinstance(s, Sync): return "sync_threads()"
  if isinstance(s, AsyncCommit): return "cp_async_commit()"
  if isinstance(s, AsyncWait): return f"cp_async_wait(pending={s.pending})"
  if isinstance(s, Comment): return f"# {s.text}"
  if isinstance(s, CrossThreadReduce):
    init = "" if s.init is None else f", init={s.init!r}"
    return (f"{s.dst.name}[{s.index!r}] = {s.combiner}_over_threadIdx.x({s.value!r}, threads={s.extent!r}, "
            f"method={s.method}, scratch={s.scratch.name}{init})  if {s.cond!r}")
  if isinstance(s, Mma):
    return (f"mma_sync_{s.intrinsic}({s.acc.name}[{', '.join(map(repr, s.acc_index))}], a=[{', '.join(map(repr, s.a))}], "
            f"b=[{', '.join(map(repr, s.b))}]):  # computes:")
  if isinstance(s, FragmentLoad):
    dims = "".join(f"[{v} < {e}]" for v, e in s.dims)
    if s.ld: return f"{s.name}{dims} = {s.ld.helper}({s.ld.buffer.name}[{s.ld.index!r}])"
    return f"{s.name}{dims} = fragment({', '.join(map(repr, s.elements))})"
  raise LoweringError(f"loop_text: no text form for the statement {s!r}")


def _stmt(s, depth: int, out: list[str]) -> None:
  for x, d in walk_scoped(s, depth, lambda x, d: d if isinstance(x, Seq) else d + 1):
    line = _line(x)
    if line is not None: out.append(INDENT * d + line)


def kernel_text(k: LoopKernel, shapes: dict[str, tuple[int, ...]] | None = None) -> str:
  """One kernel: its launch configuration, parameters, allocations, thread bindings and loop nest."""
  shapes = shapes or {}
  dims = lambda t: "(" + ", ".join(repr(d) for d in t) + ")"
  out = [f"kernel {k.name}  grid={dims(k.grid)}  block={dims(k.block)}  index={k.index_dtype}"]
  out += [f"{INDENT}param {_buffer(b, shapes.get(b.name))} {b.scope} ({b.role})" for b in k.params]
  out += [f"{INDENT}alloc {_buffer(b)} {b.scope}" for b in k.allocs]
  out += [f"{INDENT}bind {v} = {axis}" for v, axis in k.bindings]
  _stmt(k.body, 1, out)
  return "\n".join(out)


def program_text(p: Program) -> str:
  """A whole lowered program: its global buffers, then each kernel in launch order."""
  out = []
  for what, bufs in (("input", p.inputs), ("output", p.outputs), ("temp", p.temps)):
    out += [f"{what} {_buffer(b, p.shapes.get(b.name))}" for b in bufs]
  out += [kernel_text(k, p.shapes) for k in p.kernels]
  return "\n".join(out)
