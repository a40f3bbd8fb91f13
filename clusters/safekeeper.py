"""Cluster kind `safekeeper` (seeds 000, 001, 003): one compute node, n1, running Postgres 15 and
the proxy as its synchronous standby, and `--safekeepers N` nodes n2… running a safekeeper each.

The daemons (package `clusters/walkeeper`) are copied onto the nodes as files and run there with
the node's python3; the harness never imports them. It sees the cluster as an operator does:
through Postgres, the daemons' logs and files, and `python3 -m walkeeper status` run on a node.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clusters import postgres_node as pg
from clusters.backend import Node, shell_quote
from clusters.kind import (
    ClusterKind,
    Endpoint,
    KindOption,
    wait_until,
)
from harness.errors import BadInput

DAEMONS = Path(__file__).parent / "walkeeper"
INSTALL = "/opt/walkeeper"
SK_PORT = 7676
PROXY_PORT = 7677
SK_PG_PORT = 5433  # a safekeeper's WAL server for Postgres standbys (streaming replication)
SK_DATA = "/var/lib/harness/safekeeper"
SLOT = "walproposer"
VARIANTS = ("term-history", "epoch")
DEFAULT_SAFEKEEPERS = 3

COMPUTE_CONF = f"""
synchronous_standby_names = '{SLOT}'
max_wal_senders = 10
max_replication_slots = 10
wal_sender_timeout = 60s
"""


class SafekeeperCluster(ClusterKind):
    name = "safekeeper"
    cli_options = (
        KindOption(
            "safekeepers", int, f"Number of safekeeper nodes (default {DEFAULT_SAFEKEEPERS})."
        ),
        KindOption(
            "variant",
            str,
            "Election protocol: term-history (seed 003, default) or epoch (seed 001 as written).",
            VARIANTS,
        ),
    )

    @classmethod
    def nodes_needed(cls, options: dict[str, Any]) -> int:
        return 1 + safekeeper_count(options)

    @property
    def variant(self) -> str:
        variant = self.options.get("variant") or "term-history"
        if variant not in VARIANTS:
            raise BadInput(f"unknown --variant {variant!r}: choose from {', '.join(VARIANTS)}")
        return variant

    def compute(self) -> Node:
        return self.nodes[0]

    def safekeepers(self) -> list[Node]:
        return self.nodes[1:]

    def deploy(self, say: Callable[[str], None]) -> None:
        count = self.node_count()
        say(f"starting {count} nodes on {self.backend.name}: n1 compute, n2…n{count} safekeepers")
        nodes = self.backend.up(self.cluster, count, [pg.PORT])
        for node in nodes:
            install(node)
        say(f"starting {count - 1} safekeepers ({self.variant})")
        for node in nodes[1:]:
            self.start_safekeeper(node)
        say("initialising Postgres 15 on n1 with the proxy as its synchronous standby")
        compute = nodes[0]
        pg.init(compute, COMPUTE_CONF)
        pg.start(compute)
        wait_until("Postgres on n1 accepting connections", lambda: pg.is_ready(compute), 60)
        create_slot(compute)
        self.start_proxy(compute)
        say("waiting for the proxy's election and a first commit through a quorum")
        wait_until("the proxy's election", lambda: self.proxy_status().get("elected"), 60)
        wait_until("a commit through the safekeepers", lambda: self._commit_works(compute), 60)
        pg.ensure_database(compute)

    def _commit_works(self, node: Node) -> bool:
        """A write commits. The client gives up by being killed, not by statement_timeout: a
        cancelled wait for the standby returns COMMIT anyway (with a warning), which would pass."""
        sql = "CREATE TABLE IF NOT EXISTS probe(x int); INSERT INTO probe VALUES (1)"
        cmd = f"timeout 5 {pg.PG_BIN}/psql -h 127.0.0.1 -U {pg.USER} -d postgres -qc "
        return node.exec(cmd + shell_quote(sql), check=False).code == 0

    def daemon(self, node: Node, args: str, log: str) -> None:
        """Start a walkeeper daemon detached, logging to `log`.

        Unlike Postgres, the daemons keep the real clock: libfaketime 0.9.10 does not intercept
        the sem_clockwait behind Python's timed lock waits, which then never time out (seen as a
        proxy that never reconnects). They take no decision from the wall clock, so a skewed
        clock would have nothing to act on in them anyway."""
        cmd = f"env PYTHONPATH={INSTALL} python3 -u -m walkeeper {args}"
        node.exec(f"mkdir -p {pg.LOG_DIR} && exec {cmd} >> {pg.LOG_DIR}/{log} 2>&1", detach=True)

    def start_safekeeper(self, node: Node) -> None:
        self.daemon(
            node,
            f"safekeeper --name {node.name} --data {SK_DATA} --listen 0.0.0.0:{SK_PORT} "
            f"--variant {self.variant} --pg-listen 0.0.0.0:{SK_PG_PORT}",
            "safekeeper.log",
        )

    def start_proxy(self, node: Node) -> None:
        peers = " ".join(f"--safekeeper {n.name}={n.name}:{SK_PORT}" for n in self.safekeepers())
        conninfo = (
            f"host=127.0.0.1 port={pg.PORT} user={pg.USER} replication=true application_name={SLOT}"
        )
        self.daemon(
            node,
            f"proxy --postgres {shell_quote(conninfo)} --slot {SLOT} {peers} "
            f"--variant {self.variant} --status-port {PROXY_PORT}",
            "proxy.log",
        )

    def endpoints(self) -> list[Endpoint]:
        node = self.compute()
        host, port = node.endpoint(pg.PORT)
        return [Endpoint(node.name, host, port, pg.DBNAME, pg.USER)]

    def processes(self) -> dict[str, str]:
        return {
            "postgres": f"{pg.PG_BIN}/postgres",
            "proxy": "walkeeper proxy",
            "safekeeper": "walkeeper safekeeper",
        }

    def start_process(self, node: Node, name: str) -> None:
        starters = {
            "postgres": pg.start,
            "proxy": self.start_proxy,
            "safekeeper": self.start_safekeeper,
        }
        if name not in starters:
            raise ValueError(f"the safekeeper cluster runs no process {name!r}")
        starters[name](node)

    def proxy_status(self) -> dict[str, Any]:
        return daemon_status(self.compute(), PROXY_PORT)

    def leader(self) -> str | None:
        """n1 while its proxy holds an elected term (one compute node in this part)."""
        return self.compute().name if self.proxy_status().get("elected") else None

    def status(self) -> dict[str, Any]:
        """Who leads, the term, and every node's flush and commit LSNs with its term history
        (or epoch, in the epoch variant), as the daemons report them; a safekeeper that does
        not answer (killed, paused) is shown from its control file."""
        proxy = self.proxy_status()
        variant = proxy.get("variant", self.variant)
        compute = self.compute()
        nodes: dict[str, dict[str, Any]] = {
            compute.name: {
                "role": "compute" + (" (elected)" if proxy.get("elected") else ""),
                "postgres": "up" if pg.is_ready(compute) else "down",
            }
            | positions(proxy | {"flush_lsn": proxy.get("log_end"), "epoch": proxy.get("term")})
        }
        for node in self.safekeepers():
            state = daemon_status(node, SK_PORT)
            role = "safekeeper"
            if not state:
                state = read_control(node) | {"variant": variant}
                role = "safekeeper (not answering)"
            nodes[node.name] = {"role": role} | positions(state)
        return {
            "kind": self.name,
            "variant": variant,
            "leader": compute.name if proxy.get("elected") else None,
            "term": proxy.get("term"),
            "nodes": nodes,
        }

    def collect(self, dest: Path) -> None:
        for node in self.nodes:
            target = dest / node.name
            target.mkdir(parents=True, exist_ok=True)
            node.get(pg.LOG_DIR, target)
            node.get(f"{SK_DATA}/control.json", target)
            (target / "container.log").write_text(node.logs())
        (dest / "cluster-status.json").write_text(json.dumps(self.status(), indent=2))


def create_slot(node: Node) -> None:
    """The proxy's physical slot: Postgres keeps WAL from the last position the proxy confirmed,
    so a new proxy can always restart the stream at VCL."""
    sql = (
        f"SELECT pg_create_physical_replication_slot('{SLOT}', true) WHERE NOT EXISTS "
        f"(SELECT 1 FROM pg_replication_slots WHERE slot_name = '{SLOT}')"
    )
    node.exec(f"{pg.PG_BIN}/psql -h 127.0.0.1 -U {pg.USER} -d postgres -qAtc {shell_quote(sql)}")


def safekeeper_count(options: dict[str, Any]) -> int:
    count = options.get("safekeepers") or DEFAULT_SAFEKEEPERS
    if not isinstance(count, int) or count < 1:
        raise BadInput(f"--safekeepers must be a positive number, not {count!r}")
    return count


def install(node: Node) -> None:
    """Copy the daemon package onto the node (every run: the node's copy is never stale)."""
    for path in sorted(DAEMONS.glob("*.py")):
        node.put_file(f"{INSTALL}/walkeeper/{path.name}", path.read_bytes())


def daemon_status(node: Node, port: int) -> dict[str, Any]:
    """A daemon's own account of its state; {} when it does not answer (stopped, paused)."""
    out = node.exec(
        f"PYTHONPATH={INSTALL} timeout 5 python3 -m walkeeper status --port {port} --timeout 2",
        check=False,
    ).output
    try:
        state = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {}
    return state if state.get("ok") else {}


def read_control(node: Node) -> dict[str, Any]:
    """A safekeeper's state from its files: the control file, and the flush LSN from the WAL
    file's length (what the daemon itself computes when it starts)."""
    out = node.exec(
        f"cat {SK_DATA}/control.json && echo && stat -c %s {SK_DATA}/wal", check=False
    ).output
    try:
        control, size = out.strip().rsplit("\n", 1)
        state = json.loads(control)
    except ValueError:
        return {}
    if state.get("base_lsn"):
        state["flush_lsn"] = state["base_lsn"] + int(size)
    return state


def positions(state: dict[str, Any]) -> dict[str, Any]:
    """The columns an operator compares across nodes."""
    shown = {
        "term": state.get("term"),
        "flush_lsn": lsn_text(state.get("flush_lsn")),
        "commit_lsn": lsn_text(state.get("commit_lsn")),
    }
    if state.get("variant") == "epoch":
        return shown | {"epoch": state.get("epoch")}
    return shown | {"history": history_text(state.get("history"))}


def lsn_text(lsn: int | None) -> str:
    return "" if lsn is None else f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def history_text(history: list[list[int]] | None) -> str:
    return " ".join(f"{term}@{lsn_text(start)}" for term, start in history or [])
