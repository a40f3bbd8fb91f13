"""Operations between their invocation and their completion, so that a run that ends early
(Ctrl-C, SIGTERM, an error) can still close its history well formed: every invocation gets a
completion, `info` for those the run gave up waiting for (their outcome is unknown, as Jepsen
records an operation that a crashed client left in flight).

Workers and the final reads go through one registry: `invoke` writes the invocation and notes
the operation, `complete` writes its completion unless the run has already written `info` for
it (`abandon`). Once abandoned, the registry takes no new invocation: a worker that would start
one learns that the run is over.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from core.history import HistoryWriter


class RunOver(Exception):
    """The run abandoned its operations: no new one may start."""


@dataclass
class Op:
    process: int
    f: str
    value: Any
    node: str
    workload: str
    write: bool  # as the workload declares it: recorded on the invocation


class InFlight:
    def __init__(self, history: HistoryWriter) -> None:
        self.history = history
        self.lock = threading.Lock()
        self.ops: dict[object, Op] = {}
        self.over = False

    def invoke(self, key: object, op: Op) -> None:
        """Record `op`'s invocation for the caller `key` (one operation per caller at a time)."""
        with self.lock:
            if self.over:
                raise RunOver
            self._write(op, "invoke", op.value, op.node, write=op.write)
            self.ops[key] = op

    def complete(
        self,
        key: object,
        type_: str,
        value: Any,
        node: str,
        error: str | None = None,
        lsn: int | None = None,
        warning: str | None = None,
    ) -> bool:
        """Record the completion of `key`'s operation; False if the run already gave up on it."""
        with self.lock:
            op = self.ops.pop(key, None)
            if op is None:
                return False
            self._write(op, type_, value, node, error, lsn, warning=warning)
            return True

    def abandon(self, why: str) -> int:
        """Complete every operation still in flight as `info`, and take no new one; how many."""
        with self.lock:
            self.over = True
            ops, self.ops = list(self.ops.values()), {}
            for op in ops:
                self._write(op, "info", op.value, op.node, why)
            return len(ops)

    def _write(
        self,
        op: Op,
        type_: str,
        value: Any,
        node: str,
        error: str | None = None,
        lsn: int | None = None,
        write: bool | None = None,
        warning: str | None = None,
    ) -> None:
        extra: dict[str, Any] = {"error": error} if error else {}
        if warning:
            extra["warning"] = warning
        if lsn is not None:
            extra["lsn"] = lsn
        if write is not None:
            extra["write"] = write
        self.history.append(
            process=op.process,
            type=type_,
            f=op.f,
            value=value,
            node=node,
            workload=op.workload,
            **extra,
        )
