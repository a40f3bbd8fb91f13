"""Operation counts, latencies and rates: what the report plots, for every history.

It never finds anomalies (valid is always True); it says how much the run did and how fast, which
is what tells a reader whether a valid verdict means much.
"""

from __future__ import annotations

import math
from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from checkers.history_table import process_value
from harness.history import NEMESIS

MAX_SERIES_POINTS = 20_000
QUANTILES = {"p50": 0.5, "p90": 0.9, "p99": 0.99}
_NS_PER_MS = 1e6
_NS_PER_S = 1e9


def check(ops: DataFrame) -> dict[str, Any]:
    """Counts by workload/f/type, ok latency quantiles, duration, throughput, and plot series."""
    client = ops.filter(F.col("process") != NEMESIS)
    ended = F.coalesce("complete_time", "invoke_time")
    span = ops.agg(
        F.min("invoke_time").alias("start"),
        F.max(ended).alias("end"),
        F.count(F.when(F.col("process") == NEMESIS, 1)).alias("nemesis"),
    ).collect()[0]
    counts = [
        row.asDict()
        for row in client.groupBy("workload", "f", "type")
        .count()
        .orderBy(F.col("workload").asc_nulls_first(), "f", "type")
        .collect()
    ]
    by_type = {t: sum(c["count"] for c in counts if c["type"] == t) for t in ("ok", "fail", "info")}
    duration_s = (span["end"] - span["start"]) / _NS_PER_S if span["start"] is not None else 0.0
    return {
        "valid": True,
        "anomaly_types": [],
        "anomalies": [],
        "op_count": sum(by_type.values()),
        "by_type": by_type,
        "nemesis_op_count": span["nemesis"],
        "counts": counts,
        "latency_ms": _latencies(client),
        "duration_s": duration_s,
        "ok_per_s": by_type["ok"] / duration_s if duration_s > 0 else None,
        "series": _series(client),
        "rate": _rate(client),
        "fault_windows": fault_windows(ops),
    }


def fault_windows(ops: DataFrame) -> list[dict[str, Any]]:
    """When each fault was in place: from its start's invocation to its stop's completion.

    Nemesis operations are few (two per fault), so they are paired on the driver. A fault whose
    stop never came (the harness was killed) lasts until the end of the history."""
    rows = (
        ops.filter(F.col("process") == NEMESIS)
        .select("f", "invoke_time", "complete_time", "value")
        .orderBy("invoke_index")
        .collect()
    )
    end = ops.agg(F.max(F.coalesce("complete_time", "invoke_time"))).collect()[0][0]
    windows: list[dict[str, Any]] = []
    open_: dict[str, dict[str, Any]] = {}
    for row in rows:
        action, _, fault = row["f"].partition("-")
        if action == "start":
            open_[fault] = {
                "fault": fault,
                "start": row["invoke_time"] / _NS_PER_S,
                "value": row["value"],
            }
        elif action == "stop" and fault in open_:
            window = open_.pop(fault)
            stopped = row["complete_time"] or row["invoke_time"]
            windows.append(window | {"end": stopped / _NS_PER_S})
    windows += [w | {"end": (end or 0) / _NS_PER_S} for w in open_.values()]
    return sorted(windows, key=lambda w: w["start"])


def _latencies(client: DataFrame) -> list[dict[str, Any]]:
    """Latency quantiles (ms, nearest rank) of ok operations per workload and f."""
    quantiles = F.percentile_approx("latency_ns", list(QUANTILES.values()), 100_000)
    rows = (
        client.filter(F.col("type") == "ok")
        .groupBy("workload", "f")
        .agg(F.count("*").alias("count"), quantiles.alias("q"), F.max("latency_ns").alias("max"))
        .orderBy(F.col("workload").asc_nulls_first(), "f")
        .collect()
    )
    return [
        {
            "workload": row["workload"],
            "f": row["f"],
            "count": row["count"],
            **{name: q / _NS_PER_MS for name, q in zip(QUANTILES, row["q"], strict=True)},
            "max": row["max"] / _NS_PER_MS,
        }
        for row in rows
    ]


def _series(client: DataFrame) -> list[dict[str, Any]]:
    """Completed operations for the latency-over-time plot, every k-th one past the point cap."""
    completed = client.filter(F.col("complete_time").isNotNull())
    total = completed.count()
    step = max(1, math.ceil(total / MAX_SERIES_POINTS))
    numbered = completed.select(
        (F.col("invoke_time") / _NS_PER_S).alias("t"),
        (F.col("latency_ns") / _NS_PER_MS).alias("latency_ms"),
        "f",
        "type",
        "workload",
        "process",
        F.row_number().over(Window.orderBy("invoke_index")).alias("n"),
    )
    rows = numbered.filter((F.col("n") - 1) % step == 0).drop("n").orderBy("t").collect()
    return [{**row.asDict(), "process": process_value(row["process"])} for row in rows]


def _rate(client: DataFrame) -> list[dict[str, Any]]:
    """Completions per second of the run, by type (ok, fail, info)."""
    rows = (
        client.filter(F.col("complete_time").isNotNull())
        .groupBy(F.floor(F.col("complete_time") / _NS_PER_S).alias("t"), "type")
        .count()
        .orderBy("t", "type")
        .collect()
    )
    return [row.asDict() for row in rows]
