"""The shrink's search (harness/shrink.py) over a predicate standing for the runs: ddmin finds the
faults that matter, the rest is moved earlier and cut short, the load is lowered while the
anomaly shows, and a spent budget leaves the smallest found so far."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from core.errors import BadInput
from harness.config import RunConfig
from harness.explore import Outcome
from harness.shrink import (
    GAP_S,
    LEAD_S,
    MIN_RATE,
    TAIL_S,
    Candidate,
    Search,
    closed_up,
    ddmin,
    shrink_run,
    split,
)
from nemesis.replay import Entry


def fault(i: int, start: float, stop: float | None) -> Entry:
    return Entry(start, stop, {"fault": "kill", "target": "one", "targets": [f"n{i % 5 + 1}"],
                               "number": i})  # fmt: skip


def numbers(faults: list[Entry] | tuple[Entry, ...]) -> list[int]:
    return [f.plan["number"] for f in faults]


FAULTS = [fault(i, 10.0 + 20 * i, 18.0 + 20 * i) for i in range(16)]


def test_ddmin_finds_the_two_faults_that_matter_among_sixteen() -> None:
    asked: list[list[int]] = []

    def fits(fs: list[Entry]) -> bool:
        asked.append(numbers(fs))
        return {3, 11} <= set(numbers(fs))

    assert numbers(ddmin(list(FAULTS), fits)) == [3, 11]
    assert len(asked) < 60  # far fewer than the 2^16 subsets


def test_ddmin_is_one_minimal_where_any_two_of_three_will_do() -> None:
    def fits(fs: list[Entry]) -> bool:
        return len({2, 5, 9} & set(numbers(fs))) >= 2

    found = ddmin(list(FAULTS), fits)
    assert fits(found) and len(found) == 2
    assert all(not fits([f for f in found if f is not drop]) for drop in found)


def test_a_bug_that_needs_no_fault_shrinks_to_none() -> None:
    assert ddmin(list(FAULTS), lambda fs: True) == []


def test_split_keeps_order_and_sizes_near_equal() -> None:
    chunks = split(list(FAULTS[:7]), 3)
    assert [numbers(c) for c in chunks] == [[0, 1, 2], [3, 4], [5, 6]]
    assert split(list(FAULTS[:2]), 4) == [[FAULTS[0]], [FAULTS[1]]]


def test_quiet_stretches_are_closed_and_overlapping_faults_keep_their_offsets() -> None:
    outer, inner = fault(0, 100.0, 130.0), fault(1, 105.0, 110.0)
    later, healed = fault(2, 300.0, 310.0), fault(3, 301.0, None)
    moved = closed_up([later, inner, outer, healed])
    assert [(f.start_s, f.stop_s) for f in moved] == [
        (LEAD_S, LEAD_S + 30), (LEAD_S + 5, LEAD_S + 10),
        (LEAD_S + 30 + GAP_S, LEAD_S + 40 + GAP_S), (LEAD_S + 31 + GAP_S, None),
    ]  # fmt: skip
    assert [f.plan for f in moved] == [outer.plan, inner.plan, later.plan, healed.plan]
    early = closed_up([fault(0, 1.0, 4.0), fault(1, 4.5, 6.0)])
    assert [(f.start_s, f.stop_s) for f in early] == [(1.0, 4.0), (4.5, 6.0)]  # no gap widened


def test_the_search_keeps_the_faults_that_matter_early_short_and_light() -> None:
    """The anomaly needs faults 3 and 11, two workers or more, and a run long enough for both;
    the evidence came at 260 s, so the first cut keeps what began before it."""
    original = Candidate(tuple(FAULTS), 600.0, 10, 100.0)
    found: list[Candidate] = []

    def shows(c: Candidate) -> bool:
        ends = [f.stop_s or c.time_limit for f in c.faults]
        return {3, 11} <= set(numbers(c.faults)) and c.concurrency >= 2 and max(ends) < c.time_limit

    search = Search(shows, budget_s=3600, found=found.append)
    best = search.run(original, evidence_s=260.0)
    assert numbers(best.faults) == [3, 11]
    assert best.faults[0].start_s == LEAD_S and best.faults[1].start_s == LEAD_S + 8 + GAP_S
    assert best.time_limit == LEAD_S + 8 + GAP_S + 8 + TAIL_S
    assert best.concurrency == 2 and best.rate == 10.0
    assert found[-1] == best and all(shows(c) for c in found)
    assert search.tried == len(search.seen) < 60


def test_a_fault_in_place_at_the_end_keeps_its_length_and_the_run_is_cut_after_it() -> None:
    """A run under `--nemesis all` mostly ends with a fault the heal stops: moved earlier, it
    lasts as long as it did, and --time ends just after it (before, a fault without a stop of
    its own kept the whole --time)."""
    first, last = fault(0, 100.0, 130.0), fault(1, 500.0, None)
    original = Candidate((first, last), 600.0, 1, MIN_RATE)
    best = Search(lambda c: {0, 1} <= set(numbers(c.faults)), budget_s=3600).run(original)
    assert [(f.start_s, f.stop_s) for f in best.faults] == [
        (LEAD_S, LEAD_S + 30), (LEAD_S + 30 + GAP_S, LEAD_S + 30 + GAP_S + 100),
    ]  # fmt: skip
    assert best.time_limit == LEAD_S + 30 + GAP_S + 100 + TAIL_S


def test_evidence_before_every_fault_tries_none_for_just_past_it_first() -> None:
    tried: list[Candidate] = []
    original = Candidate(tuple(FAULTS[:3]), 600.0, 10, 100.0)
    Search(lambda c: tried.append(c) or False, budget_s=3600).run(original, evidence_s=4.0)
    assert (tried[0].faults, tried[0].time_limit) == ((), 4.0 + TAIL_S)


def test_a_spent_budget_leaves_the_smallest_found_so_far() -> None:
    ticks = itertools.count()
    original = Candidate(tuple(FAULTS), 600.0, 10, 100.0)
    search = Search(lambda c: {3, 11} <= set(numbers(c.faults)), budget_s=12,
                    clock=lambda: float(next(ticks)))  # fmt: skip
    best = search.run(original)
    assert search.tried < 12  # the clock ticks once a try
    assert best.size() < original.size() and {3, 11} <= set(numbers(best.faults))


# shrink_run over a stored red run, with runs stood in for by a function of their schedule


def red_run(tmp_path: Path, verdict: str = "invalid") -> Path:
    """A stored run of the single kind: five kills of its primary, a lost write."""
    run = tmp_path / "results" / "single-set-kill" / "20261201T120000"
    run.mkdir(parents=True)
    cfg = RunConfig(cluster="single", workloads=["set"], nemesis=["kill-primary"], time_limit=120)
    (run / "config.json").write_text(json.dumps(cfg.to_json()))
    kill = {"fault": "kill", "target": "primaries", "targets": None}
    events = []
    for i in range(5):
        for f, at in (("start-kill", 10 + 20 * i), ("stop-kill", 18 + 20 * i)):
            value = kill | ({"cause": "schedule"} if f.startswith("stop") else {})
            events.append({"index": len(events), "time": int(at * 1e9), "process": "nemesis",
                           "type": "invoke", "f": f, "value": value})  # fmt: skip
    (run / "history.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    lost = {"type": "lost", "explanation": "element 7 was lost", "window_ns": [0, int(60e9)]}
    red = verdict == "invalid"
    checker = {"valid": not red, "anomaly_types": ["lost"] * red, "anomalies": [lost] * red}
    checkers = {"set": checker}
    (run / "results.json").write_text(json.dumps({"verdict": verdict, "checkers": checkers}))
    return run


def runs_needing_the_kill_at(second: float, tmp_path: Path, seen: list[RunConfig]) -> Any:
    """A stand-in for a run: it shows the lost write when its schedule kills at `second`."""

    def run_one(cfg: RunConfig) -> Outcome:
        seen.append(cfg)
        folder = tmp_path / "runs" / str(len(seen))
        folder.mkdir(parents=True)
        starts = [f["start_s"] for f in (cfg.schedule or {})["faults"]]
        lost = any(abs(s - second) < 1e-6 for s in starts) or (
            len(starts) == 1 and cfg.time_limit < 120  # moved earlier: still the one kill
        )
        anomaly = {"type": "lost", "explanation": "element 7 was lost"}
        checker = {
            "valid": not lost,
            "anomaly_types": ["lost"] * lost,
            "anomalies": [anomaly] * lost,
        }
        (folder / "results.json").write_text(json.dumps({"checkers": {"set": checker}}))
        return Outcome(folder, 1 if lost else 0, {})

    return run_one


def test_a_red_run_shrinks_to_its_one_needed_fault_with_the_command_that_replays_it(
    tmp_path: Path,
) -> None:
    run = red_run(tmp_path)
    seen: list[RunConfig] = []
    said: list[str] = []
    code = shrink_run(
        run, [], 2, 3, 60, runs_needing_the_kill_at(50.0, tmp_path, seen), said.append
    )
    assert code == 0
    folder = run.parent.parent / "shrink" / "single-set-kill-20261201T120000"
    summary = json.loads((folder / "shrink.json").read_text())
    assert summary["original"]["faults"] == 5 and summary["minimal"]["faults"] == 1
    assert summary["shown"] == 3 and summary["rate"] == 1.0 and summary["kept"] == ["set:lost"]
    schedule = json.loads((folder / "schedule.json").read_text())
    assert [f["plan"]["fault"] for f in schedule["faults"]] == ["kill"]
    command = (folder / "command.txt").read_text()
    assert command.startswith("harness run --cluster single --workload set")
    assert f"--schedule {folder / 'schedule.json'}" in command and "--concurrency 1" in command
    assert all(c.nemesis == ["schedule"] and c.store == folder / "runs" for c in seen)
    assert "element 7 was lost" in (folder / "report.html").read_text()
    assert any(line.startswith("minimal: 1 faults") for line in said)


def test_what_cannot_be_shrunk_is_one_sentence(tmp_path: Path) -> None:
    def never(cfg: RunConfig) -> Outcome:
        raise AssertionError("no run for bad input")

    with pytest.raises(BadInput, match="only a red run has an anomaly to keep"):
        shrink_run(red_run(tmp_path / "a", "valid"), [], 3, 5, 60, never, print)
    with pytest.raises(BadInput, match="is no run folder"):
        shrink_run(tmp_path / "nothing", [], 3, 5, 60, never, print)
    with pytest.raises(BadInput, match="showed no G1c anomaly: it showed set:lost"):
        shrink_run(red_run(tmp_path / "b"), ["G1c"], 3, 5, 60, never, print)
    with pytest.raises(BadInput, match="--repeats must be at least 1"):
        shrink_run(red_run(tmp_path / "c"), [], 0, 5, 60, never, print)


def test_ctrl_c_in_a_run_keeps_what_was_found(tmp_path: Path) -> None:
    run = red_run(tmp_path)
    calls: list[RunConfig] = []
    found = runs_needing_the_kill_at(50.0, tmp_path, calls)

    def interrupted_later(cfg: RunConfig) -> Outcome:
        if len(calls) >= 3:
            return Outcome(None, 130, {}, interrupted=True)
        return found(cfg)

    assert shrink_run(run, [], 1, 1, 60, interrupted_later, print) == 130
    folder = run.parent.parent / "shrink" / "single-set-kill-20261201T120000"
    assert len(json.loads((folder / "schedule.json").read_text())["faults"]) < 5
