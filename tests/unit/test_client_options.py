"""What a client does besides running operations: pausing between a transaction's statements
(--op-pause), cancelling (--cancel-after), which only a Postgres client can, and the append
workload's shape (--key-count, --max-writes-per-key, --max-txn-length)."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from typing import Any

import pytest

from checkers.operations import annotated, with_warnings
from core.endpoint import Endpoint, Protocol
from core.errors import BadInput
from harness.config import RunConfig
from workloads import build
from workloads.base import WorkloadOptions
from workloads.clients import client_for
from workloads.postgres import PostgresClient


class Statements:
    """A connection's stand-in that records the statements the workload sends."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.pipelined: list[str] = []  # those sent inside a pipeline
        self._in_pipeline = False

    def execute(self, sql: str, params: Any = None) -> Statements:
        self.sent.append(sql.split()[0])
        if self._in_pipeline:
            self.pipelined.append(sql.split()[0])
        return self

    @contextlib.contextmanager
    def pipeline(self) -> Iterator[None]:
        self._in_pipeline = True
        try:
            yield
        finally:
            self._in_pipeline = False

    def fetchone(self) -> None:
        return None

    def fetchall(self) -> list[tuple[int, list[int]]]:
        return [(2, [1, 2])]


def test_a_transaction_pauses_between_its_statements_never_before_the_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pauses: list[float] = []
    monkeypatch.setattr("workloads.base.time.sleep", pauses.append)
    (append,) = build(["append"], WorkloadOptions(op_pause=0.01))
    conn = Statements()
    append.invoke(conn, "txn", [["append", 1, 1], ["r", 1, None], ["append", 2, 1]])  # type: ignore[arg-type]
    assert conn.sent == ["INSERT", "SELECT", "INSERT"]
    assert len(pauses) == 2 and all(0 <= p <= 0.01 for p in pauses)
    assert conn.pipelined == []  # a pause between statements: each sent on its own
    (quiet,) = build(["append"], WorkloadOptions())
    pauses.clear()
    conn = Statements()
    quiet.invoke(conn, "txn", [["append", 1, 2], ["r", 1, None], ["append", 1, 3]])  # type: ignore[arg-type]
    assert pauses == []
    assert conn.pipelined == ["INSERT", "SELECT", "INSERT"]  # no pause: one round trip


def test_the_final_read_of_every_key_is_one_statement_without_pauses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A long run writes thousands of keys: a statement and a pause for each would outlive the
    final read's timeout (a run with --op-pause 10 lost its final reads that way)."""
    pauses: list[float] = []
    monkeypatch.setattr("workloads.base.time.sleep", pauses.append)
    (append,) = build(["append"], WorkloadOptions(op_pause=0.01))
    ((f, reads),) = append.final_ops()
    many = reads + [["r", k, None] for k in range(100, 140)]
    conn = Statements()
    done = append.invoke(conn, f, many)  # type: ignore[arg-type]
    assert conn.sent == ["SELECT"] and pauses == []
    assert done[:3] == [["r", 0, []], ["r", 1, []], ["r", 2, [1, 2]]]
    assert len(done) == len(many)


def test_only_a_postgres_client_cancels() -> None:
    postgres = Endpoint("n1", "127.0.0.1", 5432, "harness", "postgres")
    client = client_for(postgres, "serializable", 5.0, cancel_after=1.0)
    assert isinstance(client, PostgresClient)
    tarantool = Endpoint("n1", "127.0.0.1", 3301, "", "", protocol=Protocol.TARANTOOL)
    with pytest.raises(BadInput, match="--cancel-after cancels Postgres statements"):
        client_for(tarantool, "serializable", 5.0, cancel_after=1.0)


def test_an_anomaly_names_the_operations_acknowledged_with_a_warning() -> None:
    warned = {"invoke_index": 4, "type": "ok", "warning": "01000: committed locally"}
    plain = {"invoke_index": 9, "type": "ok", "warning": None}
    result = {
        "valid": False,
        "anomalies": [
            {"type": "lost", "explanation": "element 4 was lost.", "ops": [warned, plain]},
            {"type": "lost", "explanation": "element 9 was lost", "ops": [plain]},
        ],
    }
    first, second = with_warnings(result)["anomalies"]
    assert first["explanation"] == (
        "element 4 was lost. Acknowledged with the server's warning (index 4: 01000: committed "
        "locally)"
    )
    assert first["warned"] == [4]
    assert second == result["anomalies"][1]
    assert with_warnings({"valid": True}) == {"valid": True}


def test_a_cycle_says_where_its_transactions_ran_when_they_ran_apart() -> None:
    def txn(index: int, node: str | None) -> dict[str, Any]:
        return {"invoke_index": index, "type": "ok", "node": node}

    apart = {
        "type": "G-nonadjacent-item",
        "ops": [txn(3, "n1"), txn(5, "n1"), txn(8, "n2"), txn(9, None)],
        "cycle": ["T3", "T5", "T8", "T9", "T3"],
        "explanation": "The transactions T3 → T5 → T8 → T9 → T3 form a cycle.",
    }
    together = apart | {"ops": [txn(3, "n1"), txn(5, "n1")], "cycle": ["T3", "T5", "T3"]}
    lost = {"type": "lost-append", "ops": [txn(3, "n1"), txn(8, "n2")], "explanation": "lost"}
    result = {"valid": False, "anomalies": [apart, together, lost]}
    first, second, third = annotated(result)["anomalies"]
    assert first["explanation"].endswith(
        "form a cycle. They ran on different nodes: T3 on n1, T5 on n1, T8 on n2"
    )
    assert first["nodes"] == {"T3": "n1", "T5": "n1", "T8": "n2", "T9": None}
    assert second == together and third == lost  # on one node; not a cycle


def test_the_append_workloads_shape_follows_jepsens_knobs() -> None:
    """--key-count keys in flight, --max-txn-length micro-operations at most, and a key retired
    after --max-writes-per-key appends; a knob below one is refused with one sentence."""
    (append,) = build(
        ["append"], WorkloadOptions(key_count=50, max_txn_length=2, max_writes_per_key=3)
    )
    rng = random.Random(0)
    txns = [append.next_op(rng)[1] for _ in range(2000)]
    assert max(len(t) for t in txns) == 2
    keys = [m[1] for t in txns for m in t]
    assert len(set(keys[:200])) > 20  # many keys in flight at once, not five
    appended: dict[int, int] = {}
    for t in txns:
        for f, k, _ in t:
            appended[k] = appended.get(k, 0) + (f == "append")
    assert max(appended.values()) <= 3
    for flag in ("key_count", "max_writes_per_key", "max_txn_length"):
        with pytest.raises(BadInput, match=f"--{flag.replace('_', '-')} must be at least 1"):
            RunConfig(**{flag: 0}).validate()  # type: ignore[arg-type]
