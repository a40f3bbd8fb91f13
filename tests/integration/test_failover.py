"""Failover in the `safekeeper` cluster, on real Postgres in containers: two computes (a primary
and a standby replaying the safekeepers' WAL) and three safekeepers.

Killing the primary moves the term to the standby, which serves every acknowledged commit; the
old primary comes back as a standby holding exactly the new primary's data. An isolated primary
cannot acknowledge a commit once the new term is elected, and its unacknowledged commit is gone
after it rejoins. A paused primary, woken after the new term committed, answers no query that
waited in its socket from the state it was paused in.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest

from clusters.backend import Node
from clusters.docker_backend import DockerBackend
from clusters.kinds import postgres as pg
from clusters.kinds.safekeeper import SafekeeperCluster
from core.endpoint import Endpoint
from nemesis import heal_nodes
from nemesis.kill import Kill
from nemesis.partition import Partition
from nemesis.pause import Pause
from tests.integration.conftest import eventually
from tests.integration.test_safekeeper_cluster import TABLE, PendingCommit

pytestmark = pytest.mark.docker

VALUES = itertools.count(1_000_000)  # apart from the other module's values
TAKEOVER_WITHIN = 60.0  # a liveness bound, far above the 5 s the standby waits before it acts


@pytest.fixture(scope="module")
def cluster(docker_backend: DockerBackend, module_cluster_name: str) -> Iterator[SafekeeperCluster]:
    yield from with_table(docker_backend, module_cluster_name, {"safekeepers": 3, "computes": 2})


def with_table(
    backend: DockerBackend, name: str, options: dict[str, object]
) -> Iterator[SafekeeperCluster]:
    """A deployed cluster with the test table, healed of any fault afterwards."""
    cluster = SafekeeperCluster(backend, name, options)
    cluster.deploy(lambda msg: None)
    with psycopg.connect(**params(cluster.endpoints()[0]), autocommit=True) as conn:
        conn.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (x bigint PRIMARY KEY)")
    yield cluster
    heal_nodes(cluster.nodes)


def params(ep: Endpoint) -> dict[str, object]:
    return {
        "host": ep.host,
        "port": ep.port,
        "dbname": ep.dbname,
        "user": ep.user,
        "target_session_attrs": ep.target_session_attrs,
        "connect_timeout": 3,
    }


def direct(node: Node) -> Endpoint:
    """One compute's own Postgres, whatever its role."""
    host, port = node.endpoint(pg.PORT)
    return Endpoint(node.name, host, port, pg.DBNAME, pg.USER)


def insert(ep: Endpoint) -> int:
    value = next(VALUES)
    with psycopg.connect(**params(ep), autocommit=True) as conn:
        conn.execute(f"INSERT INTO {TABLE} VALUES (%s)", (value,))
    return value


def rows(ep: Endpoint) -> list[int]:
    with psycopg.connect(**params(ep), autocommit=True) as conn:
        return [r[0] for r in conn.execute(f"SELECT x FROM {TABLE} ORDER BY x").fetchall()]


def node(cluster: SafekeeperCluster, name: str) -> Node:
    return next(n for n in cluster.computes() if n.name == name)


def new_leader(cluster: SafekeeperCluster, old: str) -> str | None:
    """The compute that took over from `old`, once it serves (its gate opens only when the
    quorum holds everything its Postgres wrote)."""
    leader = cluster.leader()
    if leader in (None, old) or not cluster.agent_status(node(cluster, leader)).get("serving"):
        return None
    return leader


def rejoined_with(cluster: SafekeeperCluster, old: Node, leader: Node) -> list[int] | None:
    """The old primary's rows once it is a standby again holding the new primary's rows."""
    if cluster.agent_status(old).get("role") != "standby":
        return None
    theirs, ours = rows(direct(leader)), local_rows(old)
    return ours if ours == theirs else None


def local_rows(n: Node) -> list[int]:
    """A compute's rows read on the node itself: a standby admits no remote client."""
    out = pg.psql(n, f"SELECT x FROM {TABLE} ORDER BY x")
    return [int(line) for line in out.split()]


def test_a_killed_primary_is_replaced_and_rejoins_as_a_standby(
    cluster: SafekeeperCluster,
) -> None:
    ep = cluster.endpoints()[0]
    old = cluster.leader()
    assert old is not None
    acked = [insert(ep) for _ in range(20)]
    fault = Kill("primaries", [old])
    fault.start(cluster)
    killed_at = time.monotonic()
    try:
        leader = eventually(lambda: new_leader(cluster, old), "a takeover", TAKEOVER_WITHIN)
        insert(ep)  # clients find the new primary by themselves
        print(f"failover: {time.monotonic() - killed_at:.1f} s from the kill to a commit")
        assert set(acked) <= set(rows(ep)), "an acknowledged commit vanished in the failover"
    finally:
        fault.stop(cluster)
    after = insert(ep)
    kept = eventually(
        lambda: rejoined_with(cluster, node(cluster, old), node(cluster, leader)),
        f"{old} back as a standby with {leader}'s data",
        120,
    )
    assert after in kept and set(acked) <= set(kept)


def test_an_isolated_primary_acknowledges_nothing_after_the_new_term(
    cluster: SafekeeperCluster,
) -> None:
    old = cluster.leader()
    assert old is not None
    others = [n.name for n in cluster.nodes if n.name != old]
    grudge = {old: frozenset(others), **{n: frozenset({old}) for n in others}}
    fault = Partition("grudge", grudge)
    commit: PendingCommit | None = None
    fault.start(cluster)
    try:
        commit = PendingCommit(direct(node(cluster, old)), next(VALUES))
        leader = eventually(lambda: new_leader(cluster, old), "a takeover", TAKEOVER_WITHIN)
        insert(cluster.endpoints()[0])
        # the new term is elected: the old primary's commit has not been acknowledged (its
        # lease ran out first, so its Postgres stopped and the commit failed, or it still waits)
        assert not commit.done.is_set() or commit.error is not None, "acknowledged after all"
    finally:
        fault.stop(cluster)
    assert commit.wait(60), "the old primary's commit never ended after the partition healed"
    assert commit.error is not None, "the deposed primary acknowledged a commit"
    kept = eventually(
        lambda: rejoined_with(cluster, node(cluster, old), node(cluster, leader)),
        f"{old} back as a standby with {leader}'s data",
        120,
    )
    assert commit.value not in kept


def test_a_woken_primary_answers_no_query_from_before_the_new_term(
    cluster: SafekeeperCluster,
) -> None:
    """The interleaving of FINDINGS' reference-cluster entry 2: a session open on the primary,
    the primary paused, a new term that commits, a query sent to the old primary while it is
    stopped; woken, it must not answer that query from the state it was paused in."""
    old = cluster.leader()
    assert old is not None
    session = psycopg.connect(**params(direct(node(cluster, old))), autocommit=True)
    answer: dict[str, object] = {}

    def read() -> None:
        try:
            answer["rows"] = [r[0] for r in session.execute(f"SELECT x FROM {TABLE}").fetchall()]
        except psycopg.Error as e:
            answer["error"] = e

    fault = Pause("primaries", [old])
    fault.start(cluster)
    try:
        leader = eventually(lambda: new_leader(cluster, old), "a takeover", TAKEOVER_WITHIN)
        value = insert(cluster.endpoints()[0])
        reader = threading.Thread(target=read, daemon=True)
        reader.start()  # its query waits in the stopped primary's socket
        time.sleep(1)
    finally:
        fault.stop(cluster)
    reader.join(30)
    session.close()
    assert answer, "the woken primary neither answered nor ended the session"
    if "rows" in answer:
        assert value in answer["rows"], f"{old}, woken, served a read from before the new term"
    kept = eventually(
        lambda: rejoined_with(cluster, node(cluster, old), node(cluster, leader)),
        f"{old} back as a standby with {leader}'s data",
        120,
    )
    assert value in kept
