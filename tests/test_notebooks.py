"""The walkthrough notebooks (examples/notebooks/) run top to bottom on a machine without a GPU.

Each notebook is executed from scratch in a fresh kernel (nbclient); any error in any cell fails the
test, and the notebooks' own cells assert what their text claims (a kernel matches numpy, a tuned
estimate beats the default...). The stored notebooks keep their outputs, so they read on a web page
without running, but stay small (the repository stays light)."""
from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "examples" / "notebooks").glob("*.ipynb"))
MAX_STORED_BYTES = 300_000          # outputs kept, plots at low resolution


def test_there_are_notebooks():
  assert NOTEBOOKS, "examples/notebooks/ holds no notebook"


SLOW = {"03_ansor_sketches_and_evolution"}    # (over a minute on 2 cores: run with -m slow)


@pytest.mark.parametrize("path", [pytest.param(p, marks=pytest.mark.slow) if p.stem in SLOW else p for p in NOTEBOOKS],
                         ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_top_to_bottom(path, tmp_path, monkeypatch):
  from nbclient import NotebookClient
  monkeypatch.setenv("MPLBACKEND", "Agg")
  nb = nbformat.read(path, as_version=4)
  NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
  errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.get("output_type") == "error"]
  assert not errors, errors


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_stored_notebook_is_executed_and_small(path):
  nb = nbformat.read(path, as_version=4)
  code = [c for c in nb.cells if c.cell_type == "code"]
  assert code and all(c.get("execution_count") for c in code), f"{path.name}: store it executed (outputs kept)"
  counts = [c["execution_count"] for c in code]
  assert counts == list(range(1, len(code) + 1)), f"{path.name}: cells were run out of order: {counts}"
  assert path.stat().st_size <= MAX_STORED_BYTES, f"{path.name}: {path.stat().st_size} bytes stored"
