"""Framing of the proxy–safekeeper protocol: a JSON header and a binary payload (WAL bytes).

One frame is two big-endian lengths, the header and the payload. JSON keeps every message
readable in a packet capture; the payload keeps WAL out of JSON.
"""

from __future__ import annotations

import json
import socket
import struct
from typing import Any

LENGTHS = struct.Struct(">II")
MAX_HEADER = 1 << 20
MAX_PAYLOAD = 64 << 20


class ProtocolError(Exception):
    """The peer sent something that is not a frame of this protocol."""


def send(sock: socket.socket, header: dict[str, Any], payload: bytes = b"") -> None:
    head = json.dumps(header, separators=(",", ":")).encode()
    sock.sendall(LENGTHS.pack(len(head), len(payload)) + head)
    if payload:
        sock.sendall(payload)


def recv(sock: socket.socket) -> tuple[dict[str, Any], bytes]:
    head_len, payload_len = LENGTHS.unpack(exactly(sock, LENGTHS.size))
    if head_len > MAX_HEADER or payload_len > MAX_PAYLOAD:
        raise ProtocolError(f"frame too large ({head_len}, {payload_len})")
    try:
        header = json.loads(exactly(sock, head_len))
    except ValueError as e:
        raise ProtocolError(f"header is not JSON: {e}") from e
    if not isinstance(header, dict):
        raise ProtocolError("header is not an object")
    return header, exactly(sock, payload_len) if payload_len else b""


def exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError("peer closed the connection")
        buf += chunk
    return bytes(buf)


def call(
    sock: socket.socket, header: dict[str, Any], payload: bytes = b""
) -> tuple[dict[str, Any], bytes]:
    send(sock, header, payload)
    return recv(sock)


def connect(address: tuple[str, int], timeout: float) -> socket.socket:
    sock = socket.create_connection(address, timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def lsn_str(lsn: int) -> str:
    """Postgres's notation for an LSN: high and low 32 bits in hex."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse_lsn(text: str) -> int:
    high, low = text.split("/")
    return (int(high, 16) << 32) | int(low, 16)
