"""One history in, one verdict out: load, pair into operations, store them, run the checkers."""

from __future__ import annotations

import inspect
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from py4j.protocol import Py4JError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from checkers.spark.history_table import store_operations
from checkers.spark.registry import (
    ALWAYS,
    CHECKERS,
    OWN_TABLE,
    STATS,
    WORKLOAD_CHECKERS,
    WORKLOAD_TABLES,
)
from checkers.spark.session import Spark, session_of
from harness.errors import BadInput, InfraError
from harness.verdict import combine, word

OPS_TABLE = "ops.parquet"
BY_KEY_TABLE = "{workload}-by-key.parquet"  # a workload's own table (WORKLOAD_TABLES)


def analyze(
    spark: Spark,
    history: Path,
    out_dir: Path,
    workloads: list[str],
    params: dict[str, dict[str, Any]],
    progress: Callable[[str], None] = lambda step: None,
) -> dict[str, Any]:
    """Check a history for the named workloads; write out_dir/ops.parquet; return the results.

    params maps a checker name to its keyword arguments, e.g. {"bank": {"accounts": [0, 1],
    "total": 20}}. Events without a `workload` field belong to every named workload.
    `progress` hears each step as it begins (a large history takes a minute).
    """
    unknown = [w for w in workloads if w not in WORKLOAD_CHECKERS]
    if unknown or not workloads:
        raise BadInput(
            f"unknown workload {', '.join(unknown) or '(none named)'}: "
            f"the known workloads are {', '.join(sorted(WORKLOAD_CHECKERS))}"
        )
    try:
        return _analyze(spark, history, out_dir, workloads, params, progress)
    except (PySparkException, Py4JError) as e:
        raise InfraError(f"Spark failed while checking {history}: {e}") from e


def _analyze(
    spark: Spark,
    history: Path,
    out_dir: Path,
    workloads: list[str],
    params: dict[str, dict[str, Any]],
    progress: Callable[[str], None],
) -> dict[str, Any]:
    table = out_dir / OPS_TABLE
    # a single-workload history written by hand need not tag its events
    tag = workloads[0] if len(workloads) == 1 else None
    own = {w: out_dir / BY_KEY_TABLE.format(workload=w) for w in workloads if w in WORKLOAD_TABLES}
    for path in own.values():  # an earlier check's: this one may not build it
        shutil.rmtree(path, ignore_errors=True)

    built: set[str] = set()

    def build_own(ops: pa.Table) -> None:
        for w, path in own.items():
            mine = ops.filter(pc.fill_null(pc.equal(ops["workload"], w), True))
            if WORKLOAD_TABLES[w](mine, path):
                built.add(w)

    progress("reading the history into the operations table")
    event_count, notes = store_operations(spark, history, table, tag, build_own)
    # The checkers read the table as written: no copy of the operations stays in memory.
    session = session_of(spark)
    ops = session.read.parquet(str(table))

    results: dict[str, dict[str, Any]] = {}
    for workload in workloads:
        # as build_own takes them: events without a workload belong to every one
        mine = ops.filter(F.col("workload").isNull() | (F.col("workload") == workload))
        own_table = session.read.parquet(str(own[workload])) if workload in built else None
        for name in WORKLOAD_CHECKERS[workload]:
            progress(f"the {name} checker")
            results[name] = _run(name, mine, params.get(name, {}), own_table)
    for name in ALWAYS:
        progress(f"the {name} checker")
        results[name] = _run(name, ops, params.get(name, {}))

    others = {c["workload"] for c in results[STATS]["counts"]} - {None, *workloads}
    notes.extend(
        f"the history also has operations of workload {w}, which was not asked for and not checked"
        for w in sorted(others)
    )
    valid = combine([r["valid"] for r in results.values()])
    return {
        "valid": valid,
        "verdict": word(valid),
        "checkers": results,
        "notes": notes,
        "history": {"path": str(history), "events": event_count},
    }


def _run(
    name: str, ops: DataFrame, params: dict[str, Any], own: DataFrame | None = None
) -> dict[str, Any]:
    """Run one checker, with its workload's `own` table when it takes one; parameters that do
    not fit its signature are the user's mistake."""
    checker = CHECKERS[name]
    taken = inspect.signature(checker).parameters
    tables = {OWN_TABLE: own} if own is not None and OWN_TABLE in taken else {}
    try:
        inspect.signature(checker).bind(ops, **params, **tables)
    except TypeError as e:
        wanted = [p for p in taken if p not in ("ops", OWN_TABLE)]
        raise BadInput(
            f"the {name} checker takes parameters {', '.join(wanted) or '(none)'}, "
            f"got {', '.join(sorted(params)) or '(none)'}: {e}"
        ) from e
    return checker(ops, **params, **tables)
