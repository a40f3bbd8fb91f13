"""What both ends of Postgres's streaming replication put inside CopyData, shared by the proxy
(a standby of Postgres) and the safekeeper's WAL server (a primary to standbys)."""

from __future__ import annotations

import struct
import time

PG_EPOCH = 946684800  # 2000-01-01 in Unix time: Postgres timestamps count from there
XLOG_DATA = struct.Struct(">QQq")  # after 'w': start, server's WAL end, send time
KEEPALIVE = struct.Struct(">QqB")  # after 'k': server's WAL end, send time, reply requested
STANDBY_STATUS = struct.Struct(">QQQqB")  # after 'r': write, flush, apply, time, reply requested


def now_pg() -> int:
    """Now, as Postgres's replication messages count time: microseconds since 2000."""
    return int((time.time() - PG_EPOCH) * 1_000_000)
