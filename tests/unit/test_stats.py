"""Counts, latency quantiles and plot series on a small history whose answers are known."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pyspark.sql import DataFrame

from checkers import stats
from checkers.spark import stats as fed_stats
from tests.unit.conftest import both_ways


def test_counts_quantiles_and_series(
    write_ops: Callable[..., tuple[Path, list[int]]], ops_of: Callable[[Path], DataFrame]
) -> None:
    ops = [
        # ok reads taking 1, 2, 3 and 4 ms; one failed and one unknown add; one pending add.
        *[
            {"process": 0, "f": "read", "value": None, "type": "ok", "start": s, "end": s + s // 10}
            for s in (10, 20, 30, 40)
        ],
        {"process": 1, "f": "add", "value": 1, "type": "fail", "start": 1000, "end": 1005},
        {"process": 1, "f": "add", "value": 2, "type": "info", "start": 1500, "end": 1600},
        {"process": 2, "f": "add", "value": 3, "type": None, "start": 2000, "end": 0},
        {"process": "nemesis", "f": "kill", "value": ["n1"], "type": "info", "start": 0, "end": 2},
    ]
    path, _ = write_ops(ops)
    result = both_ways(stats.check, fed_stats.check, ops_of(path), path)

    assert result["valid"] is True and result["anomalies"] == []
    assert result["op_count"] == 7 and result["nemesis_op_count"] == 1
    assert result["by_type"] == {"ok": 4, "fail": 1, "info": 2}
    assert result["counts"] == [
        {"workload": None, "f": "add", "type": "fail", "count": 1},
        {"workload": None, "f": "add", "type": "info", "count": 2},
        {"workload": None, "f": "read", "type": "ok", "count": 4},
    ]
    (reads,) = result["latency_ms"]
    assert reads == {
        "workload": None,
        "f": "read",
        "count": 4,
        "p50": 2.0,
        "p90": 4.0,
        "p99": 4.0,
        "max": 4.0,
    }
    assert result["duration_s"] == 2.0  # from the nemesis at 0 to the last invoke at 2 s
    assert result["ok_per_s"] == 2.0

    # Every completed client op is a point; the pending add has no latency to plot.
    assert [(p["t"], p["latency_ms"], p["type"]) for p in result["series"]] == [
        (0.01, 1.0, "ok"),
        (0.02, 2.0, "ok"),
        (0.03, 3.0, "ok"),
        (0.04, 4.0, "ok"),
        (1.0, 5.0, "fail"),
        (1.5, 100.0, "info"),
    ]
    assert result["series"][0]["process"] == 0
    assert result["rate"] == [
        {"t": 0, "type": "ok", "count": 4},
        {"t": 1, "type": "fail", "count": 1},
        {"t": 1, "type": "info", "count": 1},
    ]
