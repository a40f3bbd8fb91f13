"""The checkers by name: what a workload declares as its judges, and the pipeline runs.

Each is a plain judgment of a history's operations (`judge(ops, **params)`, usable without
Spark). The pipeline feeds the same judgment from Spark's operations table
(checkers/spark/registry.py, by the checker's name).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from checkers import append, availability, bank, cluster_state, logs, sets, split_brain, stats


@dataclass(frozen=True)
class Checker:
    name: str  # its key in results.json
    judge: Callable[..., dict[str, Any]]


APPEND = Checker("append", append.check)
SPLIT_BRAIN = Checker("split-brain", split_brain.check)
BANK = Checker("bank", bank.check)
SET = Checker("set", sets.check)
STATS = Checker("stats", stats.check)
AVAILABILITY = Checker("availability", availability.check)
CLUSTER_STATE = Checker("cluster-state", cluster_state.check)
LOGS = Checker("logs", logs.check)
# Run on every history, over all its workloads' operations (the logs checker reads none).
ALWAYS = (STATS, AVAILABILITY, CLUSTER_STATE, LOGS)
BY_NAME = {c.name: c for c in (APPEND, SPLIT_BRAIN, BANK, SET, *ALWAYS)}
