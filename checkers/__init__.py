"""The analysis pipeline on PySpark and its checkers.

This module is the registry: which checkers judge each workload's operations, and the checker
functions. Every checker is `check(ops, **params) -> dict` over the operations table, with at
least `valid`, `anomaly_types` and `anomalies`. `stats` runs on every history, over all workloads.
"""

from collections.abc import Callable
from typing import Any

from checkers import append, bank, sets, split_brain, stats

Checker = Callable[..., dict[str, Any]]

WORKLOAD_CHECKERS: dict[str, list[str]] = {
    "append": ["append", "split-brain"],
    "bank": ["bank"],
    "set": ["set"],
}

CHECKERS: dict[str, Checker] = {
    "append": append.check,
    "bank": bank.check,
    "set": sets.check,
    "split-brain": split_brain.check,
    "stats": stats.check,
}

ALWAYS = "stats"
