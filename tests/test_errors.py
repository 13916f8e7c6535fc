"""Every error minicomp raises on purpose lives in minicomp/errors.py and is exported from ``minicomp``.

Walks the package: no module defines a :class:`MinicompError` subclass of its own. No GPU needed.
"""
import ast
import importlib
import inspect
import pkgutil

import minicomp as mc
from minicomp import errors


def _error_classes(module) -> list[type]:
  """The MinicompError subclasses a module defines itself (not those it imports)."""
  return [c for _, c in inspect.getmembers(module, inspect.isclass)
          if issubclass(c, errors.MinicompError) and c.__module__ == module.__name__]


def test_every_error_is_exported():
  defined = _error_classes(errors)
  assert len(defined) > 20
  for cls in defined:
    assert getattr(mc, cls.__name__, None) is cls, f"{cls.__name__} is not exported from minicomp"
    assert cls.__name__ in mc.__all__, f"{cls.__name__} is missing from minicomp.__all__"


def test_errors_are_defined_only_in_errors_py():
  strays = []
  for info in pkgutil.walk_packages(mc.__path__, "minicomp."):
    if info.name == "minicomp.errors": continue
    module = importlib.import_module(info.name)
    strays += [f"{info.name}.{c.__name__}" for c in _error_classes(module)]
  assert not strays, f"define these in minicomp/errors.py: {strays}"


def test_old_homes_still_import():
  from minicomp.codegen.driver import DriverError, NoGPUError
  from minicomp.search.records import InvalidRecord, RecordsError
  from minicomp.search.sketch import SketchError
  from minicomp.search.static.footprint.isl_build import FootprintError
  from minicomp.target import TargetError
  assert (DriverError, NoGPUError, InvalidRecord, RecordsError) == (mc.DriverError, mc.NoGPUError, mc.InvalidRecord,
                                                                    mc.RecordsError)
  assert (SketchError, TargetError) == (mc.SketchError, mc.TargetError)
  assert issubclass(FootprintError, ValueError) and issubclass(mc.DriverError, mc.RuntimeLaunchError)


def test_errors_py_imports_nothing_from_minicomp():
  """Any module may import errors.py, so it must not import back (no cycles)."""
  tree = ast.parse(open(errors.__file__).read())
  names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
  names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
  assert not [m for m in names if m.split(".")[0] == "minicomp"]
