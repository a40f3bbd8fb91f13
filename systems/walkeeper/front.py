"""The compute's front door: clients reach its Postgres through here, and their cancel requests
never do.

A COMMIT waits until the quorum holds it, as Postgres waits for a synchronous standby (the proxy).
Postgres ends that wait when the backend is cancelled, warns that the transaction "has already
committed locally", and returns success: the write is acknowledged, and visible to every later
reader, before any quorum holds it; the next term can lose it (FINDINGS.md). So Postgres listens
on the loopback only, and this front, on the clients' port, passes every connection through
except a cancel request (a connection whose first message is CancelRequest, after an optional
SSL or GSS request, which it declines as Postgres here would: it has no encryption). A client
that gives up on a COMMIT then leaves it waiting, invisible, until the quorum holds it or the
compute stops Postgres; `statement_timeout` still ends every statement but that wait.

Remote connections reach Postgres from REMOTE_SOURCE, a loopback address of their own, so that
pg_hba.conf can keep them out while the compute does not serve, as it keeps out remote clients;
the node's own (from the loopback) come from 127.0.0.1, trusted as before.

A remote client's bytes after its opening pass only while `may_serve` holds (the agent's
lease), checked before each chunk is forwarded: a primary stopped (SIGSTOP, a frozen VM) and
woken together with its agent would otherwise answer a query that was waiting in its socket
before the agent has seen its lease end and stopped Postgres, from a state another primary has
since written past.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import socketserver
import struct
import threading
from collections.abc import Callable

log = logging.getLogger("walkeeper.front")

CANCEL_REQUEST = 80877102
SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
LOCAL_SOURCE = "127.0.0.1"  # the node's own connections, trusted whether it serves or not
REMOTE_SOURCE = "127.0.0.2"  # where a remote client's connection reaches Postgres from
CONNECT_TIMEOUT = 5.0
CHUNK = 1 << 16


def read_exactly(sock: socket.socket, size: int) -> bytes | None:
    """`size` bytes, or None if the peer closed first."""
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def opening(client: socket.socket) -> bytes | None:
    """The client's first message that is not a request for encryption (each declined with
    "N"); None if it closed first or sent a cancel request, which is dropped."""
    while True:
        head = read_exactly(client, 8)
        if head is None:
            return None
        length, code = struct.unpack("!II", head)
        if length == 8 and code in (SSL_REQUEST, GSSENC_REQUEST):
            client.sendall(b"N")
            continue
        rest = read_exactly(client, length - 8) if length > 8 else b""
        if rest is None:
            return None
        if code == CANCEL_REQUEST:
            log.info("dropped a cancel request: a wait for the quorum is not the client's to end")
            return None
        return head + rest


def pipe(
    source: socket.socket, sink: socket.socket, gate: Callable[[], bool] | None = None
) -> None:
    """Copy until `source` ends, then end `sink`'s writing side; when `gate` turns false before
    a chunk, drop it and cut both sides at once."""
    with contextlib.suppress(OSError):
        while chunk := source.recv(CHUNK):
            if gate is not None and not gate():
                log.warning("cut a client's connection: this compute's lease is over")
                for sock in (source, sink):
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RDWR)
                return
            sink.sendall(chunk)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


class _Connection(socketserver.BaseRequestHandler):
    server: Front

    def handle(self) -> None:
        client: socket.socket = self.request
        first = opening(client)
        if first is None:
            return
        local = self.client_address[0] == LOCAL_SOURCE
        # The opening passes whatever the lease: while the compute does not serve, its
        # Postgres's pg_hba.conf answers it with a sentence that says so.
        gate = None if local else self.server.may_serve
        try:
            upstream = socket.create_connection(
                self.server.target,
                CONNECT_TIMEOUT,
                source_address=(LOCAL_SOURCE if local else REMOTE_SOURCE, 0),
            )
        except OSError:
            return  # Postgres is down: the client sees its connection closed
        with upstream:
            upstream.settimeout(None)
            upstream.sendall(first)
            back = threading.Thread(target=pipe, args=(upstream, client), daemon=True)
            back.start()
            pipe(client, upstream, gate)
            back.join()


class Front(socketserver.ThreadingTCPServer):
    """Listens on `listen`, passes connections to Postgres at `target`; remote ones only while
    `may_serve` holds."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self, listen: tuple[str, int], target: tuple[str, int], may_serve: Callable[[], bool]
    ) -> None:
        self.target = target
        self.may_serve = may_serve
        super().__init__(listen, _Connection)
