"""The `patroni` kind on real nodes: Patroni 4 on three Postgres 15 members with a
synchronous standby, and three etcd servers. Its poll against what Postgres and etcd say, and
its faults by their effects: a switchover moves the leader key and the writes; the primary cut
off from etcd alone is still reached by its clients and its replicas; a killed primary is
replaced once its key expires, and rejoins as a replica when it is started again."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import requests

from checkers.moments import KeyTaken
from clusters.backend import Backend
from clusters.docker_backend import DockerBackend
from clusters.kinds import postgres as pg
from clusters.kinds.patroni import ETCD_PORT, PatroniCluster
from core.polls import COORDINATION, LeaderKeyPoll, PatroniPoll
from nemesis.aimed import Aimed
from nemesis.kill import Kill, KillProcess
from nemesis.partition import PRIMARY_COORDINATORS, REPLICATION, Partition
from nemesis.power import Power
from nemesis.processes import process_table, tree
from nemesis.switchover import Switchover
from nemesis.toxic import ToxicFault
from tests.integration.conftest import eventually
from tests.integration.test_aimed import reaches, running
from tests.integration.test_failover import params
from tests.integration.test_faults import cluster_of

pytestmark = pytest.mark.docker

ETCDS = ("n4", "n5", "n6")
PATCH = Path(__file__).parents[1] / "data" / "patroni_patch"
TTL = 9  # seconds: a failover within a test's patience (Patroni's default is 30)
SETTLES_WITHIN = 120.0  # a liveness bound: a replica rewound or rebuilt and streaming again


@pytest.fixture(scope="module")
def patroni(docker_backend: Backend) -> Iterator[PatroniCluster]:
    """The cluster with its state on the power layer, as `--nemesis all` brings it up, and its
    members reaching etcd through proxies, as a run with `toxic` brings it up; Patroni patched
    with a version module that changes nothing but the version it says."""
    backend = DockerBackend(power=True)
    backend.proxied = True
    options = {"ttl": TTL, "patroni_sync": "on", "patroni_patch": str(PATCH)}
    yield from cluster_of(backend, PatroniCluster, options)


def writable(kind: PatroniCluster) -> list[str]:
    return sorted(n for n, s in kind.poll().items() if isinstance(s, PatroniPoll) and s.writable)


def settled(kind: PatroniCluster) -> str | None:
    """The leader, once it has held the leader key for a whole HA loop, alone taking writes,
    every member running, every other one as a replica and one of them named synchronous
    (strict mode promotes no other: a kill before Patroni names one leaves the cluster without a
    primary, as it should). One read is not enough: right after a fault heals, a leader may
    still hold its key as its next loop finds it lost and stops Postgres to demote."""
    leader = looks_settled(kind)
    if leader is None:
        return None
    time.sleep(TTL // 3)  # loop_wait
    return leader if looks_settled(kind) == leader else None


def looks_settled(kind: PatroniCluster) -> str | None:
    """`settled` as one read shows it."""
    leader = kind.leader_key()  # not the writable member alone: a primary that kept serving
    # while its key expired (failsafe mode, cut off from etcd) is demoted if another takes it
    if leader is None or writable(kind) != [leader] or kind.sync_standby() in (None, leader):
        return None
    states = {n.name: kind.rest(n) for n in kind.members()}
    ready = all(
        s.get("state") == "running" and (name == leader or s.get("role") == "replica")
        for name, s in states.items()
    )
    return leader if ready else None


def test_a_patched_module_runs_in_place_of_patronis_own(patroni: PatroniCluster) -> None:
    said = {n.name: patroni.rest(n).get("patroni", {}).get("version") for n in patroni.members()}
    assert said == {"n1": "4.1.6", "n2": "4.1.6", "n3": "4.1.6"}


def test_the_poll_shows_the_key_holder_alone_taking_writes(patroni: PatroniCluster) -> None:
    polled = patroni.poll()
    key = polled[COORDINATION]
    assert isinstance(key, LeaderKeyPoll) and key.holder == "n1"
    assert writable(patroni) == ["n1"]
    n1 = polled["n1"]
    assert isinstance(n1, PatroniPoll) and n1.role in ("master", "primary")
    assert n1.state == "running" and n1.timeline == 1 and n1.lsn
    for name in ("n2", "n3"):
        s = polled[name]
        assert isinstance(s, PatroniPoll) and s.role == "replica" and s.standby
    assert "n4" not in polled  # etcd servers are no members
    status = patroni.status()
    assert status["leader"] == "n1" and status["nodes"]["n4"] == {"role": "etcd"}
    # synchronous_mode: Patroni names one replica synchronous, and Postgres waits for it
    assert status["sync_standby"] in ("n2", "n3")
    query = "SELECT application_name FROM pg_stat_replication WHERE sync_state = 'sync'"
    assert pg.psql(patroni.nodes[0], query) == status["sync_standby"]


def test_a_switchover_moves_the_leader_key_and_the_writes(patroni: PatroniCluster) -> None:
    old = eventually(lambda: settled(patroni), "one leader, the others replicas", SETTLES_WITHIN)
    before = patroni.poll()[old]
    done = Switchover().start(patroni)
    assert done["leader"] == old and done.get("status") == 200, done
    new = eventually(
        lambda: now if (now := settled(patroni)) not in (None, old) else None,
        "another member leading alone",
        SETTLES_WITHIN,
    )
    after = patroni.poll()[new]
    assert isinstance(before, PatroniPoll) and isinstance(after, PatroniPoll)
    assert (after.timeline or 0) > (before.timeline or 0)


def test_the_primary_cut_off_from_etcd_alone_is_still_reached(patroni: PatroniCluster) -> None:
    leader = eventually(lambda: settled(patroni), "one leader", SETTLES_WITHIN)
    member = next(n.name for n in patroni.members() if n.name != leader)
    fault = Partition(PRIMARY_COORDINATORS, None)
    try:
        fault.start(patroni)
        for etcd in patroni.coordinators():
            assert not reaches(patroni, leader, etcd, ETCD_PORT)
        assert reaches(patroni, member, leader, pg.PORT)  # its replicas still stream from it
        host, port = next(n for n in patroni.members() if n.name == leader).endpoint(pg.PORT)
        with psycopg.connect(host=host, port=port, user=pg.USER, dbname="postgres",
                             connect_timeout=5) as conn:  # fmt: skip
            assert conn.execute("SELECT 1").fetchone() == (1,)  # and so do its clients
    finally:
        fault.stop(patroni)
    assert all(reaches(patroni, leader, e, ETCD_PORT) for e in patroni.coordinators())


def test_the_primary_cut_off_from_its_replicas_keeps_its_key_and_its_clients(
    patroni: PatroniCluster,
) -> None:
    """`partition-replication`: the replicas lose their upstream, and nothing else changes for
    the primary: it still renews its key in etcd past the TTL and its clients still reach it
    (so an asynchronous primary goes on acknowledging what no replica holds)."""
    leader = eventually(lambda: settled(patroni), "one leader", SETTLES_WITHIN)
    replicas = [n.name for n in patroni.members() if n.name != leader]
    fault = Partition(REPLICATION, None)
    try:
        fault.start(patroni)
        for replica in replicas:
            assert not reaches(patroni, replica, leader, pg.PORT)
        assert all(reaches(patroni, leader, e, ETCD_PORT) for e in patroni.coordinators())
        host, port = next(n for n in patroni.members() if n.name == leader).endpoint(pg.PORT)
        with psycopg.connect(host=host, port=port, user=pg.USER, dbname="postgres",
                             connect_timeout=5) as conn:  # fmt: skip
            assert conn.execute("SELECT 1").fetchone() == (1,)
        time.sleep(TTL * 1.5)
        assert patroni.leader_key() == leader
    finally:
        fault.stop(patroni)
    assert all(reaches(patroni, r, leader, pg.PORT) for r in replicas)


def test_a_killed_primary_is_replaced_and_rejoins_as_a_replica(patroni: PatroniCluster) -> None:
    old = eventually(lambda: settled(patroni), "one leader", SETTLES_WITHIN)
    fault = Kill("primaries", None)
    try:
        done = fault.start(patroni)
        assert done["targets"] == [old] and "patroni" in done["killed"][old], done
        eventually(
            lambda: (now := patroni.leader()) not in (None, old) and writable(patroni) == [now],
            "a replica promoted once the key expired",
            SETTLES_WITHIN,
        )
    finally:
        fault.stop(patroni)
    node = next(n for n in patroni.members() if n.name == old)
    eventually(
        lambda: patroni.rest(node).get("role") == "replica",
        f"{old} a replica again",
        SETTLES_WITHIN,
    )
    endpoint = patroni.endpoints()[0]
    with psycopg.connect(**params(endpoint)) as conn:
        assert conn.execute("SELECT pg_is_in_recovery()").fetchone() == (False,)


@pytest.mark.parametrize(
    ("process", "survivor"), [("patroni", "postgres"), ("postgres", "patroni")]
)
def test_a_lone_kill_leaves_the_rest_of_the_node_running(
    patroni: PatroniCluster, process: str, survivor: str
) -> None:
    """Patroni killed on the primary leaves its Postgres serving, without its manager; Postgres
    killed leaves Patroni, which starts it again.

    Judged by pids, not by names: Patroni may start its Postgres again before the processes
    are listed, so the killed process's name can be back while every pid it had is gone."""
    leader = eventually(lambda: settled(patroni), "one leader", SETTLES_WITHIN)
    node = next(n for n in patroni.nodes if n.name == leader)
    patterns = patroni.processes()
    kept = tree(process_table(node), patterns[survivor])
    assert kept, f"no {survivor} running on {leader}"
    fault = KillProcess(process, "primaries", 0.0)
    try:
        done = fault.start(patroni)
        assert done["targets"] == [leader] and done["killed"][leader], done
        procs = process_table(node)
        assert not set(done["killed"][leader]) & {p.pid for p in procs}, done
        assert kept[0] in tree(procs, patterns[survivor]), f"{survivor} was killed too"
    finally:
        fault.stop(patroni)
    eventually(
        lambda: {"patroni", "postgres"} <= set(running(patroni, leader)),
        f"both running again on {leader}",
        SETTLES_WITHIN,
    )


def test_an_aimed_fault_strikes_the_member_that_took_the_leader_key(
    patroni: PatroniCluster,
) -> None:
    """The leader is cut off; once its key expires and another member takes it, that member
    is paused; the fault's stop lets both go, and a leader settles again."""
    old = eventually(lambda: settled(patroni), "one leader", SETTLES_WITHIN)
    fault = Aimed(KeyTaken, ("new-leader",), "partition", "pause", 0.0, 3.0, 0.0)
    try:
        value = fault.start(patroni)
        assert value["provoked"]["target"] == old
        assert value["reached"] and value["roles"]["deposed"] == [old], value
        (new,) = value["roles"]["new-leader"]
        assert new != old and value["strike"]["targets"] == [new]
        assert running(patroni, new)["patroni"].startswith("T")  # stopped
    finally:
        fault.stop(patroni)
    eventually(lambda: settled(patroni), "a leader settled again", SETTLES_WITHIN)


def test_a_timeout_toxic_on_a_members_link_to_etcd_stops_its_contact_until_it_ends(
    patroni: PatroniCluster,
) -> None:
    """Each member's Patroni reaches etcd through proxies on its own node: with its data held
    on that link, a replica stops hearing from etcd (the leader, on its own links, keeps the
    key), and hears again once the toxic is gone."""
    leader = eventually(lambda: settled(patroni), "one leader, the others replicas", SETTLES_WITHIN)
    replica = next(n for n in patroni.members() if n.name != leader)

    def seen() -> float:
        return float(patroni.rest(replica).get("dcs_last_seen") or 0)

    held = ToxicFault("one", [replica.name], "timeout", "upstream", {"timeout": 0}, link="etcd")
    try:
        done = held.start(patroni)
        assert done["proxies"] == {replica.name: [f"etcd-{e}-{ETCD_PORT}" for e in ETCDS]}
        time.sleep(TTL)  # a request already under way when the toxic came gives up
        stalled = seen()
        time.sleep(TTL)  # three of Patroni's loops
        assert seen() == stalled and patroni.leader_key() == leader
    finally:
        held.stop(patroni)
    eventually(lambda: seen() > stalled, f"{replica.name} hearing from etcd again", 3 * TTL)


def test_an_etcd_server_comes_back_from_a_power_fault(patroni: PatroniCluster) -> None:
    """etcd keeps its data off the power layer (its bbolt maps its file, which the layer's
    direct I/O refuses): a power fault on an etcd server is a crash it recovers from."""
    server = patroni.etcds()[0]
    host, port = server.endpoint(ETCD_PORT)

    def healthy() -> bool | None:
        try:
            answer = requests.get(f"http://{host}:{port}/health", timeout=2)
        except requests.RequestException:
            return None
        return (answer.ok and answer.json().get("health") == "true") or None

    fault = Power("one", [server.name])
    assert fault.start(patroni)["targets"] == [server.name]
    assert not healthy()
    fault.stop(patroni)
    eventually(healthy, f"etcd on {server.name} healthy again", 60)
    assert patroni.leader_key() is not None
