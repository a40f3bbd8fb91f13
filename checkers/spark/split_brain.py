"""The split-brain checker fed from the operations table: its per-key signs come from the append
workload's per-key pass (append_keys.py), the faults from the nemesis's operations, and
checkers/listappend/split_brain judges them."""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame

from checkers.listappend import split_brain
from checkers.spark.append import with_operations
from checkers.spark.append_keys import SPLIT_BRAIN, key_pass
from checkers.spark.history_table import nemesis_ops
from checkers.split_brain import fault_spans


def check(ops: DataFrame, by_key: DataFrame | None = None) -> dict[str, Any]:
    """As `checkers.split_brain.check`, over the operations table (`by_key`: as for the append
    checker)."""
    cases = [dict(c) for c in key_pass(ops, by_key).cases[SPLIT_BRAIN]]
    return with_operations(ops, split_brain.verdict(cases, fault_spans(nemesis_ops(ops))))
