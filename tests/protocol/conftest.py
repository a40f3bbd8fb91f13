"""Safekeepers as real TCP servers on loopback over real files, and a proposer that writes
recognisable records, so the seeds' histories can be replayed message by message.

A record is 16 bytes: (term, index, term and index of the record before it when it was written),
like a WAL record's back-link (xl_prev). A log whose back-links do not match its own order was
stitched together from different proposers' logs: the corruption seed 003 describes.
"""

from __future__ import annotations

import itertools
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from systems.walkeeper import wire
from systems.walkeeper.acceptor import Acceptor
from systems.walkeeper.proposer import MAX_APPEND, Proposer
from systems.walkeeper.safekeeper import Server
from systems.walkeeper.storage import Storage

RECORD = struct.Struct(">IIII")
BASE = 0x1000000


def lsn(index: int) -> int:
    """Where record `index` (1-based) starts; record m ends where m+1 starts."""
    return BASE + (index - 1) * RECORD.size


def parse(data: bytes) -> list[tuple[int, int, int, int]]:
    return [RECORD.unpack_from(data, i) for i in range(0, len(data), RECORD.size)]


def names(data: bytes) -> list[str]:
    """A log as the seeds write it: "term.index" per record."""
    return [f"{t}.{i}" for t, i, _, _ in parse(data)]


def broken_links(data: bytes) -> list[str]:
    """Records whose predecessor in this log is not the one they were written after."""
    recs = parse(data)
    return [
        f"{t}.{i} follows {pt}.{pi}"
        for (pt, pi, _, _), (t, i, wt, wi) in itertools.pairwise(recs)
        if (pt, pi) != (wt, wi)
    ]


class Safekeepers:
    """Named safekeepers that can be stopped and started again over the same directory."""

    def __init__(self, root: Path, variant: str, count: int) -> None:
        self.root, self.variant = root, variant
        self.servers: dict[str, Server] = {}
        self.addresses: dict[str, tuple[str, int]] = {}
        for name in "ABCDE"[:count]:
            self.start(name)

    def start(self, name: str) -> None:
        storage = Storage(str(self.root / name))
        port = self.addresses.get(name, ("127.0.0.1", 0))[1]
        server = Server(("127.0.0.1", port), Acceptor(storage, self.variant, name))
        self.addresses[name] = server.server_address[:2]
        self.servers[name] = server
        threading.Thread(target=server.serve_forever, daemon=True).start()

    def stop(self, name: str) -> None:
        server = self.servers.pop(name)
        server.shutdown()
        server.server_close()
        server.acceptor.storage.close()

    def status(self, name: str) -> dict:
        with wire.connect(self.addresses[name], 2) as sock:
            return wire.call(sock, {"type": "status"})[0]

    def wal(self, name: str) -> bytes:
        state = self.status(name)
        with wire.connect(self.addresses[name], 2) as sock:
            req = {"type": "read", "start": state["base_lsn"], "end": state["flush_lsn"]}
            return wire.call(sock, req)[1]

    def log(self, name: str) -> list[str]:
        return names(self.wal(name))

    def close(self) -> None:
        for name in list(self.servers):
            self.stop(name)


class Writer:
    """A proposer that writes records chained to its own log."""

    def __init__(self, sks: Safekeepers, ident: str) -> None:
        self.sks = sks
        self.p = Proposer(dict(sks.addresses), sks.variant, ident, timeout=2)
        self.chain: list[tuple[int, int]] = []

    def elect(self, *voters: str) -> Writer:
        self.p.elect(voters)
        self.p.begin(lsn(1))
        if self.p.vcl > self.p.log_start:
            known = self.p.read_log(self.p.log_start, self.p.vcl)
            self.chain = [(t, i) for t, i, _, _ in parse(known)]
        return self

    def write(self, count: int, *to: str) -> None:
        """Generate `count` records of our term and send our log to `to`."""
        for _ in range(count):
            index = len(self.chain) + 1
            prev = self.chain[-1] if self.chain else (0, 0)
            self.p.write(RECORD.pack(self.p.term, index, *prev))
            self.chain.append((self.p.term, index))
        for name in to:
            self.send(name)

    def send(self, name: str, records: int | None = None) -> None:
        if not self.p.peers[name].announced:
            self.p.attach(name)
        # appends of at most MAX_APPEND, as the proxy sends them, up to the log's end or only
        # `records` more records: the protocol's cases stop a send part-way
        left = None if records is None else records * RECORD.size
        while self.p.peers[name].position < self.p.log_end and (left is None or left > 0):
            sent = self.p.step(name, MAX_APPEND if left is None else min(left, MAX_APPEND))
            if left is not None:
                left -= sent

    def heartbeat(self, *to: str) -> None:
        for name in to:
            self.p.step(name)


@pytest.fixture(params=["term-history", "epoch"])
def variant(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def make_safekeepers(tmp_path: Path) -> Iterator:
    made: list[Safekeepers] = []

    def make(variant: str, count: int) -> Safekeepers:
        made.append(Safekeepers(tmp_path, variant, count))
        return made[-1]

    yield make
    for sks in made:
        sks.close()
