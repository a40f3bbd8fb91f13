"""Operation counts, latencies and rates: what the report plots, for every history.

It never finds anomalies (valid is always True); it says how much the run did and how fast, which
is what tells a reader whether a valid verdict means much.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from checkers.history_table import process_value
from harness.history import NEMESIS

MAX_SERIES_POINTS = 20_000
QUANTILES = {"p50": 0.5, "p90": 0.9, "p99": 0.99}
_NS_PER_MS = 1e6
_NS_PER_S = 1e9


def check(ops: DataFrame) -> dict[str, Any]:
    """Counts by workload/f/type, ok latency quantiles, duration, throughput, and plot series.

    A few Spark jobs whatever the history's size: one aggregation (counts, latencies and the
    span of the run together), the completion times of the client operations (the rate and the
    plotted points are worked out from them on the driver), the nemesis's operations."""
    groups = _groups(ops)
    client = [g for g in groups if g["client"]]
    counts = [{k: g[k] for k in ("workload", "f", "type", "count")} for g in client]
    by_type = {t: sum(c["count"] for c in counts if c["type"] == t) for t in ("ok", "fail", "info")}
    starts = [g["start"] for g in groups if g["start"] is not None]
    ends = [g["end"] for g in groups if g["end"] is not None]
    start, end = (min(starts), max(ends)) if starts else (None, None)
    duration_s = (end - start) / _NS_PER_S if start is not None else 0.0
    completed = _completed(ops)
    return {
        "valid": True,
        "anomaly_types": [],
        "anomalies": [],
        "op_count": sum(by_type.values()),
        "by_type": by_type,
        "nemesis_op_count": sum(g["count"] for g in groups if g["client"] is False),
        "counts": counts,
        "latency_ms": _latencies(client),
        "duration_s": duration_s,
        "ok_per_s": by_type["ok"] / duration_s if duration_s > 0 else None,
        "series": _series(completed),
        "rate": _rate(completed),
        "fault_windows": fault_windows(ops, end),
    }


def _groups(ops: DataFrame) -> list[dict[str, Any]]:
    """Per (client or nemesis, workload, f, type): the count, the first invocation, the last
    completion (or invocation), the latency quantiles and maximum; ordered as the report lists
    them (workload, nulls first, then f, then type)."""
    quantiles = F.percentile_approx("latency_ns", list(QUANTILES.values()), 100_000)
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
    groups = [row.asDict() for row in rows]
    return sorted(
        groups, key=lambda g: (g["workload"] is not None, g["workload"] or "", g["f"], g["type"])
    )


def fault_windows(ops: DataFrame, end: int | None = None) -> list[dict[str, Any]]:
    """When each fault was in place: from its start's invocation to its stop's completion.

    Nemesis operations are few (two per fault), so they are paired on the driver. A fault whose
    stop never came (the harness was killed) lasts until the end of the history (`end`, ns,
    found here when not given)."""
    rows = sorted(
        ops.filter(F.col("process") == NEMESIS)
        .select("f", "invoke_time", "complete_time", "value", "invoke_index")
        .collect(),
        key=lambda row: row["invoke_index"],
    )
    if end is None:
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


def _latencies(client: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Latency quantiles (ms, nearest rank) of ok operations per workload and f."""
    return [
        {
            "workload": g["workload"],
            "f": g["f"],
            "count": g["count"],
            **{name: q / _NS_PER_MS for name, q in zip(QUANTILES, g["q"], strict=True)},
            "max": g["max"] / _NS_PER_MS,
        }
        for g in client
        if g["type"] == "ok"
    ]


def _completed(ops: DataFrame) -> pa.Table:
    """The completed client operations: what the series and the rate are made of."""
    done = (F.col("process") != NEMESIS) & F.col("complete_time").isNotNull()
    columns = ("invoke_index", "invoke_time", "complete_time", "latency_ns", "f", "type")
    return ops.filter(done).select(*columns, "workload", "process").toArrow()


def _series(completed: pa.Table) -> list[dict[str, Any]]:
    """Completed operations for the latency-over-time plot, every k-th one (in invocation
    order) past the point cap, in time order."""
    step = max(1, math.ceil(completed.num_rows / MAX_SERIES_POINTS))
    picked = completed.take(np.argsort(completed.column("invoke_index").to_numpy())[::step])
    picked = picked.take(np.argsort(picked.column("invoke_time").to_numpy(), kind="stable"))
    values = {
        "t": (picked.column("invoke_time").to_numpy() / _NS_PER_S).tolist(),
        "latency_ms": (picked.column("latency_ns").to_numpy() / _NS_PER_MS).tolist(),
        **{name: picked.column(name).to_pylist() for name in ("f", "type", "workload")},
        "process": [process_value(p) for p in picked.column("process").to_pylist()],
    }
    return [dict(zip(values, point, strict=True)) for point in zip(*values.values(), strict=True)]


def _rate(completed: pa.Table) -> list[dict[str, Any]]:
    """Completions per second of the run, by type (ok, fail, info)."""
    seconds = np.floor(completed.column("complete_time").to_numpy() / _NS_PER_S).astype(np.int64)
    table = pa.table({"t": seconds, "type": completed.column("type")})
    counts = table.group_by(["t", "type"]).aggregate([([], "count_all")])
    counts = counts.sort_by([("t", "ascending"), ("type", "ascending")])
    return [
        {"t": t, "type": type_, "count": n}
        for t, type_, n in zip(
            counts.column("t").to_pylist(),
            counts.column("type").to_pylist(),
            counts.column("count_all").to_pylist(),
            strict=True,
        )
    ]
