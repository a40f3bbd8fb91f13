"""The split-brain checker in the pipeline: its per-key signs come from the append workload's
per-key pass (checkers/append_keys.py), the nemesis operations from the operations table, and
checkers/listappend/split_brain puts them together."""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from checkers.append import with_operations
from checkers.append_keys import SPLIT_BRAIN, key_pass
from checkers.listappend import split_brain
from harness.history import NEMESIS


def check(ops: DataFrame, by_key: DataFrame | None = None) -> dict[str, Any]:
    """Acknowledged writes through two nodes from divergent histories (`by_key`: as for the
    append checker)."""
    cases = [dict(c) for c in key_pass(ops, by_key).cases[SPLIT_BRAIN]]
    return with_operations(ops, split_brain.verdict(cases, faults(ops)))


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
