"""The clients that speak to a cluster's endpoints, by protocol, registered in one place.

Each has `from_endpoint(ep, isolation, timeout)`, `setup(workloads)` (create what the workloads
need; returns the server's version), `run(workload, f, value)` → Completion, `node` (who served
the last operation) and `close()`.
"""

from __future__ import annotations

from core.endpoint import Endpoint, Protocol
from workloads.postgres import PostgresClient
from workloads.tarantool_client import TarantoolClient

Client = PostgresClient | TarantoolClient
CLIENTS: dict[Protocol, type[PostgresClient] | type[TarantoolClient]] = {
    Protocol.POSTGRES: PostgresClient,
    Protocol.TARANTOOL: TarantoolClient,
}


def client_for(ep: Endpoint, isolation: str, timeout: float) -> Client:
    return CLIENTS[ep.protocol].from_endpoint(ep, isolation, timeout)
