"""Seed 001's fault: who plays which part, each phase's partition, and the conditions on the
cluster's poll that move it from one phase to the next. Its effect on a real cluster is
measured by bench/mutants.py (a proposer that ranks its voters by length is caught)."""

from __future__ import annotations

import random

import pytest

from clusters.kinds.patroni import PatroniCluster
from clusters.kinds.safekeeper import SafekeeperCluster
from core.errors import BadInput
from core.polls import ComputePoll, SafekeeperPoll
from nemesis import PACKAGES, packages, validate
from nemesis.seed001 import (
    Seed001,
    bridge_of,
    cast,
    elected,
    holds,
    orphaned,
    phase_grudge,
    recast,
    recorded,
    won,
    won_by,
)

NODES = [f"n{i}" for i in range(1, 8)]
COMPUTES, KEEPERS = NODES[:2], NODES[2:]


def hears(grudge: dict[str, frozenset[str]], a: str, b: str) -> bool:
    return b not in grudge[a] and a not in grudge[b]


def keeper(term: int, flush: int, commit: int = 0, start: int = 0) -> SafekeeperPoll:
    return SafekeeperPoll(term, [[term, start]] if start else [], flush, commit)


def test_the_tail_is_outside_a_quorum_and_the_rest_is_one() -> None:
    # five: T is two (outside any quorum of three), R the other three, in the seed's order
    c = cast(COMPUTES, KEEPERS, "n2", [4, 5, 0, 1, 6, 2, 3])
    assert (c.old, c.new, c.others) == ("n2", "n1", ())
    assert (c.tail, c.quorum) == (("n7", "n3"), ("n4", "n5", "n6"))
    # three: one holds the tail, two elect
    c = cast(COMPUTES, ["n3", "n4", "n5"], "n1", [2, 0, 6, 1])
    assert (c.tail, c.quorum) == (("n5",), ("n3", "n4"))
    with pytest.raises(ValueError, match="at least 3 safekeepers"):
        cast(COMPUTES, KEEPERS[:2], "n1", [0, 1])


def test_each_phase_cuts_the_cluster_as_seed_001_needs() -> None:
    c = cast(COMPUTES, KEEPERS, "n1", [0, 1, 2, 3, 4])  # L n1, S n2, T n3 n4, R n5 n6 n7
    tail = phase_grudge("tail", NODES, c)
    assert [hears(tail, "n1", k) for k in KEEPERS] == [True, True, False, False, False]
    assert [hears(tail, "n2", k) for k in KEEPERS] == [False, False, True, True, True]
    apart = phase_grudge("apart", NODES, c)
    assert not any(hears(apart, n, k) for n in COMPUTES for k in KEEPERS)
    assert hears(apart, "n3", "n7")
    vote = phase_grudge("vote", NODES, c, bridge="n6")
    assert [hears(vote, "n2", k) for k in KEEPERS] == [True, True, False, True, False]
    assert not any(hears(vote, "n1", k) for k in KEEPERS)
    assert not hears(vote, "n5", "n6") and hears(vote, "n5", "n7")


def test_the_phases_move_on_what_the_poll_shows() -> None:
    c = cast(COMPUTES, KEEPERS, "n1", [0, 1, 2, 3, 4])
    polled = {k: keeper(1, 500, 500) for k in KEEPERS} | {"n3": keeper(1, 900, 500)}
    assert not elected(polled, c, 1)
    polled["n6"] = keeper(2, 500, 500, start=500)  # S won term 2 with R
    assert elected(polled, c, 1)
    assert not recorded(polled, c, 2, 500)  # its start is committed, nothing of its own yet
    polled["n5"] = keeper(2, 600, 560, start=500)
    assert recorded(polled, c, 2, 500)
    assert not recorded(polled | {"n5": keeper(1, 600, 560)}, c, 2, 500)  # an older term's
    # the bridge is the one of R with the least WAL: with T, the longest log is T's
    polled |= {"n7": keeper(2, 620, 560, start=500), "n6": keeper(2, 580, 560, start=500)}
    assert bridge_of(polled, c) == "n6"
    voters = ["n3", "n4", "n6"]
    assert not won(polled, voters, 2)
    third = {n: keeper(3, 700, 600, start=580) for n in voters}
    assert won(polled | third, voters, 2)
    assert not won(polled | third | {"n4": keeper(2, 700, 600, start=500)}, voters, 2)
    unwritten = {n: keeper(3, 580, 560, start=580) for n in voters}
    assert not won(polled | unwritten, voters, 2)  # the new term committed nothing of its own


@pytest.mark.parametrize("package", ["partition-seed001", "partition-seed003"])
def test_a_kind_without_a_safekeeper_quorum_is_refused_the_seeds_histories(package: str) -> None:
    """The seeds' histories read terms and safekeepers' logs from the polls: on Patroni they
    would start a cluster and strike nothing the seeds describe."""
    with pytest.raises(BadInput, match="computes elected by a quorum of safekeepers"):
        validate([package], 6, "patroni", coordinated=True, kind=PatroniCluster)
    validate([package], 5, "safekeeper", kind=SafekeeperCluster)
    # still in `all` through the aimed package alone, not as entries of their own
    entries = [p.name for p in packages(["all"], 5, False, kind=SafekeeperCluster)]
    assert package not in entries


def test_the_package_needs_five_nodes_and_draws_its_order_from_the_seed() -> None:
    with pytest.raises(BadInput, match="at least 5 nodes"):
        validate(["partition-seed001"], 4, "safekeeper", kind=SafekeeperCluster)
    make = PACKAGES["partition-seed001"].make
    first, again = make(NODES, random.Random(3)), make(NODES, random.Random(3))
    assert isinstance(first, Seed001) and first.plan() == again.plan()
    assert first.plan()["shape"] == "seed001"
    assert sorted(first.plan()["order"]) == list(range(len(NODES)))


def held(term: int, history: list[list[int]], flush: int) -> SafekeeperPoll:
    return SafekeeperPoll(term, history, flush, 0)


def test_the_fresh_term_is_s_s_once_its_poll_names_it_and_its_donor() -> None:
    polled: dict = {"n2": ComputePoll(role="standby")} | {k: keeper(4, 500) for k in KEEPERS}
    assert won_by(polled, "n2", 3) is None  # the safekeepers voted; S does not lead yet
    polled["n2"] = ComputePoll(role="primary", term=4)
    assert won_by(polled, "n2", 3) is None  # elected, the donor not yet said
    polled["n2"] = ComputePoll(role="primary", term=4, donor="n6")
    assert won_by(polled, "n2", 3) == (4, "n6")
    assert won_by(polled, "n2", 4) is None  # not above the term before


def test_once_s_has_won_the_donor_is_in_t_and_l_and_s_swap_parts() -> None:
    c = cast(COMPUTES, KEEPERS, "n1", [0, 1, 2, 3, 4])  # T n3 n4, R n5 n6 n7
    again = recast(c, "n6")
    assert (again.old, again.new) == ("n2", "n1")
    assert (again.tail, again.quorum) == (("n6", "n3"), ("n4", "n5", "n7"))
    assert recast(c, "n3").tail == ("n3", "n4")  # the donor already in T
    one = cast(COMPUTES, ["n3", "n4", "n5"], "n1", [2, 0, 6, 1])  # T n5, R n3 n4
    assert (recast(one, "n4").tail, recast(one, "n4").quorum) == (("n4",), ("n5", "n3"))


def test_a_term_is_an_orphan_when_only_t_holds_records_of_it() -> None:
    c = cast(COMPUTES, KEEPERS, "n1", [0, 1, 2, 3, 4])  # T n3 n4, R n5 n6 n7
    old = [[1, 0], [3, 400]]
    # the fresh term 4 from 500: n3 holds its records, R was announced it and holds none
    polled = {n: held(4, [*old, [4, 500]], 500) for n in c.quorum}
    polled |= {"n3": held(4, [*old, [4, 500]], 9000), "n4": held(4, [*old, [4, 500]], 500)}
    assert holds(polled, "n3", 4) and not holds(polled, "n5", 4) and holds(polled, "n5", 3)
    assert orphaned(polled, c, 4)
    # R's later term started past 500: n6 wrote records of term 4 before it
    polled["n6"] = held(5, [*old, [4, 500], [5, 700]], 900)
    assert not orphaned(polled, c, 4)
    # nobody holds records of it: not an orphan either, a term never written
    polled = {n: held(4, [*old, [4, 500]], 500) for n in KEEPERS}
    assert not orphaned(polled, c, 4)


def test_the_seed_draws_whose_term_the_tail_is_of() -> None:
    make = PACKAGES["partition-seed001"].make
    tails = {make(NODES, random.Random(seed)).plan()["tail"] for seed in range(20)}
    assert tails == {"serving", "fresh"}
    # the aimed nemesis gives the tail: it draws each as a scenario of its own
    given = {Seed001.planned(NODES, random.Random(s), tail="fresh").tail for s in range(20)}
    assert given == {"fresh"}
