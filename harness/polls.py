"""The cluster's own account of itself while a run goes: the cluster kind's poll, about once a
second, appended to cluster.jsonl beside the history whenever it changes, on the history's clock
(the file's format and its records: core/polls.py). The cluster-state checker reads it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from core.polls import Record, Round, encode_round

log = logging.getLogger(__name__)

INTERVAL = 1.0


class PollRecorder:
    def __init__(
        self, poll: Callable[[], dict[str, Record]], clock: Callable[[], int], path: Path
    ) -> None:
        self.poll, self.clock, self.path = poll, clock, path
        self.rounds = 0
        self.latest: Round | None = None  # the newest poll's, written or not
        self.members: set[str] = set()  # every node some poll heard from

    def run(self, stop: threading.Event) -> None:
        """Poll until `stop` is set; each line is flushed as it is written. The newest poll is
        written at the end even when nothing changed: the file then says how the cluster stood
        when the run ended, and how long it stood so."""
        written: Round | None = None
        with self.path.open("ab") as f:

            def write(r: Round) -> None:
                nonlocal written
                f.write(encode_round(r) + b"\n")
                f.flush()
                written = r

            while not stop.wait(INTERVAL):
                begun = self.clock()
                try:
                    state = self.poll()
                except Exception as e:  # a poll is best effort: the run goes on without it
                    log.warning("polling the cluster failed: %s", e)
                    continue
                self.rounds += 1
                if not state:
                    continue
                self.members |= set(state)
                self.latest = Round(time=self.clock(), begun=begun, nodes=state)
                if written is None or state != written.nodes:
                    write(self.latest)
            if self.latest is not None and self.latest is not written:
                write(self.latest)
