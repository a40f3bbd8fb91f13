"""`harness run --schedule`: a schedule's faults strike at their seconds, and a fault chosen by
role strikes whoever plays the role then (the second kill of the primary hits the node that took
over from the first one's victim, whichever that is); the run's own schedule, exported, gives
the same faults back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.polls import read_rounds
from tests.e2e.conftest import harness, why_invalid

pytestmark = [pytest.mark.docker, pytest.mark.e2e]

KILL_PRIMARY = {"fault": "kill", "target": "primaries", "targets": None}
SCHEDULE = [(2.0, 8.0), (15.0, 20.0)]  # the primary killed twice, a failover between


def leader_before(rounds: list, time_ns: int) -> str | None:
    """The node the last poll before `time_ns` saw elected in the highest term: the nemesis's
    primary is the elected proxy, which on a loaded machine may not serve yet."""
    seen = None
    for r in rounds:
        if r.time > time_ns:
            break
        terms = {n: t for n, s in r.nodes.items() if (t := s.led_term()) is not None}
        seen = max(terms, key=terms.__getitem__) if terms else seen
    return seen


def test_a_replayed_kill_of_the_primary_kills_whoever_leads_then(tmp_path: Path) -> None:
    schedule = tmp_path / "schedule.json"
    faults = [{"start_s": a, "stop_s": b, "plan": KILL_PRIMARY} for a, b in SCHEDULE]
    schedule.write_text(json.dumps({"format": "harness-schedule", "version": 1,
                                    "cluster": "safekeeper", "faults": faults}))  # fmt: skip
    store = tmp_path / "results"
    result = harness("run", "--workload", "set", "--schedule", str(schedule), "--time", "24",
                     "--settle", "2", "--store", str(store), timeout=600)  # fmt: skip
    run = (store / "latest").resolve()
    results = json.loads((run / "results.json").read_text())
    assert result.returncode == 0, why_invalid(result, results)
    history = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    nemesis = [e for e in history if e["process"] == "nemesis"]
    starts = [e for e in nemesis if e["f"] == "start-kill" and e["type"] == "invoke"]
    stops = [e for e in nemesis if e["f"] == "stop-kill" and e["type"] == "invoke"]
    assert [round(e["time"] / 1e9) for e in starts] == [2, 15]
    for event, (start_s, _) in zip(starts, SCHEDULE, strict=True):
        assert abs(event["time"] / 1e9 - start_s) < 1.0
    for event, (_, stop_s) in zip(stops[:2], SCHEDULE, strict=True):
        assert abs(event["time"] / 1e9 - stop_s) < 1.0
    rounds = read_rounds(run / "cluster.jsonl")
    struck = [
        e["value"]["targets"] for e in nemesis if e["f"] == "start-kill" and e["type"] == "info"
    ]
    for event, targets in zip(starts, struck, strict=True):
        assert targets == [leader_before(rounds, event["time"])], (targets, event["time"])
    exported = harness("export", str(run), "--format", "schedule")
    assert exported.returncode == 0, exported.stderr
    again = json.loads((run / "schedule.json").read_text())
    assert [f["plan"] for f in again["faults"]] == [KILL_PRIMARY, KILL_PRIMARY]
    assert [round(f["start_s"]) for f in again["faults"]] == [2, 15]
    assert again["nodes"] == ["n1", "n2", "n3", "n4", "n5"]
