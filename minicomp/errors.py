"""Every error minicomp raises on purpose is a subclass of :class:`MinicompError`.

Each names what went wrong (the op, the schedule step, the source line) and, where
there is one, the likely fix. Any other exception escaping minicomp is a bug.
"""
from __future__ import annotations


class MinicompError(Exception):
  """Base class of every error minicomp raises on purpose."""


# ---- building kernels: expressions, schedules, lowering, CUDA source, targets

class ExprError(MinicompError):
  """An expression was built or evaluated with the wrong types or arity."""


class UnevaluableError(ExprError):
  """An expression could not be evaluated: a variable has no value or a tensor read has no ``loads`` callback.
  The expression is printed (its first 200 characters) only when the message is read: callers that try an
  evaluation and catch the failure (the static model's data-dependent guards) would otherwise print every
  expression they try (38 s of a QDQ ResNet-18's compile)."""

  def __init__(self, message: str, expr):
    super().__init__(message)
    self.expr = expr

  def __str__(self) -> str: return f"{self.args[0]} in {str(self.expr)[:200]}"


class TEError(MinicompError):
  """A tensor expression is malformed (wrong number of indices, unknown axis, ...)."""


class ScheduleError(MinicompError):
  """A schedule step is invalid for the state it is applied to.

  The message names the step (its index and its JSON form) and why it is invalid.
  The search catches exactly this type to prune a candidate.
  """


def check(cond: object, msg: str, exc: type[MinicompError] = ScheduleError) -> None:
  """Raise ``exc(msg)`` when ``cond`` is false."""
  if not cond:
    raise exc(msg)


class LoweringError(MinicompError):
  """A valid-looking schedule could not be lowered to a loop nest (a bug or an unsupported pattern)."""


class CodegenError(MinicompError):
  """The CUDA emitter met a node it cannot render."""


class TargetError(MinicompError):
  """An unknown or unsupported target string."""


# ---- compiling and running kernels: NVRTC, the CPU simulator, the GPU driver

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


# Errors after which the CUDA context is unusable (every later call fails): the process must restart.
STICKY_ERRORS = frozenset({
  "CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_ILLEGAL_INSTRUCTION",
  "CUDA_ERROR_MISALIGNED_ADDRESS", "CUDA_ERROR_INVALID_ADDRESS_SPACE", "CUDA_ERROR_INVALID_PC",
  "CUDA_ERROR_HARDWARE_STACK_ERROR", "CUDA_ERROR_ECC_UNCORRECTABLE", "CUDA_ERROR_ASSERT",
  "CUDA_ERROR_CONTEXT_IS_DESTROYED", "CUDA_ERROR_LAUNCH_TIMEOUT"})


class DriverError(RuntimeLaunchError):
  """A GPU driver call failed. ``code`` is the CUDA error name (``"CUDA_ERROR_..."``) where the
  backend knows it, else ``""``; ``sticky`` says the context is lost (restart the process)."""

  def __init__(self, message: str, code: str = ""):
    super().__init__(message if not code or code in message else f"{message} [{code}]")
    self.code = code

  @property
  def sticky(self) -> bool: return self.code in STICKY_ERRORS


class NoGPUError(RuntimeLaunchError):
  """No usable GPU: no driver, no device, or the backend's package is missing (the message says which;
  ``reason`` is that part alone, without advice on what to do instead)."""

  def __init__(self, message: str = "", reason: str | None = None):
    super().__init__(message)
    self.reason = reason if reason is not None else message


# ---- ONNX models, compiled models, the command line

class ModelError(MinicompError):
  """The ONNX model is malformed or could not be read (checker / shape inference failure, bad path)."""


class MissingDependencyError(MinicompError, ImportError):
  """An optional package that this feature needs is not installed (the message says which, and the
  ``pip install`` that adds it): ``import minicomp`` needs only the core dependencies."""


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


class SaveError(MinicompError):
  """A compiled model could not be written: a full disk, a file-size limit, permissions, or another
  process saving to the same folder at the same moment. Whatever was saved there before is kept."""


class UsageError(MinicompError):
  """A command-line argument is malformed or names a file that cannot be read."""


# ---- the search: sketches, annotation, measuring, tuning, the cost model, tuning logs

class SketchError(MinicompError):
  """Sketch generation failed: no rule produced a finished sketch, or rules loop."""


class AnnotationError(MinicompError):
  """No valid concrete schedule could be drawn from a sketch."""


class MeasureError(MinicompError):
  """The measuring machinery itself failed (not a candidate): e.g. its worker processes cannot start."""


class ClusterError(MinicompError):
  """A Ray cluster cannot be used for tuning: unreachable, Ray missing, no node with the resources a
  measurement needs, or nodes whose minicomp differs from the driver's (the message names the node)."""


class WorkerLostError(ClusterError):
  """The cluster worker (or its node) running a candidate died, also on the one retry: the candidate is
  recorded as lost (``ErrorKind.LOST``) and the run goes on with the nodes left."""


class TuneError(MinicompError):
  """Bad tuning options (unknown strategy, a trials count that is not a non-negative int, ...)."""


class CostModelError(MinicompError):
  """The cost model got malformed input (wrong feature width, mismatched lengths, a cost <= 0), was used
  before it was fitted where that is not allowed, or a saved model file is missing, corrupt or of an
  unknown format version. The message says which; a bad file has to be re-saved with
  :meth:`~minicomp.search.cost_model.MLPCostModel.save`."""


class RecordsError(MinicompError):
  """A tuning log of an unsupported format version, a missing log, or an invalid record.

  The message names the file and line when there is one."""


class InvalidRecord(RecordsError):
  """One record (line) is malformed: :func:`~minicomp.search.records.load_records` skips it with a warning, the
  rest of the log counts."""


class ReportError(MinicompError):
  """The report cannot be made (an empty log, matplotlib missing for the PNG)."""


# ---- the static performance model: estimates, PTX analysis, occupancy, data movement

class EstimateError(MinicompError):
  """The static model cannot estimate this kernel (e.g. it was loaded without its loop IR)."""


class CalibrationError(MinicompError):
  """A calibration file of the static model is unreadable, of another version or malformed, or a calibration
  cannot be fitted (too few timed programs)."""


class DatasetError(MinicompError):
  """A timings dataset (``minicomp collect`` / ``calibrate``) has a line that is not a timed program: the file
  and line are named."""


class PTXAnalysisError(MinicompError):
  """The PTX text has no such ``.entry`` (or no entry at all, or several and no name was given)."""


class OccupancyError(MinicompError):
  """A block cannot be resident on an SM at all (too many threads, registers or shared memory)."""


class FootprintError(MinicompError, ValueError):
  """The data-movement analysis cannot take this kernel (symbolic extents, unknown statements)."""
