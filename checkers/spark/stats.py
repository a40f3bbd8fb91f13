"""The stats checker fed from the operations table: its columns and the nemesis's operations,
judged by checkers/stats.py."""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame

from checkers import stats
from checkers.spark.history_table import columns_of, nemesis_ops


def check(ops: DataFrame) -> dict[str, Any]:
    """As `checkers.stats.check`, over the operations table."""
    return stats.judge(columns_of(ops), nemesis_ops(ops))
