"""The proposer (seed 001's safekeeper_proxy, seed 003's walproposer): elections, recovery of
lagging safekeepers, broadcast of WAL, and the commit LSN as the position a quorum holds.

The methods are small synchronous steps (elect, attach, step, sync, write) so that tests can
replay the seeds' histories one message at a time; the proxy daemon drives the same steps from a
thread per safekeeper. Shared state is guarded by one lock; each Peer's socket belongs to the
thread that drives that peer.
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from . import bugs, termhistory, wire

log = logging.getLogger("proposer")

# Bytes of WAL in one append, at most, and at the start of a burst (see `paced`): a link can be
# slow, or slow down, while one is in flight, and appends that do not end within the timeout
# cost the primary its lease. At the packet fault's 1000 kbit shared by three safekeepers, TCP
# can starve one connection to under 20 KB/s: 16 KiB still ends in a second there. On a fast
# link a burst's appends double to 32 KiB within two round trips.
MAX_APPEND = 32 << 10
FIRST_APPEND = 16 << 10
PAGE = 8192  # XLOG_BLCKSZ: Postgres's walsender ends a message at a page boundary when it must
BUFFER_KEEP = 64 << 20  # WAL kept in memory for lagging safekeepers before they read from peers


class Deposed(Exception):
    """A safekeeper follows a higher term: another proposer was elected, this one must stop."""


class NoQuorum(Exception):
    pass


class Refused(Exception):
    """A safekeeper refused a request for a reason other than a higher term."""


def silent(state: dict[str, Any], after: float) -> bool:
    """Whether a safekeeper's status says it has heard from no proposer for `after` seconds;
    one that restarted since it last heard counts once it has been up that long."""
    heard = state.get("heard_ago")
    return (state.get("up_for", 0) if heard is None else heard) > after


def paced(limit: int, sent: int, took: float, timeout: float, caught_up: bool = False) -> int:
    """The next append's size limit after one of `sent` bytes took `took` seconds (the timeout,
    when it timed out). On a link too slow for the limit within the timeout, appends that time
    out are sent again from the same position for ever, and the quorum falling silent costs the
    primary its lease, term after term. Slow appends halve the size; only very fast full ones
    double it, so that a doubled append shared with two others still ends well inside the
    timeout. A safekeeper `caught_up` with the log starts the next burst at FIRST_APPEND at
    most: how fast its link was says little of how fast it is now."""
    if took > timeout / 3:
        limit = max(PAGE, limit // 2)
    elif took < timeout / 30 and sent * 2 >= limit:
        limit = min(MAX_APPEND, limit * 2)
    return min(limit, FIRST_APPEND) if caught_up else limit


class Peer:
    """One safekeeper as the proposer sees it."""

    def __init__(self, name: str, address: tuple[str, int]) -> None:
        self.name = name
        self.address = address
        self.sock: Any = None
        self.state: dict[str, Any] = {}  # its last greeting or vote answer
        self.announced = False  # the current connection has accepted our announcement
        self.position: int | None = None  # the next LSN to send it
        self.acked: int | None = None  # how far it holds our log, as far as commit counts
        # When we sent the last request it accepted (monotonic): the lease runs from the sending,
        # not from reading the reply, which may have waited in a socket while we were stopped.
        self.answered = 0.0
        self.limit = FIRST_APPEND  # bytes of WAL per append, paced to the link (see `paced`)

    def call(
        self, header: dict[str, Any], payload: bytes = b"", timeout: float = 3.0
    ) -> tuple[dict[str, Any], bytes]:
        if self.sock is None:
            self.sock = wire.connect(self.address, timeout)
        self.sock.settimeout(timeout)
        try:
            return wire.call(self.sock, header, payload)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            finally:
                self.sock = None
        self.announced = False


class Proposer:
    def __init__(
        self,
        peers: dict[str, tuple[str, int]],
        variant: str,
        proposer_id: str,
        timeout: float = 3.0,
    ) -> None:
        self.peers = {name: Peer(name, address) for name, address in peers.items()}
        self.variant = variant
        self.id = proposer_id
        self.timeout = timeout
        self.total = len(peers)
        self.quorum = self.total // 2 + 1
        self.term = 0
        self.history: termhistory.History = []
        self.donor: str | None = None
        self.donor_epoch = 0
        self.vcl = 0
        self.log_start = 0
        self.log_end = 0
        self.restart_lsn = 0
        self.commit_lsn = 0
        self.buffer = bytearray()
        self.buffer_start = 0
        self.ends: list[int] = []  # where each of Postgres's messages in the buffer ends
        self.lock = threading.RLock()
        self.wal_arrived = threading.Condition(self.lock)
        self.on_commit: Callable[[int], None] = lambda lsn: None

    # -- election ------------------------------------------------------------------------------

    def ask(self, names: Iterable[str], request: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """Send `request` to each of `names` at once; their answers (unreachable ones left out),
        so that one safekeeper cut off costs an election one timeout, not one each."""

        def one(name: str) -> dict[str, Any] | None:
            try:
                return self.peers[name].call(request, b"", self.timeout)[0]
            except (OSError, wire.ProtocolError) as e:
                log.info("%s unreachable: %s", name, e)
                return None

        names = list(names)
        with ThreadPoolExecutor(max(1, len(names))) as pool:
            replies = dict(zip(names, pool.map(one, names), strict=True))
        return {name: reply for name, reply in replies.items() if reply is not None}

    def greet(self, names: Iterable[str], system_id: str = "") -> dict[str, dict[str, Any]]:
        """Connect to `names` and collect their states; unreachable ones are left out."""
        states = {}
        for name, reply in self.ask(names, {"type": "greeting", "system_id": system_id}).items():
            if reply.get("ok"):
                self.peers[name].state = reply
                states[name] = reply
            else:
                log.warning("%s refused the greeting: %s", name, reply.get("error"))
        return states

    def elect(
        self,
        names: Iterable[str] | None = None,
        system_id: str = "",
        quiet: float | None = None,
        own: Callable[[str], bool] | None = None,
    ) -> None:
        """Become the proposer of a new term: term = max + 1, votes from a quorum, the donor is
        the voter with the highest (last term, flush LSN), or (epoch, flush LSN).

        The caller decided to stand on statuses that may be seconds old, so the election checks
        the decision again. `quiet`, for a takeover from another proposer: each voter must have
        heard from no proposer for that many seconds when it votes, so a primary that a quorum
        heard from lately (one elected while the caller judged it gone) keeps its term. `own`,
        for standing because the safekeepers follow nobody or the caller's earlier session: the
        greetings must still say so (a term won since is refused the vote by term alone)."""
        greeted = self.greet(list(names or self.peers), system_id)
        if len(greeted) < self.quorum:
            raise NoQuorum(
                f"{len(greeted)} of {self.total} safekeepers answered, need {self.quorum}"
            )
        top = max(greeted.values(), key=lambda s: s["term"])
        if own is not None and top["voted_for"] and not own(top["voted_for"]):
            raise NoQuorum(f"the safekeepers now follow {top['voted_for']} in term {top['term']}")
        if quiet is not None and sum(silent(s, quiet) for s in greeted.values()) < self.quorum:
            raise NoQuorum(f"a quorum has heard from a proposer within {quiet:g} s")
        term = top["term"] + 1
        request: dict[str, Any] = {"type": "vote", "term": term, "proposer": self.id}
        if quiet is not None:
            request["quiet"] = quiet
        votes = {}
        asked_at = time.monotonic()
        for name, reply in self.ask(greeted, request).items():
            if reply.get("ok"):
                votes[name] = reply
                self.peers[name].state = reply
                self.peers[name].answered = asked_at
        if len(votes) < self.quorum:
            raise NoQuorum(f"{len(votes)} votes for term {term}, need {self.quorum}")
        rank = "last_term" if self.variant == "term-history" else "epoch"
        choose = min if bugs.on("recover-lowest") else max  # a planted bug takes the least WAL
        donor = choose(votes, key=lambda n: (votes[n][rank], votes[n]["flush_lsn"]))
        with self.lock:
            self.term, self.donor = term, donor
            self.donor_epoch = votes[donor]["epoch"]
            self.vcl = votes[donor]["flush_lsn"]
            self.log_start = votes[donor]["base_lsn"]
            self.restart_lsn = max(s["restart_lsn"] for s in votes.values())
            self.commit_lsn = 0
            self.history = votes[donor]["history"] + ([[term, self.vcl]] if self.vcl else [])
            self.log_end = self.buffer_start = self.vcl
            self.buffer = bytearray()
            self.ends = []
        log.info(
            "elected in term %d by %s; donor %s, VCL %s",
            term,
            sorted(votes),
            donor,
            wire.lsn_str(self.vcl),
        )

    def begin(self, lsn: int) -> None:
        """Start the log at `lsn` when no safekeeper holds any WAL yet."""
        with self.lock:
            if self.vcl:
                return
            self.vcl = self.log_start = self.log_end = self.buffer_start = lsn
            self.history = [[self.term, lsn]]

    # -- one safekeeper --------------------------------------------------------------------------

    def _check(self, peer: Peer, reply: dict[str, Any]) -> dict[str, Any]:
        if reply.get("ok"):
            return reply
        if int(reply.get("term", 0)) > self.term:
            raise Deposed(f"{peer.name} follows term {reply['term']} > {self.term}")
        raise Refused(f"{peer.name}: {reply.get('error')}")

    def attach(self, name: str) -> None:
        """(Re)connect to one safekeeper and announce ourselves: its vote if it has not given it,
        then the announcement that sets where its log and ours agree."""
        peer = self.peers[name]
        peer.close()
        peer.position = None
        with self.lock:
            peer.acked = None
        state = self._check(peer, peer.call({"type": "greeting"}, b"", self.timeout)[0])
        if state["term"] > self.term or (
            state["term"] == self.term and state["voted_for"] != self.id
        ):
            raise Deposed(f"{name} follows term {state['term']} of {state['voted_for']}")
        if state["term"] < self.term:
            vote = {"type": "vote", "term": self.term, "proposer": self.id}
            state = self._check(peer, peer.call(vote, b"", self.timeout)[0])
        announce: dict[str, Any] = {"type": "elected", "term": self.term, "proposer": self.id}
        with self.lock:
            if self.variant == "term-history":
                cut = termhistory.divergence(
                    state["history"], state["flush_lsn"], self.history, self.log_end
                )
                announce |= {"history": self.history, "truncate_lsn": cut}
                position = cut
            else:
                announce |= {"epoch": self.term, "vcl": self.vcl}
                position = self._epoch_start(state)
        self._check(peer, peer.call(announce, b"", self.timeout)[0])
        peer.announced, peer.position, peer.state = True, position, state
        if self.variant == "term-history":
            self._ack(peer, position)

    def _epoch_start(self, state: dict[str, Any]) -> int:
        """Seed 001: a safekeeper of the donor's epoch continues from its flush LSN; any other
        restarts from the horizon that all safekeepers were known to hold (restartLSN)."""
        flush = state["flush_lsn"]
        if not flush:
            return self.log_start
        if state["epoch"] == self.donor_epoch and flush <= self.vcl:
            return flush
        return max(min(self.restart_lsn, flush), self.log_start)

    def step(self, name: str, limit: int = MAX_APPEND) -> int:
        """Send one append (at most `limit` bytes; an empty one is a heartbeat); returns the bytes
        sent."""
        peer = self.peers[name]
        if not peer.announced or peer.position is None:
            raise Refused(f"{name} has not accepted our announcement")
        pos = peer.position
        end = self._chunk_end(pos, min(limit, peer.limit))
        data = self.read_log(pos, end) if pos < self.log_end else b""
        req = {
            "type": "append",
            "term": self.term,
            "proposer": self.id,
            "lsn": pos,
            "commit_lsn": self.commit_lsn,
            "restart_lsn": self.restart_lsn,
        }
        sent_at = time.monotonic()
        try:
            reply = self._check(peer, peer.call(req, data, self.timeout)[0])
        except TimeoutError:
            peer.limit = paced(peer.limit, len(data), self.timeout, self.timeout)
            raise
        peer.answered = sent_at
        peer.position = pos + len(data)
        took = time.monotonic() - sent_at
        caught_up = peer.position >= self.log_end
        peer.limit = paced(peer.limit, len(data), took, self.timeout, caught_up)
        if self.variant == "term-history" or reply["epoch"] == self.term:
            self._ack(peer, peer.position)
        else:
            self._ack(peer, min(peer.position, self.vcl))
        return len(data)

    def _chunk_end(self, pos: int, limit: int) -> int:
        """Where one append from `pos` ends: the log's end if within `limit`, else the last end
        of one of Postgres's messages or the last page boundary within it (the first one past
        it, for a limit that holds neither). So a safekeeper's flush position is a record's end
        or a page boundary, as Postgres's own walsender ends its messages, never inside a page's
        record: a log that ends there is one that Postgres's crash recovery continues unchanged
        after a takeover (the proxy checks that it does)."""
        with self.lock:
            end = min(self.log_end, pos + limit)
            if end == self.log_end or pos < self.buffer_start:
                return end  # below the buffer: the donor's log, taken as it was written
            within = bisect.bisect_right(self.ends, end)
            best = max(self.ends[within - 1] if within else 0, end - end % PAGE)
            if best > pos:
                return best
            return min(self.ends[bisect.bisect_right(self.ends, pos)], pos - pos % PAGE + PAGE)

    def quorum_silent_for(self) -> float:
        """Seconds since a quorum of safekeepers last accepted our requests: past the lease, this
        proposer may have been replaced without hearing of it."""
        times = sorted((p.answered for p in self.peers.values()), reverse=True)
        return time.monotonic() - times[self.quorum - 1]

    def detach(self, name: str) -> None:
        peer = self.peers[name]
        peer.close()
        with self.lock:
            peer.acked = None

    # -- the log ---------------------------------------------------------------------------------

    def write(self, data: bytes, lsn: int | None = None) -> int:
        """Append WAL to our log (at `lsn`, which must be its end, when given); returns the end."""
        with self.wal_arrived:
            if lsn is not None and lsn != self.log_end:
                raise ValueError(f"WAL at {lsn} does not continue our log at {self.log_end}")
            self.buffer += data
            self.log_end += len(data)
            self.ends.append(self.log_end)
            self.wal_arrived.notify_all()
            return self.log_end

    def wait_for_wal(self, name: str, timeout: float) -> None:
        with self.wal_arrived:
            peer = self.peers[name]
            if peer.position is not None and peer.position >= self.log_end:
                self.wal_arrived.wait(timeout)

    def read_log(self, start: int, end: int) -> bytes:
        """Our log's bytes from `start`: from memory, or below it from a safekeeper that holds
        them (the donor up to VCL, or one that has acknowledged them in our term)."""
        with self.lock:
            if start >= self.buffer_start:
                return bytes(self.buffer[start - self.buffer_start : end - self.buffer_start])
            sources = [(self.donor, self.vcl)] + [
                (p.name, p.acked) for p in self.peers.values() if p.acked
            ]
            limit = self.buffer_start
        for source, holds in sources:
            if source is None or holds <= start:
                continue
            try:
                with wire.connect(self.peers[source].address, self.timeout) as sock:
                    req = {"type": "read", "start": start, "end": min(end, holds, limit)}
                    reply, data = wire.call(sock, req)
            except OSError as e:
                log.info("reading WAL at %s from %s failed: %s", wire.lsn_str(start), source, e)
                continue
            if reply.get("ok") and data:
                return data
        raise Refused(f"no reachable safekeeper holds our WAL at {wire.lsn_str(start)}")

    def _ack(self, peer: Peer, lsn: int) -> None:
        with self.lock:
            peer.acked = lsn
            acked = [p.acked for p in self.peers.values() if p.acked is not None]
            commit = min(termhistory.quorum_position(acked, self.total), self.log_end)
            if len(acked) == self.total:
                self.restart_lsn = max(self.restart_lsn, min(acked))
            advanced = commit > self.commit_lsn
            if advanced:
                self.commit_lsn = commit
            self._trim()
        if advanced:
            self.on_commit(commit)

    def _trim(self) -> None:
        """Forget WAL every connected safekeeper has, and past BUFFER_KEEP also what only a
        quorum has: laggards then read it from their peers."""
        positions = [p.position for p in self.peers.values() if p.announced and p.position]
        keep_from = min([*positions, self.commit_lsn])
        if len(self.buffer) > BUFFER_KEEP:
            keep_from = max(keep_from, self.commit_lsn)
        if keep_from > self.buffer_start:
            del self.buffer[: keep_from - self.buffer_start]
            self.buffer_start = keep_from
            del self.ends[: bisect.bisect_right(self.ends, keep_from)]

    def status(self) -> dict[str, Any]:
        with self.lock:
            return {
                "proposer": self.id,
                "variant": self.variant,
                "term": self.term,
                "donor": self.donor,
                "vcl": self.vcl,
                "log_end": self.log_end,
                "commit_lsn": self.commit_lsn,
                "restart_lsn": self.restart_lsn,
                "history": self.history,
                "safekeepers": {
                    p.name: {
                        "connected": p.announced,
                        "position": p.position,
                        "acked": p.acked,
                        "append_limit": p.limit,
                    }
                    for p in self.peers.values()
                },
            }
