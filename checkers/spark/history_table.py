"""The operations table as Spark reads it: the one reader's table (checkers/reader.py) stored as
Parquet beside the run, for the checkers' feeds to read; and the few operations a feed turns back
into plain dicts (the nemesis's, those an anomaly names).

Values stay JSON text in the table (Parquet-friendly; each checker parses the shape it expects).
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from checkers import reader
from checkers.json_texts import text_objects
from checkers.operations import Columns, op_dict
from core.history import NEMESIS, OP_COLUMNS, Writes

# Small row groups: set reads are large values, and readers buffer a whole row group.
ROW_GROUP_BYTES = 16 * 1024 * 1024


def store_operations(
    path: Path,
    table: Path,
    workload: str | None = None,
    also: Callable[[pa.Table], None] | None = None,
    writes: Writes | None = None,
) -> tuple[int, list[str]]:
    """Write the history's operations table at `table` (Parquet, replacing it): (events, notes).

    As `checkers.reader.read` reads it (`workload` and `writes` as there). Nothing is left
    behind when the history is bad: the table is written beside its place and renamed into it.
    `also` gets the table as Arrow (to build more tables from it while it is at hand), once it
    is written and without the invocations' values: the tables built from it read what the
    operations returned, and those texts let go are a gigabyte of ten million transactions."""
    history = reader.read(path, workload, writes)
    events, notes, ops = history.events, history.notes, history.ops
    del history
    created = next((d for d in reversed(table.parents) if not d.exists()), None)
    table.parent.mkdir(parents=True, exist_ok=True)
    draft = table.with_name(f".{table.name}.{uuid.uuid4().hex}")
    try:
        draft.mkdir()
        rows = ROW_GROUP_BYTES * ops.num_rows // max(ops.nbytes, 1)
        pq.write_table(
            ops,
            draft / "part-00000.parquet",
            row_group_size=max(rows, 1),
            use_dictionary=["process", "workload", "f", "node", "type", "error"],
            store_schema=False,
        )
        if also is not None:
            ops = ops.drop_columns(["invoke_value"])
            also(ops)
    except BaseException:
        shutil.rmtree(created or draft, ignore_errors=True)
        raise
    shutil.rmtree(table, ignore_errors=True)
    draft.rename(table)
    return events, notes


def columns_of(ops: DataFrame) -> Columns:
    """The operations' columns, as checkers.operations.Columns holds them. The checkers that
    read every operation (stats, availability) read the same table one after the other: the
    last table's columns are kept for the next (a million operations take seconds to collect)."""
    if _columns and _columns[0][0] is ops:
        return _columns[0][1]
    table = ops.select(*Columns.NAMES).toArrow()

    def column(name: str, empty: Any = None) -> np.ndarray:
        data = table[name]
        if empty is not None:
            data = pc.fill_null(data, empty)
        if pa.types.is_string(data.type) or pa.types.is_large_string(data.type):
            return text_objects(data)
        return data.to_numpy(zero_copy_only=False)

    process = column("process")
    columns = Columns(
        client=process != NEMESIS,
        process=process,
        workload=column("workload"),
        f=column("f"),
        type=column("type"),
        invoke_index=column("invoke_index").astype(np.int64),
        invoke_time=column("invoke_time").astype(np.int64),
        done=pc.is_valid(table["complete_time"]).to_numpy(zero_copy_only=False),
        complete_time=column("complete_time", 0).astype(np.int64),
        latency_ns=column("latency_ns", 0).astype(np.int64),
        write=column("write", False).astype(bool) & (process != NEMESIS),
    )
    _columns[:] = [(ops, columns)]
    return columns


_columns: list[tuple[DataFrame, Columns]] = []


def forget_columns() -> None:
    """Let go of the kept columns: the checkers that share them are done (a large history's
    columns are gigabytes, which the report would otherwise build beside)."""
    _columns.clear()


def nemesis_ops(ops: DataFrame) -> list[dict[str, Any]]:
    """The nemesis's operations, as plain operations (two per fault: few)."""
    rows = ops.filter(F.col("process") == NEMESIS).select(*OP_COLUMNS).toArrow().to_pylist()
    return [op_dict(row) for row in rows]


def op_dicts(ops: DataFrame, indices: Iterable[int]) -> dict[int, dict[str, Any]]:
    """The operations with these invoke indices as dicts, values parsed: for anomaly reports."""
    wanted = sorted(set(indices))
    if not wanted:
        return {}
    rows = ops.filter(F.col("invoke_index").isin(wanted)).select(*OP_COLUMNS).collect()
    return {row["invoke_index"]: op_dict(row.asDict()) for row in rows}
