"""The availability checker fed from the operations table: Spark picks the writes, their
acknowledgements, the faults and the final reads; checkers/availability.py judges them."""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from checkers.availability import NS_PER_S, FinalReads, Window, analyse
from checkers.spark.history_table import nemesis_ops
from checkers.stats import fault_windows
from core.history import FINAL_READS_PROCESS, NEMESIS


def check(ops: DataFrame, max_recovery: float | None = None) -> dict[str, Any]:
    """As `checkers.availability.check`, over the operations table."""
    writing = (F.col("process") != NEMESIS) & F.coalesce(F.col("write"), F.lit(False))
    writes = ops.filter(writing)
    span = writes.agg(F.min("invoke_time"), F.max("invoke_time")).collect()[0]
    acked = writes.filter(F.col("type") == "ok").select("complete_time").toArrow()
    times = sorted(t / NS_PER_S for t in acked.column(0).to_pylist() if t is not None)
    end = ops.agg(F.max(F.coalesce("complete_time", "invoke_time"))).collect()[0][0]
    windows = [Window(w["fault"], w["start"], w["end"], w.get("value"))
               for w in fault_windows(nemesis_ops(ops), end)]  # fmt: skip
    bounds = None if span[0] is None else (span[0] / NS_PER_S, span[1] / NS_PER_S)
    finals = (
        ops.filter(F.col("process").try_cast("long") >= FINAL_READS_PROCESS)
        .groupBy(F.coalesce(F.col("workload"), F.lit("")).alias("workload"))
        .agg(
            F.count("*").alias("tried"),
            F.sum((F.col("type") == "ok").cast("int")).alias("succeeded"),
            F.min("invoke_time").alias("start"),
            F.max(F.coalesce("complete_time", "invoke_time")).alias("end"),
        )
        .collect()
    )
    final_reads = [
        FinalReads(r["workload"] or "the history", r["tried"], r["succeeded"],
                   r["start"] / NS_PER_S, r["end"] / NS_PER_S)
        for r in finals
    ]  # fmt: skip
    return analyse(times, windows, bounds, max_recovery, final_reads)
