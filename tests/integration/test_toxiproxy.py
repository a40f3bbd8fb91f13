"""harness-toxiproxy on loopback, driven through toxiproxy-python as Toxiproxy would be, and
judged by its effect on real TCP connections to a real server behind it: a latency toxic delays a
round trip by at least its latency, limit_data cuts a connection after its bytes, reset_peer
resets it, a disabled proxy refuses connections, and removing the toxics (or a reset) restores
full speed."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from toxiproxy import Toxiproxy
from toxiproxy.exceptions import InvalidToxic, NotFound, ProxyExists

from clusters.toxiproxy_server import free_port, local_server

LATENCY_MS = 400
BLOB = 64 * 1024  # bytes the source sends on each connection


class Echo(socketserver.BaseRequestHandler):
    """Echoes every byte; on `blob` sends BLOB bytes. It never hangs up first, as a database
    does not: when the source closed right after its bytes, noxious 1.0.4 sometimes ended the
    connection before the limit_data toxic's bytes were written (none came through, in about
    one connection in eight on a loaded machine), a race of the source's close, not the toxic."""

    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(b"x" * BLOB if data == b"blob" else data)


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def toxiproxy(tmp_path: Path) -> Iterator[Toxiproxy]:
    with local_server(tmp_path / "toxiproxy.log") as server:
        yield server


def round_trip(listen: str) -> float:
    """Seconds for one small message to come back through the proxy."""
    host, port = listen.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        began = time.monotonic()
        conn.sendall(b"ping")
        assert conn.recv(16) == b"ping"
        return time.monotonic() - began


def received(listen: str) -> int:
    """Bytes of the source's blob that come through the proxy: all of them, or those before
    the proxy ends the connection."""
    host, port = listen.rsplit(":", 1)
    total = 0
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(b"blob")
        while total < BLOB and (chunk := conn.recv(65536)):
            total += len(chunk)
    return total


def test_a_latency_toxic_delays_a_round_trip_and_removing_it_restores_speed(
    toxiproxy: Toxiproxy, upstream: str
) -> None:
    proxy = toxiproxy.create(upstream=upstream, name="echo", listen=f"127.0.0.1:{free_port()}")
    assert round_trip(proxy.listen) < LATENCY_MS / 1000
    proxy.add_toxic(type="latency", attributes={"latency": LATENCY_MS, "jitter": 0})
    assert set(proxy.toxics()) == {"latency_downstream"}
    assert round_trip(proxy.listen) >= LATENCY_MS / 1000
    proxy.destroy_toxic("latency_downstream")
    assert round_trip(proxy.listen) < LATENCY_MS / 1000
    # upstream too, and a reset removes it
    proxy.add_toxic(type="latency", stream="upstream", attributes={"latency": LATENCY_MS})
    assert round_trip(proxy.listen) >= LATENCY_MS / 1000
    toxiproxy.reset()
    assert proxy.toxics() == {}
    assert round_trip(proxy.listen) < LATENCY_MS / 1000


def test_limit_data_cuts_the_connection_after_its_bytes(
    toxiproxy: Toxiproxy, upstream: str
) -> None:
    proxy = toxiproxy.create(upstream=upstream, name="blob", listen=f"127.0.0.1:{free_port()}")
    assert received(proxy.listen) == BLOB
    proxy.add_toxic(type="limit_data", attributes={"bytes": 1000})
    assert [received(proxy.listen) for _ in range(3)] == [1000] * 3  # each connection
    proxy.destroy_toxic("limit_data_downstream")
    assert received(proxy.listen) == BLOB


def test_reset_peer_resets_connections_after_its_timeout_until_removed(
    toxiproxy: Toxiproxy, upstream: str
) -> None:
    """The toxic written here (noxious has none): a connection is reset by the peer, at once
    or after the timeout with its data forwarded until then; removed, connections work."""
    proxy = toxiproxy.create(upstream=upstream, name="rst", listen=f"127.0.0.1:{free_port()}")
    host, port = proxy.listen.rsplit(":", 1)
    proxy.add_toxic(type="reset_peer", attributes={"timeout": 0})
    assert [t.type for t in proxy.toxics().values()] == ["reset_peer"]
    with pytest.raises(ConnectionResetError):
        round_trip(proxy.listen)
    proxy.destroy_toxic("reset_peer_downstream")
    assert round_trip(proxy.listen) < 1.0
    proxy.add_toxic(type="reset_peer", name="later", attributes={"timeout": 600})
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        began = time.monotonic()
        conn.sendall(b"ping")
        assert conn.recv(16) == b"ping"  # forwarded while the timeout runs
        with pytest.raises(ConnectionResetError):
            while conn.recv(16):
                pass
        assert time.monotonic() - began >= 0.5
    # a disabled proxy keeps the toxic, and refuses connections
    with proxy.down(), pytest.raises(ConnectionRefusedError):
        round_trip(proxy.listen)
    assert set(proxy.toxics()) == {"later"}
    toxiproxy.reset()
    assert proxy.toxics() == {} and round_trip(proxy.listen) < 1.0


def test_a_disabled_proxy_refuses_connections_until_enabled(
    toxiproxy: Toxiproxy, upstream: str
) -> None:
    listen = f"127.0.0.1:{free_port()}"
    proxy = toxiproxy.create(upstream=upstream, name="door", listen=listen)
    with proxy.down():
        assert toxiproxy.get_proxy("door").enabled is False
        with pytest.raises(ConnectionRefusedError):
            round_trip(listen)
    assert toxiproxy.get_proxy("door").enabled is True
    assert round_trip(listen) < 1.0


def test_the_api_answers_as_toxiproxy_does(toxiproxy: Toxiproxy, upstream: str) -> None:
    """Toxiproxy's status codes, which toxiproxy-python turns into its exceptions, and a toxic
    the server lacks refused in one sentence that names those it has."""
    listen = f"127.0.0.1:{free_port()}"
    proxy = toxiproxy.create(upstream=upstream, name="api", listen=listen)
    assert set(toxiproxy.proxies()) == {"api"} and toxiproxy.get_proxy("api").listen == listen
    with pytest.raises(ProxyExists):
        toxiproxy.create(upstream=upstream, name="api", listen=f"127.0.0.1:{free_port()}")
    with pytest.raises(InvalidToxic, match=r"jitter.*latency, bandwidth.*reset_peer"):
        proxy.add_toxic(type="jitter", attributes={"jitter": 10})
    with pytest.raises(InvalidToxic, match="toxicity"):
        proxy.add_toxic(type="latency", toxicity=2.0, attributes={"latency": 1})
    proxy.add_toxic(type="bandwidth", name="slow", toxicity=0.5, attributes={"rate": 10})
    toxic = proxy.get_toxic("slow")
    assert (toxic.type, toxic.stream, toxic.toxicity, toxic.attributes) == (
        "bandwidth", "downstream", 0.5, {"rate": 10},
    )  # fmt: skip
    with pytest.raises(NotFound):
        proxy.destroy_toxic("nothing")
    proxy.destroy()
    assert toxiproxy.proxies() == {}
