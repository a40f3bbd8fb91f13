"""The one reader of a history: history.jsonl to the table of its operations, in Arrow.

Every checker reads that table: the plain judgments as dicts (checkers.operations), the Spark
feeds from its Parquet (checkers/spark/history_table.py). Each line is one event
(core.history.Event); an operation is an invocation paired with the next event of its process,
its completion. The lines are decoded some megabytes at a time, each piece in one call (msgspec),
and paired with numpy, so that a history of millions of events takes seconds and its events
never all exist as Python objects at once. What is wrong is said in one sentence that names
the line or the event; blank lines are passed over; a last line cut off by a crash (no newline
after it, and not JSON) is skipped with a note.

Values stay their JSON text, as the history spelled them; `checkers.operations.op_dict` parses
them back for a plain checker.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from checkers.json_texts import raw_texts
from checkers.operations import op_dict
from core.errors import BadInput
from core.history import EVENT_TYPES, INT64, NEMESIS, OP_COLUMNS, Event, Op, Writes

PARTIAL_LINE_NOTE = "the last line was cut off by a crash and was skipped"
SCHEMA = pa.schema(
    [
        ("process", pa.string()),
        ("workload", pa.string()),
        ("f", pa.string()),
        ("node", pa.string()),
        ("type", pa.string()),
        ("invoke_index", pa.int64()),
        ("invoke_time", pa.int64()),
        ("complete_index", pa.int64()),
        ("complete_time", pa.int64()),
        ("invoke_value", pa.large_string()),
        ("value", pa.large_string()),
        ("error", pa.string()),
        ("latency_ns", pa.int64()),
        ("lsn", pa.int64()),
        ("write", pa.bool_()),
        ("warning", pa.string()),
    ]
)
assert tuple(SCHEMA.names) == OP_COLUMNS
_INVOKE = EVENT_TYPES.index("invoke")
_TYPE_CODES = {t: i for i, t in enumerate(EVENT_TYPES)}
_EVENTS = msgspec.json.Decoder(list[Event])
_EVENT = msgspec.json.Decoder(Event)
_NEWLINE_AS_COMMA = bytes.maketrans(b"\n", b",")
CHUNK_BYTES = 32 * 2**20  # of whole lines decoded at a time


@dataclass(frozen=True)
class History:
    """A history read: its operations (SCHEMA, in invocation order), how many events it has,
    and what the report says of how it was read."""

    ops: pa.Table
    events: int
    notes: list[str]


def read_history(path: Path, writes: Writes | None = None) -> list[Op]:
    """The operations of a history file as plain checkers take them (values parsed), in
    invocation order; `writes` as for `read`."""
    return [op_dict(row) for row in read(path, writes=writes).ops.to_pylist()]


def read(path: Path, workload: str | None = None, writes: Writes | None = None) -> History:
    """The history at `path`. `workload` tags the client operations that name none (a
    single-workload history written by hand need not tag its events); a client operation whose
    invocation did not record `write` (a history written before it was, or by hand) is given
    the workloads' declaration, `writes`."""
    if not path.is_file():
        raise BadInput(f"history file {path} does not exist")
    end, notes = _extent(path)
    parts = []
    for events in _decoded(path, end):
        if events is None:  # not one event a line: the whole history line by line, naming
            # the first line that is no event
            events = list(_by_line(path, end))
            parts = [_columns(events)] if events else []
            break
        if events:
            parts.append(_columns(events))
    if not parts:
        raise BadInput(
            f"{path} holds no events: there is nothing to check (a run that recorded nothing, "
            "or not the history meant?)"
        )
    columns = _merged(parts)
    del parts
    ordered = np.sort(columns.index)
    if (twice := ordered[1:][ordered[1:] == ordered[:-1]]).size:
        raise BadInput(_shared_index(path, int(twice[0])))
    pairs = _pairs(columns)
    # the values' chunks held by this list alone, so that _table can let each go when done
    values = columns.values
    chunks = list(values.chunks) if isinstance(values, pa.ChunkedArray) else [values]
    del values
    columns = columns._replace(values=None)
    ops = _table(columns, pairs, workload, chunks)
    return History(fill_writes(ops, writes), len(columns.index), notes)


def _extent(path: Path) -> tuple[int, list[str]]:
    """How many bytes of the file hold whole lines: all of it, or all but a last line that a
    crash cut off (no newline after it, and not JSON)."""
    size = path.stat().st_size
    if size == 0:
        return 0, []
    with path.open("rb") as f:
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return size, []
        # read from the end: histories can be large
        chunk, position = b"", size
        while position > 0 and b"\n" not in chunk:
            step = min(65536, position)
            position -= step
            f.seek(position)
            chunk = f.read(step) + chunk
    last = chunk.rsplit(b"\n", 1)[-1]
    if _is_json(last.decode(errors="replace")):
        return size, []
    return size - len(last), [PARTIAL_LINE_NOTE]


def _decoded(path: Path, end: int) -> Iterator[list[Event] | None]:
    """The events of the first `end` bytes, CHUNK_BYTES of whole lines at a time, each chunk in
    one call (so a history of millions of events never exists as Python objects all at once);
    None, and no more, at the first chunk that is not one event a line."""
    with path.open("rb") as f:
        start = 0
        while start < end:
            stop = _line_end(f, start, end)
            f.seek(start)
            events = _decode(f.read(stop - start))
            yield events
            if events is None:
                return
            start = stop


def _line_end(f: BinaryIO, start: int, end: int) -> int:
    """Where a chunk that begins at `start` ends: after the last newline within CHUNK_BYTES
    (or after the first one beyond, for a longer line), or at `end`."""
    if end - start <= CHUNK_BYTES:
        return end
    position = start + CHUNK_BYTES
    f.seek(start)
    cut = f.read(CHUNK_BYTES).rfind(b"\n")
    while cut < 0 and position < end:  # one line longer than a chunk
        f.seek(position)
        block = f.read(min(CHUNK_BYTES, end - position))
        if (at := block.find(b"\n")) >= 0:
            return position + at + 1
        position += len(block)
    return end if cut < 0 else start + cut + 1


def _decode(chunk: bytes) -> list[Event] | None:
    """The events of whole lines in one call, or None when they are not one event a line."""
    # The lines as one JSON array (each newline but the last a comma): it fails on a blank line,
    # a line with two values or anything after its value, and an event spread over lines.
    text = bytearray(b"[") + chunk.translate(_NEWLINE_AS_COMMA) + b"]"
    if chunk.endswith(b"\n"):
        text[-2] = ord(" ")
    try:
        return _EVENTS.decode(text)
    except (msgspec.DecodeError, ValueError):
        return None


def _by_line(path: Path, end: int) -> Iterator[Event]:
    bad: list[tuple[int, str]] = []
    for number, line in _numbered(path, end):
        if not line.strip():
            continue
        try:
            yield _EVENT.decode(line)
        except (msgspec.DecodeError, ValueError):
            bad.append((number, line.decode(errors="replace")))
    if bad:
        number, line = bad[0]
        more = len(bad) - 1
        after = f" ({more} more malformed line{'s' * (more > 1)} after it)" if more else ""
        raise BadInput(
            f"{path} line {number} is not a valid event ({_problem(line)}): "
            f"fix or remove that line{after}"
        )


def _numbered(path: Path, end: int) -> Iterator[tuple[int, bytes]]:
    """(line number from 1, its bytes) of the first `end` bytes."""
    with path.open("rb") as f:
        read = 0
        for number, raw in enumerate(f, start=1):
            if read >= end:
                return
            read += len(raw)
            yield number, raw.rstrip(b"\n")


def _problem(line: str) -> str:
    """What makes one line not an event, in words."""
    try:
        event = json.loads(line)
    except ValueError:
        return "it is not JSON"
    if not isinstance(event, dict):
        return "it is not a JSON object"
    for key in ("index", "time"):
        if key not in event:
            return f"it has no {key}"
        if problem := _integer(key, event[key]):
            return problem
    process = event.get("process")
    if not isinstance(process, (int, str)) or isinstance(process, bool):
        return f"its process {json.dumps(process)} is neither an integer nor a name"
    if isinstance(process, int) and (problem := _integer("process", process)):
        return problem
    if event.get("type") not in EVENT_TYPES:
        return f"type {json.dumps(event.get('type'))} is not one of {', '.join(EVENT_TYPES)}"
    if not isinstance(event.get("f"), str):
        return f"its f {json.dumps(event.get('f'))} is not a string"
    if event.get("write") is not None and not isinstance(event["write"], bool):
        return f"its write {json.dumps(event['write'])} is neither true nor false"
    for key in ("node", "error", "workload", "warning"):
        if event.get(key) is not None and not isinstance(event[key], str):
            return f"its {key} {json.dumps(event[key])} is not a string"
    if event.get("lsn") is not None and (problem := _integer("lsn", event["lsn"])):
        return problem
    return "it is not an event"


def _integer(key: str, value: Any) -> str | None:
    """What is wrong with a field that must be a 64-bit integer."""
    if not isinstance(value, int) or isinstance(value, bool):
        return f"its {key} {json.dumps(value)} is not an integer"
    if value not in INT64:
        return f"its {key} {value} does not fit in 64 bits"
    return None


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


class _Columns(NamedTuple):
    """The events field by field, in file order (texts as codes into their distinct values)."""

    index: np.ndarray
    time: np.ndarray
    process: np.ndarray  # into names: each process's text
    names: list[str]
    kind: np.ndarray  # into EVENT_TYPES
    f: np.ndarray  # into fs
    fs: list[str]
    values: pa.Array | pa.ChunkedArray | None  # None once _table has them
    node: pa.Array
    error: pa.Array
    workload: pa.Array
    lsn: pa.Array
    write: pa.Array
    warning: pa.Array


def _columns(events: list[Event]) -> _Columns:
    """The events' fields as arrays."""
    fields = {name: list(map(attrgetter(name), events)) for name in Event.__struct_fields__}
    index = np.fromiter(fields["index"], np.int64, len(fields["index"]))
    time = np.fromiter(fields["time"], np.int64, len(index))
    processes, process = _codes(fields["process"])
    # a process is its text: 5 and "5" are one
    names = list(dict.fromkeys(map(str, processes)))
    number = {name: i for i, name in enumerate(names)}
    process = np.array([number[str(p)] for p in processes], np.int64)[process]
    kind = np.fromiter(map(_TYPE_CODES.__getitem__, fields["type"]), np.int8, len(index))
    fs, f = _codes(fields["f"])
    values = _texts(fields.pop("value"))
    texts = {
        name: pa.array(fields[name], pa.string())
        for name in ("node", "error", "workload", "warning")
    }
    lsn = pa.array(fields["lsn"], pa.int64())
    write = pa.array(fields["write"], pa.bool_())
    return _Columns(index, time, process, names, kind, f, fs, values, **texts, lsn=lsn, write=write)


def _merged(parts: list[_Columns]) -> _Columns:
    """The columns of consecutive chunks as one, each chunk's codes of processes and fs
    renumbered into the distinct values of all."""
    if len(parts) == 1:
        return parts[0]
    names = list(dict.fromkeys(n for part in parts for n in part.names))
    fs = list(dict.fromkeys(f for part in parts for f in part.fs))

    def recoded(codes: np.ndarray, local: list[str], into: list[str]) -> np.ndarray:
        number = {v: i for i, v in enumerate(into)}
        return np.array([number[v] for v in local], np.int64)[codes]

    def joined(name: str) -> pa.Array | pa.ChunkedArray:
        arrays = [getattr(part, name) for part in parts]
        # the values' texts are most of a history: kept in their chunks, not copied into one
        return pa.chunked_array(arrays) if name == "values" else pa.concat_arrays(arrays)

    return _Columns(
        index=np.concatenate([part.index for part in parts]),
        time=np.concatenate([part.time for part in parts]),
        process=np.concatenate([recoded(p.process, p.names, names) for p in parts]),
        names=names,
        kind=np.concatenate([part.kind for part in parts]),
        f=np.concatenate([recoded(p.f, p.fs, fs) for p in parts]),
        fs=fs,
        **{name: joined(name) for name in _Columns._fields if name in _ARROW_FIELDS},
    )


_ARROW_FIELDS = ("values", "node", "error", "workload", "lsn", "write", "warning")


def _texts(raws: list[msgspec.Raw]) -> pa.Array:
    """The values' JSON texts, compact (as the harness writes them), whatever the whitespace a
    history written by hand puts between their tokens."""
    listed = msgspec.json.encode(raws)  # "[" the texts, each followed by "," or "]"
    if any(space in listed for space in (b" ", b"\t", b"\r")):
        raws = [msgspec.Raw(msgspec.json.format(bytes(raw), indent=-1)) for raw in raws]
        listed = msgspec.json.encode(raws)
    return raw_texts(raws, listed)


def _shared_index(path: Path, index: int) -> str:
    """The sentence for an index that two lines share, naming them."""
    lines = [n for n, line in _numbered(path, path.stat().st_size) if _index_of(line) == index]
    return (
        f"{path} lines {lines[0]} and {lines[1]} both have index {index}: "
        "each event needs its own index"
    )


def _index_of(line: bytes) -> Any:
    try:
        return json.loads(line).get("index")
    except (ValueError, AttributeError):
        return None


def _codes(items: list[Hashable]) -> tuple[list[Any], np.ndarray]:
    """The distinct items in order of appearance, and each item's number among them."""
    distinct = list(dict.fromkeys(items))
    number = {item: i for i, item in enumerate(distinct)}
    return distinct, np.fromiter(map(number.__getitem__, items), np.int64, len(items))


class _Pairs(NamedTuple):
    """Each operation, in invocation order, by the positions of its events in file order."""

    invoked: np.ndarray
    completion: np.ndarray  # where has_done
    has_done: np.ndarray
    client: np.ndarray


def _pairs(c: _Columns) -> _Pairs:
    """Each invocation with the next event of its process, its completion, and each lone
    nemesis completion. A client event that breaks the alternation (invoked while its process's
    invocation is pending, completing nothing, or completing another f) is bad input."""
    n = len(c.index)
    order = np.lexsort((c.index, c.process))  # each process's events in index order
    p, k, f = c.process[order], c.kind[order], c.f[order]
    same = p[1:] == p[:-1]
    invoke = k == _INVOKE
    follows_invoke = np.concatenate([[False], same & invoke[:-1]])
    nemesis = p == c.names.index(NEMESIS) if NEMESIS in c.names else np.zeros(n, bool)
    other_f = np.concatenate([[False], f[1:] != f[:-1]])
    broken = ~nemesis & ((invoke == follows_invoke) | (~invoke & other_f))
    if broken.any():
        raise BadInput(_broken(c, order, np.flatnonzero(broken), invoke, follows_invoke))
    keep = np.flatnonzero(invoke | (nemesis & ~follows_invoke))
    keep = keep[np.argsort(c.index[order[keep]], kind="stable")]
    completed = np.concatenate([same & ~invoke[1:], [False]])
    # an invocation completes with the next event, a lone nemesis completion with itself
    done_at = np.where(invoke[keep], keep + 1, keep)
    return _Pairs(
        order[keep],
        order[np.minimum(done_at, n - 1)],
        np.where(invoke[keep], completed[keep], True),
        ~nemesis[keep],
    )


def _broken(
    c: _Columns,
    order: np.ndarray,
    at: np.ndarray,
    invoke: np.ndarray,
    follows_invoke: np.ndarray,
) -> str:
    """The sentence for the first event (by index) that breaks the alternation."""
    first = at[np.argmin(c.index[order[at]])]
    event, before = order[first], order[first - 1] if first else None
    if not invoke[first] and not follows_invoke[first]:
        what = "completes an operation its process never invoked"
    elif invoke[first]:
        what = f"is invoked while its process's invocation at index {c.index[before]} is pending"
    else:
        prior = c.fs[c.f[before]]
        what = f"completes f {prior!r} invoked at index {c.index[before]} under another f"
    return (
        f"history event index {c.index[event]} (process {c.names[c.process[event]]}, "
        f"{EVENT_TYPES[c.kind[event]]} {c.fs[c.f[event]]!r}) {what}: every operation is an "
        "invoke followed by its completion on the same process"
    )


def _table(c: _Columns, pairs: _Pairs, workload: str | None, values: list[Any]) -> pa.Table:
    """The operations table (SCHEMA); `values`, the chunks of the events' values, is emptied."""
    at = pa.array(pairs.invoked)
    done = pa.array(pairs.completion, mask=~pairs.has_done)
    tagged = pc.coalesce(c.workload.take(at), c.workload.take(done))
    if workload is not None:
        tagged = pc.if_else(pa.array(pairs.client), pc.coalesce(tagged, workload), None)
    index, time = pa.array(c.index), pa.array(c.time)
    complete_time = time.take(done)
    outcome = np.where(pairs.has_done, pairs.completion, pairs.invoked)
    invoke_value, value = _taken(values, pairs.invoked, outcome)
    return pa.table(
        {
            "process": pa.array(c.names).take(pa.array(c.process).take(at)),
            "workload": tagged,
            "f": pa.array(c.fs, pa.string()).take(pa.array(c.f).take(at)),
            "node": pc.coalesce(c.node.take(done), c.node.take(at)),
            "type": pc.coalesce(pa.array(EVENT_TYPES).take(pa.array(c.kind).take(done)), "info"),
            "invoke_index": index.take(at),
            "invoke_time": time.take(at),
            "complete_index": index.take(done),
            "complete_time": complete_time,
            "invoke_value": invoke_value,
            "value": value,
            "error": c.error.take(done),
            "latency_ns": pc.subtract(complete_time, time.take(at)),
            "lsn": c.lsn.take(done),
            "write": pc.if_else(pa.array(pairs.client), c.write.take(at), None),
            "warning": c.warning.take(done),
        },
        schema=SCHEMA,
    )


def _taken(values: list[Any], *positions: np.ndarray) -> list[pa.ChunkedArray]:
    """The texts at each array of positions, taken _TAKEN_ROWS operations at a time from the
    chunks that hold them; a chunk no later operation needs is let go at once, so that the
    texts, most of a history, are not held twice (for ten million transactions, gigabytes).
    Operations in invocation order need the chunks in file order, so they go one by one;
    `values` is emptied."""
    text = values[0].type
    ends = np.cumsum([len(v) for v in values])
    starts = ends - [len(v) for v in values]
    later = [np.minimum.accumulate(p[::-1])[::-1] for p in positions]  # what is still needed
    out: list[list[pa.Array]] = [[] for _ in positions]
    n = len(positions[0])
    for i in range(0, n, _TAKEN_ROWS):
        j = min(i + _TAKEN_ROWS, n)
        lo = min(int(p[i:j].min()) for p in positions)
        hi = max(int(p[i:j].max()) for p in positions)
        first, last = np.searchsorted(ends, [lo, hi], side="right").tolist()
        window = pa.chunked_array(values[first : last + 1], type=text)
        for taken, p in zip(out, positions, strict=True):
            taken.append(window.take(pa.array(p[i:j] - starts[first])).combine_chunks())
        del window
        if j < n:
            needed = min(int(rest[j]) for rest in later)
            for k in range(int(np.searchsorted(ends, needed, side="right"))):
                values[k] = None
    values.clear()
    return [pa.chunked_array(taken, type=text) for taken in out]


_TAKEN_ROWS = 1 << 20


def fill_writes(ops: pa.Table, writes: Writes | None) -> pa.Table:
    """The operations with `write` given, where the invocation did not record it, by `writes`
    (the workloads' declaration); the nemesis's operations keep none."""
    missing = pc.and_(pc.is_null(ops["write"]), pc.not_equal(ops["process"], NEMESIS))
    if writes is None or not pc.any(missing).as_py():
        return ops
    at = pc.indices_nonzero(missing)
    rows = ops.select(["workload", "f", "invoke_value"]).take(at).to_pylist()
    values = ops["write"].to_pylist()
    for i, row in zip(at.to_pylist(), rows, strict=True):
        value = None if row["invoke_value"] is None else json.loads(row["invoke_value"])
        values[i] = writes(row["workload"], row["f"], value)
    column = ops.schema.get_field_index("write")
    return ops.set_column(column, "write", pa.array(values, pa.bool_()))


def by_invocation(ops: pa.Table, indices: Sequence[int]) -> pa.Table:
    """The operations with these invoke indices."""
    return ops.filter(pc.is_in(ops["invoke_index"], pa.array(sorted(set(indices)), pa.int64())))
