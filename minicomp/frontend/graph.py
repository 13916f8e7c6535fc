"""The imported model: ONNX nodes in topological order plus the values flowing between them.

Values are named like in ONNX. A value is either *constant* (an initializer, a Constant node,
or anything folded from constants and static shapes at import: ``const`` holds its array) or a
runtime tensor with a static ``shape`` and ``dtype``. A constant may be *stored* in another axis order than
ONNX's (``layout``, set by graph/layout.py): ``const`` keeps ONNX's order, the kernels read
``np.transpose(const, layout)``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class Value:
  name: str
  shape: tuple[int, ...]
  dtype: str                      # minicomp dtype name: float32, int64, int32, bool, ...
  const: np.ndarray | None = None
  layout: tuple[int, ...] | None = None   # a constant stored as np.transpose(const, layout) (graph/layout.py)

  @property
  def is_const(self) -> bool: return self.const is not None


@dataclass
class Node:
  name: str
  op_type: str
  inputs: list[str]               # "" for an omitted optional input
  outputs: list[str]
  attrs: dict[str, Any] = field(default_factory=dict)
  domain: str = ""


@dataclass
class Graph:
  """Nodes in topological order (``nodes``) and values; ``nx``: the DiGraph of their data edges."""
  nodes: list[Node]
  values: dict[str, Value]
  inputs: list[str]               # runtime inputs (not initializers), in model order
  outputs: list[str]
  opset: int
  name: str = "model"
  boundary: dict[str, str] = field(default_factory=dict)  # input/output -> its half dtype (computed in float32)
  aliases: dict[str, str] = field(default_factory=dict)   # a value a pass renamed -> the model's value it computes

  def describe(self, value: str) -> str:
    """``value`` quoted for an error message, with the model's own name where a pass renamed it (a graph output that
    precision's autocast computes as ``'y_float16'`` reads ``'y' (computed as 'y_float16')``)."""
    model = self.aliases.get(value)
    return repr(value) if model is None else f"{model!r} (computed as {value!r})"

  def producer(self, value: str) -> Node | None:
    for n in self.nodes:
      if value in n.outputs: return n
    return None

  def consumers(self, value: str) -> list[Node]:
    return [n for n in self.nodes if value in n.inputs]

  def constant(self, name: str) -> np.ndarray | None:
    """The array of constant value ``name``; None for a runtime value, an unknown or an omitted ("") one."""
    v = self.values.get(name) if name else None
    return v.const if v is not None and v.is_const else None

  def fresh_value(self, base: str) -> str:
    """``base``, or else the first of ``base_1``, ``base_2``, ... that names no value of the graph."""
    name, k = base, 1
    while name in self.values: name, k = f"{base}_{k}", k + 1
    return name

  def fresh_node(self, base: str) -> str:
    """``base``, or else the first of ``base_1``, ``base_2``, ... that names no node of the graph."""
    names = {n.name for n in self.nodes}
    name, k = base, 1
    while name in names: name, k = f"{base}_{k}", k + 1
    return name

  @property
  def nx(self):
    """The nodes' data edges as a networkx DiGraph (node name -> consumer's name, ``value`` on each edge), made
    from ``nodes`` on each call (networkx is imported here, not with minicomp: 0.4 s)."""
    import networkx as nx
    g = nx.DiGraph()
    out_of = {o: n.name for n in self.nodes for o in n.outputs}
    for n in self.nodes:
      g.add_node(n.name, node=n)
      for i in n.inputs:
        if i in out_of: g.add_edge(out_of[i], n.name, value=i)
    return g

  def op_counts(self) -> dict[str, int]:
    out: dict[str, int] = {}
    for n in self.nodes: out[n.op_type] = out.get(n.op_type, 0) + 1
    return out
