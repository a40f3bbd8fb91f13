"""The proxy: Postgres's synchronous standby, and the proposer to the safekeepers.

A session streams Postgres's WAL in a term its compute has won (compute.py runs the election and
brings Postgres to the log first), hands WAL to one sender thread per safekeeper, and reports the
quorum's position back to Postgres. Anything that ends a session (Postgres gone, another
proposer elected, no quorum, Postgres's WAL not the log) ends it whole; the compute agent decides
what follows: a new election with a higher term (seed 001: a restart of the proxy starts a new
round of voting), stepping down to rebuild when another compute serves, or a rebuild when its
Postgres cannot continue the log.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import socket
import socketserver
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from . import bugs, wire
from .pgstream import PgStream, StreamError
from .proposer import Deposed, NoQuorum, Proposer, Refused

log = logging.getLogger("proxy")

HEARTBEAT = 1.0
RETRY = 0.5
FEEDBACK_INTERVAL = 1.0
OVERLAP = 8192  # bytes before VCL that Postgres's stream must repeat at every session start
# What Postgres answers when its WAL cannot give the stream from just before VCL: it does not
# reach VCL, or it no longer holds the segment (no retry changes either)
CANNOT_CONTINUE = ("ahead of the WAL flush position", "has already been removed")


class LogMismatch(StreamError):
    """Postgres's WAL is not the log the term continues: this compute cannot lead until it is
    rebuilt (a transient end of the stream is a plain StreamError)."""


class Overlap:
    """Where the safekeepers' log meets Postgres's WAL. The stream starts a little before VCL;
    those bytes must equal the safekeepers' (the donor's) exactly, and only what follows VCL
    continues the log. Postgres 15 keeps every streamed prefix valid across its crash recovery
    (it writes an overwrite-contrecord rather than rewriting a torn record's pages), so a
    mismatch means the two logs are not one: the proxy stops rather than acknowledge commits
    on a log no safekeeper holds."""

    def __init__(self, start: int, vcl: int, expected: bytes) -> None:
        self.start, self.vcl, self.expected = start, vcl, expected

    def take(self, lsn: int, body: bytes) -> tuple[int, bytes]:
        """Check the part of a message before VCL; return what continues the log."""
        if lsn >= self.vcl:
            return lsn, body
        lo, hi = max(lsn, self.start), min(lsn + len(body), self.start + len(self.expected))
        ours, theirs = body[lo - lsn : hi - lsn], self.expected[lo - self.start : hi - self.start]
        if ours != theirs:
            at = lo + next(i for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a != b)
            raise LogMismatch(
                f"Postgres's WAL differs from the safekeepers' at {wire.lsn_str(at)}: "
                "refusing to continue their log with it"
            )
        return self.vcl, body[max(0, self.vcl - lsn) :]


def proposer_id() -> str:
    """This compute's proposer name for one term: the host, so that computes can tell whose term
    it is, and a nonce, so that each session is a proposer of its own."""
    return f"{socket.gethostname()}-{uuid.uuid4().hex[:8]}"


def is_ours(proposer: str) -> bool:
    return proposer.rpartition("-")[0] == socket.gethostname()


class Session:
    def __init__(
        self,
        conninfo: str,
        slot: str,
        proposer: Proposer,
        lease: float | None = None,
        on_ready: Callable[[int], None] = lambda lsn: None,
    ):
        """Stream Postgres's WAL in the term `proposer` has won. With a `lease`, the session ends
        when no quorum has answered for that long (another compute may take over). `on_ready`
        is called once, with the LSN, when the quorum holds everything Postgres had written when
        the stream began: only then may its Postgres serve (nothing it shows is then lost with
        this compute, and its WAL is, up to VCL, the committed log)."""
        self.conninfo, self.slot, self.lease, self.on_ready = conninfo, slot, lease, on_ready
        self.proposer = proposer
        self.stop = threading.Event()
        self.failure: BaseException | None = None
        self.threads: list[threading.Thread] = []
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        self.proposer.on_commit = lambda lsn: self._wake()
        self.overlap = Overlap(0, 0, b"")
        self.ready_at: int | None = None  # Postgres's flush LSN when the stream began
        self.closed = False

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self.wake_w, b"x")

    def fail(self, error: BaseException) -> None:
        """End the session with `error` (from any thread)."""
        if self.failure is None:
            self.failure = error
        self.stop.set()
        self._wake()

    def check(self) -> None:
        """Raise what ended the session, if anything has."""
        if self.failure is not None:
            raise self.failure

    def follow_all(self) -> None:
        """Start keeping every safekeeper caught up (and hearing from us) while the session
        lasts; a takeover starts this before Postgres is caught up, so the term it won is not
        taken for silent meanwhile."""
        if self.threads:
            return
        for name in self.proposer.peers:
            t = threading.Thread(target=self.follow, args=(name,), daemon=True, name=name)
            t.start()
            self.threads.append(t)

    def follow(self, name: str) -> None:
        """Keep one safekeeper caught up, reconnecting after any error, until the session ends."""
        p = self.proposer
        while not self.stop.is_set():
            try:
                p.attach(name)
                log.info("%s attached at %s", name, wire.lsn_str(p.peers[name].position or 0))
                while not self.stop.is_set():
                    if not p.step(name):
                        p.wait_for_wal(name, HEARTBEAT)
            except Deposed as e:
                self.fail(e)
            except (OSError, wire.ProtocolError, Refused) as e:
                log.info("%s: %s; reconnecting", name, e)
                p.detach(name)
                self.stop.wait(RETRY)
        p.detach(name)

    def run(self) -> None:
        """Stream from Postgres (running) until the session ends; raises what ended it."""
        pg = PgStream(self.conninfo)
        try:
            system = pg.identify()
            p = self.proposer
            p.begin(system.xlogpos - system.xlogpos % system.segment_size)
            self.follow_all()
            vcl = p.vcl
            start = max(p.log_start, vcl - OVERLAP, vcl - vcl % system.segment_size)
            self.overlap = Overlap(start, vcl, p.read_log(start, vcl) if start < vcl else b"")
            try:
                pg.start(self.slot, start, system.timeline)
                self.ready_at = system.xlogpos
                log.info(
                    "streaming from Postgres at %s (VCL %s, Postgres's WAL ends at %s)",
                    wire.lsn_str(start),
                    wire.lsn_str(vcl),
                    wire.lsn_str(system.xlogpos),
                )
                self.pump(pg)
            except StreamError as e:
                if any(sign in str(e) for sign in CANNOT_CONTINUE):
                    raise LogMismatch(f"Postgres cannot stream the log from its VCL: {e}") from e
                raise
        finally:
            self.close()
            pg.close()

    def close(self) -> None:
        """Stop the followers and release the session's descriptors (once)."""
        self.stop.set()
        self._wake()
        for t in self.threads:
            t.join(5)
        if not self.closed:
            self.closed = True
            os.close(self.wake_r)
            os.close(self.wake_w)

    def pump(self, pg: PgStream) -> None:
        p = self.proposer
        reported, last = -1, 0.0
        ready: list[int] = []
        while not self.stop.is_set():
            if self.wake_r in ready:
                os.read(self.wake_r, 4096)
            reply = False
            # Drained every round, readable or not: libpq may hold messages it has read off the
            # socket already (START_REPLICATION's reply can bring the first WAL with it), and
            # select() sees only the socket. Waiting on it then held a takeover's WAL, and so
            # its serving, until Postgres next wrote WAL (15 s later, or never).
            for kind, lsn, body in pg.messages():
                if kind == "w":
                    lsn, body = self.overlap.take(lsn, body)  # type: ignore[arg-type]
                    if body:
                        p.write(body, lsn)
                else:
                    reply = reply or bool(body)
            if self.lease and p.quorum_silent_for() > self.lease:
                raise NoQuorum(f"no quorum of safekeepers answered for {self.lease:g} s")
            # the planted bug acknowledges what the proxy holds, not what a quorum holds
            commit = p.log_end if bugs.on("ack-before-quorum") else p.commit_lsn
            if reply or commit != reported or time.monotonic() - last > FEEDBACK_INTERVAL:
                pg.feedback(commit)
                reported, last = commit, time.monotonic()
            if self.ready_at is not None and p.commit_lsn >= self.ready_at:
                self.ready_at = None
                self.on_ready(p.commit_lsn)
            ready, _, _ = select.select([pg.fileno(), self.wake_r], [], [], FEEDBACK_INTERVAL)
        self.check()


class StatusBoard:
    """What `walkeeper status` on the compute's port answers: the compute agent's role, and
    while a session runs, its proposer's state."""

    proposer: Proposer | None = None
    agent: Callable[[], dict[str, Any]] = staticmethod(dict)

    def report(self) -> dict[str, Any]:
        p = self.proposer
        state = {"ok": True, "elected": p is not None} | self.agent()
        return state | (p.status() if p else {})


STATUS = StatusBoard()


class StatusHandler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        try:
            req, _ = wire.recv(self.request)
            known = req.get("type") == "status"
            wire.send(self.request, STATUS.report() if known else {"ok": False})
        except (OSError, wire.ProtocolError):
            pass


class StatusServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True  # a restarted proxy rebinds while the old socket is in TIME_WAIT
