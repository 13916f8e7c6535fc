"""minicomp: a standalone tensor compiler in pure Python with a CUDA C code generator.

Tensor expressions and schedules (TVM-TE style)::

    import minicomp as mc
    A = mc.placeholder((M, K), "float32", name="A")
    k = mc.reduce_axis(K, name="k")
    C = mc.compute((M, N), lambda i, j: mc.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = mc.Schedule([C])
    kern = mc.build(s, target="sm_86")
    out = kern(a, b)
"""
from minicomp.codegen.cache import use_jax_cache
use_jax_cache()                     # before anything imports JAX: its compiled functions persist on disk
from minicomp.errors import (AnnotationError, CalibrationError, ClusterError, CodegenError, CompileError, CostModelError, DriverError, EstimateError,
                             DatasetError, ExprError, FeedError, FootprintError, InvalidRecord, LoweringError, MeasureError,
                             MinicompError, MissingDependencyError, ModelError, NoGPUError, NVRTCError, OccupancyError, PTXAnalysisError,
                             RecordsError, ReportError, RuntimeLaunchError, SaveError, SaveFormatError, ScheduleError, ShapeError,
                             SimulatorCompileError, SimulatorError, SketchError, TargetError, TEError, TuneError,
                             UnevaluableError, UnsupportedOpError, UsageError, WorkerLostError)
from minicomp.target import Target
from minicomp.ir.expr import (Expr, IterVar, all_of, cast, const, dot4, erf, exp, log, power, rsqrt, select, sigmoid,
                              sqrt, tanh, var)
from minicomp.ir.te import Tensor, compute, max, min, placeholder, reduce_axis, sum  # noqa: A004
from minicomp.ir.dag import ComputeDAG
from minicomp.ir.schedule import Schedule
from minicomp.codegen.kernel import Kernel, build

__version__ = "0.1.0"

__all__ = ["AnnotationError", "CalibrationError", "ClusterError", "CodegenError", "CompileError", "CostModelError", "DriverError", "EstimateError",
           "DatasetError", "ExprError", "FeedError", "FootprintError", "InvalidRecord", "LoweringError", "MeasureError",
           "MinicompError", "MissingDependencyError", "ModelError", "NoGPUError", "NVRTCError", "OccupancyError", "PTXAnalysisError",
           "RecordsError", "ReportError", "RuntimeLaunchError", "SaveError", "SaveFormatError", "ScheduleError", "ShapeError",
           "SimulatorCompileError", "SimulatorError", "SketchError", "TargetError", "TEError", "TuneError",
           "UnevaluableError", "UnsupportedOpError", "UsageError", "WorkerLostError", "Target", "Expr", "IterVar", "all_of", "cast", "const", "dot4", "erf", "exp",
           "log", "power", "rsqrt", "select", "sigmoid", "sqrt", "tanh", "var", "Tensor", "compute", "max", "min",
           "placeholder", "reduce_axis", "sum", "ComputeDAG", "Schedule", "Kernel", "build"]

from minicomp.compiler import compile  # noqa: A004,E402
from minicomp.compiled_model import CompiledModel  # noqa: E402
from minicomp.saved_model_load import load  # noqa: E402

__all__ += ["compile", "load", "CompiledModel"]

from minicomp.search.static.estimate import estimate  # noqa: E402
from minicomp.codegen.driver import gpu_available, gpu_status  # noqa: E402

__all__ += ["estimate", "gpu_available", "gpu_status"]
