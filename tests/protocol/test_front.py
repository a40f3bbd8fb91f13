"""The compute's front door on loopback, between real sockets: a client's startup and everything
after it reach the server behind it byte for byte, both ways; a cancel request never does, even
after the SSL request a client's libpq sends first; a remote client's bytes pass only while the
compute may serve (a client from 127.0.0.3 stands for a remote one: all of 127/8 is loopback)."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator

import pytest

from systems.walkeeper.front import CANCEL_REQUEST, SSL_REQUEST, Front

STARTUP = struct.pack("!II", 8 + 14, 196608) + b"user\0postgres\0"  # protocol 3.0


class Behind:
    """A server that records each connection's bytes and answers "hello" to the first."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.address = self.sock.getsockname()
        self.received: list[bytes] = []
        self.accepted = threading.Semaphore(0)
        self.closed = threading.Event()  # a connection ended, its bytes recorded
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            conn, _ = self.sock.accept()
            self.accepted.release()
            with conn:
                data = conn.recv(len(STARTUP))
                conn.sendall(b"hello")
                while chunk := conn.recv(4096):
                    data += chunk
                self.received.append(data)
                self.closed.set()


class Lease:
    """The agent's answer to "may this compute serve?", turned by the test."""

    def __init__(self) -> None:
        self.holds = True

    def __call__(self) -> bool:
        return self.holds


@pytest.fixture
def lease() -> Lease:
    return Lease()


@pytest.fixture
def front(lease: Lease) -> Iterator[tuple[Front, Behind]]:
    behind = Behind()
    server = Front(("127.0.0.1", 0), behind.address, lease)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server, behind
    server.shutdown()
    server.server_close()
    behind.sock.close()


def connect(server: Front, source: str = "127.0.0.1") -> socket.socket:
    return socket.create_connection(server.server_address, timeout=5, source_address=(source, 0))


REMOTE = "127.0.0.3"
QUERY = b"Q\0\0\0\x0dCOMMIT;\0"


def test_a_session_passes_through_both_ways(front: tuple[Front, Behind]) -> None:
    server, behind = front
    with connect(server) as client:
        client.sendall(STARTUP)
        assert client.recv(5) == b"hello"
        client.sendall(QUERY)
        client.shutdown(socket.SHUT_WR)
        assert client.recv(1) == b""  # the server's side closed after the client's
    assert behind.accepted.acquire(timeout=5) and behind.closed.wait(5)
    assert behind.received == [STARTUP + QUERY]


def test_a_cancel_request_is_dropped_even_after_an_ssl_request(
    front: tuple[Front, Behind],
) -> None:
    server, behind = front
    cancel = struct.pack("!IIII", 16, CANCEL_REQUEST, 4242, 99)
    with connect(server) as client:
        client.sendall(struct.pack("!II", 8, SSL_REQUEST))
        assert client.recv(1) == b"N"  # declined, as Postgres without SSL declines it
        client.sendall(cancel)
        assert client.recv(1) == b""  # closed, as a server closes after a cancel request
    with connect(server) as client:
        client.sendall(cancel)
        assert client.recv(1) == b""
    assert not behind.accepted.acquire(timeout=1)  # nothing ever reached the server


def test_a_query_sent_after_the_lease_ended_never_reaches_postgres(
    front: tuple[Front, Behind], lease: Lease
) -> None:
    """The paused primary's case: the session opened while it served, the query waited in its
    socket, and the lease is over by the time the compute reads it."""
    server, behind = front
    with connect(server, REMOTE) as client:
        client.sendall(STARTUP)
        assert client.recv(5) == b"hello"
        lease.holds = False
        client.sendall(QUERY)
        assert client.recv(1) == b""  # cut, not answered
    assert behind.closed.wait(5)
    assert behind.received == [STARTUP]


def test_past_the_lease_a_remote_client_gets_postgres_answer_to_its_opening_and_no_more(
    front: tuple[Front, Behind], lease: Lease
) -> None:
    """The opening reaches Postgres, whose pg_hba.conf tells the client why it is refused; a
    local client's bytes all pass, whatever the lease."""
    server, behind = front
    lease.holds = False
    with connect(server, REMOTE) as client:
        client.sendall(STARTUP)
        assert client.recv(5) == b"hello"  # Postgres's answer, pg_hba's refusal in real life
        client.sendall(QUERY)
        assert client.recv(1) == b""
    assert behind.closed.wait(5)
    assert behind.received == [STARTUP]
    behind.closed.clear()
    with connect(server) as client:  # the node's own, from 127.0.0.1
        client.sendall(STARTUP)
        assert client.recv(5) == b"hello"
        client.sendall(QUERY)
        client.shutdown(socket.SHUT_WR)
        assert client.recv(1) == b""
    assert behind.closed.wait(5)
    assert behind.received == [STARTUP, STARTUP + QUERY]
