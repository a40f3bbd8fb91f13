"""The split-brain checker in the pipeline: the append workload's transactions and the nemesis
operations come out of the operations table; checkers/listappend/split_brain judges them."""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from checkers.append import transactions, with_operations
from checkers.listappend import split_brain
from harness.history import NEMESIS


def check(ops: DataFrame) -> dict[str, Any]:
    """Acknowledged writes through two nodes from divergent histories."""
    return with_operations(ops, split_brain.check(transactions(ops), faults(ops)))


def faults(ops: DataFrame) -> list[dict[str, Any]]:
    rows = (
        ops.filter(F.col("process") == NEMESIS)
        .select("invoke_time", "complete_time", "f", "value")
        .orderBy("invoke_time")
        .collect()
    )
    return [
        {
            "start": r["invoke_time"],
            "end": r["complete_time"],
            "f": r["f"],
            "value": None if r["value"] is None else json.loads(r["value"]),
        }
        for r in rows
    ]
