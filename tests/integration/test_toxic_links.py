"""The toxic fault on the links a kind declares between its daemons, on real nodes: in a run with
the proxies in place, a compute's proxy reaches each safekeeper, and a standby its primary,
through a proxy on its own node; a latency toxic on that link delays every commit by at least
its latency while the clients' own link stays fast, and its end gives the commits full speed
again."""

from __future__ import annotations

import time
from collections.abc import Iterator

import psycopg
import pytest

from clusters.backend import Backend
from clusters.docker_backend import DockerBackend
from clusters.kinds import postgres as pg
from clusters.kinds.base import ClusterKind
from clusters.kinds.safekeeper import SK_PORT, TO_SAFEKEEPER, SafekeeperCluster
from clusters.kinds.streaming import StreamingCluster
from nemesis.toxic import ToxicFault
from tests.integration.conftest import eventually
from tests.integration.test_failover import params
from tests.integration.test_faults import cluster_of

pytestmark = pytest.mark.docker

LATENCY_MS = 500


def proxied() -> Backend:
    """The backend as a run with `toxic` has it: the kinds' links go through proxies."""
    backend = DockerBackend()
    backend.proxied = True
    return backend


@pytest.fixture(scope="module")
def safekeeper(docker_backend: Backend) -> Iterator[ClusterKind]:
    yield from cluster_of(proxied(), SafekeeperCluster, {"computes": 1, "safekeepers": 3})


@pytest.fixture(scope="module")
def streaming(docker_backend: Backend) -> Iterator[ClusterKind]:
    yield from cluster_of(proxied(), StreamingCluster, {"replication": "sync", "replicas": 2})


def timed(conn: psycopg.Connection, sql: str) -> float:
    began = time.monotonic()
    conn.execute(sql)
    return time.monotonic() - began


def commit_seconds(conn: psycopg.Connection) -> float:
    conn.execute("CREATE TABLE IF NOT EXISTS t(x int)")
    return timed(conn, "INSERT INTO t VALUES (1)")


def delays_commits_only(cluster: ClusterKind, fault: ToxicFault, proxies: list[str]) -> None:
    """While `fault` is on, a commit takes at least its latency and a read does not; after it,
    commits are fast again."""
    (ep,) = cluster.endpoints()[:1]
    slow = LATENCY_MS / 1000
    with psycopg.connect(**params(ep), autocommit=True) as conn:
        assert commit_seconds(conn) < slow
        try:
            done = fault.start(cluster)
            on = [p for p in done["proxies"].values() if p]
            assert on and all(p == proxies for p in on), done
            assert commit_seconds(conn) >= slow
            assert timed(conn, "SELECT 1") < slow  # the clients' own link is untouched
        finally:
            fault.stop(cluster)
        eventually(lambda: commit_seconds(conn) < slow or None, "commits fast again", 30)


def test_a_latency_toxic_on_the_proxy_to_the_safekeepers_delays_commits(
    safekeeper: ClusterKind,
) -> None:
    latency = ToxicFault(
        "one", ["n1"], "latency", "upstream", {"latency": LATENCY_MS}, link="safekeeper"
    )
    assert latency.plan()["link"] == "safekeeper"
    delays_commits_only(safekeeper, latency, [f"safekeeper-n{i}-{SK_PORT}" for i in (2, 3, 4)])


def test_a_daemon_started_again_dials_the_same_proxy(safekeeper: ClusterKind) -> None:
    """A proxy keeps its port (a compute's agent restarted after a kill finds its safekeepers
    where it left them); another peer gets a port of its own."""
    compute = safekeeper.nodes[0]
    first = safekeeper.dial(compute, TO_SAFEKEEPER, "n2", SK_PORT)
    assert first[0] == "127.0.0.1"
    assert safekeeper.dial(compute, TO_SAFEKEEPER, "n2", SK_PORT) == first
    assert safekeeper.dial(compute, TO_SAFEKEEPER, "n3", SK_PORT) != first
    unproxied = SafekeeperCluster(DockerBackend(), "unused", {})
    assert unproxied.dial(compute, TO_SAFEKEEPER, "n2", SK_PORT) == ("n2", SK_PORT)


def test_a_latency_toxic_on_the_standbys_stream_delays_synchronous_commits(
    streaming: ClusterKind,
) -> None:
    """The WAL comes back to the standby, downstream of the link it dials."""
    latency = ToxicFault(
        "all", ["n2", "n3"], "latency", "downstream", {"latency": LATENCY_MS}, link="upstream"
    )
    delays_commits_only(streaming, latency, [f"upstream-n1-{pg.PORT}"])
