"""research/opevo_neighbourhood.py on a hand-made memo: a program, three of its one-step neighbours
and the runs that measured them; the tables must say where each sits."""
import json
import sys
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parent.parent / d) for d in ("research", "benchmarks")]


def _row(lines: list[str], prefix: str) -> list[str]:
  (line,) = [ln for ln in lines if ln.startswith(prefix)]
  return [c.strip() for c in line.strip("|").split("|")]


def _world(tmp_path):
  """A valid depthwise point p0, three valid neighbours of it (costs 1, 3, 4 us; p0 2 us) in a memo, an
  OpEvo run that measured 4, 3, 2 (ends on p0) and an Ansor run that measured the 1 us neighbour."""
  import opevo_neighbourhood as B
  from minicomp.search.annotate import make_candidate
  pl = B.Placed("depthwise", {})
  rng = np.random.default_rng(3)
  sk = pl.task.sketches

  def prog(p):
    c, _ = make_candidate(sk[p.sketch_index], p.values, p.unroll, pl.task.target, p.sketch_index)
    return None if c is None else c.key

  while True:
    p0 = pl.space.random(rng)
    if prog(p0) is None: continue
    nbrs = [(q, prog(q)) for q in pl.space.neighbours(p0)]
    nbrs = [(q, k) for q, k in nbrs if k is not None]
    if len(nbrs) >= 3: break
  progs = [prog(p0)] + [k for _, k in nbrs[:3]]
  costs = [2e-6, 1e-6, 3e-6, 4e-6]
  memo = tmp_path / "memo.jsonl"
  memo.write_text("".join(json.dumps({"task": "depthwise", "steps": k, "cost": c}) + "\n" for k, c in zip(progs, costs)))
  runs = tmp_path / "runs"
  runs.mkdir()
  for strat, cs in (("opevo", [4e-6, 3e-6, 2e-6]), ("ansor", [1e-6])):
    (runs / f"h100_r16_depthwise_{strat}_s0_b8.json").write_text(json.dumps(
      {"task": "depthwise", "strategy": strat, "seed": 0, "budget": 8, "costs": cs,
       "stats": {"mutations": 2, "remutations": 2, "steps": 6} if strat == "opevo" else {}}))
  return B, p0, nbrs, memo, tmp_path


def test_finals_and_locality_on_a_hand_made_memo(tmp_path):
  B, p0, nbrs, memo, out = _world(tmp_path)
  lines = B.report(memo, out, ["depthwise"], ["opevo", "ansor"], 8)
  row = _row(lines, "| depthwise | opevo | 0 |")
  # final 2 us over the best 1 us; one program at that cost; the best is one walk step away
  assert row[3] == "2.00 (2.00x)" and row[4] == "1" and row[5] == "1 / 1"
  n, valid, measured, better = map(int, row[6:10])
  assert n == len(B.Placed("depthwise", {}).space.neighbours(p0)) and valid >= 3
  assert measured == 3 and better == 1
  row = _row(lines, "| depthwise | ansor | 0 |")
  assert row[3] == "1.00 (1.00x)" and row[5] == "0 / 0"
  # locality, each program against the ones before it (round of 1): the run's last program, p0, is one
  # parameter from either neighbour before it
  pl = B.Placed("depthwise", B.load_memo(memo, "depthwise"))
  by = B.S.select_runs(B.S.load_runs(out, "h100", 16), 8)
  loc = [c.strip() for c in B.locality_row(pl, by, "depthwise", 8, "opevo", 1).strip("|").split("|")]
  assert loc[3] == "2" and loc[4] == "0"                       # programs placed (after the first), not placed
  q3, q2 = nbrs[2][0], nbrs[1][0]                               # the run's first two (4 us, 3 us)
  first = 1 if pl.apart(q2, q3)[0] == 1 else 2
  shares = [float(x) for x in loc[5:9]]
  assert shares[0] == (1.0 if first == 1 else 0.5) and abs(sum(shares) - 1) < 1e-9
  assert loc[9] == "1.5"                                        # walk steps per walk: 6 / (2 + 2)
  # parents after 2, 4, 8 measurements: {4, 3 us} then {4, 3, 2 us}; p0 is one parameter from either
  par = [c.strip() for c in B.parents_row(pl, by, "depthwise", 8, "opevo").strip("|").split("|")]
  assert par[3:5] == [f"{first:.1f}", "1.33"] and par[7:9] == ["1.0", "2.00"]


def test_a_tie_gives_no_neighbourhood(tmp_path):
  B, p0, nbrs, memo, out = _world(tmp_path)
  text = memo.read_text().replace('"cost": 3e-06', '"cost": 2e-06')   # a neighbour ties with p0
  memo.write_text(text)
  row = _row(B.report(memo, out, ["depthwise"], ["opevo"], 8), "| depthwise | opevo | 0 |")
  assert row[4] == "2" and row[6] == "a tie"


def test_landscape_on_a_hand_made_memo(tmp_path):
  """Random sampling's share near the best, the fitness-distance correlation and the neighbours'
  correlation, recomputed here from the hand-made memo's four programs."""
  B, p0, nbrs, memo, out = _world(tmp_path)
  (out / "runs" / "h100_r16_depthwise_random_s0_b4.json").write_text(json.dumps(
    {"task": "depthwise", "strategy": "random", "seed": 0, "budget": 4, "costs": [1.4e-6, 2.5e-6, 9e-6, None]}))
  (out / "runs" / "h100_r16_depthwise_random_s0_b2.json").write_text(json.dumps(   # shorter: not counted
    {"task": "depthwise", "strategy": "random", "seed": 0, "budget": 2, "costs": [1.4e-6, 2.5e-6]}))
  lines = B.report(memo, out, ["depthwise"], ["opevo", "ansor", "random"], 8)
  row = _row(lines, "| depthwise | 3 |")
  # the best is the 1 us neighbour (Ansor's); random's 1.4, 2.5 and 9 us: 1 within 1.5x and 2x, 2 within 3 and 5x
  assert row[2:6] == ["33.33%", "33.33%", "66.67%", "66.67%"]
  pl = B.Placed("depthwise", B.load_memo(memo, "depthwise"))
  pts = [p0] + [q for q, _ in nbrs[:3]]
  costs = [2e-6, 1e-6, 3e-6, 4e-6]
  dist = [pl.apart(p, pts[1])[1] for p in pts]
  assert dist[0] == 1 and dist[1] == 0
  assert row[6] == "4" and float(row[7]) == round(float(np.corrcoef(dist, np.log(costs))[0, 1]), 2)
  pairs = [(i, j) for i in range(4) for j in range(i + 1, 4) if pl.apart(pts[i], pts[j])[1] == 1]
  assert int(row[8]) == len(pairs) >= 3
  x = [np.log(costs[i]) for i, j in pairs] + [np.log(costs[j]) for i, j in pairs]
  y = [np.log(costs[j]) for i, j in pairs] + [np.log(costs[i]) for i, j in pairs]
  assert float(row[9]) == round(float(np.corrcoef(x, y)[0, 1]), 2)
  assert row[10] == "2.00x (1)"                                  # OpEvo ended on p0, 2 us over the best's 1


def test_a_final_the_memo_lacks_is_said_so(tmp_path):
  B, p0, nbrs, memo, out = _world(tmp_path)
  (out / "runs" / "h100_r16_depthwise_random_s0_b8.json").write_text(json.dumps(
    {"task": "depthwise", "strategy": "random", "seed": 0, "budget": 8, "costs": [7e-6, 5e-6]}))
  row = _row(B.report(memo, out, ["depthwise"], ["random"], 8), "| depthwise | random | 0 |")
  assert row[3] == "5.00 (5.00x)" and row[4] == "not in the memo"
