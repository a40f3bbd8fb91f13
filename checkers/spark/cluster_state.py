"""The cluster-state checker fed from the operations table: the polls and checksums are read as
they are; Spark picks the nemesis's operations (when faults were in place), and the acknowledged
writes only when the polls show safekeepers (the writes' WAL positions) or give generations
(Manatee); checkers/cluster_state.py judges them."""

from __future__ import annotations

import functools
import operator
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from checkers import cluster_state
from checkers.availability import WRITE_FS
from checkers.operations import OP_COLUMNS, op_dict
from checkers.spark.history_table import nemesis_ops
from harness.history import NEMESIS


def check(ops: DataFrame, polls: str | None = None, digests: str | None = None) -> dict[str, Any]:
    """As `checkers.cluster_state.check`, over the operations table."""
    writes = nemesis_ops(ops)  # when the cluster was left alone
    polled = polls is not None and Path(polls).is_file()
    rounds = cluster_state.read_rounds(Path(str(polls))) if polled else []
    acked = (F.col("type") == "ok") & (F.col("process") != NEMESIS)
    wanted = []
    if cluster_state.keepers_of(rounds):
        wanted.append(F.col("lsn").isNotNull())
    if cluster_state.generations(rounds):
        txn_write = (F.col("f") == "txn") & F.coalesce(
            F.col("invoke_value").contains('"append"'), F.lit(False)
        )
        wanted.append(F.col("f").isin(*WRITE_FS) | txn_write)
    if wanted:
        rows = ops.filter(acked & functools.reduce(operator.or_, wanted))
        writes += [op_dict(r) for r in rows.select(*OP_COLUMNS).toArrow().to_pylist()]
    return cluster_state.check(writes, polls, digests)
