"""A safekeeper as a WAL server for Postgres standbys (seed 001: "any of safekeepers can be used as
WAL server, producing replication stream"): the server side of Postgres's frontend/backend
protocol v3, only as much of it as physical streaming replication needs.

A standby whose primary_conninfo points here connects with replication=true, asks
IDENTIFY_SYSTEM (the system id is the one the proxy greeted this safekeeper with, the timeline
is always 1: the primary is never promoted) and then START_REPLICATION at the start of a
segment. It gets XLogData messages up to min(commit LSN, flush LSN): only WAL that a quorum
holds, so a standby fed by safekeepers never holds WAL that a later election could drop. The
stream waits (with keepalives) for WAL that has not been committed yet, including when the
standby asks for a start beyond it.

There is no authentication (AuthenticationOk to anyone: the harness's network trusts all) and no
SQL: SHOW of a few settings, IDENTIFY_SYSTEM, READ_REPLICATION_SLOT, TIMELINE_HISTORY and
START_REPLICATION ... PHYSICAL are the whole command set. Replication slots are accepted by name
and ignored: a safekeeper keeps its whole WAL file.

WAL is read through the daemon's Storage under the Acceptor's lock, one chunk of at most
MAX_SEND bytes at a time, so a standby never holds the lock while it waits on its socket.
"""

from __future__ import annotations

import logging
import os
import re
import select
import socket
import socketserver
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .replication import KEEPALIVE, STANDBY_STATUS, XLOG_DATA, now_pg
from .wire import lsn_str, parse_lsn

if TYPE_CHECKING:
    from .acceptor import Acceptor

log = logging.getLogger("walsender")

PROTOCOL_3_0 = 3 << 16
SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
CANCEL_REQUEST = 80877102
MAX_STARTUP = 10_000  # Postgres's own limit on a startup packet
STARTUP_TIMEOUT = 60.0  # authentication_timeout: a client that never finishes its startup
MAX_MESSAGE = 1 << 20  # nothing a standby sends us is larger

TIMELINE = 1
SERVER_VERSION = "15.0 (walkeeper safekeeper)"
SEGMENT_SIZE = "16MB"  # Postgres's default; the cluster's Postgres keeps it
MAX_SEND = 128 << 10  # Postgres's walsender sends at most XLOG_BLCKSZ * 16 per message
POLL = 0.05  # how often a caught-up stream looks for newly committed WAL
KEEPALIVE_INTERVAL = 5.0  # a keepalive after this long without sending anything
STANDBY_TIMEOUT = 60.0  # wal_sender_timeout: a standby silent this long is dropped
SEND_TIMEOUT = 30.0  # a standby that reads nothing for this long is dropped

HOT_STANDBY_FEEDBACK = struct.Struct(">qIIII")  # after 'h': time, xmin, epoch, catalog ones

TEXT_OID, INT4_OID, INT8_OID = 25, 23, 20

PARAMETERS = {  # ParameterStatus after authentication: what libpq and its users look at
    "server_version": SERVER_VERSION,
    "server_encoding": "UTF8",
    "client_encoding": "UTF8",
    "DateStyle": "ISO, MDY",
    "IntervalStyle": "postgres",
    "TimeZone": "UTC",
    "integer_datetimes": "on",
    "standard_conforming_strings": "on",
    "is_superuser": "on",
    "in_hot_standby": "off",
    "default_transaction_read_only": "off",
}

SETTINGS = {  # what SHOW answers in a replication connection
    "wal_segment_size": SEGMENT_SIZE,
    "server_version": SERVER_VERSION,
    "server_version_num": "150000",
    "integer_datetimes": "on",
    "server_encoding": "UTF8",
    "timezone": "UTC",
    "data_directory_mode": "0700",
    "block_size": "8192",
    "wal_block_size": "8192",
}

# SQLSTATEs
PROTOCOL_VIOLATION = "08P01"
FEATURE_NOT_SUPPORTED = "0A000"
SYNTAX_ERROR = "42601"
UNDEFINED_OBJECT = "42704"
UNDEFINED_FILE = "58P01"
OBJECT_NOT_IN_STATE = "55000"
REJECTED_CONNECTION = "08004"


class ProtocolError(Exception):
    """The client broke the protocol; the connection ends."""


class CommandError(Exception):
    """A command fails with an ErrorResponse; the connection goes on."""

    def __init__(self, message: str, code: str = FEATURE_NOT_SUPPORTED) -> None:
        super().__init__(message)
        self.code = code


# --- backend messages ---------------------------------------------------------------------------


def message(kind: bytes, body: bytes = b"") -> bytes:
    """One backend message: its type byte, its length (including itself), its body."""
    return kind + struct.pack(">I", len(body) + 4) + body


def cstr(text: str) -> bytes:
    return text.encode() + b"\0"


def auth_ok() -> bytes:
    return message(b"R", struct.pack(">I", 0))


def parameter_status(name: str, value: str) -> bytes:
    return message(b"S", cstr(name) + cstr(value))


def backend_key_data(pid: int, key: int) -> bytes:
    return message(b"K", struct.pack(">II", pid & 0xFFFFFFFF, key & 0xFFFFFFFF))


def negotiate_protocol_version(minor: int, unknown: list[str]) -> bytes:
    body = struct.pack(">II", minor, len(unknown)) + b"".join(cstr(o) for o in unknown)
    return message(b"v", body)


def ready_for_query(status: bytes = b"I") -> bytes:
    return message(b"Z", status)


def row_description(columns: list[tuple[str, int]]) -> bytes:
    """Columns as (name, type OID), all in text format."""
    body = struct.pack(">H", len(columns))
    for name, oid in columns:
        size = 8 if oid == INT8_OID else 4 if oid == INT4_OID else -1
        body += cstr(name) + struct.pack(">IhIhih", 0, 0, oid, size, -1, 0)
    return message(b"T", body)


def data_row(values: list[str | None]) -> bytes:
    body = struct.pack(">H", len(values))
    for value in values:
        if value is None:
            body += struct.pack(">i", -1)
        else:
            data = value.encode()
            body += struct.pack(">i", len(data)) + data
    return message(b"D", body)


def command_complete(tag: str) -> bytes:
    return message(b"C", cstr(tag))


def empty_query_response() -> bytes:
    return message(b"I")


def error_response(text: str, code: str, severity: str = "ERROR") -> bytes:
    fields = [(b"S", severity), (b"V", severity), (b"C", code), (b"M", text)]
    return message(b"E", b"".join(k + cstr(v) for k, v in fields) + b"\0")


def copy_both_response() -> bytes:
    return message(b"W", struct.pack(">bH", 0, 0))


def copy_data(payload: bytes) -> bytes:
    return message(b"d", payload)


def copy_done() -> bytes:
    return message(b"c")


def xlog_data(start: int, wal_end: int, data: bytes, send_time: int | None = None) -> bytes:
    t = now_pg() if send_time is None else send_time
    return copy_data(b"w" + XLOG_DATA.pack(start, wal_end, t) + data)


def keepalive(wal_end: int, reply: bool = False, send_time: int | None = None) -> bytes:
    t = now_pg() if send_time is None else send_time
    return copy_data(b"k" + KEEPALIVE.pack(wal_end, t, int(reply)))


def result_set(columns: list[tuple[str, int]], rows: list[list[str | None]], tag: str) -> bytes:
    return row_description(columns) + b"".join(data_row(r) for r in rows) + command_complete(tag)


# --- frontend messages --------------------------------------------------------------------------


def parse_startup(body: bytes) -> tuple[int, dict[str, str]]:
    """A startup-phase packet without its length: the request code, and for a StartupMessage its
    parameters (for the special requests, none)."""
    if len(body) < 4:
        raise ProtocolError("startup packet too short")
    (code,) = struct.unpack_from(">I", body)
    if code in (SSL_REQUEST, GSSENC_REQUEST, CANCEL_REQUEST):
        return code, {}
    if code >> 16 != 3:
        raise ProtocolError(f"unsupported frontend protocol {code >> 16}.{code & 0xFFFF}")
    parts = body[4:].split(b"\0")
    # key\0value\0 ... \0: an even number of strings, then the final empty one (and the split's)
    if len(parts) < 2 or parts[-1] != b"" or parts[-2] != b"" or len(parts) % 2:
        raise ProtocolError("malformed startup packet")
    strings = [p.decode(errors="replace") for p in parts[:-2]]
    return code, dict(zip(strings[::2], strings[1::2], strict=True))


def split_message(buf: bytes | bytearray) -> tuple[bytes, bytes, int] | None:
    """The first complete message of `buf` as (type, body, bytes consumed), None if incomplete."""
    if len(buf) < 5:
        return None
    (length,) = struct.unpack_from(">I", buf, 1)
    if length < 4 or length > MAX_MESSAGE:
        raise ProtocolError(f"invalid message length {length}")
    if len(buf) < 1 + length:
        return None
    return bytes(buf[:1]), bytes(buf[5 : 1 + length]), 1 + length


@dataclass
class StandbyReply:
    """What a standby reports in CopyData: 'r' (positions) or 'h' (hot standby feedback)."""

    kind: str
    write: int = 0
    flush: int = 0
    apply: int = 0
    send_time: int = 0
    reply: bool = False
    xmin: int = 0


def parse_standby_message(payload: bytes) -> StandbyReply:
    kind = payload[:1]
    if kind == b"r" and len(payload) >= 1 + STANDBY_STATUS.size:
        write, flush, apply, t, reply = STANDBY_STATUS.unpack_from(payload, 1)
        return StandbyReply("r", write, flush, apply, t, bool(reply))
    if kind == b"h" and len(payload) >= 1 + HOT_STANDBY_FEEDBACK.size:
        t, xmin, _, _, _ = HOT_STANDBY_FEEDBACK.unpack_from(payload, 1)
        return StandbyReply("h", send_time=t, xmin=xmin)
    raise ProtocolError(f"unexpected standby message {payload[:1]!r} of {len(payload)} bytes")


# --- replication commands -----------------------------------------------------------------------

TOKEN = re.compile(r'\s*(?:"((?:[^"]|"")*)"|([^\s";]+))')


def tokens(query: str) -> list[str]:
    """The words of a replication command; double-quoted identifiers keep their case, and a
    trailing semicolon is dropped."""
    text = query.strip().rstrip(";").strip()
    out, pos = [], 0
    while pos < len(text):
        m = TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise CommandError(f"syntax error in {query!r}", SYNTAX_ERROR)
        out.append(m.group(1).replace('""', '"') if m.group(1) is not None else m.group(2))
        pos = m.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return out


@dataclass
class StartReplication:
    lsn: int
    timeline: int | None = None
    slot: str | None = None


def parse_start_replication(words: list[str]) -> StartReplication:
    """START_REPLICATION [SLOT name] [PHYSICAL] X/X [TIMELINE n]; LOGICAL is refused."""
    if not words or words[0].upper() != "START_REPLICATION":
        raise CommandError("not a START_REPLICATION command", SYNTAX_ERROR)
    rest = words[1:]
    slot = None
    if len(rest) >= 2 and rest[0].upper() == "SLOT":
        slot, rest = rest[1], rest[2:]
    if rest and rest[0].upper() == "LOGICAL":
        raise CommandError("a safekeeper serves physical replication only")
    if rest and rest[0].upper() == "PHYSICAL":
        rest = rest[1:]
    if not rest:
        raise CommandError("START_REPLICATION needs a start position", SYNTAX_ERROR)
    try:
        lsn = parse_lsn(rest[0])
    except ValueError as e:
        raise CommandError(f"invalid start position {rest[0]!r}", SYNTAX_ERROR) from e
    rest = rest[1:]
    timeline = None
    if len(rest) == 2 and rest[0].upper() == "TIMELINE" and rest[1].isdigit():
        timeline, rest = int(rest[1]), []
    if rest:
        raise CommandError(f"unexpected {' '.join(rest)!r} in START_REPLICATION", SYNTAX_ERROR)
    return StartReplication(lsn, timeline, slot)


def show(words: list[str]) -> bytes:
    if len(words) != 2:
        raise CommandError("SHOW takes one setting name", SYNTAX_ERROR)
    name = words[1]
    value = SETTINGS.get(name.lower())
    if value is None:
        raise CommandError(f'unrecognized configuration parameter "{name}"', UNDEFINED_OBJECT)
    return result_set([(name, TEXT_OID)], [[value]], "SHOW")


# --- the WAL a safekeeper may serve -------------------------------------------------------------


class WalSource:
    """The safekeeper's WAL as a standby may see it: [base LSN, min(commit, flush)), read under
    the acceptor's lock in chunks, so the lock is held for one pread at most."""

    def __init__(self, acceptor: Acceptor) -> None:
        self.acceptor = acceptor

    def bounds(self) -> tuple[int, int, str]:
        """(first LSN held, end of what may be served, system id)."""
        with self.acceptor.lock:
            c, storage = self.acceptor.control, self.acceptor.storage
            flush = storage.flush_lsn
            return c.base_lsn, min(c.commit_lsn, flush), c.system_id

    def read(self, start: int, limit: int = MAX_SEND) -> tuple[bytes, int]:
        """Up to `limit` servable bytes from `start` (none if it has none yet), and the end of
        what may be served."""
        with self.acceptor.lock:
            c, storage = self.acceptor.control, self.acceptor.storage
            end = min(c.commit_lsn, storage.flush_lsn)
            if not c.base_lsn or start < c.base_lsn or start >= end:
                return b"", end
            return storage.read(start, min(end, start + limit)), end


# --- a connection -------------------------------------------------------------------------------


@dataclass
class Connection:
    sock: socket.socket
    source: WalSource
    peer: str
    params: dict[str, str] = field(default_factory=dict)
    buf: bytearray = field(default_factory=bytearray)

    # -- io

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def fill(self, timeout: float | None) -> bool:
        """Read what has arrived into the buffer, waiting up to `timeout` (None: forever);
        False when nothing arrived in time. A closed connection raises ConnectionError."""
        if timeout is not None:
            ready, _, _ = select.select([self.sock], [], [], timeout)
            if not ready:
                return False
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise ConnectionError("the client closed the connection")
        self.buf += chunk
        return True

    def exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            self.fill(None)
        data = bytes(self.buf[:n])
        del self.buf[:n]
        return data

    def next_message(self, timeout: float | None = None) -> tuple[bytes, bytes] | None:
        """The next frontend message, waiting up to `timeout`; None if none arrived in time."""
        while True:
            found = split_message(self.buf)
            if found:
                kind, body, used = found
                del self.buf[:used]
                return kind, body
            if not self.fill(timeout) and timeout is not None:
                return None

    # -- phases

    def run(self) -> None:
        self.sock.settimeout(STARTUP_TIMEOUT)
        if not self.startup():
            return
        self.sock.settimeout(None)
        skipping = False  # after an unsupported message, the rest up to Sync is ignored
        while True:
            found = self.next_message()
            assert found is not None
            kind, body = found
            if kind == b"X":
                return
            if kind == b"S":
                skipping = False
                self.send(ready_for_query())
            elif skipping:
                continue
            elif kind == b"Q":
                if not self.query(body.rstrip(b"\0").decode(errors="replace")):
                    return
            else:  # the extended query protocol, a function call: Postgres refuses them too here
                text = (
                    f"unsupported message {kind!r}: a replication connection takes simple queries"
                )
                self.send(error_response(text, PROTOCOL_VIOLATION))
                skipping = True

    def startup(self) -> bool:
        """SSL and GSS encryption are declined; then the StartupMessage. True if it accepted."""
        while True:
            (length,) = struct.unpack(">I", self.exactly(4))
            if length < 8 or length > MAX_STARTUP:
                raise ProtocolError(f"invalid startup packet length {length}")
            code, params = parse_startup(self.exactly(length - 4))
            if code in (SSL_REQUEST, GSSENC_REQUEST):
                self.send(b"N")
                continue
            if code == CANCEL_REQUEST:
                return False  # nothing to cancel: a stream ends when its standby leaves
            break
        self.params = params
        replication = params.get("replication", "false").lower()
        if replication not in ("true", "on", "yes", "1", "database"):
            self.send(
                error_response(
                    "a safekeeper accepts replication connections only (replication=true)",
                    REJECTED_CONNECTION,
                    "FATAL",
                )
            )
            return False
        out = b""
        unknown = sorted(k for k in params if k.startswith("_pq_."))
        if code & 0xFFFF or unknown:
            out += negotiate_protocol_version(0, unknown)
        out += auth_ok()
        settings = PARAMETERS | {"application_name": params.get("application_name", "")}
        settings["session_authorization"] = params.get("user", "")
        out += b"".join(parameter_status(k, v) for k, v in settings.items())
        out += backend_key_data(os.getpid(), threading.get_ident())
        self.send(out + ready_for_query())
        log.info(
            "%s: replication connection of %s (%s)",
            self.peer,
            params.get("user", "?"),
            params.get("application_name", "no application_name"),
        )
        return True

    def query(self, sql: str) -> bool:
        """Answer one simple query; False if the connection must end."""
        try:
            words = tokens(sql)
            if not words:
                self.send(empty_query_response() + ready_for_query())
                return True
            command = words[0].upper()
            if command == "IDENTIFY_SYSTEM":
                self.send(self.identify_system() + ready_for_query())
            elif command == "SHOW":
                self.send(show(words) + ready_for_query())
            elif command == "TIMELINE_HISTORY":
                raise CommandError(
                    f"timeline {' '.join(words[1:])} has no history file: this server has "
                    "only timeline 1",
                    UNDEFINED_FILE,
                )
            elif command == "READ_REPLICATION_SLOT":
                columns = [("slot_type", TEXT_OID), ("restart_lsn", TEXT_OID)]
                columns.append(("restart_tli", INT8_OID))
                rows: list[list[str | None]] = [[None, None, None]]
                self.send(result_set(columns, rows, "READ_REPLICATION_SLOT") + ready_for_query())
            elif command == "START_REPLICATION":
                if not self.stream(parse_start_replication(words)):
                    return False
                self.send(command_complete("START_STREAMING") + ready_for_query())
            else:
                raise CommandError(
                    f"a safekeeper does not run {command}: it serves IDENTIFY_SYSTEM, SHOW, "
                    "START_REPLICATION (physical) and nothing else"
                )
        except CommandError as e:
            log.info("%s: %r: %s", self.peer, sql, e)
            self.send(error_response(str(e), e.code) + ready_for_query())
        return True

    def identify_system(self) -> bytes:
        _, end, system_id = self.source.bounds()
        if not system_id:
            raise CommandError(
                "this safekeeper has not been given a system's WAL yet", OBJECT_NOT_IN_STATE
            )
        dbname = (
            self.params.get("database") if self.params.get("replication") == "database" else None
        )
        columns = [("systemid", TEXT_OID), ("timeline", INT4_OID), ("xlogpos", TEXT_OID)]
        columns.append(("dbname", TEXT_OID))
        row: list[str | None] = [system_id, str(TIMELINE), lsn_str(end), dbname]
        return result_set(columns, [row], "IDENTIFY_SYSTEM")

    def stream(self, cmd: StartReplication) -> bool:
        """Stream WAL from `cmd.lsn` until the standby ends the copy (True) or leaves (False)."""
        if cmd.timeline is not None and cmd.timeline != TIMELINE:
            raise CommandError(
                f"requested timeline {cmd.timeline} is not in this server's history",
                OBJECT_NOT_IN_STATE,
            )
        base, end, _ = self.source.bounds()
        if not base:
            raise CommandError("this safekeeper holds no WAL yet", OBJECT_NOT_IN_STATE)
        if cmd.lsn < base:
            raise CommandError(
                f"requested WAL at {lsn_str(cmd.lsn)} precedes this safekeeper's first WAL at "
                f"{lsn_str(base)}",
                UNDEFINED_FILE,
            )
        log.info(
            "%s: streaming from %s (slot %s), committed WAL ends at %s",
            self.peer,
            lsn_str(cmd.lsn),
            cmd.slot or "none",
            lsn_str(end),
        )
        self.send(copy_both_response())
        self.sock.settimeout(SEND_TIMEOUT)
        pos, last_sent, heard = cmd.lsn, time.monotonic(), time.monotonic()
        asked = False  # a keepalive asked for a reply that has not come yet
        while True:
            data, end = self.source.read(pos)
            if data:
                self.send(xlog_data(pos, end, data))
                pos += len(data)
                last_sent = time.monotonic()
            reply_now = False
            while True:  # everything the standby has sent, without waiting if WAL is flowing
                found = self.next_message(0 if data else POLL)
                if found is None:
                    break
                heard, asked = time.monotonic(), False
                kind, body = found
                if kind == b"d":
                    reply = parse_standby_message(body)
                    reply_now = reply_now or reply.reply
                    if reply.kind == "r":
                        log.debug(
                            "%s: standby flushed %s, applied %s",
                            self.peer,
                            lsn_str(reply.flush),
                            lsn_str(reply.apply),
                        )
                elif kind == b"c":  # CopyDone: ours, then back to commands
                    self.send(copy_done())
                    log.info("%s: standby ended the stream at %s", self.peer, lsn_str(pos))
                    self.sock.settimeout(None)
                    return True
                elif kind == b"X":
                    return False
                else:
                    raise ProtocolError(f"unexpected message {kind!r} during replication")
            silent = time.monotonic() - heard
            if silent > STANDBY_TIMEOUT:
                log.info("%s: standby silent for %.0f s, dropping it", self.peer, silent)
                return False
            ask = silent > STANDBY_TIMEOUT / 2 and not asked
            if reply_now or ask or time.monotonic() - last_sent > KEEPALIVE_INTERVAL:
                self.send(keepalive(end, ask))
                asked = asked or ask
                last_sent = time.monotonic()


# --- the server ---------------------------------------------------------------------------------


class Handler(socketserver.BaseRequestHandler):
    server: WalSenderServer

    def handle(self) -> None:
        sock: socket.socket = self.request
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = "{}:{}".format(*self.client_address[:2])
        try:
            Connection(sock, self.server.source, peer).run()
        except (ConnectionError, ProtocolError, OSError) as e:
            log.info("%s: replication connection ended: %s", peer, e)


class WalSenderServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], acceptor: Acceptor) -> None:
        self.source = WalSource(acceptor)
        super().__init__(address, Handler)


def start(address: tuple[str, int], acceptor: Acceptor) -> WalSenderServer:
    """Listen on `address` and serve standbys from a daemon thread; returns the server."""
    server = WalSenderServer(address, acceptor)
    thread = threading.Thread(target=server.serve_forever, daemon=True, name="walsender")
    thread.start()
    log.info("serving WAL to standbys on %s:%d", *server.server_address[:2])
    return server
