"""On-disk cache for compiled artefacts (NVRTC output, simulator binaries, JAX's compiled functions).

Location: ``$MINICOMP_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/minicomp``, else
``~/.cache/minicomp``. Entries are keyed by a SHA-256 of everything that decides the
output (source, arch, options, compiler version), so a stale entry can never be
returned for different inputs. Writes are atomic (write to a temp file, rename).
"""
from __future__ import annotations

import hashlib
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path


def cache_root() -> Path:
  """The cache folder (not created: :func:`cache_dir` creates a kind's folder on first use)."""
  root = os.environ.get("MINICOMP_CACHE_DIR")
  if root is None:
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    root = os.path.join(xdg, "minicomp")
  return Path(root)


def cache_dir(kind: str) -> Path:
  """The cache folder for one kind of artefact (created on first use)."""
  d = cache_root() / kind
  d.mkdir(parents=True, exist_ok=True)
  return d


def switched_on(variable: str, default: bool = True) -> bool:
  """Whether the on/off environment switch ``variable`` is on: unset, ``default``; else on unless set to 0, false,
  no or off."""
  raw = os.environ.get(variable)
  return default if raw is None else raw.strip().lower() not in ("0", "false", "no", "off")


def cache_key(*parts: str | bytes) -> str:
  """A hex digest of ``parts`` (each length-prefixed, so ("ab","c") != ("a","bc"))."""
  h = hashlib.sha256()
  for p in parts:
    b = p.encode() if isinstance(p, str) else p
    h.update(len(b).to_bytes(8, "little"))
    h.update(b)
  return h.hexdigest()


def atomic_write(path: Path, data: bytes) -> None:
  """Write ``data`` to ``path`` so a reader never sees a half-written file."""
  path.parent.mkdir(parents=True, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
  try:
    with os.fdopen(fd, "wb") as f:
      f.write(data)
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.unlink(tmp)
    raise


def version_folders_info(kind: str, title: str, pattern: str, unit: str, switch: str, current: str) -> str:
  """What ``minicomp cache info`` prints of a kind kept in one folder per code version
  (``cache_dir(kind)/<code version>/``, files matching ``pattern``): the folder, whether ``switch`` is on, and
  per version its files (as ``unit``) and size, the ``current`` version marked."""
  d = cache_dir(kind)
  lines = [f"{title}: {d} ({'on' if switched_on(switch) else f'off: {switch}=0'})"]
  folders = sorted(p for p in d.iterdir() if p.is_dir())
  for v in folders:
    files = list(v.glob(pattern))
    lines.append(f"  {v.name}: {len(files)} {unit}, {sum(f.stat().st_size for f in files) / 1024:.1f} KiB"
                 + ("  (this minicomp)" if v.name == current else "  (another version: unused)"))
  if not folders: lines.append("  empty")
  return "\n".join(lines)


def clear_version_folders(kind: str, pattern: str) -> int:
  """Remove every code version's folder of ``kind``; returns how many files matching ``pattern`` went."""
  n = 0
  for v in (p for p in cache_dir(kind).iterdir() if p.is_dir()):
    n += sum(1 for _ in v.glob(pattern))
    shutil.rmtree(v, ignore_errors=True)
  return n


JAX_CACHE_MIN_COMPILE_S = "0.2"    # XLA compiles shorter than this are not worth a disk entry


def use_jax_cache() -> None:
  """Point JAX's persistent compilation cache at ``cache_dir("jax")/<host>``, unless JAX is already
  imported (its settings are the user's then), ``JAX_COMPILATION_CACHE_DIR`` is set, or
  ``MINICOMP_JAX_CACHE=0``. Called by ``import minicomp``: it only sets environment variables,
  which JAX reads when it is first imported (minicomp imports it lazily).

  The cost model's training and prediction and Felix's objectives are XLA-compiled in every process
  that uses them: a measuring worker, a notebook kernel, each ``minicomp tune``. With the cache a fresh
  process loads them from disk instead: fitting a small cost model in a new process went from 2.7 s
  to 0.7 s (2026-11-27, 2 cores). XLA compiles for the host CPU, so the folder is keyed by the CPU
  model and its feature flags: a cache shared between different machines never hands one the
  other's code."""
  if os.environ.get("MINICOMP_JAX_CACHE", "1") == "0" or "jax" in sys.modules or "JAX_COMPILATION_CACHE_DIR" in os.environ:
    return
  try:
    os.environ["JAX_COMPILATION_CACHE_DIR"] = str(cache_dir("jax") / _host_key())
  except OSError:                     # an unwritable cache folder: JAX compiles as it would without minicomp
    return
  os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", JAX_CACHE_MIN_COMPILE_S)


def _host_key() -> str:
  """The machine and CPU features XLA's CPU code depends on, as a short digest."""
  wanted, info = ("model name", "flags", "Features"), {}
  try:
    with open("/proc/cpuinfo") as f:      # the first CPU's lines are enough: stop there, not at the end
      for line in f:
        if not line.strip() and info: break
        if line.startswith(wanted): info.setdefault(line.split(":")[0].strip(), line.strip())
  except OSError:
    pass
  info = list(info.values()) or [platform.processor()]
  return f"{platform.machine()}-{cache_key(platform.machine(), *info)[:16]}"
