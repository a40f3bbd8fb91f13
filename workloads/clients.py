"""The clients that speak to a cluster's endpoints, by protocol, registered in one place.

Each has `from_endpoint(ep, isolation, timeout)`, `setup(workloads)` (create what the workloads
need; returns the server's version), `run(workload, f, value)` → Completion, `node` (who served
the last operation) and `close()`.
"""

from __future__ import annotations

from core.endpoint import Endpoint, Protocol
from core.errors import BadInput
from workloads.postgres import PostgresClient
from workloads.tarantool_client import TarantoolClient

Client = PostgresClient | TarantoolClient
CLIENTS: dict[Protocol, type[PostgresClient] | type[TarantoolClient]] = {
    Protocol.POSTGRES: PostgresClient,
    Protocol.TARANTOOL: TarantoolClient,
}


def client_for(
    ep: Endpoint, isolation: str, timeout: float, cancel_after: float | None = None
) -> Client:
    """A client of the endpoint's protocol; `cancel_after` (seconds), a Postgres client that
    cancels its statements, COMMIT included, that have not returned by then."""
    if cancel_after is None:
        return CLIENTS[ep.protocol].from_endpoint(ep, isolation, timeout)
    if ep.protocol is not Protocol.POSTGRES:
        raise BadInput(f"--cancel-after cancels Postgres statements; {ep.protocol} has none")
    return PostgresClient.from_endpoint(ep, isolation, timeout, cancel_after)
