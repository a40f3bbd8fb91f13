"""The list-append checker over plain operations: the append workload's transactions judged by
checkers/listappend (per-key inference, graph, cycle search, models), each anomaly with the
operations that show it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from checkers import listappend
from checkers.listappend import DEFAULT_BUDGET
from checkers.listappend.history import Txn, mops_of
from core.contract import Contract
from core.errors import BadInput
from core.history import NEMESIS, Op

DEFAULT_MODEL = "serializable"


def check(
    ops: Iterable[Op],
    model: str = DEFAULT_MODEL,
    budget: float = DEFAULT_BUDGET,
    contract: Contract = Contract.DURABLE,
) -> dict[str, Any]:
    """Check every client transaction of the append workload against `model` and the run's
    `contract` (confirm/rollback: no resurrected rollback)."""
    ops = list(ops)
    try:
        result = listappend.check(transactions(ops), model, budget, contract)
    except ValueError as e:
        raise BadInput(str(e)) from e
    return with_operations(ops, result)


def transactions(ops: Iterable[Op]) -> list[Txn]:
    """The clients' `txn` operations as list-append transactions."""
    txns = []
    for op in ops:
        if op["process"] == NEMESIS or op["f"] != "txn":
            continue
        if not isinstance(op["process"], int):
            raise BadInput(f"a txn operation's process is not a number: {op['process']!r}")
        done = op["complete_index"]
        txns.append(
            Txn(
                op["invoke_index"],
                op["invoke_index"] if done is None else done,
                op["process"],
                op["type"],
                op["invoke_time"],
                op["complete_time"],
                mops_of(op["value"]),
                op["node"],
                op["error"],
            )
        )
    return txns


def with_operations(ops: Iterable[Op], result: dict[str, Any]) -> dict[str, Any]:
    """The anomalies' operation indices replaced by the operations, for the report."""
    wanted = {i for a in result["anomalies"] for i in a["ops"]}
    shown = {op["invoke_index"]: op for op in ops if op["invoke_index"] in wanted}
    for anomaly in result["anomalies"]:
        anomaly["ops"] = [shown[i] for i in anomaly["ops"] if i in shown]
    return result
