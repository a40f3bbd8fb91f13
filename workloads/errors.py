"""Whether a failed operation certainly did not happen (`fail`) or may have happened (`info`).

The rule that matters most: Postgres can only commit a transaction after it receives COMMIT. So an
error before COMMIT was sent is a definite failure, whatever it is (the server aborts the
transaction on any error or when the connection drops). Once COMMIT is on its way, only errors
that Postgres documents as "the transaction was rolled back" are definite; everything else —
connection lost, timeout, server shutting down, a cancelled wait for synchronous replication —
leaves the outcome unknown. A read changes nothing, so a failed read is always a definite failure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Phase = Literal["connect", "execute", "commit"]
OutcomeType = Literal["fail", "info"]

# SQLSTATEs that, raised by COMMIT itself, mean the transaction was rolled back.
_ROLLED_BACK_CLASSES = ("40", "23")  # transaction rollback; integrity (deferred constraints)
_UNKNOWN_COMPLETION = "40003"  # statement_completion_unknown: the one class-40 code that is not


@dataclass(frozen=True)
class Outcome:
    type: OutcomeType
    error: str


def sqlstate_of(exc: BaseException) -> str | None:
    """The SQLSTATE a psycopg error carries, if the server sent one."""
    return getattr(exc, "sqlstate", None)


def describe(exc: BaseException) -> str:
    """A one-line description of an error for the history's `error` field."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    state = sqlstate_of(exc)
    return f"{state}: {text}" if state else f"{type(exc).__name__}: {text}"


def classify(exc: BaseException, *, phase: Phase, read_only: bool) -> Outcome:
    """Map an exception raised while running an operation to `fail` or `info`."""
    error = describe(exc)
    if read_only:
        return Outcome("fail", error)
    if phase in ("connect", "execute"):
        return Outcome("fail", error)
    state = sqlstate_of(exc)
    if state and state != _UNKNOWN_COMPLETION and state[:2] in _ROLLED_BACK_CLASSES:
        return Outcome("fail", error)
    return Outcome("info", error)
