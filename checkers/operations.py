"""A history's operations as plain data: what every checker's `check(ops, ...)` takes.

An operation is an invocation paired with its completion (the next event of its process), as a
dict of `OP_COLUMNS` with values parsed from JSON (core.history.Op). checkers/reader.py reads a
history file into them; these are the helpers the judgments share.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from core.history import NEMESIS, Op


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
    # an integer's canonical text is the integer; "01" or "-0" is a name
    return (
        int(process) if process.lstrip("-").isdigit() and str(int(process)) == process else process
    )


def with_warnings(result: dict[str, Any]) -> dict[str, Any]:
    """A checker's result whose anomalies say which of their acknowledged operations the server
    acknowledged with a warning: a COMMIT cancelled while it waited for a synchronous standby
    returns success, warning that it committed locally only; that is why such a write can be
    lost, and a person reading the anomaly should see it."""
    anomalies = []
    for anomaly in result.get("anomalies") or []:
        ops = [op for op in anomaly.get("ops") or [] if isinstance(op, dict)]
        warned = [op for op in ops if op.get("warning") and op.get("type") == "ok"]
        if warned:
            said = "; ".join(
                f"index {op['invoke_index']}: {op['warning'].rstrip('.')}" for op in warned
            )
            anomaly = anomaly | {
                "explanation": f"{anomaly.get('explanation', '').rstrip('.')}. Acknowledged "
                f"with the server's warning ({said})",
                "warned": [op["invoke_index"] for op in warned],
            }
        anomalies.append(anomaly)
    return result | {"anomalies": anomalies} if "anomalies" in result else result


def with_nodes(result: dict[str, Any]) -> dict[str, Any]:
    """A result whose cycles say where each of their transactions ran, when they ran on more
    than one node: with reads on standbys, a cycle whose reads disagree across nodes (a Long
    Fork: two commits seen in one order on one node and in the other on another) is read from
    where each transaction ran."""
    anomalies = []
    for anomaly in result.get("anomalies") or []:
        ops = [op for op in anomaly.get("ops") or [] if isinstance(op, dict)]
        nodes = {f"T{op['invoke_index']}": op.get("node") for op in ops}
        if anomaly.get("cycle") and len(set(nodes.values()) - {None}) > 1:
            where = ", ".join(f"{name} on {node}" for name, node in nodes.items() if node)
            anomaly = anomaly | {
                "explanation": f"{anomaly.get('explanation', '').rstrip('.')}. They ran on "
                f"different nodes: {where}",
                "nodes": nodes,
            }
        anomalies.append(anomaly)
    return result | {"anomalies": anomalies} if "anomalies" in result else result


def annotated(result: dict[str, Any]) -> dict[str, Any]:
    """A checker's result with what its anomalies' operations add for a reader: the warnings
    they were acknowledged with, the nodes a cycle's transactions ran on."""
    return with_nodes(with_warnings(result))


def op_dict(row: Mapping[str, Any]) -> Op:
    """One operation from a table's row (values as JSON text, the process as text)."""
    op = dict(row)
    for key in ("invoke_value", "value"):
        op[key] = None if op[key] is None else json.loads(op[key])
    op["process"] = process_value(op["process"])
    return op


@dataclass(frozen=True)
class Columns:
    """A history's operations a column each (numpy arrays of equal length, in no particular
    order): what the judgments over every operation (stats, availability) read, made alike from
    plain operations (`of`) and from the operations table (checkers/spark). The nemesis's
    operations are in them too (`client` false)."""

    client: np.ndarray  # bool
    process: np.ndarray  # object: the process's text
    workload: np.ndarray  # object: a name or None
    f: np.ndarray  # object
    type: np.ndarray  # object
    invoke_index: np.ndarray  # int64
    invoke_time: np.ndarray  # int64
    done: np.ndarray  # bool: it completed
    complete_time: np.ndarray  # int64, 0 where not done
    latency_ns: np.ndarray  # int64, 0 where not done
    write: np.ndarray  # bool: a client operation its workload declares a write

    NAMES: ClassVar[tuple[str, ...]] = (
        "process", "workload", "f", "type", "invoke_index", "invoke_time", "complete_time",
        "latency_ns", "write",
    )  # fmt: skip

    @classmethod
    def of(cls, ops: Iterable[Op]) -> Columns:
        """From plain operations."""
        ops = list(ops)
        return cls.from_lists(
            {name: [op[name] for op in ops] for name in cls.NAMES}  # type: ignore[literal-required]
        )

    @classmethod
    def from_lists(cls, lists: Mapping[str, list[Any]]) -> Columns:
        """From a list per name of NAMES, None where an operation has no value."""
        process = np.array([str(p) for p in lists["process"]], dtype=object)
        complete = lists["complete_time"]
        done = np.array([t is not None for t in complete], dtype=bool)
        return cls(
            client=process != NEMESIS,
            process=process,
            workload=np.array(lists["workload"], dtype=object),
            f=np.array(lists["f"], dtype=object),
            type=np.array(lists["type"], dtype=object),
            invoke_index=np.array(lists["invoke_index"], dtype=np.int64),
            invoke_time=np.array(lists["invoke_time"], dtype=np.int64),
            done=done,
            complete_time=np.array([t or 0 for t in complete], dtype=np.int64),
            latency_ns=np.array([t or 0 for t in lists["latency_ns"]], dtype=np.int64),
            write=np.array([bool(w) for w in lists["write"]], dtype=bool) & (process != NEMESIS),
        )

    @property
    def ends(self) -> np.ndarray:
        """When each operation ended: its completion, or its invocation if it never did."""
        return np.where(self.done, self.complete_time, self.invoke_time)
