"""The pause fault: SIGSTOP the cluster kind's processes (with their children) on the target
nodes, as a long GC pause or a frozen VM would; SIGCONT at the fault's end."""

from __future__ import annotations

from typing import Any

from clusters.backend import Node
from clusters.kinds.base import ClusterKind
from nemesis import targets
from nemesis.fault import ProcessFault, by_name, on_nodes
from nemesis.processes import freeze_tree, send


class Pause(ProcessFault):
    name = "pause"

    def __init__(self, target: str, planned: list[str] | None) -> None:
        super().__init__(target, planned)
        self.paused: dict[str, list[int]] = {}  # node → pids stopped

    def start(self, cluster: ClusterKind) -> dict[str, Any]:
        names = targets.resolve(cluster, self.target, self.planned)
        patterns = cluster.processes()

        def pause(node: Node) -> dict[str, list[int]]:
            paused = {}
            for process, pattern in patterns.items():
                if pids := freeze_tree(node, pattern):
                    paused[process] = pids
                    self.paused.setdefault(node.name, []).extend(pids)
            return paused

        done = on_nodes(by_name(cluster, names), pause)
        return self.plan() | {"targets": names, "paused": done, "mechanism": "SIGSTOP"}

    def stop(self, cluster: ClusterKind) -> dict[str, Any]:
        def resume(node: Node) -> list[int]:
            pids = self.paused.get(node.name, [])
            if pids:
                send(node, pids, "CONT")
            self.paused.pop(node.name, None)
            return pids

        done = on_nodes(by_name(cluster, list(self.paused)), resume)
        return self.plan() | {"resumed": {n: pids for n, pids in done.items() if pids}}
