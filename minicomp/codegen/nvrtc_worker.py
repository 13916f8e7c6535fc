"""NVRTC in a child process, so that a crash inside NVRTC cannot take the caller down.

Why: NVRTC 12.6-12.9 (and likely earlier) has a use-after-free on some valid kernels: it
corrupts its heap and aborts the whole process ("malloc_consolidate(): unaligned fastbin
chunk detected", SIGABRT / SIGSEGV) inside ``nvrtcCompileProgram``, even for PTX-only output.
Whether it crashes depends on the heap layout: the kernel minicomp emits for random matmul
schedule 4051 (``tests/test_nvrtc_isolation.py``) crashes ~70% of the compiles with address
randomisation (ASLR) on, always with ``MALLOC_MMAP_THRESHOLD_=0`` (freed memory unmapped), and
any small edit of the kernel makes it compile, so there is no source pattern to avoid. A
tuning run compiles thousands of kernels: a crash must cost a retry, not the run.

How: each minicomp process keeps one long-lived child (``python nvrtc_worker.py``, this file
run as a script: it imports only ``cuda.bindings``, not minicomp, and first drops its own folder
from ``sys.path``, where the sibling ``cuda.py`` would shadow ``cuda``) and sends it one compile at
a time over its stdin/stdout as length-prefixed pickles (both ends are this file; nothing
else is ever unpickled). The child first re-executes itself with ASLR off (Linux
``personality(ADDR_NO_RANDOMIZE)``, as ``setarch -R`` does), which makes NVRTC's behaviour on
a given kernel repeatable from run to run. When the child dies mid-compile, the compile is
retried in fresh children with ASLR on (other layouts), each crash logged at INFO level and
counted in :data:`crashes`; after :data:`CRASH_TRIES` crashes :func:`compile_isolated`
raises :class:`NVRTCCrash` (minicomp turns it into ``NVRTCError``) naming the signals. The
child's own stderr (glibc's abort message) is discarded. Cost: ~0.3 s to start a child, once
per process and once per crash; a compile adds a pickle round trip (well under 1 ms).

The child exits when its parent does, even when the parent was SIGKILLed (:func:`exit_with_parent`;
the tuning pool's workers use it too), so a killed run leaves no process behind.

``MINICOMP_NVRTC_ISOLATE=0`` compiles in the calling process instead (no child; one fewer
process, and a crash kills the caller).
"""
from __future__ import annotations

import os
import sys

if __name__ == "__main__":
  # Run as a script, this file's folder is sys.path[0], where the sibling cuda.py (minicomp's
  # emitter) shadows the ``cuda`` namespace package: ``import cuda.bindings`` then fails
  # ("'cuda' is not a package") unless the real ``cuda`` was imported at start-up, which only
  # cuda-bindings 12.x's _cuda_bindings_redirector.pth does (conda, cuda-bindings 13: no such .pth).
  _HERE = os.path.realpath(os.path.dirname(os.path.abspath(__file__)))
  sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.curdir) != _HERE]

import atexit  # noqa: E402 -- below the sys.path fix, so no sibling file can shadow a module
import logging  # noqa: E402
import pickle  # noqa: E402
import signal  # noqa: E402
import struct  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

_logger = logging.getLogger("minicomp")
CRASH_TRIES = 16                # fresh children a crashing compile gets, the first with ASLR off
_ADDR_NO_RANDOMIZE = 0x0040000  # linux/personality.h
_ENV_NO_ASLR = "MINICOMP_NVRTC_WORKER_NO_ASLR"
_ENV_PARENT = "MINICOMP_NVRTC_WORKER_PARENT"   # the pid the child must not outlive
_HEADER = struct.Struct("<Q")
_CHILD_ARGS: list[str] | None = None   # the child's command line after the interpreter (tests replace it)


class NVRTCCrash(RuntimeError):
  """The NVRTC child process died while compiling (``.signal``: the signal that killed it)."""

  def __init__(self, message: str, signal_number: int | None):
    super().__init__(message)
    self.signal = signal_number


def isolation_enabled() -> bool:
  # (codegen.cache.switched_on's rule, written out: this file runs as a script that imports no minicomp)
  return os.environ.get("MINICOMP_NVRTC_ISOLATE", "1").strip().lower() not in ("0", "false", "no", "off")


def exit_with_parent(parent_pid: int, interval_s: float = 0.2) -> None:
  """Make this process exit soon after ``parent_pid`` dies, however it died (SIGKILL included), so a
  killed run leaves no orphans. A daemon thread polls ``os.getppid()``, which changes when the parent
  dies and this process is re-parented; portable, unlike Linux's PR_SET_PDEATHSIG, which also fires
  when the parent *thread* that started this process exits."""
  def watch():
    while os.getppid() == parent_pid: time.sleep(interval_s)
    os._exit(1)
  if os.getppid() != parent_pid: os._exit(1)
  threading.Thread(target=watch, name="minicomp-exit-with-parent", daemon=True).start()


# ---- the child ---------------------------------------------------------------------------

def run_nvrtc(source: str, arch: str, options: list[str], program_name: str, headers: tuple = ()):
  """One NVRTC compile: ("ok", ptx, cubin, log) or ("error", status name, log). ``headers``: (name, text) pairs
  NVRTC may include (in memory; ``--pre-include=name`` in ``options`` includes one before the source)."""
  from cuda.bindings import nvrtc as nv

  def call(fn, *args):
    err, *out = fn(*args)
    if err != nv.nvrtcResult.NVRTC_SUCCESS: raise RuntimeError(f"{fn.__name__} failed: {err}")
    return None if not out else out[0] if len(out) == 1 else out

  def get(prog, size_fn, get_fn) -> bytes:
    buf = b" " * call(size_fn, prog)
    call(get_fn, prog, buf)
    return buf

  prog = call(nv.nvrtcCreateProgram, source.encode(), program_name.encode(), len(headers),
              [t.encode() for _, t in headers], [n.encode() for n, _ in headers])
  try:
    opts = [f"--gpu-architecture={arch}", "--ptxas-options=-v", *options]
    err, = nv.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
    log = get(prog, nv.nvrtcGetProgramLogSize, nv.nvrtcGetProgramLog).rstrip(b"\0").decode(errors="replace")
    if err != nv.nvrtcResult.NVRTC_SUCCESS:
      _, name = nv.nvrtcGetErrorString(err)
      return ("error", name.decode() if isinstance(name, bytes) else str(name), log)
    ptx = get(prog, nv.nvrtcGetPTXSize, nv.nvrtcGetPTX).rstrip(b"\0").decode()
    return ("ok", ptx, get(prog, nv.nvrtcGetCUBINSize, nv.nvrtcGetCUBIN), log)
  finally:
    nv.nvrtcDestroyProgram(prog)


def _read(stream) -> object | None:
  head = stream.read(_HEADER.size)
  if len(head) < _HEADER.size: return None
  (n,) = _HEADER.unpack(head)
  body = stream.read(n)
  return pickle.loads(body) if len(body) == n else None


def _write(stream, obj) -> None:
  body = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
  stream.write(_HEADER.pack(len(body)) + body)
  stream.flush()


def _no_aslr_reexec() -> None:
  """Re-execute this script with address-space randomisation off (Linux only; else go on)."""
  if os.environ.get(_ENV_NO_ASLR) != "1" or not sys.platform.startswith("linux"): return
  try:
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    current = libc.personality(0xFFFFFFFF)
    if current < 0 or current & _ADDR_NO_RANDOMIZE: return
    if libc.personality(current | _ADDR_NO_RANDOMIZE) < 0: return
  except (OSError, AttributeError):
    return
  os.environ[_ENV_NO_ASLR] = "done"
  os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])   # same interpreter options (-S, -I, -X)


def _child_main() -> None:
  _no_aslr_reexec()
  if os.environ.get(_ENV_PARENT, "").isdigit(): exit_with_parent(int(os.environ[_ENV_PARENT]))
  stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
  sys.stdout = sys.stderr                  # nothing but replies goes to the parent's pipe
  while (request := _read(stdin)) is not None:
    try: reply = run_nvrtc(*request)
    except Exception as e:  # noqa: BLE001 -- a broken binding: report it, keep serving
      reply = ("exception", f"{type(e).__name__}: {e}", "")
    _write(stdout, reply)


# ---- the parent --------------------------------------------------------------------------

class _Child:
  def __init__(self, no_aslr: bool):
    env = dict(os.environ)
    env[_ENV_NO_ASLR] = "1" if no_aslr else "0"
    env[_ENV_PARENT] = str(os.getpid())
    self.proc = subprocess.Popen([sys.executable, *(_CHILD_ARGS or [os.path.abspath(__file__)])],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, env=env,   # glibc's abort message
                                 start_new_session=True)   # Ctrl-C is the parent's: a child it killed looked like a crash
    self.pid = os.getpid()               # a forked copy of the parent must not share the pipes
    self.no_aslr = no_aslr

  def request(self, req) -> tuple | None:
    try:
      _write(self.proc.stdin, req)
      return _read(self.proc.stdout)
    except (BrokenPipeError, OSError):
      return None

  def close(self) -> None:
    try: self.proc.stdin.close()
    except OSError: pass
    try: self.proc.wait(timeout=5)
    except subprocess.TimeoutExpired: self.proc.kill()


_child: _Child | None = None
crashes = 0                      # NVRTC crashes survived by this process (each cost one retry)
_lock = threading.Lock()


def _close_child() -> None:
  global _child
  if _child is not None and _child.pid == os.getpid(): _child.close()
  _child = None


atexit.register(_close_child)


def compile_isolated(source: str, arch: str, options: list[str], program_name: str, headers: tuple = ()) -> tuple:
  """:func:`run_nvrtc` in this process's NVRTC child; retried in fresh children on a crash.

  Raises :class:`NVRTCCrash` when every try crashed.
  """
  global _child, crashes
  with _lock:
    signals = []
    for attempt in range(CRASH_TRIES):
      if _child is None or _child.pid != os.getpid() or _child.proc.poll() is not None:
        _child = _Child(no_aslr=attempt == 0)
      reply = _child.request((source, arch, list(options), program_name, tuple(headers)))
      if reply is not None:
        if not _child.no_aslr: _close_child()    # the next compile gets a repeatable child again
        return reply
      code = _child.proc.wait()
      signals.append(-code if code < 0 else None)
      crashes += 1
      _logger.info("NVRTC crashed (%s) compiling a kernel; retrying in a fresh process", signals[-1])
      _child = None
    names = ", ".join(sorted({signal.Signals(s).name if s else "exit" for s in signals}))
    raise NVRTCCrash(f"NVRTC crashed {CRASH_TRIES} times compiling this kernel ({names}): an NVRTC bug, "
                     "not an error in the source", signals[-1])


if __name__ == "__main__":
  _child_main()
