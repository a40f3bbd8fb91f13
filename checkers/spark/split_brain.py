"""The split-brain checker fed from the operations table: its per-key signs come from the append
workload's per-key pass (append_keys.py), the faults from the nemesis's operations, and
checkers/listappend/split_brain judges them."""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from checkers.listappend import split_brain
from checkers.operations import OP_COLUMNS, op_dict
from checkers.spark.append import with_operations
from checkers.spark.append_keys import SPLIT_BRAIN, key_pass
from checkers.split_brain import fault_spans
from harness.history import NEMESIS


def check(ops: DataFrame, by_key: DataFrame | None = None) -> dict[str, Any]:
    """As `checkers.split_brain.check`, over the operations table (`by_key`: as for the append
    checker)."""
    cases = [dict(c) for c in key_pass(ops, by_key).cases[SPLIT_BRAIN]]
    return with_operations(ops, split_brain.verdict(cases, fault_spans(nemesis_ops(ops))))


def nemesis_ops(ops: DataFrame) -> list[dict[str, Any]]:
    """The nemesis's operations, as plain operations (two per fault: few)."""
    rows = ops.filter(F.col("process") == NEMESIS).select(*OP_COLUMNS).toArrow().to_pylist()
    return [op_dict(row) for row in rows]
