"""Hostile inputs, round 2 (issue 51): names that are C keywords or directives, output paths, .npy
files that lie, special files, deep and wide elementwise chains. Each test failed before its fix."""
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import minicomp as mc
from minicomp.cli import main
from onnx_harness import make_model, run_ort


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
  """A saved Gemm + Relu model with input x (4, 16) float32."""
  rng = np.random.default_rng(0)
  w, b = rng.standard_normal((8, 16)).astype(np.float32), rng.standard_normal(8).astype(np.float32)
  nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["t"], transB=1), helper.make_node("Relu", ["t"], ["y"])]
  m = make_model(nodes, {"x": np.zeros((4, 16), np.float32)}, ["y"], {"w": w, "b": b})
  d = tmp_path_factory.mktemp("saved")
  return m, mc.compile(m, schedules="rules", progress=False).save(d / "gemm")


def _one_error_line(capsys, match):
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and match in err[0] and "Traceback" not in err[0], err
  return err[0]


# ---- `minicomp run` output paths: exactly the file named, or a one-line refusal before any work
@pytest.mark.parametrize("flag, name", [("--output", "y"), ("-o", "y.out"), ("-o", "y.npy")])
def test_run_writes_exactly_the_output_file_named(saved, tmp_path, flag, name):
  m, folder = saved
  x = np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32)
  np.save(tmp_path / "x.npy", x)
  assert main(["run", str(folder), "--input", f"x={tmp_path / 'x.npy'}", flag, str(tmp_path / name)]) == 0
  assert sorted(p.name for p in tmp_path.iterdir()) == sorted({"x.npy", name})   # no y.npy beside y, no temp file
  np.testing.assert_allclose(np.load(tmp_path / name), run_ort(m, {"x": x})[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("where, match", [("folder", "is a folder"), ("nowhere/y.npy", "no folder")])
def test_run_refuses_an_output_it_cannot_write_before_running(saved, tmp_path, capsys, where, match):
  (tmp_path / "folder").mkdir()
  np.save(tmp_path / "x.npy", np.zeros((4, 16), np.float32))
  assert main(["run", str(saved[1]), "--input", f"x={tmp_path / 'x.npy'}", "-o", str(tmp_path / where)]) == 2
  _one_error_line(capsys, match)


# ---- .npy inputs that lie, and special files: checked before anything is allocated or waited on
def test_npy_header_claiming_2_to_the_40_elements_is_refused_without_allocating(saved, tmp_path, capsys):
  path = tmp_path / "huge.npy"
  with open(path, "wb") as f:
    np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": (2 ** 20, 2 ** 20)})
  assert main(["run", str(saved[1]), "--input", f"x={path}"]) == 2
  _one_error_line(capsys, "expected shape [4, 16]")


def test_npy_of_the_wrong_dtype_is_a_feed_error(saved, tmp_path, capsys):
  np.save(tmp_path / "x.npy", np.zeros((4, 16), np.float64))
  assert main(["run", str(saved[1]), "--input", f"x={tmp_path / 'x.npy'}"]) == 2
  _one_error_line(capsys, "expected dtype float32")


@pytest.mark.parametrize("special", ["fifo", "/dev/zero", "folder"])
def test_special_files_as_inputs_are_refused_not_read(saved, tmp_path, capsys, special):
  if special == "fifo":
    path = tmp_path / "pipe"
    os.mkfifo(path)
  elif special == "folder":
    path = tmp_path
  else:
    path = special
  assert main(["run", str(saved[1]), "--input", f"x={path}"]) == 2
  _one_error_line(capsys, "not a regular file")
