"""The bank checker fed from the operations table: Spark selects the ok reads, the judgment is
checkers/bank.py's."""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from checkers import bank
from checkers.operations import op_dict
from core.history import NEMESIS, OP_COLUMNS


def check(ops: DataFrame, accounts: list[int], total: int) -> dict[str, Any]:
    """As `checkers.bank.check`, over the operations table."""
    reads = ops.filter(
        (F.col("process") != NEMESIS) & (F.col("f") == "read") & (F.col("type") == "ok")
    )
    rows = reads.select(*OP_COLUMNS).toArrow().to_pylist()
    return bank.check([op_dict(row) for row in rows], accounts, total)
