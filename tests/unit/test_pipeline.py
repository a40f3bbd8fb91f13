"""analyze(): from a history file to results, with the operations table written beside them."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from rich.console import Console

from checkers.spark.history_table import OP_COLUMNS
from checkers.spark.pipeline import OPS_TABLE, analyze
from core.errors import BadInput
from harness.check import print_verdict
from harness.plan import TestPlan
from tests.unit.conftest import checks

WriteHistory = Callable[..., Path]
BANK = {"bank": {"accounts": [0, 1], "total": 10}}


def mixed(lost: bool) -> list[dict[str, Any]]:
    """Two workloads sharing the processes, told apart by `workload`, and a nemesis."""
    bank = {"workload": "bank"}
    sets = {"workload": "set"}
    return [
        {"process": 0, "type": "invoke", "f": "add", "value": 1, **sets},
        {"process": 1, "type": "invoke", "f": "read", "value": None, **bank},
        {"process": 0, "type": "ok", "f": "add", "value": 1, **sets},
        {"process": 1, "type": "ok", "f": "read", "value": {"0": 4, "1": 6}, **bank},
        {"process": "nemesis", "type": "info", "f": "kill", "value": ["n1"]},
        {"process": 1, "type": "invoke", "f": "read", "value": None, **sets},
        {"process": 1, "type": "ok", "f": "read", "value": [] if lost else [1], **sets},
    ]


def test_a_mixed_history_is_split_by_workload_and_the_table_rewritten(
    spark: SparkSession, write_history: WriteHistory, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    history = write_history(mixed(lost=False))
    result = analyze(spark, history, out, checks("bank", "set"), BANK)
    assert (result["valid"], result["verdict"], result["notes"]) == (True, "valid", [])
    assert result["history"] == {"path": str(history), "events": 7}
    assert sorted(result["checkers"]) == [
        "availability", "bank", "cluster-state", "logs", "set", "stats"
    ]  # fmt: skip
    assert result["checkers"]["bank"]["read_count"] == 1
    assert result["checkers"]["set"]["read_count"] == 1
    assert result["checkers"]["set"]["stable_count"] == 1
    assert result["checkers"]["stats"]["op_count"] == 3
    table = spark.read.parquet(str(out / OPS_TABLE))
    assert tuple(table.columns) == OP_COLUMNS
    assert table.count() == 4

    result = analyze(spark, write_history(mixed(lost=True)), out, checks("bank", "set"), BANK)
    assert (result["valid"], result["verdict"]) == (False, "invalid")
    assert result["checkers"]["set"]["anomaly_types"] == ["lost"]
    assert result["checkers"]["bank"]["valid"] is True


def test_an_untagged_history_belongs_to_its_one_workload(
    spark: SparkSession, write_history: WriteHistory, tmp_path: Path
) -> None:
    history = write_history(
        [
            {"process": 0, "type": "invoke", "f": "read", "value": None},
            {"process": 0, "type": "ok", "f": "read", "value": {"0": 5, "1": 4}},
        ]
    )
    result = analyze(spark, history, tmp_path, checks("bank"), BANK)
    assert result["verdict"] == "invalid"
    assert result["checkers"]["bank"]["anomaly_types"] == ["wrong-total"]
    assert result["checkers"]["stats"]["counts"][0]["workload"] == "bank"


def test_an_append_history_without_dependencies_is_unknown(
    spark: SparkSession, write_history: WriteHistory, tmp_path: Path
) -> None:
    """As in Elle: transactions that never observe one another say nothing about isolation."""
    history = write_history(
        [
            {"process": 0, "type": "invoke", "f": "txn", "value": [], "workload": "append"},
            {"process": 0, "type": "ok", "f": "txn", "value": [], "workload": "append"},
            {"process": 1, "type": "invoke", "f": "read", "value": None, "workload": "bank"},
            {"process": 1, "type": "ok", "f": "read", "value": {}, "workload": "bank"},
        ]
    )
    result = analyze(spark, history, tmp_path, checks("append"), {})
    assert (result["valid"], result["verdict"]) == ("unknown", "unknown")
    assert sorted(result["checkers"]) == [
        "append",
        "availability",
        "cluster-state",
        "logs",
        "split-brain",
        "stats",
    ]
    assert result["checkers"]["append"]["anomaly_types"] == ["empty-transaction-graph"]
    assert result["notes"] == [
        "the history also has operations of workload bank, which was not asked for and not checked",
    ]


def test_unknown_workloads_and_missing_parameters_are_bad_input(
    spark: SparkSession, write_history: WriteHistory, tmp_path: Path
) -> None:
    history = write_history(mixed(lost=False))
    with pytest.raises(BadInput, match="unknown workload 'ledger': choose from append, bank, set"):
        TestPlan.of_history(["bank", "ledger"], BANK)
    with pytest.raises(BadInput, match="the bank checker takes parameters accounts, total"):
        analyze(spark, history, tmp_path, checks("bank"), {})


def test_each_step_is_announced_as_it_begins(
    spark: SparkSession, write_history: WriteHistory, tmp_path: Path
) -> None:
    """`harness check` names the step under way: a large history takes a minute."""
    steps: list[str] = []
    history = write_history(mixed(lost=False))
    result = analyze(spark, history, tmp_path, checks("bank", "set"), BANK, steps.append)
    # and says how long each took, so a slow check says where its time went
    assert list(result["seconds"]) == [
        "reading", "bank", "set", "stats", "availability", "cluster-state", "logs"
    ]  # fmt: skip
    assert all(s >= 0 for s in result["seconds"].values())
    # and the process's peak memory as each ended: a high-water mark, so it never falls
    peaks = list(result["peak_mib"].values())
    assert list(result["peak_mib"]) == list(result["seconds"]) and peaks == sorted(peaks)
    assert peaks[0] > 50  # MiB: this process holds Python, Arrow and the Spark client
    assert steps == [
        "reading the history into the operations table",
        "the bank checker",
        "the set checker",
        "the stats checker",
        "the availability checker",
        "the cluster-state checker",
        "the logs checker",
    ]


def test_a_slow_check_says_where_its_time_and_its_memory_went(tmp_path: Path) -> None:
    results = {
        "verdict": "valid",
        "checkers": {},
        "seconds": {"reading": 9.0, "append": 12.0, "report": 3.0},
        "peak_mib": {"reading": 1_200, "append": 1_500, "report": 1_500},
    }
    out = io.StringIO()
    print_verdict(Console(file=out, width=300), results, tmp_path)
    assert "the check took 24.0 s: append 12.0, reading 9.0, report 3.0" in out.getvalue()
    assert "its memory peaked at 1,500 MiB, in append" in out.getvalue()
