"""The connection-fault proxy: `harness-toxiproxy` (the crate `clusters/toxiproxy`, Toxiproxy's
HTTP API over the `noxious` library), started as a process and driven through
`toxiproxy-python`, as a user of Toxiproxy would drive Toxiproxy itself.

Toxiproxy's toxics, as this server has them (noxious's): latency (ms, jitter ms), bandwidth
(KB/s), slow_close (delay ms), timeout (ms; 0 holds the data for ever), slicer (average_size,
size_variation, delay µs), limit_data (bytes), on the upstream (client to server) or downstream
stream; and reset_peer (timeout ms), which noxious 1.0.4 lacks and the server adds: while a
proxy has it, the connections open through it are closed and every new one is reset (RST)
once it has lived the timeout, its data forwarded until then.

On a cluster, one server runs on each node (its API on API_PORT): a proxy of each port a
client reaches listens on `proxy_port(port)` of the same node (nemesis.toxic puts them there),
and the kind's internal links have theirs on loopback (clusters/kinds/links.py).
"""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import requests
from toxiproxy import Toxiproxy

from clusters import crates
from clusters.backend import LOG_DIR
from core.errors import InfraError

CRATE = "toxiproxy"
NAME = crates.CRATES[CRATE]
READY_TIMEOUT = 10.0
ASK_TIMEOUT = 2.0  # seconds to wait for a server that may not run at all
API_PORT = 8474  # Toxiproxy's
PROXY_OFFSET = 20000  # a node's proxy of its port P listens on P + this
NODE_BINARY = f"/var/lib/harness/bin/{NAME}"
NODE_LOG = f"{LOG_DIR}/toxiproxy.log"
# toxiproxy-python keeps one server address for the whole process: one server at a time
_CONSUMER = threading.Lock()
T = TypeVar("T")


def proxy_port(port: int) -> int:
    return port + PROXY_OFFSET


def published(ports: list[int]) -> list[int]:
    """The ports a node publishes so that a proxy can stand in front of any of `ports`."""
    return [*ports, API_PORT, *(proxy_port(p) for p in ports)]


def ensure_binary() -> Path:
    """The server's binary, built from its crate when missing (`make setup` builds it)."""
    return crates.ensure_built(CRATE, NAME)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def client(host: str, port: int) -> Toxiproxy:
    """A toxiproxy-python client of the server at host:port. toxiproxy-python keeps one server
    address for the whole process (a class attribute): this points it at this server."""
    server = Toxiproxy()
    server.update_api_consumer(host, port)
    return server


def on_server(host: str, port: int, action: Callable[[Toxiproxy], T]) -> T:
    """`action` with a client of the server at host:port, while no other thread points
    toxiproxy-python elsewhere."""
    with _CONSUMER:
        return action(client(host, port))


@contextmanager
def local_server(log: Path, host: str = "127.0.0.1") -> Iterator[Toxiproxy]:
    """A server on this machine for the block's length, its output in `log`; stopped (and its
    proxies with it) when the block ends, however it ends."""
    port = free_port(host)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [str(ensure_binary()), "--host", host, "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        wait_ready(host, port, proc)
        yield client(host, port)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def answers(host: str, port: int) -> bool:
    """Whether a server answers there: toxiproxy-python sets no timeout, so ask first."""
    try:
        return requests.get(f"http://{host}:{port}/version", timeout=ASK_TIMEOUT).ok
    except requests.RequestException:
        return False


def wait_ready(host: str, port: int, proc: subprocess.Popen[bytes] | None = None) -> None:
    """Until the API answers; InfraError if the server exits or stays silent."""
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise InfraError(f"{NAME} exited with {proc.returncode} before it answered")
        try:
            if requests.get(f"http://{host}:{port}/version", timeout=1).ok:
                return
        except requests.RequestException:
            time.sleep(0.05)
    raise InfraError(f"{NAME} on {host}:{port} did not answer within {READY_TIMEOUT:g} s")
