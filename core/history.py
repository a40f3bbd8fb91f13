"""The history's model (DESIGN.md, "The operation model"): one JSON event per line, paired into
operations. What the writer records, the decoder reads and every checker judges."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal, TypedDict

import msgspec

EVENT_TYPES = ("invoke", "ok", "fail", "info")
NEMESIS = "nemesis"
# The runner's final reads (after the heal and the settle) are made by processes numbered from
# here; a read among them may rest on that, where other reads need real-time order.
FINAL_READS_PROCESS = 10_000_000
INT64 = range(-(2**63), 2**63)  # what an index, a time or a numbered process may be
NULL = msgspec.Raw(b"null")


Int64 = Annotated[int, msgspec.Meta(ge=INT64.start, le=INT64.stop - 1)]


class Event(msgspec.Struct, gc=False, omit_defaults=True):
    """One line of the history. `write` is recorded on a client's invocation: whether the
    workload declares the operation a write (it may change the database). `value` stays its
    JSON text. Not tracked by the cycle collector, which would walk the millions of them."""

    index: Int64
    time: Int64
    process: Int64 | str
    type: Literal["invoke", "ok", "fail", "info"]
    f: str
    value: msgspec.Raw = NULL
    node: str | None = None
    error: str | None = None
    workload: str | None = None
    lsn: Int64 | None = None
    write: bool | None = None
    warning: str | None = None  # what the server warned of as the operation completed


class Op(TypedDict):
    """An invocation paired with its completion (the next event of its process), values parsed:
    what every checker's `check(ops, ...)` takes."""

    process: int | str
    workload: str | None
    f: str
    node: str | None
    type: str  # the completion's; "info" when it never completed
    invoke_index: int
    invoke_time: int
    complete_index: int | None
    complete_time: int | None
    invoke_value: Any
    value: Any
    error: str | None
    latency_ns: int | None
    lsn: int | None
    write: bool | None  # as the workload declared it; None for the nemesis
    warning: str | None  # the completion's: what the server warned of (a COMMIT cancelled)


OP_COLUMNS = tuple(Op.__annotations__)


class HistoryWriter:
    """Thread-safe appender: each event gets the next index and ns since the run started."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = path.open("a", encoding="utf-8")
        self._lock = threading.Lock()
        self._index = 0
        self._start = time.monotonic_ns()
        self.counts: Counter[str] = Counter()

    def now(self) -> int:
        """Nanoseconds since the run started: the `time` of the next event."""
        return time.monotonic_ns() - self._start

    def append(self, **event: Any) -> dict[str, Any]:
        """Write one event (index and time are filled in) and flush it to the OS at once."""
        with self._lock:
            record = {"index": self._index, "time": self.now(), **event}
            self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
            self._file.flush()
            self._index += 1
            self.counts[record["type"]] += 1
        return record

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.close()

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def has_partial_last_line(path: Path) -> bool:
    """True when the file does not end with a newline: the last write was cut off by a crash."""
    size = path.stat().st_size
    if size == 0:
        return False
    with path.open("rb") as f:
        f.seek(size - 1)
        return f.read(1) != b"\n"


# A workload's declaration of which of its operations write: (workload, f, value) → whether the
# operation may change the database (a workload of None: a history that does not say).
Writes = Callable[[str | None, str, Any], bool]
