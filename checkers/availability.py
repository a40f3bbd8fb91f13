"""Availability: how soon the cluster takes writes again after each fault heals, and the longest
stretch of the run with no acknowledged write at all.

A valid verdict on a cluster that served nothing for minutes would mislead, so every run gets
these figures. With `max_recovery` (seconds), a run is invalid when, after a fault healed, that
many seconds free of faults passed without an acknowledged write (`slow-recovery`, naming the
fault), or when a stretch with no fault in place and no acknowledged write lasted longer than
that (`write-stall`). Time under a later fault does not count: a fault may rightly keep writes
out, and the bound is what the cluster needs once left alone.

Whatever the bound, a run whose final reads (taken after every fault healed, retried for a
minute) all failed is `no-final-read`: the cluster did not come back once left alone, and what
it had acknowledged cannot be shown durable (a safekeeper that lost its control file to a power
fault never starts again: the run shows no lost write, only this).

`analyse` is the judgment, on plain numbers; `judge` finds them in the operations' columns, which
`check` makes from plain operations and checkers/spark/availability.py from the operations table.
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from checkers.operations import Columns, faults
from checkers.stats import fault_windows
from core.history import FINAL_READS_PROCESS, Op

NS_PER_S = 1e9


@dataclass(frozen=True)
class Window:
    fault: str
    start: float  # s
    end: float  # s: the heal's completion
    value: Any = None


def covered(windows: list[Window], lo: float, hi: float) -> float:
    """Seconds of [lo, hi] during which some fault was in place."""
    inside = [w for w in windows if w.end > lo and w.start < hi]
    spans = sorted((max(w.start, lo), min(w.end, hi)) for w in inside)
    total, reach = 0.0, lo
    for a, b in spans:
        a = max(a, reach)
        if b > a:
            total += b - a
            reach = b
    return total


def describe(w: Window) -> str:
    """A fault as a person names it: its kind and its sides, targets or shape where recorded."""
    value = w.value
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            value = json.loads(value)
    value = value if isinstance(value, dict) else {}
    what = value.get("shape")
    if isinstance(value.get("grudge"), dict) and len(parts := sides(value["grudge"])) > 1:
        what = " | ".join(" ".join(part) for part in parts)
    elif isinstance(value.get("targets"), list) and value["targets"]:
        what = " ".join(map(str, value["targets"]))
    return f"the {w.fault}" + (f" ({what})" if what else "")


def sides(grudge: dict[str, list[str]]) -> list[list[str]]:
    """The groups of nodes a partition's grudge leaves able to talk (a node cut from another
    cannot talk to it either way); one group when the shape is not a clean split."""
    nodes = sorted(set(grudge) | {n for cut in grudge.values() for n in cut})
    group = {n: n for n in nodes}

    def root(n: str) -> str:
        while group[n] != n:
            n = group[n]
        return n

    for a in nodes:
        for b in nodes:
            if a < b and b not in grudge.get(a, []) and a not in grudge.get(b, []):
                group[root(a)] = root(b)
    parts: dict[str, list[str]] = {}
    for n in nodes:
        parts.setdefault(root(n), []).append(n)
    return sorted(parts.values(), key=len)


@dataclass(frozen=True)
class FinalReads:
    """One workload's final reads: how many were tried, how many succeeded, and from the first
    invocation to the last completion (s)."""

    workload: str
    tried: int
    succeeded: int
    start: float
    end: float


def analyse(
    writes: list[float],
    windows: list[Window],
    span: tuple[float, float] | None,
    max_recovery: float | None = None,
    final_reads: list[FinalReads] = (),  # type: ignore[assignment]
) -> dict[str, Any]:
    """`writes`: completion times (s, ascending) of the acknowledged writes; `windows`: the faults;
    `span`: when writes were being tried (first to last write invocation), None if never;
    `final_reads`: each workload's."""
    result: dict[str, Any] = {
        "valid": True,
        "anomaly_types": [],
        "anomalies": [],
        "max_recovery_s": max_recovery,
        "windows": [],
        "worst_recovery_s": None,
        "longest_gap_s": None,
        "longest_gap": None,
        "last_write_s": writes[-1] if writes else None,
        "writes_end_s": span[1] if span else None,
        "acked_writes": len(writes),
        "acked_writes_per_s": None,
    }
    if span is None:
        return result
    first, last = span
    if last > first:
        result["acked_writes_per_s"] = len(writes) / (last - first)
    for i, w in enumerate(sorted(windows, key=lambda w: w.start)):
        row: dict[str, Any] = {"fault": w.fault, "start": w.start, "end": w.end}
        if w.end >= last:  # healed when the writes had ended: nothing to measure
            row["recovery_s"] = None
            row["note"] = "the run's writes had ended"
            result["windows"].append(row)
            continue
        holding = [o for o in windows if o.start <= w.end < o.end and o is not w]
        if holding:  # a fault nested in another: the cluster was not left alone at its heal
            row["recovery_s"] = None
            row["inside"] = holding[0].fault
            row["note"] = f"healed while the {holding[0].fault} it was inside held"
            result["windows"].append(row)
            continue
        k = bisect.bisect_left(writes, w.end)
        after = writes[k] if k < len(writes) else None
        until = after if after is not None else last
        row["recovery_s"] = None if after is None else after - w.end
        row["first_write_s"] = after
        row["free_s"] = until - w.end - covered(windows, w.end, until)
        result["windows"].append(row)
        if after is None and max_recovery is not None and row["free_s"] <= max_recovery:
            # The writes ended before the cluster was due to be back: neither a recovery nor a
            # failure to recover (a fault healed two seconds before the end is no alarm).
            row["unsettled"] = True
            row["note"] = (
                f"the writes ended {row['free_s']:.1f} s after it healed, "
                f"within the {max_recovery:g} s bound"
            )
        elif after is None:
            row["note"] = "no write was acknowledged after it"
        if max_recovery is not None and row["free_s"] > max_recovery:
            how = (
                f"the first write acknowledged after it completed at {after:.1f} s"
                if after is not None
                else f"no write was acknowledged after it, to the end of the writes at {last:.1f} s"
            )
            result["anomalies"].append(
                {
                    "type": "slow-recovery",
                    "window_ns": [w.start * NS_PER_S, until * NS_PER_S],
                    "explanation": (
                        f"{describe(w)} healed at {w.end:.1f} s; {how}: {row['free_s']:.1f} s "
                        f"free of faults without a write, over the bound of {max_recovery:g} s"
                    ),
                    "window": i,
                }
            )
    recoveries = [
        r["recovery_s"]
        for r in result["windows"]
        if r.get("free_s") is not None and not r.get("unsettled")
    ]
    if recoveries:
        never = any(r is None for r in recoveries)
        result["worst_recovery_s"] = None if never else max(recoveries)
        result["never_recovered"] = never
    points = [first, *writes, last]
    gaps = [(b - a, a, b) for a, b in itertools.pairwise(points) if b >= a]
    if gaps:
        length, a, b = max(gaps)
        result["longest_gap_s"], result["longest_gap"] = length, [a, b]
    if max_recovery is not None:
        result["anomalies"] += _stalls(points, windows, max_recovery)
    result["anomalies"] += _unanswered(final_reads, len(writes))
    if result["anomalies"]:
        result["valid"] = False
        result["anomaly_types"] = sorted({a["type"] for a in result["anomalies"]})
    return result


def _unanswered(final_reads: list[FinalReads], acked: int) -> list[dict[str, Any]]:
    """A workload whose final reads were all refused, after writes were acknowledged."""
    if not acked:
        return []
    return [
        {
            "type": "no-final-read",
            "window_ns": [r.start * NS_PER_S, r.end * NS_PER_S],
            "workload": r.workload,
            "explanation": (
                f"after every fault had healed, none of the {r.tried} final reads of {r.workload} "
                f"succeeded ({r.start:.1f} s to {r.end:.1f} s): the cluster did not come back "
                f"once left alone, and none of the {acked} acknowledged writes can be shown "
                "durable"
            ),
        }
        for r in sorted(final_reads, key=lambda r: r.workload)
        if r.tried and not r.succeeded
    ]


def _stalls(points: list[float], windows: list[Window], bound: float) -> list[dict[str, Any]]:
    """Stretches between acknowledged writes with no fault in place for longer than `bound`,
    that no heal just before explains (those are slow recoveries, reported per fault)."""
    heals = sorted(w.end for w in windows)
    found = []
    for a, b in itertools.pairwise(points):
        if b - a <= bound or b - a - covered(windows, a, b) <= bound:
            continue
        if any(a <= h < b for h in heals):  # the free time follows a heal: a slow recovery
            continue
        found.append(
            {
                "type": "write-stall",
                "window_ns": [a * NS_PER_S, b * NS_PER_S],
                "explanation": (
                    f"no write was acknowledged from {a:.1f} s to {b:.1f} s with no fault in "
                    f"place, over the bound of {bound:g} s"
                ),
            }
        )
    return found


def check(ops: Iterable[Op], max_recovery: float | None = None) -> dict[str, Any]:
    """The figures of a history's operations."""
    ops = list(ops)
    return judge(Columns.of(ops), faults(ops), max_recovery)


def judge(c: Columns, nemesis: Sequence[Op], max_recovery: float | None = None) -> dict[str, Any]:
    """The figures from the operations' columns and the nemesis's operations: the client
    writes' invocations and acknowledgements, the faults' windows, the final reads."""
    writes = c.client & c.write
    acked = writes & c.done & (c.type == "ok")
    times = sorted((c.complete_time[acked] / NS_PER_S).tolist())
    starts = c.invoke_time[writes]
    bounds = (starts.min() / NS_PER_S, starts.max() / NS_PER_S) if starts.size else None
    end = int(c.ends.max()) if c.ends.size else None
    windows = [Window(w["fault"], w["start"], w["end"], w.get("value"))
               for w in fault_windows(nemesis, end)]  # fmt: skip
    numbered = np.array([p.lstrip("-").isdigit() for p in c.process.tolist()], dtype=bool)
    final = np.zeros(len(numbered), dtype=bool)
    final[numbered] = c.process[numbered].astype(np.int64) >= FINAL_READS_PROCESS
    final_reads = []
    for workload in dict.fromkeys(c.workload[final].tolist()):
        tried = final & (c.workload == workload)
        final_reads.append(
            FinalReads(
                workload or "the history",
                int(tried.sum()),
                int((c.type[tried] == "ok").sum()),
                c.invoke_time[tried].min() / NS_PER_S,
                c.ends[tried].max() / NS_PER_S,
            )
        )
    return analyse(times, windows, bounds, max_recovery, final_reads)
