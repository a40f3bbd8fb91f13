"""The append workload's micro-operations: a row for each ["append", k, v] or ["r", k, values]
of a client transaction, the rows the per-key pass (checkers/spark/append_keys.py) analyses.

Two ways lead to the same rows. Spark explodes them from the operations table (`explode`), and
the pass then shuffles and sorts them by key: half the JVM's work in a check. The reader
(checkers/reader.py) holds the history's operations in the driver, and there
`store_by_key` writes the rows already sorted by key, no key across two Parquet row groups. Spark
never splits a row group between partitions, so the pass hands each key whole to one worker with
no shuffle and no sort (and checks that it did). It takes only the shapes for which both ways
give the same rows (every micro-operation well formed, keys integers or strings, no escape, no
object, no number of 39 digits) and leaves anything else to Spark.
"""

from __future__ import annotations

import itertools
import operator
import shutil
import uuid
from pathlib import Path
from typing import Literal

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from checkers.json_texts import joined_array, raw_texts
from checkers.listappend.keys import paused_gc
from core.history import NEMESIS

COLUMNS = ("key", "txn", "pos", "type", "start", "end", "node", "error", "f", "arg")
# Rows per row group, about: enough groups for Spark to split the table evenly between cores.
_GROUP_ROWS = 65_536

_TXNS = msgspec.json.Decoder(list[list[tuple[Literal["append", "r"], msgspec.Raw, msgspec.Raw]]])
# A key as the rows hold it: an integer or a string (the texts of both ways are the same).
_PLAIN_KEY = r'^(-?[0-9]+|"[^"]*")$'
# Texts Spark's variant may spell otherwise: an escape, an object (its members sorted), and a
# number of 39 digits or more (a double to the variant).
_RESPELLED = (b"\\", b"{")
_DIGITS_AS_ONES = bytes.maketrans(b"0123456789", b"1" * 10)
_LONG_NUMBER = b"1" * 39
_FS = pa.array(["append", "r"])  # a row's f, by whether it reads
_TXN_COLUMNS = ("invoke_index", "type", "invoke_time", "complete_time", "node", "error")
_DECODED_TXNS = 200_000  # transactions whose micro-operations are decoded at a time


def explode(txn_ops: DataFrame) -> DataFrame:
    """The rows of these client `txn` operations, as a plan: the pass reads it on its way to the
    shuffle, and the explanations read it again for their few keys (keeping it would cost the
    pass more than that second read costs the rare history with a cycle). A micro-operation of
    another shape is left out."""
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
        .select(*COLUMNS[:-1], F.to_json("v").alias("arg"))
    )


def store_by_key(ops: pa.Table, path: Path, mine: pa.Array | None = None) -> bool:
    """Write at `path` the rows of the client `txn` operations among `ops` (as the reader
    builds them; `mine`: which of them are the workload's, if not all), sorted by key,
    transaction and position, no key across two row groups; False (nothing written) when a
    transaction holds what `explode` might read otherwise. The workload's operations are picked
    by position, not filtered out: a filtered table is a copy of their values' texts."""
    client = pc.and_(pc.equal(ops["f"], "txn"), pc.not_equal(ops["process"], NEMESIS))
    if mine is not None:
        client = pc.and_(client, mine)
    # the rows by their positions: the values' texts (most of a history) are taken a piece at
    # a time, never copied whole
    txns = ops.select(_TXN_COLUMNS)
    found = _rows(ops["value"], pc.indices_nonzero(client))
    if found is None or not found[0].num_rows:  # (no rows: nothing for the pass to save)
        return False
    draft = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    draft.mkdir(parents=True)
    try:
        _write(*found, txns, draft / "part-00000.parquet")
        shutil.rmtree(path, ignore_errors=True)
        draft.rename(path)
    finally:
        shutil.rmtree(draft, ignore_errors=True)
    return True


def _rows(values: pa.ChunkedArray, at: pa.Array) -> tuple[pa.Table, pa.Array, np.ndarray] | None:
    """The micro-operations of the transactions at these positions, in their order, each with
    its transaction's position (`at`: its other columns are taken as each row group is written),
    the order that sorts them by key, transaction and position, and where in that order each
    key but the first begins (from the keys' codes: the keys' texts sorted were a copy of them
    all); or None. The sort's columns are as narrow as they can be."""
    pieces = []
    for start in range(0, len(at), _DECODED_TXNS):
        piece = _micro_ops(values.take(at.slice(start, _DECODED_TXNS)).combine_chunks())
        if piece is None:
            return None
        pieces.append(piece)
    if not pieces:
        return None
    counts = np.concatenate([p[0] for p in pieces])
    reads = np.concatenate([p[1] for p in pieces])
    key_texts = pa.concat_arrays([p[2] for p in pieces])
    arg_texts = pa.concat_arrays([p[3] for p in pieces])
    del pieces
    if not pc.all(pc.match_substring_regex(key_texts, _PLAIN_KEY), min_count=0).as_py():
        return None
    narrow = np.int32 if len(counts) < 2**31 and len(reads) < 2**31 else np.int64
    txn = np.repeat(np.arange(len(counts), dtype=narrow), counts)
    pos = np.arange(len(txn), dtype=narrow) - np.repeat(
        (np.cumsum(counts) - counts).astype(narrow), counts
    )
    codes = pc.dictionary_encode(key_texts).indices.to_numpy()
    order = np.lexsort((pos, txn, codes))
    ordered = codes[order]
    del codes
    begins = np.flatnonzero(ordered[1:] != ordered[:-1]) + 1
    del ordered
    rows = pa.table(
        {
            "key": key_texts,
            "at": at.take(pa.array(txn)),
            "pos": pos,
            "f": pa.DictionaryArray.from_arrays(reads, _FS),
            "arg": arg_texts,
        }
    )
    return rows, pa.array(order), begins


def _micro_ops(values: pa.Array) -> tuple[np.ndarray, np.ndarray, pa.Array, pa.Array] | None:
    """Some transactions' micro-operations: how many each has, which read, their keys and
    arguments as JSON texts; None when one holds what `explode` might read otherwise. Taken
    _DECODED_TXNS transactions at a time, so that a history's micro-operations never all exist
    as Python objects at once."""
    text = joined_array(values)
    if any(t in text for t in _RESPELLED) or _LONG_NUMBER in text.translate(_DIGITS_AS_ONES):
        return None
    with paused_gc():  # many small objects, none of them garbage
        try:
            decoded = _TXNS.decode(text)
        except msgspec.ValidationError:
            return None
        counts = np.fromiter(map(len, decoded), np.int64, len(decoded))
        flat = list(itertools.chain.from_iterable(decoded))
        del decoded
        fs, keys, args = (list(map(operator.itemgetter(i), flat)) for i in range(3))
        del flat
        reads = np.fromiter(map("r".__eq__, fs), np.int8, len(fs))
        return counts, reads, raw_texts(keys), raw_texts(args)


def _write(rows: pa.Table, order: pa.Array, begins: np.ndarray, txns: pa.Table, path: Path) -> None:
    """The rows in this order as Parquet, a row group about every _GROUP_ROWS rows, cut where a
    key begins (`begins`, positions in the order), each row's transaction columns taken from
    `txns` at its `at`. Each group is sorted and completed as it is written: the rows sorted
    all at once were a second copy of their texts, and the transactions' columns for every row
    another gigabyte, for ten million transactions."""
    n = rows.num_rows
    after = np.searchsorted(begins, np.arange(_GROUP_ROWS, n, _GROUP_ROWS))
    cuts = np.unique(begins[after[after < len(begins)]]).tolist()
    # the few distinct texts of these columns as their codes, one dictionary for every group
    coded = {c: pc.dictionary_encode(txns[c]).combine_chunks() for c in ("type", "node", "error")}
    writer: pq.ParquetWriter | None = None
    try:
        for a, b in itertools.pairwise([0, *cuts, n]):
            part = rows.take(order.slice(a, b - a))
            at = part["at"]
            group = pa.table(
                {
                    "key": part["key"],
                    "txn": txns["invoke_index"].take(at),
                    "pos": part["pos"],
                    "type": coded["type"].take(at),
                    "start": txns["invoke_time"].take(at),
                    "end": txns["complete_time"].take(at),
                    "node": coded["node"].take(at),
                    "error": coded["error"].take(at),
                    "f": part["f"],
                    "arg": part["arg"],
                }
            )
            if writer is None:
                dictionaries = ["type", "node", "error", "f"]
                writer = pq.ParquetWriter(
                    path, group.schema, use_dictionary=dictionaries, store_schema=False
                )
            writer.write_table(group, row_group_size=b - a)
    finally:
        if writer is not None:
            writer.close()
