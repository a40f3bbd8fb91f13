"""A run's schedule of faults (nemesis/replay.py): read from a history, written as a versioned
file, checked against a cluster, and every fault any package draws made again from its recorded
plan; the replaying nemesis starts and stops each at its second."""

from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import nemesis
from clusters.kinds.autofailover import AutofailoverCluster
from clusters.kinds.patroni import PatroniCluster
from clusters.kinds.repmgr import RepmgrCluster
from clusters.kinds.safekeeper import SafekeeperCluster
from clusters.kinds.streaming import StreamingCluster
from core.errors import BadInput
from core.history import HistoryWriter
from nemesis import replay
from nemesis.schedule import Nested
from tests.unit.test_nemesis_schedule import FakeCluster, FakeFault

S = 1_000_000_000


def nemesis_event(time_s: float, type_: str, f: str, value: dict[str, Any]) -> dict[str, Any]:
    return {"index": 0, "time": int(time_s * S), "process": "nemesis", "type": type_, "f": f,
            "value": value}  # fmt: skip


def test_a_history_gives_each_fault_its_start_its_stop_and_its_plan() -> None:
    """Each fault runs from its start's invoke to its stop's invoke; one inside another keeps
    its own times; one the heal stopped has no stop of its own."""
    part = {"fault": "partition", "shape": "primaries", "grudge": None}
    kill = {"fault": "kill", "target": "primaries", "targets": None}
    clock = {"fault": "clock", "mode": "bump", "target": "one", "targets": ["n2"], "delta_ms": 9}
    events = [
        nemesis_event(5.0, "invoke", "start-partition", part),
        nemesis_event(5.2, "info", "start-partition", part | {"grudge": {"n1": ["n2"]}}),
        {"index": 3, "time": 6 * S, "process": 0, "type": "invoke", "f": "write", "value": 1},
        nemesis_event(7.0, "invoke", "start-kill", kill),
        nemesis_event(7.1, "info", "start-kill", kill | {"targets": ["n1"]}),
        nemesis_event(9.0, "invoke", "stop-kill", kill | {"cause": "schedule"}),
        nemesis_event(9.5, "info", "stop-kill", kill | {"cause": "schedule"}),
        nemesis_event(15.0, "invoke", "stop-partition", part | {"cause": "schedule"}),
        nemesis_event(15.1, "info", "stop-partition", part | {"cause": "schedule"}),
        nemesis_event(20.0, "invoke", "start-clock", clock),
        nemesis_event(20.1, "info", "start-clock", clock),
        nemesis_event(60.0, "invoke", "stop-clock", clock | {"cause": "heal"}),
    ]
    schedule = replay.schedule_of(events, "safekeeper", ["n1", "n2", "n3"], "results/x")
    assert schedule["format"] == replay.FORMAT and schedule["version"] == replay.VERSION
    assert [(f["start_s"], f["stop_s"], f["plan"]) for f in schedule["faults"]] == [
        (5.0, 15.0, part), (7.0, 9.0, kill), (20.0, None, clock),
    ]  # fmt: skip


KINDS = [
    (SafekeeperCluster, {}),
    (SafekeeperCluster, {"mode": "confirm-rollback"}),
    (StreamingCluster, {}),
    (PatroniCluster, {}),
    (AutofailoverCluster, {"candidate_priority": "n3=0"}),
    (RepmgrCluster, {}),
]


@pytest.mark.parametrize(("kind", "given"), KINDS, ids=lambda k: getattr(k, "name", str(k)))
def test_every_fault_every_package_draws_is_made_again_from_its_plan(
    kind: type, given: dict[str, Any]
) -> None:
    """Under `all`, with power: each fault drawn, rebuilt from its recorded plan, plans the same
    (so it draws nothing anew and strikes the same roles)."""
    options = kind.checked_options(given)
    count = kind.nodes_needed(options)
    nodes = [f"n{i}" for i in range(1, count + 1)]
    moments = kind.moments_of(options)
    chosen = nemesis.packages(
        ["all"], count, True, kind.coordinated, moments, kind=kind,
        links=tuple(link.name for link in kind.links),
    )  # fmt: skip
    replaying = replay.replaying_on(kind, options)
    rng = random.Random(7)
    seen = set()
    for _ in range(300):
        made = rng.choice(chosen).make(nodes, rng)
        for fault in (made.outer, made.inner) if isinstance(made, Nested) else (made,):
            plan = json.loads(json.dumps(fault.plan()))  # as the history holds it
            again = replay.fault_of(plan, replaying)
            assert type(again) is type(fault) and again.plan() == fault.plan(), plan
            seen.add(plan["fault"])
    assert {"partition", "kill", "aimed"} <= seen


def schedule_with(*plans: dict[str, Any]) -> dict[str, Any]:
    faults = [{"start_s": i, "stop_s": i + 1, "plan": p} for i, p in enumerate(plans)]
    return {"format": replay.FORMAT, "version": 1, "cluster": "safekeeper", "faults": faults}


def check(schedule: dict[str, Any], nodes: int = 5) -> list[replay.Entry]:
    options = SafekeeperCluster.checked_options({})
    names = [f"n{i}" for i in range(1, nodes + 1)]
    return replay.entries(schedule, names, replay.replaying_on(SafekeeperCluster, options))


def test_a_fault_the_cluster_cannot_have_is_refused_before_anything_starts() -> None:
    one = {"fault": "kill", "target": "one", "targets": ["n7"]}
    with pytest.raises(BadInput, match="names n7, which this cluster does not have"):
        check(schedule_with(one))
    grudge = {"fault": "partition", "shape": "one", "grudge": {"n1": ["n6"], "n6": ["n1"]}}
    with pytest.raises(BadInput, match="names n6"):
        check(schedule_with(grudge))
    with pytest.raises(BadInput, match="no-such"):
        check(schedule_with({"fault": "no-such"}))
    patroni = {"fault": "kill-process", "process": "patroni", "target": "one", "pick": 0.5}
    with pytest.raises(BadInput, match="process 'patroni', which this cluster kind does not run"):
        check(schedule_with(patroni))
    aimed = {"fault": "aimed", "spec": {"moment": "leader-key-taken", "strike": "kill"}}
    with pytest.raises(BadInput, match="moment 'leader-key-taken'"):
        check(schedule_with(aimed))
    backwards = schedule_with(one) | {"faults": [{"start_s": 5, "stop_s": 2, "plan": one}]}
    with pytest.raises(BadInput, match="stops before it starts"):
        check(backwards, nodes=8)
    assert [e.plan for e in check(schedule_with(one), nodes=8)] == [one]


def test_a_file_that_is_no_schedule_of_this_version_is_one_sentence(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    for text, said in [
        ("{", "is not JSON"),
        (json.dumps([1]), "is not a schedule"),
        (json.dumps(schedule_with() | {"version": 99}), "version 99; this harness reads version 1"),
    ]:
        path.write_text(text)
        with pytest.raises(BadInput, match=said):
            replay.read_schedule(path)
    path.write_text(json.dumps(schedule_with()))
    assert replay.read_schedule(path)["faults"] == []
    with pytest.raises(BadInput, match="cannot read"):
        replay.read_schedule(tmp_path / "none.json")


def test_a_power_cut_or_a_toxic_asks_for_what_it_needs() -> None:
    def entry(plan: dict[str, Any]) -> replay.Entry:
        return replay.Entry(0.0, None, plan)

    assert replay.packages([entry({"fault": "kill"})]) == ["schedule"]
    assert replay.packages([entry({"fault": "power"}), entry({"fault": "toxic"})]) == [
        "power", "toxic",
    ]  # fmt: skip
    struck = {"fault": "aimed", "strike_with": "kill", "then": [{"strike_with": "power"}]}
    assert replay.packages([entry(struck)]) == ["power"]


def test_the_replay_starts_and_stops_each_fault_at_its_second(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[FakeFault] = []

    def fake(plan: Any, replaying: Any) -> FakeFault:
        made.append(FakeFault())
        return made[-1]

    monkeypatch.setattr(replay, "fault_of", fake)
    schedule = [
        replay.Entry(0.2, 0.6, {"fault": "fake"}),
        replay.Entry(0.3, 0.4, {"fault": "fake"}),  # inside the first
        replay.Entry(0.7, None, {"fault": "fake"}),  # until the heal
    ]
    path = tmp_path / "h.jsonl"
    stop = threading.Event()
    with HistoryWriter(path) as history:
        nem = replay.ReplayNemesis(FakeCluster(3), history, schedule)
        runner = threading.Thread(target=nem.run, args=(stop,))
        runner.start()
        time.sleep(1.0)
        stop.set()
        runner.join(5)
        nem.heal()
    events = [json.loads(line) for line in path.read_text().splitlines()]
    invoked = [(e["f"], e["time"] / S, (e["value"] or {}).get("cause"))
               for e in events if e["type"] == "invoke"]  # fmt: skip
    assert [(f, cause) for f, _, cause in invoked] == [
        ("start-fake", None), ("start-fake", None), ("stop-fake", "schedule"),
        ("stop-fake", "schedule"), ("start-fake", None), ("stop-fake", "heal"),
    ]  # fmt: skip
    for (_, at, _), want in zip(invoked[:5], [0.2, 0.3, 0.4, 0.6, 0.7], strict=True):
        assert want <= at < want + 0.15
    assert not any(f.in_place for f in made)
