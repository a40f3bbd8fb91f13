"""The safekeeper's walsender (systems/walkeeper/walsender.py): its protocol messages byte by
byte, its parsing of what clients send, the WAL it may serve, and one conversation with a real
libpq (psycopg's) over loopback: replication commands, a stream that stops at the commit LSN and
goes on when it advances, and the end of the copy."""

from __future__ import annotations

import select
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from psycopg import pq

from systems.walkeeper import walsender as ws
from systems.walkeeper.acceptor import Acceptor
from systems.walkeeper.storage import Storage

BASE = 0x3000000
SYSTEM_ID = "7311111111111111111"


def fields(msg: bytes) -> tuple[bytes, bytes]:
    """(type, body) of one backend message, checking its length word."""
    (length,) = struct.unpack_from(">I", msg, 1)
    assert length == len(msg) - 1
    return msg[:1], msg[5:]


# --- backend messages ---------------------------------------------------------------------------


def test_fixed_messages() -> None:
    assert ws.auth_ok() == b"R\0\0\0\x08\0\0\0\0"
    assert ws.ready_for_query() == b"Z\0\0\0\x05I"
    assert ws.copy_done() == b"c\0\0\0\x04"
    assert ws.empty_query_response() == b"I\0\0\0\x04"
    assert ws.copy_both_response() == b"W\0\0\0\x07\0\0\0"
    assert ws.command_complete("IDENTIFY_SYSTEM") == b"C\0\0\0\x14IDENTIFY_SYSTEM\0"


def test_parameter_status_and_key_data() -> None:
    assert fields(ws.parameter_status("integer_datetimes", "on")) == (
        b"S",
        b"integer_datetimes\0on\0",
    )
    assert fields(ws.backend_key_data(42, 7)) == (b"K", struct.pack(">II", 42, 7))
    # a thread id does not fit in 32 bits: it is cut, not refused
    assert len(ws.backend_key_data(1 << 40, (1 << 48) + 3)) == 13


def test_negotiate_protocol_version() -> None:
    kind, body = fields(ws.negotiate_protocol_version(0, ["_pq_.x"]))
    assert kind == b"v"
    assert body == struct.pack(">II", 0, 1) + b"_pq_.x\0"


def test_row_description_and_data_row() -> None:
    kind, body = fields(ws.row_description([("systemid", ws.TEXT_OID), ("timeline", ws.INT4_OID)]))
    assert kind == b"T"
    assert body[:2] == b"\0\x02"
    first = b"systemid\0" + struct.pack(">IhIhih", 0, 0, 25, -1, -1, 0)
    second = b"timeline\0" + struct.pack(">IhIhih", 0, 0, 23, 4, -1, 0)
    assert body[2:] == first + second
    kind, body = fields(ws.data_row(["7", None, ""]))
    assert kind == b"D"
    assert body == b"\0\x03" + b"\0\0\0\x017" + b"\xff\xff\xff\xff" + b"\0\0\0\0"


def test_error_response() -> None:
    kind, body = fields(ws.error_response("no", "0A000", "FATAL"))
    assert kind == b"E"
    assert body == b"SFATAL\0VFATAL\0C0A000\0Mno\0\0"


def test_xlog_data_and_keepalive() -> None:
    kind, body = fields(ws.xlog_data(BASE, BASE + 10, b"abc", send_time=5))
    assert kind == b"d"
    assert body == b"w" + struct.pack(">QQq", BASE, BASE + 10, 5) + b"abc"
    kind, body = fields(ws.keepalive(BASE, reply=True, send_time=6))
    assert (kind, body) == (b"d", b"k" + struct.pack(">QqB", BASE, 6, 1))


def test_result_set() -> None:
    msg = ws.result_set([("x", ws.TEXT_OID)], [["1"], ["2"]], "SHOW")
    assert msg.startswith(b"T") and msg.endswith(ws.command_complete("SHOW"))
    assert msg.count(b"D\0\0\0\x0b") == 2


# --- frontend messages --------------------------------------------------------------------------


def test_parse_startup() -> None:
    assert ws.parse_startup(struct.pack(">I", ws.SSL_REQUEST)) == (ws.SSL_REQUEST, {})
    assert ws.parse_startup(struct.pack(">I", ws.GSSENC_REQUEST)) == (ws.GSSENC_REQUEST, {})
    body = struct.pack(">I", ws.PROTOCOL_3_0) + b"user\0postgres\0replication\0true\0\0"
    assert ws.parse_startup(body) == (ws.PROTOCOL_3_0, {"user": "postgres", "replication": "true"})
    with pytest.raises(ws.ProtocolError):
        ws.parse_startup(struct.pack(">I", 2 << 16) + b"\0")
    with pytest.raises(ws.ProtocolError):
        ws.parse_startup(struct.pack(">I", ws.PROTOCOL_3_0) + b"user\0postgres\0")
    with pytest.raises(ws.ProtocolError):
        ws.parse_startup(struct.pack(">I", ws.PROTOCOL_3_0) + b"user\0\0")
    with pytest.raises(ws.ProtocolError):
        ws.parse_startup(b"\0")


def test_split_message() -> None:
    msg = b"Q\0\0\0\x0bSHOW x\0" + b"X\0\0"
    assert ws.split_message(msg) == (b"Q", b"SHOW x\0", 12)
    assert ws.split_message(msg[:10]) is None
    assert ws.split_message(msg[12:]) is None
    with pytest.raises(ws.ProtocolError):
        ws.split_message(b"Q\0\0\0\x02")
    with pytest.raises(ws.ProtocolError):
        ws.split_message(b"d\x7f\0\0\0")


def test_parse_standby_message() -> None:
    r = ws.parse_standby_message(b"r" + struct.pack(">QQQqB", 3, 2, 1, 9, 1))
    assert (r.kind, r.write, r.flush, r.apply, r.send_time, r.reply) == ("r", 3, 2, 1, 9, True)
    h = ws.parse_standby_message(b"h" + struct.pack(">qIIII", 9, 700, 0, 0, 0))
    assert (h.kind, h.send_time, h.xmin) == ("h", 9, 700)
    with pytest.raises(ws.ProtocolError):
        ws.parse_standby_message(b"r\0\0")
    with pytest.raises(ws.ProtocolError):
        ws.parse_standby_message(b"z")


# --- replication commands -----------------------------------------------------------------------


def test_tokens() -> None:
    assert ws.tokens(" IDENTIFY_SYSTEM ;") == ["IDENTIFY_SYSTEM"]
    assert ws.tokens('START_REPLICATION SLOT "My ""Slot""" 0/1') == [
        "START_REPLICATION",
        "SLOT",
        'My "Slot"',
        "0/1",
    ]
    assert ws.tokens("") == []
    with pytest.raises(ws.CommandError):
        ws.tokens('SHOW "unterminated')


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("START_REPLICATION 0/3000000 TIMELINE 1", ws.StartReplication(BASE, 1, None)),
        ("start_replication physical 1/AB", ws.StartReplication((1 << 32) | 0xAB, None, None)),
        ('START_REPLICATION SLOT "s1" PHYSICAL 0/0', ws.StartReplication(0, None, "s1")),
        ("START_REPLICATION SLOT s1 0/10 TIMELINE 3", ws.StartReplication(16, 3, "s1")),
    ],
)
def test_parse_start_replication(command: str, expected: ws.StartReplication) -> None:
    assert ws.parse_start_replication(ws.tokens(command)) == expected


@pytest.mark.parametrize(
    "command",
    [
        "START_REPLICATION",
        "START_REPLICATION SLOT s LOGICAL 0/0",
        "START_REPLICATION zero",
        "START_REPLICATION 0/0 TIMELINE",
        "START_REPLICATION 0/0 TIMELINE one",
        "START_REPLICATION 0/0 extra words",
        "IDENTIFY_SYSTEM",
    ],
)
def test_parse_start_replication_refuses(command: str) -> None:
    with pytest.raises(ws.CommandError):
        ws.parse_start_replication(ws.tokens(command))


def test_show() -> None:
    msg = ws.show(["SHOW", "wal_segment_size"])
    assert ws.data_row(["16MB"]) in msg
    with pytest.raises(ws.CommandError) as e:
        ws.show(["SHOW", "work_mem"])
    assert e.value.code == ws.UNDEFINED_OBJECT


# --- the WAL a safekeeper may serve -------------------------------------------------------------


@pytest.fixture
def acceptor(tmp_path: Path) -> Iterator[Acceptor]:
    storage = Storage(str(tmp_path / "sk"))
    yield Acceptor(storage, "term-history", "sk")
    storage.close()


def hold(acceptor: Acceptor, data: bytes, commit: int, system_id: str = SYSTEM_ID) -> None:
    """Append `data` at the end of the safekeeper's WAL (from BASE) and set its commit LSN."""
    with acceptor.lock:
        storage = acceptor.storage
        storage.write(storage.flush_lsn or BASE, data)
        acceptor.control.commit_lsn = commit
        acceptor.control.system_id = system_id


def wal(n: int, start: int = 0) -> bytes:
    return bytes((start + i) % 251 for i in range(n))


def test_source_serves_up_to_commit_and_flush(acceptor: Acceptor) -> None:
    source = ws.WalSource(acceptor)
    assert source.bounds() == (0, 0, "")
    assert source.read(BASE) == (b"", 0)
    hold(acceptor, wal(1000), BASE + 600)
    assert source.bounds() == (BASE, BASE + 600, SYSTEM_ID)
    assert source.read(BASE) == (wal(600), BASE + 600)
    assert source.read(BASE + 100, limit=50) == (wal(50, 100), BASE + 600)
    assert source.read(BASE + 600) == (b"", BASE + 600)
    assert source.read(BASE - 1) == (b"", BASE + 600)
    with acceptor.lock:  # a commit LSN beyond this safekeeper's WAL: its flush LSN bounds it
        acceptor.control.commit_lsn = BASE + 5000
    assert source.read(BASE + 900) == (wal(100, 900), BASE + 1000)


# --- a conversation with libpq --------------------------------------------------------------------


@pytest.fixture
def server(acceptor: Acceptor) -> Iterator[tuple[ws.WalSenderServer, Acceptor]]:
    srv = ws.start(("127.0.0.1", 0), acceptor)
    yield srv, acceptor
    srv.shutdown()
    srv.server_close()


class Client:
    """libpq driven asynchronously: its blocking calls (PQconnectdb, PQexec) hold the GIL that
    the server's thread in this same process needs in order to answer them."""

    def __init__(self, srv: ws.WalSenderServer, replication: str = "true") -> None:
        port = srv.server_address[1]
        conninfo = f"host=127.0.0.1 port={port} user=postgres replication={replication}"
        self.conn = conn = pq.PGconn.connect_start(f"{conninfo} application_name=t".encode())
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            state = conn.connect_poll()
            if state in (pq.PollingStatus.OK, pq.PollingStatus.FAILED):
                break
            sock = [conn.socket]
            select.select(*((sock, []) if state == pq.PollingStatus.READING else ([], sock)), [], 1)
        if conn.status == pq.ConnStatus.OK:
            conn.nonblocking = 1

    def wait(self, timeout: float = 1.0) -> None:
        select.select([self.conn.socket], [], [], timeout)
        self.conn.consume_input()

    def flush(self) -> None:
        while self.conn.flush():
            select.select([], [self.conn.socket], [], 1)

    def execute(self, sql: str, extended: bool = False) -> pq.PGresult:
        """The last result of `sql`, or the first one that starts a copy; `extended` sends it
        with the extended query protocol (Parse, Bind, Execute, Sync)."""
        if extended:
            self.conn.send_query_params(sql.encode(), None)
        else:
            self.conn.send_query(sql.encode())
        self.flush()
        last, deadline = None, time.monotonic() + 5
        while time.monotonic() < deadline:
            while self.conn.is_busy() and time.monotonic() < deadline:
                self.wait()
            res = self.conn.get_result()
            if res is None:
                break
            last = res
            if res.status in (pq.ExecStatus.COPY_BOTH, pq.ExecStatus.COPY_OUT):
                break
        assert last is not None, f"no result for {sql!r}"
        return last

    def rows(self, sql: str) -> list[list[str | None]]:
        res = self.execute(sql)
        assert res.status == pq.ExecStatus.TUPLES_OK, res.error_message
        values = [[res.get_value(r, c) for c in range(res.nfields)] for r in range(res.ntuples)]
        return [[None if v is None else bytes(v).decode() for v in row] for row in values]

    def error(self, sql: str, extended: bool = False) -> str:
        res = self.execute(sql, extended)
        assert res.status == pq.ExecStatus.FATAL_ERROR, res.status
        return res.error_message.decode()

    def receive(self, until: int, timeout: float = 5.0) -> bytes:
        """WAL from the stream until it reaches `until` (or the timeout), checking that it
        arrives contiguously."""
        data, deadline, pos = b"", time.monotonic() + timeout, None
        while time.monotonic() < deadline and (pos is None or pos < until):
            n, msg = self.conn.get_copy_data(1)
            if n == 0:
                self.wait(0.05)
                continue
            assert n > 0, self.conn.get_error_message()
            msg = bytes(msg)
            if msg[:1] == b"w":
                start, _, _ = ws.XLOG_DATA.unpack_from(msg, 1)
                assert pos is None or start == pos, "the stream skipped or repeated WAL"
                data += msg[1 + ws.XLOG_DATA.size :]
                pos = start + len(msg) - 1 - ws.XLOG_DATA.size
        return data

    def send_copy_data(self, payload: bytes) -> None:
        assert self.conn.put_copy_data(payload) == 1
        self.flush()

    def end_copy(self) -> pq.PGresult:
        """Our CopyDone; the server's follows whatever it had in flight, then its result."""
        assert self.conn.put_copy_end() == 1
        self.flush()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            n, _ = self.conn.get_copy_data(1)
            if n == 0:
                self.wait(0.05)
            elif n < 0:
                break
        while self.conn.is_busy() and time.monotonic() < deadline:
            self.wait()
        res = self.conn.get_result()
        assert res is not None
        while self.conn.is_busy() and time.monotonic() < deadline:
            self.wait()
        assert self.conn.get_result() is None
        return res


def test_conversation_with_libpq(server: tuple[ws.WalSenderServer, Acceptor]) -> None:
    srv, acceptor = server
    hold(acceptor, wal(300_000), BASE + 200_000)
    client = Client(srv)
    conn = client.conn
    assert conn.status == pq.ConnStatus.OK, conn.get_error_message()
    assert conn.server_version == 150000
    assert conn.parameter_status(b"integer_datetimes") == b"on"

    assert client.rows("IDENTIFY_SYSTEM") == [[SYSTEM_ID, "1", "0/3030D40", None]]
    assert client.rows("SHOW wal_segment_size") == [["16MB"]]
    assert "only timeline 1" in client.error("TIMELINE_HISTORY 2")
    assert "does not run SELECT" in client.error("SELECT 1")
    assert "takes simple queries" in client.error("IDENTIFY_SYSTEM", extended=True)
    assert client.rows("SHOW server_version_num") == [["150000"]]  # in step after the refusal
    assert "not in this server's history" in client.error("START_REPLICATION 0/3000000 TIMELINE 2")
    assert "precedes" in client.error("START_REPLICATION 0/2000000 TIMELINE 1")

    res = client.execute('START_REPLICATION SLOT "follower" PHYSICAL 0/3000000 TIMELINE 1')
    assert res.status == pq.ExecStatus.COPY_BOTH, res.error_message
    assert client.receive(BASE + 200_000) == wal(200_000)
    assert client.receive(BASE + 200_001, timeout=0.5) == b"", "WAL past the commit was sent"
    client.send_copy_data(b"r" + ws.STANDBY_STATUS.pack(BASE, BASE, BASE, ws.now_pg(), 0))

    hold(acceptor, wal(10, 300_000), BASE + 300_010)  # the commit LSN advances: the rest follows
    assert client.receive(BASE + 300_010) == wal(100_010, 200_000)

    res = client.end_copy()
    assert res.status == pq.ExecStatus.COMMAND_OK, res.error_message
    assert res.command_status == b"START_STREAMING"
    assert client.rows("IDENTIFY_SYSTEM")[0][2] == "0/30493EA"  # back to commands
    conn.finish()


def test_stream_waits_for_wal_not_committed_yet(server: tuple[ws.WalSenderServer, Acceptor]):
    srv, acceptor = server
    hold(acceptor, wal(100), BASE + 100)
    client = Client(srv)
    res = client.execute("START_REPLICATION 0/3000200 TIMELINE 1")  # ahead of the commit LSN
    assert res.status == pq.ExecStatus.COPY_BOTH, res.error_message
    assert client.receive(BASE + 0x200, timeout=0.3) == b""
    hold(acceptor, wal(0x300, 100), BASE + 0x300)
    assert client.receive(BASE + 0x300) == wal(0x100, 0x200)
    client.conn.finish()


def test_only_replication_connections(server: tuple[ws.WalSenderServer, Acceptor]) -> None:
    srv, _ = server
    client = Client(srv, replication="false")
    assert client.conn.status == pq.ConnStatus.BAD
    assert "replication connections only" in client.conn.get_error_message()
    client.conn.finish()
    client = Client(srv)  # a safekeeper that was never greeted has no system to identify
    assert "not been given" in client.error("IDENTIFY_SYSTEM")
    assert "holds no WAL" in client.error("START_REPLICATION 0/0")
    client.conn.finish()
