"""The `repmgr` kind on real nodes: repmgr 5.3's repmgrd on three members and a witness, at 2 ×
2 s of reconnection. Its poll against what each Postgres and each copy of repmgr's table say,
and its faults by their effects: a kill of repmgrd alone leaves its Postgres serving; the
witness cut off leaves the clients' traffic to the primary flowing and promotes no one; a kill
of the primary promotes a standby, and the kill's end brings the old primary back as a standby
of the new one, not as a second primary; the primary crashed and started again as it was, after
the failover, takes writes beside the new one (repmgr fences nothing by default), and that
fault's end brings it back as the new primary's standby."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator

import psycopg
import pytest

from clusters.backend import Backend
from clusters.kinds import postgres as pg
from clusters.kinds.repmgr import RepmgrCluster, RepmgrPoll, WitnessPoll
from nemesis import grudges
from nemesis.kill import Kill
from nemesis.partition import Partition
from nemesis.processes import process_table, tree
from nemesis.restart_deposed import RestartDeposed
from tests.integration.conftest import eventually, kill_manager_alone
from tests.integration.test_aimed import reaches
from tests.integration.test_failover import params
from tests.integration.test_faults import cluster_of

pytestmark = pytest.mark.docker

ATTEMPTS, INTERVAL = 2, 2  # a failover within about 15 s
SETTLES_WITHIN = 120.0  # a liveness bound: one primary, every other member streaming from it


@pytest.fixture(scope="module")
def repmgr(docker_backend: Backend) -> Iterator[RepmgrCluster]:
    yield from cluster_of(docker_backend, RepmgrCluster, {
        "members": 3, "witness": "on", "repmgr_fencing": "none", "replication": "async",
        "reconnect_attempts": ATTEMPTS, "reconnect_interval": INTERVAL, "read_from": "primary",
    })  # fmt: skip


def settled(kind: RepmgrCluster) -> str | None:
    """The primary, once it alone takes writes, every other member streams from it, and every
    copy of repmgr's table (the witness's too) names it as the one active primary."""
    polled = kind.poll()
    members = [polled.get(n.name) for n in kind.members()]
    if not all(isinstance(s, RepmgrPoll) for s in members):
        return None
    writable = [n.name for n, s in zip(kind.members(), members, strict=True) if s and s.leads()]
    if len(writable) != 1:
        return None
    primary = writable[0]
    followers = [s for n, s in zip(kind.members(), members, strict=True) if n.name != primary]
    witness = polled.get(kind.witness().name)  # type: ignore[union-attr]
    views = [s.primary_seen for s in members if s] + [getattr(witness, "primary_seen", None)]
    ok = all(s and s.upstream == primary for s in followers) and all(v == (primary,) for v in views)
    return primary if ok else None


def told(kind: RepmgrCluster) -> Callable[[], str]:
    """What a failed wait adds: the kind's status, and the end of each node's repmgr log."""

    def why() -> str:
        tails = [
            f"--- {n.name}\n" + n.exec(f"tail -n 15 {pg.LOG_DIR}/repmgr.log", check=False).output
            for n in kind.nodes
        ]
        return "\n" + json.dumps(kind.status(), indent=1) + "\n" + "\n".join(tails)

    return why


def write(kind: RepmgrCluster) -> None:
    """One commit through the members' connection string, as an application makes it."""
    with psycopg.connect(**params(kind.endpoints()[0])) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS probe (at float8)")
        conn.execute("INSERT INTO probe VALUES (%s)", (time.time(),))


def test_the_poll_shows_one_primary_its_standbys_and_the_witness_agreeing(
    repmgr: RepmgrCluster,
) -> None:
    primary = eventually(lambda: settled(repmgr), "a settled cluster", SETTLES_WITHIN, told(repmgr))
    assert primary == "n1"  # registered first, and nothing has failed yet
    polled = repmgr.poll()
    for name in ("n1", "n2", "n3"):
        s = polled[name]
        assert isinstance(s, RepmgrPoll) and s.active
        assert s.registered == ("primary" if name == primary else "standby")
    assert isinstance(polled["n4"], WitnessPoll)
    status = repmgr.status()
    assert status["leader"] == primary and status["nodes"]["n4"]["role"] == "witness"
    write(repmgr)


def test_a_kill_of_repmgrd_alone_leaves_its_postgres_serving(repmgr: RepmgrCluster) -> None:
    primary = eventually(lambda: settled(repmgr), "a settled cluster", SETTLES_WITHIN, told(repmgr))
    kill_manager_alone(repmgr, "repmgrd", primary, lambda: write(repmgr))
    node = next(n for n in repmgr.members() if n.name == primary)
    assert tree(process_table(node), repmgr.processes()["repmgrd"]), "repmgrd not started again"
    again = eventually(lambda: settled(repmgr), "settled again", SETTLES_WITHIN, told(repmgr))
    assert again == primary


def test_the_witness_cut_off_leaves_the_clients_traffic_to_the_primary_flowing(
    repmgr: RepmgrCluster,
) -> None:
    """Past the reconnection attempts: the standbys still see the primary, so no one is
    promoted, and commits go on."""
    primary = eventually(lambda: settled(repmgr), "a settled cluster", SETTLES_WITHIN, told(repmgr))
    witness = repmgr.coordinators()[0]
    fault = Partition("witness", grudges.isolate([n.name for n in repmgr.nodes], [witness]))
    try:
        fault.start(repmgr)
        assert not reaches(repmgr, primary, witness, pg.PORT)
        for _ in range(3 * ATTEMPTS * INTERVAL):
            write(repmgr)
            time.sleep(1)
        assert repmgr.leader() == primary
    finally:
        fault.stop(repmgr)
    again = eventually(lambda: settled(repmgr), "settled again", SETTLES_WITHIN, told(repmgr))
    assert again == primary


def test_a_killed_primary_is_replaced_and_comes_back_as_a_standby(repmgr: RepmgrCluster) -> None:
    old = eventually(lambda: settled(repmgr), "a settled cluster", SETTLES_WITHIN, told(repmgr))
    timeline = repmgr.poll()[old].led_term()  # type: ignore[attr-defined]
    fault = Kill("primaries", None)
    try:
        done = fault.start(repmgr)
        assert done["targets"] == [old], done
        new = eventually(
            lambda: (n := repmgr.leader()) != old and n,
            "a standby promoted",
            SETTLES_WITHIN,
            told(repmgr),
        )
        write(repmgr)
    finally:
        fault.stop(repmgr)
    assert eventually(lambda: settled(repmgr), "settled again", SETTLES_WITHIN, told(repmgr)) == new
    back = repmgr.poll()[old]
    assert isinstance(back, RepmgrPoll) and back.standby and back.upstream == new
    assert back.timeline is not None and timeline is not None and back.timeline > timeline


def test_a_deposed_primary_started_as_it_was_takes_writes_beside_the_new_one(
    repmgr: RepmgrCluster,
) -> None:
    old = eventually(lambda: settled(repmgr), "a settled cluster", SETTLES_WITHIN, told(repmgr))
    fault = RestartDeposed()
    try:
        done = fault.start(repmgr)
        new = done["promoted"]
        assert done["deposed"] == old and new not in (None, old), done
        polled = repmgr.poll()
        both = [n for n in (old, new) if (s := polled.get(n)) is not None and s.leads()]
        assert both == [old, new], f"not two writable members: {polled}"
    finally:
        fault.stop(repmgr)
    assert eventually(lambda: settled(repmgr), "settled again", SETTLES_WITHIN, told(repmgr)) == new
    back = repmgr.poll()[old]
    assert isinstance(back, RepmgrPoll) and back.standby and back.upstream == new
