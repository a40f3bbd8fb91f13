"""The promote fault on real Postgres 15 nodes, by its effect: the standby that received the most
WAL takes writes on a new timeline, the other follows it, and the deposed primary comes back as
its standby. Under asynchronous replication, a write the deposed primary acknowledged while it was
cut off (a fence that did not happen) is gone once it is rewound: the loss the checkers must name.
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from checkers.moments import LeaderChanged
from clusters.backend import Backend, Node
from clusters.kinds import postgres as pg
from clusters.kinds.streaming import StreamingCluster
from core.polls import StreamingPoll
from nemesis.aimed import Aimed
from nemesis.promote import Promote
from tests.integration.conftest import eventually

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def streaming(docker_backend: Backend, module_cluster_name: str) -> Iterator[StreamingCluster]:
    kind = StreamingCluster(docker_backend, module_cluster_name, {"replication": "async"})
    kind.deploy(lambda msg: None)
    with connect(kind.nodes[0]) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS marks (v text PRIMARY KEY)")
    yield kind


def connect(node: Node) -> psycopg.Connection:
    host, port = node.endpoint(pg.PORT)
    return psycopg.connect(
        host=host, port=port, user=pg.USER, dbname=pg.DBNAME, autocommit=True, connect_timeout=3
    )


def marks(node: Node) -> set[str]:
    with connect(node) as conn:
        return {v for (v,) in conn.execute("SELECT v FROM marks").fetchall()}


def mark(node: Node, value: str) -> None:
    with connect(node) as conn:
        conn.execute("INSERT INTO marks VALUES (%s)", (value,))


def polled(kind: StreamingCluster) -> dict[str, StreamingPoll]:
    return {n: s for n, s in kind.poll().items() if isinstance(s, StreamingPoll)}


def settled(kind: StreamingCluster, primary: str, timeline: int) -> bool:
    """`primary` alone takes writes, on `timeline`, and every other node streams from it."""
    states = polled(kind)
    return (
        len(states) == len(kind.nodes)
        and [n for n, s in states.items() if s.writable] == [primary]
        and states[primary].timeline == timeline
        and all(s.upstream == primary for n, s in states.items() if n != primary)
    )


def test_an_isolated_primary_s_acknowledged_write_is_lost_once_it_is_rewound(
    streaming: StreamingCluster,
) -> None:
    n1 = streaming.nodes[0]
    mark(n1, "before")
    eventually(lambda: all("before" in marks(n) for n in streaming.nodes), "replicated")
    fault = Promote("isolate")
    try:
        done = fault.start(streaming)
        assert done["deposed"] == "n1" and done["promoted"] in ("n2", "n3"), done
        new = done["promoted"]
        # n1 was not fenced: it still takes writes, and asynchronous replication acknowledges
        # them though no standby will ever have them
        mark(n1, "lost")
        assert polled(streaming)["n1"].writable
        eventually(lambda: settled_but(streaming, new, "n1"), "the new primary and its standby")
    finally:
        undone = fault.stop(streaming)
    assert undone["rejoined"] == "n1" and undone["following"] == new, undone
    eventually(lambda: settled(streaming, new, 2), "n1 streaming from the new primary")
    (node,) = [n for n in streaming.nodes if n.name == new]
    mark(node, "after")
    eventually(lambda: "after" in marks(n1), "n1 replaying the new timeline")
    assert marks(n1) == {"before", "after"}  # "lost", acknowledged by n1, is gone


def settled_but(kind: StreamingCluster, primary: str, isolated: str) -> bool:
    states = polled(kind)
    others = [n for n in states if n not in (primary, isolated)]
    return (
        states.get(primary) is not None
        and states[primary].writable
        and states[primary].timeline == 2
        and all(states[n].upstream == primary for n in others)
    )


def test_a_stopped_primary_s_standby_takes_over_and_it_comes_back_as_a_standby(
    streaming: StreamingCluster,
) -> None:
    old = streaming.leader()
    assert old is not None
    fault = Promote("stop")
    try:
        done = fault.start(streaming)
        assert done["deposed"] == old and done["fenced"] == "pg_ctl stop -m immediate", done
        assert old not in polled(streaming)  # its server is down
        new = done["promoted"]
        assert new not in (None, old) and sorted(done["received"]) == sorted(
            n.name for n in streaming.nodes if n.name != old
        )
    finally:
        undone = fault.stop(streaming)
    assert undone["rejoined"] == old and undone["how"] == "pg_rewind", undone
    eventually(lambda: settled(streaming, new, 3), "the old primary streaming again")


def test_an_aimed_fault_loses_the_leader_as_an_operator_would_and_strikes_the_new_one(
    streaming: StreamingCluster,
) -> None:
    """Nothing fails over by itself here: the aimed fault provokes a failover with `promote`,
    sees the new leader, and pauses it; at its end the pause and the failover are undone."""
    old = streaming.leader()
    assert old is not None
    timeline = polled(streaming)[old].timeline or 0
    fault = Aimed(LeaderChanged, ("new-leader",), "kill", "pause", 0.0, 3.0, 0.0)
    try:
        done = fault.start(streaming)
        assert done["provoked"]["fault"] == "promote" and done["provoked"]["fence"] == "stop"
        assert done["reached"] is True and done["role"] == "new-leader", done
        (new,) = done["roles"]["new-leader"]
        assert new != old and done["strike"]["targets"] == [new]
        assert new not in polled(streaming)  # paused: its Postgres does not answer
    finally:
        fault.stop(streaming)
    eventually(lambda: settled(streaming, new, timeline + 1), "the old primary following the new")
