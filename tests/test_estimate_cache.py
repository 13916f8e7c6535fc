"""The static model remembers each kernel's analysis by source, arch, launches and device."""
import logging

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


def test_facts_on_disk_are_read_back_by_another_process_s_estimate(monkeypatch, tmp_path, caplog):
  """With the disk on (MINICOMP_STATIC_CACHE, off for the rest of the suite), an analysis is written once and read
  back, the same facts, when the memory is cleared (another process); another code version's, a corrupt file (then
  written again, with a warning), or the disk turned off, are analysed again."""
  from minicomp.search.static import estimate as E
  from minicomp.search.static import ptx as P
  monkeypatch.setenv("MINICOMP_CACHE_DIR", str(tmp_path))
  monkeypatch.setenv("MINICOMP_STATIC_CACHE", "1")
  k, dev = _kernel(8), mc.Target("h100").device
  cache.clear()
  first = estimate(k, "h100")
  (f,) = (tmp_path / "static").rglob("*.json")
  cache.clear()
  analysed = []
  real = P.analyze_ptx
  monkeypatch.setattr(P, "analyze_ptx", lambda *a, **kw: analysed.append(1) or real(*a, **kw))
  again = estimate(k, "h100")
  assert again.latency_s == first.latency_s and again.launches == first.launches and analysed == []
  loaded = cache.peek(cache.key(k, dev))
  good = f.read_text()
  bad = good.replace('"blocks":', '"blocks":-', 1)                           # (a negative block count)
  for broken in ("{not json", '[{"name": "x"}]', bad):
    f.write_text(broken)
    cache.clear()
    with caplog.at_level(logging.WARNING, logger="minicomp"):
      assert estimate(k, "h100").latency_s == first.latency_s and len(analysed) == 1
    assert "do not read back" in caplog.text and f.read_text() == good       # warned, and written again
    analysed.clear(); caplog.clear()
  from minicomp import schedule_cache
  monkeypatch.setattr(schedule_cache, "code_version", lambda: "another")   # another minicomp's folder: empty
  cache.clear()
  estimate(k, "h100")
  assert len(analysed) == 1 and (tmp_path / "static" / "another").is_dir()
  monkeypatch.setenv("MINICOMP_STATIC_CACHE", "0")
  cache.clear()
  assert tuple(E.launch_facts(k, dev)) == loaded and len(analysed) == 2    # (a fresh analysis: what was read back)


def test_cache_info_and_clear_show_and_remove_the_facts(monkeypatch, tmp_path, capsys):
  from minicomp.cli import main
  monkeypatch.setenv("MINICOMP_CACHE_DIR", str(tmp_path))
  monkeypatch.setenv("MINICOMP_STATIC_CACHE", "1")
  cache.clear()
  estimate(_kernel(8), "h100"); estimate(_kernel(16), "h100")
  assert main(["cache", "info"]) == 0
  out = capsys.readouterr().out
  assert "static facts:" in out and "2 kernels" in out and "(this minicomp)" in out
  assert main(["cache", "clear"]) == 0 and "static facts: 2 file(s) removed" in capsys.readouterr().out
  assert not list((tmp_path / "static").rglob("*.json"))
