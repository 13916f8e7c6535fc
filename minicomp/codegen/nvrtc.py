"""Compile CUDA C with NVRTC to PTX and CUBIN, and read ptxas resource usage from the log.

NVRTC needs no GPU and no driver, so every kernel minicomp emits is compiled here for its
target arch, on any machine. ``--ptxas-options=-v`` makes ptxas report, per entry function,
registers, static shared memory, spills and stack; :func:`parse_ptxas_log` turns that into
:class:`Resources`. Results are cached on disk (``cache_dir("nvrtc")``, disabled by
``MINICOMP_NVRTC_CACHE=0``) and in memory, keyed by source, arch, options and NVRTC version.
The memory cache keeps the :data:`MEMORY_CACHE_SIZE` (512) most recently used binaries;
``MINICOMP_NVRTC_MEMORY_CACHE=N`` keeps N instead, 0 turns it off.
"""
from __future__ import annotations

import functools
import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from minicomp.codegen import nvrtc_worker, tensor_core
from minicomp.codegen.cache import atomic_write, cache_dir, cache_key, switched_on
from minicomp.errors import NVRTCError
from minicomp.lru import LRU
from minicomp.target import Target, TargetError, as_target

_logger = logging.getLogger("minicomp")
PROGRAM_NAME = "minicomp_kernel.cu"
_CONTEXT_LINES = 2
_MAX_ERRORS_SHOWN = 10


@dataclass(frozen=True)
class Resources:
  """What ptxas reports for one entry function (``--ptxas-options=-v``)."""
  registers: int = 0
  shared_bytes: int = 0  # static __shared__ memory per block
  spill_stores: int = 0
  spill_loads: int = 0
  stack_bytes: int = 0  # stack frame of the entry function
  barriers: int = 0
  constant_bytes: int = 0  # cmem[0] (kernel parameters); sm_90 ptxas does not print it

  def __str__(self) -> str:
    return (f"regs={self.registers} smem={self.shared_bytes}B "
            f"spills={self.spill_stores}/{self.spill_loads} stack={self.stack_bytes}B")


@dataclass(frozen=True)
class CudaBinary:
  """The output of one NVRTC compilation.

  ``resources`` has one entry per ``__global__`` function, keyed by its name as ptxas
  prints it (the plain name for ``extern "C"`` kernels, the mangled name otherwise).
  ``options`` are the caller's options only; ``--gpu-architecture`` and
  ``--ptxas-options=-v`` are always added.
  """
  arch: str
  ptx: str
  cubin: bytes
  log: str
  resources: dict[str, Resources]
  options: tuple[str, ...] = ()
  source: str = field(default="", repr=False)

  @property
  def warnings(self) -> tuple[str, ...]:
    """Compiler warning lines worth showing (NVRTC's sm_70 deprecation notice left out)."""
    return tuple(ln for ln in self.log.splitlines()
                 if "warning" in ln and "are deprecated and may be removed" not in ln)


# ptxas -v lines (CUDA 12.x):
#   ptxas info    : Compiling entry function 'k' for 'sm_80'
#   ptxas info    : Function properties for k
#   ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
#   ptxas info    : Used 10 registers, used 1 barriers, 512 bytes smem, 360 bytes cmem[0]
_ENTRY_RE = re.compile(r"Compiling entry function '([^']+)'")
_PROPS_RE = re.compile(r"Function properties for (\S+)")
_STACK_RE = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED_RE = re.compile(r"ptxas info\s*: Used (\d+) registers")
_FIELD_RES = {"barriers": re.compile(r"used (\d+) barriers"),
              "shared_bytes": re.compile(r"(\d+) bytes smem"),
              "constant_bytes": re.compile(r"(\d+) bytes cmem\[0\]")}


def parse_ptxas_log(log: str) -> dict[str, Resources]:
  """Resource usage per entry function from an NVRTC log compiled with ``--ptxas-options=-v``.

  Only entry functions (kernels) appear; properties of non-inlined ``__device__``
  functions are skipped. A kernel ptxas named without a "Used" line gets zeros.

  Examples
  --------
  >>> log = '''ptxas info    : Compiling entry function 'k' for 'sm_80'
  ... ptxas info    : Function properties for k
  ... ptxas         .     0 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
  ... ptxas info    : Used 32 registers, used 1 barriers, 512 bytes smem, 360 bytes cmem[0]'''
  >>> str(parse_ptxas_log(log)["k"])
  'regs=32 smem=512B spills=8/4 stack=0B'
  """
  fields: dict[str, dict[str, int]] = {}
  entry = props = None  # last entry compiled; function the next stack line belongs to
  for line in log.splitlines():
    if m := _ENTRY_RE.search(line):
      entry = props = m.group(1)
      fields.setdefault(entry, {})
    elif m := _PROPS_RE.search(line):
      props = m.group(1)
    elif m := _STACK_RE.search(line):
      if props in fields:
        stack, stores, loads = map(int, m.groups())
        fields[props].update(stack_bytes=stack, spill_stores=stores, spill_loads=loads)
    elif (m := _USED_RE.search(line)) and entry is not None:
      fields[entry]["registers"] = int(m.group(1))
      for name, rx in _FIELD_RES.items():
        if f := rx.search(line):
          fields[entry][name] = int(f.group(1))
  return {name: Resources(**f) for name, f in fields.items()}


# ---- NVRTC calls -------------------------------------------------------------------------

def _nvrtc():
  """The NVRTC binding, imported on first use so ``import minicomp`` stays fast."""
  try:
    from cuda.bindings import nvrtc
  except ImportError as e:  # the wheel is a hard dependency; say how to fix a broken install
    raise NVRTCError(f"NVRTC is not available ({e}); install cuda-bindings and "
                     "nvidia-cuda-nvrtc-cu12 (pip install 'cuda-bindings<13' 'nvidia-cuda-nvrtc-cu12<13')") from e
  return nvrtc


def _call(fn, *args):
  """Call one NVRTC function; return its outputs, raise NVRTCError on a bad status."""
  err, *out = fn(*args)
  if err != _nvrtc().nvrtcResult.NVRTC_SUCCESS:
    raise NVRTCError(f"{fn.__name__} failed: {_status_name(err)}")
  return None if not out else out[0] if len(out) == 1 else out


def _status_name(err) -> str:
  _, name = _nvrtc().nvrtcGetErrorString(err)
  return name.decode() if isinstance(name, bytes) else str(name)


@functools.cache
def nvrtc_version() -> tuple[int, int]:
  """The (major, minor) version of the NVRTC library in use, e.g. ``(12, 9)``."""
  major, minor = _call(_nvrtc().nvrtcVersion)
  return int(major), int(minor)


# The half type for NVRTC, which the pip wheel ships without cuda_fp16.h: storage and the conversions the emitter
# writes (codegen/cuda.py), given to NVRTC in memory and included before a source that uses it. The simulator has
# its own (cuda_shim.h). Kept out of the emitted text, which holds no asm (saved models refuse it).
# (bfloat16's rounding: one cvt.rn.bf16.f32 on sm_80+, in integer arithmetic before, which has no cvt to bf16; the
# same bits but for a NaN's payload, which the cvt makes canonical)
HALF_HEADER = ("minicomp_half.h", """\
struct __align__(2) __half { unsigned short x; };
__device__ __forceinline__ float __half2float(__half h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.x)); return f; }
__device__ __forceinline__ __half __float2half_rn(float f) { __half h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.x) : "f"(f)); return h; }
struct __align__(2) __nv_bfloat16 { unsigned short x; };
__device__ __forceinline__ float __bfloat162float(__nv_bfloat16 h) { return __uint_as_float(((unsigned)h.x) << 16); }
__device__ __forceinline__ __nv_bfloat16 __float2bfloat16_rn(float f) {
  __nv_bfloat16 h;
#if __CUDA_ARCH__ >= 800
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h.x) : "f"(f));
#else
  unsigned u = __float_as_uint(f);
  h.x = (u & 0x7fffffffu) > 0x7f800000u ? (unsigned short)((u >> 16) | 0x40u) : (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
#endif
  return h;
}
""")

# The helpers of dot4 (ir/ops.py; codegen/cuda.py's _dp4a), which every arch minicomp targets has (sm_61+): a word of
# four bytes (one 32-bit load, or four values packed) and dp4a, mc_dp4a_<a><b> with a's and b's bytes signed (s) or
# unsigned (u). Its asm is pure, so NVVM reuses an operand's loads across the unrolled dp4a of a register tile (an
# int8 matmul's tile of 32 sums: 192 shared loads; 512 with a volatile asm), except in mc_dp4av_<a><b>, which the
# emitter writes where an operand is packed from four byte loads into an accumulator of no register tile (nothing to
# reuse): volatile, as NVIDIA's own __dp4a, because there NVRTC 12.9 took 3.1-3.5 s instead of 0.55 on a convolution
# of 288 unrolled dp4a with the pure asm, for the same PTX (2026-11-30). The simulator's are in cuda_shim.h.
DP4A_HEADER = ("minicomp_dp4a.h", "".join([
  "__device__ __forceinline__ int mc_word(const void* p) { return *(const int*)p; }\n",
  "__device__ __forceinline__ int mc_pack4(int a, int b, int c, int d) {\n"
  "  return (int)((unsigned)(a & 255) | (unsigned)(b & 255) << 8 | (unsigned)(c & 255) << 16 | (unsigned)(d & 255) << 24);"
  "\n}\n",
  *(f"__device__ __forceinline__ int mc_dp4a{v}_{a}{b}(int x, int y, int c) {{ int d; "
    f'asm{" volatile" if v else ""}("dp4a.{a}32.{b}32 %0, %1, %2, %3;" : "=r"(d) : "r"(x), "r"(y), "r"(c)); '
    "return d; }\n" for v in ("", "v") for a in "su" for b in "su")]))


def _headers(source: str) -> tuple[tuple[str, str], ...]:
  """The in-memory headers ``source`` needs: the half types where it names one, the tensor-core helpers
  (:mod:`minicomp.codegen.tensor_core`) where it calls one, the dp4a helpers where it calls one (or packs four
  bytes: an int8 mma.sync's fragments)."""
  tensor = tensor_core.uses_tensor_core_helpers(source)      # (its helpers take the half types)
  half = tensor or "__half" in source or "bfloat16" in source
  return ((HALF_HEADER,) if half else ()) + ((tensor_core.HEADER,) if tensor else ()) \
    + ((DP4A_HEADER,) if "mc_dp4a" in source or "mc_pack4" in source or "mc_word" in source else ())


def _compile(source: str, arch: str, options: tuple[str, ...], headers: tuple[tuple[str, str], ...]
             ) -> tuple[str, bytes, str]:
  """Run NVRTC once: (ptx, cubin, log) or NVRTCError with the errors and source context. ``headers``
  (:func:`_headers` of the source) are given in memory and pre-included.

  NVRTC runs in a child process (:mod:`minicomp.codegen.nvrtc_worker`: NVRTC itself crashes
  on some valid kernels) unless ``MINICOMP_NVRTC_ISOLATE=0``.
  """
  _nvrtc()                                       # a missing binding: say how to install it
  options = tuple(f"--pre-include={n}" for n, _ in headers) + options
  opts = [f"--gpu-architecture={arch}", "--ptxas-options=-v", *options]
  if nvrtc_worker.isolation_enabled():
    try: reply = nvrtc_worker.compile_isolated(source, arch, list(options), PROGRAM_NAME, headers)
    except nvrtc_worker.NVRTCCrash as e:
      raise NVRTCError(f"{e}; options: {' '.join(opts)}. Set MINICOMP_NVRTC_ISOLATE=0 to compile in this "
                       "process (a crash then kills it)", source=source) from e
  else:
    reply = nvrtc_worker.run_nvrtc(source, arch, list(options), PROGRAM_NAME, headers)
  if reply[0] == "ok":
    return reply[1], reply[2], reply[3]
  if reply[0] == "error":
    raise NVRTCError(_error_message(source, arch, opts, reply[1], reply[2]), log=reply[2], source=source)
  raise NVRTCError(f"NVRTC failed before compiling: {reply[1]}", source=source)


_ERROR_RE = re.compile(r"^(?P<file>[^\s()]+)\((?P<line>\d+)\): (?:catastrophic )?error\b.*$", re.M)


def _error_message(source: str, arch: str, opts: list[str], status: str, log: str) -> str:
  """The NVRTC error lines, each followed by the source lines around it (numbered, ``>`` marks it)."""
  lines = source.splitlines()
  out = [f"NVRTC failed to compile {PROGRAM_NAME} for {arch} ({status}); options: {' '.join(opts)}"]
  errors = list(_ERROR_RE.finditer(log))
  for m in errors[:_MAX_ERRORS_SHOWN]:
    out.append(m.group(0))
    if m.group("file") != PROGRAM_NAME:
      continue  # an error inside an #include'd header: no source of ours to show
    n = int(m.group("line"))
    for i in range(max(1, n - _CONTEXT_LINES), min(len(lines), n + _CONTEXT_LINES) + 1):
      out.append(f"  {'>' if i == n else ' '} {i:4d} | {lines[i - 1]}")
  if len(errors) > _MAX_ERRORS_SHOWN:
    out.append(f"... and {len(errors) - _MAX_ERRORS_SHOWN} more errors (see .log)")
  if not errors:  # e.g. an invalid option: NVRTC has no line to point at, show its whole log
    out.append(log.strip() or "(empty NVRTC log)")
  if "invalid value for --gpu-architecture" in log:
    out.append(_arch_hint(arch))
  return "\n".join(out)


def _arch_hint(arch: str) -> str:
  """Why this NVRTC refuses ``arch``, and which NVRTC compiles it."""
  major = nvrtc_version()[0]
  if arch in ("sm_70", "sm_72") and major >= 13:
    return (f"NVRTC {major}.x dropped {arch} (CUDA 13 removed Volta): install NVRTC 12 "
            "(pip install 'nvidia-cuda-nvrtc-cu12>=12.8,<13' 'cuda-bindings>=12.8,<13'), as minicomp's pyproject pins")
  return f"this NVRTC ({'%d.%d' % nvrtc_version()}) does not know {arch}: sm_100 and sm_120 need NVRTC 12.8 or newer"


# ---- caching -----------------------------------------------------------------------------

MEMORY_CACHE_SIZE = 512         # binaries kept in memory (LRU); MINICOMP_NVRTC_MEMORY_CACHE overrides, 0: none


def _memory_limit() -> int:
  """How many binaries the memory cache keeps: ``$MINICOMP_NVRTC_MEMORY_CACHE``, else :data:`MEMORY_CACHE_SIZE`."""
  raw = os.environ.get("MINICOMP_NVRTC_MEMORY_CACHE", "").strip()
  return _parse_limit(raw) if raw else MEMORY_CACHE_SIZE


@functools.cache
def _parse_limit(raw: str) -> int:
  try:
    return max(0, int(raw))
  except ValueError:  # a typo in the environment must not fail every compile: say so once
    _logger.warning("MINICOMP_NVRTC_MEMORY_CACHE=%r is not an integer; keeping %d binaries", raw, MEMORY_CACHE_SIZE)
    return MEMORY_CACHE_SIZE


_memory: LRU[str, CudaBinary] = LRU(_memory_limit)   # (put: keeps the binary another thread stored first)


def clear_memory_cache() -> None:
  """Forget every in-memory result (the disk cache is untouched)."""
  _memory.clear()


def _disk_load(key: str) -> tuple[str, bytes, str] | None:
  try:  # the .log is written last: its presence means the entry is complete
    d = cache_dir("nvrtc")
    log = (d / f"{key}.log").read_text()
    return (d / f"{key}.ptx").read_text(), (d / f"{key}.cubin").read_bytes(), log
  except OSError:
    return None


def _disk_store(key: str, ptx: str, cubin: bytes, log: str) -> None:
  try:
    d = cache_dir("nvrtc")
    atomic_write(d / f"{key}.ptx", ptx.encode())
    atomic_write(d / f"{key}.cubin", cubin)
    atomic_write(d / f"{key}.log", log.encode())
  except OSError as e:  # a read-only or full cache folder must not fail a compile
    _logger.warning("could not write NVRTC cache entry %s: %s", key, e)


def compile_cuda(source: str, arch: str | Target, options: Sequence[str] = ()) -> CudaBinary:
  """Compile CUDA C ``source`` for ``arch`` with NVRTC; results are cached.

  Parameters
  ----------
  source : str
      A full translation unit; kernels should be ``extern "C" __global__``.
  arch : str or Target
      ``"sm_70"`` .. ``"sm_90"`` (see :data:`minicomp.target.SUPPORTED_ARCHS`).
  options : sequence of str
      Extra NVRTC options, e.g. ``["--use_fast_math"]``. Do not pass the arch here.

  Returns
  -------
  CudaBinary
      PTX, CUBIN, the NVRTC log and ptxas :class:`Resources` per kernel.

  Raises
  ------
  TargetError
      ``arch`` is not a supported target, or ``options`` sets the arch.
  NVRTCError
      NVRTC rejected the source; the message quotes each error with the source lines
      around it, ``.log`` holds the full log and ``.source`` the source.
  """
  arch = as_target(arch).arch
  options = tuple(options)
  if any(o.startswith(("--gpu-architecture", "-arch")) for o in options):
    raise TargetError(f"pass the arch as compile_cuda(arch=...), not in options {options}")
  version = "%d.%d" % nvrtc_version()
  headers = _headers(source)
  key = cache_key(source, arch, "\0".join(options + tuple(t for _, t in headers)), version)
  hit = _memory.get(key)
  if hit is not None:
    return hit
  disk = switched_on("MINICOMP_NVRTC_CACHE")
  found = _disk_load(key) if disk else None
  ptx, cubin, log = found if found is not None else _compile(source, arch, options, headers)
  if disk and found is None:
    _disk_store(key, ptx, cubin, log)
  return _memory.put(key, CudaBinary(arch, ptx, cubin, log, parse_ptxas_log(log), options, source))
