"""The shape of the tree: minicomp's import graph (every import, at any depth of the code, function-level
ones included) has no circles.

    python tests/test_layout.py        # the graph's size, its circles, and the modules most imported
"""
from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "minicomp"


def _module(path: Path) -> str:
  parts = list(path.relative_to(ROOT).with_suffix("").parts)
  return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> nx.DiGraph:
  """minicomp's modules and the imports between them (``import a.b``, ``from a import b``, relative
  imports; an import of a package counts as an import of its ``__init__``, and ``from pkg import mod``
  of the module)."""
  modules = {_module(p): p for p in PACKAGE.rglob("*.py")}
  g = nx.DiGraph()
  g.add_nodes_from(modules)
  for name, path in modules.items():
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
      targets = []
      if isinstance(node, ast.Import):
        targets = [a.name for a in node.names]
      elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
          up = pkg.split(".")[: len(pkg.split(".")) - (node.level - 1)]
          base = ".".join(up + ([base] if base else []))
        targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
      for t in targets:
        while t and t not in modules: t = t.rpartition(".")[0]
        if t and t != name: g.add_edge(name, t)
  return g


def circles(g: nx.DiGraph) -> list[list[str]]:
  """The strongly connected components of more than one module, largest first."""
  return sorted((sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1), key=len, reverse=True)


def test_the_import_graph_has_no_circles():
  found = circles(import_graph())
  assert not found, "import circles: " + "; ".join(" <-> ".join(c) for c in found)


if __name__ == "__main__":
  g = import_graph()
  print(f"{g.number_of_nodes()} modules, {g.number_of_edges()} imports")
  for c in circles(g): print(f"circle of {len(c)}: " + ", ".join(c))
  print("most imported: " + ", ".join(f"{m} {d}" for m, d in sorted(g.in_degree, key=lambda x: -x[1])[:10]))
