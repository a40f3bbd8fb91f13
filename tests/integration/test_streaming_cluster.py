"""The `streaming` cluster kind on real Postgres 15 nodes: a primary and two hot standbys under
synchronous replication, each node's own account in the poll, reads served where the endpoint
sends them, and what `sync` means by its effect: with every standby paused, a COMMIT waits."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from clusters.backend import Backend
from clusters.kinds import postgres as pg
from clusters.kinds.streaming import StreamingCluster
from core.polls import StreamingPoll
from nemesis.pause import Pause
from tests.integration.conftest import eventually
from workloads import build
from workloads.base import WorkloadOptions
from workloads.postgres import PostgresClient

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def streaming(docker_backend: Backend, module_cluster_name: str) -> Iterator[StreamingCluster]:
    options = {"replication": "sync", "read_from": "replicas"}
    kind = StreamingCluster(docker_backend, module_cluster_name, options)
    kind.deploy(lambda msg: None)
    yield kind


def test_the_poll_shows_one_primary_and_standbys_streaming_from_it(
    streaming: StreamingCluster,
) -> None:
    polled = streaming.poll()
    assert sorted(polled) == ["n1", "n2", "n3"]
    n1, n2, n3 = (polled[n] for n in ("n1", "n2", "n3"))
    assert isinstance(n1, StreamingPoll) and n1.writable and not n1.standby
    assert n1.timeline == 1 and n1.lsn
    for s in (n2, n3):
        assert isinstance(s, StreamingPoll) and s.standby and not s.writable
        assert s.timeline == 1 and s.upstream == "n1"
    assert streaming.leader() == "n1"
    status = streaming.status()
    assert status["leader"] == "n1" and status["replication"] == "sync"
    assert [status["nodes"][n]["role"] for n in ("n1", "n2", "n3")] == [
        "primary",
        "standby",
        "standby",
    ]
    assert "/" in status["nodes"]["n2"]["lsn"]  # as Postgres writes a WAL position
    # FIRST 1 (n1, n2, n3): n1 is no standby of itself, so n2 is the synchronous one
    states = pg.psql(
        streaming.nodes[0],
        "SELECT string_agg(application_name || '=' || sync_state, ',' ORDER BY application_name)"
        " FROM pg_stat_replication",
    )
    assert states == "n2=sync,n3=potential"


def test_reads_go_to_the_workers_standby_and_writes_to_the_primary(
    streaming: StreamingCluster,
) -> None:
    (append,) = build(["append"], WorkloadOptions(isolation="repeatable-read"))
    endpoints = streaming.endpoints()
    assert [ep.reads.node for ep in endpoints if ep.reads] == ["n2", "n3"]
    client = PostgresClient.from_endpoint(endpoints[1], "repeatable-read", 5.0)
    try:
        client.setup([append])
        wrote = client.run(append, "txn", [["append", 900, 1]])
        assert (wrote.type, client.node) == ("ok", "n1")

        def read_there() -> bool:
            done = client.run(append, "txn", [["r", 900, None]])
            return done.type == "ok" and done.value == [["r", 900, [1]]]

        # a synchronous standby has flushed the commit, not necessarily replayed it yet
        eventually(read_there, "the append read on a standby")
        assert client.node == "n3"
    finally:
        client.close()


def test_with_every_standby_paused_a_commit_waits_and_its_outcome_is_unknown(
    streaming: StreamingCluster,
) -> None:
    (sets,) = build(["set"], WorkloadOptions())
    writes = streaming.endpoints()[0]
    client = PostgresClient.from_endpoint(writes, "serializable", 3.0)
    pause = Pause("standbys", ["n2", "n3"])
    try:
        client.setup([sets])
        assert client.run(sets, "add", 1).type == "ok"
        pause.start(streaming)
        done = client.run(sets, "add", 2)
        assert done.type == "info", done  # the primary holds it; no standby confirmed it
    finally:
        pause.stop(streaming)
        client.close()
    eventually(lambda: client.run(sets, "add", 3).type == "ok", "a commit once they are back")
    client.close()


def test_a_cancelled_commit_waiting_for_a_standby_returns_ok_with_the_warning(
    streaming: StreamingCluster,
) -> None:
    """Patroni's documented hole (patroni#1412): cancelling a COMMIT that waits for a
    synchronous standby commits it locally, and COMMIT returns success."""
    (sets,) = build(["set"], WorkloadOptions())
    primary = dataclasses.replace(streaming.endpoints()[0], reads=None)  # standbys are paused
    client = PostgresClient.from_endpoint(primary, "serializable", 5.0, cancel_after=1.0)
    pause = Pause("standbys", ["n2", "n3"])
    try:
        client.setup([sets])
        quick = client.run(sets, "add", 10)
        assert (quick.type, quick.warning) == ("ok", None)
        pause.start(streaming)
        done = client.run(sets, "add", 11)
        assert done.type == "ok", done
        assert done.warning and "committed locally" in done.warning, done
        # the primary shows it: acknowledged, though no standby has it
        assert client.run(sets, "read", None).value.count(11) == 1
    finally:
        pause.stop(streaming)
        client.close()


def test_under_quorum_and_remote_apply_one_standby_paused_the_other_answers_and_shows_it(
    docker_backend: Backend, cluster_name: str
) -> None:
    """ANY 1 (…): a commit waits for any one standby, so with n2 paused n3 confirms it; and
    with synchronous_commit remote_apply, n3 has replayed it when COMMIT returns."""
    options = {"replication": "quorum", "synchronous_commit": "remote_apply", "read_from": "any"}
    kind = StreamingCluster(docker_backend, cluster_name, options)
    kind.deploy(lambda msg: None)
    states = pg.psql(kind.nodes[0], "SELECT string_agg(sync_state, ',') FROM pg_stat_replication")
    assert states == "quorum,quorum"
    (sets,) = build(["set"], WorkloadOptions())
    writes, on_n3 = kind.endpoints()[0], kind.endpoints()[2]
    assert on_n3.reads is not None and on_n3.reads.node == "n3"
    client = PostgresClient.from_endpoint(on_n3, "repeatable-read", 5.0)
    pause = Pause("one", ["n2"])
    try:
        PostgresClient.from_endpoint(writes, "serializable", 5.0).setup([sets])
        pause.start(kind)
        for element in range(20):
            assert client.run(sets, "add", element).type == "ok"
            read = client.run(sets, "read", None)
            assert (read.type, client.node) == ("ok", "n3")
            assert element in read.value  # replayed on n3 before COMMIT returned
    finally:
        pause.stop(kind)
        client.close()
