"""Which nodes a fault hits, as in Jepsen: one, minority, majority, all, or primaries; and on a
kind with a coordination service (ZooKeeper), `coordinators`, every node that serves it.

Random choices are made when the schedule is planned, from the seeded RNG, so a seed fixes them;
`primaries` and `coordinators` are resolved when the fault starts, from the cluster kind (who
leads is known only then).
"""

from __future__ import annotations

import random

from clusters.kinds.base import ClusterKind

TARGETS = ("one", "minority", "majority", "all", "primaries")  # what a random target is among
PRIMARIES = "primaries"
COORDINATORS = "coordinators"  # named by a package only: few kinds have them


def majority_size(n: int) -> int:
    return n // 2 + 1


def pick(spec: str, nodes: list[str], rng: random.Random) -> list[str] | None:
    """The nodes `spec` names among `nodes`, in node order; None for `primaries` and
    `coordinators` (known later).

    `minority` is the largest strict minority but at least one node, so it exists on any cluster.
    """
    if spec in (PRIMARIES, COORDINATORS):
        return None
    size = {
        "one": 1,
        "minority": max(1, (len(nodes) - 1) // 2),
        "majority": majority_size(len(nodes)),
        "all": len(nodes),
    }[spec]
    chosen = set(rng.sample(nodes, size))
    return [n for n in nodes if n in chosen]


def resolve(cluster: ClusterKind, spec: str, planned: list[str] | None) -> list[str]:
    """The planned nodes; for `coordinators` the nodes that serve the coordination service; for
    `primaries` the node the cluster says leads now (none when it cannot tell)."""
    if planned is not None:
        return planned
    if spec == COORDINATORS:
        return cluster.coordinators()
    leader = cluster.leader()
    return [leader] if leader else []
