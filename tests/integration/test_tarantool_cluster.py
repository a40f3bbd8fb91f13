"""The `tarantool` cluster kind on Debian's real Tarantool 2.6.0, three nodes in containers: the
workloads' server-side functions through the harness's client, a definite rollback when the
quorum is missing, the dirty read 2.6.0 is known for, failover by the controller, and the clock
fault reaching Tarantool's wall clock.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import tarantool

from checkers.cluster_state import analyse
from checkers.rollback import rolled_back
from clusters.backend import Node
from clusters.docker_backend import DockerBackend
from clusters.kinds.tarantool import DATA_DIR, FAILOVER_AFTER, TarantoolCluster
from core.polls import Round
from nemesis.clock import Clock
from nemesis.kill import Kill
from nemesis.partition import Partition
from nemesis.pause import Pause
from tests.integration.conftest import eventually
from workloads.append import Append
from workloads.bank import Bank
from workloads.base import WorkloadOptions
from workloads.clients import client_for
from workloads.sets import SetWorkload
from workloads.tarantool_client import TarantoolClient

pytestmark = pytest.mark.docker

SYNCHRO_TIMEOUT = 1.0
ELEMENTS = itertools.count(1000)
OPTIONS = WorkloadOptions()


@pytest.fixture(scope="module")
def cluster(docker_backend: DockerBackend, module_cluster_name: str) -> Iterator[TarantoolCluster]:
    kind = TarantoolCluster(
        docker_backend, module_cluster_name, {"instances": 3, "synchro_timeout": SYNCHRO_TIMEOUT}
    )
    kind.deploy(lambda _: None)
    client(kind).setup([SetWorkload(OPTIONS), Bank(OPTIONS), Append(OPTIONS)])
    yield kind


def client(cluster: TarantoolCluster, timeout: float = 10.0) -> TarantoolClient:
    made = client_for(cluster.endpoints()[0], "serializable", timeout)
    assert isinstance(made, TarantoolClient)
    return made


def elements(cluster: TarantoolCluster, on: str | None = None) -> list[int]:
    """The set as node `on` has it (the leader's by default)."""
    if on is None:
        done = client(cluster).run(SetWorkload(OPTIONS), "read", None)
        assert done.type == "ok", done.error
        return done.value
    conn = tarantool.Connection(*node(cluster, on).endpoint(3301), fetch_schema=False)
    try:
        return conn.call("set_read").data[0]
    finally:
        conn.close()


def test_n1_leads_and_the_others_are_read_only_replicas(cluster: TarantoolCluster) -> None:
    assert cluster.leader() == "n1"
    roles = {n.name: cluster.role(n) for n in cluster.nodes}
    assert {name: role["ro"] for name, role in roles.items()} == {
        "n1": False,
        "n2": True,
        "n3": True,
    }
    assert all(role["status"] == "running" for role in roles.values())
    assert cluster.controller_state()["leader"] == "n1"


def committed(c: TarantoolClient, workload: Any, f: str, value: Any) -> Any:
    """The completion of an operation that must commit on a healthy cluster. A write waits at
    most SYNCHRO_TIMEOUT for its quorum, and a machine that stalls the replicas that long makes
    it a definite rollback, which is the right answer then: such an operation is tried again
    (its effect is certainly absent), any other outcome is the test's."""
    for _ in range(3):
        done = c.run(workload, f, value)
        if not (done.type == "fail" and rolled_back(done.error)):
            break
    assert done.type == "ok", done.error
    return done


def test_each_workload_runs_through_the_client_and_replicates(cluster: TarantoolCluster) -> None:
    c = client(cluster)
    sets, bank, append = SetWorkload(OPTIONS), Bank(OPTIONS), Append(OPTIONS)
    element = next(ELEMENTS)
    committed(c, sets, "add", element)
    assert c.node == cluster.leader()
    balances = c.run(bank, "read", None)
    assert balances.type == "ok" and sum(balances.value.values()) == OPTIONS.total
    refused = c.run(bank, "transfer", {"from": 0, "to": 1, "amount": OPTIONS.total + 1})
    assert (refused.type, refused.error) == ("fail", "insufficient funds in account 0")
    committed(c, bank, "transfer", {"from": 0, "to": 1, "amount": 1})
    done = committed(c, append, "txn", [["append", 7, 1], ["append", 7, 2], ["r", 7, None]])
    assert done.value == [["append", 7, 1], ["append", 7, 2], ["r", 7, [1, 2]]]
    c.close()
    # synchronous: acknowledged means a quorum has it; the mesh brings it to every replica
    for node in ("n2", "n3"):
        eventually(lambda n=node: element in elements(cluster, n), f"{element} on {node}")


def quorum_lost(cluster: TarantoolCluster) -> Pause:
    """Both replicas stopped: the leader cannot collect a quorum of 2."""
    fault = Pause("minority", ["n2", "n3"])
    fault.start(cluster)
    return fault


def test_a_write_without_a_quorum_is_a_definite_rollback(cluster: TarantoolCluster) -> None:
    element = next(ELEMENTS)
    fault = quorum_lost(cluster)
    try:
        started = time.monotonic()
        done = client(cluster).run(SetWorkload(OPTIONS), "add", element)
        took = time.monotonic() - started
    finally:
        fault.stop(cluster)
    assert done.type == "fail" and done.error is not None
    assert done.error.startswith("ER 216: ") and rolled_back(done.error), done.error
    assert SYNCHRO_TIMEOUT <= took < SYNCHRO_TIMEOUT + 2
    assert element not in elements(cluster)


def test_a_read_while_a_write_waits_for_its_quorum_sees_it_on_2_6_0(
    cluster: TarantoolCluster,
) -> None:
    """Tarantool issues #5229/#5610: no MVCC, so a write in the limbo is visible. What the
    harness's dirty-read check finds."""
    element = next(ELEMENTS)
    fault = quorum_lost(cluster)
    outcome: dict[str, Any] = {}
    writer = threading.Thread(
        target=lambda: outcome.update(
            done=client(cluster).run(SetWorkload(OPTIONS), "add", element)
        )
    )
    try:
        writer.start()
        seen_while_waiting = eventually(
            lambda: element in elements(cluster), "the waiting write in a read", SYNCHRO_TIMEOUT
        )
        writer.join()
    finally:
        fault.stop(cluster)
    assert seen_while_waiting
    assert outcome["done"].type == "fail" and rolled_back(outcome["done"].error)
    assert element not in elements(cluster)  # and then it was rolled back


def test_the_clock_fault_moves_tarantools_wall_clock(cluster: TarantoolCluster) -> None:
    n2 = cluster.nodes[1]

    def offset() -> float:
        conn = tarantool.Connection(*n2.endpoint(3301), fetch_schema=False)
        try:
            return conn.eval("return require('clock').realtime()").data[0] - time.time()
        finally:
            conn.close()

    assert abs(offset()) < 1
    fault = Clock("bump", "one", ["n2"], 90_000)
    fault.start(cluster)
    try:
        assert abs(offset() - 90) < 2
    finally:
        fault.stop(cluster)
    assert abs(offset()) < 1


def test_a_cut_off_leader_demotes_itself_and_its_clients_move_to_the_new_one(
    cluster: TarantoolCluster,
) -> None:
    old = cluster.leader()
    assert old is not None
    c = client(cluster)
    sets = SetWorkload(OPTIONS)
    committed(c, sets, "add", next(ELEMENTS))
    assert c.node == old
    fault = Partition("primaries", None)  # the leader from everyone, the controller included
    fault.start(cluster)
    try:
        eventually(lambda: cluster.role(node(cluster, old)).get("ro"), f"{old} demoting itself")
        refused = c.run(sets, "add", next(ELEMENTS))
        assert refused.type == "fail" and refused.error.startswith("ER 7: "), refused
        element = next(ELEMENTS)
        done = eventually(
            lambda: (d := c.run(sets, "add", element)).type == "ok" and d,
            "a write through the same client on a new leader",
            FAILOVER_AFTER + 20,
        )
        assert c.node != old and c.node == cluster.leader()
        assert done.value == element
    finally:
        fault.stop(cluster)
        c.close()
    # healed: the old leader stays a replica and catches up
    eventually(lambda: element in elements(cluster, old), f"{old} catching up")
    assert cluster.role(node(cluster, old))["ro"] is True


def node(cluster: TarantoolCluster, name: str) -> Node:
    return next(n for n in cluster.nodes if n.name == name)


def test_the_controller_fails_over_when_the_leader_is_killed(cluster: TarantoolCluster) -> None:
    old = cluster.leader()
    assert old is not None
    fault = Kill("primaries", [old])
    fault.start(cluster)
    try:
        started = time.monotonic()
        leader = eventually(
            lambda: (new := cluster.leader()) != old and new, "a failover", FAILOVER_AFTER + 20
        )
        element = next(ELEMENTS)
        done = eventually(
            lambda: (
                (d := client(cluster).run(SetWorkload(OPTIONS), "add", element)).type == "ok" and d
            ),
            "a write on the new leader",
        )
        print(f"kill to a write on {leader}: {time.monotonic() - started:.1f} s")
        assert done.value == element
        assert cluster.controller_state()["leader"] == leader
    finally:
        fault.stop(cluster)  # the old leader restarts
    restarted = node(cluster, old)
    eventually(lambda: cluster.role(restarted).get("status") == "running", f"{old} back")
    assert cluster.role(restarted)["ro"] is True  # a restarted node never takes writes by itself
    eventually(lambda: element in elements(cluster, old), f"{old} catching up")
    assert cluster.leader() == leader


def test_an_instance_restarted_from_older_files_is_a_vclock_going_back(
    cluster: TarantoolCluster,
) -> None:
    """The cluster-state checker holds Tarantool's vclocks to never going back: a replica that
    acknowledged writes and then restarts, cut off, from a copy of its files taken before them
    has lost them, and the polls say so; the polls before it, with writes going on, do not."""
    leader = cluster.leader()
    names = [n.name for n in cluster.nodes]
    replica = next(n for n in names if n not in (leader, cluster.controller_node.name))
    target, sets, c = node(cluster, replica), SetWorkload(OPTIONS), client(cluster)
    copy = f"{DATA_DIR}.before"
    kill = Kill("one", [replica])
    kill.start(cluster)
    target.exec(f"rm -rf {copy} && cp -a {DATA_DIR} {copy}")
    kill.stop(cluster)
    eventually(lambda: cluster.role(target).get("status") == "running", f"{replica} back")
    rounds = [Round(time=1, nodes=cluster.poll())]
    written = [committed(c, sets, "add", next(ELEMENTS)).value for _ in range(20)]
    eventually(lambda: written[-1] in elements(cluster, replica), f"{replica} applying them")
    rounds.append(Round(time=2, nodes=cluster.poll()))
    assert analyse(rounds, cluster.state_rules)["valid"] is True
    grudge = {n: frozenset(names) - {n} if n == replica else frozenset({replica}) for n in names}
    alone = Partition("one", grudge)
    alone.start(cluster)
    try:
        kill.start(cluster)
        target.exec(f"rm -rf {DATA_DIR} && mv {copy} {DATA_DIR}")
        kill.stop(cluster)
        eventually(lambda: cluster.role(target).get("status") == "running", f"{replica} back")
        # a poll the restarted replica answers (on a loaded machine one may time out on it)
        polled = eventually(lambda: p if replica in (p := cluster.poll()) else None, "its poll")
        rounds.append(Round(time=3, nodes=polled))
    finally:
        alone.stop(cluster)
        c.close()
    result = analyse(rounds, cluster.state_rules)
    assert result["anomaly_types"] == ["vclock-backwards"], result["anomalies"]
    assert f"{replica}'s vclock went back" in result["anomalies"][0]["explanation"]
    eventually(lambda: written[-1] in elements(cluster, replica), f"{replica} catching up")
