"""Cluster kind `single`: one Postgres 15 node. The baseline every other kind is compared with."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from clusters.backend import Node
from clusters.kinds import postgres as pg
from clusters.kinds.base import ClusterKind, Process
from clusters.kinds.on_node import wait_until
from core.endpoint import Endpoint


class SingleCluster(ClusterKind):
    name = "single"
    about = "one Postgres"
    realtime_order = True
    collected = (pg.LOG_DIR,)

    @classmethod
    def nodes_needed(cls, options: Mapping[str, Any]) -> int:
        return 1

    def deploy(self, say: Callable[[str], None]) -> None:
        (node,) = self.bring_up(say, [pg.PORT], "n1, one Postgres 15")
        say("initialising Postgres 15 on n1")
        pg.init(node)
        pg.start(node)
        wait_until("Postgres on n1 accepting connections", lambda: pg.is_ready(node), 60)
        pg.ensure_database(node)

    def start_postgres(self, node: Node) -> None:
        pg.start(node)

    runs = (Process("postgres", f"{pg.PG_BIN}/postgres", start_postgres),)

    def endpoints(self) -> list[Endpoint]:
        node = self.nodes[0]
        host, port = node.endpoint(pg.PORT)
        return [Endpoint(node.name, host, port, pg.DBNAME, pg.USER)]

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
