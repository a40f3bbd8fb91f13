"""Cluster kind `single`: one Postgres 15 node. The baseline every other kind is compared with."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from clusters import postgres_node as pg
from clusters.backend import Node
from clusters.kind import ClusterKind, Endpoint, wait_until


class SingleCluster(ClusterKind):
    name = "single"
    realtime_order = True

    @classmethod
    def nodes_needed(cls, options: dict[str, Any]) -> int:
        return 1

    def deploy(self, say: Callable[[str], None]) -> None:
        say(f"starting {self.node_count()} node on {self.backend.name}")
        (node,) = self.backend.up(self.cluster, self.node_count(), [pg.PORT])
        say("initialising Postgres 15 on n1")
        pg.init(node)
        pg.start(node)
        wait_until("Postgres on n1 accepting connections", lambda: pg.is_ready(node), 60)
        pg.ensure_database(node)

    def endpoints(self) -> list[Endpoint]:
        node = self.nodes[0]
        host, port = node.endpoint(pg.PORT)
        return [Endpoint(node.name, host, port, pg.DBNAME, pg.USER)]

    def processes(self) -> dict[str, str]:
        return {"postgres": f"{pg.PG_BIN}/postgres"}

    def start_process(self, node: Node, name: str) -> None:
        if name != "postgres":
            raise ValueError(f"the single cluster runs no process {name!r}")
        pg.start(node)

    def leader(self) -> str | None:
        return "n1"

    def status(self) -> dict[str, Any]:
        nodes = {}
        for node in self.nodes:
            up = pg.is_ready(node)
            nodes[node.name] = {
                "role": "primary",
                "postgres": "up" if up else "down",
                "lsn": pg.psql(node, "SELECT pg_current_wal_lsn()") if up else None,
            }
        return {"kind": self.name, "leader": self.leader(), "nodes": nodes}

    def collect(self, dest: Path) -> None:
        for node in self.nodes:
            target = dest / node.name
            target.mkdir(parents=True, exist_ok=True)
            node.get(pg.LOG_DIR, target)
            (target / "container.log").write_text(node.logs())
