"""The promote fault: a failover as an operator performs it, on a kind that does not fail over by
itself (clusters.kinds.base.OperatorFailover, plain streaming replication).

At its start the primary is fenced, in one of two ways drawn from the seed: `stop`, its server
stopped at once (a STONITH), or `isolate`, cut off from every other node while its clients still
reach it (a fence that did not happen: the split brain an operator's script risks). Then the
standby that received the most WAL is promoted and the others are pointed at it. At its end the
deposed primary is brought back as a standby of the new one (rewound, or rebuilt), so that
whatever it acknowledged after the promotion and the new primary lacks is gone, as it would be.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from clusters.kinds.base import ClusterKind, OperatorFailover
from core.errors import BadInput
from nemesis import grudges, partition
from nemesis.fault import Fault, Replaying, by_name, on_nodes

FENCES = ("stop", "isolate")


class Promote(Fault):
    name = "promote"

    def __init__(self, fence: str) -> None:
        self.fence = fence
        self.deposed: str | None = None  # the primary it fenced, until it is back

    @classmethod
    def planned(cls, nodes: list[str], rng: random.Random) -> Promote:
        return cls(rng.choice(FENCES))

    def plan(self) -> dict[str, Any]:
        return {"fault": self.name, "fence": self.fence}

    @classmethod
    def of_plan(cls, plan: Mapping[str, Any], replaying: Replaying) -> Fault:
        if plan["fence"] not in FENCES:
            raise BadInput(f"the schedule's promote fault fences by {plan['fence']!r}")
        return cls(plan["fence"])

    def start(self, cluster: ClusterKind) -> dict[str, Any]:
        if not isinstance(cluster, OperatorFailover):
            raise TypeError(f"the {cluster.name} cluster fails over by itself: no operator to play")
        old = cluster.leader()
        if old is None:
            return self.plan() | {"deposed": None, "why": "no node takes writes"}
        (node,) = by_name(cluster, [old])
        self.deposed = old
        if self.fence == "stop":
            how = cluster.fence(node)
        else:
            grudge = grudges.primaries([n.name for n in cluster.nodes], old)
            on_nodes(cluster.nodes, lambda n: partition.apply(n, grudge))
            how = "cut off from every other node (iptables); its clients still reach it"
        done = cluster.promote_most_advanced(old)
        return self.plan() | {"deposed": old, "fenced": how} | done

    def stop(self, cluster: ClusterKind) -> dict[str, Any]:
        if self.deposed is None or not isinstance(cluster, OperatorFailover):
            return self.plan() | {"rejoined": None}
        (node,) = by_name(cluster, [self.deposed])
        if self.fence == "isolate":
            cluster.fence(node)  # before it hears the others again: it must not stream to them
            on_nodes(cluster.nodes, partition.heal)
        done = cluster.rejoin(node)
        self.deposed = None
        return self.plan() | done
