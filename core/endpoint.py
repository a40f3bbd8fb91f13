"""Where a client connects: what a cluster kind hands the workloads' clients."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Protocol(StrEnum):
    """The wire protocol a cluster's clients speak; each has its client in workloads.clients."""

    POSTGRES = "postgres"
    TARANTOOL = "tarantool"


@dataclass(frozen=True)
class Endpoint:
    """Where a client bound to `node` connects. A cluster that fails over lists several hosts
    (libpq tries them in turn and keeps the first that matches `target_session_attrs`, as an
    application would); `nodes` names the node behind each host, so that each operation records
    the node that served it. With `two_phase`, a writing transaction ends with PREPARE
    TRANSACTION and the cluster's leader decides its outcome (the confirm/rollback contract).
    With `reads`, the client runs its read-only operations there (a hot standby, where users
    send their reads) and the rest here."""

    node: str
    host: str  # one host, or several separated by commas
    port: int | str  # one port, or one per host separated by commas
    dbname: str
    user: str
    target_session_attrs: str = "any"
    nodes: tuple[tuple[str, str], ...] = ()  # ("host:port", node name) pairs
    two_phase: bool = False
    protocol: Protocol = Protocol.POSTGRES
    reads: Endpoint | None = None

    @property
    def url(self) -> str:
        ports = str(self.port).split(",")
        hosts = ",".join(
            f"{h}:{ports[min(i, len(ports) - 1)]}" for i, h in enumerate(self.host.split(","))
        )
        if self.protocol is not Protocol.POSTGRES:
            return f"{self.protocol}://{hosts}"
        query = "" if self.target_session_attrs == "any" else "?target_session_attrs="
        query += "" if self.target_session_attrs == "any" else self.target_session_attrs
        return f"postgresql://{self.user}@{hosts}/{self.dbname}{query}"
