"""Felix's premise: the features of the symbolic program, as formulas of the sketch's variables, are the
features of the concrete program. For hundreds of random valid assignments, every (unsmoothed) formula
must evaluate *exactly* to what the concrete extractor reads off the concretely lowered program.

Concrete lowering simplifies what symbolic lowering cannot (extent-1 loops vanish, guards are hoisted
or dropped, mixed-radix thread digits fold back to ``threadIdx.x * k``); the extractor reads guards by
their meaning so both agree. The candidates carry random ``auto_unroll_max_step`` pragmas: as in
Ansor and Felix, features see the pragma only in its own column (the unrolling is a later pass), which
the symbolic program cannot hold and ``SketchFormulas`` fills from the candidate's unroll choice; the
test fills it the same way.
"""
import numpy as np
import pytest

from minicomp import workloads as W
from minicomp.search.annotate import check_values, draw_unroll, draw_values, make_candidate
from minicomp.search.features import evaluate_features, extract_features, extract_program_exprs, feature_names
from minicomp.search.sketch import generate_sketches
from minicomp.target import Target

CASES = {
  "matmul_bias_relu": (lambda: W.matmul(64, 64, 32, bias_relu=True), 80),
  "matmul_odd": (lambda: W.matmul(30, 20, 13, bias_relu=True), 40),
  "conv2d": (lambda: W.conv2d(1, 8, 8, 8, 16, 3, 1, 1), 60),
  "depthwise": (lambda: W.depthwise_conv2d(1, 16, 8, 8, 3, 1, 1), 80),
  "softmax": (lambda: W.softmax(8, 96), 60),
  "layernorm": (lambda: W.layernorm(8, 96), 60),
  # gathers: the table index reads `ids` (features read a loaded index as its position)
  "embedding": (lambda: W.embedding(14, 100, 32), 20),
  "embedding_matmul": (lambda: W.embedding(30, 50, 24, 20), 80),
}


def _valid_assignments(sk, tgt, n, rng):
  out = []
  for _ in range(50 * n):
    if len(out) == n: break
    v = draw_values(sk, rng)
    if check_values(sk, v, tgt) is not None: continue
    u = draw_unroll(sk, rng)
    cand, _ = make_candidate(sk, v, u, tgt)
    if cand is not None: out.append((v, u, cand))
  return out


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_formulas_equal_concrete_features_exactly(name):
  make, n = CASES[name]
  tgt = Target("sm_86")
  names = feature_names()
  col = names.index("auto_unroll_max_step")
  rng = np.random.default_rng(7)
  checked = 0
  for si, sk in enumerate(generate_sketches(make().outputs, tgt)):
    rows = extract_program_exprs(sk.schedule.lower())
    pairs = _valid_assignments(sk, tgt, n, rng)
    assert len(pairs) == n, f"sketch {si}: only {len(pairs)} valid assignments found"
    for values, unroll, cand in pairs:
      sym = evaluate_features(rows, values)
      sym[:, col] = np.log2(max(unroll.values(), default=0) + 1.0)     # what SketchFormulas.features writes
      conc = extract_features(cand.program)
      assert sym.shape == conc.shape, f"sketch {si} {values}: {sym.shape} rows vs {conc.shape}"
      bad = np.argwhere(sym != conc)
      assert not len(bad), f"sketch {si} {values}: " + ", ".join(
        f"row {r} {names[c]} formula {sym[r, c]!r} concrete {conc[r, c]!r}" for r, c in bad[:6])
      checked += 1
  assert checked >= n
