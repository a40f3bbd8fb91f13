"""The switchover fault: a planned handover of the primary, as an operator's maintenance asks
for it, on a kind whose manager does it on request (clusters.kinds.base.PlannedSwitchover:
Patroni). Nothing is broken: the old primary is demoted and another member promoted, in the
order the manager promises, while clients keep writing. A write acknowledged by the old primary
and missing on the new one, or two members taking writes, is the manager's bug. Its end undoes
nothing (the cluster is whole); the next switchover or failover moves the primary again."""

from __future__ import annotations

from typing import Any

from clusters.kinds.base import ClusterKind, PlannedSwitchover
from nemesis.fault import UnplannedFault


class Switchover(UnplannedFault):
    name = "switchover"

    def start(self, cluster: ClusterKind) -> dict[str, Any]:
        if not isinstance(cluster, PlannedSwitchover):
            raise TypeError(f"the {cluster.name} cluster has no manager to ask for a switchover")
        return self.plan() | cluster.switchover()

    def stop(self, cluster: ClusterKind) -> dict[str, Any]:
        return self.plan()
