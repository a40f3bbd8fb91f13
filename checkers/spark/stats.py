"""The stats checker fed from the operations table: one aggregation (counts, latency quantiles and
the span of each group), the completed client operations' columns and the nemesis's operations,
summed up by checkers/stats.py."""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from checkers import stats
from checkers.spark.history_table import nemesis_ops
from core.history import NEMESIS


def check(ops: DataFrame) -> dict[str, Any]:
    """As `checkers.stats.check`, over the operations table: a few Spark jobs whatever the
    history's size."""
    groups = _groups(ops)
    end = max((g["end"] for g in groups if g["end"] is not None), default=None)
    return stats.summary(groups, completed(ops), stats.fault_windows(nemesis_ops(ops), end))


def _groups(ops: DataFrame) -> list[dict[str, Any]]:
    """Per (client or nemesis, workload, f, type), as checkers/stats.py groups them."""
    quantiles = F.percentile_approx("latency_ns", list(stats.QUANTILES.values()), 100_000)
    rows = (
        ops.groupBy((F.col("process") != NEMESIS).alias("client"), "workload", "f", "type")
        .agg(
            F.count("*").alias("count"),
            F.min("invoke_time").alias("start"),
            F.max(F.coalesce("complete_time", "invoke_time")).alias("end"),
            quantiles.alias("q"),
            F.max("latency_ns").alias("max"),
        )
        .collect()
    )
    return sorted((row.asDict() for row in rows), key=stats.group_order)


def completed(ops: DataFrame) -> stats.Completed:
    """The completed client operations, column by column."""
    done = (F.col("process") != NEMESIS) & F.col("complete_time").isNotNull()
    fields = stats.Completed.__dataclass_fields__
    table = ops.filter(done).select(*fields).toArrow()
    return stats.Completed(*(table.column(name).to_numpy(zero_copy_only=False) for name in fields))
