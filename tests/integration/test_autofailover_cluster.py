"""The `autofailover` kind on real nodes: pg_auto_failover 2.0's monitor and three keepers, at a
6 s partition timeout. Its poll against what the monitor and each Postgres say, and its faults
by their effects: the monitor cut off leaves the clients' traffic to the primary flowing; a
kill of the keeper alone leaves its Postgres serving; a switchover moves the primary."""

from __future__ import annotations

import time
from collections.abc import Iterator

import psycopg
import pytest

from clusters.backend import Backend
from clusters.kinds import postgres as pg
from clusters.kinds.autofailover import AutofailoverCluster, KeeperPoll, MonitorPoll
from core.polls import COORDINATION
from nemesis import grudges
from nemesis.partition import WITH_UNPROMOTABLE, Partition
from nemesis.switchover import Switchover
from tests.integration.conftest import eventually, kill_manager_alone
from tests.integration.test_aimed import reaches, running
from tests.integration.test_failover import params
from tests.integration.test_faults import cluster_of

pytestmark = pytest.mark.docker

TIMEOUT = 6  # seconds of the partition timeout: a failover within about 20 s
SETTLES_WITHIN = 120.0  # a liveness bound: a primary and every standby in secondary again


@pytest.fixture(scope="module")
def autofailover(docker_backend: Backend) -> Iterator[AutofailoverCluster]:
    """n3 never promoted (priority 0), as users keep a standby for reports or backups."""
    yield from cluster_of(docker_backend, AutofailoverCluster, {
        "members": 3, "partition_timeout": TIMEOUT, "read_from": "primary",
        "candidate_priority": "n3=0", "replication_quorum": "", "number_sync_standbys": None,
    })  # fmt: skip


def settled(kind: AutofailoverCluster) -> str | None:
    """The primary, once every member reports the goal the monitor gave it, one of them a
    primary, the others secondaries, and the primary alone takes writes."""
    if not kind._settled(len(kind.members())):
        return None
    primary = kind.leader()
    polled = kind.poll()
    writable = [n for n, s in polled.items() if isinstance(s, KeeperPoll) and s.writable]
    return primary if writable == [primary] else None


def write(kind: AutofailoverCluster) -> None:
    """One commit through the formation's URI, as an application makes it."""
    with psycopg.connect(**params(kind.endpoints()[0])) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS probe (at float8)")
        conn.execute("INSERT INTO probe VALUES (%s)", (time.time(),))


def test_the_poll_shows_the_monitors_primary_alone_taking_writes(
    autofailover: AutofailoverCluster,
) -> None:
    primary = eventually(lambda: settled(autofailover), "a settled formation", SETTLES_WITHIN)
    polled = autofailover.poll()
    monitor = polled[COORDINATION]
    assert isinstance(monitor, MonitorPoll) and monitor.primary == primary
    assert sorted(monitor.nodes) == ["n1", "n2", "n3"]  # the monitor's node is no member
    for name in ("n1", "n2", "n3"):
        s = polled[name]
        assert isinstance(s, KeeperPoll) and s.reported == s.goal
        assert s.writable == (name == primary) and s.standby == (name != primary)
    status = autofailover.status()
    assert status["leader"] == primary and status["nodes"]["n4"] == {"role": "monitor"}
    # two quorum standbys: the monitor asks for one of them on every commit
    standbys = pg.psql(autofailover.nodes[int(primary[1:]) - 1], "SHOW synchronous_standby_names")
    assert standbys.startswith("ANY 1 (")


def test_the_monitor_cut_off_leaves_the_clients_traffic_to_the_primary_flowing(
    autofailover: AutofailoverCluster,
) -> None:
    """Past the partition timeout: the primary still has its standbys, so it does not stop
    itself, and commits go on."""
    primary = eventually(lambda: settled(autofailover), "a settled formation", SETTLES_WITHIN)
    monitor = autofailover.monitor().name
    fault = Partition("monitor", grudges.isolate([n.name for n in autofailover.nodes], [monitor]))
    try:
        fault.start(autofailover)
        assert not reaches(autofailover, primary, monitor, pg.PORT)
        for _ in range(2 * TIMEOUT):
            write(autofailover)
            time.sleep(1)
        assert autofailover.table() is not None  # the harness itself still reaches it
    finally:
        fault.stop(autofailover)
    assert eventually(lambda: settled(autofailover), "settled again", SETTLES_WITHIN) == primary


def test_the_primary_is_cut_off_with_the_member_never_promoted(
    autofailover: AutofailoverCluster,
) -> None:
    """`partition-unpromotable`: the primary keeps n3 (priority 0), which still streams from it,
    and loses the monitor and the one standby the monitor may promote."""
    primary = eventually(lambda: settled(autofailover), "a settled formation", SETTLES_WITHIN)
    assert autofailover.unpromotable() == ["n3"]
    if primary == "n3":
        pytest.skip("n3 leads: a member of priority 0 is never promoted, so it led from the start")
    other = next(n.name for n in autofailover.members() if n.name not in (primary, "n3"))
    monitor = autofailover.monitor().name
    fault = Partition(WITH_UNPROMOTABLE, None)
    try:
        fault.start(autofailover)
        assert reaches(autofailover, "n3", primary, pg.PORT)
        assert not reaches(autofailover, other, primary, pg.PORT)
        assert not reaches(autofailover, primary, monitor, pg.PORT)
        assert reaches(autofailover, other, monitor, pg.PORT)
    finally:
        fault.stop(autofailover)
    eventually(lambda: settled(autofailover), "settled again", SETTLES_WITHIN)


def test_a_kill_of_the_keeper_alone_leaves_its_postgres_serving(
    autofailover: AutofailoverCluster,
) -> None:
    primary = eventually(lambda: settled(autofailover), "a settled formation", SETTLES_WITHIN)
    kill_manager_alone(autofailover, "keeper", primary, lambda: write(autofailover))
    eventually(
        lambda: {"keeper", "postgres"} <= set(running(autofailover, primary)),
        f"the keeper running again on {primary}",
        SETTLES_WITHIN,
    )


def test_a_switchover_moves_the_primary(autofailover: AutofailoverCluster) -> None:
    old = eventually(lambda: settled(autofailover), "a settled formation", SETTLES_WITHIN)
    done = Switchover().start(autofailover)
    assert done["leader"] == old and done["status"] == 0, done
    new = eventually(
        lambda: now if (now := settled(autofailover)) not in (None, old) else None,
        "another member the primary, and the old one a secondary",
        SETTLES_WITHIN,
    )
    write(autofailover)
    polled = autofailover.poll()
    before, after = polled[old], polled[new]
    assert isinstance(before, KeeperPoll) and isinstance(after, KeeperPoll)
    assert before.standby and after.writable and (after.timeline or 0) > 1
