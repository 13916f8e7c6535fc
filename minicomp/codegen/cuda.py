"""The CUDA C emitter: loop-nest Program -> CUDA C text (what NVRTC compiles and the simulator runs).

Expressions print through one fold table, ``CODE_FOR_OP`` (Op -> rule), over ir/rewrite.py's ``fold``,
as ir/printer.py prints Python: every node folds to ``(text, precedence)`` and a parent puts a child in
parentheses when the child binds less tightly than its operand position needs (C's precedences,
``_PREC``; a negative integer literal is parenthesised in every operand position). What depends on the
kernel (int32 or long long indices, floor helpers under the loop ranges known so far, buffer loads) the
rules read from the renderer, the fold's ``ctx``. Statements print through one method per statement
class (``_STMT``). Output is deterministic: the same Program gives the same text, byte for byte.
A float16 (bfloat16) value is stored as ``__half`` (``__nv_bfloat16``) in global memory (kernel parameters), and
computed in float: a load converts it (``__half2float``), a store rounds it to nearest even (``__float2half_rn``),
registers, shared tiles, arithmetic, constants and reductions are float (``Buffer.stored_dtype``), and a cast to the half type
inside an expression rounds there (``_HALF``; NVRTC gets the types from ``nvrtc.HALF_HEADER``, the simulator
from ``cuda_shim.h``).
Integer ``//`` and ``%`` print as C ``/`` and ``%`` when the operands are provably
non-negative (the common case after bound inference), else through floor helpers.
A kernel whose ``index_dtype`` is int64 (lowering decides) computes its indices in ``long long``:
loop and thread variables, casts and int32 loads inside indices, integer min / max, floor helpers.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import replace
from typing import Callable, Sequence

from minicomp.codegen.cache import switched_on
from minicomp.codegen.cse import shared_subexpressions
from minicomp.errors import CodegenError
from minicomp.ir.expr import Expr, const, free_vars, var, walk
from minicomp.ir.rewrite import fold, map_loads, substitute
from minicomp.ir.loop import (AsyncCommit, AsyncWait, Buffer, Comment, CrossThreadReduce, For, FragmentLoad, If,
                              LoopKernel, Mma, Program, Seq, Store, Sync)
from minicomp.ir.mma import INTRINSICS
from minicomp.ir.ops import BITCAST, C_TYPE, DOT4, FLOAT_DTYPES, INT_BITS, TRIG, UNSIGNED_DTYPES, Op, int_range
from minicomp.ir.linear import bounds, build_linear, consecutive, linear, multiple_of
from minicomp.ir.simplify import simplify
from minicomp.target import STATIC_SHARED_BYTES

STAGE_CHUNK = 8   # the most iterations of a fetch loop staged through registers at once (CUDARenderer._staged)
STAGE_SWITCH = "MINICOMP_STAGED_FETCH"   # =0 turns staging off (on by default since 2026-12-01)

_PREC = {Op.OR: 1, Op.AND: 2, Op.EQ: 3, Op.NE: 3, Op.LT: 4, Op.LE: 4, Op.GT: 4, Op.GE: 4,
         Op.ADD: 5, Op.SUB: 5, Op.MUL: 6, Op.DIV: 6, Op.FLOORDIV: 6, Op.FLOORMOD: 6}
_SYM = {Op.ADD: "+", Op.SUB: "-", Op.MUL: "*", Op.DIV: "/", Op.FLOORDIV: "/", Op.FLOORMOD: "%", Op.LT: "<",
        Op.LE: "<=", Op.GT: ">", Op.GE: ">=", Op.EQ: "==", Op.NE: "!=", Op.AND: "&&", Op.OR: "||"}

_ATOM = 99   # leaves, calls, loads, casts, selects, negations: never parenthesised
_Kid = tuple[str, int]   # a folded child: its text and its precedence

_F32_CALL = {"exp": "expf", "log": "logf", "sqrt": "sqrtf", "rsqrt": "rsqrtf", "tanh": "tanhf", "erf": "erff",
             "pow": "powf", "abs": "fabsf", "floor": "floorf", "ceil": "ceilf", "exp2": "exp2f", "log2": "log2f",
             "round": "roundf", "fmod": "fmodf", **{t: t + "f" for t in TRIG}}

PRELUDE = """\
__device__ __forceinline__ int mc_floordiv(int a, int b) { int q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q; }
__device__ __forceinline__ int mc_floormod(int a, int b) { int r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
"""
# bitcast (ir/ops.py): the same bits read as another type of their width
# (a union: NVRTC has no memcpy without headers; both compilers define reading the other member)
PRELUDE_BITCAST = ("template <typename T, typename F> __device__ __forceinline__ T mc_bitcast(F x) "
                   "{ union { F f; T t; } u; u.f = x; return u.t; }\n")
PRELUDE64 = """\
__device__ __forceinline__ long long mc_floordiv64(long long a, long long b) { long long q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q; }
__device__ __forceinline__ long long mc_floormod64(long long a, long long b) { long long r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
"""

_COMB_C = {"sum": lambda a, b, t: f"{a} + {b}", "prod": lambda a, b, t: f"{a} * {b}",
           "max": lambda a, b, t: f"{'fmaxf' if t == 'float32' else 'max'}({a}, {b})",
           "min": lambda a, b, t: f"{'fminf' if t == 'float32' else 'min'}({a}, {b})"}


_HALF = {"float16": ("__half2float", "__float2half_rn"),    # storage dtype -> (to float, from float)
         "bfloat16": ("__bfloat162float", "__float2bfloat16_rn")}


_VECTOR = ("float32", "float16", "bfloat16")   # element types (as held) a vectorize loop moves in one access
_BYTES = ("int8", "uint8")   # ... and these, 2 to 16 at a time, where the loop copies them (a fetched int8 tile)
_RAW = {2: "unsigned short", 4: "unsigned int", 8: "uint2", 16: "uint4"}   # bytes -> the type that moves them raw


def _ctype(dtype: str) -> str:
  """The C type a value of ``dtype`` is computed in (float for a half type, else its own)."""
  return "float" if dtype in _HALF else C_TYPE[dtype]


def _stored(buf) -> bool:
  """``buf`` holds a half type (global memory; shared tiles and registers of a half tensor hold floats:
  ``Buffer.stored_dtype``)."""
  return buf.stored_dtype in _HALF


def _branch_loads(e: Expr) -> set[Expr]:
  """The loads of ``e`` inside a ``select``'s branches (C evaluates them only where the select picks them)."""
  out: set[Expr] = set()
  for n in walk(e):
    if n.op is Op.SELECT: out |= {x for b in n.src[1:] for x in walk(b) if x.op is Op.LOAD}
  return out


def _copied(buf, value: Expr) -> bool:
  """``value`` is an element read from a buffer that holds the type ``buf`` holds: stored as it is (raw bits)."""
  return value.op is Op.LOAD and value.arg.stored_dtype == buf.stored_dtype


def _unrounded(buf, value: Expr) -> Expr:
  """``value`` without a cast to ``buf``'s half type at its top: storing into ``buf`` rounds it anyway."""
  return value.src[0] if value.op is Op.CAST and _stored(buf) and value.dtype == buf.dtype else value


def _float_lit(v: float, dtype: str) -> str:
  if dtype in _HALF: dtype = "float32"
  if math.isinf(v):
    return ("__int_as_float(0x7f800000)" if v > 0 else "__int_as_float(0xff800000)") if dtype == "float32" else (
      "(1.0/0.0)" if v > 0 else "(-1.0/0.0)")
  if math.isnan(v): return "__int_as_float(0x7fffffff)"
  s = repr(float(v))
  if "e" not in s and "." not in s: s += ".0"
  return s + ("f" if dtype == "float32" else "")


class CUDARenderer:
  """Render a Program to CUDA C."""
  indent = "  "

  def __init__(self):
    self._ranges: dict[str, tuple[int, int]] = {}
    self.uses_floor_helpers = self.uses_floor_helpers64 = self.uses_bitcast = False
    self.i64, self.itype = False, "int"   # the kernel being rendered indexes with long long / int (kernel() sets)
    self._idx = 0      # > 0 while rendering an index (or a guard)
    self._named = 0    # locals declared for shared subexpressions in this kernel (mc_e0, mc_e1, ...)
    self._forget()

  @property
  def ranges(self) -> dict[str, tuple[int, int]]:
    """The known ranges of loop and thread variables: floor helpers print ``//`` and ``%`` only where these
    do not prove the operands non-negative. Assigning it forgets the memoised renderings; edit it in place
    only to add variables."""
    return self._ranges

  @ranges.setter
  def ranges(self, r: dict[str, tuple[int, int]]) -> None:
    self._ranges = r
    self._forget()

  def _forget(self) -> None:
    """Drop the renderings memoised so far (node -> (text, prec)): a new kernel, or a variable's range changed.
    Values and indices differ only in an int64 kernel; there a value's loads render their indices apart."""
    self._memo: dict[Expr, _Kid] = {}
    self._imemo: dict[Expr, _Kid] = self._memo if not self.i64 else {}

  # -- expressions
  def expr(self, e: Expr, prec: int = 0) -> str:
    """``e`` as C, in an operand position that needs precedence ``prec`` (0: an argument or a statement's own)."""
    if self.i64 and not self._idx:
      kid = self._memo.get(e) or fold(e, CODE_FOR_OP, self, self._memo, "emit_cuda", _not_load)
    else: kid = self._imemo.get(e) or fold(e, CODE_FOR_OP, self, self._imemo, "emit_cuda")
    return _at(kid, prec)

  def index(self, e: Expr) -> str:
    """An index or guard: in an int64 kernel its int32 values (loads, casts) are long long."""
    self._idx += 1
    try: return self.expr(e)
    finally: self._idx -= 1

  def _ll(self, e: Expr, kid: _Kid) -> str:
    """``e`` (folded to ``kid``) as a long long operand (integer min / max of an int64 kernel: no mixed overloads)."""
    if e.is_const: return f"{int(e.arg)}LL"
    return kid[0] if e.op in (Op.VAR, Op.MIN, Op.MAX) else f"(long long){_at(kid, 7)}"

  def _index_int(self, e: Expr) -> bool:
    """An int32 value inside an index of an int64 kernel: computed as long long."""
    return self.i64 and self._idx > 0 and e.dtype == "int32"

  def _floor_helper(self, e: Expr) -> str | None:
    """The helper that prints integer ``//`` or ``%`` node ``e``, None where C's truncating ``/`` and ``%``
    are exact (both operands provably non-negative, the divisor positive)."""
    lo_a, _ = bounds(e.src[0], self.ranges); lo_b, _ = bounds(e.src[1], self.ranges)
    if lo_a is not None and lo_a >= 0 and lo_b is not None and lo_b > 0: return None
    wide = self.i64 or e.dtype == "int64"
    if wide: self.uses_floor_helpers64 = True
    else: self.uses_floor_helpers = True
    return ("mc_floordiv" if e.op is Op.FLOORDIV else "mc_floormod") + ("64" if wide else "")

  @contextlib.contextmanager
  def _shared(self, roots: Sequence[Expr], depth: int, out: list[str]):
    """Within the block: the subexpressions of ``roots`` that :func:`shared_subexpressions` picks are
    declared once before the statement (``const T mc_eK = ...;``) and printed by name. The names live in
    the statement's C block, so the renderings that use them are forgotten after it."""
    named = shared_subexpressions(roots)
    if not named:
      yield
      return
    saved = self._memo, self._imemo
    self._memo = dict(self._memo)
    self._imemo = self._memo if not self.i64 else self._imemo
    try:
      for n in named:
        name = f"mc_e{self._named}"
        self._named += 1
        out.append(f"{self.indent * depth}const {_ctype(n.dtype)} {name} = {self.expr(n)};")
        self._memo[n] = (name, _ATOM)
      yield
    finally:
      self._memo, self._imemo = saved

  # -- statements
  def stmt(self, s, depth: int, out: list[str]) -> None:
    """Append the lines of statement ``s``, indented ``depth`` levels, to ``out``."""
    h = _STMT.get(type(s))
    if h is None: raise CodegenError(f"failed to render statement {type(s).__name__}: {s}")
    h(self, s, depth, out)

  def _seq(self, s: Seq, depth: int, out: list[str]) -> None:
    for x in s.stmts: self.stmt(x, depth, out)

  def _for(self, s: For, depth: int, out: list[str]) -> None:
    ind = self.indent * depth
    if not s.extent.is_const:
      raise CodegenError(f"loop {s.var} has a symbolic extent {s.extent}; substitute values first")
    n = int(s.extent.arg)
    if self.ranges.get(s.var, (0, n - 1)) != (0, n - 1): self._forget()   # a name reused with another extent
    self.ranges[s.var] = (0, n - 1)
    if n == 1:
      out.append(f"{ind}{{ const {self.itype} {s.var} = 0;")
      self.stmt(s.body, depth + 1, out)
      out.append(f"{ind}}}")
      return
    if s.kind == "vectorize" and self._vectorized(s, depth, out): return
    if self._staged(s, n, depth, out): return
    if s.kind in ("unroll", "vectorize", "vthread"): out.append(f"{ind}#pragma unroll")
    note = "  // " + s.kind if s.kind in ("vthread", "vectorize") else ""
    out.append(f"{ind}for ({self.itype} {s.var} = 0; {s.var} < {n}; ++{s.var}) {{{note}")
    self.stmt(s.body, depth + 1, out)
    out.append(f"{ind}}}")

  def _staged(self, s: For, n: int, depth: int, out: list[str]) -> bool:
    """A cooperative fetch loop (``[if (guard) ...] tile[index] = value`` of global loads) in chunks of up to
    :data:`STAGE_CHUNK` iterations, each as two unrolled loops: the chunk's values into a register array first,
    then the array into the tile. Written as one loop, a guarded fetch whose guard or padding select ptxas does not
    turn into predicated instructions issues each load, then its store, which waits for the load: every
    iteration pays a global load's whole latency (conv 512 7x7 on an H200: 20 loads a round, each waiting for the
    one before; nvdisasm, research/README.md "fetch_staging.py"). Staged, a chunk's loads issue back to back and
    its first store waits for all of them at once; the chunk bounds the registers it takes. False (the loop as it
    is) for any other loop, an asynchronous copy, a tile held in a half type, a loop whose extent has no divisor
    from 2 to :data:`STAGE_CHUNK`, and where ``MINICOMP_STAGED_FETCH=0`` (on by default since 2026-12-01, when the
    static model's latency chain learned to see the waiting: it then estimates the nine models of
    ``benchmarks/defaults.py`` faster or equal with staging on sm_86 and h100; no GPU has timed it yet)."""
    if s.kind not in ("serial", "unroll") or not switched_on(STAGE_SWITCH): return False
    body, guards = s.body, []
    while isinstance(body, If): guards.append(body.cond); body = body.then
    if not isinstance(body, Store) or body.async_copy or body.buffer.scope != "shared": return False
    loads = [x for x in walk(body.value) if x.op is Op.LOAD]
    if not loads or any(x.arg.scope != "global" for x in loads): return False
    if any(x.op is Op.LOAD for e in (body.index, *guards) for x in walk(e)): return False
    chunk = max((c for c in range(2, STAGE_CHUNK + 1) if n % c == 0), default=None)
    stage = Buffer(f"{body.buffer.name}_stage", body.buffer.dtype, "local", const(chunk or 1))
    if chunk is None or stage.stored_dtype != body.buffer.stored_dtype: return False
    ind, it = self.indent * depth, self.itype
    c, j = f"{s.var}_c", f"{s.var}_j"
    self.ranges[c], self.ranges[j] = (0, n // chunk - 1), (0, chunk - 1)
    fill = Store(stage, var(j), body.value)
    put = Store(body.buffer, body.index, Expr.make(Op.LOAD, body.value.dtype, (var(j),), stage))
    inner = depth + (n > chunk)
    if n > chunk: out.append(f"{ind}for ({it} {c} = 0; {c} < {n // chunk}; ++{c}) {{")
    out.append(f"{self.indent * inner}{_ctype(stage.dtype)} {stage.name}[{chunk}];   // {s.var}: loads, then stores")
    for st in (fill, put):
      out.append(f"{self.indent * inner}#pragma unroll")
      out.append(f"{self.indent * inner}for ({it} {j} = 0; {j} < {chunk}; ++{j}) {{")
      out.append(f"{self.indent * (inner + 1)}const {it} {s.var} = {f'{c} * {chunk} + ' if n > chunk else ''}{j};")
      for g in reversed(guards): st = If(g, st)
      self.stmt(st, inner + 1, out)
      out.append(f"{self.indent * inner}}}")
    if n > chunk: out.append(f"{ind}}}")
    return True

  def _if(self, s: If, depth: int, out: list[str]) -> None:
    out.append(f"{self.indent * depth}if ({self.index(s.cond)}) {{")
    self.stmt(s.then, depth + 1, out)
    out.append(f"{self.indent * depth}}}")

  def _store(self, s: Store, depth: int, out: list[str]) -> None:
    v = s.value
    if s.async_copy and _copied(s.buffer, v) and v.arg.scope == "global" and s.buffer.element_bytes == 4:   # cp.async
      out.append(f"{self.indent * depth}mc_cp_async_4({s.buffer.name} + {self.index(s.index)}, "
                 f"{v.arg.name} + {self.index(v.src[0])}, true);")
      return
    if _copied(s.buffer, v) and _stored(s.buffer):   # a half copy:
      out.append(f"{self.indent * depth}{s.buffer.name}[{self.index(s.index)}] = {v.arg.name}[{self.index(v.src[0])}];")
      return                                                                                      # no conversions
    v = _unrounded(s.buffer, v)
    with self._shared([v], depth, out):
      out.append(f"{self.indent * depth}{self._assign(s.buffer, self.index(s.index), self.expr(v))};")

  @staticmethod
  def _assign(buf, index: str, value: str) -> str:
    """``buf[index] = value``, rounded to the buffer's half type where it stores one."""
    return f"{buf.name}[{index}] = {_HALF[buf.dtype][1]}({value})" if _stored(buf) else f"{buf.name}[{index}] = {value}"

  @staticmethod
  def _read(buf, index: str) -> str:
    """``buf[index]`` as a computed value (a stored half type converted to float)."""
    return f"{_HALF[buf.dtype][0]}({buf.name}[{index}])" if _stored(buf) else f"{buf.name}[{index}]"

  def _sync(self, s: Sync, depth: int, out: list[str]) -> None:
    out.append(f"{self.indent * depth}__syncthreads();")

  def _async_commit(self, s: AsyncCommit, depth: int, out: list[str]) -> None:
    out.append(f"{self.indent * depth}mc_cp_async_commit();")

  def _async_wait(self, s: AsyncWait, depth: int, out: list[str]) -> None:
    out.append(f"{self.indent * depth}mc_cp_async_wait<{s.pending}>();")

  def _comment(self, s: Comment, depth: int, out: list[str]) -> None:
    out.append(f"{self.indent * depth}// {s.text}")

  def _vectorized(self, s: For, depth: int, out: list[str]) -> bool:
    """Emit a vectorize loop as float2/float4 loads and stores (2 or 4 half values: one 4- or 8-byte load or store;
    8 between half buffers: 16 bytes) when every access is provably contiguous in the loop variable and aligned;
    return False (scalar fallback) otherwise."""
    n = int(s.extent.arg)
    st = s.body
    if not isinstance(st, Store) or st.buffer.scope == "local": return False
    if st.buffer.stored_dtype in _BYTES: return self._vectorized_bytes(s, st, n, depth, out)
    if n not in (2, 4, 8) or st.buffer.stored_dtype not in _VECTOR: return False
    v = s.var
    vec_loads: dict[Expr, int] = {}
    for node in walk(st.value):
      if node.op is Op.LOAD and v in free_vars(node.src[0]):
        if node.arg.scope == "local" or node.arg.stored_dtype not in _VECTOR or _aligned_base(node.src[0], v, n) is None:
          return False
        vec_loads.setdefault(node, len(vec_loads))
    if _aligned_base(st.index, v, n) is None: return False
    if vec_loads.keys() & _branch_loads(st.value): return self._zero_filled(s, st, n, depth, out)
    rest = map_loads(st.value, lambda x: const(0.0) if x in vec_loads else x)
    if v in free_vars(rest): return False   # the loop variable is used outside contiguous loads
    if st.async_copy and _copied(st.buffer, st.value) and st.value.arg.scope == "global" \
        and n * st.buffer.element_bytes <= 16:   # one cp.async of n values
      return self._cp_async(st, v, n, depth, out)
    if st.buffer.stored_dtype in _HALF or any(x.arg.stored_dtype in _HALF for x in vec_loads):
      return self._vectorized_half(s, st, n, vec_loads, depth, out)
    # floats only: one float2 / float4 access per load and for the store, 8 lanes two float4 (the base is aligned to
    # 8 floats, so both halves are to 16 bytes; the static model counts them as one request, footprint/coalescing.py)
    ind, ind2 = self.indent * depth, self.indent * (depth + 1)
    parts = 2 if n == 8 else 1
    vt = f"float{n // parts}"
    out.append(f"{ind}{{  // {s.var}: vectorized ({f'{parts} x ' if parts > 1 else ''}{vt})")
    loaded = {x: self._float_loads(x, k, v, n, ind2, out) for x, k in vec_loads.items()}
    base = self.index(_aligned_base(st.index, v, n))
    dst = [f"*reinterpret_cast<{vt}*>({st.buffer.name} + {base}{f' + {4 * h}' if h else ''})" for h in range(parts)]
    if len(vec_loads) == 1 and st.value in vec_loads:   # a plain copy
      out.extend(f"{ind2}{d} = {r};" for d, r in zip(dst, loaded[st.value]))
      out.append(f"{ind}}}")
      return True
    res = [f"mc_r{h}" if parts > 1 else "mc_r" for h in range(parts)]
    out.extend(f"{ind2}{vt} {r};" for r in res)
    for lane in range(n):
      val = map_loads(st.value, lambda x: _lane(loaded[x], lane) if x in loaded else x)
      val = simplify(substitute(val, {v: const(lane)}), self.ranges)
      with self._shared([val], depth + 1, out):
        out.append(f"{ind2}{res[lane // 4]}.{'xyzw'[lane % 4]} = {self.expr(val)};")
    out.extend(f"{ind2}{d} = {r};" for d, r in zip(dst, res))
    out.append(f"{ind}}}")
    return True

  def _float_loads(self, x: Expr, k: int, v: str, n: int, ind: str, out: list[str]) -> list[str]:
    """Emit the vectorize loop's load ``x`` of ``n`` float32 values as one float2 / float4 (``mc_v{k}``), or 8 as two
    float4 (``mc_v{k}_0``, ``_1``: the base is aligned to 8 floats, so both halves are to 16 bytes; the static model
    counts them as one request, footprint/coalescing.py); the names, four lanes each (:func:`_lane`)."""
    parts = 2 if n == 8 else 1
    vt = f"float{n // parts}"
    base = self.index(_aligned_base(x.src[0], v, n))
    names = [f"mc_v{k}_{h}" if parts > 1 else f"mc_v{k}" for h in range(parts)]
    for h, name in enumerate(names):
      out.append(f"{ind}const {vt} {name} = *reinterpret_cast<const {vt}*>({x.arg.name} + {base}"
                 f"{f' + {4 * h}' if h else ''});")
    return names

  def _vectorized_bytes(self, s: For, st: Store, n: int, depth: int, out: list[str]) -> bool:
    """The vectorize loop of :meth:`_vectorized` when it copies 8-bit values (a fetch of an int8 / uint8 tile): one
    2-, 4-, 8- or 16-byte load and store (one cp.async where the copy is asynchronous), both provably aligned."""
    v, src = s.var, st.value
    if n not in _RAW or not _copied(st.buffer, src) or src.arg.scope == "local": return False
    dst_base, src_base = _aligned_base(st.index, v, n), _aligned_base(src.src[0], v, n)
    if dst_base is None or src_base is None: return False
    if st.async_copy and src.arg.scope == "global" and n >= 4: return self._cp_async(st, v, n, depth, out)
    t = _RAW[n]
    out.append(f"{self.indent * depth}*reinterpret_cast<{t}*>({st.buffer.name} + {self.index(dst_base)}) = "
               f"*reinterpret_cast<const {t}*>({src.arg.name} + {self.index(src_base)});"
               f"  // {v}: vectorized ({n} bytes)")
    return True

  def _cp_async(self, st: Store, v: str, n: int, depth: int, out: list[str], valid: Expr | None = None) -> bool:
    """The vectorize loop over ``v`` of ``n`` values that ``st`` copies raw from global memory, both sides aligned,
    as one cp.async of their bytes (zeros where ``valid`` is false: the source is then not read)."""
    out.append(f"{self.indent * depth}mc_cp_async_{n * st.buffer.element_bytes}({st.buffer.name} + "
               f"{self.index(_aligned_base(st.index, v, n))}, {st.value.arg.name} + "
               f"{self.index(_aligned_base(st.value.src[0], v, n))}, "
               f"{'true' if valid is None else self.index(valid)});  // {v}: vectorized")
    return True

  def _zero_filled(self, s: For, st: Store, n: int, depth: int, out: list[str]) -> bool:
    """A vectorize loop whose contiguous loads sit in a ``select`` branch: read only where the select picks them.
    ``tile[i] = c ? x : 0`` with ``c`` the same for every lane (a tile that overhangs its tensor, lower.py
    ``_Info.fill``) is one cp.async that writes zeros where ``c`` is false, in an asynchronous copy, else
    ``if (c) <the vectorized copy> else <vectorized zeros>``; any other select (one lane's condition) is scalar
    (False), each lane reading behind its own condition. (Vectorized as other loops are, the loads would be issued
    for every lane whatever the select says: past the tensor's end.)"""
    v, value = s.var, st.value
    if value.op is not Op.SELECT or v in free_vars(value.src[0]): return False
    cond, x, zero = value.src
    if not (zero.op is Op.CONST and zero.arg == 0): return False
    if st.async_copy and _copied(st.buffer, x) and x.arg.scope == "global" and n * st.buffer.element_bytes <= 16:
      return self._cp_async(replace(st, value=x), v, n, depth, out, valid=cond)
    ind, ind2 = self.indent * depth, self.indent * (depth + 1)
    out.append(f"{ind}if ({self.index(cond)}) {{")
    self.stmt(replace(s, body=replace(st, value=x)), depth + 1, out)
    out.append(f"{ind}}} else {{")
    raw = _RAW.get(n * st.buffer.element_bytes)
    if raw is None: self.stmt(replace(s, body=replace(st, value=zero)), depth + 1, out)
    else:
      out.append(f"{ind2}const {raw} mc_zero = {{}};  // {v}: vectorized ({n} zeros)")
      out.append(f"{ind2}*reinterpret_cast<{raw}*>({st.buffer.name} + {self.index(_aligned_base(st.index, v, n))}) = "
                 "mc_zero;")
    out.append(f"{ind}}}")
    return True

  def _vectorized_half(self, s: For, st: Store, n: int, vec_loads: dict, depth: int, out: list[str]) -> bool:
    """The vectorize loop of :meth:`_vectorized` when a half buffer takes part: each half load of n values is one
    raw load (``unsigned int`` / ``uint2`` / ``uint4``) into an aligned array of n halves, converted lane by lane, a
    float load one float2 / float4 (8 floats into a half buffer, a float tile cast to half: two float4); a
    half store rounds each lane into such an array and writes it with one raw store (a half-to-half copy moves the
    raw bits); a float store (a shared tile) is one float2 / float4 store."""
    v = s.var
    ind, ind2 = self.indent * depth, self.indent * (depth + 1)
    raw = _RAW[2 * n]
    dst_t = st.buffer.stored_dtype
    out.append(f"{ind}{{  // {s.var}: vectorized ({n} x {C_TYPE[dst_t]})")
    src = lambda x: f"*reinterpret_cast<const {raw}*>({x.arg.name} + {self.index(_aligned_base(x.src[0], v, n))})"
    dst = f"{st.buffer.name} + {self.index(_aligned_base(st.index, v, n))}"
    if len(vec_loads) == 1 and st.value in vec_loads and _copied(st.buffer, st.value):   # a raw copy
      out.append(f"{ind2}*reinterpret_cast<{raw}*>({dst}) = {src(st.value)};")
      out.append(f"{ind}}}")
      return True
    lane_of = {}
    for x, k in vec_loads.items():
      if x.arg.stored_dtype in _HALF:
        out.append(f"{ind2}__align__({2 * n}) {C_TYPE[x.arg.stored_dtype]} mc_h{k}[{n}];")
        out.append(f"{ind2}*reinterpret_cast<{raw}*>(mc_h{k}) = {src(x)};")
        lane_of[x] = lambda lane, k=k, t=x.arg.stored_dtype: var(f"{_HALF[t][0]}(mc_h{k}[{lane}])", "float32")
      else:          # (8 floats: a float tile cast to half)
        lane_of[x] = lambda lane, names=self._float_loads(x, k, v, n, ind2, out): _lane(names, lane)
    value = _unrounded(st.buffer, st.value)
    if dst_t in _HALF:
      out.append(f"{ind2}__align__({2 * n}) {C_TYPE[dst_t]} mc_o[{n}];")
    else:
      out.append(f"{ind2}float{n} mc_r;")
    for lane in range(n):
      val = map_loads(value, lambda x: lane_of[x](lane) if x in lane_of else x)
      val = simplify(substitute(val, {v: const(lane)}), self.ranges)
      with self._shared([val], depth + 1, out):
        if dst_t in _HALF: out.append(f"{ind2}mc_o[{lane}] = {_HALF[dst_t][1]}({self.expr(val)});")
        else: out.append(f"{ind2}mc_r.{'xyzw'[lane]} = {self.expr(val)};")
    if dst_t in _HALF: out.append(f"{ind2}*reinterpret_cast<{raw}*>({dst}) = *reinterpret_cast<const {raw}*>(mc_o);")
    else: out.append(f"{ind2}*reinterpret_cast<float{n}*>({dst}) = mc_r;")
    out.append(f"{ind}}}")
    return True

  def _mma(self, s: Mma, depth: int, out: list[str]) -> None:
    """A warp's mma.sync (``Schedule.tensorize``): the lane's accumulator elements gathered, its A and B fragment
    elements packed into registers (two 16-bit values per register, the lower-numbered in the low half; one tf32
    per register, rounded by ``mc_tf32``), the helper of ``codegen/tensor_core.py`` called, the elements put back.
    A fragment whose layout allows it (``Mma.a_ld`` / ``b_ld``, ir/mma.py) is read with one ``ldmatrix`` instead,
    unless ``MINICOMP_LDMATRIX=0``."""
    ind, ind2 = self.indent * depth, self.indent * (depth + 1)
    intr = INTRINSICS[s.intrinsic]
    if not switched_on("MINICOMP_LDMATRIX"): s = replace(s, a_ld=None, b_ld=None)
    out.append(f"{ind}{{  // mma.sync {s.intrinsic} (tensorized: {s.acc.name})")
    with self._shared(list(s.acc_index + s.operand_exprs), depth + 1, out):
      acc = [f"{s.acc.name}[{self.index(i)}]" for i in s.acc_index]
      out.append(f"{ind2}{_ctype(intr.acc_dtype)} mma_d[4] = {{{', '.join(acc)}}};")
      for name, vals, ld, frag in (("mma_a", s.a, s.a_ld, s.a_frag), ("mma_b", s.b, s.b_ld, s.b_frag)):
        if frag is not None:
          out.append(f"{ind2}const unsigned* {name} = {frag[0]}{''.join(f'[{v}]' for v in frag[1])};")
        elif ld is not None:
          out.append(f"{ind2}unsigned {name}[{ld.count}];")
          out.append(f"{ind2}{ld.helper}({name}, {ld.buffer.name} + {self.index(ld.index)});")
        else:
          regs = self._fragment_registers(vals, intr.dtype if name == "mma_a" else intr.b_dtype)
          out.append(f"{ind2}const unsigned {name}[{len(regs)}] = {{{', '.join(regs)}}};")
      out.append(f"{ind2}{intr.helper}(mma_d, mma_a, mma_b);")
      for c, text in enumerate(acc): out.append(f"{ind2}{text} = mma_d[{c}];")
    out.append(f"{ind}}}")

  def _fragment_load(self, s: FragmentLoad, depth: int, out: list[str]) -> None:
    """Fragments read ahead (ir/nest.py): the register array, and in its unrolled loops one ldmatrix per fragment
    (without ldmatrix, or with ``MINICOMP_LDMATRIX=0``: its elements packed in pairs)."""
    ind = self.indent * depth
    out.append(f"{ind}unsigned {s.name}{''.join(f'[{e}]' for _, e in s.dims)}[{s.regs}];")
    for k, (v, e) in enumerate(s.dims):
      out.append(f"{self.indent * (depth + k)}#pragma unroll")
      out.append(f"{self.indent * (depth + k)}for (int {v} = 0; {v} < {e}; ++{v}) {{")
    inner, at = depth + len(s.dims), s.name + "".join(f"[{v}]" for v, _ in s.dims)
    ld = s.ld if switched_on("MINICOMP_LDMATRIX") else None
    with self._shared([ld.index] if ld else list(s.elements), inner, out):
      if ld:
        out.append(f"{self.indent * inner}{ld.helper}({at}, {ld.buffer.name} + {self.index(ld.index)});")
      else:
        for r, reg in enumerate(self._fragment_registers(s.elements, s.dtype)):
          out.append(f"{self.indent * inner}{at}[{r}] = {reg};")
    for k in reversed(range(len(s.dims))): out.append(f"{self.indent * (depth + k)}}}")

  def _fragment_registers(self, vals, dtype: str) -> list[str]:
    """A fragment's 32-bit registers of elements ``vals``: 16-bit ones two a register (:meth:`_fragment_register`),
    tf32 ones one each, rounded (``mc_tf32``), 8-bit ones four a register (:meth:`_byte_register`)."""
    if dtype == "tfloat32": return [f"mc_tf32({self.expr(v)})" for v in vals]
    if dtype in ("int8", "uint8"): return [self._byte_register(vals[r:r + 4]) for r in range(0, len(vals), 4)]
    return [self._fragment_register(vals[r], vals[r + 1], dtype) for r in range(0, len(vals), 2)]

  def _byte_register(self, vals) -> str:
    """One 32-bit fragment register of four 8-bit integer elements (the first in the low byte; ir/mma.py checked
    they hold the intrinsic's type): dot4's word (:func:`_word`: one 32-bit read of four adjacent bytes, else the
    four values packed), the widening casts around the reads set aside."""
    plain = [v.src[0] if v.op is Op.CAST else v for v in vals]
    return f"(unsigned){_word(self, plain, [(self.expr(v), _ATOM) for v in vals])}"

  def _fragment_register(self, lo: Expr, hi: Expr, dtype: str) -> str:
    """One 32-bit fragment register of two 16-bit elements (``lo`` in the low half). Two reads of a buffer held
    in the operand's type are packed raw: one 32-bit read where they are adjacent and the first is at an even
    index, else ``mc_pack_h2`` of the two; any other values are rounded (``mc_pack_f16`` / ``mc_pack_bf16``)."""
    if lo.op is Op.LOAD and hi.op is Op.LOAD and lo.arg is hi.arg and lo.arg.stored_dtype == dtype:
      buf, i0, i1 = lo.arg, lo.src[0], hi.src[0]
      terms, c = linear(i0)
      even = c % 2 == 0 and all((k * multiple_of(t)) % 2 == 0 for t, k in terms.items())
      gap = simplify(i1 - i0, self.ranges)
      if even and gap.is_const and gap.arg == 1:
        return f"*reinterpret_cast<const unsigned*>({buf.name} + {self.index(i0)})"
      return f"mc_pack_h2({buf.name}[{self.index(i0)}], {buf.name}[{self.index(i1)}])"
    pack = "mc_pack_bf16" if dtype == "bfloat16" else "mc_pack_f16"
    return f"{pack}({self.expr(lo)}, {self.expr(hi)})"

  def _cross_thread(self, s: CrossThreadReduce, depth: int, out: list[str]) -> None:
    ind, ind2 = self.indent * depth, self.indent * (depth + 1)
    bx, by, bz = self.block
    t = _ctype(s.dst.dtype)
    comb = lambda a, b: _COMB_C[s.combiner](a, b, "float32" if s.dst.dtype in _HALF else s.dst.dtype)
    row = "((int)threadIdx.z * " + str(by) + " + (int)threadIdx.y)" if by * bz > 1 else "0"
    tx = "(int)threadIdx.x"
    final = lambda tot: comb(self.expr(s.init), tot) if s.init is not None else tot
    out.append(f"{ind}{{  // cross-thread {s.combiner} over threadIdx.x ({s.method})")
    if s.method == "shuffle" and bx % 32 == 0:
      nw = bx // 32
      with self._shared([s.value], depth + 1, out):
        out.append(f"{ind2}{t} mc_v = {self.expr(s.value)};")
      out.append(f"{ind2}for (int mc_off = 16; mc_off > 0; mc_off >>= 1) mc_v = {comb('mc_v', '__shfl_down_sync(0xffffffffu, mc_v, mc_off, 32)')};")
      out.append(f"{ind2}if (({tx} & 31) == 0) {s.scratch.name}[{row} * {nw} + ({tx} >> 5)] = mc_v;")
      out.append(f"{ind2}__syncthreads();")
      out.append(f"{ind2}if ({self.index(s.cond)}) {{")
      out.append(f"{ind2}  {t} mc_t = {s.scratch.name}[{row} * {nw}];")
      if nw > 1: out.append(f"{ind2}  for (int mc_w = 1; mc_w < {nw}; ++mc_w) mc_t = {comb('mc_t', f'{s.scratch.name}[{row} * {nw} + mc_w]')};")
      out.append(f"{ind2}  {self._assign(s.dst, self.index(s.index), final('mc_t'))};")
      out.append(f"{ind2}}}")
    else:
      p2 = 1 << max(0, (bx - 1).bit_length())
      with self._shared([s.value], depth + 1, out):
        out.append(f"{ind2}{s.scratch.name}[{row} * {bx} + {tx}] = {self.expr(s.value)};")
      out.append(f"{ind2}__syncthreads();")
      out.append(f"{ind2}for (int mc_s = {p2 // 2}; mc_s > 0; mc_s >>= 1) {{")
      a, b = f"{s.scratch.name}[{row} * {bx} + {tx}]", f"{s.scratch.name}[{row} * {bx} + {tx} + mc_s]"
      out.append(f"{ind2}  if ({tx} < mc_s && {tx} + mc_s < {bx}) {a} = {comb(a, b)};")
      out.append(f"{ind2}  __syncthreads();")
      out.append(f"{ind2}}}")
      out.append(f"{ind2}if ({self.index(s.cond)}) {self._assign(s.dst, self.index(s.index), final(f'{s.scratch.name}[{row} * {bx}]'))};")
    out.append(f"{ind2}__syncthreads();")
    out.append(f"{ind}}}")

  # -- kernels
  def kernel(self, k: LoopKernel) -> str:
    if not all(isinstance(d, int) for d in k.grid + k.block):
      raise CodegenError(f"kernel {k.name}: launch dims grid={k.grid} block={k.block} are symbolic; substitute values first")
    self.block = k.block
    self.i64 = k.index_dtype == "int64"
    self.itype = "long long" if self.i64 else "int"
    self.ranges = {}   # (forgets the renderings of the previous kernel)
    self._named = 0
    for v, tag in k.bindings:
      d = "xyz".index(tag[-1])
      self.ranges[v] = (0, (k.grid if tag.startswith("block") else k.block)[d] - 1)
    params = []
    for b in k.params:
      const_ = "" if b.name in k.written else "const "
      params.append(f"{const_}{C_TYPE[b.dtype]}* __restrict__ {b.name}")
    nthreads = k.block[0] * k.block[1] * k.block[2]
    lines = [f'extern "C" __global__ void __launch_bounds__({nthreads}) {k.name}({", ".join(params)}) {{']
    for b in k.allocs:
      if not b.size.is_const: raise CodegenError(f"buffer {b.name} has a symbolic size {b.size}; substitute values first")
    dynamic = dynamic_shared_bytes(k)
    offsets = shared_layout(k)[0]
    if dynamic: lines.append(f"  extern __shared__ __align__(16) unsigned char {DYNAMIC_SHARED}[];  // {dynamic} bytes")
    for b in k.allocs:
      n, t = int(b.size.arg), C_TYPE[b.stored_dtype]   # (a half tensor's tile holds floats, as a cross-thread
      if b.scope != "shared": lines.append(f"  {_ctype(b.dtype)} {b.name}[{n}];")   # reduction's scratch does, but
      elif dynamic:                                                                   # a tensor-core tile)
        lines.append(f"  {t}* const {b.name} = reinterpret_cast<{t}*>({DYNAMIC_SHARED} + {offsets[b.name]});  // [{n}]")
      else: lines.append(f"  __shared__ __align__(16) {t} {b.name}[{n}];")
    for v, tag in k.bindings:
      lines.append(f"  const {self.itype} {v} = {tag};")
    self.stmt(k.body, 1, lines)
    lines.append("}")
    return "\n".join(lines) + "\n"

  def program(self, p: Program) -> str:
    bodies = [self.kernel(k) for k in p.kernels]
    head = (PRELUDE if self.uses_floor_helpers else "") + (PRELUDE64 if self.uses_floor_helpers64 else "") \
      + (PRELUDE_BITCAST if self.uses_bitcast else "")
    return head + "\n".join(bodies)


# -- shared memory: static arrays, or offsets into the block's dynamic shared memory

DYNAMIC_SHARED = "mc_dynamic_shared"   # the extern array a kernel past STATIC_SHARED_BYTES holds its shared buffers in


def shared_layout(k: LoopKernel) -> tuple[dict[str, int], int]:
  """Each shared buffer of ``k``'s byte offset (16-byte aligned, in allocation order, as the static arrays are
  laid out) and the block's total bytes. The sizes must be constants."""
  offsets, end = {}, 0
  for b in k.allocs:
    if b.scope != "shared": continue
    offsets[b.name] = end = -(-end // 16) * 16
    end += int(b.size.arg) * b.element_bytes
  return offsets, end


def dynamic_shared_bytes(k: LoopKernel) -> int:
  """The dynamic shared memory a launch of ``k`` passes: its shared buffers' total where that is more than static
  ``__shared__`` arrays may hold (:data:`~minicomp.target.STATIC_SHARED_BYTES`; the emitter then declares one
  ``extern __shared__`` array and each buffer as a pointer into it), else 0."""
  total = shared_layout(k)[1]
  return total if total > STATIC_SHARED_BYTES else 0


# -- the expression table: rule(renderer, node, folded children) -> (text, precedence)

def _at(kid: _Kid, prec: int) -> str:
  """A folded child's text in an operand position that needs precedence ``prec``."""
  return f"({kid[0]})" if kid[1] < prec else kid[0]


def _not_load(n: Expr) -> bool: return n.op is not Op.LOAD


def _infix(op: Op):
  sym, p = _SYM[op], _PREC[op]   # left-associative: the right operand needs one level more
  return lambda r, n, k: (f"{_at(k[0], p)} {sym} {_at(k[1], p + 1)}", p)


_INFIX = {op: _infix(op) for op in _SYM}


def _const(r: CUDARenderer, n: Expr, k) -> _Kid:
  if n.dtype == "bool": return ("true" if n.arg else "false", _ATOM)
  if n.dtype in FLOAT_DTYPES: return (_float_lit(n.arg, n.dtype), _ATOM)
  if n.dtype in _PROMOTED: return (f"(({C_TYPE[n.dtype]}){int(n.arg)})", _ATOM)
  if n.dtype in ("int32", "int64") and n.arg == int_range(n.dtype)[0]:   # (no C literal for the lowest)
    return (f"({n.arg + 1}{'LL' if n.dtype == 'int64' else ''} - 1)", _ATOM)
  s = str(int(n.arg)) + {"int64": "LL", "uint32": "U", "uint64": "ULL"}.get(n.dtype, "")
  return (s, 0) if n.arg < 0 else (s, _ATOM)   # precedence 0: parenthesised as any operand, `a - (-3)`


def _var(r: CUDARenderer, n: Expr, k) -> _Kid:
  if not n.arg.startswith(("threadIdx.", "blockIdx.")): return (n.arg, _ATOM)
  return (f"(({'long long' if r.i64 else 'int'}){n.arg})", _ATOM)


def _floor(r: CUDARenderer, n: Expr, k) -> _Kid:
  name = None if n.dtype in UNSIGNED_DTYPES else r._floor_helper(n)    # (unsigned: C's / and % are floor's)
  return _INFIX[n.op](r, n, k) if name is None else (f"{name}({k[0][0]}, {k[1][0]})", _ATOM)


def _minmax(r: CUDARenderer, n: Expr, k) -> _Kid:
  name = "min" if n.op is Op.MIN else "max"
  if n.dtype == "float32" or n.dtype in _HALF: name = "f" + name + "f"
  elif n.dtype == "float64": name = "f" + name
  elif r.i64 and n.dtype == "int32": return (f"{name}({r._ll(n.src[0], k[0])}, {r._ll(n.src[1], k[1])})", _ATOM)
  return (f"{name}({k[0][0]}, {k[1][0]})", _ATOM)


_BIT_INFIX = {"bitand": "&", "bitor": "|", "bitxor": "^", "shl": "<<", "shr": ">>"}


def _shift(n: Expr, a: str, b: str) -> str:
  """``a << b`` / ``a >> b`` as ONNX's BitShift-28 (and numpy) define them where C does not: a shift by a
  negative amount or by the width or more gives the sign fill (-1 for a right shift of a negative, else 0); a
  left shift of a signed value shifts its bits (through unsigned: C++17 leaves a negative one undefined); a
  right shift of a signed value is arithmetic (as every compiler minicomp targets does it)."""
  t, signed = C_TYPE[n.dtype], n.dtype not in UNSIGNED_DTYPES
  out = f"{b} < 0 || {b} >= {INT_BITS[n.dtype]}" if signed else f"{b} >= {INT_BITS[n.dtype]}"
  if n.arg == "shl":
    shifted = f"({t})((unsigned long long){a} << {b})" if signed else f"{a} << {b}"
    return f"({out} ? ({t})0 : {shifted})"
  fill = f"({a} < 0 ? ({t})-1 : ({t})0)" if signed else f"({t})0"
  return f"({out} ? {fill} : {a} >> {b})"


def _call(r: CUDARenderer, n: Expr, k) -> _Kid:
  if n.arg == DOT4: return (_dp4a(r, n, k, "0"), _ATOM)
  if n.arg == BITCAST:
    r.uses_bitcast = True
    return (f"mc_bitcast<{C_TYPE[n.dtype]}>(({C_TYPE[n.src[0].dtype]}){_at(k[0], 7)})", _ATOM)
  if n.arg == "bitnot": return (f"(~{_at(k[0], 7)})", _ATOM)
  if n.arg in _BIT_INFIX:
    a, b = _at(k[0], 7), _at(k[1], 7)
    if n.arg in ("shl", "shr"): return (_shift(n, a, b), _ATOM)
    return (f"({a} {_BIT_INFIX[n.arg]} {b})", _ATOM)
  f32 = n.dtype == "float32" or n.dtype in _HALF
  if n.arg == "sigmoid":
    one = "1.0f" if f32 else "1.0"
    return (f"({one} / ({one} + {'expf' if f32 else 'exp'}(-{_at(k[0], 7)})))", _ATOM)
  args = ", ".join(t for t, _ in k)
  if n.arg == "abs" and n.dtype.startswith("int"): return (f"abs({args})", _ATOM)
  if n.arg == "rsqrt" and not f32: return (f"rsqrt({args})", _ATOM)
  name = _F32_CALL.get(n.arg) if f32 else {"abs": "fabs"}.get(n.arg, n.arg)
  if name is None: raise CodegenError(f"failed to render CALL node: no float32 function for {n.arg!r} in {n}")
  return (f"{name}({args})", _ATOM)


def _dp4a(r: CUDARenderer, n: Expr, k, acc: str, tiled: bool = False) -> str:
  """dot4 node ``n`` (its children rendered: ``k``) added to ``acc`` by one dp4a: ``mc_dp4a_<a><b>``, a's and b's
  bytes signed (s) or unsigned (u); ``mc_dp4av_<a><b>``, the volatile form, where an operand is packed from bytes and
  the accumulator is not one of a register tile (``tiled``), whose neighbours could reuse its loads (NVRTC's helpers:
  ``nvrtc.DP4A_HEADER``, which says why; the simulator's: cuda_shim.h)."""
  sign = lambda e: "s" if e.dtype == "int8" else "u"   # noqa: E731
  x, y = _word(r, n.src[:4], k[:4]), _word(r, n.src[4:], k[4:])
  volatile = "v" if (x.startswith("mc_pack4") or y.startswith("mc_pack4")) and not tiled else ""
  return f"mc_dp4a{volatile}_{sign(n.src[0])}{sign(n.src[4])}({x}, {y}, {acc})"


def _add(r: CUDARenderer, n: Expr, k) -> _Kid:
  """``a + b``; ``acc + dot4(...)`` (a reduction's update) as one dp4a accumulating into ``acc``."""
  for d, other in ((1, 0), (0, 1)):
    x, acc = n.src[d], n.src[other]
    if n.dtype == "int32" and x.op is Op.CALL and x.arg == DOT4 and not r._index_int(n):
      tiled = acc.op is Op.LOAD and acc.arg.scope == "local" and not (acc.arg.size.is_const and acc.arg.size.value == 1)
      return (_dp4a(r, x, [(r.expr(c), _ATOM) for c in x.src], k[other][0], tiled), _ATOM)
  return _INFIX[Op.ADD](r, n, k)


def _word(r: CUDARenderer, values: Sequence[Expr], kids) -> str:
  """Four 8-bit values as the 32-bit word dp4a takes (the first in the low byte): one load where they are four
  consecutive bytes of a global or shared buffer starting at a provable multiple of 4 (every buffer starts 16-byte
  aligned), else the four values packed."""
  first = values[0]
  if all(v.op is Op.LOAD and v.arg is first.arg for v in values) and first.arg.scope in ("global", "shared") \
     and consecutive([v.src[0] for v in values]) and multiple_of(first.src[0]) % 4 == 0:
    return f"mc_word(&{first.arg.name}[{r.index(first.src[0])}])"
  return f"mc_pack4({', '.join(t for t, _ in kids)})"


def _cast(r: CUDARenderer, n: Expr, k) -> _Kid:
  if n.dtype in _HALF:      # computed in float, rounded to the half type here
    to, frm = _HALF[n.dtype]
    return (f"{to}({frm}((float){_at(k[0], 7)}))", _ATOM)
  return (f"(({'long long' if r._index_int(n) else C_TYPE[n.dtype]}){_at(k[0], 7)})", _ATOM)


def _load(r: CUDARenderer, n: Expr, k) -> _Kid:
  # no folded index (a value of an int64 kernel, whose fold does not enter loads): render it as an index
  s = r._read(n.arg, k[0][0] if k else r.index(n.src[0]))
  return (f"((long long){s})" if r._index_int(n) else s, _ATOM)


def _select(n: Expr, k) -> _Kid:
  """``(c ? a : b)``. A half load against a zero (a padded fetch) selects the raw value and converts once,
  ``__half2float(c ? x[i] : __half{0})``: NVRTC cannot if-convert around the conversion (inline asm), so
  ``c ? __half2float(x[i]) : 0.0f`` became a branch per element where a float load is a predicated one."""
  for i, (ld, zero) in ((1, (n.src[1], n.src[2])), (2, (n.src[2], n.src[1]))):
    if not (ld.op is Op.LOAD and _stored(ld.arg) and zero.op is Op.CONST and zero.arg == 0.0
            and math.copysign(1.0, zero.arg) > 0): continue
    to, text = _HALF[ld.arg.stored_dtype][0], k[i][0]
    if not (text.startswith(to + "(") and text.endswith(")")): continue
    raw, z = text[len(to) + 1:-1], f"{C_TYPE[ld.arg.stored_dtype]}{{0}}"      # (+0.0: all bits zero, both types)
    a, b = (raw, z) if i == 1 else (z, raw)
    return (f"{to}({_at(k[0], 1)} ? {a} : {b})", _ATOM)
  return (f"({_at(k[0], 1)} ? {_at(k[1], 1)} : {_at(k[2], 1)})", _ATOM)


def _unrenderable(r: CUDARenderer, n: Expr, k) -> _Kid:
  raise CodegenError(f"failed to render {n.op.name} node: {n}")


CODE_FOR_OP: dict[Op, Callable[[CUDARenderer, Expr, tuple[_Kid, ...]], _Kid]] = {
  Op.CONST: _const, Op.VAR: _var,
  **_INFIX, Op.ADD: _add, Op.FLOORDIV: _floor, Op.FLOORMOD: _floor,
  Op.MIN: _minmax, Op.MAX: _minmax,
  Op.NEG: lambda r, n, k: (f"-{_at(k[0], 7)}", _ATOM),
  Op.NOT: lambda r, n, k: (f"!{_at(k[0], 7)}", _ATOM),
  Op.SELECT: lambda r, n, k: _select(n, k),
  Op.CAST: _cast,
  Op.CALL: _call,
  Op.LOAD: _load,
}
# every other op (REDUCE: lowering turns reductions into loops) fails naming the node
CODE_FOR_OP.update({op: _unrenderable for op in Op if op not in CODE_FOR_OP})


def _wrapped(render):
  """C computes 8- and 16-bit integers in int: the result is converted back to its type after every arithmetic
  operation, so each wraps as ONNX's (numpy's) typed arithmetic does ((int8)100 + 100 is -56 before a division)."""
  def out(r: CUDARenderer, n: Expr, k) -> _Kid:
    text, prec = render(r, n, k)
    return (f"(({C_TYPE[n.dtype]})({text}))", _ATOM) if n.dtype in _PROMOTED else (text, prec)
  return out


_PROMOTED = ("int8", "uint8", "int16", "uint16")     # the types C promotes to int before arithmetic
for _op in (Op.ADD, Op.SUB, Op.MUL, Op.FLOORDIV, Op.FLOORMOD, Op.NEG, Op.CALL):    # (CALL: abs(-128) is 128 in int)
  CODE_FOR_OP[_op] = _wrapped(CODE_FOR_OP[_op])

_STMT = {Seq: CUDARenderer._seq, For: CUDARenderer._for, If: CUDARenderer._if, Store: CUDARenderer._store,
         Sync: CUDARenderer._sync, Comment: CUDARenderer._comment, CrossThreadReduce: CUDARenderer._cross_thread,
         Mma: CUDARenderer._mma, FragmentLoad: CUDARenderer._fragment_load, AsyncCommit: CUDARenderer._async_commit,
         AsyncWait: CUDARenderer._async_wait}


def _lane(names: list[str], lane: int) -> Expr:
  """Lane ``lane`` of a vector load :meth:`CUDARenderer._float_loads` emitted as ``names``, a float."""
  return var(f"{names[lane // 4]}.{'xyzw'[lane % 4]}", "float32")


def _aligned_base(index: Expr, v: str, n: int) -> Expr | None:
  """``index - v`` when ``index`` is ``base + v`` with ``base`` provably a multiple of ``n``; else None."""
  terms, c = linear(index)
  if terms.get(var(v)) != 1: return None
  base_terms = {t: k for t, k in terms.items() if t != var(v)}
  if any(v in free_vars(t) for t in base_terms): return None
  if c % n or any((k * multiple_of(t)) % n for t, k in base_terms.items()): return None
  return build_linear(base_terms, c)


def emit_cuda(p: Program) -> str:
  """CUDA C source for every kernel of ``p``."""
  return CUDARenderer().program(p)
