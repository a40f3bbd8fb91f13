"""The toxic fault on a real node: the run's clients reach Postgres through the node's proxy, a
latency toxic on that link delays their queries by at least its latency, and its end (or the
heal a crashed harness leaves to `cluster down`) gives them full speed again."""

from __future__ import annotations

import time
from collections.abc import Iterator

import psycopg
import pytest

import nemesis
from clusters.backend import Backend
from clusters.docker_backend import DockerBackend
from clusters.kinds.single import SingleCluster
from nemesis.toxic import ToxicFault
from tests.integration.test_failover import params

pytestmark = pytest.mark.docker

LATENCY_MS = 500


@pytest.fixture(scope="module")
def single(docker_backend: Backend, module_cluster_name: str) -> Iterator[SingleCluster]:
    """One Postgres whose node publishes the proxy's ports, as a run with `toxic` asks."""
    backend = DockerBackend()
    backend.proxied = True
    kind = SingleCluster(backend, module_cluster_name, {})
    kind.deploy(lambda msg: None)
    yield kind


def seconds(conn: psycopg.Connection) -> float:
    began = time.monotonic()
    assert conn.execute("SELECT 1").fetchone() == (1,)
    return time.monotonic() - began


def test_a_node_where_no_client_link_ends_is_left_alone(single: SingleCluster) -> None:
    """First in the module, before any proxy runs: a node that serves no client through a
    proxy (a safekeeper, say) gets no toxic, and the fault does not fail for it."""
    fault = ToxicFault("one", ["n1"], "timeout", "upstream", {"timeout": 0})
    try:
        assert fault.start(single)["proxies"] == {"n1": []}
    finally:
        fault.stop(single)


def test_a_latency_toxic_delays_the_clients_queries_until_it_ends(single: SingleCluster) -> None:
    (direct,) = single.endpoints()
    (ep,) = nemesis.interposed(["toxic"], single, single.endpoints())
    assert ep.port != direct.port and ep.node == "n1"
    latency = ToxicFault("one", ["n1"], "latency", "downstream", {"latency": LATENCY_MS})
    with psycopg.connect(**params(ep), autocommit=True) as conn:
        assert seconds(conn) < LATENCY_MS / 1000
        try:
            done = latency.start(single)
            assert done["proxies"] == {"n1": ["client-5432"]}
            assert seconds(conn) >= LATENCY_MS / 1000  # a connection already open, too
        finally:
            latency.stop(single)
        with pytest.raises(psycopg.OperationalError):  # the heal closes the link's connections
            seconds(conn)
    with psycopg.connect(**params(ep), autocommit=True) as conn:
        assert seconds(conn) < LATENCY_MS / 1000
    # a toxic left in place (the harness crashed) goes with the heal of `cluster down`
    latency.start(single)
    healed = nemesis.heal_nodes(single.nodes)
    assert "n1: removed the toxics ['client-5432/harness']" in healed, healed
    with psycopg.connect(**params(ep), autocommit=True) as conn:
        assert seconds(conn) < LATENCY_MS / 1000


def test_limit_data_cuts_the_clients_connection(single: SingleCluster) -> None:
    (ep,) = nemesis.interposed(["toxic"], single, single.endpoints())
    cut = ToxicFault("one", ["n1"], "limit_data", "downstream", {"bytes": 8192})
    big = "SELECT repeat('x', 100000)"
    try:
        cut.start(single)
        conn = psycopg.connect(**params(ep), autocommit=True)
        with conn, pytest.raises(psycopg.OperationalError):
            conn.execute(big).fetchone()
    finally:
        cut.stop(single)
    with psycopg.connect(**params(ep), autocommit=True) as conn:
        assert len(conn.execute(big).fetchone()[0]) == 100000


def test_reset_peer_resets_the_clients_connections(single: SingleCluster) -> None:
    """Open connections are closed when it comes; a new one is reset once it has lived the
    toxic's timeout; after the fault, connections work."""
    (ep,) = nemesis.interposed(["toxic"], single, single.endpoints())
    reset = ToxicFault("one", ["n1"], "reset_peer", "downstream", {"timeout": 1000})
    conn = psycopg.connect(**params(ep), autocommit=True)
    try:
        reset.start(single)
        with conn, pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")
        later = psycopg.connect(**params(ep), autocommit=True)
        began = time.monotonic()
        with later, pytest.raises(psycopg.OperationalError):
            while time.monotonic() - began < 5:
                later.execute("SELECT pg_sleep(0.1)")
        assert time.monotonic() - began >= 0.8
    finally:
        reset.stop(single)
    with psycopg.connect(**params(ep), autocommit=True) as conn:
        assert seconds(conn) < LATENCY_MS / 1000
