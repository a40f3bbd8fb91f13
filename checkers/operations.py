"""A history's operations as plain data: what every checker's `check(ops, ...)` takes.

An operation is an invocation paired with its completion (the next event of its process), as a
dict of `OP_COLUMNS` with values parsed from JSON. `read_history` and `pair` make them from a
history file or from events in memory, in plain Python; the Spark pipeline builds the same
operations as a table (checkers/spark/history_table.py) and hands the checkers these dicts.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from core.errors import BadInput
from core.history import NEMESIS, Op, Writes


def read_history(path: Path, writes: Writes | None = None) -> list[Op]:
    """The operations of a history file (one JSON event per line; a last line cut off by a crash
    is skipped, as the pipeline skips it); `writes` as for `pair`."""
    if not path.is_file():
        raise BadInput(f"history file {path} does not exist")
    lines = path.read_text(encoding="utf-8").splitlines()
    events = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            events.append(json.loads(line))
        except ValueError:
            if number == len(lines):
                break  # cut off by a crash
            raise BadInput(f"{path} line {number} is not JSON: fix or remove that line") from None
    return pair(events, writes)


def pair(events: Iterable[Mapping[str, Any]], writes: Writes | None = None) -> list[Op]:
    """Pair each invocation with the next event of its process, in invocation order.

    An invocation with no completion gets type "info" (its outcome is unknown). A nemesis
    completion with no invocation stands as an operation alone. A client completion with no
    invocation, or a second invocation before the first completed, is BadInput. A client
    operation whose invocation did not record `write` is given the workloads' declaration,
    `writes`, where one is given.
    """
    ops: list[Op] = []
    pending: dict[Any, Mapping[str, Any]] = {}
    for event in sorted(events, key=lambda e: e["index"]):
        process, nemesis = event["process"], event["process"] == NEMESIS
        invoked = pending.pop(process, None)
        if event["type"] == "invoke":
            if invoked is not None:
                if not nemesis:
                    at = invoked["index"]
                    why = f"is invoked while its process's invocation at index {at} is pending"
                    raise BadInput(_broken(event, why))
                ops.append(_op(invoked, None))
            pending[process] = event
        elif invoked is not None:
            if invoked["f"] != event["f"] and not nemesis:
                f, at = invoked["f"], invoked["index"]
                why = f"completes f {f!r} invoked at index {at} under another f"
                raise BadInput(_broken(event, why))
            ops.append(_op(invoked, event))
        elif nemesis:
            ops.append(_op(event, event))
        else:
            raise BadInput(_broken(event, "completes an operation its process never invoked"))
    ops.extend(_op(invoked, None) for invoked in pending.values())
    if writes is not None:
        for op in ops:
            if op["write"] is None and op["process"] != NEMESIS:
                op["write"] = writes(op["workload"], op["f"], op["invoke_value"])
    return sorted(ops, key=lambda op: op["invoke_index"])


def _op(invoke: Mapping[str, Any], done: Mapping[str, Any] | None) -> Op:
    """One operation from its invocation and its completion (None: never completed)."""
    end = done or {}
    return {
        "process": invoke["process"],
        "workload": invoke.get("workload") or end.get("workload"),
        "f": invoke["f"],
        "node": end.get("node") or invoke.get("node"),
        "type": end.get("type", "info"),
        "invoke_index": invoke["index"],
        "invoke_time": invoke["time"],
        "complete_index": end.get("index"),
        "complete_time": end.get("time"),
        "invoke_value": invoke.get("value"),
        "value": end.get("value") if done is not None else invoke.get("value"),
        "error": end.get("error"),
        "latency_ns": None if done is None else done["time"] - invoke["time"],
        "lsn": end.get("lsn"),
        "write": None if invoke["process"] == NEMESIS else invoke.get("write"),
    }


def _broken(event: Mapping[str, Any], what: str) -> str:
    return (
        f"history event index {event['index']} (process {event['process']}, {event['type']} "
        f"{event['f']!r}) {what}: every operation is an invoke followed by its completion on the "
        "same process"
    )


def client(ops: Iterable[Op]) -> list[Op]:
    """The clients' operations: not the nemesis's."""
    return [op for op in ops if op["process"] != NEMESIS]


def faults(ops: Iterable[Op]) -> list[Op]:
    """The nemesis's operations, in invocation order."""
    return sorted((op for op in ops if op["process"] == NEMESIS), key=lambda op: op["invoke_index"])


def end_of(ops: Iterable[Op]) -> int | None:
    """When the history ends (ns): its last completion, or invocation of what never completed."""
    ends = (op["invoke_time"] if op["complete_time"] is None else op["complete_time"] for op in ops)
    return max(ends, default=None)


def process_value(process: str) -> int | str:
    """A process as the history wrote it: tables hold text, since "nemesis" is one too."""
    return int(process) if process.lstrip("-").isdigit() else process


def op_dict(row: Mapping[str, Any]) -> Op:
    """One operation from a table's row (values as JSON text, the process as text)."""
    op = dict(row)
    for key in ("invoke_value", "value"):
        op[key] = None if op[key] is None else json.loads(op[key])
    op["process"] = process_value(op["process"])
    return op
