"""Cluster kind `tarantool` (seed 002 as Tarantool 2.6.0 implements it): `--instances N` nodes (3
or 5, default 5) in a full mesh, every data space synchronous (`is_sync`), the synchro quorum a
majority. n1 bootstraps the cluster and leads; the others are read-only replicas.

Tarantool 2.6 has no election. A controller (systems/qsync/controller.lua) runs on the last node
and does an operator's failover: when the leader has been unreachable or read-only for
FAILOVER_AFTER seconds and it reaches a quorum, it promotes the most advanced reachable replica
(`box.ctl.clear_synchro_queue()`, then `read_only = false`) and demotes any other writable node
it can reach. A leader that hears fewer than a quorum of peers for LEASE seconds demotes itself.
Clients try the nodes in turn and keep to the one that takes writes. README.md ("The tarantool
cluster") lists the weaknesses of this procedure.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import systems
from checkers.cluster_state import QuietElections, VclocksForward
from checkers.moments import LeaderChanged
from clusters.backend import LOG_DIR, Node, shell_quote
from clusters.kinds.base import SYNCHRO_TIMEOUT_OPTION, ClusterKind, Install, KindOption, Process
from clusters.kinds.on_node import ensure_clock_file, failover_endpoint, under_faketime, wait_until
from core.contract import Contract
from core.endpoint import Endpoint, Protocol
from core.polls import Record, TarantoolPoll

PORT = 3301
SCRIPTS = systems.ROOT / "qsync"
INSTALL = "/opt/qsync"
DATA_DIR = "/var/lib/harness/tarantool"
STATE_FILE = "/var/lib/harness/controller.json"
DEFAULT_INSTANCES = 5
SIZES = (3, 5)
FAILOVER_AFTER = 4.0  # seconds without a writable leader before the controller promotes another
LEASE = 3.0  # seconds a leader keeps taking writes without hearing a quorum of peers


class TarantoolCluster(ClusterKind):
    name = "tarantool"
    about = "Tarantool 2.6's synchronous replication, checked in the confirm-rollback contract"
    contract = Contract.CONFIRM_ROLLBACK  # the only one Tarantool's synchronous replication has
    cli_options = (
        KindOption(
            "instances",
            int,
            f"Number of Tarantool instances, 3 or 5 (default {DEFAULT_INSTANCES}); the synchro "
            "quorum is a majority.",
            default=DEFAULT_INSTANCES,
            check=lambda count: None if count in SIZES else f"must be 3 or 5, not {count!r}",
        ),
        SYNCHRO_TIMEOUT_OPTION,
    )
    installed = (
        Install(SCRIPTS, "node.lua", INSTALL),
        Install(SCRIPTS, "controller.lua", INSTALL),
    )
    collected = (LOG_DIR, STATE_FILE)
    poll_records = (TarantoolPoll,)
    state_rules = (VclocksForward, QuietElections)
    moments = (LeaderChanged,)

    @classmethod
    def nodes_needed(cls, options: Mapping[str, Any]) -> int:
        return int(options["instances"])

    @property
    def quorum(self) -> int:
        return self.node_count() // 2 + 1

    @property
    def controller_node(self) -> Node:
        return self.nodes[-1]

    def deploy(self, say: Callable[[str], None]) -> None:
        timeout = self.options["synchro_timeout"]
        parts = f"Tarantool in a full mesh, synchro quorum {self.quorum}, timeout {timeout:g}s"
        nodes = self.bring_up(say, [PORT], parts)
        for node in nodes:
            ensure_clock_file(node)
        for node in nodes:  # together: each waits at bootstrap until every peer has joined
            self.start_tarantool(node)
        for node in nodes:
            wait_until(f"Tarantool on {node.name} bootstrapped", lambda n=node: self._up(n), 120)
        say(f"n1 leads; starting the failover controller on {self.controller_node.name}")
        self.start_controller(self.controller_node)

    def _up(self, node: Node) -> bool:
        role = self.role(node)
        return bool(role) and role.get("status") == "running"

    def start_tarantool(self, node: Node) -> None:
        env = {
            "NODE_NAME": node.name,
            "PEERS": ",".join(f"{n.name}:{PORT}" for n in self.nodes),
            "QUORUM": str(self.quorum),
            "SYNCHRO_TIMEOUT": f"{self.options['synchro_timeout']:g}",
            "LEADER": self.nodes[0].name,
            "DATA_DIR": DATA_DIR,
            "LOG_FILE": f"{LOG_DIR}/tarantool.log",
            "LEASE": f"{LEASE:g}",
        }
        self._detached(
            node, env, under_faketime(f"tarantool {INSTALL}/node.lua", monotonic=False), "node.out"
        )

    def start_controller(self, node: Node) -> None:
        """The controller keeps the real clock: its FAILOVER_AFTER is its own judgement, and a
        skewed controller is not what a clock fault on a node is meant to test."""
        env = {
            "NODES": ",".join(f"{n.name}={n.name}:{PORT}" for n in self.nodes),
            "LEADER": self.nodes[0].name,
            "QUORUM": str(self.quorum),
            "FAILOVER_AFTER": f"{FAILOVER_AFTER:g}",
            "SYNCHRO_TIMEOUT": f"{self.options['synchro_timeout']:g}",
            "STATE_FILE": STATE_FILE,
        }
        self._detached(node, env, f"tarantool {INSTALL}/controller.lua", "controller.log")

    def _detached(self, node: Node, env: dict[str, str], cmd: str, log: str) -> None:
        assignments = " ".join(f"{k}={shell_quote(v)}" for k, v in env.items())
        node.exec(
            f"mkdir -p {LOG_DIR} {DATA_DIR} && cd {INSTALL} && "
            f"exec env {assignments} {cmd} >> {LOG_DIR}/{log} 2>&1",
            detach=True,
        )

    def endpoints(self) -> list[Endpoint]:
        """One endpoint listing every node: a client keeps to the one that takes writes."""
        return [failover_endpoint(self.nodes, PORT, "", "guest", two_phase=True,
                                  protocol=Protocol.TARANTOOL)]  # fmt: skip

    # Tarantool rewrites its command line to "tarantool <script> <status>"
    runs = (
        Process("tarantool", r"tarantool .*node\.lua", start_tarantool),
        Process("controller", r"tarantool .*controller\.lua", start_controller),
    )

    def role(self, node: Node) -> dict[str, Any]:
        """The node's own account (node.lua's harness_role); {} when it does not answer."""
        import tarantool  # here: `--help` and the other kinds need no connector

        host, port = node.endpoint(PORT)
        with contextlib.suppress(Exception):
            conn = tarantool.Connection(
                host,
                port,
                socket_timeout=2,
                connection_timeout=2,
                reconnect_max_attempts=0,
                fetch_schema=False,
            )
            try:
                return conn.call("harness_role").data[0]
            finally:
                conn.close()
        return {}

    def poll(self) -> dict[str, Record]:
        """Which nodes take writes, and each one's vclock (how far it applied each instance's
        writes). Tarantool has no term, and more than one writable node is the procedure's
        known weakness, not a broken promise: so `writable`, not `serving`."""
        names = [n.name for n in self.nodes]
        with ThreadPoolExecutor(len(names)) as pool:
            roles = dict(zip(names, pool.map(self.role, self.nodes), strict=True))
        return {
            name: TarantoolPoll(role.get("ro") is False, role.get("vclock") or {})
            for name, role in roles.items()
            if role
        }

    def controller_state(self) -> dict[str, Any]:
        out = self.controller_node.exec(f"cat {STATE_FILE}", check=False).output
        try:
            return json.loads(out)
        except ValueError:
            return {}

    def leader(self) -> str | None:
        """The node that takes writes; when several do, the one the controller chose."""
        writable = [n.name for n in self.nodes if self.role(n).get("ro") is False]
        chosen = self.controller_state().get("leader")
        if chosen in writable:
            return chosen
        return writable[0] if writable else None

    def status(self) -> dict[str, Any]:
        nodes = {}
        for node in self.nodes:
            role = self.role(node)
            nodes[node.name] = {
                "role": ("replica (read-only)" if role.get("ro") else "leader (writable)")
                if role
                else "not answering",
                "status": role.get("status"),
                "vclock": role.get("vclock"),
                "peers_connected": role.get("peers_connected"),
            }
        return {
            "kind": self.name,
            "leader": self.leader(),
            "controller": self.controller_state(),
            "nodes": nodes,
        }
