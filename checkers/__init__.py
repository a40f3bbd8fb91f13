"""The analysis pipeline on PySpark and its checkers.

This module is the registry: which checkers judge each workload's operations, and the checker
functions. Every checker is `check(ops, **params) -> dict` over the operations table, with at
least `valid`, `anomaly_types` and `anomalies`. `stats` runs on every history, over all workloads.
"""

from collections.abc import Callable
from typing import Any

from checkers import bank, sets, stats

Checker = Callable[..., dict[str, Any]]

WORKLOAD_CHECKERS: dict[str, list[str]] = {
    "append": [],  # list-append's dependency-graph checker is its own piece of work
    "bank": ["bank"],
    "set": ["set"],
}

CHECKERS: dict[str, Checker] = {
    "bank": bank.check,
    "set": sets.check,
    "stats": stats.check,
}

ALWAYS = "stats"
