"""The polls file: a line for each change, and the newest poll at the end even unchanged, so
that the file says how the cluster stood when the run ended (the recovery rule reads that)."""

from __future__ import annotations

import threading
from pathlib import Path

from core.polls import ComputePoll, Record, Round, encode_round, known_records, read_rounds
from harness import polls as polls_module
from harness.polls import PollRecorder


def test_changes_are_written_and_the_last_poll_too_when_nothing_changed(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setattr(polls_module, "INTERVAL", 0.0)
    answers = [
        {"c1": ComputePoll(role="candidate")},
        {"c1": ComputePoll(role="primary", serving=True)},
        {},  # nobody answered: no line
        {"c1": ComputePoll(role="primary", serving=True)},
        {"c1": ComputePoll(role="primary", serving=True)},
    ]
    clock = iter(range(1, 100))
    stop = threading.Event()

    def poll() -> dict:
        state = answers.pop(0)
        if not answers:
            stop.set()
        return state

    recorder = PollRecorder(poll, lambda: next(clock), tmp_path / "cluster.jsonl")
    recorder.run(stop)
    rounds = read_rounds(tmp_path / "cluster.jsonl")
    assert [r.nodes["c1"].role for r in rounds] == ["candidate", "primary", "primary"]
    assert [r.begun for r in rounds] == [1, 3, 8]  # the last line is the fifth poll's
    assert recorder.members == {"c1"} and recorder.latest == rounds[-1]


class MonitorPoll(Record, tag="test-monitor"):
    """A record only this module defines, as a new kind's module defines its own."""

    goal: str = ""


def test_a_record_declared_outside_core_is_read_back_by_its_tag(tmp_path: Path) -> None:
    path = tmp_path / "cluster.jsonl"
    line = encode_round(
        Round(time=1, nodes={"m": MonitorPoll(goal="primary"), "c1": ComputePoll()})
    )
    path.write_bytes(line + b"\n")
    assert MonitorPoll in known_records()
    (read,) = read_rounds(path)
    assert read.nodes == {"m": MonitorPoll(goal="primary"), "c1": ComputePoll()}
