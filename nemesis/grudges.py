"""Partition shapes as grudges: node → the nodes it cannot hear. Pure, so they are unit-tested.

A grudge may be asymmetric (a cannot hear b while b hears a). Every function returns a grudge
with every node as a key, an empty set for a node that hears everyone.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable

from nemesis.targets import majority_size

Grudge = dict[str, frozenset[str]]


def from_components(nodes: list[str], components: Iterable[Iterable[str]]) -> Grudge:
    """Each component hears only itself; nodes in no component hear everyone."""
    grudge = {n: frozenset[str]() for n in nodes}
    groups = [frozenset(c) for c in components]
    for group in groups:
        for n in group:
            grudge[n] = frozenset(nodes) - group
    return grudge


def isolate(nodes: list[str], group: Iterable[str]) -> Grudge:
    """`group` on one side, everyone else on the other."""
    group = frozenset(group)
    return from_components(nodes, [group, frozenset(nodes) - group])


def one(nodes: list[str], rng: random.Random) -> Grudge:
    """One random node cut off from all others."""
    return isolate(nodes, [rng.choice(nodes)])


def majority(nodes: list[str], rng: random.Random) -> Grudge:
    """A random majority and the minority left over (Jepsen's partition-majority)."""
    shuffled = rng.sample(nodes, len(nodes))
    return isolate(nodes, shuffled[: majority_size(len(nodes))])


def halves(nodes: list[str], rng: random.Random) -> Grudge:
    """Two random halves (the second one larger when the count is odd)."""
    shuffled = rng.sample(nodes, len(nodes))
    return isolate(nodes, shuffled[: len(nodes) // 2])


def bridge(nodes: list[str], rng: random.Random) -> Grudge:
    """Two halves that cannot hear each other and one node that both sides hear."""
    shuffled = rng.sample(nodes, len(nodes))
    middle, rest = shuffled[0], shuffled[1:]
    left, right = rest[: len(rest) // 2], rest[len(rest) // 2 :]
    grudge = from_components(nodes, [left, right])
    for side in (left, right):
        for n in side:
            grudge[n] -= {middle}
    return grudge


def majorities_ring(nodes: list[str], rng: random.Random) -> Grudge:
    """Every node hears a majority, and no two hear the same one.

    The nodes stand on a ring in random order; each hears the window of a majority's size
    around itself. Windows at different places of a ring longer than the window are different
    sets. With an even window the grudge is asymmetric (a node hears one more neighbour on one
    side), as a perfect symmetric ring only exists for some sizes.
    """
    ring = rng.sample(nodes, len(nodes))
    n, size = len(ring), majority_size(len(ring))
    grudge = {}
    for i, node in enumerate(ring):
        heard = {ring[(i + k) % n] for k in range(-((size - 1) // 2), size // 2 + 1)}
        grudge[node] = frozenset(nodes) - heard
    return grudge


def primaries(nodes: list[str], leader: str | None) -> Grudge:
    """The leader cut off from everyone; no grudge at all when no node is known to lead."""
    return isolate(nodes, [leader]) if leader else from_components(nodes, [])


def cut_off(nodes: list[str], node: str | None, others: list[str]) -> Grudge:
    """`node` and `others` cannot hear each other; every other pair hears as before (a peer cut
    off from its coordination service only); no grudge when `node` is unknown."""
    grudge = {n: frozenset[str]() for n in nodes}
    if node is None:
        return grudge
    away = frozenset(others) - {node}
    grudge[node] = away
    for other in away:
        grudge[other] = frozenset({node})
    return grudge


# Shapes that need only nodes and randomness, with the fewest nodes each is a partition on.
SHAPES: dict[str, tuple[Callable[[list[str], random.Random], Grudge], int]] = {
    "one": (one, 2),
    "majority": (majority, 3),
    "majorities-ring": (majorities_ring, 3),
    "halves": (halves, 2),
    "bridge": (bridge, 3),
}
MIN_NODES_PRIMARIES = 2


def as_json(grudge: Grudge) -> dict[str, list[str]]:
    return {n: sorted(heard) for n, heard in sorted(grudge.items())}
