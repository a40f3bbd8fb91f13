"""List-append transactions as the analysis sees them: plain tuples, no Spark, no JSON.

The checker is a pure function of these, so tests (and hypothesis) can hand it histories directly.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class _Init:
    """The state of a key before any append: what an empty read observes. A sentinel of its
    own, so that no element (not even the string "init") can be mistaken for it."""

    def __repr__(self) -> str:
        return "INIT"


INIT = _Init()

Mop = tuple[str, Any, Any]  # ("append", key, value) or ("r", key, [values] | None)


@dataclass(frozen=True, slots=True)
class Txn:
    index: int  # the invocation's history index: a transaction is named T<index>
    complete: int  # the completion's index (the invocation's when it never completed)
    process: int
    type: str  # ok, info or fail
    start: int  # invocation time, ns
    end: int | None  # completion time, ns; None when it never completed
    mops: tuple[Mop, ...]
    node: str | None = None  # the node the client was bound to
    error: str | None = None  # why it failed, as the client wrote it

    @property
    def name(self) -> str:
        return f"T{self.index}"


def mops_of(value: Any) -> tuple[Mop, ...]:
    """Micro-operations from a history value ([["append", k, v], ["r", k, [..]]])."""
    if not isinstance(value, list):
        return ()
    out = []
    for mop in value:
        if isinstance(mop, list) and len(mop) == 3 and mop[0] in ("append", "r"):
            f, k, v = mop
            out.append((f, hashable(k), hashable(v)))
    return tuple(out)


def hashable(value: Any) -> Any:
    """A JSON value with its lists (or tuples) as tuples and its objects as JsonObjects, all the
    way down: keys and elements are compared and looked up."""
    if isinstance(value, list | tuple):
        return tuple(map(hashable, value))
    if isinstance(value, dict):
        return JsonObject((k, hashable(v)) for k, v in value.items())
    return value


class JsonObject(dict[str, Any]):
    """A JSON object as a key or an element: hashable (never changed once made), and shown and
    written as the object it is."""

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))


def write_history(txns: list[Txn], path: Path) -> None:
    """The history file the runner would have written for these transactions (for tests and
    benchmarks): an invoke and a completion line per transaction, reads unknown at invocation,
    whether it writes (appends) on its invocation, a failed one's error on its completion."""
    events: list[tuple[int, dict[str, Any]]] = []
    for t in txns:
        events.append((t.index, invocation(t)))
        done = completion(t)
        if done is not None:  # else never completed: the invocation stands alone
            events.append((t.complete, done))
    events.sort(key=lambda e: e[0])
    with path.open("w", encoding="utf-8") as out:
        for i, event in events:
            out.write(history_line(i, event))


def invocation(t: Txn) -> dict[str, Any]:
    """A transaction's invoke event (without its index): reads unknown, appends known."""
    invoke = [[f, k, None if f == "r" else v] for f, k, v in t.mops]
    writes = any(f == "append" for f, _, _ in t.mops)
    return {"time": t.start, "type": "invoke", "process": t.process, "f": "txn",
            "value": invoke, "write": writes}  # fmt: skip


def completion(t: Txn) -> dict[str, Any] | None:
    """A transaction's completion event (without its index), None if it never completed."""
    if t.end is None:
        return None
    done = [[f, k, list(v) if isinstance(v, tuple) else v] for f, k, v in t.mops]
    extra = {name: getattr(t, name) for name in ("node", "error") if getattr(t, name)}
    return {"time": t.end, "type": t.type, "process": t.process, "f": "txn", "value": done,
            **extra}  # fmt: skip


def history_line(index: int, event: dict[str, Any]) -> str:
    return json.dumps({"index": index, **event}, separators=(",", ":")) + "\n"
