"""The power fault: the target nodes lose power at one instant. Every process of the cluster
kind on them is killed (SIGKILL, with its children), and right after, before anything else can
write, the node's power layer (clusters/power.py) drops every write to its state that those
processes had not made durable: data not fsynced (or fdatasynced), and creates, renames and
removals whose directory was not fsynced. At the fault's end the processes start again, as after
a machine restart: Postgres recovers from what its disk kept, and so do the daemons."""

from __future__ import annotations

from typing import Any

from clusters.kinds.base import ClusterKind
from nemesis.fault import by_name, on_nodes
from nemesis.kill import Kill


class Power(Kill):
    name = "power"

    def start(self, cluster: ClusterKind) -> dict[str, Any]:
        done = super().start(cluster)  # every process killed and gone: nothing writes now
        lost = on_nodes(by_name(cluster, done["targets"]), lambda node: node.lose_power())
        return done | {"lost": lost, "mechanism": "SIGKILL, then powerfs drops what was unsynced"}
