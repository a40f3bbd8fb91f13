"""The bank checker: one crafted bad read per anomaly, beside a near miss that is fine."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame

from checkers import bank
from checkers.spark import bank as fed_bank
from core.errors import BadInput
from tests.unit.conftest import both_ways

ACCOUNTS = [0, 1, 2, 3]
TOTAL = 40


def read(process: int, start: int, balances: dict[str, Any] | None, kind: str = "ok") -> dict:
    return {
        "process": process,
        "f": "read",
        "value": None,
        "result": balances,
        "type": kind,
        "start": start,
        "end": start + 1,
    }


def check(
    write_ops: Callable[..., tuple[Path, list[int]]],
    ops_of: Callable[[Path], DataFrame],
    reads: list[dict[str, Any]],
) -> tuple[dict[str, Any], list[int]]:
    transfer = {"from": 0, "to": 1, "amount": 5}
    setup = {"process": 9, "f": "transfer", "value": transfer, "type": "ok", "start": 0, "end": 1}
    path, indices = write_ops([setup, *reads])
    return both_ways(bank.check, fed_bank.check, ops_of(path), path, ACCOUNTS, TOTAL), indices[1:]


@pytest.mark.parametrize(
    ("kind", "bad", "near_miss", "words"),
    [
        (
            "wrong-total",
            {"0": 10, "1": 10, "2": 10, "3": 9},
            {"0": 5, "1": 15, "2": 10, "3": 10},
            "summing to 39 instead of 40",
        ),
        (
            "negative-value",
            {"0": -5, "1": 25, "2": 10, "3": 10},
            {"0": 0, "1": 20, "2": 10, "3": 10},
            'negative balances {"0": -5}',
        ),
        (
            "unexpected-key",
            {"0": 10, "1": 10, "2": 10, "3": 10, "7": 0},
            {"3": 10, "2": 10, "1": 10, "0": 10},
            "accounts 7, which are not among [0, 1, 2, 3]",
        ),
        (
            "nil-balance",
            {"0": 20, "1": 10, "2": 10},
            {"0": 30, "1": 0, "2": 10, "3": 0},
            "no balance at all for accounts 3",
        ),
        (
            "nil-balance",
            {"0": 20, "1": 10, "2": 10, "3": None},
            {"0": 10, "1": 10, "2": 10, "3": 10},
            "a null balance for accounts 3",
        ),
    ],
)
def test_each_anomaly_is_flagged_and_its_near_miss_is_not(
    write_ops: Callable[..., tuple[Path, list[int]]],
    ops_of: Callable[[Path], DataFrame],
    kind: str,
    bad: dict[str, Any],
    near_miss: dict[str, Any],
    words: str,
) -> None:
    result, (fine, wrong) = check(write_ops, ops_of, [read(0, 10, near_miss), read(1, 20, bad)])
    assert result["valid"] is False
    assert result["anomaly_types"] == [kind]
    assert result["anomaly_counts"] == {kind: 1}
    (anomaly,) = result["anomalies"]
    assert anomaly["type"] == kind
    assert f"the read at index {wrong}" in anomaly["explanation"]
    assert words in anomaly["explanation"]
    assert [op["invoke_index"] for op in anomaly["ops"]] == [wrong]
    assert anomaly["ops"][0]["value"] == bad
    assert result["read_count"] == 2 and result["bad_read_count"] == 1
    assert result["first_bad_read"]["invoke_index"] == wrong != fine


def test_a_clean_history_is_valid_and_counts_first_and_last_bad_reads(
    write_ops: Callable[..., tuple[Path, list[int]]], ops_of: Callable[[Path], DataFrame]
) -> None:
    good = {"0": 10, "1": 10, "2": 10, "3": 10}
    result, _ = check(
        write_ops,
        ops_of,
        # Unknown and failed reads say nothing, whatever they carry.
        [read(0, 10, good), read(1, 20, None, "info"), read(2, 30, None, "fail")],
    )
    assert result["valid"] is True
    assert result["anomalies"] == [] and result["read_count"] == 1
    assert result["first_bad_read"] is None


def test_several_anomalies_in_one_read_and_over_time(
    write_ops: Callable[..., tuple[Path, list[int]]], ops_of: Callable[[Path], DataFrame]
) -> None:
    result, (first, _, last) = check(
        write_ops,
        ops_of,
        [
            read(0, 10, {"0": -1, "1": 10, "2": 10, "3": 20, "9": 1}),
            read(1, 20, {"0": 10, "1": 10, "2": 10, "3": 10}),
            read(2, 30, {"0": 10, "1": 10, "2": 10, "3": 11}),
        ],
    )
    assert result["anomaly_counts"] == {"negative-value": 1, "unexpected-key": 1, "wrong-total": 1}
    assert result["first_bad_read"]["invoke_index"] == first
    assert result["last_bad_read"]["invoke_index"] == last
    assert result["bad_read_count"] == 2


def test_no_ok_read_means_unknown(
    write_ops: Callable[..., tuple[Path, list[int]]], ops_of: Callable[[Path], DataFrame]
) -> None:
    result, _ = check(write_ops, ops_of, [read(0, 10, None, "info")])
    assert result["valid"] == "unknown"


def test_a_read_that_is_not_a_balance_map_is_bad_input(
    write_ops: Callable[..., tuple[Path, list[int]]], ops_of: Callable[[Path], DataFrame]
) -> None:
    with pytest.raises(BadInput, match="bank read at history index 2"):
        check(write_ops, ops_of, [read(0, 10, [1, 2, 3])])  # type: ignore[arg-type]
