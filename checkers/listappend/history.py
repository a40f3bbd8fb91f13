"""List-append transactions as the analysis sees them: plain tuples, no Spark, no JSON.

The checker is a pure function of these, so tests (and hypothesis) can hand it histories directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

INIT = "init"  # the state of a key before any append: what an empty read observes

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
            out.append((f, k, tuple(v) if isinstance(v, list) else v))
    return tuple(out)
