import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture
def fake_gpu(monkeypatch):
  """A fake GPU (tests/fake_gpu.py) as the default backend: kernels run on the CPU simulator,
  every driver call is recorded in ``fake_gpu.calls``."""
  import fake_gpu as fg
  return fg.install(monkeypatch)

# The schedule cache would make a test's compile depend on what an earlier test compiled (a monkeypatched
# construction would be skipped): off for the suite, on in tests/test_schedule_cache.py (and subprocesses
# inherit this).
os.environ.setdefault("MINICOMP_SCHEDULE_CACHE", "0")
# The static facts on disk likewise (a test that clears the in-memory analyses means to analyse again): off for
# the suite, on in tests/test_estimate_cache.py's own tests of it.
os.environ.setdefault("MINICOMP_STATIC_CACHE", "0")
# One process per compile in the suite: worker pools per test would oversubscribe CI's two cores
# (tests/test_compile_jobs.py turns jobs on).
os.environ.setdefault("MINICOMP_JOBS", "1")


@pytest.fixture(scope="module")
def needs_gpu():
  """Skip the module's tests, saying why, without a CUDA GPU through the default backend (gpu-marked tests)."""
  from minicomp.codegen.driver import gpu_available, gpu_status
  if not gpu_available():
    pytest.skip(f"needs a CUDA GPU through the default backend: {gpu_status()}")


# The modules whose tests take longest (a minute or more each on 2 cores: the ONNX conformance shards, the notebooks,
# the onnx package's models, the Ray cluster, the strategies' smoke runs, the calibration's leave-one-task-out) run
# first, each in its own order: pytest-xdist hands out tests in collection order, and when they came last (most are
# late in the alphabet) one worker ran them while the other had finished (the suite's tail).
LONG_MODULES = ("test_onnx_conformance", "test_notebooks", "test_light_models", "test_cluster", "test_strategies",
                "test_calibration")


def pytest_collection_modifyitems(config, items):
  rank = {m: i for i, m in enumerate(LONG_MODULES)}
  items.sort(key=lambda it: rank.get(it.module.__name__ if it.module else "", len(rank)))
