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
from minicomp.ir.loop import Buffer, Comment, CrossThreadReduce, For, If, LoopKernel, Program, Seq, Store, Sync

INDENT = "  "


def _buffer(b: Buffer, shape=None) -> str:
  dims = list(shape) if shape is not None else [b.size]
  return f"{b.name}: {b.dtype}{dims}"


def _stmt(s, depth: int, out: list[str]) -> None:
  pad = INDENT * depth
  if isinstance(s, Seq):
    for x in s.stmts: _stmt(x, depth, out)
  elif isinstance(s, For):
    note = "" if s.kind == "serial" else f"  # {s.kind}" + (" (auto_unroll pragma)" if s.pragma_unroll else "")
    out.append(f"{pad}for {s.var} in range({s.extent!r}):{note}")
    _stmt(s.body, depth + 1, out)
  elif isinstance(s, If):
    out.append(f"{pad}if {s.cond!r}:")
    _stmt(s.then, depth + 1, out)
  elif isinstance(s, Store):
    out.append(f"{pad}{s.buffer.name}[{s.index!r}] = {s.value!r}")
  elif isinstance(s, Sync):
    out.append(f"{pad}sync_threads()")
  elif isinstance(s, Comment):
    out.append(f"{pad}# {s.text}")
  elif isinstance(s, CrossThreadReduce):
    init = "" if s.init is None else f", init={s.init!r}"
    out.append(f"{pad}{s.dst.name}[{s.index!r}] = {s.combiner}_over_threadIdx.x({s.value!r}, threads={s.extent!r}, "
               f"method={s.method}, scratch={s.scratch.name}{init})  if {s.cond!r}")
  else:
    raise LoweringError(f"loop_text: no text form for the statement {s!r}")


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
