"""The safekeeper's rules (the acceptor of seed 000's built-in Paxos), separate from its sockets.

Every request is a dict; every answer is a dict with `ok`. A refusal names the reason and this
safekeeper's term, which is how an old proposer learns it has been fenced.

Two variants, chosen at start:
- `term-history` (seed 003): the elected proposer announces its history and the divergence point;
  the safekeeper truncates there (never below what it knows is committed) and then accepts WAL
  only at its end.
- `epoch` (seed 001 as written): no truncation; WAL is written where the proposer says, over
  whatever is there, and the epoch switches once a record lands past max(flush, VCL).
"""

from __future__ import annotations

import hashlib
import threading
import time
from typing import Any

from . import bugs, termhistory
from .storage import Control, Storage

VARIANTS = ("term-history", "epoch")
READ_LIMIT = 4 << 20
COMMIT_SAVE_INTERVAL = 1.0  # seed 001: commit/restart LSNs are saved lazily, not per request


class Refusal(Exception):
    pass


class Acceptor:
    def __init__(self, storage: Storage, variant: str, name: str) -> None:
        if variant not in VARIANTS:
            raise ValueError(f"unknown variant {variant!r}")
        self.storage = storage
        self.variant = variant
        self.name = name
        self.lock = threading.Lock()
        self.last_save = 0.0
        self.started = time.monotonic()
        self.last_heard: float | None = None  # the proposer it follows: its announcement or append

    @property
    def control(self) -> Control:
        return self.storage.control

    def state(self) -> dict[str, Any]:
        c, flush = self.control, self.storage.flush_lsn
        held = termhistory.upto(c.history, flush)
        return {
            "name": self.name,
            "variant": self.variant,
            "term": c.term,
            "voted_for": c.voted_for,
            "history": held,
            "last_term": held[-1][0] if held else 0,
            "epoch": c.epoch,
            # epoch variant: the term last announced to it and that term's VCL, where the term's
            # log starts (what the term history records in the other variant)
            "proposed_epoch": c.proposed_epoch,
            "vcl": c.vcl,
            "flush_lsn": flush,
            "commit_lsn": c.commit_lsn,
            "restart_lsn": c.restart_lsn,
            "base_lsn": c.base_lsn,
            "system_id": c.system_id,
            # how a standby compute tells that no proposer is writing any more
            "heard_ago": None if self.last_heard is None else time.monotonic() - self.last_heard,
            "up_for": time.monotonic() - self.started,
        }

    def handle(
        self, req: dict[str, Any], payload: bytes, session: dict[str, Any]
    ) -> tuple[dict[str, Any], bytes]:
        """Answer one request. `session` is per connection: it remembers the announcement."""
        handler = getattr(self, "on_" + str(req.get("type", "")), None)
        if handler is None:
            return {"ok": False, "error": f"unknown request {req.get('type')!r}"}, b""
        with self.lock:
            try:
                return handler(req, payload, session)
            except Refusal as e:
                return {"ok": False, "error": str(e), "term": self.control.term}, b""

    def on_status(self, req: dict[str, Any], payload: bytes, session: dict) -> tuple[dict, bytes]:
        return {"ok": True, **self.state()}, b""

    def on_greeting(self, req: dict[str, Any], payload: bytes, session: dict) -> tuple[dict, bytes]:
        c = self.control
        system_id = str(req.get("system_id", ""))
        if c.system_id and system_id and system_id != c.system_id:
            raise Refusal(f"this safekeeper holds WAL of system {c.system_id}, not {system_id}")
        if system_id and not c.system_id:
            c.system_id = system_id
            self.storage.save()
        return {"ok": True, **self.state()}, b""

    def on_vote(self, req: dict[str, Any], payload: bytes, session: dict) -> tuple[dict, bytes]:
        c, term = self.control, int(req["term"])
        if term <= c.term:
            raise Refusal(f"already voted in term {c.term}")
        quiet = req.get("quiet")
        heard = time.monotonic() - (self.started if self.last_heard is None else self.last_heard)
        if quiet is not None and heard <= float(quiet):
            # a takeover: the proposer this safekeeper follows spoke within the time a standby
            # waits, so it may still hold its lease and serve
            raise Refusal(f"heard from a proposer {heard:.1f} s ago: a takeover needs {quiet} s")
        c.term, c.voted_for = term, str(req["proposer"])
        self.storage.save()  # the promise is durable before it is given
        return {"ok": True, **self.state()}, b""

    def _check_leader(self, req: dict[str, Any]) -> None:
        c = self.control
        if bugs.on("accept-lower-term") and int(req["term"]) <= c.term:
            return  # the planted bug: an older term's proposer is not fenced
        if int(req["term"]) != c.term or str(req["proposer"]) != c.voted_for:
            raise Refusal(
                f"term {req['term']} of {req['proposer']} is not the term this safekeeper "
                f"follows ({c.term} of {c.voted_for or 'nobody'})"
            )

    def on_elected(self, req: dict[str, Any], payload: bytes, session: dict) -> tuple[dict, bytes]:
        self._check_leader(req)
        c = self.control
        if self.variant == "term-history":
            cut = int(req["truncate_lsn"])
            if cut < c.commit_lsn:
                raise Refusal(f"refusing to truncate committed WAL: {cut} < commit {c.commit_lsn}")
            if cut < self.storage.flush_lsn:
                self.storage.truncate(cut)
            c.history = [list(map(int, e)) for e in req["history"]]
        else:
            c.proposed_epoch, c.vcl = int(req["epoch"]), int(req["vcl"])
        self.storage.save()
        session["term"] = c.term
        # a proposer that won a term starts hearing from now: its predecessor's silence, which
        # let it stand, does not let a third compute stand against it while it catches up
        self.last_heard = time.monotonic()
        return {"ok": True, **self.state()}, b""

    def on_append(self, req: dict[str, Any], payload: bytes, session: dict) -> tuple[dict, bytes]:
        self._check_leader(req)
        if session.get("term") != self.control.term and not bugs.on("accept-lower-term"):
            raise Refusal("append before the proposer announced itself on this connection")
        c, flush, lsn = self.control, self.storage.flush_lsn, int(req["lsn"])
        self.last_heard = time.monotonic()
        end = lsn + len(payload)
        if payload:
            if self.variant == "term-history" and flush and lsn != flush:
                raise Refusal(f"append at {lsn} but this log ends at {flush}")
            if self.variant == "epoch" and flush and lsn > flush:
                raise Refusal(f"append at {lsn} would leave a gap after {flush}")
            self.storage.write(lsn, payload)
            if self.variant == "epoch" and c.epoch < c.proposed_epoch and end > max(flush, c.vcl):
                c.epoch = c.proposed_epoch
                self.last_save = 0.0
        flush = self.storage.flush_lsn
        c.commit_lsn = max(c.commit_lsn, min(int(req.get("commit_lsn", 0)), flush))
        c.restart_lsn = max(c.restart_lsn, int(req.get("restart_lsn", 0)))
        if time.monotonic() - self.last_save > COMMIT_SAVE_INTERVAL:
            self.storage.save()
            self.last_save = time.monotonic()
        return {"ok": True, "term": c.term, "epoch": c.epoch, "flush_lsn": flush}, b""

    def on_checksum(self, req: dict[str, Any], payload: bytes, session: dict) -> tuple[dict, bytes]:
        """The SHA-256 of this safekeeper's WAL over [start, end) (cut at its flush LSN, at most
        READ_LIMIT bytes), so that an operator compares logs without copying them."""
        start = int(req["start"])
        end = min(int(req["end"]), start + READ_LIMIT, self.storage.flush_lsn)
        data = self.storage.read(start, end) if end > start else b""
        return {
            "ok": True,
            "start": start,
            "end": start + len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
        }, b""

    def on_read(self, req: dict[str, Any], payload: bytes, session: dict) -> tuple[dict, bytes]:
        """Serve WAL to a follower or a recovering proposer (seed 001: any safekeeper is a WAL
        server); `end` may not pass what this safekeeper has flushed."""
        start = int(req["start"])
        end = min(int(req["end"]), start + READ_LIMIT)
        data = self.storage.read(start, end)
        return {"ok": True, "start": start, "flush_lsn": self.storage.flush_lsn}, data
