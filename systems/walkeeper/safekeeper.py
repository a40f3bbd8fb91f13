"""The safekeeper daemon: a TCP server in front of an Acceptor, one thread per connection."""

from __future__ import annotations

import logging
import socket
import socketserver
from typing import Any

from . import wire
from .acceptor import Acceptor
from .storage import Storage

log = logging.getLogger("safekeeper")


class Handler(socketserver.BaseRequestHandler):
    server: Server

    def handle(self) -> None:
        sock: socket.socket = self.request
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        session: dict[str, Any] = {}
        peer = "{}:{}".format(*self.client_address[:2])
        try:
            while True:
                req, payload = wire.recv(sock)
                reply, data = self.server.acceptor.handle(req, payload, session)
                if not reply.get("ok"):
                    log.info("%s: refused %s: %s", peer, req.get("type"), reply.get("error"))
                elif req.get("type") in ("vote", "elected"):
                    log.info("%s: %s term %s", peer, req["type"], req.get("term"))
                wire.send(sock, reply, data)
        except (ConnectionError, wire.ProtocolError, OSError) as e:
            log.debug("%s: connection ended: %s", peer, e)


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], acceptor: Acceptor) -> None:
        self.acceptor = acceptor
        super().__init__(address, Handler)


def serve(
    host: str,
    port: int,
    datadir: str,
    variant: str,
    name: str,
    pg_listen: tuple[str, int] | None = None,
) -> None:
    """Serve proposers on host:port and, with `pg_listen`, Postgres standbys there too."""
    acceptor = Acceptor(Storage(datadir), variant, name)
    state = acceptor.state()
    log.info(
        "safekeeper %s (%s) on %s:%d: term %d, flush %s",
        name,
        variant,
        host,
        port,
        state["term"],
        wire.lsn_str(state["flush_lsn"]),
    )
    if pg_listen:
        from . import walsender

        walsender.start(pg_listen, acceptor)
    with Server((host, port), acceptor) as server:
        server.serve_forever()
