"""The confirm/rollback mode of the `safekeeper` cluster, on real Postgres in containers: two
computes and three safekeepers, clients ending their writes with PREPARE TRANSACTION.

A transaction the quorum holds is confirmed and acknowledged; one whose quorum is not collected
within the synchronous timeout is rolled back, the client is told so, and it never becomes
visible, not even after the leader that rolled it back is replaced.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from checkers.cluster_state import inherited_rolled_back
from clusters.docker_backend import DockerBackend
from clusters.kinds import postgres as pg
from clusters.kinds.safekeeper import SK_DATA, WAL_SEGMENT, SafekeeperCluster, decode_log
from nemesis.kill import Kill
from nemesis.pause import Pause
from tests.integration.conftest import eventually
from tests.integration.test_failover import (
    TAKEOVER_WITHIN,
    VALUES,
    direct,
    new_leader,
    node,
    params,
    rows,
    with_table,
)
from tests.integration.test_safekeeper_cluster import TABLE
from workloads.base import Definite
from workloads.confirm_rollback import ROLLED_BACK, prepare_and_wait

pytestmark = pytest.mark.docker

PAGE = 8192  # Postgres's WAL page

SYNCHRO_TIMEOUT = 1.0
# Long enough for the leader to roll back, short enough that its lease (3 s of a silent quorum)
# keeps Postgres up, so the rollback reaches the quorum once the safekeepers wake.
QUORUM_LATE_BY = 1.7


@pytest.fixture(scope="module")
def cluster(docker_backend: DockerBackend, module_cluster_name: str) -> Iterator[SafekeeperCluster]:
    options = {
        "safekeepers": 3,
        "computes": 2,
        "mode": "confirm-rollback",
        "synchro_timeout": SYNCHRO_TIMEOUT,
    }
    yield from with_table(docker_backend, module_cluster_name, options)


def insert_prepared(cluster: SafekeeperCluster, value: int) -> None:
    """A client's write in this mode: PREPARE, then the leader's decision once a quorum holds
    it (raises Definite when it was rolled back)."""
    with psycopg.connect(**params(cluster.endpoints()[0])) as conn:
        conn.execute(f"INSERT INTO {TABLE} VALUES (%s)", (value,))
        prepare_and_wait(conn)


def test_a_write_the_quorum_holds_is_confirmed(cluster: SafekeeperCluster) -> None:
    value = next(VALUES)
    insert_prepared(cluster, value)
    assert value in rows(cluster.endpoints()[0])
    status = cluster.agent_status(node(cluster, cluster.leader() or ""))
    assert status["confirmed"] >= 1 and status["limbo"] == 0


def test_a_write_without_a_quorum_in_time_is_rolled_back_for_good(
    cluster: SafekeeperCluster,
) -> None:
    old = cluster.leader()
    assert old is not None
    late = Pause("majority", [n.name for n in cluster.safekeepers()[:2]])
    value = next(VALUES)
    late.start(cluster)
    threading.Timer(QUORUM_LATE_BY, late.stop, (cluster,)).start()
    started = time.monotonic()
    with pytest.raises(Definite, match=ROLLED_BACK):
        insert_prepared(cluster, value)
    print(f"rolled back and told in {time.monotonic() - started:.1f} s")
    assert value not in rows(cluster.endpoints()[0])
    assert cluster.agent_status(node(cluster, old))["rolled_back"] >= 1
    # the leader that rolled it back is replaced: its successor's WAL holds the rollback
    fault = Kill("primaries", [old])
    fault.start(cluster)
    try:
        leader = eventually(lambda: new_leader(cluster, old), "a takeover", TAKEOVER_WITHIN)
        after = next(VALUES)
        insert_prepared(cluster, after)
    finally:
        fault.stop(cluster)
    kept = rows(direct(node(cluster, leader)))
    assert after in kept and value not in kept, "a rolled-back write became visible"


def confirmed_write(cluster: SafekeeperCluster, attempts: int = 5) -> int:
    """The xid of a write the leader confirmed. With a 1 s synchronous timeout a loaded machine
    (CI runs three workers on two cores) can make the quorum late, and the leader then rightly
    rolls the write back: that is the mode working, so another write is tried."""
    for _ in range(attempts):
        with psycopg.connect(**params(cluster.endpoints()[0])) as conn:
            conn.execute(f"INSERT INTO {TABLE} VALUES (%s)", (next(VALUES),))
            xid = int(conn.execute("SELECT pg_current_xact_id()::text").fetchone()[0])  # type: ignore[index]
            try:
                prepare_and_wait(conn)
            except Definite:
                continue
            return xid
    raise AssertionError(f"{attempts} writes in a row were rolled back: no quorum came in time")


def test_the_committed_log_shows_each_decision_and_the_term_that_wrote_it(
    cluster: SafekeeperCluster,
) -> None:
    xid = confirmed_write(cluster)

    def decided() -> dict[str, Any] | None:
        read = cluster.log_transactions()
        return read if [xid, "commit"] in [[r[2], r[1]] for r in read.get("records", [])] else None

    read = eventually(decided, "the confirmation in the decoded log", 30)
    (prepared,) = [r for r in read["records"] if r[2] == xid and r[1] == "prepare"]
    (confirmed,) = [r for r in read["records"] if r[2] == xid and r[1] == "commit"]
    assert prepared[0] < confirmed[0] and str(prepared[3]).startswith("h-")
    assert read["history"] and read["history"][-1][1] <= prepared[0]  # the current term's
    found, counted = inherited_rolled_back(read)
    assert found == [] and counted["confirmed"] >= 1 and counted["unmatched"] == 0
    # the current primary's Postgres began after the last boundary, before its PREPARE
    began = [r[0] for r in read["records"] if r[1] == "boundary"]
    assert began and began[-1] < prepared[0]
    # A log that begins part-way through a segment and a page reads the same from there on. The
    # cut is two whole pages before a record well inside its segment: after a WAL switch the rest
    # of a segment holds nothing pg_waldump can read, so a cut there would find no record.
    inside = [r for r in read["records"] if r[0] % WAL_SEGMENT > 4 * PAGE]
    assert inside, read["records"]
    target = inside[-1]
    cut = max(read["from_lsn"] + 1, target[0] - 3 * PAGE - 100)
    keeper = next(n for n in cluster.safekeepers() if n.name == read["node"])
    copy = "/tmp/harness-wal-cut"
    try:
        keeper.exec(f"tail -c +{cut - read['from_lsn'] + 1} {SK_DATA}/wal > {copy}")
        again = pg.two_phase_records(decode_log(keeper, copy, cut, read["to_lsn"]))
    finally:
        keeper.exec(f"rm -f {copy}")
    assert target in again and again[0][0] >= cut
    assert again == [r for r in read["records"] if r[0] >= again[0][0]]
