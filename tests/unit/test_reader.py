"""The one reader of a history: lines to the operations table, every value kept as its JSON
text, every malformed line or broken alternation named in one sentence."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from checkers.operations import op_dict
from checkers.reader import PARTIAL_LINE_NOTE, SCHEMA, _taken, read, read_history
from core.errors import BadInput
from core.history import OP_COLUMNS, HistoryWriter

WriteHistory = Callable[..., Path]


def ops_of(path: Path) -> list[dict[str, Any]]:
    """The operations as plain checkers take them (values parsed)."""
    return [op_dict(row) for row in read(path).ops.to_pylist()]


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
    "ä",
    -2.5,
    [1e20, 0.1],
]


def test_values_keep_their_json_shape(write_history: WriteHistory) -> None:
    events: list[dict[str, Any] | str] = []
    for value in SHAPES:
        events.append({"process": 0, "type": "invoke", "f": "x", "value": value})
        events.append({"process": 0, "type": "ok", "f": "x", "value": value})
    ops = ops_of(write_history(events))
    assert [op["value"] for op in ops] == SHAPES
    assert [op["invoke_value"] for op in ops] == SHAPES


def test_the_table_has_the_operations_columns(write_history: WriteHistory) -> None:
    path = write_history([{"process": 0, "type": "invoke", "f": "x", "value": 1}])
    assert read(path).ops.schema == SCHEMA and tuple(SCHEMA.names) == OP_COLUMNS


def test_a_line_cut_off_by_a_crash_is_skipped_with_a_note(write_history: WriteHistory) -> None:
    path = write_history(
        [
            {"process": 0, "type": "invoke", "f": "read", "value": None},
            {"process": 0, "type": "ok", "f": "read", "value": [1]},
            '{"index": 2, "time": 5, "process": 1, "type": "inv',
        ],
        end="",
    )
    history = read(path)
    assert (history.events, history.notes, history.ops.num_rows) == (2, [PARTIAL_LINE_NOTE], 1)


def test_a_complete_last_line_without_newline_is_kept(write_history: WriteHistory) -> None:
    path = write_history(
        [
            {"process": 0, "type": "invoke", "f": "read", "value": None},
            {"process": 0, "type": "ok", "f": "read", "value": [1]},
        ],
        end="",
    )
    assert (read(path).events, read(path).notes) == (2, [])


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
        ('{"index": 1, "time": 1, "process": 0, "type": "ok", "f": "x", "write": 1}', "write 1"),
        ('{"index": 1, "time": 1, "process": 0, "type": "ok", "f": "x", "node": 2}', "node 2"),
    ],
)
def test_a_malformed_line_is_named_by_number(
    write_history: WriteHistory, line: str, problem: str
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
        read(path)
    message = str(caught.value)
    assert f"{path} line 3 is not a valid event" in message
    assert problem in message
    assert "fix or remove that line" in message


def test_a_cut_off_line_does_not_excuse_another(write_history: WriteHistory) -> None:
    path = write_history(
        [{"process": 0, "type": "invoke", "f": "x"}, "{this is not json}", '{"index": 2, "ti'],
        end="",
    )
    with pytest.raises(BadInput, match=r"line 2 is not a valid event \(it is not JSON\)"):
        read(path)


def test_two_events_with_one_index_are_refused(write_history: WriteHistory) -> None:
    path = write_history(
        [
            {"index": 0, "process": 0, "type": "invoke", "f": "x", "value": None},
            {"index": 0, "process": 0, "type": "ok", "f": "x", "value": None},
        ]
    )
    with pytest.raises(BadInput, match="lines 1 and 2 both have index 0"):
        read(path)


@pytest.mark.parametrize("field", ["index", "process", "lsn"])
def test_a_number_beyond_64_bits_is_refused(write_history: WriteHistory, field: str) -> None:
    event = {"index": 1, "time": 1, "process": 9, "type": "invoke", "f": "x"} | {field: 2**63}
    path = write_history([json.dumps(event)])
    with pytest.raises(BadInput, match=f"line 1 .*{field} 9223372036854775808 does not fit"):
        read(path)


def test_a_missing_or_empty_file_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="does not exist"):
        read(tmp_path / "nope.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n  \n")
    with pytest.raises(BadInput, match="holds no events"):
        read(tmp_path / "empty.jsonl")


def test_a_completion_without_invoke_is_refused(write_history: WriteHistory) -> None:
    path = write_history(
        [
            {"process": 0, "type": "invoke", "f": "add", "value": 1},
            {"process": 1, "type": "ok", "f": "add", "value": 2},
            {"process": 0, "type": "ok", "f": "add", "value": 1},
        ]
    )
    with pytest.raises(BadInput, match=r"index 1 \(process 1, ok 'add'\) completes an operation"):
        read(path)
    with pytest.raises(BadInput, match=r"index 1 \(process 1, ok 'add'\) completes an operation"):
        read_history(path)


def test_a_second_invoke_before_completion_is_refused(write_history: WriteHistory) -> None:
    path = write_history(
        [
            {"process": 0, "type": "invoke", "f": "add", "value": 1},
            {"process": 0, "type": "invoke", "f": "add", "value": 2},
        ]
    )
    with pytest.raises(BadInput, match=r"index 1 .* while its process's invocation at index 0"):
        read(path)


def test_a_completion_of_another_f_is_refused(write_history: WriteHistory) -> None:
    path = write_history(
        [
            {"process": 0, "type": "invoke", "f": "add", "value": 1},
            {"process": 0, "type": "ok", "f": "read", "value": 1},
        ]
    )
    with pytest.raises(BadInput, match=r"completes f 'add' invoked at index 0 under another f"):
        read(path)


def test_pairing_and_unknown_outcomes(write_history: WriteHistory) -> None:
    path = write_history(
        [
            {"process": 0, "type": "invoke", "f": "add", "value": 1, "node": "n1"},
            {"process": "nemesis", "type": "invoke", "f": "kill", "value": ["n2"]},
            {"process": 1, "type": "invoke", "f": "add", "value": 2},
            {
                "process": 0,
                "type": "ok",
                "f": "add",
                "value": 1,
                "lsn": 2**40 + 7,
                "warning": "01000: committed locally",
            },
            {"process": "nemesis", "type": "info", "f": "kill", "value": {"killed": ["n2"]}},
            {"process": 1, "type": "fail", "f": "add", "value": 2, "error": "conflict"},
            {"process": "nemesis", "type": "info", "f": "heal", "value": None},
            {"process": 0, "type": "invoke", "f": "add", "value": 3},
        ]
    )
    ops = ops_of(path)
    assert read_history(path) == ops
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
        "warning": "01000: committed locally",  # what the server warned of, from its completion
    }
    assert by_index[1]["write"] is None  # the nemesis's operations write nothing of a workload
    assert by_index[2]["type"] == "fail" and by_index[2]["error"] == "conflict"
    assert by_index[2]["lsn"] is None and by_index[2]["warning"] is None
    # Nemesis pairs are kept, and a lone nemesis event is an operation of its own.
    assert by_index[1]["process"] == "nemesis" and by_index[1]["value"] == {"killed": ["n2"]}
    assert by_index[6]["f"] == "heal" and by_index[6]["complete_index"] == 6
    # The process's last invoke never completed: its outcome is unknown.
    last = by_index[7]
    assert (last["type"], last["complete_index"], last["latency_ns"]) == ("info", None, None)
    assert last["value"] == 3


def test_events_written_by_the_harness_read(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    with HistoryWriter(path) as history:
        history.append(process=0, type="invoke", f="read", value=None, workload="bank")
        history.append(process=0, type="ok", f="read", value={"0": 5}, workload="bank")
    (op,) = ops_of(path)
    assert (op["workload"], op["value"]) == ("bank", {"0": 5})


def line(index: int, rest: str) -> str:
    """A history line written by hand, from its index and the fields after it."""
    return f'{{"index": {index}, "time": 9, {rest}}}'


@pytest.mark.parametrize(
    ("text", "value"),
    [
        pytest.param('"value": [1.50, 1e3, -0, 2E-2]', [1.5, 1000.0, 0, 0.02], id="numbers"),
        pytest.param('"value": 12345678901234567890123', 12345678901234567890123, id="big-int"),
        pytest.param('"value": {"é": ["ü", "a\\"b"]}', {"é": ["ü", 'a"b']}, id="utf-8"),
        pytest.param('"value": ["a\\/b", "\\u00e9"]', ["a/b", "é"], id="escapes"),
        pytest.param('"value": [ 1 ,\t{ "a" : [ ] } ]\r', [1, {"a": []}], id="spaces"),
        pytest.param('"valu\\u0065" :\t"s"', "s", id="escaped-key"),
    ],
)
def test_values_written_by_hand_read_as_json_reads_them(
    write_history: WriteHistory, text: str, value: Any
) -> None:
    path = write_history([line(0, f'"process": 4, "type": "invoke", "f": "x", {text}')])
    (op,) = ops_of(path)
    assert op["invoke_value"] == value


def test_processes_are_their_text_and_blank_lines_are_passed_over(
    write_history: WriteHistory,
) -> None:
    path = write_history(
        [
            line(0, '"process": 4, "type": "invoke", "f": "a b"'),
            "",
            line(1, '"process": "4", "type": "ok", "f": "a b"'),
            line(2, '"process": "01", "type": "invoke", "f": "x"'),
        ]
    )
    ops = ops_of(path)
    assert [(op["process"], op["type"]) for op in ops] == [(4, "ok"), ("01", "info")]


def chunked_history() -> list[dict[str, Any] | str]:
    """Operations of several processes and fs, one with a value longer than a chunk."""
    events: list[dict[str, Any] | str] = []
    for i in range(60):
        process, f = (i % 4, ["add", "read", "txn"][i % 3])
        value = "x" * 900 if i == 31 else [i, {"k": str(i)}]
        events.append({"process": process, "type": "invoke", "f": f, "value": value})
        done = "ok" if i % 5 else "fail"
        events.append(
            {"process": process, "type": done, "f": f, "value": value, "node": f"n{i % 3}"}
        )
    events.append({"process": "nemesis", "type": "info", "f": "start-kill", "value": {"n": 1}})
    return events


def test_a_history_read_in_chunks_is_the_history_read_whole(
    write_history: WriteHistory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Decoded a chunk of lines at a time (a line longer than a chunk among them), the table
    is the one a single decode makes, codes of processes and fs merged across chunks."""
    path = write_history(chunked_history())
    whole = read(path).ops
    monkeypatch.setattr("checkers.reader.CHUNK_BYTES", 300)
    assert read(path).ops.to_pylist() == whole.to_pylist()
    assert read(path).events == len(chunked_history())
    # the values taken a few operations at a time, each chunk let go when passed
    monkeypatch.setattr("checkers.reader._TAKEN_ROWS", 7)
    assert read(path).ops.to_pylist() == whole.to_pylist()


def test_values_are_taken_in_slices_whatever_the_order_of_positions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Texts taken a slice of positions at a time from chunks let go as they are passed: the
    same texts as one take, whether the positions go forward (as a history's operations do),
    back and forth, or repeat (an operation never completed is its own outcome)."""
    monkeypatch.setattr("checkers.reader._TAKEN_ROWS", 3)
    texts = [f"v{i}" for i in range(20)]
    whole = pa.array(texts)
    forward = np.array([0, 2, 1, 4, 3, 6, 8, 7, 10, 12, 11, 15, 19])
    shuffled = np.random.default_rng(1).permutation(20)
    repeated = np.array([5, 5, 0, 19, 19, 3, 3, 3, 1, 2, 2, 0, 9])
    for positions in ((forward, forward + 1 - (forward == 19)), (shuffled, shuffled[::-1]),
                      (repeated, np.sort(repeated))):  # fmt: skip
        chunks = [whole.slice(a, 6) for a in range(0, 20, 6)]
        taken = _taken(chunks, *positions)
        assert chunks == []
        for got, wanted in zip(taken, positions, strict=True):
            assert got.to_pylist() == [texts[i] for i in wanted]


def test_a_bad_line_in_a_later_chunk_is_named_and_a_shared_index_across_chunks_too(
    write_history: WriteHistory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("checkers.reader.CHUNK_BYTES", 300)
    events = chunked_history()
    with pytest.raises(BadInput, match="line 100 is not a valid event"):
        read(write_history([*events[:99], "{not json", *events[99:]]))
    # blank lines in a later chunk are passed over, as in one read
    assert len(read(write_history([*events[:99], "", *events[99:]])).ops) == 61
    twice = [*events, {"index": 3, "time": 0, "process": 9, "type": "invoke", "f": "add"}]
    with pytest.raises(BadInput, match="both have index 3"):
        read(write_history(twice))
