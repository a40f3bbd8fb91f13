"""Seed 003's fault: who plays which part, each phase's partition, and the conditions on the
cluster's poll that move it from one phase to the next."""

from __future__ import annotations

import random

import pytest

from harness.errors import BadInput
from nemesis import PACKAGES, validate
from nemesis.seed003 import (
    Seed003,
    cast,
    committed,
    elected,
    phase_grudge,
    recorded,
    stood_down,
)

NODES = [f"n{i}" for i in range(1, 8)]
COMPUTES, KEEPERS = NODES[:2], NODES[2:]


def hears(grudge: dict[str, frozenset[str]], a: str, b: str) -> bool:
    return b not in grudge[a] and a not in grudge[b]


def keeper(term: int, flush: int, commit: int = 0) -> dict:
    return {"term": term, "history": [], "flush_lsn": flush, "commit_lsn": commit}


def test_the_parts_follow_the_leader_and_the_seeds_order() -> None:
    c = cast(COMPUTES, KEEPERS, "n2", [4, 0, 1, 2, 3])
    assert (c.old, c.new, c.others) == ("n2", "n1", ())
    assert (c.a, c.b, c.c, c.d, c.e) == ("n7", "n3", "n4", "n5", "n6")
    with pytest.raises(ValueError, match="needs 5 safekeepers"):
        cast(COMPUTES, KEEPERS[:3], "n1", [0, 1, 2, 3, 4])


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
    assert not stood_down({"n2": {"role": "primary", "term": 2}}, c)
    assert stood_down({"n2": {"role": "candidate", "term": None}}, c)
    assert not stood_down({}, c)  # a compute that does not answer says nothing
    trio = {"n3": keeper(3, 900, 900), "n4": keeper(3, 900, 900), "n7": keeper(3, 900, 900)}
    assert committed(polled | trio, c, 2)
    one = {"n3": keeper(3, 900, 500), "n4": keeper(3, 900, 500), "n7": keeper(3, 900, 900)}
    assert committed(polled | one, c, 2)
    assert not committed(
        polled
        | trio
        | {"n7": keeper(3, 900, 500), "n3": keeper(3, 900, 500), "n4": keeper(3, 900, 500)},
        c,
        2,
    )
    assert not committed(polled | trio, c, 3)


def test_the_package_needs_seven_nodes_and_draws_its_order_from_the_seed() -> None:
    with pytest.raises(BadInput, match="at least 7 nodes"):
        validate(["partition-seed003"], 5, "safekeeper")
    make = PACKAGES["partition-seed003"].make
    first, again = make(NODES, random.Random(3)), make(NODES, random.Random(3))
    assert isinstance(first, Seed003) and first.plan() == again.plan()
    assert sorted(first.plan()["order"]) == [0, 1, 2, 3, 4]
