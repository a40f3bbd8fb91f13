"""The cluster's own account of itself while a run goes: the cluster kind's poll, about once a
second, appended to cluster.jsonl beside the history whenever it changes, on the history's
clock. A line is {"time": ns since the run started, "begun": when the poll was sent, "nodes":
{node: what it said}}; a node that did not answer is absent from its line, and an entry named
COORDINATION holds what the coordination service said, where the kind has one. Every answer was
given between `begun` and `time`. The cluster-state checker reads it.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

INTERVAL = 1.0
# A line's entry for what a kind's coordination service holds (Manatee's cluster state in
# ZooKeeper), beside its nodes' own accounts.
COORDINATION = "zookeeper"


class PollRecorder:
    def __init__(
        self, poll: Callable[[], dict[str, dict[str, Any]]], clock: Callable[[], int], path: Path
    ) -> None:
        self.poll, self.clock, self.path = poll, clock, path
        self.rounds = 0

    def run(self, stop: threading.Event) -> None:
        """Poll until `stop` is set; each line is flushed as it is written."""
        last: dict[str, dict[str, Any]] | None = None
        with self.path.open("a", encoding="utf-8") as f:
            while not stop.wait(INTERVAL):
                begun = self.clock()
                try:
                    state = self.poll()
                except Exception as e:  # a poll is best effort: the run goes on without it
                    log.warning("polling the cluster failed: %s", e)
                    continue
                self.rounds += 1
                if state and state != last:
                    line = {"time": self.clock(), "begun": begun, "nodes": state}
                    f.write(json.dumps(line) + "\n")
                    f.flush()
                    last = state
