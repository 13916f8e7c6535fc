"""Compilation targets: a CUDA architecture (``"sm_86"``) and the limits the compiler checks.

This module holds the numbers the schedule checks need (threads per block, shared memory
per block, warp size). Per-device performance numbers (SM count, clocks, bandwidth) belong
to the static cost model and are added with it.

Limits are from the CUDA C++ Programming Guide, "Compute Capabilities" table (features and
technical specifications), which is identical for every arch minicomp supports here on the
values below: 1024 threads per block, 48 KiB of statically allocated shared memory per
block, 255 registers per thread, warp size 32.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from minicomp.errors import MinicompError


class TargetError(MinicompError):
  """An unknown or unsupported target string."""


SUPPORTED_ARCHS = ("sm_70", "sm_72", "sm_75", "sm_80", "sm_86", "sm_87", "sm_89", "sm_90")

# Opt-in dynamic shared memory per block (CUDA C++ Programming Guide, compute capability table).
_SMEM_OPTIN = {"sm_70": 96 * 1024, "sm_72": 96 * 1024, "sm_75": 64 * 1024, "sm_80": 163 * 1024,
               "sm_86": 99 * 1024, "sm_87": 163 * 1024, "sm_89": 99 * 1024, "sm_90": 227 * 1024}


@dataclass(frozen=True)
class Target:
  """A CUDA compilation target.

  ``Target("sm_86")`` (or ``"sm86"``). Static shared memory (``__shared__`` arrays, which is
  all minicomp emits) is limited to 48 KiB per block on every arch.
  """
  arch: str
  max_threads_per_block: int = 1024
  max_shared_bytes_per_block: int = 48 * 1024
  max_registers_per_thread: int = 255
  warp_size: int = 32
  max_vthread_extent: int = 8  # Ansor's GPU default (HardwareParams.max_vthread_extent)
  max_block_dims: tuple[int, int, int] = (1024, 1024, 64)
  max_grid_dims: tuple[int, int, int] = (2**31 - 1, 65535, 65535)

  def __post_init__(self):
    m = re.fullmatch(r"sm_?(\d\d)", self.arch.strip())
    if m is None or f"sm_{m.group(1)}" not in SUPPORTED_ARCHS:
      raise TargetError(f"unknown target {self.arch!r}; supported: {', '.join(SUPPORTED_ARCHS)}")
    object.__setattr__(self, "arch", f"sm_{m.group(1)}")

  @property
  def compute_capability(self) -> tuple[int, int]:
    return int(self.arch[3]), int(self.arch[4])

  @property
  def max_shared_optin_bytes(self) -> int:
    return _SMEM_OPTIN[self.arch]

  def __str__(self) -> str:
    return self.arch


def as_target(t: "Target | str") -> Target:
  return t if isinstance(t, Target) else Target(t)
