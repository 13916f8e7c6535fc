"""A small memo in the format of ``benchmarks/strategies.py``'s (one JSON line per measured program),
holding seeded random depthwise programs: the input of the benchmarks that read that memo."""
import json
from pathlib import Path

import numpy as np


def seeded_programs(dag, draws: int, keep: int, seed: int) -> list[str]:
  """The first ``keep`` distinct programs (steps JSON) of ``draws`` seeded samples of ``dag``'s first
  sketch (h100)."""
  from minicomp.search.annotate import sample
  from minicomp.search.sketch import generate_sketches
  from minicomp.target import as_target
  tgt = as_target("h100")
  sketch = generate_sketches(dag, tgt)[0]
  rng = np.random.default_rng(seed)
  return list(dict.fromkeys(sample(sketch, rng, tgt).key for _ in range(draws)))[:keep]


def write_depthwise_memo(path: Path, draws: int, keep: int, seed: int, cost=lambda i: (i + 1) * 1e-6) -> Path:
  """``keep`` distinct programs of ``draws`` seeded samples of the benchmark's depthwise task's first
  sketch (h100), the ``i``-th with full cost ``cost(i)`` seconds, written to ``path``."""
  import strategies as S
  keys = seeded_programs(S.task_dag("depthwise"), draws, keep, seed)
  path.write_text("".join(json.dumps({"task": "depthwise", "steps": k, "cost": cost(i)}) + "\n"
                          for i, k in enumerate(keys)))
  return path
