"""Seed 003's fault: who plays which part, each phase's partition, and the conditions on the
cluster's poll that move it from one phase to the next."""

from __future__ import annotations

import random
import threading
import time

import pytest
from msgspec.structs import replace

from clusters.kinds.safekeeper import SafekeeperCluster
from core.errors import BadInput
from core.polls import ComputePoll, SafekeeperPoll
from nemesis import PACKAGES, validate
from nemesis.seed003 import (
    Seed003,
    cast,
    committed,
    elected,
    phase_grudge,
    recorded,
    stood_down,
    term_start,
    wait,
)

NODES = [f"n{i}" for i in range(1, 8)]
COMPUTES, KEEPERS = NODES[:2], NODES[2:]


def hears(grudge: dict[str, frozenset[str]], a: str, b: str) -> bool:
    return b not in grudge[a] and a not in grudge[b]


def keeper(term: int, flush: int, commit: int = 0) -> SafekeeperPoll:
    return SafekeeperPoll(term, [], flush, commit)


def test_the_parts_follow_the_leader_and_the_seeds_order() -> None:
    # five safekeepers, A B C D E in the seed's order: B and E lag, C and D record
    c = cast(COMPUTES, KEEPERS, "n2", [4, 5, 0, 1, 6, 2, 3])
    assert (c.old, c.new, c.others) == ("n2", "n1", ())
    assert (c.a, c.lagging, c.recording) == ("n7", ("n3", "n6"), ("n4", "n5"))
    # three: one lags, one records; A and the lagging one are a quorum
    c = cast(COMPUTES, ["n3", "n4", "n5"], "n1", [2, 0, 6, 1])
    assert (c.a, c.lagging, c.recording) == ("n5", ("n3",), ("n4",))
    # four: a quorum is three, so two lag and one records
    c = cast(COMPUTES, ["n3", "n4", "n5", "n6"], "n1", [3, 2, 1, 0])
    assert (c.a, c.lagging, c.recording) == ("n6", ("n5", "n3"), ("n4",))
    with pytest.raises(ValueError, match="at least 3 safekeepers"):
        cast(COMPUTES, KEEPERS[:2], "n1", [0, 1])


def test_each_phase_cuts_the_cluster_as_seed_003_needs() -> None:
    c = cast(COMPUTES, KEEPERS, "n1", [0, 1, 2, 3, 4])  # L n1, S n2, A…E n3…n7
    tail = phase_grudge("tail", NODES, c)
    assert hears(tail, "n1", "n3") and not hears(tail, "n1", "n4")
    assert all(hears(tail, "n2", k) for k in ("n4", "n5", "n6", "n7"))
    assert not hears(tail, "n2", "n3")
    split = phase_grudge("split", NODES, c)
    assert [hears(split, "n2", k) for k in KEEPERS] == [True, False, True, True, False]
    assert not hears(split, "n1", "n3") and hears(split, "n1", "n4")
    apart = phase_grudge("apart", NODES, c)
    assert not any(hears(apart, n, k) for n in COMPUTES for k in KEEPERS)
    corrupt = phase_grudge("corrupt", NODES, c)
    assert [hears(corrupt, "n2", k) for k in KEEPERS] == [True, True, False, False, True]
    assert not any(hears(corrupt, "n1", k) for k in KEEPERS)


def test_the_phases_move_on_what_the_poll_shows() -> None:
    c = cast(COMPUTES, KEEPERS, "n1", [0, 1, 2, 3, 4])
    polled = {"n3": keeper(1, 900), **{k: keeper(1, 500) for k in KEEPERS[1:]}}
    assert not elected(polled, c, 1)
    polled["n5"] = keeper(2, 500)  # S's side voted in term 2
    assert elected(polled, c, 1)
    # the term's records reached C and D, and A joined it
    polled |= {"n3": keeper(2, 900), "n5": keeper(2, 600), "n6": keeper(2, 600)}
    assert recorded(polled, c, 500, 2)
    assert not recorded(polled | {"n3": keeper(1, 900)}, c, 500, 2)
    assert not stood_down({"n2": ComputePoll("primary", term=2)}, c.new)
    assert stood_down({"n2": ComputePoll("candidate", term=None)}, c.new)
    assert not stood_down({}, c.new)  # a compute that does not answer says nothing
    trio = {"n3": keeper(3, 900, 900), "n4": keeper(3, 900, 900), "n7": keeper(3, 900, 900)}
    assert committed(polled | trio, c, 2)
    one = {"n3": keeper(3, 900, 500), "n4": keeper(3, 900, 500), "n7": keeper(3, 900, 900)}
    assert committed(polled | one, c, 2)  # one safekeeper's word is the proposer's
    none = {n: keeper(3, 900, 500) for n in ("n3", "n4", "n7")}
    assert not committed(polled | none, c, 2)
    assert not committed(polled | trio, c, 3)


def test_the_package_needs_five_nodes_and_draws_its_order_from_the_seed() -> None:
    with pytest.raises(BadInput, match="at least 5 nodes"):
        validate(["partition-seed003"], 4, "safekeeper", kind=SafekeeperCluster)
    make = PACKAGES["partition-seed003"].make
    first, again = make(NODES, random.Random(3)), make(NODES, random.Random(3))
    assert isinstance(first, Seed003) and first.plan() == again.plan()
    assert sorted(first.plan()["order"]) == list(range(len(NODES)))


def test_a_terms_start_is_what_its_announcement_said_in_either_variant() -> None:
    epoch = {"n4": replace(keeper(2, 700), proposed_epoch=2, vcl=600), "n3": keeper(1, 500)}
    assert term_start(epoch, 2, 500) == 600
    history = {"n4": replace(keeper(2, 700), history=[[1, 100], [2, 650]])}
    assert term_start(history, 2, 500) == 650
    assert term_start({"n3": keeper(2, 500), "n1": ComputePoll("primary", term=2)}, 2, 500) == 500


class Quiet:
    """A cluster whose poll never shows what a phase waits for."""

    def poll(self) -> dict:
        return {}


def test_a_phase_stops_waiting_once_the_run_is_ending() -> None:
    """The heal waits for a history's start to return: cancelled (the run is ending), a
    phase's wait gives up at once instead of at its end (45 s for the tail)."""
    cancelled = threading.Event()
    cancelled.set()
    began = time.monotonic()
    assert wait(Quiet(), lambda p: True, "tail", cancelled=cancelled) is None  # type: ignore[arg-type]
    assert time.monotonic() - began < 1
    history = Seed003([0, 1, 2, 3, 4])
    history.cancel()
    assert history.cancelled.is_set()
