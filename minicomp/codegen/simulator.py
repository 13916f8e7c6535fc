"""CPU simulator: runs the exact CUDA C text minicomp emits on the host CPU.

The source is compiled by a host C++ compiler together with ``cuda_shim.h``, which
maps the CUDA qualifiers, built-in variables, vector types and intrinsics onto C++.
Blocks run one after another; the threads of a block run as cooperative fibers, so
``__syncthreads()`` and the warp shuffles / votes really synchronise and exchange
values between threads. It checks kernel semantics; its run times say nothing
about a GPU.

Barrier semantics (as ``bar.sync`` on sm_70+): a barrier completes when every thread
of the block that has not exited arrived, so threads may return early. All threads of
one barrier instance must reach the same ``__syncthreads()`` line (else
:class:`SimulatorError`, "divergent"), and a state where no thread can go on raises
:class:`SimulatorError` ("deadlock") instead of hanging. A busy-wait on memory written
by another thread of the block never yields and does hang. Memory faults (invalid
pointers, fiber stack overflow) and integer division by zero raise
:class:`SimulatorError`; an out-of-bounds access that lands in mapped memory is not
detected. Dynamic shared memory is the one ``extern __shared__`` array minicomp emits (codegen/cuda.py), made a
static array of the largest size any arch allows.

The shim's runtime (fibers, barriers, launch) is compiled once per shim text, compiler and flags into
an object file under ``cache_dir("sim")`` that every build links, so a build compiles only the kernel
and its launchers; with g++ the shim's declarations are also precompiled there (a ``.gch``; a compiler
that cannot use it reads the header's text instead). Builds are cached on disk (``cache_dir("sim")``);
the process keeps the :data:`LIBRARY_CACHE_SIZE` (256) most recently used of them loaded. An older
one is unloaded (``dlclose``) once no :class:`SimModule` uses it any more; building it again reloads it.

Example::

  mod = build_simulator(src, {"add": ["const float*", "const float*", "float*", "int"]})
  mod.launch("add", grid=(4, 1, 1), block=(256, 1, 1), args=[a, b, c, 1000])
"""
from __future__ import annotations

import _ctypes
import ctypes
import errno
import functools
import logging
import os
import re
import subprocess
import tempfile
import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from minicomp.codegen.cache import cache_dir, cache_key
from minicomp.errors import SimulatorCompileError, SimulatorError
from minicomp.ir.ops import NP_DTYPE
from minicomp.lru import LRU

SHIM_PATH = Path(__file__).with_name("cuda_shim.h")
_logger = logging.getLogger("minicomp")
FLAGS = ("-O2", "-std=c++17", "-shared", "-fPIC", "-fno-strict-aliasing", "-w")
SOURCE_NAME = "kernel.cu"  # file names in compiler messages (set by #line)
LAUNCHER_NAME = "minicomp_launcher.cpp"
MAX_BLOCK = (1024, 1024, 64)
MAX_GRID = (2**31 - 1, 65535, 65535)
MAX_THREADS = 1024

# C element / scalar types a kernel parameter may have, and their minicomp dtypes (numpy's through ops.NP_DTYPE,
# which imports bfloat16's on use).
_DTYPES: dict[str, str] = {
  "float": "float32", "double": "float64", "bool": "bool",
  "char": "int8", "signed char": "int8", "int8_t": "int8", "unsigned char": "uint8", "uint8_t": "uint8",
  "half": "float16", "__half": "float16", "__nv_bfloat16": "bfloat16",
  "short": "int16", "int16_t": "int16", "unsigned short": "uint16", "uint16_t": "uint16",
  "int": "int32", "int32_t": "int32", "unsigned": "uint32", "unsigned int": "uint32", "uint32_t": "uint32",
  "long long": "int64", "long long int": "int64", "int64_t": "int64",
  "unsigned long long": "uint64", "uint64_t": "uint64",
}
_QUALIFIERS = {"const", "volatile", "__restrict__", "__restrict", "restrict"}

# One lock for every module: the fiber state lives in each .so, but the fault signal
# handlers it installs during a launch are process-wide.
_LAUNCH_LOCK = threading.Lock()
LIBRARY_CACHE_SIZE = 256   # simulator builds kept loaded (LRU); older ones are dlclose'd once unused
_DLCLOSE = getattr(_ctypes, "dlclose", None) or getattr(_ctypes, "FreeLibrary", None)


def _unload(path: str, lib: ctypes.CDLL) -> None:
  """An evicted build is dlclose'd when the last SimModule (and function pointer) using it is gone."""
  if _DLCLOSE is not None: weakref.finalize(lib, _DLCLOSE, lib._handle).atexit = False   # exit unloads everything anyway


_LIBS: LRU[str, ctypes.CDLL] = LRU(lambda: LIBRARY_CACHE_SIZE, _unload)   # by path


@dataclass(frozen=True, slots=True)
class Param:
  """One kernel parameter: its C type, its name in the source, and its numpy dtype."""
  ctype: str
  name: str
  dtype: np.dtype
  pointer: bool
  const: bool  # pointee is const (the kernel only reads the array)


@dataclass(frozen=True)
class SimModule:
  """The simulator build of one CUDA source; :meth:`launch` runs one of its kernels."""
  path: Path
  kernels: Mapping[str, tuple[Param, ...]]
  _lib: ctypes.CDLL = field(repr=False, compare=False)

  def launch(self, name: str, grid: tuple[int, int, int], block: tuple[int, int, int],
             args: Sequence[np.ndarray | int | float]) -> None:
    """Run kernel ``name`` over ``grid`` x ``block`` threads; arrays are modified in place.

    Pointer parameters take C-contiguous arrays of the matching dtype (``float*`` ->
    float32, ``int*`` -> int32, ...), scalar parameters take Python numbers. Safe to
    call from several Python threads (launches are serialised). Raises
    :class:`SimulatorError` on bad arguments, deadlock, divergent barriers and faults.
    """
    params = self.kernels.get(name)
    if params is None:
      raise SimulatorError(f"unknown kernel {name!r}; this module has {sorted(self.kernels)}")
    grid, block = _dims(name, "grid", grid, MAX_GRID), _dims(name, "block", block, MAX_BLOCK)
    if block[0] * block[1] * block[2] > MAX_THREADS:
      raise SimulatorError(f"{name}: block {block} has {block[0] * block[1] * block[2]} threads, more than {MAX_THREADS}")
    if len(args) != len(params):
      raise SimulatorError(f"{name}: takes {len(params)} arguments, got {len(args)}")
    keep = [_arg_value(name, i, p, v) for i, (p, v) in enumerate(zip(params, args))]
    argv = (ctypes.c_void_p * max(1, len(keep)))(*(k.ctypes.data for k in keep))
    cfg = (ctypes.c_uint * 6)(*grid, *block)
    fn = getattr(self._lib, f"mc_sim_launch_{name}")
    with _LAUNCH_LOCK:
      rc = fn(argv, cfg)
      msg = self._lib.mc_sim_error().decode(errors="replace") if rc else ""
    if rc:
      raise SimulatorError(f"{name}: {msg}")


def build_simulator(source: str, kernels: Mapping[str, Sequence[str]], *, cxx: str = "g++") -> SimModule:
  """Compile CUDA ``source`` for the CPU simulator (cached) and load it.

  ``kernels`` maps each kernel name in ``source`` to the C types of its parameters,
  e.g. ``{"matmul": ["const float*", "const float*", "float*", "int"]}``. The shared
  object is cached under ``cache_dir("sim")``, keyed by the source, this spec, the
  shim, the compiler version and the flags, so a rebuild of the same source only
  loads it. Raises :class:`SimulatorCompileError` (with the compiler log and the
  offending kernel source lines) when the compiler rejects the source.
  """
  params = {name: _parse_params(source, name, types) for name, types in kernels.items()}
  spec = "\n".join(f"{name}({', '.join(types)})" for name, types in kernels.items())
  tu = _translation_unit(source, params)  # also in the key: the launcher template may change
  key = cache_key(source, spec, _shim_text(), _compiler_version(cxx), " ".join(FLAGS), tu)
  path = _build_dir() / f"{key}.so"
  if not path.exists():
    try:
      _compile(tu, source, cxx, path)
    except OSError as e:           # a cache folder that filled up or turned read-only: this process's own folder
      if path.parent == _private_dir(): raise SimulatorError(f"cannot write the simulator build of a kernel: {e}") from None
      _logger.warning("the simulator's cache folder %s is not writable (%s); building in %s instead",
                      path.parent, e.strerror or e, _private_dir())
      _USE_PRIVATE.append(True)
      return build_simulator(source, kernels, cxx=cxx)
  return SimModule(path, params, _load(path, list(params)))


_USE_PRIVATE: list[bool] = []   # set once the cache folder failed: every later build of the process goes private


def _build_dir() -> Path:
  """Where builds go: the cache folder (``cache_dir("sim")``), or this process's own temporary folder when the
  cache folder cannot be made or written (a cache path that is a file, a read-only or full disk), said once."""
  if not _USE_PRIVATE:
    try:
      d = cache_dir("sim")
      if os.access(d, os.W_OK | os.X_OK): return d
      reason = "not writable"
    except OSError as e:
      reason = e.strerror or str(e)
    _logger.warning("the simulator's cache folder cannot be used (%s); building in %s instead", reason, _private_dir())
    _USE_PRIVATE.append(True)
  return _private_dir()


@functools.cache
def _private_dir() -> Path:
  """A temporary folder of this process, removed at exit."""
  import atexit
  import shutil
  d = Path(tempfile.mkdtemp(prefix="minicomp-sim-"))
  atexit.register(shutil.rmtree, d, True)
  return d


# A kernel's dynamic shared memory (codegen/cuda.py: one extern array its shared buffers point into) becomes a static
# array of the largest any arch allows, like every __shared__ array here: one instance, shared by the block's fibers
_DYNAMIC_SHARED = re.compile(r"\bextern __shared__ (__align__\(16\) unsigned char \w+)\[\];")


def _translation_unit(source: str, params: Mapping[str, tuple[Param, ...]]) -> str:
  """Shim include + source (line numbers kept by #line; a dynamic shared array made static) + one launcher per
  kernel."""
  source = _DYNAMIC_SHARED.sub(r"__shared__ \1[MC_DYNAMIC_SHARED_BYTES];", source)
  out = ['#include "cuda_shim.h"', f'#line 1 "{SOURCE_NAME}"', source, f'#line 1 "{LAUNCHER_NAME}"']
  for name, ps in params.items():
    call = ", ".join(f"*static_cast<{p.ctype}*>(a[{i}])" for i, p in enumerate(ps))
    out.append(f'extern "C" int mc_sim_launch_{name}(void** args, const unsigned* cfg) {{\n'
               f"  return ::mc_sim::launch(cfg, [](void** a) {{ {name}({call}); }}, args);\n}}")
  return "\n".join(out) + "\n"


def _compile(tu: str, source: str, cxx: str, out: Path) -> None:
  """Compile ``tu`` in a temporary folder next to ``out``, linking the prebuilt runtime, then move the
  .so into place. A build that fails with the runtime is tried once more defining the runtime itself:
  if that one succeeds, the stored runtime object was the fault (damaged, or from another toolchain)
  and is dropped; if not, the kernel source is, and its errors are raised."""
  with tempfile.TemporaryDirectory(dir=out.parent, prefix="build-") as tmp:
    cpp, so = Path(tmp) / "sim.cpp", Path(tmp) / "sim.so"
    cpp.write_text(tu)
    base = [cxx, *FLAGS, f"-I{_shim_dir(cxx)}", "-o", str(so)]
    runtime = _runtime_object(cxx)
    r = subprocess.run([*base, str(cpp), str(runtime)] if runtime else [*base, "-DMC_SIM_IMPLEMENTATION", str(cpp)],
                       cwd=tmp, capture_output=True, text=True)
    if r.returncode != 0 and runtime:
      r = subprocess.run([*base, "-DMC_SIM_IMPLEMENTATION", str(cpp)], cwd=tmp, capture_output=True, text=True)
      if r.returncode == 0:
        _BUILD_FAILED.add(runtime)
        runtime.unlink(missing_ok=True)
    if r.returncode != 0 and re.search(r"No space left on device|File too large|File size limit exceeded|Disk quota exceeded", r.stderr):
      raise OSError(errno.ENOSPC, "the compiler could not write its output: " + r.stderr.strip().splitlines()[-1])
    if r.returncode != 0:
      raise SimulatorCompileError(_compile_message(cxx, r.stderr + r.stdout, source), log=r.stderr + r.stdout, source=source)
    os.replace(so, out)


def _compile_message(cxx: str, log: str, source: str) -> str:
  """The compiler's error lines, each followed by the kernel source line it names."""
  lines, msg = source.splitlines(), [f"{cxx} rejected the kernel source (CPU simulator build):"]
  for m in re.finditer(r"^(\S+?):(\d+):(?:\d+:)? (?:fatal )?error: .*$", log, re.M):
    msg.append("  " + m.group(0))
    if m.group(1) == SOURCE_NAME and 0 < int(m.group(2)) <= len(lines):
      msg.append(f"  {int(m.group(2)):5d} | {lines[int(m.group(2)) - 1].strip()}")
    elif m.group(1) == LAUNCHER_NAME:
      msg.append("        (in a generated launcher: do the kernels' parameter types match their signatures?)")
  if len(msg) == 1:
    msg.append(log.strip()[-2000:])
  return "\n".join(msg[:41])


def _parse_params(source: str, name: str, types: Sequence[str]) -> tuple[Param, ...]:
  """Params of kernel ``name`` from its C types; names come from its signature when found."""
  if not re.fullmatch(r"[A-Za-z_]\w*", name):
    raise SimulatorError(f"kernel name {name!r} is not a C identifier")
  sig = re.search(rf"\b{name}\s*\(([^)]*)\)", source)
  if sig is None:
    raise SimulatorError(f"kernel {name!r} is not defined in the source")
  names = [(re.findall(r"\w+", p) or [""])[-1] for p in sig.group(1).split(",")]
  if len(names) != len(types):
    names = [f"arg{i}" for i in range(len(types))]
  out = []
  for i, (ctype, pname) in enumerate(zip(types, names)):
    words = ctype.replace("*", " * ").split()
    base = " ".join(w for w in words if w not in _QUALIFIERS and w != "*")
    stars = words.count("*")
    if base not in _DTYPES or stars > 1:
      raise SimulatorError(f"{name}: parameter {i} ({pname}) has unsupported type {ctype!r}")
    const = stars == 1 and "const" in words[:words.index("*")]
    out.append(Param(ctype, pname, np.dtype(NP_DTYPE[_DTYPES[base]]), stars == 1, const))
  return tuple(out)


def _arg_value(kernel: str, i: int, p: Param, v: object) -> np.ndarray:
  """An array whose data holds the argument's bytes (a pointer value or a scalar)."""
  what = f"{kernel}: argument {i} ({p.name}, {p.ctype})"
  if p.pointer:
    if not isinstance(v, np.ndarray):
      raise SimulatorError(f"{what} expects a numpy array, got {type(v).__name__}")
    if v.dtype != p.dtype:
      raise SimulatorError(f"{what} expects dtype {p.dtype}, got {v.dtype}")
    if not v.flags.c_contiguous:
      raise SimulatorError(f"{what} expects a C-contiguous array (use np.ascontiguousarray)")
    if not p.const and not v.flags.writeable:
      raise SimulatorError(f"{what} is written by the kernel but the array is read-only")
    return np.array([v.ctypes.data], dtype=np.uintp)
  if isinstance(v, np.ndarray) or not isinstance(v, (int, float, np.number, np.bool_)):
    raise SimulatorError(f"{what} expects a number, got {type(v).__name__}")
  if p.dtype.kind in "iub" and isinstance(v, (float, np.floating)):
    raise SimulatorError(f"{what} expects an integer, got {v!r}")
  try:
    return np.array(v, dtype=p.dtype)
  except OverflowError as e:
    raise SimulatorError(f"{what}: {v!r} does not fit in {p.dtype}") from e


def _dims(kernel: str, what: str, dims: Sequence[int], limits: tuple[int, int, int]) -> tuple[int, int, int]:
  """Validate a grid / block shape: three ints, each in [1, limit]."""
  dims = tuple(dims)
  if len(dims) != 3 or not all(isinstance(d, (int, np.integer)) for d in dims):
    raise SimulatorError(f"{kernel}: {what} must be three ints, got {dims!r}")
  for d, lim, axis in zip(dims, limits, "xyz"):
    if not 1 <= d <= lim:
      raise SimulatorError(f"{kernel}: {what}.{axis} = {d} is outside [1, {lim}]")
  return tuple(int(d) for d in dims)


@functools.lru_cache(maxsize=None)
def _compiler_version(cxx: str) -> str:
  """The compiler's ``--version`` text (part of the cache key)."""
  try:
    r = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=True)
  except (OSError, subprocess.CalledProcessError) as e:
    raise SimulatorError(f"C++ compiler {cxx!r} for the CPU simulator is not usable: {e}") from e
  return r.stdout.strip()


@functools.lru_cache(maxsize=1)
def _shim_text() -> str:
  return SHIM_PATH.read_text()


@functools.lru_cache(maxsize=None)
def _pch_name(cxx: str) -> str | None:
  """The precompiled shim's folder name for ``cxx`` (None: not GCC, whose --version names its
  Free Software Foundation copyright; clang's names clang)."""
  version = _compiler_version(cxx)
  if "Free Software Foundation" not in version or "clang" in version.lower():
    return None
  return f"pch-{_shim_key(cxx)}"


@functools.lru_cache(maxsize=None)
def _shim_key(cxx: str) -> str:
  """What the shim's prebuilt parts (precompiled header, runtime object) depend on, as a short digest."""
  return cache_key(_shim_text(), _compiler_version(cxx), " ".join(FLAGS))[:24]


OBJECT_FLAGS = tuple(f for f in FLAGS if f != "-shared")   # for the shim's parts built on their own
_BUILD_FAILED: set[Path] = set()   # shim parts whose build failed in this process: not retried on every build


def _shim_dir(cxx: str) -> Path:
  """The folder to take ``cuda_shim.h`` from: with g++, a cache folder holding a copy of it and its
  precompiled form (``cuda_shim.h.gch``, built here once per shim, compiler and flags), which g++ uses
  in its place (only when it was built by the same compiler with compatible flags; else it reads the
  text beside it, so a stale or foreign ``.gch`` costs time, never a wrong build). Other compilers,
  or a precompile that fails: the package folder."""
  name = _pch_name(cxx)
  if name is None:
    return SHIM_PATH.parent
  d = _build_dir() / name
  gch = d / "cuda_shim.h.gch"
  if gch.exists():
    return d
  if d in _BUILD_FAILED:
    return SHIM_PATH.parent
  try:
    d.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=d, prefix="build-") as tmp:
      hdr = Path(tmp) / "cuda_shim.h"
      hdr.write_text(_shim_text())
      r = subprocess.run([cxx, *OBJECT_FLAGS, "-x", "c++-header", str(hdr), "-o", str(hdr) + ".gch"],
                         capture_output=True, text=True)
      if r.returncode != 0:
        _BUILD_FAILED.add(d)
        return SHIM_PATH.parent
      os.replace(hdr, d / "cuda_shim.h")              # the text first: a .gch is only looked for beside it
      os.replace(str(hdr) + ".gch", gch)
  except OSError:                                     # a read-only or full cache: build without it
    _BUILD_FAILED.add(d)
    return SHIM_PATH.parent
  return d


def _runtime_object(cxx: str) -> Path | None:
  """The shim's runtime (fibers, barriers, launch: its ``MC_SIM_IMPLEMENTATION`` part) compiled once
  per shim text, compiler and flags into an object file in the cache, which every build links. That
  leaves a build only the kernel to compile, in 0.4 of the time the whole translation unit took
  (``benchmarks/compile_speed.py``). None when it cannot be built or stored; the build then defines
  the runtime itself."""
  out = _build_dir() / f"runtime-{_shim_key(cxx)}.o"
  if out in _BUILD_FAILED:
    return None
  if out.exists():
    return out
  try:
    with tempfile.TemporaryDirectory(dir=out.parent, prefix="build-") as tmp:
      (Path(tmp) / "cuda_shim.h").write_text(_shim_text())
      (Path(tmp) / "runtime.cpp").write_text('#define MC_SIM_IMPLEMENTATION\n#include "cuda_shim.h"\n')
      r = subprocess.run([cxx, *OBJECT_FLAGS, "-c", "runtime.cpp", "-o", "runtime.o"], cwd=tmp, capture_output=True,
                         text=True)
      if r.returncode != 0:
        _BUILD_FAILED.add(out)
        return None
      os.replace(Path(tmp) / "runtime.o", out)
  except OSError:                                     # a read-only or full cache: build without it
    _BUILD_FAILED.add(out)
    return None
  return out


def _load(path: Path, names: Sequence[str]) -> ctypes.CDLL:
  """dlopen ``path`` (once while it is among the :data:`LIBRARY_CACHE_SIZE` most recently
  used builds) and declare its launcher signatures."""
  with _LAUNCH_LOCK:
    lib = _LIBS.get(str(path))
    if lib is None:
      try:
        lib = ctypes.CDLL(str(path))
      except OSError as e:
        raise SimulatorError(f"cannot load simulator build {path} (delete it to rebuild): {e}") from e
      lib.mc_sim_error.restype = ctypes.c_char_p
      lib = _LIBS.put(str(path), lib)
    for n in names:
      fn = getattr(lib, f"mc_sim_launch_{n}")
      fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_void_p], ctypes.c_int
  return lib
