"""The report's timeline of operations by process, from the operations table, for any size.

Every operation goes into the page, none is capped: a skeleton of compact arrays (invocation time,
duration, lane, outcome) that the page aggregates into (lane, time bucket, outcome) counts for
whatever window is on screen, and the details a hover shows (f, value, node, process, index,
error) in chunks that the page decompresses only when the window holds few enough operations to
draw one by one. Both are gzip, base64 in the page (the browser's DecompressionStream reads them,
offline). The table is read through Arrow on the driver: the page needs every operation anyway, so
a Spark job would only add a shuffle before the same collect. The details' JSON is assembled by
Arrow a column at a time, not through a Python object per value: a million operations would
otherwise spend over a second in to_pylist and json.dumps.
"""

from __future__ import annotations

import base64
import gzip
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from core.history import FINAL_READS_PROCESS, NEMESIS

CHUNK = 5_000  # operations per details chunk: the page decodes a few for a zoomed-in window
GROUP = 100  # chunks whose JSON is made at a time
VALUE_CHARS = 80  # a value longer than this shows its start (history.jsonl has it whole)
ERROR_CHARS = 160
OWN_LANES = 128  # a history with at most this many processes gives each its own lane
TYPES = ("ok", "fail", "info")
PENDING = 0xFFFFFFFF  # duration of an operation that never completed: it lasts to the end
# gzip level: on a million operations 4 compresses 3 times as fast as 6 for a page 9% larger;
# 5 is 1.5 times as slow as 4 for 3% larger, 1 to 3 make it 20 to 35% larger.
GZIP_LEVEL = 4
_NS_PER_US = 1_000
_COLUMNS = [
    "process",
    "f",
    "node",
    "type",
    "invoke_index",
    "complete_index",
    "invoke_time",
    "complete_time",
]


@dataclass
class Timeline:
    """The page's data (`page`) and where each invoke index sits in its arrays (`position`)."""

    page: dict[str, Any]
    invoke_index: np.ndarray  # sorted invoke indices …
    order: np.ndarray  # … and the position of each in the page's arrays

    def positions(self, indices: list[int]) -> list[int]:
        """Positions in the page's arrays of the operations with these invoke indices."""
        wanted = np.asarray(indices, dtype=np.int64)
        at = np.searchsorted(self.invoke_index, wanted)
        at = np.minimum(at, len(self.invoke_index) - 1)
        found = self.invoke_index[at] == wanted
        return sorted(int(p) for p in self.order[at[found]])


def build(table: Path, concurrency: int | None = None) -> Timeline | None:
    """The timeline of the operations table at `table`; None when there is no table or no op."""
    if not table.exists():
        return None
    dataset = ds.dataset(str(table), format="parquet")
    ops = dataset.to_table(columns=_COLUMNS)
    if ops.num_rows == 0:
        return None
    start = ops["invoke_time"].to_numpy(zero_copy_only=False).astype(np.int64)
    by_time = np.lexsort((ops["invoke_index"].to_numpy(zero_copy_only=False), start))
    # the reader's table is in this order already: its texts are then read as they come
    order = by_time if np.any(by_time[1:] < by_time[:-1]) else None
    if order is not None:
        ops = ops.take(order)
        start = start[order]
    process_names, processes = _coded(ops["process"])
    lanes, labels = _lanes(process_names, processes, concurrency)
    f_names, fs = _coded(ops["f"])
    node_names, nodes = _coded(ops["node"])
    t0 = int(start[0])
    complete = ops["complete_time"].to_numpy(zero_copy_only=False)
    ends = np.where(np.isnan(complete.astype(np.float64)), start, complete).astype(np.int64)
    t1 = int(max(ends.max(), start.max()))
    invoke_index = ops["invoke_index"].to_numpy(zero_copy_only=False).astype(np.int64)
    completes = ops["complete_index"].to_numpy(zero_copy_only=False).astype(np.float64)
    after_invoke = np.where(np.isnan(completes), 0, completes - invoke_index).astype(np.int64)
    columns = {"p": processes, "f": fs, "n": nodes, "c": after_invoke, "i": invoke_index}

    with ThreadPoolExecutor() as pool:  # zlib lets go of the GIL: these compress in parallel
        skeleton = pool.submit(_packed, _skeleton(start, complete, lanes, ops["type"], t0))
        details: list[str] = []
        # a group of chunks at a time, their texts read as they are reached: every chunk's
        # JSON at once, or every text, was gigabytes for ten million operations
        at = 0
        for texts in _texts(dataset, order, CHUNK * GROUP):
            rows = slice(at, at + texts.num_rows)
            at = rows.stop
            group = _details({k: c[rows] for k, c in columns.items()}, _shown(texts))
            details += pool.map(_packed, group)
    page = {
        "count": ops.num_rows,
        "t0": t0 / 1e9,
        "t1": t1 / 1e9,
        "lanes": labels,
        "types": list(TYPES),
        "processes": [_number_or_text(p) for p in process_names],
        "fs": f_names,
        "nodes": node_names,
        "chunk": CHUNK,
        "skeleton": skeleton.result(),
        "details": details,
    }
    # The nemesis's operations are drawn at every zoom: their details are at hand, not in chunks.
    faults = np.flatnonzero(np.array([name == NEMESIS for name in process_names])[processes])
    taken = dataset.take(faults if order is None else order[faults], columns=_TEXTS)
    shown = _shown(_falling_back(taken))
    page["nemesis"] = _records(columns, shown, faults) | {"pos": faults.tolist()}
    by_index = np.argsort(invoke_index, kind="stable")
    return Timeline(page, invoke_index[by_index], by_index)


_TEXTS = ["value", "error", "invoke_value"]


def _texts(dataset: ds.Dataset, order: np.ndarray | None, size: int) -> Iterator[pa.Table]:
    """The operations' value and error, `size` rows at a time in the page's order: read batch
    by batch where the table is in that order (`order` None), else whole and taken in it."""
    if order is not None:
        whole = _falling_back(dataset.to_table(columns=_TEXTS)).take(order)
        for at in range(0, whole.num_rows, size):
            yield whole.slice(at, size)
        return
    held: list[pa.RecordBatch] = []
    count = read = 0  # rows held, rows read
    for batch in dataset.to_batches(columns=["value", "error"]):
        if batch["value"].null_count:  # the invocations' values read only where needed
            rows = np.arange(read, read + batch.num_rows)
            invoked = dataset.take(rows, columns=["invoke_value"])["invoke_value"]
            value = pc.coalesce(batch["value"], invoked.combine_chunks())
            batch = pa.record_batch({"value": value, "error": batch["error"]})
        held.append(batch)
        count += batch.num_rows
        read += batch.num_rows
        while count >= size:
            table = pa.Table.from_batches(held)
            yield table.slice(0, size)
            held, count = table.slice(size).to_batches(), count - size
    if count:
        yield pa.Table.from_batches(held)


def _falling_back(texts: pa.Table) -> pa.Table:
    """Each operation's value (its completion's, else its invocation's: the reader's table
    has that already, so this is for older tables) and error."""
    value = texts["value"]
    if value.null_count:
        value = pc.coalesce(value, texts["invoke_value"])
    return pa.table({"value": value, "error": texts["error"]})


def _shown(texts: pa.Table) -> dict[str, pa.Array]:
    """The texts a hover shows, cut."""
    return {"v": _shorten(texts["value"], VALUE_CHARS, "null"),
            "e": _shorten(texts["error"], ERROR_CHARS, "")}  # fmt: skip


def _shorten(texts: pa.ChunkedArray, limit: int, null: str) -> pa.Array:
    """The texts (`null` for a null) cut to their first `limit` characters, with "…" when longer:
    a cut with fewer bytes than its text is one that dropped some. Large strings (64-bit offsets),
    so that even many gigabytes of text, and the details joined from it, fit in one array."""
    whole = pc.fill_null(texts.cast(pa.large_string()), _large(null)).combine_chunks()
    cut = pc.utf8_slice_codeunits(whole, 0, limit)  # code points, despite the name
    longer = pc.less(pc.binary_length(cut), pc.binary_length(whole))
    return pc.binary_join_element_wise(cut, pc.if_else(longer, _large("…"), _large("")), _large(""))


def _large(text: str) -> pa.Scalar:
    """A text as Arrow's large string, which its kernels want alongside large string arrays."""
    return pa.scalar(text, type=pa.large_string())


def _lanes(
    names: list[str], processes: np.ndarray, concurrency: int | None
) -> tuple[np.ndarray, list[str]]:
    """A lane per worker, as Jepsen draws them: a worker whose operation ended unknown goes on
    as a new process (its number plus the concurrency), on the same lane. The nemesis has the
    first lane, the final reads the last. A history without its concurrency gives each process
    its own lane when it has few, else infers the workers from the processes that start it.
    `names` are the distinct processes, `processes` each operation's number into them."""
    if concurrency is None and len(names) > OWN_LANES:
        concurrency = _inferred_concurrency(names, processes)
    lane_of: list[str] = []
    for name in names:
        number = int(name) if name.lstrip("-").isdigit() else None
        if name == NEMESIS:
            lane_of.append(NEMESIS)
        elif concurrency and number is not None and 0 <= number < FINAL_READS_PROCESS:
            lane_of.append(f"worker {number % concurrency}")
        elif concurrency and number is not None and number >= FINAL_READS_PROCESS:
            lane_of.append("final reads")
        else:
            lane_of.append(f"process {name}")
    labels = sorted(set(lane_of), key=_lane_key)
    lane_number = np.array([labels.index(label) for label in lane_of], dtype=np.uint16)
    return lane_number[processes], labels


def _inferred_concurrency(names: list[str], processes: np.ndarray) -> int:
    """How many workers a history had: the distinct client processes before any of them
    recurs (operations are in invocation order here)."""
    seen: set[int] = set()
    for code in processes:
        if names[code] == NEMESIS:
            continue
        if code in seen:
            break
        seen.add(int(code))
    return max(1, len(seen))


def _process_key(name: str) -> tuple[int, int, str]:
    if name == NEMESIS:
        return (0, 0, "")
    if name.lstrip("-").isdigit():
        return (1, int(name), "")
    return (2, 0, name)


def _lane_key(label: str) -> tuple[int, int, str]:
    kind, _, rest = label.partition(" ")
    rank = {NEMESIS: 0, "worker": 1, "process": 2, "final": 3}.get(kind, 2)
    return (rank, int(rest) if rest.lstrip("-").isdigit() else 0, rest)


def _skeleton(
    start: np.ndarray, complete: np.ndarray, lanes: np.ndarray, types: pa.Array, t0: int
) -> bytes:
    """Invocation times (µs since the first, as deltas), durations (µs), lanes and outcomes as
    little-endian unsigned arrays of 4, 4, 2 and 1 bytes per operation, in that order,
    each stored byte plane by byte plane (all low bytes, then the next ones…): the high bytes
    are nearly all zero, which gzip then makes nearly nothing of."""
    micros = (start - t0) // _NS_PER_US
    deltas = np.diff(micros, prepend=0).clip(0, PENDING - 1)
    done = ~np.isnan(complete.astype(np.float64))
    took = np.where(done, (np.nan_to_num(complete.astype(np.float64)) - start) // _NS_PER_US, 0)
    durations = np.where(done, took.clip(0, PENDING - 1), PENDING)
    kinds = np.full(len(start), TYPES.index("info"), dtype=np.uint8)
    for code, name in enumerate(TYPES):
        kinds[pc.equal(types, name).to_numpy(zero_copy_only=False)] = code
    arrays = [(deltas, "<u4"), (durations, "<u4"), (lanes, "<u2"), (kinds, "u1")]
    return b"".join(_planes(np.asarray(a).astype(kind)) for a, kind in arrays)


def _details(columns: dict[str, np.ndarray], texts: dict[str, pa.Array]) -> list[bytes]:
    """What a hover shows, as the JSON of _records of CHUNK operations at a time. Arrow writes
    each column's list for every chunk at once (numbers cast to text, texts escaped, either
    joined within each chunk), then each chunk's object from those lists."""
    count = len(texts["v"])
    firsts = np.arange(0, count, CHUNK)
    bounds = pa.array(np.append(firsts, count))
    steps = np.diff(columns["i"], prepend=0)
    steps[firsts] = columns["i"][firsts]  # each chunk's first invoke index is whole
    numbers = columns | {"i": steps}
    lists = [(key, pc.cast(pa.array(n), pa.large_string()), "") for key, n in numbers.items()]
    lists += [(key, _json_escaped(text), '"') for key, text in texts.items()]
    pieces: list[pa.Scalar | pa.Array] = []
    for key, items, quote in lists:
        chunked = pa.LargeListArray.from_arrays(bounds, items)  # each chunk's items
        opening = ("," if pieces else "{") + f'"{key}":[{quote}'
        separator, closing = _large(f"{quote},{quote}"), _large(f"{quote}]")
        pieces += [_large(opening), pc.binary_join(chunked, separator), closing]
    chunks = pc.binary_join_element_wise(*pieces, _large("}"), _large(""))
    return chunks.cast(pa.large_binary()).to_pylist()


def _json_escaped(texts: pa.Array) -> pa.Array:
    """The texts as the inside of JSON strings: backslashes, quotes and control characters
    escaped, by Arrow a character at a time. A control character is rare, so only those found
    in the texts' bytes (UTF-8 uses none of 0 to 31 within a longer character) get a pass."""
    escaped = pc.replace_substring(texts, "\\", "\\\\")
    escaped = pc.replace_substring(escaped, '"', '\\"')
    data = texts.buffers()[2]
    found = np.frombuffer(data, dtype=np.uint8) if data is not None else np.empty(0, np.uint8)
    for code in np.unique(found[found < 0x20]).tolist():
        escaped = pc.replace_substring(escaped, chr(code), json.dumps(chr(code))[1:-1])
    return escaped


def _records(columns: dict[str, np.ndarray], texts: dict[str, pa.Array], rows: np.ndarray) -> dict:
    """These operations' details (`texts`: theirs alone) as a JSON object of columns: the
    numbers into the page's lists of processes (p), fs (f) and nodes (n, -1 for none), the
    completion index as the difference from the invoke index (c), the invoke index as the
    difference from the previous one (i), value (v) and error (e)."""
    records = {key: column[rows].tolist() for key, column in columns.items()}
    records["i"] = np.diff(columns["i"][rows], prepend=0).tolist()
    return records | {key: text.to_pylist() for key, text in texts.items()}


def _planes(array: np.ndarray) -> bytes:
    """The array's bytes plane by plane: every element's first byte, then every second one…"""
    return array.view(np.uint8).reshape(len(array), array.itemsize).T.tobytes()


def _coded(column: pa.ChunkedArray) -> tuple[list[Any], np.ndarray]:
    """The column's distinct values, and each row's number into them (-1 for a null)."""
    encoded = pc.dictionary_encode(column.combine_chunks())
    codes = pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False)
    return encoded.dictionary.to_pylist(), codes.astype(np.int64)


def _number_or_text(process: str) -> int | str:
    return int(process) if process.lstrip("-").isdigit() else process


def _packed(data: bytes) -> str:
    return base64.b64encode(gzip.compress(data, compresslevel=GZIP_LEVEL, mtime=0)).decode("ascii")
