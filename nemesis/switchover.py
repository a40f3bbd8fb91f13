"""The switchover fault: a planned handover of the primary, as an operator's maintenance asks
for it, on a kind whose manager does it on request (clusters.kinds.base.PlannedSwitchover:
Patroni). Nothing is broken: the old primary is demoted and another member promoted, in the
order the manager promises, while clients keep writing. A write acknowledged by the old primary
and missing on the new one, or two members taking writes, is the manager's bug. Its end undoes
nothing (the cluster is whole); the next switchover or failover moves the primary again."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from clusters.kinds.base import ClusterKind, PlannedSwitchover
from nemesis.fault import Fault, Replaying


class Switchover(Fault):
    name = "switchover"

    @classmethod
    def planned(cls, nodes: list[str], rng: random.Random) -> Switchover:
        return cls()

    def plan(self) -> dict[str, Any]:
        return {"fault": self.name}

    @classmethod
    def of_plan(cls, plan: Mapping[str, Any], replaying: Replaying) -> Fault:
        return cls()

    def start(self, cluster: ClusterKind) -> dict[str, Any]:
        if not isinstance(cluster, PlannedSwitchover):
            raise TypeError(f"the {cluster.name} cluster has no manager to ask for a switchover")
        return self.plan() | cluster.switchover()

    def stop(self, cluster: ClusterKind) -> dict[str, Any]:
        return self.plan()
