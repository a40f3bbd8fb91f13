"""The nemesis registry, its schedule and the history it writes, without any node."""

from __future__ import annotations

import json
import random
import statistics
import threading
from collections.abc import Callable, Mapping
from itertools import islice
from pathlib import Path
from typing import Any

import pytest

import nemesis
from clusters.backend import Node
from clusters.kinds.base import ClusterKind, KindOption
from clusters.kinds.patroni import PatroniCluster
from clusters.kinds.safekeeper import SafekeeperCluster
from core.endpoint import Endpoint
from core.errors import BadInput, InfraError
from core.history import HistoryWriter
from nemesis import grudges
from nemesis.base import NoNemesis
from nemesis.clock import Clock, offset
from nemesis.fault import Fault
from nemesis.packet import BEHAVIORS, Packet, netem_args
from nemesis.partition import REPLICATION, late_grudge
from nemesis.schedule import DEFAULT_INTERVAL, Nested, Package, ScheduledNemesis, plan, timescale

NODES = ["n1", "n2", "n3", "n4", "n5"]


class FakeNode:
    def __init__(self, name: str) -> None:
        self.name = name


class FakeCluster(ClusterKind):
    """A cluster kind with named nodes and nothing behind them."""

    name = "fake"
    cli_options = (KindOption("count", int, "How many nodes.", least=1),)

    def __init__(self, count: int) -> None:
        super().__init__(None, "fake", {"count": count})  # type: ignore[arg-type]

    @property
    def nodes(self) -> list[Node]:
        return [FakeNode(f"n{i}") for i in range(1, self.node_count() + 1)]  # type: ignore[misc]

    @classmethod
    def nodes_needed(cls, options: Mapping[str, Any]) -> int:
        return int(options["count"])

    def deploy(self, say: Callable[[str], None]) -> None:
        raise AssertionError("not in unit tests")

    def endpoints(self) -> list[Endpoint]:
        return []

    def processes(self) -> dict[str, str]:
        return {}

    def leader(self) -> str | None:
        return "n1"

    def status(self) -> dict[str, Any]:
        return {}


class FakeFault(Fault):
    """Records its starts and stops; can be told to fail either."""

    name = "fake"

    def __init__(self, on_start: Callable[[], None] = lambda: None) -> None:
        self.on_start = on_start
        self.fail_stop = False
        self.in_place = False

    def plan(self) -> dict[str, Any]:
        return {"fault": self.name}

    def start(self, cluster: ClusterKind) -> dict[str, Any]:
        self.in_place = True
        self.on_start()
        return self.plan() | {"mechanism": "none"}

    def stop(self, cluster: ClusterKind) -> dict[str, Any]:
        if self.fail_stop:
            raise RuntimeError("cannot undo")
        self.in_place = False
        return self.plan() | {"undone": True}


def events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def summary(steps: list[Any]) -> list[tuple[float, dict[str, Any], float]]:
    return [(s.gap, s.fault.plan(), s.duration) for s in steps]


# --- validate and the registry --------------------------------------------------------------


def test_unknown_nemesis_is_one_sentence_naming_the_choices() -> None:
    with pytest.raises(BadInput) as e:
        nemesis.validate(["kill", "bogus"], 5)
    text = str(e.value)
    assert "'bogus'" in text and "partition-majority" in text and "\n" not in text


def test_a_fault_the_cluster_is_too_small_for_is_refused() -> None:
    with pytest.raises(BadInput) as e:
        nemesis.validate(["partition-majority"], 1, "single")
    assert str(e.value) == "partition-majority needs at least 3 nodes; the single cluster has 1"
    with pytest.raises(BadInput, match="partition-primary needs at least 2 nodes"):
        nemesis.validate(["partition-primary"], 1)


@pytest.mark.parametrize(
    "names", [["none"], ["all"], ["kill"], ["kill-primary", "pause", "clock", "packet"]]
)
def test_what_a_single_node_cluster_can_have(names: list[str]) -> None:
    nemesis.validate(names, 1)


def test_every_package_of_the_issue_is_registered() -> None:
    wanted = {"partition-majority", "partition-ring", "partition-primary", "kill", "kill-primary"}
    assert wanted | {"pause", "clock", "packet"} <= set(nemesis.PACKAGES)
    nemesis.validate([*wanted, "none", "all"], 5)


def test_all_means_every_fault_kind_the_node_count_and_backend_allow() -> None:
    leader = ["partition-primary", "kill-primary", "pause-primary"]
    on_one = [p.name for p in nemesis.packages(["all"], 1)]
    assert on_one == [
        "kill", "pause", "clock", "packet", "power", "toxic", "kill-primary", "pause-primary"
    ]  # fmt: skip
    assert [p.name for p in nemesis.packages(["all", "kill"], 5)] == [
        "partition",
        "kill",
        "pause",
        "clock",
        "packet",
        "power",
        "toxic",
        *leader,
        "composite",
        "aimed",
    ]
    without_power = [p.name for p in nemesis.packages(["all"], 5, power=False)]
    assert without_power == [
        "partition", "kill", "pause", "clock", "packet", "toxic", *leader, "composite", "aimed"
    ]  # fmt: skip
    assert nemesis.packages(["none"], 5) == []
    assert nemesis.needs_power(["all"]) and nemesis.needs_power(["kill", "power"])
    assert not nemesis.needs_power(["kill", "partition"])


def test_all_cuts_off_the_leader_one_fault_in_seven() -> None:
    """Leader-aimed faults as packages of their own: a partition of the leader, which holds a
    deposed primary apart while another takes over, came once in 36 faults as one shape among
    six of one kind among six; now about once in seven (alone, or with a crash inside it)."""
    steps = list(islice(plan(nemesis.packages(["all"], 5), NODES, 0, 10.0), 4000))
    cut_off = sum(1 for s in steps if s.fault.plan().get("shape") == "primaries")
    assert 0.12 < cut_off / len(steps) < 0.17
    aimed = sum(1 for s in steps if s.fault.plan().get("target") == "primaries")
    assert 0.25 < aimed / len(steps) < 0.40


def test_composite_puts_a_kill_or_a_pause_inside_a_partition() -> None:
    steps = list(islice(plan([nemesis.PACKAGES["composite"]], NODES, 0, 10.0), 2000))
    assert all(s.inner is not None for s in steps)
    assert {s.fault.plan()["fault"] for s in steps} == {"partition"}
    assert {s.inner.fault.plan()["fault"] for s in steps if s.inner} == {"kill", "pause"}
    for s in steps:
        assert s.inner is not None and s.inner.after > 0
        assert s.inner.after + s.inner.duration < s.duration  # it ends inside the outer one
    fenced = sum(1 for s in steps if s.fault.plan()["shape"] == "primaries") / len(steps)
    assert 0.45 < fenced < 0.65  # the leader's partition half the time, or drawn as a shape
    others = [p.name for p in nemesis.packages(["partition-majority", "kill"], 5)]
    assert all(s.inner is None for s in islice(plan(
        [nemesis.PACKAGES[n] for n in others], NODES, 0, 10.0), 200))  # fmt: skip


def test_replication_kill_kills_the_leader_inside_its_cut_from_the_replicas() -> None:
    steps = list(islice(plan([nemesis.PACKAGES["replication-kill"]], NODES, 0, 60.0), 200))
    for s in steps:
        assert s.fault.plan() == {"fault": "partition", "shape": "replication", "grudge": None}
        assert s.inner is not None and s.inner.fault.plan()["target"] == "primaries"
        assert s.inner.fault.plan()["fault"] == "kill"
    assert "replication-kill" not in [p.name for p in nemesis.packages(["all"], 6)]
    # n1 leads; n4…n6 are the coordinators: n1 and its replicas n2, n3 lose each other, and
    # nothing else (the leader keeps its key and its clients)
    names = ["n1", "n2", "n3", "n4", "n5", "n6"]
    grudge = late_grudge(REPLICATION, names, "n1", ["n4", "n5", "n6"])
    assert grudges.as_json(grudge) == {
        "n1": ["n2", "n3"], "n2": ["n1"], "n3": ["n1"], "n4": [], "n5": [], "n6": [],
    }  # fmt: skip
    assert grudges.as_json(late_grudge(REPLICATION, names, None, ["n4"]))["n1"] == []


def test_faults_on_the_coordination_service_need_a_kind_that_has_one() -> None:
    for name in ("partition-dcs", "kill-dcs", "pause-dcs"):
        with pytest.raises(BadInput, match=f"{name} needs a cluster with a coordination service"):
            nemesis.validate([name], 5, "safekeeper")
        nemesis.validate([name], 6, "manatee", coordinated=True)
    plain = [p.name for p in nemesis.packages(["all"], 6, power=False)]
    coordinated = [p.name for p in nemesis.packages(["all"], 6, False, coordinated=True)]
    assert coordinated == [*plain, "partition-dcs", "kill-dcs", "pause-dcs"]
    # the names they had when only Manatee's ZooKeeper had them still mean the same
    old = [p.name for p in nemesis.packages(["partition-zookeeper", "kill-zookeeper"], 6)]
    assert old == ["partition-dcs", "kill-dcs"]
    with pytest.raises(BadInput, match="pause-dcs needs a cluster with a coordination service"):
        nemesis.validate(["pause-zookeeper"], 5, "safekeeper")


def test_build_gives_no_nemesis_for_none_and_a_schedule_otherwise(tmp_path: Path) -> None:
    with HistoryWriter(tmp_path / "h.jsonl") as history:
        assert isinstance(nemesis.build(["none"], FakeCluster(1), history, 0, 1.0), NoNemesis)
        built = nemesis.build(["kill", "pause"], FakeCluster(1), history, 0, 1.0)
        assert isinstance(built, ScheduledNemesis)
        assert [p.name for p in built.packages] == ["kill", "pause"]
        with pytest.raises(BadInput, match="the fake cluster has 1"):
            nemesis.build(["partition-ring"], FakeCluster(1), history, 0, 1.0)


# --- the schedule --------------------------------------------------------------------------


def test_the_same_seed_gives_the_same_schedule() -> None:
    chosen = nemesis.packages(["all", "kill-primary", "partition-ring"], 5)
    first = summary(list(islice(plan(chosen, NODES, 42, 10.0), 50)))
    again = summary(list(islice(plan(chosen, NODES, 42, 10.0), 50)))
    other = summary(list(islice(plan(chosen, NODES, 43, 10.0), 50)))
    assert first == again
    assert first != other
    assert {p["fault"] for _, p, _ in first} == {
        "partition",
        "kill",
        "pause",
        "clock",
        "packet",
        "power",
        "toxic",
        "aimed",
    }


def test_gaps_and_durations_average_the_interval() -> None:
    steps = list(islice(plan(nemesis.packages(["kill"], 3), NODES, 1, 4.0), 2000))
    times = [s.gap for s in steps] + [s.duration for s in steps]
    assert all(2.0 <= t <= 6.0 for t in times)
    assert statistics.mean(times) == pytest.approx(4.0, abs=0.1)


def test_a_named_shape_package_plans_that_shape_only() -> None:
    steps = islice(plan(nemesis.packages(["partition-ring"], 5), NODES, 9, 1.0), 20)
    assert {s.fault.plan()["shape"] for s in steps} == {"majorities-ring"}
    primary = next(plan(nemesis.packages(["partition-primary"], 5), NODES, 9, 1.0)).fault
    assert primary.plan() == {"fault": "partition", "shape": "primaries", "grudge": None}


def test_kill_primary_targets_whoever_leads_at_the_start() -> None:
    step = next(plan(nemesis.packages(["kill-primary"], 5), NODES, 0, 1.0))
    assert step.fault.plan() == {"fault": "kill", "target": "primaries", "targets": None}


def test_clock_and_packet_plans() -> None:
    rng = random.Random(0)
    clocks = [Clock.planned_for("one", NODES, rng) for _ in range(200)]
    bumps = [c for c in clocks if c.mode == "bump"]
    strobes = [c for c in clocks if c.mode == "strobe"]
    assert bumps and strobes
    assert all(128 <= abs(c.delta_ms) <= 2**18 for c in bumps)
    assert {c.delta_ms > 0 for c in bumps} == {True, False}
    assert all(64 <= c.period_ms <= 1024 and c.delta_ms > 0 for c in strobes)
    assert (offset(1500), offset(-250), offset(0)) == ("+1.500", "-0.250", "+0.000")
    packets = [Packet.planned_for("all", NODES, rng) for _ in range(200)]
    assert all(p.behaviors and set(p.behaviors) <= set(BEHAVIORS) for p in packets)
    assert {b for p in packets for b in p.behaviors} == set(BEHAVIORS)


def test_netem_arguments() -> None:
    assert netem_args({"delay": {"ms": 50, "jitter_ms": 10}, "loss": {"percent": 20}}) == (
        "delay 50ms 10ms loss 20%"
    )
    # Reordering needs a delay for the rest of the packets to be overtaken.
    assert netem_args({"reorder": {"percent": 25}}) == "delay 10ms 0ms reorder 25%"
    assert netem_args({"rate": {"kbit": 512}}) == "rate 512kbit"


# --- the nemesis and its history -----------------------------------------------------------


def one_fault(fault: FakeFault) -> list[Package]:
    return [Package("fake", 1, lambda nodes, rng: fault)]


def test_a_fault_in_place_when_the_run_stops_is_stopped_by_heal(tmp_path: Path) -> None:
    stop = threading.Event()
    fault = FakeFault(on_start=stop.set)  # the run ends while the fault is in place
    path = tmp_path / "h.jsonl"
    with HistoryWriter(path) as history:
        nem = ScheduledNemesis(FakeCluster(3), history, 0, 0.01, one_fault(fault))
        nem.run(stop)
        assert fault.in_place
        nem.heal()
        assert not fault.in_place
        nem.heal()  # nothing left: records nothing
    got = [(e["type"], e["f"], e["value"].get("cause")) for e in events(path)]
    assert got == [
        ("invoke", "start-fake", None),
        ("info", "start-fake", None),
        ("invoke", "stop-fake", "heal"),
        ("info", "stop-fake", "heal"),
    ]
    assert all(e["process"] == "nemesis" for e in events(path))
    assert events(path)[1]["value"] == {"fault": "fake", "mechanism": "none"}


def test_the_schedule_stops_each_fault_before_the_next(tmp_path: Path) -> None:
    faults: list[FakeFault] = []
    stop = threading.Event()

    def make(nodes: list[str], rng: random.Random) -> Fault:
        if any(f.in_place for f in faults):
            raise AssertionError("two faults at once")
        if len(faults) == 3:
            stop.set()
        faults.append(FakeFault())
        return faults[-1]

    path = tmp_path / "h.jsonl"
    with HistoryWriter(path) as history:
        ScheduledNemesis(FakeCluster(3), history, 0, 0.02, [Package("fake", 1, make)]).run(stop)
    fs = [e["f"] for e in events(path)]
    assert fs == ["start-fake", "start-fake", "stop-fake", "stop-fake"] * 3
    assert {e["value"]["cause"] for e in events(path) if e["f"] == "stop-fake"} == {"schedule"}


class InnerFault(FakeFault):
    name = "inner"


@pytest.mark.parametrize("stopped_inside", [False, True])
def test_a_nested_fault_starts_and_stops_inside_the_outer_one(
    tmp_path: Path, stopped_inside: bool
) -> None:
    """Each fault has its own events; a run that ends while both are in place heals the inner
    one first."""
    stop = threading.Event()
    outer = FakeFault()
    inner = InnerFault(on_start=stop.set if stopped_inside else lambda: None)

    made: list[Nested] = []

    def make(nodes: list[str], rng: random.Random) -> Nested:
        if made:
            stop.set()  # the second step: the run ends before it starts
        made.append(Nested(outer, inner))
        return made[-1]

    path = tmp_path / "h.jsonl"
    with HistoryWriter(path) as history:
        nem = ScheduledNemesis(FakeCluster(3), history, 0, 0.02, [Package("nest", 1, make)])
        nem.run(stop)
        nem.heal()
    got = [(e["f"], e["value"].get("cause")) for e in events(path) if e["type"] == "info"]
    cause = "heal" if stopped_inside else "schedule"
    assert got == [
        ("start-fake", None),
        ("start-inner", None),
        ("stop-inner", cause),
        ("stop-fake", cause),
    ]
    assert not outer.in_place and not inner.in_place


def test_a_stop_that_fails_is_recorded_and_heal_says_so(tmp_path: Path) -> None:
    stop = threading.Event()
    fault = FakeFault(on_start=stop.set)
    fault.fail_stop = True
    path = tmp_path / "h.jsonl"
    with HistoryWriter(path) as history:
        nem = ScheduledNemesis(FakeCluster(3), history, 0, 0.01, one_fault(fault))
        nem.run(stop)
        with pytest.raises(InfraError, match="stop-fake: cannot undo"):
            nem.heal()
        fault.fail_stop = False
        nem.heal()  # still in place, so the next heal tries again
    assert not fault.in_place
    failed = [e for e in events(path) if "error" in e]
    assert [(e["type"], e["f"], e["error"]) for e in failed] == [
        ("info", "stop-fake", "cannot undo")
    ]


def test_heal_undoes_faults_even_when_the_history_is_closed(tmp_path: Path) -> None:
    stop = threading.Event()
    fault = FakeFault(on_start=stop.set)
    history = HistoryWriter(tmp_path / "h.jsonl")
    nem = ScheduledNemesis(FakeCluster(3), history, 0, 0.01, one_fault(fault))
    nem.run(stop)
    history.close()  # the runner heals after the history is closed when a run fails
    nem.heal()
    assert not fault.in_place


def test_heal_nodes_with_no_nodes_does_nothing() -> None:
    assert nemesis.heal_nodes([]) == []


def test_faults_on_a_kind_that_fails_over_slowly_outlast_its_failover() -> None:
    """Patroni fails over only once its leader key's TTL and a loop have passed: without
    --nemesis-interval its faults come on that timescale and each outlasts it, where the
    default's faults (5 to 15 s) never did; a given interval is taken as it is."""
    failover = PatroniCluster.failover_s(PatroniCluster.checked_options({}))
    assert failover == 40.0  # ttl 30, loop_wait 10
    assert PatroniCluster.failover_s(PatroniCluster.checked_options({"ttl": 9})) == 12.0
    assert timescale(failover, None) == (40.0, 50.0)
    assert timescale(failover, 7.0) == (7.0, 0.0)
    assert timescale(SafekeeperCluster.failover_s({}), None) == (DEFAULT_INTERVAL, 0.0)
    made = nemesis.packages(["pause-primary", "partition-primary"], 6)
    slow = list(islice(plan(made, NODES, 0, *timescale(failover, None)), 200))
    assert min(s.duration for s in slow) >= 50.0
    assert statistics.mean(s.gap for s in slow) == pytest.approx(40.0, rel=0.1)
    # a kind that fails over within the default keeps the schedules drawn before
    default = list(islice(plan(made, NODES, 0, DEFAULT_INTERVAL), 50))
    again = list(islice(plan(made, NODES, 0, DEFAULT_INTERVAL, 0.0), 50))
    assert [s.duration for s in default] == [s.duration for s in again]
    assert min(s.duration for s in default) < 10.0
