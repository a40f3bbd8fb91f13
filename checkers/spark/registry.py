"""The registry of the Spark pipeline: each checker's feed from the operations table.

Every feed here is `check(ops, **params) -> dict` over the operations table, feeding the plain
judgment of the same name (checkers/catalog.py), with at least `valid`, `anomaly_types` and
`anomalies`. A checker may have a table the store builds beside the operations table when the
driver reads the history itself: `store(the operations as Arrow, path, mine) -> bool` (`mine`:
which operations are its workload's; False: not built); the feeds of that workload's checkers
that take a parameter OWN_TABLE get it then, read by Spark.
"""

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from checkers import catalog, logs
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

Feed = Callable[..., dict[str, Any]]

FEEDS: dict[str, Feed] = {
    catalog.APPEND.name: append.check,
    catalog.AVAILABILITY.name: availability.check,
    catalog.BANK.name: bank.check,
    catalog.CLUSTER_STATE.name: cluster_state.check,
    catalog.LOGS.name: lambda ops, **params: logs.check(None, **params),  # reads no operation
    catalog.SET.name: sets.check,
    catalog.SPLIT_BRAIN.name: split_brain.check,
    catalog.STATS.name: stats.check,
}

OWN_TABLE = "by_key"
# A workload judged by one of these checkers gets the table beside the operations table.
OWN_TABLES: dict[str, Callable[[pa.Table, Path, pa.Array], bool]] = {
    catalog.APPEND.name: append_micro_ops.store_by_key,
}
