"""The one way minicomp walks an expression: rule tables keyed by ``Op``, applied bottom-up, memoised.

Every pass over the expression IR is one of two walks over its DAG, children before parents (left to
right), each distinct node once (nodes are interned, so a dict keyed by node is an exact memo); by
recursion while the expression is shallow, iteratively past depth 128 (feature formulas nest thousands
deep):

``rewrite(e, rules, ctx)``: Expr -> Expr.
    Each node is rebuilt on its rewritten children, then the rules for its ``Op`` are tried in order;
    the first that returns an Expr replaces the node (``None``: no match). With ``fixpoint=True`` a
    replacement is rewritten again, children and all, until no rule fires. Substitution, load mapping
    and the simplifier are rewrites::

        rewrite((i + 0) * j, SUBSTITUTE, {"j": const(4)})     # -> (i + 0) * 4

``fold(e, table, ctx)``: Expr -> any value.
    ``table[op](ctx, node, values_of_children)`` computes a node's value from its children's: a string
    (the printers), a number or an array (the evaluators), or a new Expr built from the children's new
    Exprs (Felix's smoother, where a rule must see the *original* node as well as its rewritten
    children).

A :class:`Rules` table is built from named groups and composes with ``+`` (the simplifier is
``FOLD + LINEAR + DIVMOD + BOUNDS + LOGIC``); a rule may be restricted to a shape of node with
``when=`` (a predicate on the node), so the rule body holds only the rewrite::

    LOGIC = Rules("logic")

    @LOGIC.rule(Op.NOT, when=lambda n: n.src[0].op is Op.NOT)
    def _not_not(n, ctx): return n.src[0].src[0]             # not not x -> x

``ctx`` is whatever the pass needs (variable ranges and the bounds known under them, a mapping, a
smoother's settings); the engine only passes it on.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

from minicomp.errors import ExprError
from minicomp.ir.ops import Op


class Expr(Protocol):
  """What the engine needs of a node (``minicomp.ir.expr.Expr`` is the one it rewrites): an op, its
  children, and a copy with other children. Nothing here builds nodes, so the engine sits below the
  expression language and its printers."""
  op: Op
  src: tuple

  def replace(self, **changes) -> "Expr": ...


Rule = Callable[[Expr, Any], "Expr | None"]
FoldRule = Callable[[Any, Expr, tuple], Any]


def value_rule(f: Callable, infix: str | None = None) -> FoldRule:
  """The fold rule ``f(*child values)`` (no ctx, no node), marked so that :func:`compile_fold` calls ``f`` itself, or
  writes ``a <infix> b`` where ``infix`` says ``f`` is that operator."""
  def rule(ctx, n, k): return f(*k)
  rule.of_values, rule.infix = f, infix
  return rule


def node_rule(f: Callable[[Expr], Any]) -> FoldRule:
  """The fold rule ``f(node)`` of a leaf whose value is the node's own (a constant): :func:`compile_fold` computes it
  once."""
  def rule(ctx, n, k): return f(n)
  rule.of_node = f
  return rule


def variable_rule(f: FoldRule) -> FoldRule:
  """``f``, the fold rule of a variable that returns ``ctx[name]`` (or raises where ctx has none), marked so that
  :func:`compile_fold` reads ``ctx`` in place (calling ``f`` only for a name ctx lacks)."""
  f.variable = True
  return f


class Rules:
  """An ordered table of rewrite rules keyed by ``Op`` (a rule added for no op applies to every op, in the
  order it was added). ``rules(node, ctx)`` returns the first rule's replacement, or None."""

  def __init__(self, name: str, groups: Iterable[str] = ()):
    self.name = name
    self.groups = tuple(groups) or (name,)
    self._rules: list[tuple[frozenset[Op] | None, Rule]] = []
    self._table: dict[Op, tuple[Rule, ...]] = {op: () for op in Op}

  def add(self, fn: Rule, *ops: Op, when: Callable[[Expr], bool] | None = None) -> Rule:
    """Append rule ``fn(node, ctx) -> Expr | None`` for ``ops`` (none: every op), guarded by ``when(node)``."""
    r = fn if when is None else (lambda n, ctx: fn(n, ctx) if when(n) else None)
    self._rules.append((frozenset(ops) or None, r))
    self._table = {op: tuple(f for on, f in self._rules if on is None or op in on) for op in Op}
    return fn

  def rule(self, *ops: Op, when: Callable[[Expr], bool] | None = None) -> Callable[[Rule], Rule]:
    """Decorator form of :meth:`add`."""
    return lambda fn: self.add(fn, *ops, when=when)

  def __call__(self, n: Expr, ctx: Any = None) -> Expr | None:
    for fn in self._table[n.op]:
      r = fn(n, ctx)
      if r is not None: return r
    return None

  def __add__(self, other: "Rules") -> "Rules":
    out = Rules(f"{self.name}+{other.name}", self.groups + other.groups)
    out._rules = self._rules + other._rules
    out._table = {op: self._table[op] + other._table[op] for op in Op}
    return out

  def __repr__(self) -> str: return f"Rules({' + '.join(self.groups)})"


def _children_first(e: Expr, memo: dict, enter: Callable[[Expr], bool] | None = None):
  """The nodes of ``e`` not in ``memo``, each once, every node after its children (iterative: formulas nest
  thousands deep); below a node for which ``enter`` is false, nothing. The caller puts each node into
  ``memo`` as it receives it."""
  stack = [e]
  while stack:
    n = stack[-1]
    if n in memo:
      stack.pop(); continue
    todo = [s for s in n.src if s not in memo] if enter is None or enter(n) else ()
    if todo:
      stack.extend(reversed(todo)); continue
    stack.pop()
    yield n


def children_first(roots: Iterable[Expr]) -> list[Expr]:
  """The distinct nodes under ``roots``, each once and after all of its children (the roots in order)."""
  order: list[Expr] = []
  seen: set[Expr] = set()
  for r in roots:
    for n in _children_first(r, seen):
      seen.add(n)
      order.append(n)
  return order


# Both walks recurse (fast) down to _DEEP levels; a deeper expression makes them start over iteratively,
# keeping what the memo holds. The switch happens before a node's rule runs, so no rule runs twice.
_DEEP = 128
_MISSING = object()


class _TooDeep(Exception):
  pass


def rewrite(e: Expr, rules: Rules, ctx: Any = None, memo: dict | None = None, fixpoint: bool = False,
            enter: Callable[[Expr], bool] | None = None) -> Expr:
  """``e`` with ``rules`` applied to every node, children first (module docstring). ``memo`` (node -> result)
  may be shared between calls with the same rules and ctx. Without ``fixpoint`` a rule's result is
  taken as final: the rule returns a normal form (the simplifier's rules do). A node for which ``enter``
  is false keeps its children as they are (the rules still see it)."""
  memo = {} if memo is None else memo
  table = rules._table

  def node(n: Expr) -> Expr:
    r = n.replace(src=tuple([memo[s] for s in n.src])) if n.src and (enter is None or enter(n)) else n
    for fn in table[r.op]:
      out = fn(r, ctx)
      if out is not None:
        if out is not r: r = rewrite(out, rules, ctx, memo, True, enter) if fixpoint else out
        break
    memo[n] = r
    return r

  def rec(n: Expr, depth: int) -> Expr:
    if depth > _DEEP: raise _TooDeep
    if n.src and (enter is None or enter(n)):
      for s in n.src:
        if s not in memo: rec(s, depth + 1)
    return node(n)

  r = memo.get(e, _MISSING)
  if r is not _MISSING: return r
  try:
    return rec(e, 0)
  except _TooDeep:
    for n in _children_first(e, memo, enter): node(n)
    return memo[e]


def fold(e: Expr, table: dict[Op, FoldRule], ctx: Any = None, memo: dict | None = None, what: str = "fold",
         enter: Callable[[Expr], bool] | None = None) -> Any:
  """The value of ``e`` under ``table``: ``table[op](ctx, node, child_values)``, children first, each
  distinct node once (``memo``: node -> value, shareable between calls with the same table and ctx).
  Below a node for which ``enter`` is false nothing is visited; its rule gets no child values."""
  memo = {} if memo is None else memo

  def node(n: Expr, kids: tuple) -> Any:
    fn = table.get(n.op)
    if fn is None: raise ExprError(f"{what}: no rule for {n.op.name} (in {str(n)[:200]})")
    v = memo[n] = fn(ctx, n, kids)
    return v

  def rec(n: Expr, depth: int) -> Any:
    if depth > _DEEP: raise _TooDeep
    if not n.src or (enter is not None and not enter(n)): return node(n, ())
    kids = []
    for s in n.src:
      v = memo.get(s, _MISSING)
      kids.append(rec(s, depth + 1) if v is _MISSING else v)
    return node(n, tuple(kids))

  v = memo.get(e, _MISSING)
  if v is not _MISSING: return v
  try:
    return rec(e, 0)
  except _TooDeep:
    for n in _children_first(e, memo, enter):
      node(n, tuple([memo[s] for s in n.src]) if enter is None or enter(n) else ())
    return memo[e]


def compile_fold(roots: list[Expr], table: dict[Op, FoldRule], what: str = "fold") -> Callable[[Any], list]:
  """``fold`` of every one of ``roots`` as one straight-line Python function of ``ctx`` (``fn(ctx)`` -> the
  roots' values, in order): each distinct node is one line, children first. For formulas evaluated again and
  again on new values (the analytic model's, at every point of a walk), it skips what ``fold`` does per node
  and call (recursion, memo lookups); the rules and their inputs are the same, so the values are too. A rule
  made by :func:`value_rule` is called on the children's values directly (or written as its operator), one by
  :func:`node_rule` is computed here once, one by :func:`variable_rule` reads ``ctx``; any other rule is called
  as ``fold`` calls it."""
  order = children_first(roots)
  slot = {n: k for k, n in enumerate(order)}
  scope: dict[str, Any] = {"N": order}
  lines, names = [], {}
  for k, n in enumerate(order):
    fn = table.get(n.op)
    if fn is None: raise ExprError(f"{what}: no rule for {n.op.name} (in {str(n)[:200]})")
    kids = [f"v{slot[s]}" for s in n.src]
    if getattr(fn, "infix", None) and len(kids) == 2: rhs = f"({kids[0]} {fn.infix} {kids[1]})"
    elif hasattr(fn, "of_values"): scope[f"F{k}"], rhs = fn.of_values, f"F{k}({', '.join(kids)})"
    elif hasattr(fn, "of_node"): scope[f"C{k}"], rhs = fn.of_node(n), f"C{k}"
    elif hasattr(fn, "variable"): names[n.arg], rhs = fn, f"ctx[{n.arg!r}]"
    else: scope[f"R{k}"], rhs = fn, f"R{k}(ctx, N[{k}], ({''.join(x + ', ' for x in kids)}))"
    lines.append(f"  v{k} = {rhs}")
  head = ["def _run(ctx):"] + [f"  if {name!r} not in ctx: V[{name!r}](ctx, VN[{name!r}], ())" for name in names]
  scope["V"], scope["VN"] = names, {n.arg: n for n in order if n.op is Op.VAR}   # (its rule raises its error)
  lines = head + lines + [f"  return [{', '.join(f'v{slot[r]}' for r in roots)}]"]
  exec(compile("\n".join(lines), f"<compiled {what}>", "exec"), scope)   # noqa: S102 -- code built here from a DAG
  return scope["_run"]


# ---------------------------------------------------------------------------------------------
# the two rewrites every module needs: variables by name, loads by a function

SUBSTITUTE = Rules("substitute")
SUBSTITUTE.add(lambda n, mapping: mapping.get(n.arg), Op.VAR)

MAP_LOADS = Rules("map_loads")
MAP_LOADS.add(lambda n, fn: fn(n), Op.LOAD)


def substitute(e: Expr, mapping: dict[str, Expr]) -> Expr:
  """Replace variables by name (``mapping`` values are Exprs); rebuilds only what changes."""
  return rewrite(e, SUBSTITUTE, mapping) if mapping else e


def map_loads(e: Expr, fn: Callable[[Expr], Expr]) -> Expr:
  """Rebuild ``e`` with every LOAD node ``n`` replaced by ``fn(n)`` (its indices rewritten first)."""
  return rewrite(e, MAP_LOADS, fn)
