"""A primary's lease runs from when it sent the request a quorum accepted, not from when it read
the reply: stopped (SIGSTOP, a frozen VM) just after sending, it reads on waking a reply that
waited in its socket while the safekeepers moved on to another term, and that reply must not
renew a lease the safekeepers' silence rule has already let a standby take."""

from __future__ import annotations

import threading
import time
from typing import Any

from systems.walkeeper.proposer import Peer, Proposer
from tests.protocol.conftest import BASE

STOPPED_FOR = 1.5  # seconds a reply waits unread, as behind a paused process


def test_a_reply_read_late_does_not_renew_the_lease(make_safekeepers, monkeypatch) -> None:
    sks = make_safekeepers("term-history", 3)
    p = Proposer(dict(sks.addresses), "term-history", "compute-1", timeout=5)
    p.elect(list(sks.addresses))
    p.begin(BASE)
    for name in sks.addresses:
        p.attach(name)
    real_call = Peer.call

    def read_late(self: Peer, *args: Any, **kwargs: Any) -> tuple[dict[str, Any], bytes]:
        reply = real_call(self, *args, **kwargs)
        time.sleep(STOPPED_FOR)  # the reply was in the socket; we were not running
        return reply

    monkeypatch.setattr(Peer, "call", read_late)
    beats = [threading.Thread(target=p.step, args=(name,)) for name in sks.addresses]
    for beat in beats:  # a heartbeat to each, at once, as the proxy's senders do; all accepted
        beat.start()
    for beat in beats:
        beat.join()
    assert p.quorum_silent_for() >= STOPPED_FOR, (
        "a heartbeat accepted before the stop renewed the lease as if heard from just now"
    )
