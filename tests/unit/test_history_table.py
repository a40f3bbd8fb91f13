"""The operations table stored for Spark: the one reader's table as Parquet, written beside its
place and renamed into it, so that a bad history leaves nothing behind."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from checkers.json_texts import text_objects
from checkers.operations import op_dict
from checkers.reader import PARTIAL_LINE_NOTE, read, read_history
from checkers.spark.history_table import (
    columns_of,
    forget_columns,
    nemesis_ops,
    op_dicts,
    store_operations,
)
from core.errors import BadInput
from core.history import OP_COLUMNS

WriteHistory = Callable[..., Path]

EVENTS = [
    {"process": 0, "type": "invoke", "f": "add", "value": {"a": [1, {"b": None}]}, "node": "n1"},
    {"process": "nemesis", "type": "invoke", "f": "kill", "value": ["n2"]},
    {"process": 0, "type": "ok", "f": "add", "value": [15, "s", True], "lsn": 9},
    {"process": "nemesis", "type": "info", "f": "kill", "value": None},
    {"process": "nemesis", "type": "info", "f": "heal", "value": None},
    {"process": -3, "type": "invoke", "f": "true", "value": None, "workload": "set"},
    {"process": 1, "type": "invoke", "f": "add", "value": 3},
]


def rows(spark: SparkSession, table: Path) -> list[dict[str, Any]]:
    read_back = spark.read.parquet(str(table)).select(*OP_COLUMNS).orderBy("invoke_index")
    return [op_dict(row.asDict()) for row in read_back.collect()]


def test_the_stored_table_is_the_readers(
    spark: SparkSession, write_history: WriteHistory, tmp_path: Path
) -> None:
    path = write_history(EVENTS)
    given: list[pa.Table] = []
    events, notes = store_operations(path, tmp_path / "ops.parquet", also=given.append)
    assert (events, notes) == (len(EVENTS), [])
    assert rows(spark, tmp_path / "ops.parquet") == read_history(path)
    # what builders are given: the table without the invocations' values, once it is written
    assert given[0].equals(read(path).ops.drop_columns(["invoke_value"]))


def test_a_line_cut_off_by_a_crash_is_skipped_with_a_note(
    spark: SparkSession, write_history: WriteHistory, tmp_path: Path
) -> None:
    path = write_history([*EVENTS, '{"index": 99, "time": 5, "process": 1, "ty'], end="")
    events, notes = store_operations(path, tmp_path / "ops.parquet")
    assert (events, notes) == (len(EVENTS), [PARTIAL_LINE_NOTE])
    assert len(rows(spark, tmp_path / "ops.parquet")) == 5


@pytest.mark.parametrize(
    "bad",
    [
        ['{"index": 1, "time": 1, "process": 0, "type": "okay", "f": "x"}'],
        [{"process": 8, "type": "ok", "f": "x"}],
        [{"process": 0, "type": "invoke", "f": "x"}],
    ],
)
def test_a_bad_history_leaves_nothing_behind(
    write_history: WriteHistory, tmp_path: Path, bad: list[Any]
) -> None:
    path = write_history(EVENTS[:1] + bad + EVENTS[3:])
    with pytest.raises(BadInput) as expected:
        read(path)
    with pytest.raises(BadInput) as caught:
        store_operations(path, tmp_path / "out" / "ops.parquet")
    assert str(caught.value) == str(expected.value)
    assert not (tmp_path / "out").exists()


def test_a_check_again_replaces_the_table(
    spark: SparkSession, write_history: WriteHistory, tmp_path: Path
) -> None:
    table = tmp_path / "ops.parquet"
    store_operations(write_history(EVENTS), table)
    store_operations(write_history(EVENTS[:1]), table)
    assert len(rows(spark, table)) == 1


def test_the_nemesis_and_named_operations_come_back_as_dicts(
    spark: SparkSession, write_history: WriteHistory, tmp_path: Path
) -> None:
    path = write_history(EVENTS)
    store_operations(path, tmp_path / "ops.parquet")
    ops = spark.read.parquet(str(tmp_path / "ops.parquet"))
    assert [op["f"] for op in nemesis_ops(ops)] == ["kill", "heal"]
    named = op_dicts(ops, [0, 5])
    assert named[0]["value"] == [15, "s", True] and named[5]["workload"] == "set"


def test_the_kept_columns_hold_each_distinct_text_once_and_are_let_go(
    spark: SparkSession, write_history: WriteHistory, tmp_path: Path
) -> None:
    """The columns stats and availability share are Arrow's values, None for a null, each
    distinct text one object; the pipeline lets go of them once those checkers are done."""
    table = tmp_path / "ops.parquet"
    store_operations(write_history(EVENTS), table)
    ops = spark.read.parquet(str(table))
    columns = columns_of(ops)
    assert columns_of(ops) is columns  # kept for the next checker
    arrow = ops.select("process", "f", "workload").toArrow()
    for name in ("process", "f", "workload"):
        got = getattr(columns, name)
        assert got.tolist() == arrow[name].to_numpy(zero_copy_only=False).tolist()
    process = columns.process.tolist()
    assert process.count("nemesis") == 2 and len({id(p) for p in process if p == "nemesis"}) == 1
    assert text_objects(pa.array(["a", None, "a"])).tolist() == ["a", None, "a"]
    forget_columns()
    assert columns_of(ops) is not columns
