"""The process-wide caches stay bounded: NVRTC binaries in memory (LRU) and the loaded simulator
builds (LRU; an evicted library is unloaded only once no SimModule uses it). And JAX's compiled
functions persist across processes in minicomp's cache folder."""
from __future__ import annotations

import gc
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from minicomp.codegen import nvrtc, simulator
from minicomp.codegen.nvrtc import compile_cuda
from minicomp.codegen.simulator import build_simulator
from minicomp.lru import LRU


# ---- NVRTC binaries in memory ------------------------------------------------------------

def _kernel(n: int, tag: str) -> str:
  return f'extern "C" __global__ void k(float* x) {{ x[0] = {n}; }}  // {tag} {os.getpid()}'


@pytest.fixture
def nvrtc_memory(monkeypatch, tmp_path):
  """An empty memory cache over a cold disk cache; emptied again afterwards."""
  monkeypatch.setenv("MINICOMP_CACHE_DIR", str(tmp_path))
  monkeypatch.delenv("MINICOMP_NVRTC_MEMORY_CACHE", raising=False)
  nvrtc.clear_memory_cache()
  yield
  nvrtc.clear_memory_cache()


def test_nvrtc_memory_cache_keeps_the_most_recently_used(nvrtc_memory, monkeypatch):
  monkeypatch.setenv("MINICOMP_NVRTC_MEMORY_CACHE", "3")
  first = {}
  for n in range(3):
    first[n] = compile_cuda(_kernel(n, "lru"), "sm_80")
  assert compile_cuda(_kernel(0, "lru"), "sm_80") is first[0]    # a hit: the same object, now the newest
  for n in (3, 4):                                                 # evict 1, then 2 (0 was used since)
    first[n] = compile_cuda(_kernel(n, "lru"), "sm_80")
    assert len(nvrtc._memory) == 3
  assert compile_cuda(_kernel(0, "lru"), "sm_80") is first[0]
  assert compile_cuda(_kernel(4, "lru"), "sm_80") is first[4]
  again = compile_cuda(_kernel(1, "lru"), "sm_80")                 # evicted: read back from disk
  assert again is not first[1] and again.ptx == first[1].ptx and again.resources == first[1].resources
  assert len(nvrtc._memory) == 3
  assert compile_cuda(_kernel(3, "lru"), "sm_80") is not first[3]  # evicted by the re-read of 1


def test_nvrtc_memory_cache_bound_comes_from_the_constant_and_0_disables_it(nvrtc_memory, monkeypatch):
  monkeypatch.setattr(nvrtc, "MEMORY_CACHE_SIZE", 2)
  for n in range(4):
    compile_cuda(_kernel(n, "const"), "sm_80")
    assert len(nvrtc._memory) == min(n + 1, 2)
  monkeypatch.setenv("MINICOMP_NVRTC_MEMORY_CACHE", "0")
  a, b = compile_cuda(_kernel(9, "off"), "sm_80"), compile_cuda(_kernel(9, "off"), "sm_80")
  assert a is not b and a.ptx == b.ptx
  assert len(nvrtc._memory) == 0                                   # a lowered bound also trims
  nvrtc.clear_memory_cache()                                       # still works on the LRU
  assert len(nvrtc._memory) == 0


def test_nvrtc_memory_cache_under_threads(nvrtc_memory, monkeypatch):
  """Threads compiling one new source share one object; many sources never overflow the bound."""
  monkeypatch.setenv("MINICOMP_NVRTC_CACHE", "0")
  monkeypatch.setenv("MINICOMP_NVRTC_MEMORY_CACHE", "2")
  with ThreadPoolExecutor(8) as pool:
    same = list(pool.map(lambda _: compile_cuda(_kernel(5, "threads"), "sm_80"), range(8)))
    assert all(b is same[0] for b in same)
    many = list(pool.map(lambda n: compile_cuda(_kernel(n, "many"), "sm_80"), range(6)))
  assert [f"{n};" in b.source for n, b in enumerate(many)] == [True] * 6
  assert len(nvrtc._memory) == 2


# ---- loaded simulator builds -------------------------------------------------------------

SCALE = """\
extern "C" __global__ void scale(const float* __restrict__ x, float* __restrict__ y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * %d.0f;
}
"""


def _build(c: int) -> simulator.SimModule:
  return build_simulator(SCALE % c, {"scale": ["const float*", "float*", "int"]})


def _run(mod: simulator.SimModule, c: int) -> None:
  x = np.random.default_rng(c).standard_normal(100).astype(np.float32)
  y = np.zeros_like(x)
  mod.launch("scale", (1, 1, 1), (128, 1, 1), [x, y, len(x)])
  np.testing.assert_array_equal(y, x * np.float32(c))


def _mapped(path: Path) -> bool:
  return str(path) in Path("/proc/self/maps").read_text()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_simulator_library_cache_is_bounded_and_unloads_unused_builds(monkeypatch, tmp_path):
  monkeypatch.setenv("MINICOMP_CACHE_DIR", str(tmp_path))
  monkeypatch.setattr(simulator, "LIBRARY_CACHE_SIZE", 2)
  monkeypatch.setattr(simulator, "_LIBS", LRU(lambda: simulator.LIBRARY_CACHE_SIZE, simulator._unload))
  m1, m2, m3 = _build(1), _build(2), _build(3)
  assert list(simulator._LIBS) == [str(m2.path), str(m3.path)]    # 1, the least recently used, left
  _run(m1, 1)                                                      # evicted, but m1 keeps it loaded
  assert _mapped(m1.path)

  again = _build(1)                                                # loads it again (and evicts 2)
  assert list(simulator._LIBS) == [str(m3.path), str(m1.path)]
  _run(again, 1)
  p1, p2 = m1.path, m2.path
  del m1, m2
  gc.collect()
  assert not _mapped(p2)                                           # unused and evicted: dlclose'd
  assert _mapped(p1)                                               # m1's dlclose left the reload's open
  _run(again, 1)
  _run(m3, 3)
  assert len(simulator._LIBS) == 2


# ---- JAX's persistent compilation cache ---------------------------------------------------

_FIT = """
import os, jax, numpy as np
hits = []
jax.monitoring.register_event_listener(lambda e, **kw: hits.append(e) if e.endswith("cache_hits") else None)
from minicomp.search.cost_model import MLPCostModel
from minicomp.search.features import N_FEATURES
rng = np.random.default_rng(0)
feats = [rng.standard_normal((3, N_FEATURES)).astype(np.float32) for _ in range(24)]
m = MLPCostModel(N_FEATURES, loss="rank", seed=0)
m.fit(feats, list(rng.uniform(1, 2, 24)), ["t"] * 24)
print(jax.config.jax_compilation_cache_dir, len(hits), float(np.sum(m.predict(feats))))
"""


def _fit_in_fresh_process(env: dict) -> tuple[str, int, float]:
  import subprocess
  code = "import minicomp\n" + _FIT
  r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr[-3000:]
  d, hits, total = r.stdout.split()[-3:]
  return d, int(hits), float(total)


def test_jax_compiled_functions_persist_across_processes(tmp_path):
  env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "MINICOMP_JAX"))}
  env["MINICOMP_CACHE_DIR"] = str(tmp_path)
  d1, hits1, total1 = _fit_in_fresh_process(env)
  assert Path(d1).parent == tmp_path / "jax" and hits1 == 0 and any(Path(d1).iterdir())
  d2, hits2, total2 = _fit_in_fresh_process(env)
  assert d2 == d1 and hits2 > 0
  assert total2 == total1                       # the cached functions compute what fresh ones did
  user = tmp_path / "mine"                      # the user's own setting wins
  d3, _, _ = _fit_in_fresh_process({**env, "JAX_COMPILATION_CACHE_DIR": str(user)})
  assert d3 == str(user)
  d4, hits4, _ = _fit_in_fresh_process({**env, "MINICOMP_JAX_CACHE": "0"})
  assert d4 == "None" and hits4 == 0


# ---- the one LRU ---------------------------------------------------------------------------
def test_lru_keeps_the_most_recently_used_and_shares_the_first_value_stored():
  evicted = []
  size = [3]
  c = LRU(lambda: size[0], lambda k, v: evicted.append(k))
  for k in "abc": c.put(k, k.upper())
  assert c.get("a") == "A"                     # a is now the most recent
  c.put("d", "D")
  assert list(c) == ["c", "a", "d"] and evicted == ["b"]
  assert c.put("a", "other") == "A"            # a racing second value is not stored: the first is shared (and used)
  size[0] = 1
  c.put("e", "E")                              # a lowered limit trims on the next insertion
  assert list(c) == ["e"] and evicted == ["b", "c", "d", "a"]
  size[0] = 0
  assert c.put("f", "F") == "F" and len(c) == 0 and c.get("f") is None
