"""The proxy's pump between Postgres's stream and the safekeepers. Found in a 600 s soak: a
takeover's Postgres had written its end-of-recovery checkpoint before the proxy's
START_REPLICATION, libpq read that WAL together with the command's reply, and the pump waited
for the socket to become readable again before looking at what libpq held. The WAL reached the
safekeepers only when Postgres next wrote (a standby snapshot, 15 s later), so the new primary
served nothing for 18 s after the heal; a Postgres that never wrote again would never have."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

from systems.walkeeper.proposer import Proposer
from systems.walkeeper.proxy import Session
from tests.protocol.conftest import BASE, RECORD


class BufferedStream:
    """Postgres's stream as libpq left it: the WAL already read off the socket and held in
    libpq's buffer, and nothing more to come on the socket."""

    def __init__(self, start: int, wal: bytes) -> None:
        self.held = [("w", start, wal)]
        self.quiet_r, self.quiet_w = os.pipe()  # never written: never readable
        self.flushes: list[int] = []

    def fileno(self) -> int:
        return self.quiet_r

    def messages(self) -> Iterator[tuple[str, int, bytes | bool]]:
        while self.held:
            yield self.held.pop(0)

    def feedback(self, flush: int) -> None:
        self.flushes.append(flush)

    def close(self) -> None:
        os.close(self.quiet_r)
        os.close(self.quiet_w)


def test_wal_libpq_already_holds_reaches_the_quorum_without_more_from_postgres(
    make_safekeepers,
) -> None:
    sks = make_safekeepers("term-history", 3)
    p = Proposer(dict(sks.addresses), "term-history", "compute-1", timeout=2)
    p.elect(list(sks.addresses))
    p.begin(BASE)
    wal = b"".join(RECORD.pack(p.term, i, p.term, i - 1) for i in range(1, 9))
    ready = threading.Event()
    session = Session("", "walproposer", p, on_ready=lambda lsn: ready.set())
    session.ready_at = BASE + len(wal)  # Postgres's flush position when the stream began
    stream = BufferedStream(BASE, wal)
    session.follow_all()
    pump = threading.Thread(target=session.pump, args=(stream,), daemon=True)
    pump.start()
    try:
        assert ready.wait(5), (
            f"the quorum never held the WAL libpq had read (proxy's log ends at {p.log_end:#x}, "
            f"commit {p.commit_lsn:#x}, feedback sent {stream.flushes[-3:]})"
        )
        assert p.commit_lsn == BASE + len(wal) and stream.flushes[-1] <= p.commit_lsn
        holding = [n for n in sks.addresses if sks.status(n)["flush_lsn"] == BASE + len(wal)]
        assert len(holding) >= 2, f"only {holding} hold the WAL"  # a quorum of the three
    finally:
        session.close()
        pump.join(5)
        stream.close()
