"""The `repmgr` kind on real nodes: repmgr 5.3's repmgrd on three members and a witness, at 2 ×
2 s of reconnection. Its poll against what each Postgres and each copy of repmgr's table say,
and its faults by their effects: a kill of repmgrd alone leaves its Postgres serving; the
witness cut off leaves the clients' traffic to the primary flowing and promotes no one, and so
does the witness killed; a kill of the primary promotes a standby, and the kill's end brings
the old primary back as a standby of the new one, not as a second primary; the primary crashed
and started again as it was, after the failover, takes writes beside the new one (repmgr fences
nothing by default, and the rule of deposed primaries names it; the polls show that failover's
moments), and that fault's end brings it back as the new primary's standby."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import psycopg
import pytest

from checkers.cluster_state import Evidence
from checkers.moments import LeaderChanged, occurrences
from clusters.backend import Backend, Node
from clusters.kinds import postgres as pg
from clusters.kinds.repmgr import (
    DeposedWritable,
    ElectionDue,
    Following,
    PrimaryLost,
    RepmgrCluster,
    RepmgrPoll,
    WitnessPoll,
    witness_state,
)
from core.polls import Round
from nemesis import grudges
from nemesis.kill import Kill
from nemesis.partition import Partition
from nemesis.processes import process_table, tree
from nemesis.restart_deposed import RestartDeposed
from nemesis.targets import COORDINATORS
from tests.integration.conftest import eventually, kill_manager_alone
from tests.integration.test_aimed import reaches
from tests.integration.test_failover import direct, params
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


def commits_go_on(kind: RepmgrCluster, primary: str, seconds: int) -> None:
    """A commit a second for `seconds`, past the standbys' reconnection attempts, and the
    same primary after them: nobody was promoted."""
    for _ in range(seconds):
        write(kind)
        time.sleep(1)
    assert kind.leader() == primary


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
        commits_go_on(repmgr, primary, 3 * ATTEMPTS * INTERVAL)
    finally:
        fault.stop(repmgr)
    again = eventually(lambda: settled(repmgr), "settled again", SETTLES_WITHIN, told(repmgr))
    assert again == primary


@dataclass
class Recording:
    """The kind's polls as rounds, on a clock of their own (`now`, ns)."""

    rounds: list[Round] = field(default_factory=list)
    begun: int = field(default_factory=time.monotonic_ns)

    def now(self) -> int:
        return time.monotonic_ns() - self.begun


@contextlib.contextmanager
def recorded(kind: RepmgrCluster) -> Iterator[Recording]:
    """The kind's polls, as often as they come back, while the block runs: the rounds the
    moments and rules are read from."""
    recording = Recording()
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            nodes = kind.poll()
            recording.rounds.append(Round(time=recording.now(), nodes=nodes))

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        yield recording
    finally:
        done.set()
        thread.join()


def write_through(recording: Recording, node: Node, index: int) -> dict[str, object]:
    """One commit on `node`'s own Postgres, as the history would give it once acknowledged."""
    invoked = recording.now()
    with psycopg.connect(**params(direct(node))) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS probe (at float8)")
        conn.execute("INSERT INTO probe VALUES (%s)", (time.time(),))
    return {"process": 0, "type": "ok", "f": "add", "write": True, "node": node.name,
            "invoke_index": index, "invoke_time": invoked,
            "complete_time": recording.now()}  # fmt: skip


def test_the_witness_killed_answers_no_poll_and_promotes_no_one(repmgr: RepmgrCluster) -> None:
    """`kill-dcs` on this kind kills the witness's processes: its Postgres stops answering,
    the primary keeps committing, and the fault's end brings the witness back, naming the
    primary again."""
    primary = eventually(lambda: settled(repmgr), "a settled cluster", SETTLES_WITHIN, told(repmgr))
    witness = repmgr.witness()
    assert witness is not None
    fault = Kill(COORDINATORS, None)
    try:
        done = fault.start(repmgr)
        assert done["targets"] == [witness.name], done
        assert witness_state(witness) is None
        commits_go_on(repmgr, primary, 2 * ATTEMPTS * INTERVAL)
    finally:
        fault.stop(repmgr)
    again = eventually(lambda: settled(repmgr), "settled again", SETTLES_WITHIN, told(repmgr))
    assert again == primary and witness_state(witness) is not None


def seen_by_repmgrd(rounds: list[Round]) -> list[str]:
    """Each round as its repmgrds saw it, for a failed assertion on the moments."""
    return [
        f"{r.time / 1e9:.1f} s: "
        + ", ".join(
            f"{n} {'w' if getattr(s, 'writable', False) else 'r'}"
            f"{getattr(s, 'timeline', '')} unseen {getattr(s, 'unseen_s', None)}"
            f" follow {getattr(s, 'told_to_follow', None)}"
            for n, s in sorted(r.nodes.items())
        )
        for r in rounds
    ]


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
    standbys = sorted(n.name for n in repmgr.members() if n.name != old)
    fault = RestartDeposed()
    try:
        with recorded(repmgr) as recording:
            done = fault.start(repmgr)
            new = done["promoted"]
            assert done["deposed"] == old and new not in (None, old), done
            polled = repmgr.poll()
            both = [n for n in (old, new) if (s := polled.get(n)) is not None and s.leads()]
            assert both == [old, new], f"not two writable members: {polled}"
            time.sleep(2)  # a few rounds that show both
            deposed = next(n for n in repmgr.members() if n.name == old)
            acked = write_through(recording, deposed, 1)
            time.sleep(2)
    finally:
        fault.stop(repmgr)
    rounds = recording.rounds
    rule = DeposedWritable()
    for r in rounds:
        rule.observe(r)
    (found,) = rule.report(Evidence(writes=[acked]))  # type: ignore[list-item]
    assert found["nodes"] == [old, new] and found["count"] == 1, found
    # the failover's moments, as the polls showed them (the crashed node refuses at once, so
    # the polls come every few hundredths of a second)
    seen = "\n".join(seen_by_repmgrd(rounds))
    lost = occurrences(rounds, PrimaryLost)
    assert lost and set(lost[0]["roles"]["lost"]) <= {*standbys, "n4"}, seen
    due = occurrences(rounds, ElectionDue)
    assert due and set(due[0]["roles"]["candidates"]) <= set(standbys), seen
    assert due[0]["roles"]["deposed"] == [old], seen
    promoted = occurrences(rounds, LeaderChanged)
    assert promoted and promoted[0]["roles"] == {"new-leader": [new], "deposed": [old]}, seen
    events = {getattr(r.nodes.get(new), "last_event", None) for r in rounds}
    # repmgr.events on the new primary: its followers' follow events, once it promoted
    assert any(e and e.startswith(("standby_follow", "repmgrd_failover_follow")) for e in events)
    # on a shared cluster a standby an earlier test's failover told to follow the old primary
    # still says so before this one's, and that is a following moment of its own: only the
    # moments under the new primary are this failover's
    following = [o for o in occurrences(rounds, Following) if o["roles"]["leader"] == [new]]
    others = [n for n in standbys if n != new]
    assert following and following[0]["roles"] == {"following": others, "leader": [new]}, seen
    assert eventually(lambda: settled(repmgr), "settled again", SETTLES_WITHIN, told(repmgr)) == new
    back = repmgr.poll()[old]
    assert isinstance(back, RepmgrPoll) and back.standby and back.upstream == new
