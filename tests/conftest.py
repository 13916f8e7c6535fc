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
