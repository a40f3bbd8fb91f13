"""The append workload's per-key pass as a Spark job: list-append dependency inference and the
split-brain signs, for every key in parallel.

Each client transaction is one row per micro-operation with its key (as JSON text): rows the
store wrote grouped by key when it could (checkers/spark/append_micro_ops.py), else rows Spark
explodes and then partitions and sorts by key. Spark runs the per-key analyses in its Python
workers (`mapInArrow`): checkers/listappend/keys.py (version order, ww/wr/rw edges, anomalies
without a cycle) and checkers/listappend/split_brain.py, the same functions the in-process checkers
run, for the keys where either may find a case; the usual key, where neither can, gets its edges
from checkers/listappend/columnar.py, many keys at once over arrays. The driver gets integer edge
arrays and the cases as JSON, in one job, and does the graph work. The few keys whose edges a
report explains are read again and analysed again, keeping the edges' reasons.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from checkers.json_texts import joined_array, text_objects
from checkers.listappend import Edge, columnar, explained
from checkers.listappend import split_brain as split_brain_keys
from checkers.listappend.graph import TYPES, Edges, Txns
from checkers.listappend.history import hashable
from checkers.listappend.keys import Access, analyze, paused_gc
from checkers.spark.append_micro_ops import COLUMNS, explode
from core.errors import BadInput
from core.history import NEMESIS

APPEND, SPLIT_BRAIN = "append", "split-brain"
# A key's edges come back as one row, their ends and kinds as machine integers in byte strings:
# rows of single edges (millions) cost the JVM more than the analysis that makes them.
OUT_SCHEMA = "key string, src binary, dst binary, kind binary, checker string, case string"
_BATCH = 1_024  # output rows (keys' edges, cases) per Arrow batch
_KEY_ROWS = 65_536  # rows the arrays take at a time, about


@dataclass
class KeyPass:
    """The pass's output for one operations table."""

    txns: Txns
    edges: Edges
    edge_keys: pa.Array  # the key (JSON text) of each edge
    cases: dict[str, list[dict[str, Any]]]
    rows: DataFrame  # the exploded micro-operations (a plan: read again for explanations)

    def reasons(self, rows: set[int]) -> dict[Edge, tuple[Any, ...]]:
        """The reasons of the edges of these rows' keys: those keys analysed again."""
        wanted = sorted({self.edge_keys[r].as_py() for r in rows})
        if not wanted:
            return {}
        table = self.rows.filter(F.col("key").isin(wanted)).sort("key", "txn", "pos").toArrow()
        return explained(dict(_keys(table.to_batches())))


def key_pass(ops: DataFrame, by_key: DataFrame | None = None) -> KeyPass:
    """The per-key pass over the client `txn` operations of `ops`, run once per table: the
    append and split-brain checkers read the same one. `by_key`: those operations' rows as the
    store wrote them (append_micro_ops.py), each key within one partition, when it did."""
    if _last and _last[0][0] is ops and _last[0][1] is by_key:
        return _last[0][2]
    txn_ops = ops.filter((F.col("process") != NEMESIS) & (F.col("f") == "txn"))
    rows = explode(txn_ops) if by_key is None else by_key
    # The driver builds the transactions' metadata while the pass runs (it would wait idle).
    with ThreadPoolExecutor(1, thread_name_prefix="txn-meta") as pool:
        meta = pool.submit(_meta, txn_ops)
        out = None if by_key is None else _analysed(by_key)
        if out is None or not _each_key_once(out):  # (a key across partitions: shuffled)
            out = _analysed(rows.repartition("key").sortWithinPartitions("key", "txn", "pos"))
        txns = meta.result()
    found = pc.is_valid(out.column("case"))
    table = out.filter(pc.invert(found))
    edges = Edges()
    edges.src.frombytes(_joined(table.column("src")))
    edges.dst.frombytes(_joined(table.column("dst")))
    edges.kind.frombytes(_joined(table.column("kind")))
    counts = pc.binary_length(table.column("kind")).to_numpy(zero_copy_only=False)
    keys = table.column("key").combine_chunks()
    edge_keys = keys.take(pa.array(np.repeat(np.arange(len(keys)), counts)))
    cases: dict[str, list[dict[str, Any]]] = {APPEND: [], SPLIT_BRAIN: []}
    found_cases = out.filter(found)
    for checker, case in zip(
        found_cases.column("checker").to_pylist(),
        found_cases.column("case").to_pylist(),
        strict=True,
    ):
        cases[checker].append(json.loads(case))
    result = KeyPass(txns, edges, edge_keys, cases, rows)
    _last[:] = [(ops, by_key, result)]
    return result


def _analysed(rows: DataFrame) -> pa.Table:
    """The workers' output for rows that come to each partition grouped by key, in one job
    from the table to the driver: the edges and the cases come back together."""
    return rows.mapInArrow(_analyse, OUT_SCHEMA).toArrow()


def _each_key_once(out: pa.Table) -> bool:
    """Whether every key was analysed whole: in one partition, so in one row of edges."""
    keys = out.filter(pc.is_null(out.column("case"))).column("key")
    return pc.count_distinct(keys).as_py() == len(keys)


_last: list[tuple[DataFrame, DataFrame | None, KeyPass]] = []


def _meta(txn_ops: DataFrame) -> Txns:
    """Every transaction's order facts in invocation order (sorted here: a sort in Spark would
    be two more jobs for what the driver collects anyway), as columns."""
    columns = ("invoke_index", "complete_index", "process", "type")
    table = txn_ops.select(*columns).toArrow().sort_by("invoke_index")
    complete = pc.coalesce(table.column("complete_index"), table.column("invoke_index"))
    try:
        process = pc.cast(table.column("process"), pa.int64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise BadInput(f"a txn operation's process is not a number: {e}") from e
    # a type neither ok nor info leaves a transaction out of the graph, as fail does
    codes = pc.fill_null(pc.index_in(table.column("type"), value_set=pa.array(TYPES)),
                         TYPES.index("fail"))  # fmt: skip
    return Txns(
        _int64(table.column("invoke_index")),
        _int64(complete),
        _int64(process),
        _int64(codes).astype(np.int8),
    )


def _int64(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    return np.asarray(pc.cast(column, pa.int64()).to_numpy(zero_copy_only=False), dtype=np.int64)


def _joined(column: pa.ChunkedArray) -> bytes:
    """A binary column's values one after the other (the keys' edge ends, for an `array`)."""
    return b"".join(column.to_pylist())


def _analyse(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """In a Spark worker: each key of a partition sorted by key, analysed by both checkers; the
    usual key over arrays (checkers/listappend/columnar.py), the others one by one."""
    out: dict[str, list[Any]] = {name: [] for name in ("key", "src", "dst", "kind")}
    out |= {"checker": [], "case": []}
    with paused_gc():
        for table in _whole_keys(batches):
            rows, heads = _arrays(table)
            fast = columnar.analyse(rows)
            bounds = np.searchsorted(fast.edge_key, np.arange(len(heads) + 1)).tolist()
            slow = table.filter(pa.array(fast.python[rows.key]))
            by_python = _keys(slow.to_batches(), raw_keys=True)
            for i, key_json in enumerate(table.column("key").take(pa.array(heads)).to_pylist()):
                if not fast.python[i]:
                    a, b = bounds[i], bounds[i + 1]
                    ends = (fast.src[a:b], fast.dst[a:b], fast.kind[a:b])
                    _row(out, key_json, *(e.tobytes() for e in ends))
                else:
                    _analysed_key(out, *next(by_python))
                if len(out["key"]) >= _BATCH:
                    yield _batch(out)
        if out["key"]:
            yield _batch(out)


def _analysed_key(out: dict[str, list[Any]], key_json: str, accesses: list[Access]) -> None:
    """One key analysed by keys.py and split_brain.py, its rows added to `out`."""
    key = _key(key_json)
    result = analyze(key, accesses)
    ends = np.array(result.edges, dtype=np.int64).reshape(-1, 3)
    kinds = ends[:, 2].astype(np.int8)
    _row(out, key_json, ends[:, 0].tobytes(), ends[:, 1].tobytes(), kinds.tobytes())
    for checker, cases in (
        (APPEND, result.cases),
        (SPLIT_BRAIN, split_brain_keys.analyze(key, accesses)),
    ):
        for case in cases:
            for column in ("key", "src", "dst", "kind"):
                out[column].append(None)
            out["checker"].append(checker)
            out["case"].append(json.dumps(case))


def _row(out: dict[str, list[Any]], key_json: str, src: bytes, dst: bytes, kind: bytes) -> None:
    """A key's edges: a row for every key, with or without edges (the driver counts the keys)."""
    for column, value in (("key", key_json), ("src", src), ("dst", dst), ("kind", kind)):
        out[column].append(value)
    out["checker"].append(None)
    out["case"].append(None)


def _batch(out: dict[str, list[Any]]) -> pa.RecordBatch:
    binary = ("src", "dst", "kind")
    batch = pa.RecordBatch.from_arrays(
        [pa.array(v, type=pa.binary() if n in binary else pa.string()) for n, v in out.items()],
        names=list(out),
    )
    for values in out.values():
        values.clear()
    return batch


def _whole_keys(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.Table]:
    """Tables of whole keys, about _KEY_ROWS rows each, from batches of rows sorted by key, as
    the batches arrive: a partition held whole (a million accesses) would outgrow the caches,
    and its first key would wait for its last row."""
    pending: list[pa.RecordBatch] = []
    held = 0
    for batch in batches:
        if not batch.num_rows:
            continue
        keys = batch.column("key")
        # the last key may go on in the next batch: its rows wait for it
        others = np.flatnonzero(pc.not_equal(keys, keys[-1]).to_numpy(zero_copy_only=False))
        cut = int(others[-1]) + 1 if len(others) else 0
        if cut and held + cut >= _KEY_ROWS:
            yield pa.Table.from_batches([*pending, batch.slice(0, cut)]).combine_chunks()
            pending, held = [], 0
            batch = batch.slice(cut)
        pending.append(batch)
        held += batch.num_rows
    if held:
        yield pa.Table.from_batches(pending).combine_chunks()


_INTEGER = r"^-?[0-9]{1,18}$"  # an element the arrays hold (an int64, with room to spare)
_INTEGERS = r"^\[(-?[0-9]{1,18}(,-?[0-9]{1,18})*)?\]$"  # a read's list of them, spaces taken out


def _arrays(table: pa.Table) -> tuple[columnar.Rows, np.ndarray]:
    """Whole keys' rows (sorted by key, transaction and position) as columnar.Rows, and the
    first row of each key. A row whose argument the arrays do not hold (not an integer, not a
    list of them, an unknown `f`, no start) is marked so: its key goes to keys.py."""
    n = table.num_rows
    key = table.column("key").chunk(0) if n else pa.array([], pa.string())
    new_key = np.ones(n, dtype=bool)
    if n:
        new_key[1:] = pc.fill_null(pc.not_equal(key[1:], key[:-1]), True).to_numpy(
            zero_copy_only=False
        )
    f = table.column("f")
    read = _bools(pc.equal(f, "r"))
    known_f = read | _bools(pc.equal(f, "append"))
    codes = pc.index_in(table.column("type"), value_set=pa.array(TYPES))
    typ = _int64(pc.fill_null(codes, TYPES.index("info"))).astype(np.int8)
    start = table.column("start")
    end = _int64(pc.fill_null(table.column("end"), columnar.END_UNKNOWN))
    texts = pc.replace_substring(pc.fill_null(table.column("arg"), "null"), " ", "")
    integer = _bools(pc.match_substring_regex(texts, _INTEGER))
    integers = _bools(pc.match_substring_regex(texts, _INTEGERS))
    # keys.py reads a list from a text that begins with one, and nothing from any other
    listed = read & _bools(pc.starts_with(texts, "[")) & (typ != columnar.FAIL)
    plain = known_f & _bools(pc.is_valid(start)) & np.where(read, ~listed | integers, integer)
    element = np.zeros(n, np.int64)
    element[~read & integer] = _int64(pc.cast(texts.filter(pa.array(~read & integer)), pa.int64()))
    held = listed & integers
    lists = pc.utf8_slice_codeunits(texts.filter(pa.array(held)), 1, -1)
    parts = pc.split_pattern(lists, ",")
    counts = np.where(_bools(pc.equal(lists, "")), 0, _int64(pc.list_value_length(parts)))
    length = np.full(n, columnar.NO_LIST, np.int64)
    length[held] = counts
    flat = pc.list_flatten(parts)
    values = _int64(pc.cast(flat.filter(pc.not_equal(flat, "")), pa.int64()))
    rows = columnar.Rows(
        key=np.cumsum(new_key) - 1,
        txn=_int64(table.column("txn")),
        type=typ,
        start=_int64(pc.fill_null(start, 0)),
        end=end,
        read=read,
        plain=plain,
        element=element,
        length=length,
        values=values,
    )
    return rows, np.flatnonzero(new_key)


def _bools(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return np.asarray(pc.fill_null(values, False).to_numpy(zero_copy_only=False), dtype=bool)


def _keys(
    batches: Iterator[pa.RecordBatch] | list[pa.RecordBatch], raw_keys: bool = False
) -> Iterator[tuple[Any, list[Access]]]:
    """(key, its accesses) from rows sorted by key, transaction and position; the key as JSON
    text when `raw_keys`, else parsed.

    The rows are taken column by column (Arrow to Python in bulk, the boundaries of keys and
    accesses found by Arrow and numpy); Python builds only the accesses themselves, and those
    through C-level maps (half the worker's time went into making them one by one)."""
    batches = [b for b in batches if b.num_rows]
    if not batches:
        return
    table = pa.Table.from_batches(batches).combine_chunks()
    n = table.num_rows
    column = {name: table.column(name).chunk(0) for name in COLUMNS}
    key, txn = column["key"], column["txn"].to_numpy()
    new_key = np.ones(n, dtype=bool)
    new_key[1:] = pc.fill_null(pc.not_equal(key[1:], key[:-1]), True).to_numpy(zero_copy_only=False)
    starts = np.flatnonzero(new_key | np.concatenate([[True], txn[1:] != txn[:-1]]))
    heads = pa.array(starts)
    first = [_pylist(column[name].take(heads)) for name in COLUMNS[1:8] if name != "pos"]
    ops = list(zip(_pylist(column["pos"]), _pylist(column["f"]), _values(column), strict=True))
    bounds = starts.tolist()
    grouped = map(tuple, map(ops.__getitem__, map(slice, bounds, [*bounds[1:], n])))
    accesses = list(map(_access, zip(*first, grouped, strict=True)))
    key_starts = np.searchsorted(starts, np.flatnonzero(new_key)).tolist()
    keys = key.take(pa.array(starts[key_starts])).to_pylist()
    for k, a, b in zip(keys, key_starts, [*key_starts[1:], len(accesses)], strict=True):
        yield (k if raw_keys else _key(k)), accesses[a:b]


_access = functools.partial(tuple.__new__, Access)  # an Access from its fields, made in C


def _pylist(values: pa.Array) -> list[Any]:
    """The values as a Python list, sooner than Arrow's own conversion: integers through numpy,
    texts (a few distinct ones, repeated) through their dictionary, each text made once."""
    if pa.types.is_integer(values.type) and not values.null_count:
        return values.to_numpy().tolist()
    if not pa.types.is_string(values.type) and not pa.types.is_large_string(values.type):
        return values.to_pylist()
    return text_objects(values).tolist()


def _values(column: dict[str, pa.Array]) -> list[Any]:
    """Each row's argument from its JSON text: a read's list as a tuple (None when it is no
    list), elements made hashable. The texts are joined into one JSON array, which
    msgspec reads in one call, lists as tuples (and Spark makes the texts faster than it would
    typed columns)."""
    reads = pc.equal(column["f"], "r")
    texts = pc.fill_null(column["arg"], "null")
    listed = pc.starts_with(texts, "[")
    # a read of something else than a list read nothing
    texts = pc.if_else(pc.and_(reads, pc.invert(listed)), "null", texts)
    # Spark's texts: numbers a double holds, "Infinity" a string
    values = _ARGS.decode(joined_array(texts))
    # a list in a list (appended, or read) becomes a tuple too, all the way down; an object a
    # JsonObject
    nested = pc.or_(pc.greater(pc.count_substring(texts, "["), 1), pc.match_substring(texts, "{"))
    nested = nested.to_numpy(zero_copy_only=False)
    for i in np.flatnonzero(nested):
        values[i] = hashable(values[i])
    return values


_ARGS = msgspec.json.Decoder(list[tuple | int | float | str | bool | dict | None])


def _key(text: str | None) -> Any:
    return hashable(json.loads(text)) if text is not None else None
