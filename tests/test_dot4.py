"""The dot4 intrinsic (ir/ops.py): four 8-bit products summed in int32, one dp4a (codegen/cuda.py). Checked against
numpy's integer arithmetic: the evaluator, the IR interpreter and kernels in the CPU simulator, whose operands are
read as one word where they are four aligned consecutive bytes and packed otherwise; NVRTC's PTX holds dp4a."""
import numpy as np
import pytest

import minicomp as mc
from minicomp.errors import ExprError
from minicomp.ir.evaluate import evaluate
from minicomp.ir.expr import var

rng = np.random.default_rng(4)


def _full(dtype, *shape):
  info = np.iinfo(dtype)
  return rng.integers(info.min, info.max + 1, shape).astype(dtype)


def test_dot4_takes_four_8_bit_values_of_one_type_per_side():
  a = [var(f"a{i}", "int8") for i in range(4)]
  b = [var(f"b{i}", "uint8") for i in range(4)]
  assert mc.dot4(a, b).dtype == "int32"
  with pytest.raises(ExprError, match="dot4 takes four int8 or four uint8"):
    mc.dot4(a[:3] + [var("x", "int32")], b)
  with pytest.raises(ExprError, match="dot4 takes four int8 or four uint8"):
    mc.dot4(a, b[:3] + [var("y", "int8")])


def test_dot4_evaluates_as_numpy_sums_the_widened_products():
  a, b = _full(np.int8, 4, 50), _full(np.uint8, 4, 50)
  e = mc.dot4([var(f"a{i}", "int8") for i in range(4)], [var(f"b{i}", "uint8") for i in range(4)])
  got = evaluate(e, {**{f"a{i}": a[i] for i in range(4)}, **{f"b{i}": b[i] for i in range(4)}})
  assert np.array_equal(got, (a.astype(np.int64) * b.astype(np.int64)).sum(axis=0))


def _matmul(a_type, b_type, M, K, N, offset=0, b_rows=False):
  """C = A[:, offset:offset + K] @ B^T by dot4 (B as [N, K], or as [K, N] read down its columns: ``b_rows``)."""
  A = mc.placeholder((M, K + offset), a_type, "A")
  B = mc.placeholder((K, N) if b_rows else (N, K), b_type, "B")
  k = mc.reduce_axis(K // 4, "k")
  bv = (lambda j, t: B[4 * k + t, j]) if b_rows else (lambda j, t: B[j, 4 * k + t])
  C = mc.compute((M, N), lambda i, j: mc.sum(mc.dot4([A[i, offset + 4 * k + t] for t in range(4)],
                                                    [bv(j, t) for t in range(4)]), axis=k), "C")
  return mc.Schedule([C])


@pytest.mark.parametrize("a_type,b_type", [(np.int8, np.int8), (np.uint8, np.int8), (np.int8, np.uint8),
                                           (np.uint8, np.uint8)])
def test_a_dot4_kernel_reads_words_and_runs_dp4a(a_type, b_type):
  M, K, N = 6, 64, 10
  kern = mc.build(_matmul(a_type.__name__, b_type.__name__, M, K, N), "sm_86")
  a, b = _full(a_type, M, K), _full(b_type, N, K)
  got = np.asarray(kern(a, b))
  assert np.array_equal(got, a.astype(np.int64) @ b.astype(np.int64).T)
  assert kern.source.count("mc_word(&") == 2 and "mc_pack4(" not in kern.source.split("__global__")[1]
  signs = "".join("s" if t == np.int8 else "u" for t in (a_type, b_type))
  assert f"mc_dp4a_{signs}(" in kern.source and "asm" not in kern.source    # (the pure form; helpers in a header)
  assert "dp4a." in kern.binary.ptx


def test_unaligned_or_strided_bytes_are_packed_and_still_right():
  """A from column 1 (no word starts there) and B read down its columns (four bytes N apart): both packed."""
  M, K, N = 5, 32, 7
  kern = mc.build(_matmul("uint8", "int8", M, K, N, offset=1, b_rows=True), "sm_86")
  a, b = _full(np.uint8, M, K + 1), _full(np.int8, K, N)
  assert np.array_equal(np.asarray(kern(a, b)), a[:, 1:].astype(np.int64) @ b.astype(np.int64))
  body = kern.source.split("__global__")[1]
  assert body.count("mc_pack4(") == 2 and "mc_word(" not in body
  assert "mc_dp4av_us(" in body and "dp4a." in kern.binary.ptx    # (the volatile form: nvrtc.DP4A_HEADER says why)


def test_the_ir_interpreter_runs_dot4_as_the_kernel_does():
  from minicomp.ir.interp import run_program
  M, K, N = 3, 16, 4
  s = _matmul("int8", "uint8", M, K, N)
  a, b = _full(np.int8, M, K), _full(np.uint8, N, K)
  got = run_program(s.lower(), a, b)
  assert np.array_equal(got, a.astype(np.int64) @ b.astype(np.int64).T)
