"""Sibling matmuls merged into one (horizontal fusion): attention's Q, K and V projections as one kernel.

A transformer layer multiplies the same activations by three weight matrices, ``q = x @ Wq``, ``k = x @ Wk``,
``v = x @ Wv`` (each perhaps plus a bias), and each product only moves on, reshaped and transposed into heads, to
the attention's matmuls. Three small matmuls are three launches that each fill a third of the GPU at BERT's sizes;
``merge_sibling_matmuls(g)`` rewrites them as one::

    y = x @ concat(Wq, Wk, Wv, axis=1)  (+ concat(bq, bk, bv))
    q = Slice(y, 0, Nq, axis=-1);  k = Slice(y, Nq, Nq + Nk, axis=-1);  v = Slice(y, Nq + Nk, N, axis=-1)

and the partition (graph/partition.py) inlines each Slice, with the reshapes and transposes after it, into the
matmul reading it, as it inlined them into the projections' readers before: n siblings, n - 1 kernels fewer, no
copy. By the static model (2026-11-30, sm_86 / h100): BERT-tiny 142.0 -> 118.9 / 107.2 -> 91.2 us*, the transformer
encoder and decoder blocks -15% / -14%, the Llama block -18% / -14%.

Siblings are MatMul nodes of one runtime input and constant 2-D weights of one type and row count, each optionally
followed by an Add of a constant vector of its width as the only reader of its product (all of a set with a bias, or
all without), and Gemm nodes that compute the same (alpha = beta = 1, the input not transposed; a transposed weight
is transposed back, C is the bias: torch.onnx's ``nn.Linear`` on 2-D inputs). The rewrite is made only where it
costs no kernel: every sibling's result must only move data (injective ops and views, one reader each, and at most
one multiply by a constant scalar: partition.moves_data) into one matmul or convolution, and be no graph output; a
product read by an activation (a gated MLP's SiLU(x @ Wg) * (x @ Wu)) is left alone, its epilogue would become a
kernel of its own. The Slices are Slice-13's, of constant inputs (the import converts older models to opset 13).
Exact: each column of the merged product is computed as its own matmul computed it. Call it on the imported graph,
after fold and before precision.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from minicomp.frontend.graph import Graph, Node, Value
from minicomp.graph.partition import moves_data
from minicomp.graph.registry import lookup


def _only_moves_into_matmul(g: Graph, value: str, readers: dict[str, list[Node]]) -> bool:
  """Whether ``value`` reaches exactly one matmul / convolution through a chain of injective ops and views (and at
  most one multiply by a constant scalar: partition.moves_data), each with one reader and no graph output: what
  the partition inlines into that matmul's reads."""
  chain: list[Node] = []
  for _ in range(64):
    if value in g.outputs: return False
    rs = readers.get(value, [])
    if len(rs) != 1: return False
    d = lookup(rs[0].op_type, g.opset)
    if d is None: return False
    if d.kind == "data_reuse": return moves_data(g, chain)
    outs = [o for o in rs[0].outputs if o]
    if len(outs) != 1: return False
    chain.append(rs[0])
    if not moves_data(g, chain): return False
    value = outs[0]
  return False


@dataclasses.dataclass
class _Sibling:
  matmul: Node                # a MatMul or a Gemm
  weight: np.ndarray          # (K, N)
  add: Node | None            # the bias Add after a MatMul, if any
  bias: np.ndarray | None     # (N,): that Add's, or the Gemm's C

  @property
  def out(self) -> str:
    return (self.add or self.matmul).outputs[0]


def _sibling(g: Graph, n: Node, readers: dict[str, list[Node]]) -> _Sibling | None:
  """``n`` as a sibling: a MatMul (with the bias Add that alone reads it, if any), or a Gemm of alpha = beta = 1
  and an untransposed input (its weight transposed here when transB, its C the bias); None when it is neither."""
  if n.domain not in ("", "ai.onnx") or len(n.outputs) != 1 or n.outputs[0] in g.outputs: return None
  if n.op_type == "MatMul" and len(n.inputs) == 2:
    x, w = n.inputs
  elif n.op_type == "Gemm" and len(n.inputs) in (2, 3):
    if float(n.attrs.get("alpha", 1.0)) != 1.0 or float(n.attrs.get("beta", 1.0)) != 1.0: return None
    if int(n.attrs.get("transA", 0)): return None
    x, w = n.inputs[:2]
  else:
    return None
  wv = g.values.get(w)
  if g.constant(x) is not None or x not in g.values or wv is None or not wv.is_const or wv.layout is not None \
      or wv.const.ndim != 2 or n.outputs[0] not in g.values:   # (a value without a shape: an op refuses it later)
    return None
  weight = wv.const.T if n.op_type == "Gemm" and int(n.attrs.get("transB", 0)) else wv.const
  width = weight.shape[1]

  def vector(name: str) -> np.ndarray | None:     # a constant of the weight's type broadcast along the width
    b = g.constant(name)
    ok = b is not None and b.size == width and b.shape[-1:] == (width,) and g.values[name].dtype == wv.dtype
    return b.reshape(width) if ok and b.ndim <= len(g.values[n.outputs[0]].shape) else None
  add, bias = None, None
  if n.op_type == "Gemm":
    if len(n.inputs) == 3 and n.inputs[2]:
      bias = vector(n.inputs[2])
      if bias is None: return None
  else:
    rs = readers.get(n.outputs[0], [])
    if len(rs) == 1 and rs[0].op_type == "Add" and rs[0].domain in ("", "ai.onnx") and len(rs[0].outputs) == 1:
      other = [i for i in rs[0].inputs if i != n.outputs[0]]
      bias = vector(other[0]) if len(other) == 1 else None
      add = rs[0] if bias is not None else None
  s = _Sibling(n, weight, add, bias)
  return s if _only_moves_into_matmul(g, s.out, readers) else None


def merge_sibling_matmuls(g: Graph) -> Graph:
  """A new Graph with each set of sibling matmuls (module docstring) merged into one (``g`` is not changed)."""
  readers: dict[str, list[Node]] = {}
  for n in g.nodes:
    for i in n.inputs:
      if i: readers.setdefault(i, []).append(n)
  sets: dict[tuple, list[_Sibling]] = {}
  for n in g.nodes:
    s = _sibling(g, n, readers)
    if s is not None:
      key = (n.inputs[0], g.values[n.inputs[1]].dtype, s.weight.shape[0], s.bias is not None)
      sets.setdefault(key, []).append(s)
  sets = {k: v for k, v in sets.items() if len(v) > 1}
  if not sets: return g
  out = dataclasses.replace(g, nodes=list(g.nodes), values=dict(g.values))
  for (x, dtype, _, biased), sibs in sets.items():
    _merge(out, x, dtype, biased, sibs)
  return out


def _merge(out: Graph, x: str, dtype: str, biased: bool, sibs: list[_Sibling]) -> None:
  """Replace ``sibs`` in ``out`` (changed in place) by one MatMul (+ Add) and a Slice per sibling."""
  first = sibs[0].matmul
  widths = [s.weight.shape[1] for s in sibs]
  lead = out.values[first.outputs[0]].shape[:-1]
  shape = lead + (sum(widths),)

  def const(base: str, arr: np.ndarray, dt: str) -> str:
    name = out.fresh_value(base)
    out.values[name] = Value(name, tuple(arr.shape), dt, arr)
    return name

  def value(base: str) -> str:
    name = out.fresh_value(base)
    out.values[name] = Value(name, shape, dtype)
    return name

  base = f"{first.name}_merged"
  w = const(f"{base}_w", np.concatenate([s.weight for s in sibs], axis=1), dtype)
  product = value(f"{base}_product")
  new = [Node(out.fresh_node(base), "MatMul", [x, w], [product], domain=first.domain)]
  if biased:
    b = const(f"{base}_b", np.concatenate([s.bias for s in sibs]).astype(sibs[0].bias.dtype), dtype)
    summed = value(f"{base}_sum")
    new.append(Node(out.fresh_node(f"{base}_add"), "Add", [product, b], [summed]))
    product = summed
  axes = const(f"{base}_axes", np.array([-1], np.int64), "int64")
  start = 0
  for s, width in zip(sibs, widths):
    lo = const(f"{base}_start", np.array([start], np.int64), "int64")
    hi = const(f"{base}_end", np.array([start + width], np.int64), "int64")
    new.append(Node(out.fresh_node(f"{s.matmul.name}_slice"), "Slice", [product, lo, hi, axes], [s.out]))
    start += width
  gone = {id(s.matmul) for s in sibs} | {id(s.add) for s in sibs if s.add is not None}
  at = min(out.nodes.index(s.matmul) for s in sibs)
  out.nodes[at:at] = new
  out.nodes[:] = [n for n in out.nodes if id(n) not in gone]
  for s in sibs:
    if s.add is not None: out.values.pop(s.matmul.outputs[0], None)

