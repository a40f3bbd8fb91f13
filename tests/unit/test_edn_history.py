"""Jepsen's history format: an EDN history reads into our model (comments, keywords, nil, a bank
read's number keys, one map per line or one vector), checks with the verdict its anomaly calls
for, and a history written out as EDN and read back is the same history."""

from __future__ import annotations

import io
import json
from pathlib import Path

from pyspark.sql import SparkSession
from rich.console import Console

from harness.check import analyze, resolve
from harness.edn_history import edn_event, read_events, write_events

G1C = """; T1 and T2 each read what the other appended: cyclic information flow (G1c)
{:index 0, :time 0, :type :invoke, :process 0, :f :txn, :value [[:append 1 1] [:r 2 nil]]}
{:index 1, :time 1, :type :invoke, :process 1, :f :txn, :value [[:append 2 1] [:r 1 nil]]}
{:index 2, :time 2, :type :ok, :process 0, :f :txn, :value [[:append 1 1] [:r 2 [1]]]}
{:index 3, :time 3, :type :ok, :process 1, :f :txn, :value [[:append 2 1] [:r 1 [1]]]}
"""


def test_an_edn_history_reads_into_our_model(tmp_path: Path) -> None:
    path = tmp_path / "h.edn"
    path.write_text(
        "[{:type :invoke, :f :read, :value nil, :process 3}\n"
        ' {:type :ok, :f :read, :value {0 10, 1 7}, :process 3, :node "n1"}\n'
        ' {:type :info, :f :start-kill, :value {:targets ["n2"]}, :process :nemesis}\n'
        " {:type :fail, :f :transfer, :value {:from 0, :to 1, :amount 5}, :process 4,"
        " :error [:insufficient-funds 3]}]"
    )
    assert read_events(path) == [
        {"type": "invoke", "f": "read", "value": None, "process": 3, "index": 0, "time": 0},
        {"type": "ok", "f": "read", "value": {"0": 10, "1": 7}, "process": 3, "node": "n1",
         "index": 1, "time": 1},
        {"type": "info", "f": "start-kill", "value": {"targets": ["n2"]}, "process": "nemesis",
         "index": 2, "time": 2},
        {"type": "fail", "f": "transfer", "value": {"from": 0, "to": 1, "amount": 5},
         "process": 4, "error": "[:insufficient-funds 3]", "index": 3, "time": 3},
    ]  # fmt: skip


def test_a_completed_read_of_nil_found_the_key_empty(tmp_path: Path) -> None:
    """Jepsen writes an empty key's read as nil; the invocation's nil is still unknown."""
    path = tmp_path / "h.edn"
    path.write_text(G1C.replace("[:r 1 [1]]", "[:r 1 nil]"))
    events = read_events(path)
    assert events[1]["value"] == [["append", 2, 1], ["r", 1, None]]
    assert events[3]["value"] == [["append", 2, 1], ["r", 1, []]]


def test_our_events_are_written_as_jepsen_writes_them() -> None:
    value = [["append", 3, 1], ["r", 3, [1]]]
    txn = {"index": 5, "time": 9, "process": 2, "type": "ok", "f": "txn", "value": value,
           "node": "n1", "workload": "append"}  # fmt: skip
    assert edn_event(txn) == (
        "{:index 5 :time 9 :process 2 :type :ok :f :txn :value [[:append 3 1] [:r 3 [1]]] "
        ':node "n1" :workload :append}'
    )
    read = {"process": "nemesis", "type": "ok", "f": "read", "value": {"0": 10}}
    assert edn_event(read) == "{:process :nemesis :type :ok :f :read :value {0 10}}"


def check(spark: SparkSession, path: Path, model: str = "serializable") -> dict:
    target = resolve(path, ["append"], path.parent / f"{path.stem}-out")
    return analyze(spark, target, Console(file=io.StringIO()), model=model)


def test_an_edn_history_checks_with_the_verdict_of_its_anomaly(
    spark: SparkSession, tmp_path: Path
) -> None:
    path = tmp_path / "g1c.edn"
    path.write_text(G1C)
    results = check(spark, path)
    assert results["checkers"]["append"]["anomaly_types"] == ["G1c"]
    assert results["notes"][0].startswith("read from Jepsen's EDN history")


def test_a_history_exported_to_edn_and_read_back_is_the_same(
    spark: SparkSession, tmp_path: Path
) -> None:
    source = tmp_path / "g1c.edn"
    source.write_text(G1C)
    ours = read_events(source)
    exported = tmp_path / "again.edn"
    assert write_events(ours, exported) == 4
    assert read_events(exported) == ours
    jsonl = tmp_path / "again.jsonl"
    jsonl.write_text("".join(json.dumps(e) + "\n" for e in ours))
    assert (
        check(spark, exported)["checkers"]["append"]["anomaly_types"]
        == (check(spark, jsonl)["checkers"]["append"]["anomaly_types"])
    )
