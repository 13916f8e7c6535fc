"""Every error minicomp raises on purpose is a subclass of :class:`MinicompError`.

Each names what went wrong (the op, the schedule step, the source line) and, where
there is one, the likely fix. Any other exception escaping minicomp is a bug.
"""
from __future__ import annotations


class MinicompError(Exception):
  """Base class of every error minicomp raises on purpose."""


class ExprError(MinicompError):
  """An expression was built or evaluated with the wrong types or arity."""


class TEError(MinicompError):
  """A tensor expression is malformed (wrong number of indices, unknown axis, ...)."""


class ScheduleError(MinicompError):
  """A schedule step is invalid for the state it is applied to.

  The message names the step (its index and its JSON form) and why it is invalid.
  The search catches exactly this type to prune a candidate.
  """


class LoweringError(MinicompError):
  """A valid-looking schedule could not be lowered to a loop nest (a bug or an unsupported pattern)."""


class CodegenError(MinicompError):
  """The CUDA emitter met a node it cannot render."""


class CompileError(MinicompError):
  """NVRTC (or the host C++ compiler of the simulator) rejected generated source.

  ``log`` holds the compiler log, ``source`` the full source text.
  """

  def __init__(self, message: str, log: str = "", source: str = ""):
    super().__init__(message)
    self.log, self.source = log, source


class NVRTCError(CompileError):
  """NVRTC failed to compile a CUDA kernel."""


class SimulatorError(MinicompError):
  """The CPU simulator could not build or run a kernel."""


class SimulatorCompileError(CompileError, SimulatorError):
  """The host C++ compiler rejected the simulator translation unit."""


class RuntimeLaunchError(MinicompError):
  """Launching a kernel failed (wrong arguments, no device, driver error)."""


def check(cond: object, msg: str, exc: type[MinicompError] = ScheduleError) -> None:
  """Raise ``exc(msg)`` when ``cond`` is false."""
  if not cond:
    raise exc(msg)


class ModelError(MinicompError):
  """The ONNX model is malformed or could not be read (checker / shape inference failure, bad path)."""


class UnsupportedOpError(ModelError):
  """The model uses ONNX ops (or forms of them) minicomp does not support.

  ``nodes`` lists ``(op_type, node_name)`` of every unsupported node.
  """

  def __init__(self, message: str, nodes=()):
    super().__init__(message)
    self.nodes = list(nodes)


class ShapeError(ModelError):
  """A shape minicomp needs is not known statically (dynamic dims without ``input_shapes=``) or is inconsistent."""


class FeedError(MinicompError):
  """``run(feeds)`` got a missing / unknown input name, or a wrong shape or dtype."""


class SaveFormatError(MinicompError):
  """A saved compiled model is missing files, corrupted, or of an unknown format version."""
