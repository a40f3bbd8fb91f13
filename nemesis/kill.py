"""The kill fault: SIGKILL the cluster kind's processes (with their children) on the target
nodes, as a crash would; at the fault's end the cluster kind starts them again."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from clusters.backend import Node
from clusters.kinds.base import ClusterKind
from core.errors import BadInput
from nemesis import targets
from nemesis.fault import Fault, ProcessFault, Replaying, by_name, on_nodes
from nemesis.processes import kill_tree, process_table, tree, wait_gone


class Kill(ProcessFault):
    name = "kill"

    def __init__(self, target: str, planned: list[str] | None) -> None:
        super().__init__(target, planned)
        self.killed: dict[str, list[str]] = {}  # node → names of the processes to restart

    def start(self, cluster: ClusterKind) -> dict[str, Any]:
        names = targets.resolve(cluster, self.target, self.planned)
        patterns = cluster.processes()

        def kill(node: Node) -> dict[str, list[int]]:
            killed = {}
            for process, pattern in patterns.items():
                if pids := kill_tree(node, pattern):
                    killed[process] = pids
                    self.killed.setdefault(node.name, []).append(process)
            wait_gone(node, [pid for pids in killed.values() for pid in pids])
            return killed

        done = on_nodes(by_name(cluster, names), kill)
        return self.plan() | {"targets": names, "killed": done, "mechanism": "SIGKILL"}

    def stop(self, cluster: ClusterKind) -> dict[str, Any]:
        def restart(node: Node) -> list[str]:
            started = []
            for process in list(self.killed.get(node.name, [])):
                cluster.start_process(node, process)
                self.killed[node.name].remove(process)
                started.append(process)
            return started

        done = on_nodes(by_name(cluster, list(self.killed)), restart)
        self.killed = {n: left for n, left in self.killed.items() if left}
        return self.plan() | {"restarted": {n: started for n, started in done.items() if started}}


class Restart(Kill):
    """A crash and an immediate restart: the processes come back while the moment that was
    struck still holds (a voter restarted between its vote and the term's first record must
    come back with its vote)."""

    name = "restart"

    def start(self, cluster: ClusterKind) -> dict[str, Any]:
        killed = super().start(cluster)
        return killed | {"restarted": super().stop(cluster)["restarted"]}


class KillProcess(Kill):
    """SIGKILL of one process of the kind alone (`kill-postgres`, `kill-patroni`), where it
    hurts most half the time: on the leader, or on a node drawn among those it runs on. The
    others on the node keep running (Patroni restarts a killed Postgres; a Postgres whose
    Patroni was killed goes on serving without its manager)."""

    name = "kill-process"

    def __init__(self, process: str, target: str, pick: float) -> None:
        super().__init__(target, None)
        self.process = process
        self.pick = pick  # which of the nodes it runs on, in [0, 1)

    @classmethod
    def planned_as(cls, process: str, rng: random.Random) -> KillProcess:
        return cls(process, rng.choice(("primaries", "one")), rng.random())

    def plan(self) -> dict[str, Any]:
        return {"fault": self.name, "process": self.process, "target": self.target,
                "pick": self.pick}  # fmt: skip

    @classmethod
    def of_plan(cls, plan: Mapping[str, Any], replaying: Replaying) -> Fault:
        if plan["process"] not in replaying.processes:
            raise BadInput(
                f"the schedule kills the process {plan['process']!r}, which this cluster kind "
                f"does not run: its processes are {', '.join(replaying.processes)}"
            )
        return cls(plan["process"], plan["target"], float(plan.get("pick", 0.0)) % 1.0)

    def start(self, cluster: ClusterKind) -> dict[str, Any]:
        pattern = cluster.processes()[self.process]
        if self.target == "primaries":
            names = targets.resolve(cluster, self.target, None)
        else:
            running = on_nodes(cluster.nodes, lambda n: bool(tree(process_table(n), pattern)))
            where = [n.name for n in cluster.nodes if running[n.name]]
            names = [where[int(self.pick * len(where))]] if where else []

        # The kind's other processes are spared, its children among them: pg_autoctl starts
        # its Postgres as a child, which a kill of the keeper alone leaves running.
        spare = [p for name, p in cluster.processes().items() if name != self.process]

        def kill(node: Node) -> list[int]:
            pids = kill_tree(node, pattern, spare)
            if pids:
                self.killed.setdefault(node.name, []).append(self.process)
            wait_gone(node, pids)
            return pids

        done = on_nodes(by_name(cluster, names), kill)
        return self.plan() | {"targets": names, "killed": done, "mechanism": "SIGKILL"}
