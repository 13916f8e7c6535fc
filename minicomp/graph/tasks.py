"""Tasks: a fused subgraph's compute DAG with a stable workload key.

The workload key hashes the DAG's structure — every stage's expression with tensors and axes
renamed canonically, shapes and dtypes — and not the names ONNX gave them or the weights'
values, so two convolutions of the same shape in different places of a model are one task,
tuned once (its ``weight`` counts the occurrences).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from minicomp.ir.dag import ComputeDAG, classify
from minicomp.ir.expr import Expr, var
from minicomp.ir.rewrite import map_loads, substitute
from minicomp.ir.ops import Op
from minicomp.ir.printer import expr_str


def dag_text(dag: ComputeDAG) -> str:
  """A canonical, name-independent text of a ComputeDAG (what the workload key hashes)."""
  names = {t.name: f"T{k}" for k, t in enumerate(dag.tensors)}
  lines = []
  for t in dag.tensors:
    if t.is_placeholder:
      lines.append(f"{names[t.name]} = input{list(t.shape)}:{t.dtype}")
      continue
    ren = {a.name: var(f"i{d}") for d, a in enumerate(t.axes)}
    ren.update({a.name: var(f"r{d}") for d, a in enumerate(t.reduce_axes)})
    body = substitute(t.body.src[0] if t.reduce else t.body, ren)
    text = _canon(body, names)
    if t.reduce:
      r = t.reduce
      ext = [int(a.extent.arg) for a in r.axes]
      init = "" if r.init is None else f" init {_canon(r.init, names)}"
      text = f"{r.combiner}[{ext}]({text}){init}"
    lines.append(f"{names[t.name]}{list(t.shape)}:{t.dtype} = {text}")
  lines.append("outputs " + " ".join(names[t.name] for t in dag.outputs))
  return "\n".join(lines)


class _Named:
  """A stand-in tensor with only a name: what a LOAD of the canonical text reads."""
  def __init__(self, name: str): self.name = name


def _canon(e: Expr, names: dict[str, str]) -> str:
  """``e``'s text with every tensor read by its canonical name."""
  return expr_str(map_loads(e, lambda n: Expr.make(Op.LOAD, n.dtype, n.src, _Named(names[n.arg.name]))))


def workload_key(dag: ComputeDAG) -> str:
  return hashlib.sha256(dag_text(dag).encode()).hexdigest()[:16]


@dataclass
class Task:
  """One kernel's worth of work: a fused subgraph's ComputeDAG, deduplicated by workload key."""
  key: str
  dag: ComputeDAG
  kind: str                         # classify() of the anchor stage
  weight: int = 1                   # occurrences in the model
  ops: list[str] = field(default_factory=list)   # ONNX op types fused in (first occurrence)
  flops: int = 0

  @property
  def label(self) -> str:
    """A name a person can read: the fused ops and the output's shape (``Conv+Relu 1x64x56x56``)."""
    return f"{'+'.join(dict.fromkeys(self.ops)) or self.kind} {'x'.join(map(str, self.dag.outputs[0].shape))}"

  def __repr__(self) -> str:
    return f"Task({self.key}, {self.kind}, weight={self.weight}, ops={'+'.join(self.ops)})"


def task_kind(dag: ComputeDAG) -> str:
  kinds = [classify(t) for t in dag.tensors if not t.is_placeholder]
  for k in ("data_reuse", "reduction", "injective", "elementwise"):
    if k in kinds: return k
  return "elementwise"
