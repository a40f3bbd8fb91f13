"""Loading histories into Spark and pairing invocations with completions."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from checkers.operations import op_dict, read_history
from checkers.spark import history_table
from checkers.spark.history_table import (
    PARTIAL_LINE_NOTE,
    load_events,
    operations,
    store_operations,
)
from core.errors import BadInput
from core.history import OP_COLUMNS

WriteHistory = Callable[..., Path]


def ops_list(spark: SparkSession, path: Path) -> list[dict[str, Any]]:
    """The operations Spark pairs, which the plain pairing must give too."""
    ops = operations(load_events(spark, path)[0]).orderBy("invoke_index").collect()
    paired = [op_dict(row.asDict()) for row in ops]
    assert read_history(path) == paired
    return paired


SHAPES = [
    {"from": 1, "to": 2, "amount": 3},
    [1, 2, 3],
    None,
    -7,
    2**70,
    {"0": [1, {"a": 2}], "b": "v"},
    [True, False, None, 'x\ty"z', "a/b\\c\b\f\n\r"],
    "seven",
    "[1]",
    "null",
    'q"\\',
    {"value": "v"},
]
# Values the one pass does not vouch for: escapes and numbers that Spark spells otherwise.
RESPELLED = ["ä", -2.5, [1e20, 0.1]]


def refuse_the_detailed_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if store_operations sends its history down the detailed path."""

    def refused(*args: Any) -> None:
        raise AssertionError("the one pass sent this history down the detailed path")

    monkeypatch.setattr(history_table, "load_events", refused)


@pytest.mark.parametrize("values", [SHAPES, SHAPES + RESPELLED], ids=["one-pass", "detailed"])
def test_values_keep_their_json_shape(
    spark: SparkSession,
    write_history: WriteHistory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    values: list[Any],
) -> None:
    events: list[dict[str, Any] | str] = []
    for value in values:
        events.append({"process": 0, "type": "invoke", "f": "x", "value": value})
        events.append({"process": 0, "type": "ok", "f": "x", "value": value})
    path = write_history(events)
    detailed_ops = ops_list(spark, path)
    if values == SHAPES:
        refuse_the_detailed_path(monkeypatch)
    table = tmp_path / "ops.parquet"
    store_operations(spark, path, table)
    rows = spark.read.parquet(str(table)).orderBy("invoke_index").collect()
    for ops in (detailed_ops, [op_dict(row.asDict()) for row in rows]):
        assert [op["value"] for op in ops] == values
        assert [op["invoke_value"] for op in ops] == values


def test_a_line_cut_off_by_a_crash_is_skipped_with_a_note(
    spark: SparkSession, write_history: WriteHistory
) -> None:
    path = write_history(
        [
            {"process": 0, "type": "invoke", "f": "read", "value": None},
            {"process": 0, "type": "ok", "f": "read", "value": [1]},
            '{"index": 2, "time": 5, "process": 1, "type": "inv',
        ],
        end="",
    )
    events, notes = load_events(spark, path)
    assert events.count() == 2
    assert notes == [PARTIAL_LINE_NOTE]


def test_a_complete_last_line_without_newline_is_kept(
    spark: SparkSession, write_history: WriteHistory
) -> None:
    path = write_history(
        [
            {"process": 0, "type": "invoke", "f": "read", "value": None},
            {"process": 0, "type": "ok", "f": "read", "value": [1]},
        ],
        end="",
    )
    events, notes = load_events(spark, path)
    assert events.count() == 2
    assert notes == []


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ('{"index": 1, "time": 1, "process": 0, "type": "okay", "f": "x"}', 'type "okay"'),
        ('{"index": 1, "time": 1, "process": 0, "type": "ok", "f": "x"', "not JSON"),
        ('[1, "time", 1]', "not a JSON object"),
        ('{"index": "1", "time": 1, "process": 0, "type": "ok", "f": "x"}', 'index "1"'),
        ('{"index": 1, "process": 0, "type": "ok", "f": "x"}', "no time"),
        ('{"index": 1, "time": 1, "process": [0], "type": "ok", "f": "x"}', "process [0]"),
        ('{"index": 1, "time": 1, "process": 0, "type": "ok", "f": 3}', "f 3"),
        ('{"index": 1, "time": 1, "type": "ok", "f": "x"}', "process null"),
        ('{"index": 1, "time": 1, "process": 0, "f": "x"}', "type null"),
    ],
)
def test_a_malformed_line_is_named_by_number(
    spark: SparkSession, write_history: WriteHistory, line: str, problem: str
) -> None:
    path = write_history(
        [
            {"process": 0, "type": "invoke", "f": "x", "value": None},
            "",
            line,
            {"process": 0, "type": "ok", "f": "x", "value": None},
        ]
    )
    with pytest.raises(BadInput) as caught:
        load_events(spark, path)
    message = str(caught.value)
    assert f"{path} line 3 is not a valid event" in message
    assert problem in message
    assert "fix or remove that line" in message


def test_two_events_with_one_index_are_refused(
    spark: SparkSession, write_history: WriteHistory
) -> None:
    path = write_history(
        [
            {"index": 0, "process": 0, "type": "invoke", "f": "x", "value": None},
            {"index": 0, "process": 0, "type": "ok", "f": "x", "value": None},
        ]
    )
    with pytest.raises(BadInput, match="lines 1 and 2 both have index 0"):
        load_events(spark, path)


def test_a_missing_file_is_bad_input(spark: SparkSession, tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="does not exist"):
        load_events(spark, tmp_path / "nope.jsonl")


def test_a_completion_without_invoke_is_refused(
    spark: SparkSession, write_history: WriteHistory
) -> None:
    path = write_history(
        [
            {"process": 0, "type": "invoke", "f": "add", "value": 1},
            {"process": 1, "type": "ok", "f": "add", "value": 2},
            {"process": 0, "type": "ok", "f": "add", "value": 1},
        ]
    )
    with pytest.raises(BadInput, match=r"index 1 \(process 1, ok 'add'\) completes an operation"):
        operations(load_events(spark, path)[0])
    with pytest.raises(BadInput, match=r"index 1 \(process 1, ok 'add'\) completes an operation"):
        read_history(path)


def test_a_second_invoke_before_completion_is_refused(
    spark: SparkSession, write_history: WriteHistory
) -> None:
    path = write_history(
        [
            {"process": 0, "type": "invoke", "f": "add", "value": 1},
            {"process": 0, "type": "invoke", "f": "add", "value": 2},
        ]
    )
    with pytest.raises(BadInput, match=r"index 1 .* while its process's invocation at index 0"):
        operations(load_events(spark, path)[0])
    with pytest.raises(BadInput, match=r"index 1 .* while its process's invocation at index 0"):
        read_history(path)


def test_pairing_and_unknown_outcomes(spark: SparkSession, write_history: WriteHistory) -> None:
    path = write_history(
        [
            {"process": 0, "type": "invoke", "f": "add", "value": 1, "node": "n1"},
            {"process": "nemesis", "type": "invoke", "f": "kill", "value": ["n2"]},
            {"process": 1, "type": "invoke", "f": "add", "value": 2},
            {"process": 0, "type": "ok", "f": "add", "value": 1, "lsn": 2**40 + 7},
            {"process": "nemesis", "type": "info", "f": "kill", "value": {"killed": ["n2"]}},
            {"process": 1, "type": "fail", "f": "add", "value": 2, "error": "conflict"},
            {"process": "nemesis", "type": "info", "f": "heal", "value": None},
            {"process": 0, "type": "invoke", "f": "add", "value": 3},
        ]
    )
    ops = ops_list(spark, path)
    by_index = {op["invoke_index"]: op for op in ops}
    assert sorted(by_index) == [0, 1, 2, 6, 7]
    assert by_index[0] | {"invoke_time": 0} == {
        "process": 0,
        "workload": None,
        "f": "add",
        "node": "n1",
        "type": "ok",
        "invoke_index": 0,
        "invoke_time": 0,
        "complete_index": 3,
        "complete_time": 3_000_000,
        "invoke_value": 1,
        "value": 1,
        "error": None,
        "latency_ns": 3_000_000,
        "lsn": 2**40 + 7,  # the write's WAL position, from its completion
        "write": True,  # as the invocation recorded it
    }
    assert by_index[1]["write"] is None  # the nemesis's operations write nothing of a workload
    assert by_index[2]["type"] == "fail" and by_index[2]["error"] == "conflict"
    assert by_index[2]["lsn"] is None
    # Nemesis pairs are kept, and a lone nemesis event is an operation of its own.
    assert by_index[1]["process"] == "nemesis" and by_index[1]["value"] == {"killed": ["n2"]}
    assert by_index[6]["f"] == "heal" and by_index[6]["complete_index"] == 6
    # The process's last invoke never completed: its outcome is unknown.
    last = by_index[7]
    assert (last["type"], last["complete_index"], last["latency_ns"]) == ("info", None, None)
    assert last["value"] == 3


def test_events_written_by_the_harness_load(spark: SparkSession, tmp_path: Path) -> None:
    from core.history import HistoryWriter

    path = tmp_path / "history.jsonl"
    with HistoryWriter(path) as history:
        history.append(process=0, type="invoke", f="read", value=None, workload="bank")
        history.append(process=0, type="ok", f="read", value={"0": 5}, workload="bank")
    (op,) = ops_list(spark, path)
    assert (op["workload"], op["value"]) == ("bank", {"0": 5})
    assert json.loads(path.read_text().splitlines()[0])["index"] == 0


def stored(spark: SparkSession, path: Path, table: Path) -> tuple[Any, ...]:
    """What store_operations makes of a history: events, notes and the table's rows."""
    events, notes = store_operations(spark, path, table)
    rows = spark.read.parquet(str(table)).select(*OP_COLUMNS).orderBy("invoke_index").collect()
    return events, notes, [tuple(row) for row in rows]


def detailed(spark: SparkSession, path: Path) -> tuple[Any, ...]:
    """The same from load_events and operations."""
    events, notes = load_events(spark, path)
    rows = operations(events).select(*OP_COLUMNS).orderBy("invoke_index").collect()
    return events.count(), notes, [tuple(row) for row in rows]


ODD_BUT_VALID = [
    # the one pass takes these
    {"process": 0, "type": "invoke", "f": "add", "value": {"a": [1, {"b": None}]}, "node": "n1"},
    {"process": "nemesis", "type": "invoke", "f": "kill", "value": ["n2"]},
    {"process": 0, "type": "ok", "f": "add", "value": [15, "s", True], "error": None, "lsn": 9},
    {"process": "nemesis", "type": "info", "f": "kill", "value": None},
    {"process": "nemesis", "type": "info", "f": "heal", "value": None},
    {"process": -3, "type": "invoke", "f": "true", "value": None, "workload": "set"},
    {"process": 1, "type": "invoke", "f": "add", "value": 3},
]


def line(index: int, rest: str) -> str:
    """A history line written by hand, from its index and the fields after it."""
    return f'{{"index": {index}, "time": 9, {rest}}}'


# Values as the history writer spells them and as it does not: the table keeps their JSON text.
NUMBERS = line(50, '"process": 4, "type": "invoke", "f": "x", "value": [1.50, 1e3, -0, 2E-2]')
NESTED = line(51, '"process": 4, "type": "ok", "f": "x", "value": {"value": "s", "b": [true]}')


def invoke(index: int, rest: str = "", process: str = "6", f: str = '"x"') -> str:
    """An invocation written by hand, with `rest` after its index, time, process and f."""
    return line(index, f'"process": {process}, "type": "invoke", "f": {f}{rest}')


@pytest.mark.parametrize(
    ("extra", "one_pass"),
    [
        pytest.param([], True, id="plain"),
        pytest.param([NUMBERS, NESTED], False, id="numbers"),
        pytest.param([invoke(50, ', "value": -0')], False, id="minus-zero"),
        pytest.param([invoke(50, ', "value": [1, -0]')], False, id="minus-zero-inside"),
        pytest.param([invoke(50, ', "value": 12345678901234567890123')], True, id="big-int"),
        # processes and fs the writer does not write, and values written in other ways
        pytest.param(
            [
                {"process": "01", "type": "invoke", "f": "x"},
                {"process": "01", "type": "ok", "f": "x"},
            ],
            True,
            id="process-name",
        ),
        pytest.param(
            [
                {"process": 5, "type": "invoke", "f": "a b"},
                {"process": 5, "type": "fail", "f": "a b"},
            ],
            True,
            id="f-with-space",
        ),
        pytest.param([invoke(99, process="-0")], True, id="process-minus-zero"),
        pytest.param(
            [invoke(98, process="4"), line(99, '"process": "4", "type": "ok", "f": "x"')],
            True,
            id="process-number-and-text",
        ),
        pytest.param([invoke(98, ', "value": {"é": ["ü", "a\\"b"]}')], True, id="utf-8"),
        pytest.param(
            [invoke(98, ', "value": [1], "value": [2]', f='"x\\u00e9"')], True, id="twice"
        ),
        pytest.param([invoke(98, ', "value": ["a\\/b"]')], False, id="escaped-slash"),
        pytest.param([invoke(98, ', "value": [ 1 ,\t{ "a" : [ ] } ]\r')], True, id="spaces"),
        pytest.param([invoke(98) + " trailing"], False, id="trailing-text"),
        pytest.param([""], False, id="blank-line"),
        pytest.param([invoke(98, ', "value": "é/\\b"')], True, id="string"),
        pytest.param(
            [{"process": 6, "type": "invoke", "f": "x", "value": "[1]"}], True, id="json-in-string"
        ),
        pytest.param([invoke(98, ', "value" :\t"s"')], True, id="string-after-tab"),
        pytest.param(
            [{"process": 6, "type": "invoke", "f": "x", "value": ["é"], "error": "ü"}],
            False,
            id="unicode-escape",
        ),
        pytest.param([invoke(97, ', "valu\\u0065": "s"')], True, id="escaped-key"),
    ],
)
def test_the_one_pass_table_is_the_detailed_one(
    spark: SparkSession,
    write_history: WriteHistory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    extra: list[Any],
    one_pass: bool,
) -> None:
    path = write_history(ODD_BUT_VALID + extra)
    expected = detailed(spark, path)
    if one_pass:
        refuse_the_detailed_path(monkeypatch)
    assert stored(spark, path, tmp_path / "out" / "ops.parquet") == expected


def test_the_one_pass_skips_a_line_cut_off_by_a_crash(
    spark: SparkSession,
    write_history: WriteHistory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = write_history([*ODD_BUT_VALID, '{"index": 99, "time": 5, "process": 1, "ty'], end="")
    refuse_the_detailed_path(monkeypatch)
    events, notes, rows = stored(spark, path, tmp_path / "ops.parquet")
    assert (events, notes, len(rows)) == (len(ODD_BUT_VALID), [PARTIAL_LINE_NOTE], 5)


@pytest.mark.parametrize(
    "bad",
    [
        ['{"index": 1, "time": 1, "process": 0, "type": "okay", "f": "x"}'],
        ["{this is not json}", '{"index": 2, "time'],  # a cut-off line does not excuse another
        ['{"index": 1, "time": 1, "type": "ok", "f": "x"}'],
        [{"index": 0, "process": 7, "type": "invoke", "f": "x"}],
        [{"process": 8, "type": "ok", "f": "x"}],
        [{"process": 0, "type": "invoke", "f": "x"}],
        [{"process": 0, "type": "ok", "f": "other"}],
        ['{"index": 1, "time": 1, "process": 9223372036854775808, "type": "invoke", "f": "x"}'],
        ['{"index": 9223372036854775808, "time": 1, "process": 9, "type": "invoke", "f": "x"}'],
    ],
)
def test_the_one_pass_refuses_what_the_detailed_path_refuses_and_leaves_nothing(
    spark: SparkSession, write_history: WriteHistory, tmp_path: Path, bad: list[Any]
) -> None:
    path = write_history(ODD_BUT_VALID[:1] + bad + ODD_BUT_VALID[3:])
    with pytest.raises(BadInput) as expected:
        operations(load_events(spark, path)[0])
    with pytest.raises(BadInput) as caught:
        store_operations(spark, path, tmp_path / "out" / "ops.parquet")
    assert str(caught.value) == str(expected.value)
    assert not (tmp_path / "out").exists()
