"""The availability checker fed from the operations table: its columns and the nemesis's
operations, judged by checkers/availability.py."""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame

from checkers import availability
from checkers.spark.history_table import columns_of, nemesis_ops


def check(ops: DataFrame, max_recovery: float | None = None) -> dict[str, Any]:
    """As `checkers.availability.check`, over the operations table."""
    return availability.judge(columns_of(ops), nemesis_ops(ops), max_recovery)
