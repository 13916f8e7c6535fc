"""Tuning records: JSON-lines round trip, torn-tail tolerance, queries for resuming and picking the best."""
import json
import logging
import signal
import subprocess
import sys
import textwrap

import pytest

import minicomp as mc
from minicomp import workloads as W
from minicomp.errors import MinicompError
from minicomp.graph.tasks import workload_key
from minicomp.search.measure import ErrorKind, MeasureResult
from minicomp.search.records import (
  FORMAT,
  Record,
  RecordLog,
  RecordsError,
  best_records,
  canonical_steps,
  curve,
  load_records,
  measured_keys,
)


def _schedule(block: int = 128) -> tuple[str, str]:
  """A real matmul schedule (fuse, split, bind) and the task's workload key."""
  wl = W.matmul(64, 64, 64)
  s = mc.Schedule(wl.outputs)
  f = s.fuse("C", *s.axis("C"))
  bo, t = s.split("C", f, block)
  s.bind("C", bo, "blockIdx.x"); s.bind("C", t, "threadIdx.x")
  return workload_key(mc.ComputeDAG(wl.outputs)), s.to_json()


def _rec(cost, key="k1", target="sm_86", steps='[{"step": "fuse", "stage": "C", "iters": ["i", "j"]}]', t=0.0, **kw) -> Record:
  err = kw.pop("error", "ok" if cost is not None else "compile error")
  return Record(key, target, steps, cost, err, timestamp=t, **kw)


def test_round_trip_including_failures(tmp_path):
  key, steps = _schedule()
  ok = Record.from_measure(key, "sm_86", steps, MeasureResult(2.5e-5, is_estimate=False, parts={"x": 1}), "evo", 3)
  bad = Record.from_measure(key, "sm_86", steps, MeasureResult(None, ErrorKind.COMPILE, "nvrtc: bad \"x\"\nline 2"))
  with RecordLog(tmp_path / "log.jsonl") as log:
    assert log.append([ok, bad]) == 2
  got = load_records(tmp_path / "log.jsonl")
  assert got == [ok, bad]
  assert got[0].ok and got[0].cost_s == 2.5e-5 and not got[0].is_estimate and got[0].strategy == "evo" and got[0].trial == 3
  assert not got[1].ok and got[1].cost_s is None and got[1].error == "compile error" and got[1].message.endswith("line 2")
  assert got[0].version == mc.__version__ and got[0].timestamp > 0


def test_line_embeds_steps_as_json_and_steps_json_is_byte_identical(tmp_path):
  key, steps = _schedule()
  with RecordLog(tmp_path / "log.jsonl") as log: log.append(_rec(1e-5, key, steps=steps))
  lines = (tmp_path / "log.jsonl").read_text().splitlines()
  assert len(lines) == 1
  d = json.loads(lines[0])
  assert d["v"] == FORMAT and isinstance(d["steps"], list) and d["steps"][0]["step"] == "fuse"
  back = load_records(tmp_path / "log.jsonl")[0].steps_json
  assert back == steps                                   # byte for byte, as Schedule.to_json() writes it
  wl = W.matmul(64, 64, 64)
  assert mc.Schedule.from_json(wl.outputs, back).to_json() == steps


def test_steps_json_is_normalised_and_validated():
  _, steps = _schedule()
  compact = json.dumps(json.loads(steps))
  assert compact != steps and _rec(1.0, steps=compact).steps_json == steps
  with pytest.raises(RecordsError, match="not JSON"): _rec(1.0, steps="[{")
  with pytest.raises(RecordsError, match="finite"): _rec(float("nan"))
  with pytest.raises(RecordsError, match="needs a cost"): _rec(None, error="ok")
  assert issubclass(RecordsError, MinicompError)


def test_truncated_last_line_is_skipped_with_warning(tmp_path, caplog):
  p = tmp_path / "log.jsonl"
  with RecordLog(p) as log: log.append([_rec(1.0), _rec(2.0)])
  with open(p, "a") as f: f.write(_rec(3.0).to_line()[:40])        # a kill mid-write
  with caplog.at_level(logging.WARNING, logger="minicomp"):
    got = load_records(p)
  assert [r.cost_s for r in got] == [1.0, 2.0]
  assert any("truncated last line" in m and ":3" in m for m in caplog.messages)


def test_malformed_lines_are_skipped_with_their_line_numbers(tmp_path, caplog):
  """One damaged line costs that line only: bad JSON mid-file, wrong field types, unknown or incomplete steps,
  a missing field, a cost that is not a positive finite number (it would beat every real one)."""
  p = tmp_path / "log.jsonl"
  d = _rec(1.0).to_dict()
  bad = ["{not json", {**d, "cost_s": "0.1"}, {**d, "workload_key": 5}, {**d, "trial": "3"}, {**d, "is_estimate": "no"},
         {**d, "steps": [{"step": "teleport", "stage": "C"}]}, {**d, "steps": [{"step": "split", "stage": "C"}]},
         {**d, "steps": "[]"}, {k: v for k, v in d.items() if k != "target"}, {**d, "cost_s": 0.0}, {**d, "cost_s": -1.0},
         {**d, "cost_s": 1e400}, [1, 2]]
  lines = [json.dumps(_rec(float(n)).to_dict()) for n in (1, 2)] + [b if isinstance(b, str) else json.dumps(b) for b in bad]
  lines.append(_rec(3.0).to_line())
  p.write_text("\n".join(lines) + "\n")
  with caplog.at_level(logging.WARNING, logger="minicomp"):
    got = load_records(p)
  assert [r.cost_s for r in got] == [1.0, 2.0, 3.0]
  assert [r.where for r in got] == [f"{p}:1", f"{p}:2", f"{p}:{len(lines)}"]
  warned = "\n".join(caplog.messages)
  for n in range(3, 3 + min(len(bad), 10)): assert f"log.jsonl:{n}: skipping an invalid record" in warned, n
  assert f"skipped {len(bad)} invalid records in all" in warned             # the rest counted, not listed
  for why in ("malformed line", "positive finite", "'workload_key' must be a str",
              "'trial' must be an int", "unknown step", "lacks field(s) target"):
    assert why in warned, why


def test_non_positive_or_non_finite_costs_are_refused():
  for cost in (0.0, -1.0, 0, float("inf"), float("nan"), True):
    with pytest.raises(RecordsError, match="positive finite"): _rec(cost)
  assert _rec(None).cost_s is None and _rec(2).cost_s == 2.0


def test_future_version_raises_and_missing_fields_skip(tmp_path, caplog):
  p = tmp_path / "log.jsonl"
  d = _rec(1.0).to_dict()
  p.write_text(_rec(2.0).to_line() + "\n" + json.dumps({**d, "v": FORMAT + 1}) + "\n")
  with pytest.raises(RecordsError, match=f"log.jsonl:2: format version {FORMAT + 1}.*version {FORMAT}"): load_records(p)
  p.write_text(json.dumps({k: v for k, v in d.items() if k != "target"}) + "\n")
  with caplog.at_level(logging.WARNING, logger="minicomp"):
    assert load_records(p) == []
  assert any(":1: skipping an invalid record: record lacks field(s) target" in m for m in caplog.messages)


def test_missing_file(tmp_path):
  assert load_records(tmp_path / "nope.jsonl") == []
  with pytest.raises(RecordsError, match="no such tuning log"): load_records(tmp_path / "nope.jsonl", missing_ok=False)


def test_filters_and_best_per_task():
  recs = [_rec(3.0, "a", t=0), _rec(None, "a", t=1), _rec(1.0, "a", t=2, strategy="first"), _rec(1.0, "a", t=3, strategy="tie"),
          _rec(0.5, "a", "sm_80", t=4), _rec(9.0, "b", t=5), _rec(None, "c", t=6), _rec(0.1, "a", t=7, is_estimate=False)]
  est = best_records(recs, is_estimate=True)
  assert set(est) == {("a", "sm_86"), ("a", "sm_80"), ("b", "sm_86")}       # c never succeeded
  assert est[("a", "sm_86")].cost_s == 1.0 and est[("a", "sm_86")].strategy == "first"   # tie -> earliest
  assert best_records(recs, is_estimate=False)[("a", "sm_86")].cost_s == 0.1
  # a GPU timing and an estimate never meet in one comparison
  with pytest.raises(RecordsError, match="task a on sm_86 has both static-model estimates and GPU timings"):
    best_records(recs)
  assert best_records(recs[:7])[("a", "sm_80")].cost_s == 0.5


def test_load_filters(tmp_path):
  p = tmp_path / "log.jsonl"
  with RecordLog(p) as log: log.append([_rec(1.0, "a"), _rec(2.0, "b"), _rec(3.0, "a", "sm_80")])
  assert [r.cost_s for r in load_records(p, workload_key="a")] == [1.0, 3.0]
  assert [r.cost_s for r in load_records(p, workload_key="a", target="sm_86")] == [1.0]
  assert [r.cost_s for r in load_records(p, target="sm_80")] == [3.0]


def test_measured_keys_dedupes_and_matches_candidates():
  key, steps = _schedule(128)
  _, other = _schedule(64)
  compact = json.dumps(json.loads(steps))
  recs = [_rec(1.0, key, steps=steps), _rec(None, key, steps=compact), _rec(2.0, key, steps=other), _rec(1.0, key, "sm_80", steps=steps)]
  seen = measured_keys(recs)
  assert len(seen) == 3
  assert (key, "sm_86", canonical_steps(steps)) in seen and (key, "sm_86", canonical_steps(compact)) in seen
  _, fresh = _schedule(32)
  assert (key, "sm_86", canonical_steps(fresh)) not in seen


def test_curve_tracks_best_so_far():
  recs = [_rec(None, "a", t=10), _rec(3.0, "a", t=11), _rec(5.0, "b", t=12), _rec(4.0, "a", t=13), _rec(2.0, "a", t=15)]
  c = curve(recs)
  assert c[("a", "sm_86")] == [(0, 0.0, None), (1, 1.0, 3.0), (2, 3.0, 3.0), (3, 5.0, 2.0)]
  assert c[("b", "sm_86")] == [(0, 2.0, 5.0)]
  assert curve([]) == {}


def test_two_logs_in_sequence_keep_both(tmp_path):
  p = tmp_path / "sub" / "log.jsonl"
  with RecordLog(p) as log: log.append([_rec(1.0), _rec(2.0)])
  with RecordLog(p) as log: log.append(_rec(3.0))
  log2 = RecordLog(p)                     # usable without a with-block too
  log2.append([]); log2.append([_rec(4.0)]); log2.close()
  assert [r.cost_s for r in load_records(p)] == [1.0, 2.0, 3.0, 4.0]


def test_append_rejects_non_records_and_writes_nothing(tmp_path):
  p = tmp_path / "log.jsonl"
  with RecordLog(p) as log, pytest.raises(RecordsError): log.append([_rec(1.0), {"cost_s": 1}])
  assert load_records(p) == []


def test_resume_after_torn_tail_cuts_it_and_appends_cleanly(tmp_path, caplog):
  p = tmp_path / "log.jsonl"
  with RecordLog(p) as log: log.append(_rec(1.0))
  with open(p, "a") as f: f.write(_rec(2.0).to_line()[:25])
  with caplog.at_level(logging.WARNING, logger="minicomp"), RecordLog(p) as log: log.append(_rec(3.0))
  assert any("log.jsonl:2: dropping a torn or invalid last line" in m for m in caplog.messages)
  assert [r.cost_s for r in load_records(p)] == [1.0, 3.0]          # without the repair, line 2 would be corrupt


def test_unterminated_complete_last_line_is_kept(tmp_path):
  p = tmp_path / "log.jsonl"
  p.write_text(_rec(1.0).to_line())                                   # e.g. hand-edited, no final newline
  with RecordLog(p) as log: log.append(_rec(2.0))
  assert [r.cost_s for r in load_records(p)] == [1.0, 2.0]


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_killed_writer_leaves_a_loadable_log(tmp_path):
  p = tmp_path / "log.jsonl"
  code = textwrap.dedent(f"""
    import os, signal, sys
    from minicomp.search.records import Record, RecordLog
    log = RecordLog({str(p)!r})
    for i in range(5): log.append(Record("k", "sm_86", "[]", float(i + 1)))
    os.write(log._f.fileno(), Record("k", "sm_86", "[]", 99.0).to_line()[:33].encode())   # the line in flight
    os.kill(os.getpid(), signal.SIGKILL)
  """)
  proc = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, timeout=120)
  assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
  assert not p.read_text().endswith("\n")
  assert [r.cost_s for r in load_records(p)] == [1.0, 2.0, 3.0, 4.0, 5.0]


@pytest.mark.parametrize("garbage", ["garbage", '{"v": 1, "workload_key": "k1"}', "[1, 2]"])
def test_resume_cuts_a_complete_but_invalid_last_line(tmp_path, caplog, garbage):
  """A complete last line that is no record (garbage, or a record without its fields) is cut before appending:
  left in place it would end up mid-file once the resume appends after it."""
  p = tmp_path / "log.jsonl"
  with RecordLog(p) as log: log.append(_rec(1.0))
  with open(p, "a") as f: f.write(garbage + "\n")
  with caplog.at_level(logging.WARNING, logger="minicomp"), RecordLog(p) as log: log.append(_rec(3.0))
  assert any("log.jsonl:2: dropping a torn or invalid last line" in m for m in caplog.messages)
  caplog.clear()
  with caplog.at_level(logging.WARNING, logger="minicomp"):
    assert [r.cost_s for r in load_records(p)] == [1.0, 3.0]
  assert not caplog.messages and len(p.read_text().splitlines()) == 2


def test_resume_keeps_a_valid_last_line_and_one_of_a_newer_version(tmp_path):
  p = tmp_path / "log.jsonl"
  newer = json.dumps({**_rec(2.0).to_dict(), "v": FORMAT + 1})
  p.write_text(_rec(1.0).to_line() + "\n" + newer + "\n")
  with RecordLog(p) as log: log.append(_rec(3.0))
  assert p.read_text().splitlines()[1] == newer                       # not ours to drop: load_records names it


def test_replay_error_checks_steps_against_the_dag():
  from minicomp.search.records import replay_error
  key, steps = _schedule()
  dag = mc.ComputeDAG(W.matmul(64, 64, 64).outputs)
  assert replay_error(steps, dag, mc.Target("sm_86")) is None
  assert "no loop" in replay_error('[{"step": "split", "stage": "C", "iter": "zz", "factors": [2]}]', dag, mc.Target("sm_86"))
  assert "unknown step" in replay_error('[{"step": "teleport"}]', dag, mc.Target("sm_86"))
  assert replay_error('[{"step": "split", "stage": "C"}]', dag, mc.Target("sm_86"))     # KeyError inside: a reason
  _, big = _schedule(2048)                                                          # 2048 threads per block
  assert "threads" in replay_error(big, dag, mc.Target("sm_86"))
