"""The Manatee sitter's coordination on a real ZooKeeper (Debian's, standalone on loopback): the
first generation is declared once, a sync replaces a primary whose session ended, a sync short
of init_wal does not, and test-and-set lets one of two declarers win."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from systems.manatee.coordinator import Coordinator
from systems.manatee.state import ClusterState, decide


@pytest.fixture
def peers(zookeeper: str) -> Iterator[Callable[[str], Coordinator]]:
    """Peers that join the test's ZooKeeper; every session still open is ended after it."""
    made: list[Coordinator] = []

    def join(name: str) -> Coordinator:
        peer = Coordinator(zookeeper, "t", name)
        peer.join()
        made.append(peer)
        return peer

    yield join
    for peer in made:
        if peer.zk.connected:
            peer.leave()


def step(peer: Coordinator, wal: int) -> str:
    """One pass of the sitter's loop over the coordination: decide, and write what it declares."""
    state, version = peer.read()
    decision = decide(state, peer.me, peer.present(), wal)
    if decision.state is not None and not peer.write(decision.state, version):
        return "lost the race"
    return decision.kind


def test_the_first_generation_is_declared_once_by_the_first_peer(
    peers: Callable[[str], Coordinator],
) -> None:
    n1, n2, n3 = peers("n1"), peers("n2"), peers("n3")
    assert n1.present() == ["n1", "n2", "n3"]
    assert [step(n, 10) for n in (n2, n3, n1)] == ["wait", "wait", "declare"]
    assert n3.read() == (ClusterState(1, "n1", "n2", ("n3",), 10), 0)
    assert [step(n, 10) for n in (n1, n2, n3)] == ["primary", "sync", "async"]


def test_a_sync_replaces_a_primary_whose_session_ended_and_the_old_primary_steps_aside(
    peers: Callable[[str], Coordinator],
) -> None:
    n1, n2, _ = peers("n1"), peers("n2"), peers("n3")
    step(n1, 100)
    n1.leave()  # its ephemeral node goes with its session, as after an expiry
    assert step(n2, 100) == "declare"
    state, _ = n2.read()
    assert state == ClusterState(2, "n2", "n3", (), 100)
    back = peers("n1")  # a new session: the old primary is no longer in the cluster state
    assert step(back, 100) == "wait"
    assert step(n2, 100) == "primary"
    assert n2.read()[0].a == ("n1",)  # the primary appended it to A[]
    assert step(back, 100) == "async"


def test_a_sync_short_of_init_wal_does_not_take_over(peers: Callable[[str], Coordinator]) -> None:
    n1, n2, _ = peers("n1"), peers("n2"), peers("n3")
    step(n1, 100)
    n1.leave()
    assert step(n2, 99) == "stuck"
    assert n2.read()[0].g == 1


def test_of_two_declarers_on_one_version_one_wins(peers: Callable[[str], Coordinator]) -> None:
    n1, n2, n3 = peers("n1"), peers("n2"), peers("n3")
    step(n1, 100)
    state, version = n3.read()
    assert state is not None
    mine = ClusterState(2, "n1", "n3", (), 150)
    theirs = ClusterState(2, "n2", "n3", (), 100)
    assert n1.write(mine, version) is True
    assert n2.write(theirs, version) is False
    assert n3.read() == (mine, version + 1)
