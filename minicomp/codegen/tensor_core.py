"""The tensor-core instructions minicomp's kernels call: warp-level ``mma.sync``, ``ldmatrix`` and ``cp.async``.

The intrinsics, their shapes and per-lane layouts are :class:`minicomp.ir.mma.Intrinsic` (lowering needs them; they
are re-exported here). A kernel never holds inline assembly (saved models refuse it); it calls the ``mc_*`` helpers
below, which
NVRTC gets from the in-memory header :data:`HEADER` (``codegen/nvrtc.py`` includes it where a source names
one) and the CPU simulator from ``cuda_shim.h``, which implements each instruction across the fibers of a warp
with its per-lane semantics, so a kernel that puts an element in the wrong lane computes the wrong answer in
the simulator as on the GPU.

**mma.sync** (PTX ISA, "Matrix multiply-accumulate operation using mma instruction", the fragment figures of
the ``.m16n8k16`` / ``.m16n8k8`` shapes): the 32 lanes of a warp together compute
``D[16 x n] = A[16 x k] B[k x n] + C`` (row-major A, column-major B: ``.row.col``, the only form every shape
has), each lane holding a few elements of each operand in registers. With ``g = lane >> 2`` (groupID) and
``t = lane % 4`` (threadID_in_group):

============================  ==========  =====================================================================
intrinsic (helper)            arch        per-lane elements (row, col); A is m x k, B is k x n, C/D m x n
============================  ==========  =====================================================================
``m16n8k16_f16`` / ``_bf16``  sm_80       A a0..a7 (4 regs, 2 halves each, low half first):
                                          (g + 8 * (i // 2 % 2), 2t + i % 2 + 8 * (i // 4));
                                          B b0..b3 (2 regs): (2t + i % 2 + 8 * (i // 2), g)
``m16n8k8_f16``               sm_75       A a0..a3 (2 regs): (g + 8 * (i // 2), 2t + i % 2);
                                          B b0, b1 (1 reg): (2t + i, g)
``m16n8k8_tf32``              sm_80       A a0..a3 (4 regs, one tf32 each): (g + 8 * (i % 2), t + 4 * (i // 2));
                                          B b0, b1 (2 regs): (t + 4 * i, g)
``m16n8k32_<a><b>``           sm_80       8-bit integers, A's type and B's (s8 / u8): A a0..a15 (4 regs, 4 bytes each,
                                          low byte first): (g + 8 * (i // 4 % 2), 4t + i % 4 + 16 * (i // 8));
                                          B b0..b7 (2 regs): (4t + i % 4 + 16 * (i // 4), g)
every shape                               C/D c0..c3 (4 floats; 4 int32 for the integer ones):
                                          (g + 8 * (i // 2), 2t + i % 2)
============================  ==========  =====================================================================

The products are accumulated in float32 (``.f32`` C and D), the 8-bit integer ones exactly in int32 (``.s32``,
wrapping). tf32 operands are given as tf32 bit patterns,
floats rounded by ``mc_tf32`` (10 mantissa bits, round to nearest, ties away: ``cvt.rna.tf32.f32``, as cuBLAS
rounds them) where the fragment is read, once per fragment when it is read ahead (ir/nest.py); the instruction
ignores the 13 low mantissa bits of what it is given (the simulator too). The simulator adds the k products to C
in order in float32; the GPU's adder tree rounds differently, so the two agree to the float32 rounding of a k-long
sum, not bit for bit.

**ldmatrix** (sm_75+): ``mc_ldmatrix_x{1,2,4}[_trans](unsigned* r, const void* row)`` loads 1, 2 or 4 8x8
matrices of 16-bit elements from shared memory. Lanes ``8j .. 8j + 7`` give the addresses of matrix j's 8 rows
(16 bytes each, 16-byte aligned); lane l receives in ``r[j]`` row ``l >> 2``, columns ``2 (l % 4)`` and
``2 (l % 4) + 1`` of matrix j (``_trans``: of its transpose). Four matrices of a row-major 16x16 half tile
(rows 0-7 / 8-15 x columns 0-7 / 8-15, in the order top-left, bottom-left, top-right, bottom-right) are an
``m16n8k16`` A fragment; ``_trans`` of a row-major k x n tile gives B fragments.

**cp.async** (sm_80+): ``mc_cp_async_{4,8,16}(void* shared, const void* global, bool valid)`` copies 4, 8 or
16 bytes global -> shared without passing through registers (``valid`` false writes zeros: the padding of a
guarded fetch); ``mc_cp_async_commit()`` closes a group of copies; ``mc_cp_async_wait<N>()`` waits until at
most N groups are still in flight. A copy is only guaranteed in shared memory after the wait that covers
it: the simulator writes it there at that wait and not before, so a kernel that reads a tile before waiting
for it reads stale data in the simulator too.
"""
from __future__ import annotations

from minicomp.errors import TargetError
from minicomp.ir.mma import BYTE_TYPES, INTRINSICS, Intrinsic


LDMATRIX_MIN_CC = (7, 5)
CP_ASYNC_MIN_CC = (8, 0)


def check_arch(what: Intrinsic | str, arch: str) -> None:
  """TargetError unless ``arch`` (e.g. ``"sm_86"``) has ``what``: an :class:`Intrinsic`, ``"ldmatrix"`` or
  ``"cp.async"``. sm_70's tensor cores (``mma.m8n8k4``) are not used by minicomp: refused like any older arch."""
  from minicomp.target import arch_compute_capability
  cc = arch_compute_capability(arch)
  if isinstance(what, Intrinsic): need, name = what.min_cc, f"mma.sync {what.name}"
  elif what == "ldmatrix": need, name = LDMATRIX_MIN_CC, "ldmatrix"
  elif what == "cp.async": need, name = CP_ASYNC_MIN_CC, "cp.async"
  else: raise TargetError(f"unknown tensor-core instruction {what!r}")
  if cc < need:
    raise TargetError(f"{name} needs sm_{need[0]}{need[1]} or newer; {arch} does not have it"
                      + (" (sm_70's tensor cores take only mma.m8n8k4, which minicomp does not use)"
                         if cc < (7, 5) else ""))


_PTX_TYPES = {"float16": "f16", "bfloat16": "bf16", "tfloat32": "tf32", **BYTE_TYPES}


def _mma(i: Intrinsic) -> str:
  a = ", ".join(f"%{4 + r}" for r in range(i.a_regs))
  b = ", ".join(f"%{4 + i.a_regs + r}" for r in range(i.b_regs))
  acc, dt, reg = ("s32", "int", "r") if i.integer else ("f32", "float", "f")
  asm = (f"mma.sync.aligned.m{i.m}n{i.n}k{i.k}.row.col.{acc}.{_PTX_TYPES[i.dtype]}.{_PTX_TYPES[i.b_dtype]}.{acc} "
         f"{{%0, %1, %2, %3}}, {{{a}}}, {{{b}}}, {{%0, %1, %2, %3}};")
  ins = ", ".join([f'"r"(a[{r}])' for r in range(i.a_regs)] + [f'"r"(b[{r}])' for r in range(i.b_regs)])
  args = "const unsigned* a, const unsigned* b"
  # not volatile: a pure function of its registers, so NVVM may reuse the fragment reads of one tile across the
  # unrolled mma.sync of its neighbours (volatile asm keeps every shared read in place: 5x the reads of a 64 x 64
  # warp tile). Every lane still reaches it: lowering refuses thread-dependent guards around it (ir/mma.py).
  return (f"__device__ __forceinline__ void {i.helper}({dt}* d, {args}) {{\n"
          f'  asm("{asm}"\n'
          f'    : "+{reg}"(d[0]), "+{reg}"(d[1]), "+{reg}"(d[2]), "+{reg}"(d[3]) : {ins});\n}}\n')


def _ldmatrix(count: int, trans: bool) -> str:
  regs = ", ".join(f"%{r}" for r in range(count))
  outs = ", ".join(f'"=r"(r[{r}])' for r in range(count))
  return (f"__device__ __forceinline__ void mc_ldmatrix_x{count}{'_trans' if trans else ''}(unsigned* r, const void* p) "
          f'{{\n  asm volatile("ldmatrix.sync.aligned.m8n8.x{count}{".trans" if trans else ""}.shared.b16 '
          f'{{{regs}}}, [%{count}];" : {outs} : "r"(mc_shared_address(p)));\n}}\n')


def _cp_async(nbytes: int) -> str:
  cache = "cg" if nbytes == 16 else "ca"     # .cg (bypass L1) takes only 16 bytes
  return (f"__device__ __forceinline__ void mc_cp_async_{nbytes}(void* dst, const void* src, bool valid) {{\n"
          f'  asm volatile("cp.async.{cache}.shared.global [%0], [%1], {nbytes}, %2;"\n'
          f'    :: "r"(mc_shared_address(dst)), "l"(src), "r"(valid ? {nbytes} : 0) : "memory");\n}}\n')


# NVRTC's header (codegen/nvrtc.py includes it, after the half types' header, before a source that calls an mc_ helper
# of this module).
HEADER = ("minicomp_tensor_core.h", "".join([
  "__device__ __forceinline__ unsigned mc_shared_address(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }\n",
  "__device__ __forceinline__ unsigned mc_tf32(float x) { unsigned r; asm(\"cvt.rna.tf32.f32 %0, %1;\" : \"=r\"(r) : "
  "\"f\"(x)); return r; }\n",
  # two floats rounded to a 16-bit type and packed into one register (the first in the low half), as the
  # emitter fills A and B fragments (codegen/cuda.py)
  "__device__ __forceinline__ unsigned mc_pack_f16(float lo, float hi) { unsigned short a, b;\n"
  "  asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(a) : \"f\"(lo)); asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(b) : \"f\"(hi));\n"
  "  return (unsigned)a | ((unsigned)b << 16);\n}\n",
  "__device__ __forceinline__ unsigned mc_pack_bf16(float lo, float hi) { unsigned r;\n"
  "  asm(\"cvt.rn.bf16x2.f32 %0, %1, %2;\" : \"=r\"(r) : \"f\"(hi), \"f\"(lo)); return r;\n}\n",
  # two 16-bit values packed raw (no conversion): fragment elements read from a tile held in their type
  "__device__ __forceinline__ unsigned mc_pack_h2(__half lo, __half hi) { return lo.x | ((unsigned)hi.x << 16); }\n",
  "__device__ __forceinline__ unsigned mc_pack_h2(__nv_bfloat16 lo, __nv_bfloat16 hi) { return lo.x | ((unsigned)hi.x << 16); }\n",
  *(_mma(i) for i in INTRINSICS.values()),
  *(_ldmatrix(c, t) for c in (1, 2, 4) for t in (False, True)),
  *(_cp_async(n) for n in (4, 8, 16)),
  '__device__ __forceinline__ void mc_cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }\n',
  'template <int N> __device__ __forceinline__ void mc_cp_async_wait() { asm volatile("cp.async.wait_group %0;" :: "n"(N) '
  ': "memory"); }\n',
]))
HELPER_PREFIXES = ("mc_mma_", "mc_ldmatrix_", "mc_cp_async_", "mc_pack_")


def uses_tensor_core_helpers(source: str) -> bool:
  """Whether ``source`` calls a helper of :data:`HEADER`."""
  return any(p in source for p in HELPER_PREFIXES)


__all__ = ["CP_ASYNC_MIN_CC", "HEADER", "INTRINSICS", "Intrinsic", "LDMATRIX_MIN_CC", "check_arch",
           "uses_tensor_core_helpers"]
