"""C identifiers for the names of tensors, stages and loops: the one place a name becomes CUDA text.

A name reaches the emitted source as a kernel parameter, a buffer or a loop variable, and the same text
is compiled by NVRTC and, on the CPU simulator, by g++ after a header that pulls in system headers. So an
identifier must be valid C, must not be a C / C++ / CUDA keyword or built-in (``int``, ``and``,
``threadIdx``), must not be reserved (a double underscore anywhere, a leading underscore), must not be a
macro of either translation unit (``INFINITY``, ``stdin``, ``SIGINT``: the list is ``c_macros.txt``),
must not shadow a function or type the emitted code uses (``expf``, ``max``, ``float4``) and must not
start with ``mc_`` (the emitter's own locals and helpers). :func:`c_ident` maps any name to one that is
none of these; names it would map to the same identifier are told apart by the caller
(:func:`check_distinct`). Models never bring their own names here: the ONNX path names tensors after
their op types (``relu_0``), and keeps ONNX's names in the manifest.
"""
from __future__ import annotations

import re
from importlib import resources

KEYWORDS = frozenset("""
alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t char32_t class
compl concept const consteval constexpr constinit const_cast continue co_await co_return co_yield decltype
default delete do double dynamic_cast else enum explicit export extern false float for friend goto if inline
int long mutable namespace new noexcept not not_eq nullptr operator or or_eq private protected public register
reinterpret_cast requires restrict return short signed sizeof static static_assert static_cast struct switch
template this thread_local throw true try typedef typeid typename union unsigned using virtual void volatile
wchar_t while xor xor_eq main std
""".split())

# CUDA's built-in variables, vector types and their constructors, and the functions the emitted code calls
CUDA_NAMES = frozenset("""
threadIdx blockIdx blockDim gridDim warpSize dim3 half
char1 char2 char3 char4 uchar1 uchar2 uchar3 uchar4 short1 short2 short3 short4 ushort1 ushort2 ushort3 ushort4
int1 int2 int3 int4 uint1 uint2 uint3 uint4 long1 long2 long3 long4 ulong1 ulong2 ulong3 ulong4
longlong1 longlong2 longlong3 longlong4 ulonglong1 ulonglong2 ulonglong3 ulonglong4
float1 float2 float3 float4 double1 double2 double3 double4
make_float2 make_float3 make_float4 make_double2 make_int2 make_int3 make_int4 make_uint2 make_uint3 make_uint4
expf logf sqrtf rsqrtf tanhf erff powf fabsf floorf ceilf exp2f log2f log10f roundf rintf truncf sinf cosf
tanf atanf atan2f log1pf expm1f erfcf fmodf fmaxf fminf fmaf
exp log sqrt rsqrt tanh erf pow fabs floor ceil exp2 log2 log10 round rint trunc sin cos tan atan atan2 log1p
expm1 erfc fmod fmax fmin fma abs llabs min max
asinf acosf sinhf coshf asinhf acoshf atanhf asin acos sinh cosh asinh acosh atanh
atomicAdd atomicExch atomicMax atomicMin atomicCAS printf assert malloc free memcpy memset size_t
""".split())


def _read_macros() -> frozenset[str]:
  lines = resources.files("minicomp.ir").joinpath("c_macros.txt").read_text().splitlines()
  return frozenset(s.strip() for s in lines if s.strip() and not s.startswith("#"))


MACROS = _read_macros()
RESERVED = KEYWORDS | CUDA_NAMES | MACROS
_INVALID = re.compile(r"[^0-9A-Za-z_]")


def c_ident(name: str) -> str:
  """A C identifier for ``name`` ("A.shared" -> "A_shared"): other characters become ``_``, runs of
  underscores one, a name not starting with a letter gets a ``v`` in front, and one that is reserved
  (see the module) or starts with ``mc_`` gets a ``_`` behind ("int" -> "int_", "NAN" -> "NAN_")."""
  s = re.sub(r"_{2,}", "_", _INVALID.sub("_", name))
  if not s or not s[0].isalpha(): s = "v" + s
  if s in RESERVED or s.startswith("mc_"): s += "_"
  return s


def check_distinct(names, what: str, error: type[Exception]) -> dict[str, str]:
  """``{name: c_ident(name)}`` for ``names``; two names that map to one identifier raise ``error``
  naming both (``what``: what they are, for the message), so no kernel ever reads one for the other."""
  out: dict[str, str] = {}
  seen: dict[str, str] = {}
  for n in names:
    c = out[n] = c_ident(n)
    if seen.setdefault(c, n) != n:
      raise error(f"{what} {seen[c]!r} and {n!r} both become the C identifier {c!r}; rename one")
  return out
