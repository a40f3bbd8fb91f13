"""The `safekeeper` cluster kind under faults, observed through Postgres and the daemons' status.

One cluster for the module: n1 runs Postgres 15 with the proxy as its synchronous standby, n2…n4
run a safekeeper each. A COMMIT returns only once a majority of the safekeepers holds its WAL, so
losing that majority (killed, or cut off by a partition) must hold the COMMIT back, and getting
it back must release it. A client's cancel request does not end the wait: the compute's front
drops it, since Postgres would return COMMIT anyway (with a warning) for a write no quorum
holds. After every test the cluster is healed, its killed daemons restarted, and it must take
commits again.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from clusters.backend import Node, shell_quote
from clusters.kinds.safekeeper import INSTALL, SK_PORT, SafekeeperCluster, daemon_status
from core.endpoint import Endpoint
from nemesis import heal_nodes
from nemesis.kill import Kill
from nemesis.partition import Partition
from nemesis.processes import kill_tree, process_table, tree, wait_gone
from tests.integration.conftest import eventually

pytestmark = pytest.mark.docker

TABLE = "sk_rows"
BLOCKED_FOR = 5.0  # how long a COMMIT without a quorum must stay unanswered
RELEASED_WITHIN = 30.0  # how soon it must return once the quorum is back
VALUES = itertools.count(1)  # unique row values across the module's tests
SEGMENT = 16 << 20  # bytes of a WAL segment


# --- the cluster ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def deployed(safekeeper_cluster: SafekeeperCluster) -> Iterator[SafekeeperCluster]:
    """The module's cluster, with the table the tests write."""
    cluster = safekeeper_cluster
    with connect(cluster.endpoints()[0], autocommit=True) as conn:
        conn.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (x bigint PRIMARY KEY)")
    yield cluster


@pytest.fixture
def cluster(deployed: SafekeeperCluster) -> Iterator[SafekeeperCluster]:
    """The module's cluster, healed and with every daemon running again after the test."""
    yield deployed
    restore(deployed)


@pytest.fixture
def endpoint(deployed: SafekeeperCluster) -> Endpoint:
    return deployed.endpoints()[0]


def running(node: Node, pattern: str) -> bool:
    return bool(tree(process_table(node), pattern))


def all_safekeepers_attached(cluster: SafekeeperCluster) -> bool:
    status = cluster.proxy_status()
    peers = status.get("safekeepers", {})
    expected = {n.name for n in cluster.safekeepers()}
    return (
        bool(status.get("elected"))
        and bool(status.get("serving"))
        and set(peers) == expected
        and all(p["connected"] for p in peers.values())
    )


def restore(cluster: SafekeeperCluster) -> None:
    """Undo whatever a test did: partitions and pauses, killed daemons; then wait until the
    proxy is elected with every safekeeper attached and a commit goes through."""
    heal_nodes(cluster.nodes)
    patterns = cluster.processes()
    compute = cluster.computes()[0]
    for node in cluster.safekeepers():
        if not running(node, patterns["safekeeper"]):
            cluster.start_process(node, "safekeeper")
    if not running(compute, patterns["proxy"]):
        cluster.start_process(compute, "proxy")
    eventually(lambda: all_safekeepers_attached(cluster), "every safekeeper attached", 60)
    commit = PendingCommit(cluster.endpoints()[0], next(VALUES))
    try:
        assert_commit_released(commit, cluster)
    finally:
        commit.abandon()


# --- clients -------------------------------------------------------------------------------


def connect(ep: Endpoint, autocommit: bool) -> psycopg.Connection:
    return psycopg.connect(
        host=ep.host,
        port=ep.port,
        dbname=ep.dbname,
        user=ep.user,
        autocommit=autocommit,
        connect_timeout=5,
    )


def query(ep: Endpoint, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """A read on a connection of its own (read-only, so it never waits for the standby)."""
    with connect(ep, autocommit=True) as conn:
        return conn.execute(sql, params).fetchall()


def visible(ep: Endpoint, value: int) -> bool:
    return bool(query(ep, f"SELECT 1 FROM {TABLE} WHERE x = %s", (value,)))


class PendingCommit:
    """INSERT one row in a transaction, then COMMIT it in a thread of its own, so the test can
    watch whether the COMMIT has returned. Nothing cancels it: a cancelled sync-rep wait would
    return COMMIT anyway; `abandon` terminates the backend instead, which loses the outcome."""

    def __init__(self, ep: Endpoint, value: int) -> None:
        self.ep, self.value = ep, value
        self.conn = connect(ep, autocommit=False)
        self.pid = self.conn.info.backend_pid
        self.conn.execute(f"INSERT INTO {TABLE} VALUES (%s)", (value,))
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._commit, daemon=True)
        self.thread.start()

    def _commit(self) -> None:
        try:
            self.conn.commit()
        except BaseException as e:
            self.error = e
        finally:
            self.done.set()

    def wait(self, timeout: float) -> bool:
        """True once the COMMIT has returned (successfully or not)."""
        return self.done.wait(timeout)

    def wait_event(self) -> str | None:
        """What the committing backend waits for, as pg_stat_activity says."""
        rows = query(self.ep, "SELECT wait_event FROM pg_stat_activity WHERE pid = %s", (self.pid,))
        return rows[0][0] if rows else None

    def abandon(self) -> None:
        """End the COMMIT if it is still waiting (by terminating its backend), and the client."""
        if not self.done.is_set():
            with connect(self.ep, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (self.pid,))
            self.done.wait(10)
        self.conn.close()


def assert_commit_held_back(commit: PendingCommit) -> None:
    """The COMMIT has not returned, its backend waits for the synchronous standby, and no other
    session sees the row yet."""
    assert not commit.wait(BLOCKED_FOR), (
        f"COMMIT returned within {BLOCKED_FOR:g}s without a quorum of safekeepers"
        f" (error: {commit.error!r})"
    )
    assert commit.wait_event() == "SyncRep"
    assert not visible(commit.ep, commit.value)


def assert_commit_released(commit: PendingCommit, cluster: SafekeeperCluster) -> None:
    """The COMMIT returns, successfully, and the row is there for everyone."""
    assert commit.wait(RELEASED_WITHIN), (
        f"COMMIT still waiting {RELEASED_WITHIN:g}s after the quorum came back;"
        f" the proxy says {cluster.proxy_status()}"
    )
    assert commit.error is None, f"COMMIT failed: {commit.error!r}"
    assert visible(commit.ep, commit.value)


def wal_flush_lsn(ep: Endpoint) -> int:
    (text,) = query(ep, "SELECT pg_current_wal_flush_lsn()::text")[0]
    high, low = text.split("/")
    return (int(high, 16) << 32) | int(low, 16)


# --- tests ---------------------------------------------------------------------------------


def test_commit_waits_while_a_majority_of_safekeepers_is_killed(
    cluster: SafekeeperCluster, endpoint: Endpoint
) -> None:
    victims = ["n2", "n3"]
    fault = Kill("majority", victims)
    commit: PendingCommit | None = None
    try:
        value = fault.start(cluster)
        assert {n: sorted(k) for n, k in value["killed"].items()} == {
            "n2": ["safekeeper"],
            "n3": ["safekeeper"],
        }
        pattern = cluster.processes()["safekeeper"]
        assert [running(n, pattern) for n in cluster.safekeepers()] == [False, False, True]
        commit = PendingCommit(endpoint, next(VALUES))
        assert_commit_held_back(commit)
        assert fault.stop(cluster)["restarted"] == {"n2": ["safekeeper"], "n3": ["safekeeper"]}
        assert_commit_released(commit, cluster)
    finally:
        fault.stop(cluster)
        if commit is not None:
            commit.abandon()


def test_commit_waits_while_a_partition_cuts_n1_from_a_majority(
    cluster: SafekeeperCluster, endpoint: Endpoint
) -> None:
    cut, kept = {"n3", "n4"}, "n2"
    grudge = {
        "n1": frozenset(cut),
        "n2": frozenset(),
        **{n: frozenset({"n1"}) for n in cut},
    }
    fault = Partition("grudge", grudge)
    commit: PendingCommit | None = None
    try:
        assert fault.start(cluster)["mechanism"] == "iptables"
        commit = PendingCommit(endpoint, next(VALUES))
        assert_commit_held_back(commit)
        # Not a cluster that stopped altogether: the safekeeper on n1's side holds the WAL the
        # COMMIT waits for, and the proxy's commit LSN stays below it.
        flushed = wal_flush_lsn(endpoint)

        def kept_holds_the_wal() -> bool:
            status = cluster.proxy_status()
            acked = status["safekeepers"][kept]["acked"]
            return acked is not None and acked >= flushed

        eventually(kept_holds_the_wal, f"{kept} holding Postgres's WAL", 15)
        assert cluster.proxy_status()["commit_lsn"] < flushed
        assert not commit.done.is_set()
        assert fault.stop(cluster)["healed"]
        assert_commit_released(commit, cluster)
    finally:
        fault.stop(cluster)
        if commit is not None:
            commit.abandon()


def test_a_cancelled_commit_keeps_waiting_until_the_quorum_holds_it(
    cluster: SafekeeperCluster, endpoint: Endpoint
) -> None:
    """A client's cancel request ends Postgres's wait for a synchronous standby, and COMMIT then
    returns success for a write no quorum holds (FINDINGS.md). The compute's front drops it."""
    cut = {"n3", "n4"}
    grudge = {"n1": frozenset(cut), "n2": frozenset(), **{n: frozenset({"n1"}) for n in cut}}
    fault = Partition("grudge", grudge)
    commit: PendingCommit | None = None
    try:
        fault.start(cluster)
        commit = PendingCommit(endpoint, next(VALUES))
        eventually(lambda: commit.wait_event() == "SyncRep", "the COMMIT waiting", 10)
        commit.conn.cancel_safe(timeout=5)
        assert_commit_held_back(commit)  # neither returned nor visible: the cancel never came
        fault.stop(cluster)
        assert_commit_released(commit, cluster)
    finally:
        fault.stop(cluster)
        if commit is not None:
            commit.abandon()


def test_a_restarted_proxy_is_elected_in_a_higher_term(
    cluster: SafekeeperCluster, endpoint: Endpoint
) -> None:
    compute = cluster.computes()[0]
    pattern = cluster.processes()["proxy"]
    before = cluster.proxy_status()
    assert before.get("elected"), before
    pids = kill_tree(compute, pattern)
    assert pids
    wait_gone(compute, pids)
    assert cluster.proxy_status() == {}  # nothing answers on the proxy's port
    cluster.start_process(compute, "proxy")

    def elected_again() -> dict[str, Any] | None:
        status = cluster.proxy_status()
        return status if status.get("elected") and status.get("serving") else None

    after = eventually(elected_again, "a new election of the restarted proxy", 60)
    assert after["term"] > before["term"], (before["term"], after["term"])
    assert after["proposer"] != before["proposer"]
    terms = [daemon_status(n, SK_PORT).get("term") for n in cluster.safekeepers()]
    assert sum(t == after["term"] for t in terms) >= 2, terms  # a quorum voted in the new term
    commit = PendingCommit(endpoint, next(VALUES))
    try:
        assert_commit_released(commit, cluster)
    finally:
        commit.abandon()


def test_no_acknowledged_insert_is_lost_while_safekeepers_are_killed_in_turn(
    cluster: SafekeeperCluster, endpoint: Endpoint
) -> None:
    rng = random.Random(4)
    acked: list[tuple[int, float, float]] = []  # value, invoked, returned ok
    failures: list[tuple[int, BaseException]] = []
    stop = threading.Event()
    first = next(VALUES) * 1_000_000  # far above what the other tests insert

    def write() -> None:
        value = first
        try:
            with connect(endpoint, autocommit=True) as conn:
                while not stop.is_set():
                    invoked = time.monotonic()
                    conn.execute(f"INSERT INTO {TABLE} VALUES (%s)", (value,))
                    acked.append((value, invoked, time.monotonic()))
                    value += 1
        except psycopg.Error as e:  # Postgres is never touched: nothing should fail
            failures.append((value, e))

    writer = threading.Thread(target=write, daemon=True)
    windows: list[tuple[str, float, float]] = []  # safekeeper, down since, until
    names = [n.name for n in cluster.safekeepers()]
    fault: Kill | None = None
    writer.start()
    try:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and writer.is_alive():
            cycle = time.monotonic()
            victim = rng.choice(names)
            fault = Kill("one", [victim])
            killed = fault.start(cluster)["killed"]
            down = time.monotonic()
            assert {n: sorted(k) for n, k in killed.items()} == {victim: ["safekeeper"]}
            time.sleep(rng.uniform(1, 2))
            up = time.monotonic()
            fault.stop(cluster)
            windows.append((victim, down, up))
            time.sleep(max(0.0, cycle + 3 - time.monotonic()))
    finally:
        stop.set()
        try:
            if fault is not None:
                fault.stop(cluster)
        finally:
            writer.join(RELEASED_WITHIN)
            stuck = writer.is_alive()
            if stuck:  # a COMMIT that never returned: end it so the thread and the test finish
                query(
                    endpoint,
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE query LIKE %s AND pid <> pg_backend_pid()",
                    (f"INSERT INTO {TABLE}%",),
                )
                writer.join(10)
    assert not stuck, f"an INSERT was still waiting {RELEASED_WITHIN:g}s after the last restart"
    assert not failures, failures
    assert len(windows) >= 8, f"only {len(windows)} kills in 40s"
    # Not vacuous: inserts that began after a kill and were acknowledged before the restart, in
    # most of the windows (the safekeeper restarted just before may still be catching up).
    inside = [[v for v, s, e in acked if d <= s and e <= u] for _, d, u in windows]
    assert sum(map(len, inside)) >= 10 and sum(1 for i in inside if i) >= len(windows) // 2, (
        f"inserts acknowledged during each kill: {[len(i) for i in inside]}"
    )
    present = {x for (x,) in query(endpoint, f"SELECT x FROM {TABLE} WHERE x >= %s", (first,))}
    lost = sorted({v for v, _, _ in acked} - present)
    assert not lost, f"{len(lost)} of {len(acked)} acknowledged inserts lost: {lost[:20]}"
    # The safekeepers killed along the way catch up with the WAL written meanwhile.
    flushed = wal_flush_lsn(endpoint)
    eventually(
        lambda: all(
            daemon_status(n, SK_PORT).get("flush_lsn", 0) >= flushed for n in cluster.safekeepers()
        ),
        "every safekeeper catching up with Postgres's WAL",
        30,
    )


def test_a_wal_switch_ships_the_segments_rest_to_the_safekeepers(
    cluster: SafekeeperCluster, endpoint: Endpoint
) -> None:
    """`switch_wal`, which seed 001's fault uses to give a tail its length: the switch ends the
    segment, and every safekeeper's WAL then reaches the next segment's start."""
    with connect(endpoint, autocommit=True) as conn:
        conn.execute(f"INSERT INTO {TABLE} VALUES (%s)", (next(VALUES),))  # WAL to switch from
    boundary = (wal_flush_lsn(endpoint) // SEGMENT + 1) * SEGMENT
    cluster.switch_wal(cluster.computes()[0].name)
    eventually(
        lambda: all(
            daemon_status(n, SK_PORT).get("flush_lsn", 0) >= boundary for n in cluster.safekeepers()
        ),
        f"every safekeeper's WAL past the segment's end {boundary:#x}",
    )


def test_a_stream_postgres_refuses_is_a_stream_error_on_the_nodes_psycopg(
    cluster: SafekeeperCluster,
) -> None:
    """The daemons run on the nodes' psycopg (Debian's, older than the harness's): a refused
    connection must raise the stream's own error, which the agent handles, not an
    AttributeError of an API the nodes' psycopg lacks (seen: `get_error_message`, named by the
    logs checker as a programming error of the compute)."""
    script = (
        "from walkeeper.pgstream import PgStream, StreamError\n"
        "try:\n    PgStream('host=127.0.0.1 port=1 connect_timeout=2')\n"
        "except StreamError as e:\n    print('StreamError:', e)\n"
    )
    node = cluster.computes()[0]
    done = node.exec(f"env PYTHONPATH={INSTALL} python3 -c {shell_quote(script)}", check=False)
    assert done.output.startswith("StreamError:"), done.output
