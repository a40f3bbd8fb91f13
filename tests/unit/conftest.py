"""Shared fixtures for unit tests: one Spark session for the whole run, and history files."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from checkers.catalog import Checker
from checkers.reader import read_history
from checkers.spark.history_table import store_operations
from checkers.spark.session import get_spark
from core.errors import BadInput
from core.history import NEMESIS
from workloads import WORKLOADS

MS = 1_000_000  # history times are in ns; tests speak in ms


@pytest.fixture(scope="session")
def spark() -> SparkSession:
    """Starting Spark costs seconds: every test shares the one session of the process."""
    return get_spark("local[2]")


def writes(event: dict[str, Any]) -> bool:
    """Whether a client's invocation writes, as its workload declares (any workload's, for an
    event that names none)."""
    named = event.get("workload")
    chosen = [w for name, w in WORKLOADS.items() if named in (None, name)]
    return any(w.writes(event.get("f"), event.get("value")) for w in chosen)


def checks(*names: str) -> dict[str, tuple[Checker, ...]]:
    """The named workloads' checkers, as a plan gives them to the pipeline."""
    return {name: WORKLOADS[name].checkers for name in names}


@pytest.fixture
def write_history(tmp_path: Path) -> Callable[..., Path]:
    """Write events (dicts, or raw strings for malformed lines) as history.jsonl.

    Missing `index` and `time` are filled in from the event's position, so tests state only
    what matters to them; a client's invocation records whether it writes, as the harness's
    writer does (by its workload's declaration), unless the event says.
    """

    def write(events: list[dict[str, Any] | str], end: str = "\n") -> Path:
        lines = []
        for position, event in enumerate(events):
            if isinstance(event, str):
                lines.append(event)
            else:
                event = {"index": position, "time": position * MS, **event}
                if event.get("type") == "invoke" and event.get("process") != NEMESIS:
                    event.setdefault("write", writes(event))
                lines.append(json.dumps(event))
        path = tmp_path / "history.jsonl"
        path.write_text("\n".join(lines) + end)
        return path

    return write


@pytest.fixture
def write_ops(write_history: Callable[..., Path]) -> Callable[..., tuple[Path, list[int]]]:
    """Write operations given as intervals, the way concurrency scenarios are drawn.

    Each op is a dict: process, f, value (the invoke's), start and end (ms), type (the
    completion's; None for an op that never completed) and optionally result (the completion's
    value, default the invoke's), error (the completion's) and workload. Returns the file and
    each op's invoke index.
    """

    def write(ops: list[dict[str, Any]]) -> tuple[Path, list[int]]:
        events = []
        for number, op in enumerate(ops):
            base = {"process": op["process"], "f": op["f"]}
            if "workload" in op:
                base["workload"] = op["workload"]
            invoke = {**base, "type": "invoke", "value": op["value"]}
            events.append((op["start"], 0, number, invoke))
            if op.get("type") is not None:
                done = {**base, "type": op["type"], "value": op.get("result", op["value"])}
                if "error" in op:
                    done["error"] = op["error"]
                events.append((op["end"], 1, number, done))
        events.sort(key=lambda e: e[:3])
        indices = [0] * len(ops)
        lines = []
        for index, (at, kind, number, event) in enumerate(events):
            if kind == 0:
                indices[number] = index
            lines.append({"index": index, "time": at * MS, **event})
        return write_history(lines), indices

    return write


@pytest.fixture
def ops_of(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[Path], DataFrame]:
    """The operations table of a history file, as the pipeline stores it and Spark reads it."""

    def load(path: Path) -> DataFrame:
        table = tmp_path_factory.mktemp("ops") / "ops.parquet"
        store_operations(path, table)
        return spark.read.parquet(str(table))

    return load


def both_ways(
    plain: Callable[..., dict[str, Any]],
    fed: Callable[..., dict[str, Any]],
    table: DataFrame,
    path: Path,
    *args: Any,
    **kwargs: Any,
) -> dict[str, Any]:
    """A checker fed from Spark's operations `table` of the history at `path`, whose plain
    judgment over the plainly paired operations must say exactly the same (or refuse alike)."""
    try:
        result = fed(table, *args, **kwargs)
    except BadInput as refused:
        with pytest.raises(BadInput) as also:
            plain(read_history(path), *args, **kwargs)
        assert str(also.value) == str(refused)
        raise
    assert plain(read_history(path), *args, **kwargs) == result
    return result
