"""The append workload's per-key pass as a Spark job: list-append dependency inference and the
split-brain signs, for every key in parallel.

Spark explodes each client transaction into one row per micro-operation with its key (as JSON
text), partitions and sorts the rows by key, and runs the per-key analyses in its Python workers
(`mapInArrow`): checkers/listappend/keys.py (version order, ww/wr/rw edges, anomalies without a
cycle) and checkers/listappend/split_brain.py, the same functions the in-process checkers run. The
driver gets integer edge arrays and the cases as JSON, and does the graph work. The exploded rows
stay cached, so that the few keys whose edges a report explains can be analysed again, keeping
the edges' reasons.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from checkers.listappend import Edge, explained
from checkers.listappend import split_brain as split_brain_keys
from checkers.listappend.graph import Edges
from checkers.listappend.keys import Access, analyze
from harness.errors import BadInput
from harness.history import NEMESIS

APPEND, SPLIT_BRAIN = "append", "split-brain"
OUT_SCHEMA = "src long, dst long, kind byte, key string, checker string, case string"
_BATCH = 65_536  # output rows per Arrow batch
_ROW = ("key", "txn", "pos", "type", "start", "end", "node", "error", "f", "elem", "read", "arg")


class TxnMeta(NamedTuple):
    """What the driver needs of every transaction: process and realtime order, names."""

    index: int
    complete: int
    process: int
    type: str


@dataclass
class KeyPass:
    """The pass's output for one operations table."""

    txns: list[TxnMeta]
    edges: Edges
    edge_keys: pa.ChunkedArray  # the key (JSON text) of each edge
    cases: dict[str, list[dict[str, Any]]]
    rows: DataFrame  # the exploded micro-operations, cached

    def reasons(self, rows: set[int]) -> dict[Edge, tuple[Any, ...]]:
        """The reasons of the edges of these rows' keys: those keys analysed again."""
        wanted = sorted({self.edge_keys[r].as_py() for r in rows})
        if not wanted:
            return {}
        table = self.rows.filter(F.col("key").isin(wanted)).sort("key", "txn", "pos").toArrow()
        return explained(dict(_keys(table.to_batches())))


def key_pass(ops: DataFrame) -> KeyPass:
    """The per-key pass over the client `txn` operations of `ops`, run once per table: the
    append and split-brain checkers read the same one."""
    if _last and _last[0][0] is ops:
        return _last[0][1]
    txn_ops = ops.filter((F.col("process") != NEMESIS) & (F.col("f") == "txn"))
    rows = _micro_operations(txn_ops)
    out = (
        rows.repartition("key")
        .sortWithinPartitions("key", "txn", "pos")
        .mapInArrow(_analyse, OUT_SCHEMA)
        .localCheckpoint()
    )
    table = out.filter(F.col("case").isNull()).select("src", "dst", "kind", "key").toArrow()
    edges = Edges()
    edges.src.frombytes(_raw(table.column("src"), "int64"))
    edges.dst.frombytes(_raw(table.column("dst"), "int64"))
    edges.kind.frombytes(_raw(table.column("kind"), "int8"))
    cases: dict[str, list[dict[str, Any]]] = {APPEND: [], SPLIT_BRAIN: []}
    for row in out.filter(F.col("case").isNotNull()).select("checker", "case").toLocalIterator():
        cases[row["checker"]].append(json.loads(row["case"]))
    result = KeyPass(_meta(txn_ops), edges, table.column("key"), cases, rows)
    _last[:] = [(ops, result)]
    return result


_last: list[tuple[DataFrame, KeyPass]] = []


def _micro_operations(txn_ops: DataFrame) -> DataFrame:
    """One row per well-formed micro-operation (["append", k, v] or ["r", k, values]), kept: the
    pass reads it, and so do the explanations later."""
    mops = F.expr("try_cast(parse_json(value) as array<variant>)")
    exploded = txn_ops.select(
        F.col("invoke_index").alias("txn"),
        "type",
        F.col("invoke_time").alias("start"),
        F.col("complete_time").alias("end"),
        "node",
        "error",
        F.posexplode(mops).alias("pos", "m"),
    )
    return (
        exploded.select(
            F.expr("to_json(variant_get(m, '$[1]'))").alias("key"),
            "txn",
            "pos",
            "type",
            "start",
            "end",
            "node",
            "error",
            F.expr("variant_get(m, '$[0]', 'string')").alias("f"),
            F.expr("variant_get(m, '$[2]')").alias("v"),
            F.expr("size(try_cast(m as array<variant>))").alias("n"),
        )
        .filter(F.col("f").isin("append", "r") & (F.col("n") == 3) & F.col("key").isNotNull())
        .select(*_ROW[:-3], *_typed(F.col("v"), F.expr("schema_of_variant(v)")))
        .localCheckpoint()
    )


def _typed(v: Column, schema: Column) -> list[Column]:
    """The argument as an integer or a list of integers when it is one (no parsing in Python
    then), else as JSON text; Spark's lenient casts ("5" to 5) are kept out by the schema."""
    integer = F.when(schema == "BIGINT", F.expr("variant_get(v, '$', 'bigint')"))
    integers = F.when(
        schema.isin("ARRAY<BIGINT>", "ARRAY<VOID>"), F.expr("variant_get(v, '$', 'array<bigint>')")
    )
    other = F.when(~schema.isin("BIGINT", "ARRAY<BIGINT>", "ARRAY<VOID>", "VOID"), F.to_json(v))
    return [integer.alias("elem"), integers.alias("read"), other.alias("arg")]


def _meta(txn_ops: DataFrame) -> list[TxnMeta]:
    table = (
        txn_ops.select("invoke_index", "complete_index", "process", "type")
        .orderBy("invoke_index")
        .toArrow()
    )
    index, complete, process, type_ = (table.column(i).to_pylist() for i in range(4))
    try:
        procs = [int(p) for p in process]
    except ValueError as e:
        raise BadInput(f"a txn operation's process is not a number: {e}") from e
    return [
        TxnMeta(i, i if c is None else c, p, t)
        for i, c, p, t in zip(index, complete, procs, type_, strict=True)
    ]


def _raw(column: pa.ChunkedArray, dtype: str) -> bytes:
    """An integer column's values as machine integers, for an `array`."""
    return column.combine_chunks().to_numpy(zero_copy_only=False).astype(dtype).tobytes()


def _analyse(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """In a Spark worker: each key of a partition sorted by key, analysed by both checkers."""
    out: dict[str, list[Any]] = {name: [] for name in ("src", "dst", "kind", "key", "checker")}
    out["case"] = []
    for key_json, accesses in _keys(batches, raw_keys=True):
        key = _key(key_json)
        result = analyze(key, accesses)
        n = len(result.edges)
        out["src"] += [e[0] for e in result.edges]
        out["dst"] += [e[1] for e in result.edges]
        out["kind"] += [e[2] for e in result.edges]
        out["key"] += [key_json] * n
        out["checker"] += [None] * n
        out["case"] += [None] * n
        for checker, cases in (
            (APPEND, result.cases),
            (SPLIT_BRAIN, split_brain_keys.analyze(key, accesses)),
        ):
            for case in cases:
                for column in ("src", "dst", "kind", "key"):
                    out[column].append(None)
                out["checker"].append(checker)
                out["case"].append(json.dumps(case))
        if len(out["src"]) >= _BATCH:
            yield _batch(out)
    if out["src"]:
        yield _batch(out)


def _batch(out: dict[str, list[Any]]) -> pa.RecordBatch:
    types = {"src": pa.int64(), "dst": pa.int64(), "kind": pa.int8()}
    batch = pa.RecordBatch.from_arrays(
        [pa.array(values, type=types.get(name, pa.string())) for name, values in out.items()],
        names=list(out),
    )
    for values in out.values():
        values.clear()
    return batch


def _keys(
    batches: Iterator[pa.RecordBatch] | list[pa.RecordBatch], raw_keys: bool = False
) -> Iterator[tuple[Any, list[Access]]]:
    """(key, its accesses) from rows sorted by key, transaction and position; the key as JSON
    text when `raw_keys`, else parsed."""
    key: str | None = None
    accesses: list[Access] = []
    current: list[Any] = []  # the rows of the access being gathered
    for batch in batches:
        columns = [batch.column(name).to_pylist() for name in _ROW]
        for row in zip(*columns, strict=True):
            if current and (row[0] != key or row[1] != current[0][1]):
                accesses.append(_access(current))
                current = []
            if row[0] != key:
                if accesses:
                    yield (key if raw_keys else _key(key)), accesses
                key, accesses = row[0], []
            current.append(row)
    if current:
        accesses.append(_access(current))
    if accesses:
        yield (key if raw_keys else _key(key)), accesses


def _access(rows: list[tuple[Any, ...]]) -> Access:
    _, txn, _, type_, start, end, node, error, *_ = rows[0]
    ops = tuple((row[2], row[8], _value(*row[8:])) for row in rows)
    return Access(txn, type_, start, end, node, error, ops)


def _value(f: str, elem: int | None, read: list[int] | None, arg: str | None) -> Any:
    if f == "r":
        if read is not None:
            return tuple(read)
        value = json.loads(arg) if arg is not None else None
        return tuple(value) if isinstance(value, list) else None
    if elem is not None:
        return elem
    return _hashable(json.loads(arg)) if arg is not None else None


def _key(text: str | None) -> Any:
    return _hashable(json.loads(text)) if text is not None else None


def _hashable(value: Any) -> Any:
    return tuple(_hashable(v) for v in value) if isinstance(value, list) else value
