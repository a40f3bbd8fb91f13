"""The split-brain checker over plain operations: acknowledged writes through two nodes from
divergent histories (checkers/listappend/split_brain), shown with the faults around them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from checkers.append import transactions, with_operations
from checkers.listappend import split_brain
from checkers.operations import faults
from core.history import Op


def check(ops: Iterable[Op]) -> dict[str, Any]:
    """The append workload's transactions through two nodes that saw divergent histories."""
    ops = list(ops)
    return with_operations(ops, split_brain.check(transactions(ops), fault_spans(ops)))


def fault_spans(ops: Iterable[Op]) -> list[dict[str, Any]]:
    """The nemesis's operations as the cases show them: start, end (ns), f and value."""
    return [
        {"start": op["invoke_time"], "end": op["complete_time"], "f": op["f"], "value": op["value"]}
        for op in faults(ops)
    ]
