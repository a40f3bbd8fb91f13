"""Operation counts, latencies and rates: what the report plots, for every history.

It never finds anomalies (valid is always True); it says how much the run did and how fast, which
is what tells a reader whether a valid verdict means much. `judge` is the judgment, on the
operations' columns and the nemesis's operations; `check` feeds it from plain operations, and
checkers/spark/stats.py from the operations table.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from checkers.operations import Columns, faults, process_value
from core.history import Op

MAX_SERIES_POINTS = 20_000
QUANTILES = {"p50": 0.5, "p90": 0.9, "p99": 0.99}
TYPES = ("ok", "fail", "info")
_NS_PER_MS = 1e6
_NS_PER_S = 1e9


@dataclass
class Completed:
    """The completed client operations, a column each (numpy arrays of equal length): what the
    latency series and the rate are made of."""

    invoke_index: np.ndarray
    invoke_time: np.ndarray
    complete_time: np.ndarray
    latency_ns: np.ndarray
    f: np.ndarray
    type: np.ndarray
    workload: np.ndarray
    process: np.ndarray  # as tables hold it: text

    @property
    def size(self) -> int:
        return len(self.invoke_index)


def check(ops: Iterable[Op]) -> dict[str, Any]:
    """Counts by workload/f/type, ok latency quantiles, duration, throughput, and plot series."""
    ops = list(ops)
    return judge(Columns.of(ops), faults(ops))


def judge(columns: Columns, nemesis: Sequence[Op]) -> dict[str, Any]:
    """The figures of a history from its operations' columns and the nemesis's operations."""
    groups = sorted(_groups(columns), key=group_order)
    end = max((g["end"] for g in groups), default=None)
    done = columns.client & columns.done
    completed = Completed(
        *(getattr(columns, name)[done] for name in Completed.__dataclass_fields__)
    )
    return summary(groups, completed, fault_windows(nemesis, end))


def _groups(c: Columns) -> list[dict[str, Any]]:
    """Per (client or nemesis, workload, f, type): count, first invocation, last completion (or
    invocation), latency quantiles (nearest rank) and maximum."""
    keys = list(zip(c.client.tolist(), c.workload.tolist(), c.f.tolist(), c.type.tolist(),
                    strict=True))  # fmt: skip
    distinct = list(dict.fromkeys(keys))
    number = {key: i for i, key in enumerate(distinct)}
    codes = np.fromiter(map(number.__getitem__, keys), np.int64, len(keys))
    ends = c.ends
    groups = []
    for i, (client, workload, f, type_) in enumerate(distinct):
        mine = codes == i
        values = np.sort(c.latency_ns[mine & c.done])
        nearest = [int(values[max(0, math.ceil(p * len(values)) - 1)])
                   for p in QUANTILES.values() if len(values)]  # fmt: skip
        groups.append(
            {
                "client": client,
                "workload": workload,
                "f": f,
                "type": type_,
                "count": int(mine.sum()),
                "start": int(c.invoke_time[mine].min()),
                "end": int(ends[mine].max()),
                "q": nearest if len(values) else None,
                "max": int(values[-1]) if len(values) else None,
            }
        )
    return groups


def group_order(g: dict[str, Any]) -> tuple[Any, ...]:
    """As the report lists groups: workload (none first), then f, then type."""
    return (g["workload"] is not None, g["workload"] or "", g["f"], g["type"])


def summary(
    groups: list[dict[str, Any]], completed: Completed, windows: list[dict[str, Any]]
) -> dict[str, Any]:
    """The result from the groups (in `group_order`), the completed client operations and the
    fault windows."""
    client = [g for g in groups if g["client"]]
    counts = [{k: g[k] for k in ("workload", "f", "type", "count")} for g in client]
    by_type = {t: sum(c["count"] for c in counts if c["type"] == t) for t in TYPES}
    starts = [g["start"] for g in groups if g["start"] is not None]
    ends = [g["end"] for g in groups if g["end"] is not None]
    start, end = (min(starts), max(ends)) if starts else (None, None)
    duration_s = (end - start) / _NS_PER_S if start is not None and end is not None else 0.0
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
        "fault_windows": windows,
    }


def fault_windows(nemesis: Iterable[Op], end: int | None) -> list[dict[str, Any]]:
    """When each fault was in place: from its start's invocation to its stop's completion. A
    fault whose stop never came (the harness was killed) lasts until `end` (ns), the history's."""
    windows: list[dict[str, Any]] = []
    open_: dict[str, dict[str, Any]] = {}
    for op in sorted(nemesis, key=lambda op: op["invoke_index"]):
        action, _, fault = op["f"].partition("-")
        if action == "start":
            open_[fault] = {"fault": fault, "start": op["invoke_time"] / _NS_PER_S,
                            "value": op["value"]}  # fmt: skip
        elif action == "stop" and fault in open_:
            window = open_.pop(fault)
            stopped = op["complete_time"] or op["invoke_time"]
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


def _series(completed: Completed) -> list[dict[str, Any]]:
    """Completed operations for the latency-over-time plot, every k-th one (in invocation
    order) past the point cap, in time order."""
    step = max(1, math.ceil(completed.size / MAX_SERIES_POINTS))
    picked = np.argsort(completed.invoke_index, kind="stable")[::step]
    picked = picked[np.argsort(completed.invoke_time[picked], kind="stable")]
    values = {
        "t": (completed.invoke_time[picked] / _NS_PER_S).tolist(),
        "latency_ms": (completed.latency_ns[picked] / _NS_PER_MS).tolist(),
        **{name: getattr(completed, name)[picked].tolist() for name in ("f", "type", "workload")},
        "process": [process_value(p) for p in completed.process[picked].tolist()],
    }
    return [dict(zip(values, point, strict=True)) for point in zip(*values.values(), strict=True)]


def _rate(completed: Completed) -> list[dict[str, Any]]:
    """Completions per second of the run, by type (ok, fail, info)."""
    seconds = np.floor(completed.complete_time / _NS_PER_S).astype(np.int64)
    if not completed.size:
        return []
    names, codes = np.unique(completed.type.astype(str), return_inverse=True)
    keys, counts = np.unique(seconds * len(names) + codes, return_counts=True)
    return [
        {"t": int(k // len(names)), "type": str(names[k % len(names)]), "count": int(n)}
        for k, n in zip(keys.tolist(), counts.tolist(), strict=True)
    ]
