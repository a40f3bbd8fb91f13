"""A history's operations as plain data: what every checker's `check(ops, ...)` takes.

An operation is an invocation paired with its completion (the next event of its process), as a
dict of `OP_COLUMNS` with values parsed from JSON (core.history.Op). checkers/reader.py reads a
history file into them; these are the helpers the judgments share.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

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


def op_dict(row: Mapping[str, Any]) -> Op:
    """One operation from a table's row (values as JSON text, the process as text)."""
    op = dict(row)
    for key in ("invoke_value", "value"):
        op[key] = None if op[key] is None else json.loads(op[key])
    op["process"] = process_value(op["process"])
    return op
