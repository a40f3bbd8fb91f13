"""The list-append checker in the pipeline: the transactions come out of the operations table
(a Spark job keeps only client `txn` operations and the columns the analysis needs), and Elle's
analysis (checkers/listappend) judges them on the driver, where the graph work is."""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from checkers.history_table import op_dicts
from checkers.listappend import DEFAULT_BUDGET
from checkers.listappend import check as check_txns
from checkers.listappend.history import Txn, mops_of
from harness.errors import BadInput
from harness.history import NEMESIS

DEFAULT_MODEL = "serializable"
COLUMNS = ("invoke_index", "complete_index", "process", "type", "invoke_time", "complete_time")
COLUMNS += ("value", "node")


def check(ops: DataFrame, model: str = DEFAULT_MODEL, budget: float = DEFAULT_BUDGET) -> dict:
    """Check every client transaction of the append workload against `model`."""
    try:
        result = check_txns(transactions(ops), model, budget)
    except ValueError as e:
        raise BadInput(str(e)) from e
    return with_operations(ops, result)


def transactions(ops: DataFrame) -> list[Txn]:
    """The client `txn` operations, in invocation order, as the analysis takes them.

    Collected through Arrow (columnar, no Row objects). The append and split-brain checkers read
    the same table one after the other, so the last extraction is kept for the second."""
    if _last and _last[0][0] is ops:
        return _last[0][1]
    table = (
        ops.filter((F.col("process") != NEMESIS) & (F.col("f") == "txn"))
        .select(*COLUMNS)
        .orderBy("invoke_index")
        .toArrow()
    )
    cols = [table.column(c).to_pylist() for c in COLUMNS]
    txns = [_txn(*row) for row in zip(*cols, strict=True)]
    _last[:] = [(ops, txns)]
    return txns


_last: list[tuple[DataFrame, list[Txn]]] = []


def with_operations(ops: DataFrame, result: dict[str, Any]) -> dict[str, Any]:
    """The anomalies' operation indices replaced by the operations, for the report."""
    shown = op_dicts(ops, {i for a in result["anomalies"] for i in a["ops"]})
    for anomaly in result["anomalies"]:
        anomaly["ops"] = [shown[i] for i in anomaly["ops"] if i in shown]
    return result


def _txn(
    index: int,
    complete: int | None,
    process: str,
    type_: str,
    start: int,
    end: int | None,
    value: str | None,
    node: str | None,
) -> Txn:
    try:
        proc = int(process)
    except ValueError as e:
        raise BadInput(f"operation {index}: process {process!r} is not a number") from e
    return Txn(
        index=index,
        complete=index if complete is None else complete,
        process=proc,
        type=type_,
        start=start,
        end=end,
        mops=mops_of(json.loads(value) if value is not None else None),
        node=node,
    )
