"""Progress bars for the long operations a user starts: model compile, tuning, whole-model estimates.

One helper, :func:`bar`: a tqdm bar on stderr (with counts, rate and time left), or a silent
stand-in when ``enabled`` is False, so callers never branch. Phase lines ("imported ...",
"partitioned ...") go through :func:`say`, which writes above a running bar instead of through it.
Every entry point takes ``progress=`` (the CLI's ``-q`` turns it off).
"""
from __future__ import annotations

import sys

from tqdm import tqdm


def bar(total: int, desc: str, enabled: bool = True, unit: str = "it", initial: int = 0) -> tqdm:
  """A progress bar over ``total`` units on stderr; ``enabled=False`` gives one that prints nothing."""
  return tqdm(total=total, desc=desc, unit=unit, initial=initial, disable=not enabled, file=sys.stderr,
              dynamic_ncols=True, mininterval=0.5, leave=True)


def say(msg: str, enabled: bool = True) -> None:
  """One progress line (``[minicomp] msg``) on stderr, printed above any running bar."""
  if enabled: tqdm.write(f"[minicomp] {msg}", file=sys.stderr)
