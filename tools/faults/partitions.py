"""The partition planner (a pure core): a partition spec over node ids -> directed drops -> nftables rules.

A partition is the set of directed `(src, dst)` pairs whose packets are dropped; every spec is
two-way except `one_way`. The rules sit in the receiver's input hook, so a packet is lost silently
as on a cut cable (a drop on the sender's output would fail its send at once, which no network does).
Node ids: 1..n for the nodes, `CLIENT` for the client namespace, so a client can be cut off too.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypeAlias

CLIENT = 0  # the client namespace's id among the node ids
TABLE = "kraftpy_faults"  # the run's one nftables table in each namespace: heal deletes exactly it

Drops: TypeAlias = frozenset[tuple[int, int]]


def split(sides: Sequence[Iterable[int]]) -> Drops:
    """Cut every link between different sides, both ways; a node on two sides hears both (a bridge)."""
    groups = [frozenset(s) for s in sides]
    drops: set[tuple[int, int]] = set()
    for i, a in enumerate(groups):
        for b in groups[i + 1 :]:
            drops.update((x, y) for x in a - b for y in b - a)
            drops.update((y, x) for x in a - b for y in b - a)
    return frozenset(drops)


def isolate(nodes: Sequence[int], node: int) -> Drops:
    """One node cut off from every other (clients included when `nodes` holds CLIENT)."""
    _known(nodes, node)
    return split([[node], [n for n in nodes if n != node]])


def majority_split(nodes: Sequence[int], minority: Iterable[int]) -> Drops:
    """Two sides, `minority` the smaller: at most half the nodes, never empty."""
    small = sorted(set(minority))
    for n in small:
        _known(nodes, n)
    if not small or 2 * len(small) >= len(nodes):
        raise ValueError(f"a minority of {list(nodes)} needs 1..{(len(nodes) - 1) // 2} nodes, got {small}")
    return split([small, [n for n in nodes if n not in small]])


def bridge(nodes: Sequence[int]) -> Drops:
    """Two halves sharing the middle node (Jepsen's bridge): it hears everyone, the halves not each other."""
    if len(nodes) < 3:
        raise ValueError(f"a bridge needs 3 nodes or more, got {list(nodes)}")
    ordered = list(nodes)
    mid = len(ordered) // 2
    return split([ordered[: mid + 1], ordered[mid:]])


def ring(nodes: Sequence[int]) -> Drops:
    """Each node hears only itself and its two neighbours in `nodes`' order (for 3 nodes: nothing is cut)."""
    ordered = list(nodes)
    count = len(ordered)
    drops = set()
    for i, a in enumerate(ordered):
        neighbours = {ordered[(i - 1) % count], ordered[(i + 1) % count], a}
        drops.update((b, a) for b in ordered if b not in neighbours)
    return frozenset(drops)


def cut_clients(nodes: Sequence[int], cut: Iterable[int]) -> Drops:
    """The clients cut from `cut` (both ways), the nodes still hearing each other and the clients the rest."""
    away = sorted(set(cut))
    for n in away:
        _known(nodes, n)
    if not away or len(away) >= len(nodes):
        raise ValueError(f"clients cut from {away}: at least one node of {list(nodes)}, and not all of them")
    return frozenset({(CLIENT, n) for n in away} | {(n, CLIENT) for n in away})


def one_way(src: int, dst: int) -> Drops:
    """Packets from src to dst are lost; dst to src still flow (so TCP cannot connect either way)."""
    if src == dst:
        raise ValueError("a node cannot be cut from itself")
    return frozenset({(src, dst)})


def heal() -> Drops:
    return frozenset()


def hears(drops: Drops, nodes: Sequence[int], node: int) -> frozenset[int]:
    """The nodes whose packets reach `node` (itself included)."""
    return frozenset(n for n in nodes if (n, node) not in drops)


def nft_scripts(drops: Drops, addresses: dict[int, str]) -> dict[int, str]:
    """For each node, the nft script that makes its namespace drop what `drops` says it must not receive.

    Each script replaces the run's table atomically (add, delete, add again: nft accepts that in one
    transaction even when the table is absent), so applying a new partition never leaves a moment with
    the old and new rules mixed, and an empty partition leaves no table at all."""
    scripts = {}
    for node in addresses:
        sources = sorted(addresses[src] for src, dst in drops if dst == node)
        lines = [f"table inet {TABLE}", f"delete table inet {TABLE}"]
        if sources:
            lines += [
                f"table inet {TABLE} {{",
                "  chain input {",
                "    type filter hook input priority 0; policy accept;",
                f"    ip saddr {{ {', '.join(sources)} }} drop",
                "  }",
                "}",
            ]
        scripts[node] = "\n".join(lines) + "\n"
    return scripts


def _known(nodes: Sequence[int], node: int) -> None:
    if node not in nodes:
        raise ValueError(f"node {node} is not one of {list(nodes)}")
