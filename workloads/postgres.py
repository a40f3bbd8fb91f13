"""One logical client's connection to a Postgres endpoint, and how an operation is run on it.

Each operation is one transaction at the chosen isolation level. A watchdog bounds how long an
operation may take: when it fires it shuts the socket down (a cancel request would not reach a
paused or partitioned server, and cancelling a wait for synchronous replication would let COMMIT
return success for a commit that is not replicated). The phase the operation was in when it failed
decides `fail` versus `info` (see workloads.errors).

A client may also cancel, as applications do (`--cancel-after S`): each statement has a
`statement_timeout` of S, and COMMIT, which that timeout does not bound once the commit waits for
a synchronous standby, gets a cancel request after S. A COMMIT so cancelled while it waited returns
success with a WARNING that the commit is local only: the operation is `ok`, as the client saw it,
and the warning is kept with it.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import IsolationLevel

from workloads.base import Definite, Workload
from workloads.confirm_rollback import prepare_and_wait
from workloads.errors import Phase, classify, describe

if TYPE_CHECKING:
    from core.endpoint import Endpoint


class _PipelineEndFilter(logging.Filter):
    """psycopg warns on stderr when a pipeline cannot end after the error that ended it (the
    connection lost under a fault): that error is already the operation's, in the history, and
    the warning would only scatter tracebacks' worth of lines over the user's progress."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        return not (
            record.msg == "error ignored terminating %r: %s"
            and bool(args)
            and isinstance(args[0], psycopg.Pipeline)
        )


logging.getLogger("psycopg").addFilter(_PipelineEndFilter())

ISOLATION_LEVELS = {
    "serializable": IsolationLevel.SERIALIZABLE,
    "repeatable-read": IsolationLevel.REPEATABLE_READ,
    "read-committed": IsolationLevel.READ_COMMITTED,
    "read-uncommitted": IsolationLevel.READ_UNCOMMITTED,
}


@dataclass(frozen=True)
class Completion:
    type: str  # ok | fail | info
    value: Any
    error: str | None = None
    # a write's WAL insert position after its statements, before its commit: its commit record
    # ends past it, so a quorum that holds less than this cannot hold the write
    lsn: int | None = None
    warning: str | None = None  # what the server warned of while the operation committed


class Alarms:
    """One thread that fires every client's deadlines. A `threading.Timer` an operation started
    a thread an operation: hundreds a second at full load, each contending for the GIL with the
    clients it watches."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int]] = []  # (deadline, token), cancelled ones left in
        self._armed: dict[int, Callable[[], None]] = {}
        self._tokens = itertools.count()
        self._thread: threading.Thread | None = None

    def set(self, seconds: float, fire: Callable[[], None]) -> int:
        """Call `fire` in `seconds` unless cancelled; the token cancels it."""
        with self._cond:
            token = next(self._tokens)
            self._armed[token] = fire
            heapq.heappush(self._heap, (time.monotonic() + seconds, token))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="alarms", daemon=True)
                self._thread.start()
            elif self._heap[0][1] == token:
                self._cond.notify()  # sooner than what the thread waits for
            return token

    def cancel(self, token: int) -> None:
        with self._cond:
            self._armed.pop(token, None)

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._heap and self._heap[0][1] not in self._armed:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._cond.wait()
                    continue
                deadline, token = self._heap[0]
                if (left := deadline - time.monotonic()) > 0:
                    self._cond.wait(left)
                    continue
                heapq.heappop(self._heap)
                fire = self._armed.pop(token)
            with contextlib.suppress(Exception):  # a failed alarm must not end the others
                fire()


ALARMS = Alarms()


class Watchdog:
    """Shuts a connection's socket down if an operation outlives its deadline."""

    def __init__(self, conn: psycopg.Connection, seconds: float) -> None:
        self.fired = False
        self._conn = conn
        self._seconds = seconds
        self._token: int | None = None

    def _fire(self) -> None:
        self.fired = True
        with contextlib.suppress(OSError, psycopg.Error):
            sock = socket.socket(fileno=os.dup(self._conn.pgconn.socket))
            with sock:
                sock.shutdown(socket.SHUT_RDWR)

    def __enter__(self) -> Watchdog:
        self._token = ALARMS.set(self._seconds, self._fire)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            ALARMS.cancel(self._token)


class Canceller:
    """Sends a cancel request for the connection's statement after `seconds` (none if None), as
    an application or a pool that gives up on a statement does."""

    def __init__(self, conn: psycopg.Connection, seconds: float | None) -> None:
        self._conn = conn
        self._seconds = seconds
        self._token: int | None = None

    def _fire(self) -> None:
        with contextlib.suppress(psycopg.Error, OSError):
            self._conn.cancel_safe(timeout=2.0)

    def __enter__(self) -> Canceller:
        if self._seconds is not None:
            self._token = ALARMS.set(self._seconds, self._fire)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            ALARMS.cancel(self._token)


def wal_position(conn: psycopg.Connection) -> int:
    """The server's WAL insert position, in bytes (psycopg reads pg_lsn as text)."""
    row = conn.execute("SELECT pg_current_wal_insert_lsn() - '0/0'").fetchone()
    return int(row[0])  # type: ignore[index]


class PostgresClient:
    """A worker's connection; reconnects lazily after the previous one was lost."""

    def __init__(
        self,
        host: str,
        port: int | str,
        dbname: str,
        user: str,
        isolation: str,
        timeout: float,
        target_session_attrs: str = "any",
        nodes: dict[str, str] | None = None,
        two_phase: bool = False,
        cancel_after: float | None = None,
    ) -> None:
        self._params = {
            "host": host,
            "port": port,
            "dbname": dbname,
            "user": user,
            "target_session_attrs": target_session_attrs,
        }
        self._nodes = nodes or {}
        self._isolation = ISOLATION_LEVELS[isolation]
        self._timeout = timeout
        self._two_phase = two_phase
        self._cancel_after = cancel_after
        self._warnings: list[str] = []  # the server's warnings since the last COMMIT began
        self._conn: psycopg.Connection | None = None
        self._reader: PostgresClient | None = None  # where read-only operations go, if apart
        self._served: PostgresClient = self  # the client that ran the last operation

    @classmethod
    def from_endpoint(
        cls, ep: Endpoint, isolation: str, timeout: float, cancel_after: float | None = None
    ) -> PostgresClient:
        client = cls(
            ep.host,
            ep.port,
            ep.dbname,
            ep.user,
            isolation,
            timeout,
            ep.target_session_attrs,
            dict(ep.nodes),
            ep.two_phase,
            cancel_after,
        )
        if ep.reads is not None:
            client._reader = cls.from_endpoint(ep.reads, isolation, timeout, cancel_after)
        return client

    def setup(self, workloads: list[Workload]) -> dict[str, str]:
        """Create the workloads' tables; return the server's version, for the report."""
        try:
            conn = self.connect()
            for w in workloads:
                w.setup(conn)
            conn.commit()
            return {"postgres": conn.info.parameter_status("server_version") or "unknown"}
        finally:
            self.close()

    def connect(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed:
            cancel = self._cancel_after
            self._conn = psycopg.connect(
                **self._params,
                **({"options": f"-c statement_timeout={int(cancel * 1000)}"} if cancel else {}),
                connect_timeout=max(1, int(self._timeout)),
                autocommit=False,
                keepalives=1,
                keepalives_idle=2,
                keepalives_interval=1,
                keepalives_count=3,
                tcp_user_timeout=int(self._timeout * 1000),
            )
            self._conn.isolation_level = self._isolation
            self._conn.add_notice_handler(self._notice)
        return self._conn

    def _notice(self, diag: psycopg.errors.Diagnostic) -> None:
        if diag.severity_nonlocalized == "WARNING":
            said = " ".join(filter(None, (diag.message_primary, diag.message_detail)))
            self._warnings.append(f"{diag.sqlstate}: {said}")

    @property
    def node(self) -> str | None:
        """The node behind the host the last operation's connection went to, when the endpoint
        names several."""
        served = self._served
        if served._conn is None or served._conn.closed:
            return None
        return served._nodes.get(f"{served._conn.info.host}:{served._conn.info.port}")

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None
        if self._reader is not None:
            self._reader.close()

    def run(self, workload: Workload, f: str, value: Any) -> Completion:
        """Run one operation as one transaction and say what is known of its outcome; a
        read-only one where the endpoint sends reads, if it names a place."""
        read_only = not workload.writes(f, value)
        self._served = self._reader if read_only and self._reader is not None else self
        if self._served is not self:
            return self._served.run(workload, f, value)
        phase: Phase = "connect"
        try:
            conn = self.connect()
            phase = "execute"
            with Watchdog(conn, self._timeout) as dog:
                try:
                    result = workload.invoke(conn, f, value)
                    lsn = None if read_only else wal_position(conn)
                    phase = "commit"
                    self._warnings.clear()
                    with Canceller(conn, self._cancel_after):
                        if self._two_phase and not read_only:
                            prepare_and_wait(conn)  # the confirm/rollback mode's commit
                        else:
                            conn.commit()
                except Definite as e:
                    conn.rollback()
                    return Completion("fail", value, str(e))
                except Exception as e:
                    if dog.fired:
                        raise TimeoutError(
                            f"no answer within {self._timeout:g}s ({describe(e)})"
                        ) from e
                    raise
            warning = "; ".join(self._warnings) or None
            return Completion("ok", result, lsn=lsn, warning=warning)
        except Exception as e:
            outcome = classify(e, phase=phase, read_only=read_only)
            self._discard_after(e)
            return Completion(outcome.type, value, outcome.error)

    def _discard_after(self, exc: Exception) -> None:
        """Keep a healthy connection after a server-side error; drop a broken one."""
        conn = self._conn
        if conn is None or conn.closed or conn.broken or isinstance(exc, TimeoutError):
            self.close()
            return
        try:
            conn.rollback()
        except psycopg.Error:
            self.close()
