"""The partition fault: iptables rules inside the nodes, from a grudge (who cannot hear whom).

When a cannot hear b, packets from b to a are dropped twice: on a as they come in (INPUT) and on
b as they go out (OUTPUT), both in the chain HARNESS-PARTITION. An asymmetric grudge stays
asymmetric, and the nodes' own rules are never touched. Each node resolves the others' names
itself (`getent`), so the fault needs no addresses from the backend.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from clusters.backend import Node
from clusters.kinds.base import ClusterKind, KeepsUnpromotable
from nemesis import grudges, iptables
from nemesis.fault import Fault, Replaying, on_nodes
from nemesis.grudges import Grudge

CHAIN = "HARNESS-PARTITION"
PRIMARY_COORDINATORS = "primary-coordinators"
REPLICATION = "replication"  # the leader cut off from the nodes that replicate it, nothing else
# the leader with the members never promoted nor counted for a commit, away from the rest
WITH_UNPROMOTABLE = "primary-unpromotable"
LATE_SHAPES = ("primaries", PRIMARY_COORDINATORS, REPLICATION, WITH_UNPROMOTABLE)
HOOKS = ["INPUT", "OUTPUT"]


class Partition(Fault):
    name = "partition"

    def __init__(self, shape: str, grudge: Grudge | None) -> None:
        """`grudge` None means a shape known only at the start: `primaries` (the leader
        isolated), `primary-coordinators` (the leader cut off from the coordinators only),
        `replication` (the leader cut off from the other members only: it keeps its
        coordinators and its clients while its replicas fall behind) or
        `primary-unpromotable` (the leader with the members the kind never promotes nor counts
        for a commit, away from the coordinators and every other member)."""
        self.shape = shape
        self.grudge = grudge

    @classmethod
    def planned(cls, shape: str, nodes: list[str], rng: random.Random) -> Partition:
        if shape in LATE_SHAPES:
            return cls(shape, None)
        make, _ = grudges.SHAPES[shape]
        return cls(shape, make(nodes, rng))

    def plan(self) -> dict[str, Any]:
        grudge = None if self.grudge is None else grudges.as_json(self.grudge)
        return {"fault": self.name, "shape": self.shape, "grudge": grudge}

    @classmethod
    def replays(cls, plan: Mapping[str, Any]) -> bool:
        """A partition of a grudge, or of a shape known only at its start (a seed's placed
        history is a partition too, of a shape of its own)."""
        if not super().replays(plan):
            return False
        return plan.get("grudge") is not None or plan.get("shape") in LATE_SHAPES

    @classmethod
    def of_plan(cls, plan: Mapping[str, Any], replaying: Replaying) -> Fault:
        given = plan.get("grudge")
        if given is None:
            return cls(plan["shape"], None)
        grudge = {str(n): frozenset(str(m) for m in heard) for n, heard in given.items()}
        return cls(plan["shape"], grudge)

    def start(self, cluster: ClusterKind) -> dict[str, Any]:
        nodes = cluster.nodes
        grudge = self.grudge
        names = [n.name for n in nodes]
        if grudge is None:
            kept = cluster.unpromotable() if isinstance(cluster, KeepsUnpromotable) else []
            grudge = late_grudge(self.shape, names, cluster.leader(), cluster.coordinators(), kept)
        on_nodes(nodes, lambda node: apply(node, grudge))
        return self.plan() | {"grudge": grudges.as_json(grudge), "mechanism": "iptables"}

    def stop(self, cluster: ClusterKind) -> dict[str, Any]:
        healed = on_nodes(cluster.nodes, heal)
        return self.plan() | {"healed": [name for name, had in healed.items() if had]}


def late_grudge(
    shape: str,
    names: list[str],
    leader: str | None,
    coordinators: list[str],
    unpromotable: Sequence[str] = (),
) -> Grudge:
    """The grudge of a shape drawn when the fault starts, from who leads then."""
    if shape == WITH_UNPROMOTABLE and leader is not None:
        return grudges.isolate(names, [leader, *(n for n in unpromotable if n in names)])
    if shape == PRIMARY_COORDINATORS:
        return grudges.cut_off(names, leader, coordinators)
    if shape == REPLICATION:
        return grudges.cut_off(names, leader, [n for n in names if n not in coordinators])
    return grudges.primaries(names, leader)


def rules(node: str, grudge: Grudge) -> list[tuple[str, str]]:
    """(direction, peer) pairs for `node`: "from" peers it cannot hear, "to" peers that cannot
    hear it."""
    found = [("from", peer) for peer in sorted(grudge.get(node, ()))]
    found += [("to", peer) for peer, deaf in sorted(grudge.items()) if node in deaf]
    return found


def apply(node: Node, grudge: Grudge) -> None:
    """Install this node's part of the grudge (replacing any partition before it)."""
    pairs = rules(node.name, grudge)
    peers = sorted({peer for _, peer in pairs})
    var = {peer: f"a{i}" for i, peer in enumerate(peers)}
    prelude = iptables.RESOLVE + "".join(f'{var[p]}=$(addr "{p}")\n' for p in peers)
    flag = {"from": "-s", "to": "-d"}
    lines = [f'{flag[d]} "${var[p]}" -j DROP' for d, p in pairs]
    node.exec(iptables.install_script(CHAIN, HOOKS, lines, prelude))


def heal(node: Node) -> bool:
    """Remove every partition rule from the node; True when there were some. Stateless."""
    return iptables.remove(node, CHAIN, HOOKS)
