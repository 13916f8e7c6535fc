"""On-disk cache for compiled artefacts (NVRTC output, simulator binaries).

Location: ``$MINICOMP_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/minicomp``, else
``~/.cache/minicomp``. Entries are keyed by a SHA-256 of everything that decides the
output (source, arch, options, compiler version), so a stale entry can never be
returned for different inputs. Writes are atomic (write to a temp file, rename).
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path


def cache_dir(kind: str) -> Path:
  """The cache folder for one kind of artefact (created on first use)."""
  root = os.environ.get("MINICOMP_CACHE_DIR")
  if root is None:
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    root = os.path.join(xdg, "minicomp")
  d = Path(root) / kind
  d.mkdir(parents=True, exist_ok=True)
  return d


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
