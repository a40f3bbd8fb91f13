"""One logical client's connection to a Tarantool cluster (the `tarantool` cluster kind), and how an
operation is run on it: one call of the server-side function `<workload>_<f>` (systems/qsync/
node.lua), which is one transaction.

The client tries the cluster's nodes in turn and keeps to the first that takes writes (the
controller makes exactly one writable, as a redirect would). What an error means:

- a server error is definite (`fail`): Tarantool answers with an error only for a transaction
  that did not commit. ER_SYNC_QUORUM_TIMEOUT (216), ER_SYNC_ROLLBACK (217) and ER_WAL_IO (40,
  what 2.6.0 answers a transaction still queued for the log when the one before it is rolled back)
  say the leader rolled it back, and their text says so, for the confirm/rollback contract;
- a refusal the function returns (`nil, reason`, e.g. insufficient funds) is definite;
- a lost connection or a socket timeout after the call was sent is indeterminate (`info`), unless
  the operation only reads.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import tarantool
from tarantool.error import DatabaseError

from workloads.base import Definite, Workload
from workloads.postgres import Completion

if TYPE_CHECKING:
    from core.endpoint import Endpoint

# Errors that mean the leader rolled the transaction back, and the words the history gets for
# them (checkers/rollback.py recognises "rolled back").
ROLLED_BACK_CODES = {
    40: "rolled back: its write to the log was cancelled, as when an earlier one is rolled back",
    216: "rolled back by the leader: the quorum was not collected in time",
    217: "rolled back: an earlier synchronous transaction was rolled back",
}
ER_READONLY = 7


class NoLeader(Exception):
    """No node answered as writable: nothing was sent, so the operation certainly failed."""


def server_error(exc: BaseException) -> bool:
    """An error the server answered with. The connector raises its own failures (NetworkError for
    a lost connection or a timeout, among others) as subclasses of DatabaseError."""
    return type(exc) is DatabaseError and bool(exc.args) and isinstance(exc.args[0], int)


def describe(exc: BaseException) -> str:
    """The history's `error` text: Tarantool's code and message, and whether the transaction was
    rolled back."""
    if server_error(exc):
        code, message = exc.args[0], " ".join(str(exc.args[1]).split())
        why = ROLLED_BACK_CODES.get(code)
        return f"ER {code}: {message}" + (f" ({why})" if why else "")
    return f"{type(exc).__name__}: {' '.join(str(exc).split()) or 'no detail'}"


class TarantoolClient:
    """A worker's connection to whichever node takes writes; reconnects lazily after a loss."""

    def __init__(self, addresses: list[tuple[str, int, str]], timeout: float) -> None:
        self._addresses = addresses  # (host, port, node name), in the order they are tried
        self._timeout = timeout
        self._conn: tarantool.Connection | None = None
        self._node: str | None = None
        self._next = 0  # where the next search for the writable node starts

    @classmethod
    def from_endpoint(cls, ep: Endpoint, isolation: str, timeout: float) -> TarantoolClient:
        """Tarantool 2.6 has one isolation (no MVCC: a transaction sees what is in memory)."""
        names = dict(ep.nodes)
        hosts, ports = ep.host.split(","), str(ep.port).split(",")
        pairs = zip(hosts, ports, strict=True)
        return cls([(h, int(p), names.get(f"{h}:{p}", h)) for h, p in pairs], timeout)

    def _open(self, host: str, port: int) -> tarantool.Connection:
        return tarantool.Connection(
            host,
            port,
            socket_timeout=self._timeout,
            connection_timeout=min(self._timeout, 2.0),
            reconnect_max_attempts=0,  # never resend: a resent write could apply twice
            fetch_schema=False,
        )

    def connect(self) -> tarantool.Connection:
        """The connection to the writable node, searching for it when there is none."""
        if self._conn is not None:
            return self._conn
        for i in range(len(self._addresses)):
            at = (self._next + i) % len(self._addresses)
            host, port, name = self._addresses[at]
            conn = None
            try:
                conn = self._open(host, port)
                if conn.call("harness_role").data[0].get("ro") is False:
                    self._conn, self._node, self._next = conn, name, at
                    return conn
            except Exception:
                pass
            if conn is not None:
                with contextlib.suppress(Exception):
                    conn.close()
        raise NoLeader("no node takes writes")

    @property
    def node(self) -> str | None:
        return self._node if self._conn is not None else None

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None
            self._next += 1  # the next search starts past the node that failed

    def setup(self, workloads: list[Workload]) -> dict[str, str]:
        """Each workload's `<name>_setup` with its checker parameters; the server's version."""
        try:
            conn = self.connect()
            for w in workloads:
                conn.call(f"{w.name}_setup", [w.checker_params()])
            return {"tarantool": str(conn.eval("return box.info.version").data[0])}
        finally:
            self.close()

    def run(self, workload: Workload, f: str, value: Any) -> Completion:
        read_only = not workload.writes(f, value)
        sent = False
        try:
            conn = self.connect()
            args = [] if value is None else [value]
            sent = True
            data = conn.call(f"{workload.name}_{f}", args).data
            if len(data) > 1 and data[0] is None and isinstance(data[1], str):
                raise Definite(data[1])
            return Completion("ok", data[0] if data else None)
        except Definite as e:
            return Completion("fail", value, str(e))
        except Exception as e:
            if server_error(e):
                if e.args[0] == ER_READONLY:
                    self.close()  # demoted: the next operation looks for the node that leads now
                return Completion("fail", value, describe(e))
            self.close()
            definite = read_only or not sent
            return Completion("fail" if definite else "info", value, describe(e))
