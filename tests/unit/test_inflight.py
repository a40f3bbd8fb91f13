"""Operations in flight: each invocation gets exactly one completion, `info` when the run gave up
on it, and nothing starts once the run is over."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.history import HistoryWriter
from harness.inflight import InFlight, Op, RunOver


def events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_an_operation_in_flight_is_completed_once(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    with HistoryWriter(path) as history:
        inflight = InFlight(history)
        inflight.invoke(0, Op(0, "add", 1, "n1,n2", "set", True))
        inflight.invoke(1, Op(1, "add", 2, "n1,n2", "set", True))
        assert inflight.complete(0, "ok", 1, "n1") is True
        assert inflight.abandon("interrupted") == 1
        assert inflight.complete(1, "ok", 2, "n1") is False  # the run already recorded it
        with pytest.raises(RunOver):
            inflight.invoke(0, Op(0, "add", 3, "n1,n2", "set", True))
    got = [(e["process"], e["type"], e["value"], e["node"], e.get("error")) for e in events(path)]
    assert got == [
        (0, "invoke", 1, "n1,n2", None),
        (1, "invoke", 2, "n1,n2", None),
        (0, "ok", 1, "n1", None),
        (1, "info", 2, "n1,n2", "interrupted"),
    ]
    assert all(e["workload"] == "set" and e["f"] == "add" for e in events(path))


def test_a_write_s_wal_position_is_kept_with_its_completion(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    with HistoryWriter(path) as history:
        inflight = InFlight(history)
        inflight.invoke(0, Op(0, "add", 1, "n1", "set", True))
        inflight.complete(0, "ok", 1, "n1", lsn=123_456)
        inflight.invoke(0, Op(0, "read", None, "n1", "set", False))
        inflight.complete(0, "ok", [1], "n1")
    assert [e.get("lsn") for e in events(path)] == [None, 123_456, None, None]
    # whether it writes, as its workload declares, is on each invocation
    assert [e.get("write") for e in events(path)] == [True, None, False, None]
