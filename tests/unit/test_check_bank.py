"""A bare bank history is held to the accounts and total it was given, or else to those of its
first successful read, and the results say which: a valid history of 8 accounts totalling 80
is valid, not `unexpected-key` on every read."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from rich.console import Console

from core.errors import BadInput
from harness.check import Bank, analyze, resolve

BALANCES = {str(a): 10 for a in range(8)}


def history(tmp_path: Path, reads: list[dict[str, int]]) -> Path:
    events: list[dict[str, Any]] = []
    for value in reads:
        events.append({"process": 0, "type": "invoke", "f": "read", "value": None})
        events.append({"process": 0, "type": "ok", "f": "read", "value": value})
    path = tmp_path / "bank.jsonl"
    lines = [json.dumps({"index": i, "time": i * 1000, **e}) for i, e in enumerate(events)]
    path.write_text("\n".join(lines) + "\n")
    return path


def check(spark: SparkSession, path: Path, bank: Bank | None = None) -> dict[str, Any]:
    target = resolve(path, ["bank"], None, bank or Bank())
    return analyze(spark, target, Console(file=io.StringIO()))


def test_accounts_and_total_come_from_the_first_successful_read(
    spark: SparkSession, tmp_path: Path
) -> None:
    results = check(spark, history(tmp_path, [BALANCES, BALANCES | {"0": 5, "1": 15}]))
    assert results["valid"] is True, results["checkers"]["bank"]
    assert results["notes"][0].startswith(
        "bank: accounts 0, 1, 2, 3, 4, 5, 6, 7 and total 80 taken from the first successful "
        "read (event 1)"
    )


def test_what_is_given_is_held_and_only_the_rest_is_read(
    spark: SparkSession, tmp_path: Path
) -> None:
    path = history(tmp_path, [BALANCES])
    results = check(spark, path, Bank(accounts=5, total=100))
    assert results["checkers"]["bank"]["anomaly_types"] == ["unexpected-key", "wrong-total"]
    assert not any(n.startswith("bank:") for n in results["notes"])
    results = check(spark, path, Bank(total=80))
    assert results["valid"] is True
    assert "accounts 0, 1, 2, 3, 4, 5, 6, 7 taken" in results["notes"][0]


def test_a_bank_history_without_a_successful_read_needs_them_given(tmp_path: Path) -> None:
    path = tmp_path / "bank.jsonl"
    path.write_text(json.dumps({"index": 0, "time": 0, "process": 0, "type": "invoke",
                                "f": "transfer", "value": {"from": 0, "to": 1, "amount": 1}})
                    + "\n")  # fmt: skip
    with pytest.raises(BadInput, match="give --accounts and --total"):
        resolve(path, ["bank"], None)
