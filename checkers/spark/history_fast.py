"""The operations table of a well-formed history, built in the driver without Spark.

A history as the harness writes it is parsed in one call (msgspec, each value kept as its raw
JSON text), paired with numpy and written with Arrow: seconds at 1M transactions, where Spark's
JSON reader takes half a minute and leaves its JVM no faster for the checkers. It takes only what
it can vouch for, so that the table is the one the detailed path (checkers/spark/history_table.py)
would build: anything unusual or wrong (a malformed line, a blank one, a broken alternation, a
shared index, a value whose text Spark would spell otherwise) returns None, and the detailed path
then builds the table or says what is wrong.
"""

from __future__ import annotations

from collections.abc import Hashable
from operator import attrgetter
from pathlib import Path
from typing import Any, NamedTuple

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from checkers.spark.json_texts import raw_texts
from core.history import EVENT_TYPES, INT64, NEMESIS, Event

_INVOKE = EVENT_TYPES.index("invoke")
_TYPE_CODES = {t: i for i, t in enumerate(EVENT_TYPES)}
# Spark keeps a value as the text its JSON reader copies token by token: whitespace dropped,
# numbers and escapes respelled. A raw text holding any of these texts may differ from that copy
# (a string may hold them too: such a history only goes the detailed way). Whitespace is dropped
# here first; for the number tests the texts are read with every digit but 0 as 1, "E" as "e",
# and "]" and "}" as ",".
_RESPELLED = (b"-0,", b"0e", b"1e")
_DECIMAL = (b"0.", b"1.")
_ESCAPES = (b"\\u", b"\\/")
_NUMBERS = bytes.maketrans(b"23456789E]}", b"11111111e,,")
_SPACE = (b" ", b"\t", b"\r")
_NEWLINE_AS_COMMA = bytes.maketrans(b"\n", b",")


# A field of another type than the event's (or a bool for an integer) fails the line.
_DECODER = msgspec.json.Decoder(list[Event])


class _Columns(NamedTuple):
    """The events field by field, in file order (texts as codes into their distinct values)."""

    index: np.ndarray
    time: np.ndarray
    process: np.ndarray  # into names: each process's text
    names: list[str]
    kind: np.ndarray  # into EVENT_TYPES
    f: np.ndarray  # into fs
    fs: list[str]
    values: pa.Array
    node: pa.Array
    error: pa.Array
    workload: pa.Array
    lsn: pa.Array
    write: pa.Array


class _Pairs(NamedTuple):
    """Each operation, in invocation order, by the positions of its events in file order."""

    invoked: np.ndarray
    completion: np.ndarray  # where has_done
    has_done: np.ndarray
    client: np.ndarray


def operations(path: Path, end: int, workload: str | None) -> tuple[pa.Table, int] | None:
    """The operations table of the history's first `end` bytes (whole lines) and its event
    count, or None when the detailed path must build it. `workload` tags the client operations
    that name none (a single-workload history written by hand)."""
    events = _decode(path, end)
    if events is None:
        return None
    fields = {name: list(map(attrgetter(name), events)) for name in Event.__struct_fields__}
    del events  # the fields hold all that is needed (half the memory of the decoded lines)
    columns = _columns(fields)
    pairs = None if columns is None else _pairs(columns)
    if columns is None or pairs is None:
        return None
    return _table(columns, pairs, workload), len(columns.index)


def _columns(fields: dict[str, list[Any]]) -> _Columns | None:
    """The fields as arrays, or None when one holds what the detailed path would not take as
    this one takes it."""
    try:
        index = np.fromiter(fields["index"], np.int64, len(fields["index"]))
        time = np.fromiter(fields["time"], np.int64, len(index))
    except OverflowError:
        return None
    ordered = np.sort(index)
    if (ordered[1:] == ordered[:-1]).any():
        return None
    processes, process = _codes(fields["process"])
    if any(isinstance(p, int) and p not in INT64 for p in processes):
        return None
    # a process is its text: 5 and "5" are one, as they are to Spark
    names = list(dict.fromkeys(map(str, processes)))
    process = np.array([names.index(str(p)) for p in processes], np.int64)[process]
    if not set(fields["type"]) <= _TYPE_CODES.keys():
        return None
    kind = np.fromiter(map(_TYPE_CODES.__getitem__, fields["type"]), np.int8, len(index))
    fs, f = _codes(fields["f"])
    values = _values(fields.pop("value"))
    if values is None:
        return None
    texts = {name: pa.array(fields[name], pa.string()) for name in ("node", "error", "workload")}
    if any(lsn is not None and lsn not in INT64 for lsn in fields["lsn"]):
        return None
    lsn = pa.array(fields["lsn"], pa.int64())
    write = pa.array(fields["write"], pa.bool_())
    return _Columns(index, time, process, names, kind, f, fs, values, **texts, lsn=lsn, write=write)


def _pairs(c: _Columns) -> _Pairs | None:
    """Each invocation with the next event of its process, its completion, and each lone
    nemesis completion; None when a client event breaks the alternation."""
    n = len(c.index)
    order = np.lexsort((c.index, c.process))  # each process's events in index order
    p, k, f = c.process[order], c.kind[order], c.f[order]
    same = p[1:] == p[:-1]
    invoke = k == _INVOKE
    follows_invoke = np.concatenate([[False], same & invoke[:-1]])
    nemesis = p == c.names.index(NEMESIS) if NEMESIS in c.names else np.zeros(n, bool)
    other_f = np.concatenate([[False], f[1:] != f[:-1]])
    # invoked while pending, completing nothing, or completing another f
    if (~nemesis & ((invoke == follows_invoke) | (~invoke & other_f))).any():
        return None
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


def _table(c: _Columns, pairs: _Pairs, workload: str | None) -> pa.Table:
    """The operations table (OP_COLUMNS of checkers/spark/history_table.py)."""
    at = pa.array(pairs.invoked)
    done = pa.array(pairs.completion, mask=~pairs.has_done)
    tagged = pc.coalesce(c.workload.take(at), c.workload.take(done))
    if workload is not None:
        tagged = pc.if_else(pa.array(pairs.client), pc.coalesce(tagged, workload), None)
    index, time = pa.array(c.index), pa.array(c.time)
    complete_time = time.take(done)
    outcome = pa.array(np.where(pairs.has_done, pairs.completion, pairs.invoked))
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
            "invoke_value": c.values.take(at),
            "value": c.values.take(outcome),
            "error": c.error.take(done),
            "latency_ns": pc.subtract(complete_time, time.take(at)),
            "lsn": c.lsn.take(done),
            "write": pc.if_else(pa.array(pairs.client), c.write.take(at), None),
        }
    )


def _decode(path: Path, end: int) -> list[Event] | None:
    """The events of the first `end` bytes, or None unless each line holds one event.

    The lines become one JSON array (each newline but the last a comma), so the decoder
    fails on a blank line, a line with two values or anything after its value, and an event
    spread over lines."""
    text = bytearray(end + 2)
    with path.open("rb") as f:
        if f.readinto(memoryview(text)[1 : end + 1]) != end:
            return None
    last_newline = end and text[end] == ord("\n")
    text = text.translate(_NEWLINE_AS_COMMA)
    text[0], text[-1] = ord("["), ord("]")
    if last_newline:
        text[end] = ord(" ")
    try:
        return _DECODER.decode(text)
    except (msgspec.DecodeError, ValueError):
        return None


def _codes(items: list[Hashable]) -> tuple[list[Any], np.ndarray]:
    """The distinct items in order of appearance, and each item's number among them."""
    distinct = list(dict.fromkeys(items))
    number = {item: i for i, item in enumerate(distinct)}
    return distinct, np.fromiter(map(number.__getitem__, items), np.int64, len(items))


def _values(raws: list[msgspec.Raw]) -> pa.Array | None:
    """The values' JSON texts as Spark would keep them, or None when one might differ."""
    listed = msgspec.json.encode(raws)  # "[" the texts, each followed by "," or "]"
    if any(space in listed for space in _SPACE):
        raws = [msgspec.Raw(msgspec.json.format(bytes(raw), indent=-1)) for raw in raws]
        listed = msgspec.json.encode(raws)
    if any(escape in listed for escape in _ESCAPES):
        return None
    numbers = listed.translate(_NUMBERS)
    respelled = _RESPELLED + (_DECIMAL if b"." in listed else ())
    if any(text in numbers for text in respelled):
        return None
    return raw_texts(raws, listed)
