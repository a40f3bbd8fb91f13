"""The aimed nemesis's plan: what the seed draws (moment, roles' order, provocation, strike,
delay), drawn among the moments the kind declares, and seed 003's history and seed 001's
example with each of its tails as three scenarios more where the kind and the nodes allow
them. Its effect on real nodes is tested in tests/integration/test_aimed.py."""

from __future__ import annotations

import random
from itertools import islice

import nemesis
from checkers.moments import CatchUp, LeaderChanged, LeaseEnding, Rebuild, Takeover, TermWon
from nemesis.aimed import PROVOCATIONS, STRIKES, Aimed
from nemesis.partition import Partition
from nemesis.schedule import plan
from nemesis.seed001 import Seed001
from nemesis.seed003 import Seed003

NODES = [f"n{i}" for i in range(1, 6)]


def drawn(count: int, seed: int = 0, **kw: object) -> list[object]:
    rng = random.Random(seed)
    return [Aimed.planned(NODES, rng, **kw) for _ in range(count)]  # type: ignore[arg-type]


def test_the_seed_fixes_every_choice() -> None:
    moments = (TermWon, Takeover, CatchUp)
    first = [f.plan() for f in drawn(30, moments=moments)]
    assert first == [f.plan() for f in drawn(30, moments=moments)]
    assert first != [f.plan() for f in drawn(30, seed=1, moments=moments)]


def test_it_aims_at_the_kinds_moments_and_strikes_each_way() -> None:
    faults = [f for f in drawn(400, moments=(Takeover, CatchUp)) if isinstance(f, Aimed)]
    assert len(faults) == 400  # no term-won: seed 003's history is not among them
    assert {f.moment for f in faults} == {Takeover, CatchUp}
    assert {f.strike for f in faults} == set(STRIKES)  # no power unless the backend has it
    assert {f.provocation for f in faults} == set(PROVOCATIONS)
    for f in faults:
        assert sorted(f.roles) == sorted(f.moment.roles) and 0 <= f.delay <= 1.5
        assert ("cut_s" in f.plan()) == (f.moment.provoke == "follower")


def test_a_lease_is_run_down_only_by_cutting_the_leader_off() -> None:
    """A killed or paused primary holds no lease its poll can show: `lease-ending` is always
    provoked by a partition, whatever else the seed draws."""
    faults = [f for f in drawn(100, moments=(LeaseEnding, Takeover)) if isinstance(f, Aimed)]
    assert {f.provocation for f in faults if f.moment is LeaseEnding} == {"partition"}
    assert {f.provocation for f in faults if f.moment is Takeover} == set(PROVOCATIONS)


def test_power_is_struck_only_where_the_backend_can_cut_it() -> None:
    faults = drawn(200, moments=(Takeover,), power=True)
    assert "power" in {f.strike for f in faults if isinstance(f, Aimed)}


def test_the_seeds_histories_are_three_of_its_scenarios_on_a_cluster_that_can_have_them() -> None:
    """Seed 003's history and each of seed 001's tails: a scenario each, drawn as often as a
    moment."""
    faults = drawn(500, moments=(TermWon, Takeover))
    shapes = [
        f"{f.plan()['shape']} {f.plan().get('tail', '')}".strip()
        for f in faults
        if isinstance(f, Seed003 | Seed001)
    ]
    for shape in ("seed003", "seed001 serving", "seed001 fresh"):
        assert 75 < shapes.count(shape) < 125, shape  # one scenario in five, not one in eight
    assert 60 < sum(isinstance(f, Aimed) and f.moment is TermWon for f in faults) < 140
    rng = random.Random(0)
    four = [Aimed.planned(NODES[:4], rng, moments=(TermWon,)) for _ in range(50)]
    assert all(isinstance(f, Aimed) for f in four)  # the seeds' histories need five nodes


def test_a_kind_that_declares_no_moment_is_aimed_at_its_failovers() -> None:
    assert {f.moment for f in drawn(20)} == {LeaderChanged}  # type: ignore[attr-defined]


def test_a_partition_strike_adds_to_the_provocations_partition() -> None:
    aimed = Aimed(TermWon, TermWon.roles, "partition", "partition", 0.0, 3.0, 0.5)
    aimed.faults.append(aimed._make("partition", NODES, ["n1"]))  # the leader cut off
    strike = aimed._make("partition", NODES, ["n4"])
    assert isinstance(strike, Partition) and strike.grudge is not None
    assert strike.grudge["n1"] == frozenset(NODES) - {"n1"}  # still cut off
    assert strike.grudge["n4"] == frozenset(NODES) - {"n4"}
    assert strike.grudge["n2"] == frozenset({"n1", "n4"})


def test_the_package_is_bound_to_the_kinds_moments_and_joins_all() -> None:
    chosen = nemesis.packages(["aimed"], 5, power=False, moments=(Takeover,))
    steps = list(islice(plan(chosen, NODES, 3, 10.0), 20))
    assert {s.fault.plan()["moment"] for s in steps} == {"takeover"}
    assert "aimed" in [p.name for p in nemesis.packages(["all"], 5)]
    assert "aimed" not in [p.name for p in nemesis.packages(["all"], 1)]


def test_in_all_the_aimed_package_is_drawn_once_for_each_of_its_scenarios() -> None:
    """Four moments and three histories on five nodes: seven of the seventeen entries `all`
    draws among without power are aimed, so each scenario is drawn as often as a fault kind;
    `--nemesis aimed` alone is one entry."""
    moments = (TermWon, Takeover, CatchUp, Rebuild)
    entries = [p.name for p in nemesis.packages(["all"], 5, power=False, moments=moments)]
    assert entries.count("aimed") == 7 and len(entries) == 17
    steps = list(islice(plan(nemesis.packages(["all"], 5, False, False, moments), NODES, 0, 10.0),
                        1700))  # fmt: skip
    share = sum(isinstance(s.fault, Aimed | Seed003 | Seed001) for s in steps) / len(steps)
    assert 0.36 < share < 0.46, share  # 7 / 17
    fresh = sum(isinstance(s.fault, Seed001) and s.fault.tail == "fresh" for s in steps)
    assert 60 < fresh < 140, fresh  # 1 / 17
    # without a term won (or on four nodes) the histories are not scenarios: one entry a moment
    without = nemesis.packages(["all"], 5, power=False, moments=(Takeover, CatchUp))
    assert [p.name for p in without].count("aimed") == 2
    four = nemesis.packages(["all"], 4, power=False, moments=moments)
    assert [p.name for p in four].count("aimed") == 4
    assert [p.name for p in nemesis.packages(["aimed"], 5, moments=moments)] == ["aimed"]
