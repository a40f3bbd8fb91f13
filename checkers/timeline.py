"""The report's timeline of operations by process, from the operations table, for any size.

Every operation goes into the page, none is capped: a skeleton of compact arrays (invocation time,
duration, lane, outcome) that the page aggregates into (lane, time bucket, outcome) counts for
whatever window is on screen, and the details a hover shows (f, value, node, process, index,
error) in chunks that the page decompresses only when the window holds few enough operations to
draw one by one. Both are gzip, base64 in the page (the browser's DecompressionStream reads them,
offline). The table is read through Arrow on the driver: the page needs every operation anyway, so
a Spark job would only add a shuffle before the same collect.
"""

from __future__ import annotations

import base64
import gzip
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from harness.history import NEMESIS

CHUNK = 5_000  # operations per details chunk: the page decodes a few for a zoomed-in window
VALUE_CHARS = 80  # a value longer than this shows its start (history.jsonl has it whole)
ERROR_CHARS = 160
FINAL_PROCESS = 10_000_000  # the runner's final reads start at this process number
OWN_LANES = 128  # a history with at most this many processes gives each its own lane
TYPES = ("ok", "fail", "info")
PENDING = 0xFFFFFFFF  # duration of an operation that never completed: it lasts to the end
_NS_PER_US = 1_000
_COMPACT: dict[str, Any] = {"separators": (",", ":")}
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
    skeleton = dataset.to_table(columns=_COLUMNS)
    if skeleton.num_rows == 0:
        return None
    values = pa.concat_arrays(
        [_texts(batch) for batch in dataset.to_batches(columns=["value", "invoke_value", "error"])]
    )
    start = skeleton["invoke_time"].to_numpy(zero_copy_only=False).astype(np.int64)
    order = np.lexsort((skeleton["invoke_index"].to_numpy(zero_copy_only=False), start))
    skeleton = skeleton.take(order)
    values = values.take(pa.array(order))
    start = start[order]
    process_names, processes = _coded(skeleton["process"])
    lanes, labels = _lanes(process_names, processes, concurrency)
    f_names, fs = _coded(skeleton["f"])
    node_names, nodes = _coded(skeleton["node"])
    t0 = int(start[0])
    complete = skeleton["complete_time"].to_numpy(zero_copy_only=False)
    ends = np.where(np.isnan(complete.astype(np.float64)), start, complete).astype(np.int64)
    t1 = int(max(ends.max(), start.max()))
    invoke_index = skeleton["invoke_index"].to_numpy(zero_copy_only=False).astype(np.int64)
    completes = skeleton["complete_index"].to_numpy(zero_copy_only=False).astype(np.float64)
    after_invoke = np.where(np.isnan(completes), 0, completes - invoke_index).astype(np.int64)
    page = {
        "count": skeleton.num_rows,
        "t0": t0 / 1e9,
        "t1": t1 / 1e9,
        "lanes": labels,
        "types": list(TYPES),
        "processes": [_number_or_text(p) for p in process_names],
        "fs": f_names,
        "nodes": node_names,
        "chunk": CHUNK,
        "skeleton": _skeleton(start, complete, lanes, skeleton["type"], t0),
    }
    columns = {"p": processes, "f": fs, "n": nodes, "c": after_invoke, "i": invoke_index}
    page["details"] = _details(columns, values)
    # The nemesis's operations are drawn at every zoom: their details are at hand, not in chunks.
    faults = np.flatnonzero(np.array([name == NEMESIS for name in process_names])[processes])
    page["nemesis"] = _records(columns, values, faults) | {"pos": faults.tolist()}
    by_index = np.argsort(invoke_index, kind="stable")
    return Timeline(page, invoke_index[by_index], by_index)


def _texts(batch: pa.RecordBatch) -> pa.StructArray:
    """Each operation's value (its completion's, else its invocation's) and error, shortened."""
    value = pc.coalesce(batch["value"], batch["invoke_value"], pa.scalar("null"))
    error = pc.coalesce(batch["error"], pa.scalar(""))
    return pa.StructArray.from_arrays(
        [_shorten(value, VALUE_CHARS), _shorten(error, ERROR_CHARS)], names=["value", "error"]
    )


def _shorten(texts: pa.Array, limit: int) -> pa.Array:
    long = pc.greater(pc.utf8_length(texts), limit)
    cut = pc.binary_join_element_wise(pc.utf8_slice_codeunits(texts, 0, limit), "…", "")
    return pc.if_else(long, cut, texts)


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
        elif concurrency and number is not None and 0 <= number < FINAL_PROCESS:
            lane_of.append(f"worker {number % concurrency}")
        elif concurrency and number is not None and number >= FINAL_PROCESS:
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
) -> str:
    """Invocation times (µs since the first, as deltas), durations (µs), lanes and outcomes as one
    gzip of little-endian unsigned arrays of 4, 4, 2 and 1 bytes per operation, in that order,
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
    data = b"".join(_planes(np.asarray(a).astype(kind)) for a, kind in arrays)
    return _packed(data)


def _details(columns: dict[str, np.ndarray], texts: pa.StructArray) -> list[str]:
    """What a hover shows, as _records of CHUNK operations at a time, each gzipped. The chunks
    are compressed in parallel (zlib lets go of the GIL)."""
    chunks = [
        json.dumps(_records(columns, texts, np.arange(lo, min(lo + CHUNK, len(texts)))), **_COMPACT)
        for lo in range(0, len(texts), CHUNK)
    ]
    with ThreadPoolExecutor() as pool:
        return list(pool.map(_packed, (chunk.encode() for chunk in chunks)))


def _records(columns: dict[str, np.ndarray], texts: pa.StructArray, rows: np.ndarray) -> dict:
    """These operations' details as a JSON object of columns: the numbers into the page's lists
    of processes (p), fs (f) and nodes (n, -1 for none), the completion index as the difference
    from the invoke index (c), the invoke index as the difference from the previous one (i),
    value (v) and error (e)."""
    records = {key: column[rows].tolist() for key, column in columns.items()}
    records["i"] = np.diff(columns["i"][rows], prepend=0).tolist()
    taken = texts.take(pa.array(rows, type=pa.int64()))
    return records | {"v": taken.field("value").to_pylist(), "e": taken.field("error").to_pylist()}


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
    return base64.b64encode(gzip.compress(data, compresslevel=6, mtime=0)).decode("ascii")
