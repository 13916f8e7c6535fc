"""compile(jobs=N): default schedules chosen in worker processes give the very same kernels."""
import numpy as np
import pytest

import minicomp as mc
from minicomp import zoo
from onnx_harness import run_ort


@pytest.mark.parametrize("name", ["inverted_residual", "grouped_block"])
def test_one_and_two_jobs_give_byte_identical_kernels(name):
  """(grouped_block: two of its three convolutions share a walk, compiler.choose_defaults, in one worker)"""
  model, feeds = getattr(zoo, name)()
  one = mc.compile(model, target="sm_86", jobs=1)
  two = mc.compile(model, target="sm_86", jobs=2)
  assert len(one.tasks) > 1
  assert [k.source for k in one.kernels] == [k.source for k in two.kernels]
  assert two.stats.constructed == one.stats.constructed and two.stats.construct > 0
  assert two.stats.seeded == one.stats.seeded == (name == "grouped_block")
  assert two.stats.nvrtc > 0 and two.stats.build > 0        # the workers' builds are counted
  assert two.estimate().latency_s == one.estimate().latency_s
  np.testing.assert_allclose(two.run(feeds, device="cpu")[0], run_ort(model, feeds)[0], rtol=1e-4, atol=1e-4)


def test_jobs_must_be_a_positive_int(monkeypatch):
  model, _ = zoo.residual_block()
  with pytest.raises(mc.CompileError, match="jobs must be a positive int"):
    mc.compile(model, jobs=0)
  monkeypatch.setenv("MINICOMP_JOBS", "many")
  with pytest.raises(mc.CompileError, match="MINICOMP_JOBS='many'"):
    mc.compile(model)


def test_a_compile_says_one_line_by_default(capsys):
  """Python's default: one line when done (what was built, in how long); progress=False: nothing."""
  model, _ = zoo.residual_block()
  mc.compile(model, target="sm_86", jobs=1)
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and err[0].startswith("[minicomp] compiled ") and " s: " in err[0] and "kernels" in err[0]
  mc.compile(model, target="sm_86", jobs=1, progress=False)
  assert capsys.readouterr().err == ""


def test_the_pool_takes_the_longest_tasks_first():
  """Matmuls before rows and elementwise tasks, the 512-long reduction (BERT's second FFN matmul) first of all."""
  from minicomp.compiler import _expected_work
  cm = mc.compile(zoo.bert_tiny(s=32)[0], target="sm_86", schedules="rules")
  order = sorted(cm.tasks, key=_expected_work, reverse=True)
  heavy = [t for t in order if {"MatMul", "Gemm"} & set(t.ops)]
  assert order[:len(heavy)] == heavy and len(heavy) < len(order)
  assert max(int(a.extent.arg) for x in order[0].dag.tensors for a in getattr(x, "reduce_axes", ())) == 512


def test_a_pool_that_breaks_leaves_its_tasks_to_this_process(monkeypatch, caplog):
  """A worker killed mid-compile (the out-of-memory killer, say) broke the pool and the compile with a raw
  BrokenProcessPool; the tasks it left are now chosen in this process, with a warning, and the kernels are the same."""
  import concurrent.futures as cf
  import logging
  from concurrent.futures.process import BrokenProcessPool

  from minicomp.search import workers

  class Broken(cf.Executor):           # (a pool whose worker died: it fails what it was given)
    def __init__(self): self.calls = 0

    def submit(self, fn, *args, **kwargs):
      f, self.calls = cf.Future(), self.calls + 1
      f.set_exception(BrokenProcessPool("a worker died"))
      return f
  model, feeds = zoo.inverted_residual()
  one = mc.compile(model, target="sm_86", jobs=1)
  pool = Broken()
  monkeypatch.setattr(workers, "own_work_pool", lambda jobs, doing: pool)
  with caplog.at_level(logging.WARNING, logger="minicomp"):
    two = mc.compile(model, target="sm_86", jobs=2)
  assert pool.calls >= 1 and len(two.tasks) > 2
  assert "a worker process died" in caplog.text and "tasks it held were chosen in this process" in caplog.text
  assert [k.source for k in one.kernels] == [k.source for k in two.kernels]
  np.testing.assert_allclose(two.run(feeds, device="cpu")[0], run_ort(model, feeds)[0], rtol=1e-4, atol=1e-4)


def test_this_process_chooses_beside_the_workers(monkeypatch):
  """With jobs=2 the compiling process takes groups of tasks too (a worker fewer to start: ~0.5 CPU s), beside one
  worker (here an executor that records what it was given); the kernels are those of one process."""
  import concurrent.futures as cf

  from minicomp.search import workers

  class Records(cf.Executor):
    def __init__(self): self.groups = []

    def submit(self, fn, *args, **kwargs):
      self.groups.append(args[0])
      f = cf.Future()
      f.set_result(fn(*args, **kwargs))
      return f
  model, feeds = zoo.inverted_residual()
  one = mc.compile(model, target="sm_86", jobs=1)
  pool = Records()
  monkeypatch.setattr(workers, "own_work_pool", lambda jobs, doing: pool)
  two = mc.compile(model, target="sm_86", jobs=2)
  assert 1 <= len(pool.groups) < len(two.tasks)
  assert [k.source for k in one.kernels] == [k.source for k in two.kernels]
