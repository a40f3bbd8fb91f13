"""Partition shapes and fault targets: pure functions of the node names and a seeded RNG."""

from __future__ import annotations

import json
import random
from itertools import permutations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nemesis import grudges, partition, targets
from nemesis.grudges import Grudge


def names(n: int) -> list[str]:
    return [f"n{i}" for i in range(1, n + 1)]


def heard(grudge: Grudge, node: str) -> frozenset[str]:
    return frozenset(grudge) - grudge[node]


def symmetric(grudge: Grudge) -> bool:
    return all((b in grudge[a]) == (a in grudge[b]) for a, b in permutations(grudge, 2))


def sides(grudge: Grudge) -> list[frozenset[str]]:
    """The groups of nodes that hear exactly each other (for split shapes)."""
    return sorted({heard(grudge, n) for n in grudge}, key=len)


def well_formed(grudge: Grudge, nodes: list[str]) -> bool:
    return set(grudge) == set(nodes) and all(
        n not in deaf and deaf <= set(nodes) for n, deaf in grudge.items()
    )


seeds = st.integers(min_value=0, max_value=2**32)


@given(seeds)
def test_majorities_ring_on_five_nodes(seed: int) -> None:
    nodes = names(5)
    grudge = grudges.majorities_ring(nodes, random.Random(seed))
    assert well_formed(grudge, nodes)
    views = [heard(grudge, n) for n in nodes]
    assert all(len(v) == 3 for v in views)  # each node hears a majority: itself and two
    assert len(set(views)) == 5  # no two hear the same majority
    assert symmetric(grudge)


@given(st.integers(min_value=3, max_value=11), seeds)
def test_majorities_ring_on_any_count(n: int, seed: int) -> None:
    nodes = names(n)
    grudge = grudges.majorities_ring(nodes, random.Random(seed))
    assert well_formed(grudge, nodes)
    views = [heard(grudge, node) for node in nodes]
    assert all(len(v) == targets.majority_size(n) for v in views)
    assert len(set(views)) == n
    assert all(node in view for node, view in zip(nodes, views, strict=True))


@given(st.integers(min_value=3, max_value=11), seeds)
def test_majority_splits_into_a_majority_and_the_rest(n: int, seed: int) -> None:
    nodes = names(n)
    grudge = grudges.majority(nodes, random.Random(seed))
    assert well_formed(grudge, nodes) and symmetric(grudge)
    minority, majority = sides(grudge)
    assert len(majority) == n // 2 + 1 and minority | majority == set(nodes)
    assert all(grudge[a] == minority for a in majority)


@given(st.integers(min_value=2, max_value=11), seeds)
def test_one_and_halves(n: int, seed: int) -> None:
    nodes = names(n)
    alone, rest = sides(grudges.one(nodes, random.Random(seed)))
    assert len(alone) == 1 and len(rest) == n - 1
    first, second = sides(grudges.halves(nodes, random.Random(seed)))
    assert (len(first), len(second)) == (n // 2, n - n // 2)
    assert first.isdisjoint(second)


@given(st.integers(min_value=3, max_value=11), seeds)
def test_bridge_has_one_node_both_sides_hear(n: int, seed: int) -> None:
    nodes = names(n)
    grudge = grudges.bridge(nodes, random.Random(seed))
    assert well_formed(grudge, nodes) and symmetric(grudge)
    (middle,) = [node for node in nodes if not grudge[node]]
    others = [node for node in nodes if node != middle]
    assert all(grudge[node] for node in others)  # everyone else is cut from someone
    left = heard(grudge, others[0]) - {middle}
    right = set(others) - left
    assert abs(len(left) - len(right)) <= 1
    assert all(grudge[a] == right for a in left) and all(grudge[b] == left for b in right)


def test_primaries_isolates_the_leader_or_nothing() -> None:
    nodes = names(4)
    grudge = grudges.primaries(nodes, "n2")
    assert grudge["n2"] == {"n1", "n3", "n4"} and grudge["n1"] == {"n2"}
    assert not any(grudges.primaries(nodes, None).values())


@pytest.mark.parametrize("shape", sorted(grudges.SHAPES))
def test_each_shape_is_a_partition_from_its_minimum_and_fixed_by_the_seed(shape: str) -> None:
    make, least = grudges.SHAPES[shape]
    nodes = names(least)
    assert any(make(nodes, random.Random(1)).values())
    assert make(names(7), random.Random(5)) == make(names(7), random.Random(5))
    draws = {json.dumps(grudges.as_json(make(names(7), random.Random(s)))) for s in range(20)}
    assert len(draws) > 1  # and random across seeds


def test_partition_rules_drop_each_direction_on_both_ends() -> None:
    grudge = grudges.from_components(names(3), []) | {"n1": frozenset({"n2"})}
    assert partition.rules("n1", grudge) == [("from", "n2")]
    assert partition.rules("n2", grudge) == [("to", "n1")]
    assert partition.rules("n3", grudge) == []


@pytest.mark.parametrize("n", range(1, 8))
def test_target_sizes(n: int) -> None:
    nodes = names(n)
    rng = random.Random(n)
    assert len(targets.pick("one", nodes, rng) or []) == 1
    assert len(targets.pick("majority", nodes, rng) or []) == n // 2 + 1
    assert targets.pick("all", nodes, rng) == nodes
    minority = targets.pick("minority", nodes, rng) or []
    assert len(minority) == max(1, (n - 1) // 2)
    if n >= 3:
        assert len(minority) < n / 2
    assert targets.pick("primaries", nodes, rng) is None


def test_targets_are_in_node_order_and_fixed_by_the_seed() -> None:
    nodes = names(9)
    picked = targets.pick("majority", nodes, random.Random(3))
    assert picked == sorted(picked or [], key=nodes.index)
    assert picked == targets.pick("majority", nodes, random.Random(3))
    assert {tuple(targets.pick("one", nodes, random.Random(s)) or []) for s in range(30)} != {
        ("n1",)
    }


def test_cut_off_parts_one_node_from_the_others_named_and_no_one_else() -> None:
    nodes = names(6)
    grudge = grudges.cut_off(nodes, "n1", ["n4", "n5", "n6"])
    assert grudge["n1"] == {"n4", "n5", "n6"}
    assert all(grudge[z] == {"n1"} for z in ("n4", "n5", "n6"))
    assert grudge["n2"] == grudge["n3"] == frozenset()  # n1 still hears its peers
    assert partition.rules("n2", grudge) == []
    assert not any(grudges.cut_off(nodes, None, ["n4"]).values())


def test_coordinators_are_resolved_late_like_primaries() -> None:
    assert targets.pick("coordinators", names(6), random.Random(0)) is None
