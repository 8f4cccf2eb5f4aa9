"""Directed graphs with typed edges: strongly connected components and shortest cycles through an edge.

The transactional checker (kafka_txn.py) looks for dependency cycles as Elle does: Tarjan's SCCs
bound where a cycle can be, then a breadth-first search inside one component finds a shortest
cycle made of the allowed edge types. Iterative throughout, so a long history cannot overflow
Python's stack.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Hashable, Iterable

Node = Hashable


class TypedGraph:
    """Edges a -> b, each with the set of dependency types that relate them (ww, wr, rw)."""

    def __init__(self) -> None:
        self.out: dict[Node, dict[Node, set[str]]] = {}

    def add(self, a: Node, b: Node, kind: str) -> None:
        if a == b:
            return
        self.out.setdefault(a, {}).setdefault(b, set()).add(kind)
        self.out.setdefault(b, {})

    def edges(self) -> Iterable[tuple[Node, Node, set[str]]]:
        for a, targets in self.out.items():
            for b, kinds in targets.items():
                yield a, b, kinds

    def successors(self, a: Node, kinds: Collection[str]) -> list[Node]:
        return [b for b, ks in self.out.get(a, {}).items() if not ks.isdisjoint(kinds)]


def strongly_connected(graph: TypedGraph, kinds: Collection[str]) -> list[list[Node]]:
    """Tarjan's components with more than one node, over edges of the given kinds."""
    index: dict[Node, int] = {}
    low: dict[Node, int] = {}
    on_stack: set[Node] = set()
    stack: list[Node] = []
    out: list[list[Node]] = []
    counter = 0
    for root in graph.out:
        if root in index:
            continue
        work: list[tuple[Node, int]] = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            succ = graph.successors(node, kinds)
            if i < len(succ):
                work.append((node, i + 1))
                nxt = succ[i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == node:
                        break
                if len(component) > 1:
                    out.append(component)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return out


def shortest_path(
    graph: TypedGraph, start: Node, goal: Node, kinds: Collection[str], within: Collection[Node]
) -> list[Node] | None:
    """A shortest path start -> ... -> goal over edges of `kinds`, inside `within`; None if there is none."""
    parent: dict[Node, Node | None] = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if node == goal:
            path = [node]
            while (prev := parent[path[-1]]) is not None:
                path.append(prev)
            return path[::-1]
        for nxt in graph.successors(node, kinds):
            if nxt in within and nxt not in parent:
                parent[nxt] = node
                queue.append(nxt)
    return None
