"""The static model's calibration on GPU timings: fitting, the shipped file, choosing the model, the timings
format and `minicomp calibrate` (no GPU: the timings are the project's H200 / H100 data and synthetic ones)."""
import gzip
import json
import math
from pathlib import Path

import numpy as np
import pytest

from minicomp.errors import CalibrationError, DatasetError
from minicomp.search.static import calibration as C
from minicomp.search.static import fit as F
from minicomp.search.static import timings as T
from minicomp.search.static.model import LAUNCH_OVERHEAD_S, LaunchFacts, launch_time, unit_times
from minicomp.target import get_device

DATA = Path(__file__).resolve().parent.parent / "benchmarks" / "data"
H200 = DATA / "h200-2026-11-27" / "timings.jsonl.gz"
H100 = DATA / "h100-2026-11-24" / "timings.jsonl.gz"


def _facts(**kw):
  base = dict(name="k", blocks=264, threads_per_block=256, per_thread={"fp32_fma": 400.0, "int": 50.0, "ld_shared": 80.0,
              "bar_sync": 4.0}, active_warps_per_sm=32, blocks_per_sm=4, dram_bytes=4e6, l2_bytes=8e6,
              l1_cycles_per_block=100.0, shared_wavefronts_per_block=900.0, chain_cycles=3000.0)
  return LaunchFacts(**{**base, **kw})


# ------------------------------------------------------------------------------------------------ fitting
def _synthetic(rule: C.Calibration, rng, tasks=4, programs=60) -> dict:
  """Tasks whose programs' unit times are random and whose 'GPU time' is ``rule``'s estimate (1% noise)."""
  out = {}
  used = [C.UNITS.index(u) for u in rule.weights]
  for t in range(tasks):
    times = np.zeros((programs, len(C.UNITS)))
    times[:, used] = np.exp(rng.normal(0, 0.8, (programs, len(used)))) * 10e-6
    gpu = np.array([rule.combine(list(row)) for row in times * np.array([rule.weights.get(u, 1.0) for u in C.UNITS])])
    gpu = (gpu + LAUNCH_OVERHEAD_S) * np.exp(rng.normal(0, 0.01, programs))
    out[f"t{t}"] = F.TaskData(f"t{t}", times, np.arange(programs), gpu, {"synthetic, 2026-11-29"})
  return out


def test_fit_recovers_a_known_rule():
  """Timings made by a known weighted p-norm: the fit ranks a task it never saw as the rule does and finds
  weights close to the rule's (the ridge pulls them slightly towards 1)."""
  rule = C.Calibration("sm_90", {"issue": 0.5, "fp32": 3.0, "shared": 1.5, "latency": 0.3, "dram": 1.2}, 2.0)
  tasks = _synthetic(rule, np.random.default_rng(0))
  held = tasks.pop("t3")
  cal = F.fit(tasks, "sm_90")
  q = F.rank_quality(F.predict(cal, held), held.gpu_s)
  assert q["rho"] > 0.97 and q["pick"] < 1.03, q
  for u, w in rule.weights.items():
    assert cal.weights[u] == pytest.approx(w, rel=0.25), (u, cal.weights)
  assert cal.p == pytest.approx(2.0, rel=0.3)
  uncal = F.rank_quality(F.predict(None, held), held.gpu_s)
  assert uncal["rho"] < q["rho"]                     # the maximum of unweighted times ranks them worse


def test_fit_needs_two_tasks():
  tasks = _synthetic(C.Calibration("sm_90", {"issue": 1.0}, 2.0), np.random.default_rng(1), tasks=1)
  with pytest.raises(CalibrationError, match="at least two tasks"):
    F.fit(tasks, "sm_90")


def test_rank_quality_counts_ties_against_the_estimate():
  est = np.array([1.0, 1.0, 2.0, 3.0])
  gpu = np.array([1.0, 1.5, 1.2, 2.0])
  q = F.rank_quality(est, gpu)
  assert q["pick"] == pytest.approx(1.5) and q["top10"] == 4 and -1 <= q["rho"] <= 1


def test_calibrated_launch_time_is_the_weighted_norm_of_the_unit_times():
  dev = get_device("h100")
  cal = C.Calibration("sm_90", {"fp32": 2.0, "latency": 0.5, "barrier": 3.0}, 1.7)
  f = _facts()
  times, _, _ = unit_times(f, dev)
  want = sum((cal.weights.get(k, 1.0) * v) ** 1.7 for k, v in times.items() if v > 0) ** (1 / 1.7)
  le = launch_time(f, dev, calibration=cal)
  assert le.latency_s == pytest.approx(want + LAUNCH_OVERHEAD_S, rel=1e-9)
  assert le.parts["barrier_s"] == pytest.approx(3.0 * times["barrier"]) and times["barrier"] > 0
  plain = launch_time(f, dev, calibration=None)
  assert "barrier_s" not in plain.parts
  assert plain.latency_s == pytest.approx(max(plain.sm_s, plain.memory_s) + LAUNCH_OVERHEAD_S)


# -------------------------------------------------------------------------------- the shipped calibration
def test_the_shipped_calibration_loads_with_its_provenance():
  cal = C.load(C.shipped_path("sm_90"))
  assert cal.arch == "sm_90" and 1.0 <= cal.p <= 64 and set(cal.weights) <= set(C.UNITS)
  pv = cal.provenance
  assert pv["gpus"] == ["NVIDIA H200"] and pv["programs"] > 3000 and "matmul" in pv["tasks"]
  assert set(pv["leave_one_task_out"]) >= {"conv3x3", "matmul", "depthwise"}


@pytest.mark.parametrize("text, match", [
  ("{not json", "not JSON"),
  (json.dumps({"format": "something-else", "version": 1}), "not a calibration file"),
  (json.dumps({"format": C.FORMAT, "version": 99, "arch": "sm_90", "p": 2, "weights": {"issue": 1}}), "version 99"),
  (json.dumps({"format": C.FORMAT, "version": 1, "arch": "gpu", "p": 2, "weights": {"issue": 1}}), "'arch'"),
  (json.dumps({"format": C.FORMAT, "version": 1, "arch": "sm_90", "p": 0.5, "weights": {"issue": 1}}), "'p'"),
  (json.dumps({"format": C.FORMAT, "version": 1, "arch": "sm_90", "p": 2, "weights": {"warp": 1}}), "unknown unit"),
  (json.dumps({"format": C.FORMAT, "version": 1, "arch": "sm_90", "p": 2, "weights": {"issue": -1}}), "positive"),
])
def test_a_bad_calibration_file_is_refused_by_name(tmp_path, text, match):
  p = tmp_path / "cal.json"
  p.write_text(text)
  with pytest.raises(CalibrationError, match=match) as e:
    C.load(p)
  assert str(p) in str(e.value)


def test_which_model_estimates(tmp_path, monkeypatch):
  """Default: the user's calibration, else the shipped one, else none; by name 'uncalibrated'; or a path."""
  monkeypatch.setenv("MINICOMP_CACHE_DIR", str(tmp_path))
  monkeypatch.delenv(C.MODEL_ENV, raising=False)
  h100, rtx = get_device("h100"), get_device("rtx3090")
  assert C.active(h100).source == str(C.shipped_path("sm_90"))
  assert C.active(rtx) is None and C.describe(C.active(rtx)) == "static model"
  mine = C.Calibration("sm_90", {"issue": 2.0}, 3.0)
  mine.save(C.user_path("sm_90"))
  assert C.active(h100) == mine and C.describe(C.active(h100)) == "static model calibrated on sm_90 GPU timings"
  monkeypatch.setenv(C.MODEL_ENV, "uncalibrated")
  assert C.active(h100) is None
  other = C.Calibration("sm_90", {"fp32": 5.0}, 1.5).save(tmp_path / "other.json")
  monkeypatch.setenv(C.MODEL_ENV, str(other))
  assert C.active(h100).weights == {"fp32": 5.0} and C.active(rtx) is None   # (another arch's: not applied)
  monkeypatch.setenv(C.MODEL_ENV, str(tmp_path / "missing.json"))
  with pytest.raises(CalibrationError, match="no such calibration file"):
    C.active(h100)


# ----------------------------------------------------------------------------------- the real timings
@pytest.mark.slow   # (a minute; CI runs it on a slice, below)
def test_leave_one_task_out_on_the_h200_timings_beats_the_uncalibrated_model():
  """Fitted without each task, scored on it (3,344 programs, 7 scored tasks): the favourite runs nearer the
  fastest and ranks correlate better than under the uncalibrated maximum (issue 48's table)."""
  res = F.leave_one_task_out(F.tasks_of(T.read(H200), "sm_90"), "sm_90")
  assert len(res) == 7
  gm = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))
  cal_pick = gm([v["pick"] for v in res.values()])
  uncal_pick = gm([v["uncalibrated"]["pick"] for v in res.values()])
  assert cal_pick < 1.12 and uncal_pick > 1.4, (cal_pick, uncal_pick)
  assert max(v["pick"] for v in res.values()) < 1.25
  assert np.mean([v["rho"] for v in res.values()]) > np.mean([v["uncalibrated"]["rho"] for v in res.values()]) + 0.03


def test_leave_one_task_out_on_a_slice_of_the_h200_timings_beats_the_uncalibrated_model():
  """CI's cut of the test above (7 s): the first 120 programs of each of three tasks, each task scored under a
  calibration fitted on the other two. (2026-12-01: favourite / fastest 1.16 against 1.38, Spearman 0.85 / 0.79.)"""
  keep: dict = {}
  for r in T.read(H200):
    if r.task in ("conv3x3", "matmul", "depthwise") and len(keep.setdefault(r.task, [])) < 120: keep[r.task].append(r)
  res = F.leave_one_task_out(F.tasks_of([r for rs in keep.values() for r in rs], "sm_90"), "sm_90")
  assert sorted(res) == ["conv3x3", "depthwise", "matmul"]
  gm = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))   # noqa: E731
  assert gm([v["pick"] for v in res.values()]) < gm([v["uncalibrated"]["pick"] for v in res.values()]) - 0.1
  assert np.mean([v["rho"] for v in res.values()]) > np.mean([v["uncalibrated"]["rho"] for v in res.values()]) + 0.03


def test_the_project_timings_read_in_the_dataset_format():
  for path, gpu, n in ((H200, "NVIDIA H200", 3344), (H100, "NVIDIA H100 80GB HBM3", 204)):
    rows = T.read(path)
    assert len(rows) == n and {r.gpu for r in rows} == {gpu} and all(r.facts for r in rows)
    assert all(r.median_s > 0 and r.arch == "sm_90" for r in rows)
  assert {r.task for r in T.read(H100)} == {"conv3x3", "depthwise", "matmul", "softmax", "layernorm"}


def test_a_bad_timings_line_names_its_file_and_line(tmp_path):
  good = T.read(H100)[0]
  p = tmp_path / "t.jsonl"
  T.append(p, [good, good])
  assert T.read(p) == [good, good]
  with open(p, "a") as f:
    f.write(json.dumps({**json.loads(good.to_json()), "median_s": "fast"}) + "\n")
  with pytest.raises(DatasetError, match=r"t\.jsonl:3: field 'median_s'"):
    T.read(p)
  p.write_text(json.dumps({**json.loads(good.to_json()), "v": 7}) + "\n")
  with pytest.raises(DatasetError, match="version 7"):
    T.read(p)
  z = tmp_path / "t.jsonl.gz"
  z.write_bytes(b"not gzip")
  with pytest.raises(DatasetError, match="cannot read"):
    T.read(z)


# ---------------------------------------------------------------------------------- minicomp calibrate
def _slice(tmp_path) -> Path:
  """60 programs each of three H200 tasks: enough to fit, small enough for CI."""
  rows, keep = T.read(H200), {}
  for r in rows:
    if r.task in ("conv3x3", "matmul", "depthwise") and len(keep.setdefault(r.task, [])) < 60: keep[r.task].append(r)
  p = tmp_path / "slice.jsonl.gz"
  with gzip.open(p, "wt") as f:
    for rs in keep.values():
      for r in rs: f.write(r.to_json() + "\n")
  return p


def test_cli_calibrate_makes_the_users_calibration_active_and_reset_undoes_it(tmp_path, monkeypatch, capsys):
  from minicomp.cli import main
  monkeypatch.setenv("MINICOMP_CACHE_DIR", str(tmp_path / "cache"))
  monkeypatch.delenv(C.MODEL_ENV, raising=False)
  assert main(["calibrate", "--data", str(_slice(tmp_path))]) == 0
  out = capsys.readouterr().out
  assert "leave-one-task-out" in out and "matmul" in out and "estimates for sm_90 use it now" in out
  h100 = get_device("h100")
  mine = C.active(h100)
  assert mine.source == str(C.user_path("sm_90")) and mine.provenance["programs"] == 180
  assert main(["calibrate", "--reset"]) == 0
  assert C.active(h100).source == str(C.shipped_path("sm_90"))


def test_cli_calibrate_without_timings_says_what_to_do(tmp_path, monkeypatch, capsys):
  from minicomp.cli import main
  monkeypatch.setenv("MINICOMP_CACHE_DIR", str(tmp_path))
  assert main(["calibrate"]) == 2
  assert "minicomp collect" in capsys.readouterr().err
  bad = tmp_path / "bad.jsonl"
  bad.write_text("{}\n")
  assert main(["calibrate", "--data", str(bad)]) == 2
  assert "bad.jsonl:1" in capsys.readouterr().err


def test_estimate_says_which_model_and_follows_the_switch(tmp_path, monkeypatch):
  """An sm_90 estimate is the calibrated one and says so; MINICOMP_STATIC_MODEL=uncalibrated gives the
  maximum formula's; an arch without a calibration is unchanged."""
  import minicomp as mc
  from minicomp import workloads as W
  wl = W.matmul(64, 64, 64)
  s = mc.Schedule(wl.outputs)
  C_ = wl.outputs[0]
  i, j = s.axis(C_)
  s.bind(C_, i, "blockIdx.x"); s.bind(C_, j, "threadIdx.x")
  kern = mc.build(s, "sm_90")
  monkeypatch.delenv(C.MODEL_ENV, raising=False)
  monkeypatch.setenv("MINICOMP_CACHE_DIR", str(tmp_path))     # (no user calibration)
  cal = mc.estimate(kern, "h100")
  assert "static model calibrated on NVIDIA H200 timings, no GPU measurement" in str(cal)
  monkeypatch.setenv(C.MODEL_ENV, "uncalibrated")
  plain = mc.estimate(kern, "h100")
  assert "(static model, no GPU measurement)" in str(plain) and plain.latency_s != cal.latency_s
  le = plain.launches[0]
  assert le.latency_s == pytest.approx(max(le.sm_s, le.memory_s) + LAUNCH_OVERHEAD_S)
