"""The aimed nemesis's plan: what the seed draws (moment, roles' order, provocation, strike,
delay), drawn among the moments the kind declares, and seed 003's history and seed 001's
example with each of its tails as three scenarios more where the kind and the nodes allow
them. Its effect on real nodes is tested in tests/integration/test_aimed.py."""

from __future__ import annotations

import random
import threading
import time
from itertools import islice
from typing import ClassVar

import nemesis
from checkers.moments import CatchUp, LeaderChanged, LeaseEnding, Rebuild, Takeover, TermWon
from nemesis import grudges
from nemesis.aimed import ANY, HOLD_S, PROVOCATIONS, STRIKES, Aimed, Then, union
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
    """The cuts in place are one partition: each node deaf to whomever any cut makes it deaf
    to, so a strike's cut leaves the provocation's in place."""
    leader, struck = grudges.isolate(NODES, ["n1"]), grudges.isolate(NODES, ["n4"])
    both = union(NODES, [leader, struck])
    assert both["n1"] == frozenset(NODES) - {"n1"}  # still cut off
    assert both["n4"] == frozenset(NODES) - {"n4"}
    assert both["n2"] == frozenset({"n1", "n4"})
    assert union(NODES, [leader]) == leader and union(NODES, []) == {n: frozenset() for n in NODES}


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


def test_the_aimed_share_of_a_schedule_is_its_entries_share() -> None:
    """How many chains explore gives a run: all of its faults under `aimed`, 7 in 17 of
    `all`'s on five nodes without power, none where the aimed package is not chosen."""
    moments = (TermWon, Takeover, CatchUp, Rebuild)
    assert nemesis.aimed_share(["aimed"], 5, False, False, moments) == 1.0
    assert nemesis.aimed_share(["all"], 5, False, False, moments) == 7 / 17
    assert nemesis.aimed_share(["partition", "aimed"], 5, False, False, moments) == 1 / 2
    assert nemesis.aimed_share(["partition"], 5, False, False, moments) == 0.0


def test_chains_given_to_all_are_its_aimed_faults_in_turn_among_the_others() -> None:
    moments = (TermWon, Takeover, CatchUp, Rebuild)
    chosen = nemesis.packages(["all"], 5, False, False, moments)
    rng = random.Random(3)
    given = [Aimed.planned(NODES, rng, (Takeover,)), Aimed.planned(NODES, rng, (CatchUp,))]
    specs = [c.spec() for c in given if isinstance(c, Aimed)]
    steps = list(islice(plan(nemesis.given_chains(chosen, specs, moments), NODES, 0, 10.0), 170))
    aimed = [s.fault.spec() for s in steps if isinstance(s.fault, Aimed | Seed001 | Seed003)]
    assert 50 < len(aimed) < 90  # 7 of 17 entries, as without chains
    assert aimed == [specs[i % 2] for i in range(len(aimed))]  # the chains, round and round
    assert len({type(s.fault).__name__ for s in steps}) > 5  # and every other fault kind


def test_an_aimed_fault_is_a_chain_of_one_to_three_steps() -> None:
    """A step in three is alone; the others go on with one or two more steps, each aimed at
    one of the kind's moments or at any, every strike but the last held a while."""
    moments = (TermWon, Takeover, CatchUp)
    faults = [f for f in drawn(600, moments=moments) if isinstance(f, Aimed)]
    lengths = [1 + len(f.then) for f in faults]
    for n in (1, 2, 3):
        assert 0.25 < lengths.count(n) / len(faults) < 0.42, (n, lengths.count(n))
    chains = [f for f in faults if f.then]
    assert {s.moment for f in chains for s in f.then} == {*moments, None}  # None: any moment
    assert {s.strike for f in chains for s in f.then} == set(STRIKES)
    for f in chains:
        assert f.hold is not None and HOLD_S[0] <= f.hold <= HOLD_S[1]
        assert f.then[-1].hold is None  # the last strike stays until the fault's end
        assert all(s.hold is not None for s in f.then[:-1])
        assert f.among == moments
        plan = f.plan()
        assert [s["moment"] for s in plan["then"]] == [
            s.moment.name if s.moment else ANY for s in f.then
        ]
    assert {f.release for f in chains} == {True, False}
    assert all(f.hold is None and "then" not in f.plan() for f in faults if not f.then)


def test_a_later_step_tries_its_moments_roles_from_where_its_order_starts() -> None:
    step = Then(TermWon, "kill", 0.0, 0.5)
    assert step.roles_of(TermWon) == ("voters", "deposed", "new-leader", "voted-not-recorded")
    assert Then(None, "kill", 0.0, 0.0).roles_of(Takeover) == Takeover.roles
    assert sorted(step.roles_of(CatchUp)) == sorted(CatchUp.roles)


def test_a_cancelled_watch_returns_without_waiting_for_its_moment() -> None:
    """The run's end cancels a fault still watching: its start returns within a poll or two,
    not after the moment's watch (30 s), so the heal is not held up."""

    class Quiet:
        """A cluster of no nodes whose polls never show a moment; n1 leads, so the leader's
        loss (a partition of nobody) is provoked."""

        nodes: ClassVar[list] = []

        def poll(self) -> dict:
            return {}

        def leader(self) -> str:
            return "n1"

    fault = Aimed(LeaderChanged, LeaderChanged.roles, "partition", "kill", 0.0, 3.0, 0.0)
    threading.Timer(0.3, fault.cancel).start()
    began = time.monotonic()
    value = fault.start(Quiet())  # type: ignore[arg-type]
    assert time.monotonic() - began < 2.0
    assert value["reached"] is False and value["provoked"]["target"] == "n1"
    assert value["steps"] == [
        {"moment": "leader-changed", "role": "new-leader", "strike": "kill", "reached": False}
    ]
