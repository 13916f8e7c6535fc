"""Progress bars for the long operations a user starts: model compile, tuning, whole-model estimates.

One helper, :func:`bar`: a tqdm bar on stderr (with counts, rate and time left), or a silent
stand-in when ``enabled`` is False, so callers never branch. Phase lines ("imported ...",
"partitioned ...") go through :func:`say`, which writes above a running bar instead of through it.
Every entry point takes ``progress=`` (the CLI's ``-q`` turns it off).

Ctrl-C during a long operation (the CLI's compile and tune: :func:`deferred_interrupts`) is deferred to a safe
point: the signal only sets a flag, and the long loops (tuning rounds and measurements, choosing each task's
default) call :func:`check_interrupt`, which raises KeyboardInterrupt there. An interrupt raised at whatever
code runs when the signal arrives could land inside JAX (its XLA threads then crashed the exit, or its gc
callback swallowed the exception and the run went on). A second Ctrl-C raises at once.
"""
from __future__ import annotations

import contextlib
import signal
import sys
import threading

from tqdm import tqdm

_interrupted = threading.Event()


@contextlib.contextmanager
def deferred_interrupts():
  """Within the block (main thread only), Ctrl-C sets a flag for :func:`check_interrupt` instead of raising;
  a second Ctrl-C raises at once. The previous handler is restored after."""
  def handler(signum, frame):
    if _interrupted.is_set(): raise KeyboardInterrupt
    _interrupted.set()
  _interrupted.clear()
  previous = signal.signal(signal.SIGINT, handler)
  try:
    yield
  finally:
    signal.signal(signal.SIGINT, previous)
    _interrupted.clear()


def check_interrupt() -> None:
  """Raise KeyboardInterrupt if Ctrl-C came during :func:`deferred_interrupts` (a long loop calls it)."""
  if _interrupted.is_set():
    _interrupted.clear()
    raise KeyboardInterrupt


def bar(total: int, desc: str, enabled: bool = True, unit: str = "it", initial: int = 0) -> tqdm:
  """A progress bar over ``total`` units on stderr; ``enabled=False`` gives one that prints nothing."""
  return tqdm(total=total, desc=desc, unit=unit, initial=initial, disable=not enabled, file=sys.stderr,
              dynamic_ncols=True, mininterval=0.5, leave=True)


def say(msg: str, enabled: bool = True) -> None:
  """One progress line (``[minicomp] msg``) on stderr, printed above any running bar."""
  if enabled: tqdm.write(f"[minicomp] {msg}", file=sys.stderr)
