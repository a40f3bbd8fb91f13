"""Split-brain: acknowledged writes through two nodes from divergent histories are found, with
the nodes, the window and the faults around it; a stale read or one node's history is not."""

from __future__ import annotations

from typing import Any

from checkers.listappend.history import Txn
from checkers.listappend.split_brain import check

S = 1_000_000_000


def txn(n: int, node: str, *mops: tuple[str, Any, Any], type: str = "ok") -> Txn:
    """Transaction n at second n, lasting half a second, through `node`."""
    ms = tuple((f, k, tuple(v) if isinstance(v, list) else v) for f, k, v in mops)
    return Txn(2 * n, 2 * n + 1, n, type, n * S, n * S + S // 2, ms, node)


def A(k: Any, v: Any) -> tuple[str, Any, Any]:
    return ("append", k, v)


def R(k: Any, v: Any) -> tuple[str, Any, Any]:
    return ("r", k, v)


FAULT = {"start": 2 * S, "end": 2 * S + 1000, "f": "start-partition", "value": {}}


def test_two_nodes_serving_diverged_histories() -> None:
    history = [
        txn(1, "n1", A("x", 1)),
        txn(2, "n1", A("x", 2)),
        txn(3, "n2", A("x", 3)),
        txn(4, "n1", R("x", [1, 2])),
        txn(5, "n2", R("x", [1, 3])),
    ]
    result = check(history, [FAULT])
    assert result["valid"] is False and result["anomaly_types"] == ["split-brain"]
    (case,) = [a for a in result["anomalies"] if "diverged" in a["explanation"]]
    assert case["nodes"] == ["n1", "n2"]
    assert case["window_ns"] == [2 * S, 5 * S + S // 2]
    assert case["faults"] == [FAULT] and "start-partition at 2.000 s" in case["explanation"]


def test_a_node_that_went_on_without_the_others_writes() -> None:
    history = [
        txn(1, "n1", A("x", 1)),
        txn(2, "n2", A("x", 2)),
        txn(3, "n2", R("x", [2])),
    ]
    result = check(history)
    assert result["valid"] is False
    assert "n2 accepted writes without n1's" in result["anomalies"][0]["explanation"]


def test_a_stale_read_or_one_nodes_history_is_not_split_brain() -> None:
    stale = [txn(1, "n1", A("x", 1)), txn(2, "n2", R("x", []))]  # nothing acknowledged via n2
    one_node = [txn(1, "n1", A("x", 1)), txn(2, "n1", A("x", 2)), txn(3, "n1", R("x", [2]))]
    prefix = [
        txn(1, "n1", A("x", 1)),
        txn(2, "n2", A("x", 2)),
        txn(3, "n1", R("x", [1])),
        txn(4, "n2", R("x", [1, 2])),
    ]
    for history in (stale, one_node, prefix):
        assert check(history)["valid"] is True, history
