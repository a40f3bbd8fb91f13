"""The cluster-state checker fed from the operations table: the polls and checksums are read as
they are; Spark picks the nemesis's operations (when faults were in place), and the acknowledged
client writes only when one of the kind's rules wants them; checkers/cluster_state.py judges."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from checkers import cluster_state
from checkers.moments import Moment
from checkers.operations import op_dict
from checkers.spark.history_table import nemesis_ops
from core.history import NEMESIS, OP_COLUMNS
from core.polls import Record, read_rounds


def check(
    ops: DataFrame,
    polls: str | None = None,
    digests: str | None = None,
    rules: Sequence[type[cluster_state.Rule]] = tuple(cluster_state.RULES.values()),
    records: Sequence[type[Record]] | None = None,
    moments: Sequence[type[Moment]] = (),
) -> dict[str, Any]:
    """As `checkers.cluster_state.check`, over the operations table."""
    chosen = nemesis_ops(ops)  # when the cluster was left alone
    rounds = read_rounds(Path(polls), records) if polls and Path(polls).is_file() else []
    if cluster_state.wants_writes(rounds, rules):
        acked = (F.col("type") == "ok") & (F.col("process") != NEMESIS)
        wanted = F.col("lsn").isNotNull() | F.coalesce(F.col("write"), F.lit(False))
        rows = ops.filter(acked & wanted).select(*OP_COLUMNS).toArrow().to_pylist()
        chosen += [op_dict(r) for r in rows]
    return cluster_state.check(chosen, polls, digests, rules, records, moments)
