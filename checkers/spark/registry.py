"""The registry of the Spark pipeline: which checkers judge each workload, and their feeds.

Every checker here is `check(ops, **params) -> dict` over the operations table, feeding the
plain judgment of the same name in `checkers/`, with at
least `valid`, `anomaly_types` and `anomalies`. `stats`, `availability` and `cluster-state` (the
cluster's own polls, beside the history) run on every history, over all workloads.
A workload may have a table the store builds beside the operations table when the driver reads
the history itself: `store(its operations as Arrow, path) -> bool` (False: not built); those of
its checkers that take a parameter OWN_TABLE get it then, read by Spark.
"""

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from checkers.spark import (
    append,
    append_micro_ops,
    availability,
    bank,
    cluster_state,
    sets,
    split_brain,
    stats,
)

Checker = Callable[..., dict[str, Any]]

WORKLOAD_CHECKERS: dict[str, list[str]] = {
    "append": ["append", "split-brain"],
    "bank": ["bank"],
    "set": ["set"],
}

CHECKERS: dict[str, Checker] = {
    "append": append.check,
    "availability": availability.check,
    "bank": bank.check,
    "cluster-state": cluster_state.check,
    "set": sets.check,
    "split-brain": split_brain.check,
    "stats": stats.check,
}

STATS = "stats"
CLUSTER_STATE = "cluster-state"  # takes the run's polls file (`polls`)
ALWAYS = (STATS, "availability", CLUSTER_STATE)  # run on every history, over all workloads

OWN_TABLE = "by_key"
WORKLOAD_TABLES: dict[str, Callable[[pa.Table, Path], bool]] = {
    "append": append_micro_ops.store_by_key,
}
