"""Seed 004's decisions, one per rule and its near miss: who declares a generation, and when not."""

from __future__ import annotations

from systems.manatee.state import ClusterState, decide

G3 = ClusterState(3, "n1", "n2", ("n3", "n4"), 500)


def test_the_first_peer_declares_the_first_generation_once_another_is_present() -> None:
    d = decide(None, "n2", ["n2", "n1", "n3"], 7)
    assert d.kind == "declare" and d.state == ClusterState(1, "n2", "n1", ("n3",), 7)
    assert decide(None, "n1", ["n2", "n1", "n3"], 7).kind == "wait"  # not first
    assert decide(None, "n2", ["n2"], 7).kind == "wait"  # alone: nobody could be S


def test_the_sync_replaces_a_gone_primary_when_caught_up_to_init_wal() -> None:
    d = decide(G3, "n2", ["n2", "n3", "n4"], 500)
    assert d.kind == "declare" and d.state == ClusterState(4, "n2", "n3", ("n4",), 500)


def test_a_sync_short_of_init_wal_never_takes_over() -> None:
    d = decide(G3, "n2", ["n2", "n3", "n4"], 499)
    assert d.kind == "stuck" and "short of init_wal 500" in d.why


def test_a_sync_takes_over_only_with_an_async_to_become_sync() -> None:
    assert decide(G3, "n2", ["n2"], 900).kind == "stuck"
    assert decide(G3, "n2", ["n1", "n2"], 900).kind == "sync"  # the primary is there


def test_the_primary_replaces_a_gone_sync_by_the_first_async_present() -> None:
    d = decide(G3, "n1", ["n1", "n4"], 800)
    assert d.kind == "declare" and d.state == ClusterState(4, "n1", "n4", (), 800)
    alone = decide(G3, "n1", ["n1"], 800)
    assert alone.kind == "primary" and alone.state is None


def test_the_primary_keeps_the_asyncs_in_order_and_appends_newcomers() -> None:
    d = decide(G3, "n1", ["n5", "n1", "n2", "n4"], 800)
    assert d.kind == "primary" and d.state == ClusterState(3, "n1", "n2", ("n4", "n5"), 500)
    assert decide(G3, "n1", ["n1", "n2", "n3", "n4"], 800).state is None  # nothing changed


def test_asyncs_follow_the_chain_and_a_newcomer_waits_for_the_primary() -> None:
    assert decide(G3, "n3", ["n1", "n2", "n3"], 0).upstream == "n2"
    assert decide(G3, "n4", ["n1", "n2", "n3", "n4"], 0).upstream == "n3"
    assert decide(G3, "n9", ["n1", "n9"], 0).kind == "wait"


def test_the_state_round_trips_through_json() -> None:
    assert ClusterState.from_json(G3.to_json()) == G3
