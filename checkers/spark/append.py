"""The list-append checker fed from the operations table: the per-key pass (append_keys.py, a
Spark job) infers the dependency edges and the anomalies without a cycle, and the driver judges
them as checkers/append.py does (checkers/listappend.judge): graph, cycle search, models."""

from __future__ import annotations

from array import array
from typing import Any

from pyspark.sql import DataFrame

from checkers.append import DEFAULT_MODEL
from checkers.listappend import DEFAULT_BUDGET, judge
from checkers.listappend.graph import Edges
from checkers.spark.append_keys import APPEND, key_pass
from checkers.spark.history_table import op_dicts
from core.contract import Contract
from core.errors import BadInput


def check(
    ops: DataFrame,
    model: str = DEFAULT_MODEL,
    budget: float = DEFAULT_BUDGET,
    contract: Contract = Contract.DURABLE,
    by_key: DataFrame | None = None,
) -> dict[str, Any]:
    """As `checkers.append.check`, over the operations table. `by_key`: their micro-operations
    as the store wrote them, when it did (append_micro_ops.py)."""
    try:
        passed = key_pass(ops, by_key)
        # the judge adds process or realtime edges: to a copy, the pass is shared
        edges = Edges(array("q", passed.edges.src), array("q", passed.edges.dst))
        edges.kind = array("b", passed.edges.kind)
        cases = [dict(c) for c in passed.cases[APPEND]]
        result = judge(passed.txns, edges, cases, model, budget, passed.reasons, contract)
    except ValueError as e:
        raise BadInput(str(e)) from e
    return with_operations(ops, result)


def with_operations(ops: DataFrame, result: dict[str, Any]) -> dict[str, Any]:
    """The anomalies' operation indices replaced by the operations, for the report."""
    shown = op_dicts(ops, {i for a in result["anomalies"] for i in a["ops"]})
    for anomaly in result["anomalies"]:
        anomaly["ops"] = [shown[i] for i in anomaly["ops"] if i in shown]
    return result
