"""Faults and their schedules, registered in one place: package name → nemesis class.

The runner uses only `validate`, `build` and `heal_nodes`; `harness cluster down` uses
`heal_nodes` too, so faults are undone even after a crash of the harness.
"""

from __future__ import annotations

from clusters.backend import Node
from clusters.kind import ClusterKind
from harness.errors import BadInput
from harness.history import HistoryWriter
from nemesis.base import Nemesis, NoNemesis

NEMESES: dict[str, type[Nemesis]] = {n.name: n for n in (NoNemesis,)}


def validate(names: list[str], node_count: int) -> None:
    """Reject unknown packages, and faults the cluster cannot have, before anything starts."""
    for name in names:
        if name not in NEMESES:
            raise BadInput(f"unknown nemesis {name!r}: choose from {', '.join(sorted(NEMESES))}")


def build(
    names: list[str], cluster: ClusterKind, history: HistoryWriter, seed: int, interval: float
) -> Nemesis:
    """One nemesis that runs the named packages' faults on a shared schedule."""
    validate(names, cluster.node_count())
    return NEMESES[names[0]](cluster, history, seed, interval)


def heal_nodes(nodes: list[Node]) -> list[str]:
    """Undo every fault the harness can leave on these nodes; returns what was undone."""
    return []
