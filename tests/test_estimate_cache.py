"""The static model remembers each kernel's analysis by source, arch, launches and device."""
import minicomp as mc
from minicomp import workloads as W
from minicomp.search.static import cache
from minicomp.search.static.estimate import estimate
from test_workloads import mm_tiled_shared


def _kernel(tile: int):
  return mc.build(mm_tiled_shared(W.matmul(64, 64, 32), tile=tile, thread=2, kt=4), target="sm_90")


def test_a_kernel_is_analysed_once_per_device():
  cache.clear()
  k = _kernel(8)
  first = estimate(k, "h100")
  assert cache.stats == {"hits": 0, "misses": 1}
  again = estimate(_kernel(8), "h100")                  # rebuilt: same source, same facts
  assert cache.stats == {"hits": 1, "misses": 1}
  assert again.latency_s == first.latency_s and again.launches == first.launches
  other = estimate(k, "a100")                             # another device: analysed again
  assert cache.stats["misses"] == 2 and other.device != first.device
  estimate(_kernel(16), "h100")                           # another schedule: another source
  assert cache.stats["misses"] == 3


def test_cached_facts_match_a_fresh_analysis():
  k = _kernel(16)
  cached = estimate(k, "h100")
  cache.clear()
  fresh = estimate(k, "h100")
  assert fresh.latency_s == cached.latency_s and fresh.launches == cached.launches


def test_the_cache_is_bounded(monkeypatch):
  cache.clear()
  monkeypatch.setattr(cache, "CACHE_SIZE", 2)
  for t in (4, 8, 16): estimate(_kernel(t), "h100")
  assert len(cache._facts) == 2
  estimate(_kernel(4), "h100")                            # the oldest was dropped
  assert cache.stats["misses"] == 4


def test_analyse_fills_the_cache_in_workers_with_the_facts_of_this_process():
  """A whole model's estimate and save analyse their kernels over the cores first (estimate.analyse): the facts
  the workers send back equal this process's own, and estimate() then reads them from the cache."""
  from minicomp.search.static.estimate import analyse, launch_facts
  ks = [_kernel(t) for t in (4, 8, 16)]
  dev = mc.Target("h100").device
  cache.clear()
  analyse(ks, dev, jobs=2)
  assert all(cache.peek(cache.key(k, dev)) is not None for k in ks)
  sent = [tuple(cache.peek(cache.key(k, dev))) for k in ks]
  cache.clear()
  assert sent == [tuple(launch_facts(k, dev)) for k in ks]
  cache.clear()
  analyse(ks[:1], dev, jobs=2)                            # one kernel: analysed where it is asked for, not here
  assert cache.peek(cache.key(ks[0], dev)) is None
