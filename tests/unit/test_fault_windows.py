"""Fault windows for the report's shading: a start's invocation to its stop's completion."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from checkers.operations import end_of, faults
from checkers.reader import read_history
from checkers.spark.history_table import nemesis_ops
from checkers.stats import fault_windows


def windows_of(path: Path, ops_of: Callable[[Path], Any]) -> list[dict[str, Any]]:
    """The fault windows of a history, from its plain operations, which the nemesis's operations
    as Spark's table gives them must yield too."""
    ops = read_history(path)
    windows = fault_windows(faults(ops), end_of(ops))
    assert fault_windows(nemesis_ops(ops_of(path)), end_of(ops)) == windows
    return windows


def test_windows_pair_starts_with_stops_and_an_unstopped_fault_runs_to_the_end(
    write_ops: Callable[..., tuple[Path, list[int]]], ops_of: Callable[[Path], Any]
) -> None:
    path, _ = write_ops(
        [
            {"process": 0, "f": "add", "value": 1, "start": 0, "end": 1000, "type": "ok"},
            {
                "process": "nemesis",
                "f": "start-partition",
                "value": {"shape": "majority"},
                "start": 100,
                "end": 150,
                "type": "info",
            },
            {
                "process": "nemesis",
                "f": "stop-partition",
                "value": {},
                "start": 400,
                "end": 420,
                "type": "info",
            },
            {
                "process": "nemesis",
                "f": "start-kill",
                "value": {"targets": ["n1"]},
                "start": 600,
                "end": 610,
                "type": "info",
            },
            {"process": 0, "f": "add", "value": 2, "start": 1100, "end": 2000, "type": "ok"},
        ]
    )
    windows = windows_of(path, ops_of)
    assert [(w["fault"], w["start"], w["end"]) for w in windows] == [
        ("partition", 0.1, 0.42),
        ("kill", 0.6, 2.0),
    ]


def test_no_faults_no_windows(
    write_ops: Callable[..., tuple[Path, list[int]]], ops_of: Callable[[Path], Any]
) -> None:
    path, _ = write_ops(
        [{"process": 0, "f": "add", "value": 1, "start": 0, "end": 10, "type": "ok"}]
    )
    assert windows_of(path, ops_of) == []
