"""The aimed nemesis on a real safekeeper cluster (two computes, three safekeepers), tested by
its effects: it brings the moment about, sees it in the cluster's own polls, and the role it
names is struck (its processes gone, or stopped), while the provocation still holds (the deposed
primary cannot reach the safekeepers); its stop undoes both."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest

from checkers.moments import CatchUp, LeaseEnding, Rebuild, Takeover, TermWon
from clusters.docker_backend import DockerBackend
from clusters.kinds.safekeeper import SK_PORT, SafekeeperCluster
from core.polls import SafekeeperPoll
from nemesis.aimed import Aimed, Then
from nemesis.processes import process_table, tree
from tests.integration.conftest import eventually
from tests.integration.test_failover import params, with_table

pytestmark = pytest.mark.docker

PADDED = "aimed_rows"
SERVES_WITHIN = 120.0  # a liveness bound after the fault's stop: a takeover and a rebuild


@pytest.fixture(scope="module")
def cluster(docker_backend: DockerBackend, module_cluster_name: str) -> Iterator[SafekeeperCluster]:
    yield from with_table(docker_backend, module_cluster_name, {"safekeepers": 3, "computes": 2})


def running(cluster: SafekeeperCluster, name: str) -> dict[str, str]:
    """Each of the kind's processes that runs on node `name`, with its state (T: stopped)."""
    node = next(n for n in cluster.nodes if n.name == name)
    procs = process_table(node)
    found = {}
    for process, pattern in cluster.processes().items():
        if pids := tree(procs, pattern):
            found[process] = next(p.state for p in procs if p.pid == pids[0])
    return found


def reaches(cluster: SafekeeperCluster, source: str, target: str, port: int) -> bool:
    node = next(n for n in cluster.nodes if n.name == source)
    probe = f"timeout 3 bash -c 'exec 3<>/dev/tcp/{target}/{port}'"
    return node.exec(probe, check=False).code == 0


def serving(cluster: SafekeeperCluster) -> str | None:
    leader = cluster.leader()
    node = next((n for n in cluster.computes() if n.name == leader), None)
    return leader if node and cluster.agent_status(node).get("serving") else None


def settled(cluster: SafekeeperCluster) -> str | None:
    """The serving compute, once every other compute is a consistent standby that could stand
    in a term (after an earlier test's kill, one may still be rebuilding)."""
    leader = serving(cluster)
    others = [cluster.agent_status(n) for n in cluster.computes() if n.name != leader]
    ready = all(a.get("role") == "standby" and a.get("consistent") for a in others)
    return leader if ready else None


class Writer:
    """A client inserting rows one after another, as a workload would (errors while the
    cluster fails over are expected and passed over). Each row carries PADDING bytes, so that
    a safekeeper cut off for seconds falls well behind the commit even on a loaded machine."""

    PADDING = 4096

    def __init__(self, cluster: SafekeeperCluster) -> None:
        self.ep = cluster.endpoints()[0]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.acked = 0

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                with psycopg.connect(**params(self.ep), autocommit=True) as conn:
                    conn.execute(f"CREATE TABLE IF NOT EXISTS {PADDED} (pad text)")
                    while not self.stop.is_set():
                        pad = secrets.token_hex(self.PADDING // 2)  # Postgres compresses no LZ run
                        conn.execute(f"INSERT INTO {PADDED} VALUES (%s)", (pad,))
                        self.acked += 1
            except psycopg.Error:
                time.sleep(0.2)

    def __enter__(self) -> Writer:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(10)


def test_a_term_won_strikes_the_new_leader_while_the_deposed_is_cut_off(
    cluster: SafekeeperCluster,
) -> None:
    old = eventually(
        lambda: settled(cluster), "a compute serving, the other standing by", SERVES_WITHIN
    )
    fault = Aimed(TermWon, ("new-leader",), "partition", "kill", 0.2, 3.0, 0.0)
    try:
        value = fault.start(cluster)
        assert value["provoked"]["target"] == old, value
        assert value["reached"] and value["role"] == "new-leader", value
        struck = value["strike"]["targets"]
        assert struck and old not in struck and value["roles"]["deposed"] == [old], value
        left = {n: running(cluster, n) for n in struck}
        assert not any(left.values()), left  # killed, every process of the kind
        keeper = cluster.safekeepers()[0].name
        assert not reaches(cluster, old, keeper, SK_PORT), "the provocation no longer holds"
    finally:
        stopped = fault.stop(cluster)
    assert reaches(cluster, old, keeper, SK_PORT), stopped
    for name in struck:
        assert eventually(lambda n=name: "proxy" in running(cluster, n), f"{name}'s agent back")
    # Settled here, not only in the next test: a cluster this test left broken fails it by name.
    eventually(lambda: settled(cluster), "a compute serving, the other standing by", SERVES_WITHIN)


def test_a_catch_up_strikes_the_safekeeper_behind_the_commit(cluster: SafekeeperCluster) -> None:
    eventually(lambda: serving(cluster), "a compute serving", SERVES_WITHIN)
    fault = Aimed(CatchUp, ("catching-up",), "partition", "pause", 0.0, 6.0, 0.5)
    with Writer(cluster) as writer:
        try:
            value = fault.start(cluster)
            assert value["provoked"]["fault"] == "partition", value
            cut = value["provoked"]["cut_off"]
            assert cut in [n.name for n in cluster.safekeepers()]
            assert value["reached"] and value["roles"]["catching-up"] == [cut], value
            assert value["strike"]["targets"] == [cut]
            assert running(cluster, cut)["safekeeper"].startswith("T")  # stopped
        finally:
            fault.stop(cluster)
        assert not running(cluster, cut)["safekeeper"].startswith("T")
        # The writes go on once the catch-up is let go. Waited for, not read at once: on a
        # loaded machine the writer's first commit can come after the whole fault.
        eventually(lambda: writer.acked > 0, "a write acknowledged", SERVES_WITHIN)
    eventually(lambda: settled(cluster), "a compute serving, the other standing by", SERVES_WITHIN)


def test_a_rebuild_strikes_the_deposed_primary_once_it_is_back(cluster: SafekeeperCluster) -> None:
    old = eventually(
        lambda: settled(cluster), "a compute serving, the other standing by", SERVES_WITHIN
    )
    fault = Aimed(Rebuild, ("rebuilding",), "partition", "kill", 0.0, 3.0, 0.0)
    try:
        value = fault.start(cluster)
        assert value["provoked"]["target"] == old and value["provoked"]["back_after_s"] < 30
        assert value["reached"] and value["roles"]["rebuilding"] == [old], value
        assert value["strike"]["targets"] == [old]
        assert not running(cluster, old)  # killed while it rebuilt
        assert all(reaches(cluster, old, n.name, SK_PORT) for n in cluster.safekeepers())
    finally:
        fault.stop(cluster)
    assert eventually(lambda: "proxy" in running(cluster, old), f"{old}'s agent back")


def test_a_term_won_restarts_its_voters_at_once_and_they_keep_their_vote(
    cluster: SafekeeperCluster,
) -> None:
    eventually(lambda: settled(cluster), "a compute serving, the other standing by", SERVES_WITHIN)
    pattern = cluster.processes()["safekeeper"]
    keepers = {n.name: n for n in cluster.safekeepers()}

    def pid(name: str) -> int | None:
        found = tree(process_table(keepers[name]), pattern)
        return found[0] if found else None

    def term(name: str) -> int | None:
        state = cluster.poll().get(name)
        return state.term if isinstance(state, SafekeeperPoll) else None

    before = {name: pid(name) for name in keepers}
    held = max(term(name) or 0 for name in keepers)
    fault = Aimed(TermWon, ("voters",), "kill", "restart", 0.0, 3.0, 0.0)
    try:
        value = fault.start(cluster)
        assert value["reached"] and value["strike"], value
        voters = value["strike"]["targets"]
        assert voters == value["roles"]["voters"], value
        for name in voters:
            assert pid(name) not in (None, before[name])  # a new process, running now
            # back with the vote it gave in the term won after `held`
            assert eventually(lambda n=name: (term(n) or 0) > held, f"{name} answering")
    finally:
        fault.stop(cluster)
    eventually(lambda: serving(cluster), "a compute serving again", SERVES_WITHIN)


def test_a_lease_ending_pauses_the_cut_off_primary_which_wakes_deposed(
    cluster: SafekeeperCluster,
) -> None:
    """The primary, cut off, is paused in its lease's last second and a half; woken after
    another compute took over, it must not serve beside it."""
    old = eventually(
        lambda: settled(cluster), "a compute serving, the other standing by", SERVES_WITHIN
    )
    node = next(n for n in cluster.computes() if n.name == old)

    def another() -> str | None:
        now = serving(cluster)
        return now if now not in (None, old) else None

    fault = Aimed(LeaseEnding, ("leaseholder",), "partition", "pause", 0.0, 3.0, 0.0)
    try:
        value = fault.start(cluster)
        assert value["provoked"] == value["provoked"] | {"fault": "partition", "target": old}
        assert value["reached"] and value["roles"]["leaseholder"] == [old], value
        assert value["strike"]["targets"] == [old]
        assert running(cluster, old)["proxy"].startswith("T")  # stopped in its lease's end
        eventually(another, "another compute serving while the old primary sleeps", SERVES_WITHIN)
    finally:
        fault.stop(cluster)
    assert not running(cluster, old)["proxy"].startswith("T")
    assert not cluster.agent_status(node).get("serving")  # woken past its lease: deposed
    eventually(lambda: settled(cluster), "the old primary a standby again", SERVES_WITHIN)


def test_a_chain_strikes_the_new_leader_then_whoever_the_next_moment_names(
    cluster: SafekeeperCluster,
) -> None:
    """Two steps: the leader killed, and when another compute takes over it is killed for four
    seconds while the old one is restarted (the provocation released); then, at whichever
    moment comes next (a compute taking over again, most often the one killed, back once its
    hold ran out), one of its roles is killed. Each step's strike is seen on the nodes: the
    first undone after its hold, the second in place until the fault's stop."""
    old = eventually(
        lambda: settled(cluster), "a compute serving, the other standing by", SERVES_WITHIN
    )
    then = Then(None, "kill", 0.0, 0.0)  # any moment; its first role that has nodes
    fault = Aimed(Takeover, ("new-leader",), "kill", "kill", 0.0, 3.0, 0.0, 4.0, (then,), True)
    with Writer(cluster):
        try:
            value = fault.start(cluster)
            first, *rest = value["steps"]
            assert first["reached"] and first["targets"] and old not in first["targets"], value
            (new,) = first["targets"]
            assert rest and rest[0]["reached"], value  # the second link came
            second = rest[0]
            assert second["moment"] in {m.name for m in SafekeeperCluster.moments}, second
            assert second["targets"] == sorted(second["roles"][second["role"]]), second
            for name in second["targets"]:
                assert not running(cluster, name), f"{name} struck by the second step"
            # the first strike is undone once its hold runs out (the second link may come
            # before it does): the new leader runs again, or it took over again and was struck
            if new not in second["targets"]:
                back = max(first["struck_s"] + 4.0 - second["struck_s"], 0.0) + 10.0
                eventually(lambda: "proxy" in running(cluster, new), f"{new} let back", back)
            assert "proxy" in running(cluster, old) or old in second["targets"]  # let back
        finally:
            fault.stop(cluster)
    eventually(lambda: serving(cluster), "a compute serving again", SERVES_WITHIN)
