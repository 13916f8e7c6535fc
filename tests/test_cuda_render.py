"""The CUDA emitter's expression table (``CODE_FOR_OP``, a fold over ir/rewrite.py) and statement table."""
import pytest

from minicomp.codegen.cuda import CODE_FOR_OP, CUDARenderer
from minicomp.errors import CodegenError
from minicomp.ir.expr import Expr, ReduceArg, call, cast, const, max_, min_, select, sigmoid, var
from minicomp.ir.loop import Buffer, For, LoopKernel, Seq, Store
from minicomp.ir.ops import Op

i, j, k = var("i"), var("j"), var("k")
x, y = var("x", "float32"), var("y", "float32")
p, q = var("p", "bool"), var("q", "bool")
A = Buffer("A", "float32", "global", const(64))
IDX = Buffer("idx", "int32", "global", const(64))
OUT = Buffer("out", "int32", "global", const(64))


def c(e: Expr, ranges: dict | None = None) -> str:
  r = CUDARenderer()
  if ranges is not None: r.ranges = ranges
  return r.expr(e)


def load(buf: Buffer, index: Expr) -> Expr: return Expr.make(Op.LOAD, buf.dtype, (index,), buf)


def kernel_src(body, index_dtype: str = "int32") -> str:
  kern = LoopKernel("k0", [IDX, A, OUT], [], [("tx", "threadIdx.x")], (1, 1, 1), (32, 1, 1), body,
                    index_dtype=index_dtype, written={"out"})
  return CUDARenderer().kernel(kern)


@pytest.mark.parametrize("e, text", [
  (const(3), "3"), (const(-3), "-3"), (const(5, "int64"), "5LL"), (const(True), "true"),
  (const(1.5), "1.5f"), (const(2.0, "float64"), "2.0"), (const(float("inf")), "__int_as_float(0x7f800000)"),
  (i, "i"), (var("threadIdx.x"), "((int)threadIdx.x)"),
  (i + j, "i + j"), (i - j, "i - j"), (i * j, "i * j"), (x / y, "x / y"),
  (i < j, "i < j"), (i <= j, "i <= j"), (i > j, "i > j"), (i >= j, "i >= j"),
  (Expr.make(Op.EQ, "bool", (i, j)), "i == j"), (Expr.make(Op.NE, "bool", (i, j)), "i != j"),
  (p & q, "p && q"), (p | q, "p || q"), (~p, "!p"), (-i, "-i"),
  (min_(i, j), "min(i, j)"), (max_(x, y), "fmaxf(x, y)"), (max_(cast(x, "float64"), 1.0), "fmax(((double)x), 1.0)"),
  (select(p, i, j), "(p ? i : j)"), (cast(i, "float32"), "((float)i)"),
  (call("exp", x), "expf(x)"), (call("pow", x, y), "powf(x, y)"), (call("abs", i), "abs(i)"),
  (call("abs", cast(x, "float64")), "fabs(((double)x))"),
  (sigmoid(x), "(1.0f / (1.0f + expf(-x)))"), (sigmoid(x + y), "(1.0f / (1.0f + expf(-(x + y))))"),
  (load(A, i * 4 + j), "A[i * 4 + j]"),
])
def test_each_op_renders_as_c(e, text):
  assert c(e) == text


def test_every_op_has_a_rule():
  assert set(CODE_FOR_OP) == set(Op)


def test_precedence():
  assert c((i + j) * k) == "(i + j) * k"
  assert c(i + j * k) == "i + j * k"
  assert c(i - (j - k)) == "i - (j - k)"
  assert c((i - j) - k) == "i - j - k"
  assert c(-(i + j)) == "-(i + j)"
  assert c(i + const(-3)) == "i + (-3)"                 # a negative literal is parenthesised as an operand
  assert c(min_(i, const(-3))) == "min(i, -3)"          # ... but not as an argument
  assert c((i < j) & (j < k)) == "i < j && j < k"
  assert c(p | (q & p)) == "p || q && p"
  assert c((p | q) & p) == "(p || q) && p"
  assert c(cast(i + j, "float32")) == "((float)(i + j))"
  assert c(select(p | q, i + j, -i)) == "(p || q ? i + j : -i)"


def test_floor_division_needs_known_ranges():
  assert c((i + j) // 4, {"i": (0, 9), "j": (0, 9)}) == "(i + j) / 4"
  assert c(i % 4, {"i": (0, 9)}) == "i % 4"
  assert c(i // 4) == "mc_floordiv(i, 4)"
  assert c((i + j) % (k + 1)) == "mc_floormod(i + j, k + 1)"


def test_ranges_reassigned_forget_the_memo():
  r = CUDARenderer()
  r.ranges = {"i": (0, 9)}
  assert r.expr(i // 4) == "i / 4"
  r.ranges = {}
  assert r.expr(i // 4) == "mc_floordiv(i, 4)"


def test_a_loop_variable_reused_with_another_extent():
  # (3 - i) // 2 is non-negative for i < 4, not for i < 8
  e = (3 - i) // 2
  src = kernel_src(Seq((For("i", const(4), Store(OUT, const(0), e)), For("i", const(8), Store(OUT, const(1), e)))))
  assert "out[0] = (3 - i) / 2;" in src and "out[1] = mc_floordiv(3 - i, 2);" in src


def test_int64_kernel_widens_int32_values_in_indices_only():
  n = load(IDX, var("tx"))
  src = kernel_src(Store(OUT, n, n + min_(n, i)), "int64")
  assert "const long long tx = threadIdx.x;" in src
  assert "out[((long long)idx[tx])] = idx[tx] + min((long long)idx[tx], i);" in src
  src = kernel_src(Store(OUT, cast(x, "int32") + 1, load(OUT, cast(x, "int32"))), "int64")
  assert "out[((long long)x) + 1] = out[((long long)x)];" in src   # a value keeps its int32 load


def test_unknown_op_or_statement_fails_naming_the_node():
  red = Expr.make(Op.REDUCE, "float32", (x,), ReduceArg("sum", ()))
  with pytest.raises(CodegenError, match=r"failed to render REDUCE node: sum\(x"):
    c(red + 1.0)
  with pytest.raises(CodegenError, match="failed to render CALL node"):
    c(Expr.make(Op.CALL, "float32", (x,), "no_such_fn"))
  with pytest.raises(CodegenError, match="failed to render statement str: oops"):
    CUDARenderer().stmt("oops", 0, [])
