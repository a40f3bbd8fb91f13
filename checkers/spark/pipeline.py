"""One history in, one verdict out: load, pair into operations, store them, run the checkers."""

from __future__ import annotations

import contextlib
import inspect
import resource
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from py4j.protocol import Py4JError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from checkers.catalog import ALWAYS, STATS, Checker
from checkers.operations import annotated
from checkers.spark.history_table import forget_columns, store_operations
from checkers.spark.registry import FEEDS, OWN_TABLE, OWN_TABLES
from checkers.spark.session import Spark, session_of
from core.errors import BadInput, InfraError
from core.history import Writes
from core.verdict import combine, word

OPS_TABLE = "ops.parquet"
BY_KEY_TABLE = "{workload}-by-key.parquet"  # a workload's own table (OWN_TABLES)


def analyze(
    spark: Spark,
    history: Path,
    out_dir: Path,
    checks: Mapping[str, Sequence[Checker]],
    params: Mapping[str, Mapping[str, Any]],
    progress: Callable[[str], None] = lambda step: None,
    writes: Writes | None = None,
) -> dict[str, Any]:
    """Check a history with each workload's checkers (`checks`: workload name → its
    checkers); write out_dir/ops.parquet; return the results.

    params maps a checker name to its keyword arguments, e.g. {"bank": {"accounts": [0, 1],
    "total": 20}}. Events without a `workload` field belong to every named workload; client
    operations that did not record whether they write are judged by `writes` (the workloads'
    declaration). `progress` hears each step as it begins (a large history takes a minute).
    """
    if not checks:
        raise BadInput("no workload named: say which workloads the history is of")
    with spark_failures(history):
        table = out_dir / OPS_TABLE
        workloads = list(checks)
        # a single-workload history written by hand need not tag its events
        tag = workloads[0] if len(workloads) == 1 else None
        builders = {
            w: next(OWN_TABLES[c.name] for c in checkers if c.name in OWN_TABLES)
            for w, checkers in checks.items()
            if any(c.name in OWN_TABLES for c in checkers)
        }
        own = {w: out_dir / BY_KEY_TABLE.format(workload=w) for w in builders}
        for path in own.values():  # an earlier check's: this one may not build it
            shutil.rmtree(path, ignore_errors=True)

        built: set[str] = set()

        def build_own(ops: pa.Table) -> None:
            for w, path in own.items():
                mine = pc.fill_null(pc.equal(ops["workload"], w), True)
                if builders[w](ops, path, mine):
                    built.add(w)

        # wall seconds of each step, and the process's peak memory as each ends: what a slow
        # or large check spent its time and memory on
        seconds: dict[str, float] = {}
        peaks: dict[str, int] = {}
        began = time.perf_counter()
        progress("reading the history into the operations table")
        event_count, notes = store_operations(history, table, tag, build_own, writes)
        seconds["reading"] = round(time.perf_counter() - began, 3)
        peaks["reading"] = peak_mib()
        # The checkers read the table as written: no copy of the operations stays in memory.
        session = session_of(spark)
        ops = session.read.parquet(str(table))

        results: dict[str, dict[str, Any]] = {}
        for workload in workloads:
            # as build_own takes them: events without a workload belong to every one
            mine = ops.filter(F.col("workload").isNull() | (F.col("workload") == workload))
            own_table = session.read.parquet(str(own[workload])) if workload in built else None
            for checker in checks[workload]:
                progress(f"the {checker.name} checker")
                began = time.perf_counter()
                results[checker.name] = annotated(
                    _run(checker.name, mine, params.get(checker.name, {}), own_table)
                )
                seconds[checker.name] = round(time.perf_counter() - began, 3)
                peaks[checker.name] = peak_mib()
        for checker in ALWAYS:
            progress(f"the {checker.name} checker")
            began = time.perf_counter()
            results[checker.name] = annotated(_run(checker.name, ops, params.get(checker.name, {})))
            seconds[checker.name] = round(time.perf_counter() - began, 3)
            peaks[checker.name] = peak_mib()
        forget_columns()

        others = {c["workload"] for c in results[STATS.name]["counts"]} - {None, *workloads}
        notes.extend(
            f"the history also has operations of workload {w}, which was not asked for and "
            "not checked"
            for w in sorted(others)
        )
        valid = combine([r["valid"] for r in results.values()])
        return {
            "valid": valid,
            "verdict": word(valid),
            "checkers": results,
            "notes": notes,
            "history": {"path": str(history), "events": event_count},
            "seconds": seconds,
            "peak_mib": peaks,
        }


def peak_mib() -> int:
    """The most memory this process has held at once so far (its resident set's high-water
    mark), MiB: read after each step, the step where it grows is where the peak was."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


@contextlib.contextmanager
def spark_failures(history: Path) -> Iterator[None]:
    """Spark's own failures while checking `history`, as the infrastructure errors they are."""
    try:
        yield
    except (PySparkException, Py4JError) as e:
        raise InfraError(f"Spark failed while checking {history}: {e}") from e


def _run(
    name: str, ops: DataFrame, params: Mapping[str, Any], own: DataFrame | None = None
) -> dict[str, Any]:
    """Run one checker, with its workload's `own` table when it takes one; parameters that do
    not fit its signature are the user's mistake."""
    checker = FEEDS[name]
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
