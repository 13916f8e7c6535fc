"""Where a benchmark table came from: the command, the date, the machine and the commit.

Every benchmark prints these lines above its table, so a pasted table can be reproduced and
compared (read-only git calls: no index refresh).
"""
from __future__ import annotations

import datetime
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def cpu_model() -> str:
  try:
    for ln in Path("/proc/cpuinfo").read_text().splitlines():
      if ln.startswith("model name"):
        return ln.split(":", 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or "unknown"


def nproc() -> int:
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:
    return os.cpu_count() or 0


def loadavg() -> str:
  try:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())
  except OSError:
    return "unknown"


def cmd_out(cmd: list[str]) -> str:
  try:
    return subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=ROOT).stdout.strip()
  except (OSError, subprocess.CalledProcessError):
    return "unknown"


def revision() -> str:
  """The commit, and whether minicomp/ differs from it."""
  rev = cmd_out(["git", "rev-parse", "--short", "HEAD"])
  dirty = cmd_out(["git", "--no-optional-locks", "status", "--porcelain", "--untracked-files=no", "--", "minicomp"])
  return rev + (" + uncommitted changes in minicomp/" if dirty and dirty != "unknown" else "")


def header_lines(script: str, argv: list[str] | None = None) -> list[str]:
  """``command:``, ``date:`` and ``machine:`` lines for the benchmark file ``script``."""
  args = " ".join(sys.argv[1:] if argv is None else argv)
  return [f"command:  python benchmarks/{os.path.basename(script)} {args}".rstrip(),
          f"date:     {datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')}",
          f"machine:  nproc={nproc()}, CPU: {cpu_model()}, load average {loadavg()}; minicomp @ {revision()}"]
