"""The list-append checker on crafted histories: each anomaly kind is found and named as Elle
names it, and a near miss (the same shape, one detail different) is not flagged."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from checkers.listappend import check
from checkers.listappend.history import Txn
from core.contract import Contract
from core.history import FINAL_READS_PROCESS


def txn(n: int, *mops: tuple[str, Any, Any], type: str = "ok", process: int | None = None) -> Txn:
    """Transaction n, invoked at index 2n and completed at 2n+1: in real time, each completes
    before the next begins."""
    ms = tuple((f, k, tuple(v) if isinstance(v, list) else v) for f, k, v in mops)
    return Txn(2 * n, 2 * n + 1, n if process is None else process, type, 2 * n, 2 * n + 1, ms)


def concurrent(*txns: Txn) -> list[Txn]:
    """The same transactions all overlapping in time: no realtime order among them."""
    count = len(txns)
    return [
        Txn(t.index, t.index + 2 * count, t.process, t.type, t.index, t.index + 2 * count, t.mops)
        for t in txns
    ]


def A(k: Any, v: Any) -> tuple[str, Any, Any]:
    return ("append", k, v)


def R(k: Any, v: Any) -> tuple[str, Any, Any]:
    return ("r", k, v)


def types(history: list[Txn], model: str = "serializable") -> list[str]:
    result = check(history, model)
    assert result["valid"] is (not result["anomaly_types"]), result
    return result["anomaly_types"]


CASES: dict[str, tuple[list[Txn], list[Txn], str]] = {
    # name: (history with the anomaly, near miss, model)
    "G0": (
        [
            txn(1, A("x", 1), A("y", 2)), txn(2, A("x", 2), A("y", 1)),
            txn(3, R("x", [1, 2]), R("y", [1, 2])),
        ],
        [
            txn(1, A("x", 1), A("y", 1)), txn(2, A("x", 2), A("y", 2)),
            txn(3, R("x", [1, 2]), R("y", [1, 2])),
        ],
        "serializable",
    ),
    "G1c": (
        concurrent(txn(1, A("x", 1), R("y", [1])), txn(2, A("y", 1), R("x", [1]))),
        concurrent(txn(1, A("x", 1), R("y", [1])), txn(2, A("y", 1), R("x", []))),
        "serializable",
    ),
    "G-single-item": (
        concurrent(txn(1, A("x", 1), A("y", 1)), txn(2, R("x", [1]), R("y", []))),
        concurrent(txn(1, A("x", 1), A("y", 1)), txn(2, R("x", [1]), R("y", [1]))),
        "serializable",
    ),
    "G-nonadjacent-item": (
        concurrent(
            txn(1, R("a", []), R("d", [1])), txn(2, A("a", 1), A("b", 1)),
            txn(3, R("b", [1]), R("c", [])), txn(4, A("c", 1), A("d", 1)),
        ),
        concurrent(
            txn(1, R("a", []), R("d", [])), txn(2, A("a", 1), A("b", 1)),
            txn(3, R("b", [1]), R("c", [])), txn(4, A("c", 1), A("d", 1)),
        ),
        "snapshot-isolation",
    ),
    "G2-item": (
        concurrent(
            txn(1, R("x", []), R("y", []), A("x", 1)), txn(2, R("x", []), R("y", []), A("y", 1)),
            txn(3, R("x", [1]), R("y", [1])),
        ),
        concurrent(
            txn(1, R("x", []), R("y", []), A("x", 1)), txn(2, R("x", [1]), R("y", []), A("y", 1)),
            txn(3, R("x", [1]), R("y", [1])),
        ),
        "serializable",
    ),
    "G1c-process": (
        [txn(1, R("x", [1]), process=0), txn(2, A("x", 1), process=0)],
        [txn(1, R("x", [1]), process=0), txn(2, A("x", 1), process=1)],
        "strong-session-serializable",
    ),
    "G-single-item-realtime": (
        [txn(1, A("x", 1)), txn(2, R("x", [])), txn(3, R("x", [1]))],
        [txn(1, A("x", 1)), txn(2, R("x", [1])), txn(3, R("x", [1]))],
        "strict-serializable",
    ),
    "G1a": (
        [txn(1, A("x", 1), type="fail"), txn(2, R("x", [1]))],
        [txn(1, A("x", 1), type="info"), txn(2, R("x", [1]))],
        "read-committed",
    ),
    "G1b": (
        [txn(1, A("x", 1), A("x", 2)), txn(2, R("x", [1]))],
        [txn(1, A("x", 1), A("x", 2)), txn(2, R("x", [1, 2]))],
        "read-committed",
    ),
    "internal": (
        [txn(1, A("x", 1), R("x", []))],
        [txn(1, A("x", 1), R("x", [1])), txn(2, R("x", [1]))],
        "snapshot-isolation",
    ),
    "future-read": (
        [txn(1, R("x", [1]), A("x", 1))],
        [txn(1, A("x", 1), R("x", [1])), txn(2, R("x", [1]))],
        "read-committed",
    ),
    "duplicate-elements": (
        [txn(1, A("x", 1)), txn(2, R("x", [1, 1]))],
        [txn(1, A("x", 1)), txn(2, R("x", [1]))],
        "read-uncommitted",
    ),
    "incompatible-order": (
        [txn(1, A("x", 1)), txn(2, A("x", 2)), txn(3, R("x", [1, 2])), txn(4, R("x", [2, 1]))],
        [txn(1, A("x", 1)), txn(2, A("x", 2)), txn(3, R("x", [1])), txn(4, R("x", [1, 2]))],
        "read-committed",
    ),
    "lost-update": (
        concurrent(
            txn(1, R("x", []), A("x", 1)), txn(2, R("x", []), A("x", 2)), txn(3, R("x", [1, 2]))
        ),
        concurrent(
            txn(1, R("x", []), A("x", 1)), txn(2, R("x", [1]), A("x", 2)), txn(3, R("x", [1, 2]))
        ),
        "snapshot-isolation",
    ),
    "dirty-update": (
        [txn(1, A("x", 1), type="fail"), txn(2, A("x", 2)), txn(3, R("x", [1, 2]))],
        [txn(1, A("x", 1), type="info"), txn(2, A("x", 2)), txn(3, R("x", [1, 2]))],
        "read-committed",
    ),
    "lost-append": (  # by a final read, taken after the faults healed
        [txn(1, A("x", 1)), txn(2, A("x", 2)), txn(3, R("x", [2]), process=FINAL_READS_PROCESS)],
        [
            txn(1, A("x", 1)), txn(2, A("x", 2)),
            txn(3, R("x", [1, 2]), process=FINAL_READS_PROCESS),
        ],
        "read-uncommitted",
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(CASES))
def test_anomaly_is_found_and_named(name: str) -> None:
    history, _, model = CASES[name]
    assert name in types(history, model)


@pytest.mark.parametrize("name", sorted(CASES))
def test_near_miss_is_valid(name: str) -> None:
    _, near_miss, model = CASES[name]
    assert types(near_miss, model) == []


def test_write_skew_is_allowed_by_snapshot_isolation() -> None:
    history, _, _ = CASES["G2-item"]
    assert types(history, "snapshot-isolation") == []
    result = check(history, "serializable")
    assert result["not"] == ["repeatable-read"]


def test_realtime_anomalies_need_a_realtime_model() -> None:
    history, _, _ = CASES["G-single-item-realtime"]
    assert types(history, "serializable") == []
    result = check(history, "strict-serializable")
    assert result["not"] == ["strong-snapshot-isolation"]


def test_a_cycle_is_explained_edge_by_edge() -> None:
    history, _, _ = CASES["G-single-item"]
    (anomaly,) = check(history, "serializable")["anomalies"]
    assert anomaly["cycle"] == ["T4", "T2", "T4"]
    sentences = [s["explanation"] for s in anomaly["steps"]]
    assert "T4 read key 'y' empty, so it did not see 1, which T2 appended next" in sentences
    assert "T4 read key 'x' up to 1, which T2 appended" in sentences
    assert {s["edge"] for s in anomaly["steps"]} == {"rw", "wr"}


def test_the_result_says_how_much_of_the_history_lies_in_cycles() -> None:
    """The two transactions of a G-single cycle are one component; a valid history has none."""
    history, near_miss, _ = CASES["G-single-item"]
    assert check(history, "serializable")["cyclic"] == {"txns": 2, "components": 1, "largest": 2}
    assert check(near_miss, "serializable")["cyclic"] == {"txns": 0, "components": 0, "largest": 0}


def test_no_dependencies_is_unknown() -> None:
    result = check([txn(1, A("x", 1)), txn(2, A("y", 1))], "serializable")
    assert result["valid"] == "unknown"
    assert result["anomaly_types"] == ["empty-transaction-graph"]


def test_unknown_model_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown model 'sequential-ish'"):
        check([], "sequential-ish")


def test_an_acknowledged_append_missing_from_a_final_read_is_lost_whatever_the_model() -> None:
    """Durability: a final read (taken after the faults healed) began after the append was
    acknowledged and does not contain it; the anomaly says what it rests on."""
    final = FINAL_READS_PROCESS
    lost = [txn(1, A("x", 1)), txn(2, A("y", 1)), txn(3, R("x", []), R("y", [1]), process=final)]
    assert "lost-append" in types(lost, "read-uncommitted")
    (case,) = [
        a for a in check(lost, "read-uncommitted")["anomalies"] if a["type"] == "lost-append"
    ]
    assert "T2 appended 1 to key 'x'" in case["explanation"] and "last read" in case["explanation"]
    assert case["explanation"].endswith("(it rests on a final read, taken after the faults healed)")
    # the same read, begun before the append was acknowledged, may miss it
    overlapping = concurrent(
        txn(1, A("x", 1)), txn(2, A("y", 1)), txn(3, R("x", []), R("y", [1]), process=final)
    )
    assert types(overlapping, "serializable") == []


def test_a_stale_read_that_is_no_final_read_is_a_real_time_cycle_not_a_loss() -> None:
    """Elle's models without real-time order let a read be ordered before an append that was
    acknowledged before it began: valid under serializable. Under strict-serializable the same
    read is a real-time cycle, named as Elle names it, not a durability loss."""
    history = [txn(1, A("x", 1)), txn(2, A("y", 1)), txn(3, R("x", []), R("y", [1]))]
    assert types(history, "serializable") == []
    assert types(history, "strict-serializable") == ["G-single-item-realtime"]


def rolled_back(t: Txn, error: str) -> Txn:
    return dataclasses.replace(t, type="fail", error=error)


def test_a_rolled_back_append_that_reappears_breaks_the_confirm_rollback_contract() -> None:
    """Read-uncommitted allows reading an aborted write (G1a); the confirm/rollback mode's
    contract does not allow a write that got a definite rollback error to appear at all."""
    history = [
        rolled_back(txn(1, A("x", 1)), "40001: could not serialize access"),
        txn(2, A("y", 1)),
        txn(3, R("x", [1]), R("y", [1])),
    ]
    result = check(history, "read-uncommitted", contract=Contract.CONFIRM_ROLLBACK)
    assert result["anomaly_types"] == ["resurrected-rollback"]
    (case,) = result["anomalies"]
    assert case["ops"] == [2, 6] and "rolled back (40001" in case["explanation"]
    # under the durable contract there is no such error to break, and read-uncommitted allows G1a
    assert types(history, "read-uncommitted") == []
    # an append that failed for another reason (it never reached the server) is not a rollback
    refused = [rolled_back(history[0], "OperationalError: connection refused"), *history[1:]]
    assert check(refused, "read-uncommitted", contract=Contract.CONFIRM_ROLLBACK)["valid"] is True


def test_a_read_overlapping_the_wait_for_a_rollback_is_a_dirty_read_not_a_resurrection() -> None:
    """Tarantool 2.6 shows a write while it waits for its quorum: a read that began before the
    rollback was returned saw unconfirmed data (G1a), and the rollback itself held."""
    history = concurrent(txn(1, A("x", 1)), txn(2, A("y", 1)), txn(3, R("x", [1]), R("y", [1])))
    history[0] = rolled_back(history[0], "ER 216: … (rolled back by the leader)")
    result = check(history, "serializable", contract=Contract.CONFIRM_ROLLBACK)
    assert result["anomaly_types"] == ["G1a"]


def skew_ring(n: int) -> list[Txn]:
    """n concurrent transactions, each reading its key empty and appending to the next one's: one
    strongly connected component of n transactions joined by rw edges (write skew all round)."""
    ring = [txn(i, R(i, []), A((i + 1) % n, 1)) for i in range(n)]
    return concurrent(*ring, txn(n, *(R(i, [1]) for i in range(n))))


def test_a_cycle_search_out_of_time_leaves_the_history_unknown_and_says_where() -> None:
    history = skew_ring(5_000)
    result = check(history, "serializable", budget=0.0)
    assert result["valid"] == "unknown"
    assert result["anomaly_types"] == ["cycle-search-timeout"]
    (case,) = result["anomalies"]
    assert "among 5000 interdependent transactions" in case["explanation"]
    # given time, the same search finishes and names the cycle
    finished = check(history, "serializable")
    assert finished["valid"] is False and finished["anomaly_types"] == ["G2-item"]


def test_the_quick_lost_append_test_never_hides_a_case(monkeypatch: pytest.MonkeyPatch) -> None:
    """The quick test only spares keys the search: with it and without it, the same cases."""
    from checkers.listappend import keys

    histories = [h for bad, near, _ in CASES.values() for h in (bad, near)]
    histories.append([txn(1, A("x", 1)), txn(2, A("x", 2)), txn(3, R("x", [2, 1]))])
    quick = [check(h, "read-uncommitted")["anomaly_counts"] for h in histories]
    monkeypatch.setattr(keys, "_may_lose", lambda *_: True)
    assert [check(h, "read-uncommitted")["anomaly_counts"] for h in histories] == quick
