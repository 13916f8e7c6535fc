"""Progress bars for the long operations a user starts: model compile, tuning, whole-model estimates.

One helper, :func:`bar`: a tqdm bar on stderr (with counts, rate and time left), or a silent
stand-in when ``enabled`` is False, so callers never branch. Phase lines ("imported ...",
"partitioned ...") go through :func:`say`, which writes above a running bar instead of through it.
Every entry point takes ``progress=`` (the CLI's ``-q`` turns it off).

Ctrl-C during a long operation: Python raises KeyboardInterrupt in whatever code runs when the signal
arrives, and where that is a garbage-collector callback (JAX registers one) or a ``__del__``, Python prints
"Exception ignored" and goes on: the run would not stop. :func:`keep_interrupts` (the CLI installs it)
remembers such a lost interrupt, and the long loops call :func:`check_interrupt` to raise it again.
"""
from __future__ import annotations

import sys
import threading

from tqdm import tqdm

_lost_interrupt = threading.Event()


def keep_interrupts() -> None:
  """Remember a KeyboardInterrupt that Python ignored (``sys.unraisablehook``), without printing it, so the
  next :func:`check_interrupt` raises it."""
  previous = sys.unraisablehook

  def hook(u):
    if isinstance(u.exc_value, KeyboardInterrupt): _lost_interrupt.set()
    else: previous(u)
  sys.unraisablehook = hook


def check_interrupt() -> None:
  """Raise the KeyboardInterrupt that :func:`keep_interrupts` saw ignored, if any (a long loop calls it)."""
  if _lost_interrupt.is_set():
    _lost_interrupt.clear()
    raise KeyboardInterrupt


def bar(total: int, desc: str, enabled: bool = True, unit: str = "it", initial: int = 0) -> tqdm:
  """A progress bar over ``total`` units on stderr; ``enabled=False`` gives one that prints nothing."""
  return tqdm(total=total, desc=desc, unit=unit, initial=initial, disable=not enabled, file=sys.stderr,
              dynamic_ncols=True, mininterval=0.5, leave=True)


def say(msg: str, enabled: bool = True) -> None:
  """One progress line (``[minicomp] msg``) on stderr, printed above any running bar."""
  if enabled: tqdm.write(f"[minicomp] {msg}", file=sys.stderr)
