"""Saved models: the round trip still runs, every break in tamper.py is refused by name, save is atomic."""
import os
import re
import shutil

import numpy as np
import pytest
from onnx import helper

import minicomp as mc
from minicomp import saved_model
from minicomp.errors import SaveFormatError
from onnx_harness import make_model, run_ort
from tamper import CASES, read_manifest, write_manifest

rng = np.random.default_rng(0)


def _onnx():
  """MatMul+Add+Relu (two weights), a Reshape view, Sigmoid (grid x = 2); outputs z and the view y."""
  nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["t"]),
           helper.make_node("Relu", ["t"], ["r"]), helper.make_node("Reshape", ["r", "s"], ["y"]),
           helper.make_node("Sigmoid", ["y"], ["z"])]
  return make_model(nodes, {"x": np.zeros((16, 32), np.float32)}, ["z", "y"],
                    {"w": rng.standard_normal((32, 24)).astype(np.float32), "b": rng.standard_normal(24).astype(np.float32),
                     "s": np.array([8, 48], np.int64)})


@pytest.fixture(scope="module")
def onnx_model(): return _onnx()


@pytest.fixture(scope="module")
def model(onnx_model): return mc.compile(onnx_model, target="sm_80")


@pytest.fixture(scope="module")
def saved(model, tmp_path_factory):
  return model.save(tmp_path_factory.mktemp("saved") / "m")


@pytest.fixture
def folder(saved, tmp_path):
  """A fresh copy of the saved model, to tamper with."""
  return shutil.copytree(saved, tmp_path / "m", symlinks=True)


@pytest.fixture(scope="module")
def saved_conv(tmp_path_factory):
  """Another shape of model for tamper.py: one kernel (Conv+Relu), no view, one output."""
  nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])]
  m = make_model(nodes, {"x": np.zeros((1, 4, 8, 8), np.float32)}, ["y"],
                 {"w": rng.standard_normal((8, 4, 3, 3)).astype(np.float32), "b": rng.standard_normal(8).astype(np.float32)})
  return mc.compile(m, target="sm_80").save(tmp_path_factory.mktemp("saved") / "conv")


def _files(p):
  return {f.relative_to(p): f.read_bytes() for f in sorted(p.rglob("*")) if f.is_file()}


def test_round_trip_runs_and_matches(model, onnx_model, folder):
  x = rng.standard_normal((16, 32)).astype(np.float32)
  loaded = mc.load(folder)
  want, got = model.run({"x": x}, device="cpu"), loaded.run({"x": x}, device="cpu")
  for a, b in zip(want, got): np.testing.assert_array_equal(a, b)
  np.testing.assert_allclose(got[0], run_ort(onnx_model, {"x": x})[0], rtol=1e-5, atol=1e-6)
  assert [k.source for k in loaded.kernels] == [k.source for k in model.kernels]
  m = read_manifest(folder)
  assert m["format_version"] == saved_model.FORMAT_VERSION == 3
  assert m["digest"] == saved_model.manifest_digest(m) and len(m["files"]) == 4 * len(model.kernels) + 1
  assert m["outputs"] == [{"name": n, "shape": [8, 48], "dtype": "float32"} for n in ("z", "y")]


def test_saved_model_estimates_as_compiled(model, folder):
  """The static model's analyses travel with the model: a loaded model estimates what the compiled one did,
  for the target's device only, and a version-2 folder (none saved) says to recompile."""
  from minicomp.errors import EstimateError
  loaded = mc.load(folder)
  assert loaded.kernels[0].program is None
  want = model.estimate()
  got = loaded.estimate()
  assert got.latency_s == want.latency_s > 0
  assert [e.latency_s for _, e in got.calls] == [e.latency_s for _, e in want.calls]
  with pytest.raises(EstimateError, match=r"keeps the analyses for a100 only: .*compile the model again to estimate on h100"):
    loaded.estimate("h100")
  m = read_manifest(folder)
  m["format_version"] = 2
  for kd in m["kernels"]: kd.pop("facts")
  write_manifest(folder, m)
  with pytest.raises(EstimateError, match="keeps no analyses .*compile the model again and save it"):
    mc.load(folder).estimate()


def test_enough_tamper_cases():
  names = [n for n, _ in CASES]
  assert len(names) == len(set(names)) >= 25


@pytest.mark.parametrize("tamper", [fn for _, fn in CASES], ids=[n for n, _ in CASES])
def test_tampered_folder_is_refused(tamper, folder):
  pattern = tamper(folder)
  assert pattern is not None, "every case applies to this model"
  with pytest.raises(SaveFormatError) as e:
    mc.load(folder)
  assert re.search(pattern, str(e.value)), f"{e.value}\n  does not match {pattern!r}"


def test_tamper_cases_fit_another_model(saved_conv, tmp_path):
  """tamper.py is reused by benchmarks/fuzz.py on other models: each case applies or says it does not."""
  skipped = []
  for name, tamper in CASES:
    d = shutil.copytree(saved_conv, tmp_path / name, symlinks=True)
    pattern = tamper(d)
    if pattern is None:
      skipped.append(name)
      mc.load(d)
      continue
    with pytest.raises(SaveFormatError) as e:
      mc.load(d)
    assert re.search(pattern, str(e.value)), f"{name}: {e.value}\n  does not match {pattern!r}"
  assert skipped == ["view_count_changed"]


def test_a_recomputed_digest_is_not_a_defence(folder):
  """What the digest does not do: an edit with the digests recomputed loads (load only trusted models)."""
  m = read_manifest(folder)
  m["kernels"][1]["plan"]["launches"][0]["grid"][0] = 1
  m["kernels"][1]["facts"]["launches"][0]["blocks"] = 1      # (the static facts edited to agree)
  write_manifest(folder, m)
  assert mc.load(folder).kernels[1].plan.launches[0].grid == (1, 1, 1)


def test_save_over_a_saved_model(model, tmp_path):
  p = model.save(tmp_path / "m")
  (p / "stale.txt").write_text("from the old save")
  assert model.save(p) == p
  assert not (p / "stale.txt").exists() and os.listdir(tmp_path) == ["m"]
  mc.load(p)
  empty = tmp_path / "empty"
  empty.mkdir()
  mc.load(model.save(empty))


def test_failed_save_leaves_the_old_model_intact(model, tmp_path, monkeypatch):
  p = model.save(tmp_path / "m")
  before = _files(p)

  def disk_full(*a, **k): raise OSError("disk full")
  monkeypatch.setattr(np, "savez", disk_full)          # fails halfway: the kernels are written, the weights not
  with pytest.raises(mc.SaveError, match="disk full"):
    model.save(p)
  monkeypatch.undo()
  assert _files(p) == before and os.listdir(tmp_path) == ["m"]
  rename, calls = os.rename, []

  def fail_second(a, b):                                # the new folder's rename into place fails
    calls.append(b)
    if len(calls) == 2: raise OSError("rename failed")
    return rename(a, b)
  monkeypatch.setattr(saved_model.os, "rename", fail_second)
  with pytest.raises(mc.SaveError, match="rename failed"):
    model.save(p)
  monkeypatch.undo()
  assert len(calls) == 3 and _files(p) == before and os.listdir(tmp_path) == ["m"]
  mc.load(p)


def test_save_refuses_to_replace_user_files(model, tmp_path):
  user = tmp_path / "notes"
  user.mkdir()
  (user / "todo.txt").write_text("mine")
  with pytest.raises(SaveFormatError, match="notes: a non-empty folder that is not a saved minicomp model"):
    model.save(user)
  assert (user / "todo.txt").read_text() == "mine" and os.listdir(user) == ["todo.txt"]
  (tmp_path / "file").write_text("mine")
  with pytest.raises(SaveFormatError, match="file: exists and is not a folder"):
    model.save(tmp_path / "file")
  assert sorted(os.listdir(tmp_path)) == ["file", "notes"]
