"""Postgres's streaming replication, the standby's side, on psycopg's libpq wrapper (`pq`).

The proxy is Postgres's synchronous standby: it receives XLogData and answers with standby status
updates whose flush position is the quorum's, which is what releases a waiting COMMIT. Messages
are parsed here by hand, so nothing reports a position on our behalf.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from psycopg import pq

from .replication import KEEPALIVE, STANDBY_STATUS, XLOG_DATA, now_pg
from .wire import lsn_str, parse_lsn


class StreamError(Exception):
    pass


@dataclass
class System:
    system_id: str
    timeline: int
    xlogpos: int
    segment_size: int


class PgStream:
    def __init__(self, conninfo: str) -> None:
        self.conn = pq.PGconn.connect(conninfo.encode())
        if self.conn.status != pq.ConnStatus.OK:
            raise StreamError(self.conn.error_message.decode(errors="replace").strip())

    def query(self, sql: str) -> list[list[str]]:
        res = self.conn.exec_(sql.encode())
        if res.status != pq.ExecStatus.TUPLES_OK:
            raise StreamError(f"{sql}: {res.error_message.decode(errors='replace').strip()}")
        return [
            [(res.get_value(r, c) or b"").decode() for c in range(res.nfields)]
            for r in range(res.ntuples)
        ]

    def identify(self) -> System:
        system_id, timeline, xlogpos, _ = self.query("IDENTIFY_SYSTEM")[0]
        size = self.query("SHOW wal_segment_size")[0][0]
        units = {"kB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30}
        number = int("".join(ch for ch in size if ch.isdigit()))
        unit = size[len(str(number)) :].strip()
        return System(system_id, int(timeline), parse_lsn(xlogpos), number * units.get(unit, 1))

    def start(self, slot: str, lsn: int, timeline: int) -> None:
        cmd = f"START_REPLICATION SLOT {slot} PHYSICAL {lsn_str(lsn)} TIMELINE {timeline}"
        res = self.conn.exec_(cmd.encode())
        if res.status != pq.ExecStatus.COPY_BOTH:
            raise StreamError(f"{cmd}: {res.error_message.decode(errors='replace').strip()}")
        self.conn.nonblocking = 1

    def fileno(self) -> int:
        return self.conn.socket

    def messages(self) -> Iterator[tuple[str, int, bytes | bool]]:
        """What has arrived, without blocking: ("w", start LSN, WAL) or ("k", WAL end, reply?)."""
        self.conn.consume_input()
        while True:
            n, data = self.conn.get_copy_data(1)
            if n == 0:
                return
            if n < 0:
                res = self.conn.get_result()
                err = res.error_message.decode(errors="replace").strip() if res else ""
                raise StreamError(f"replication stream ended {err}".strip())
            data = bytes(data)
            if data[:1] == b"w":
                start, _, _ = XLOG_DATA.unpack_from(data, 1)
                yield "w", start, data[1 + XLOG_DATA.size :]
            elif data[:1] == b"k":
                end, _, reply = KEEPALIVE.unpack_from(data, 1)
                yield "k", end, bool(reply)

    def feedback(self, flush: int) -> None:
        """Report `flush` as written, flushed and applied: the only position we vouch for."""
        msg = b"r" + STANDBY_STATUS.pack(flush, flush, flush, now_pg(), 0)
        if self.conn.put_copy_data(msg) != 1 or self.conn.flush() < 0:
            raise StreamError(self.conn.error_message.decode(errors="replace").strip())

    def close(self) -> None:
        self.conn.finish()
