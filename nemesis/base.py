"""What a nemesis is: a schedule of faults run beside the clients, and a heal that undoes them all.

A nemesis records each fault's start and end in the history under process `nemesis`, so checkers
and reports can see the windows. `heal` must be safe to call at any time and more than once: the
runner calls it before the final reads, on Ctrl-C and on errors.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from typing import ClassVar

from clusters.kinds.base import ClusterKind
from core.history import HistoryWriter


class Nemesis(ABC):
    name: ClassVar[str]

    def __init__(self, cluster: ClusterKind, history: HistoryWriter, seed: int, interval: float):
        self.cluster = cluster
        self.history = history
        self.seed = seed
        self.interval = interval

    @abstractmethod
    def run(self, stop: threading.Event) -> None:
        """Inject faults on the schedule until `stop` is set (runs in its own thread)."""

    @abstractmethod
    def heal(self) -> None:
        """Undo every fault now in place."""


class NoNemesis(Nemesis):
    """No faults: the baseline run."""

    name = "none"

    def run(self, stop: threading.Event) -> None:
        stop.wait()

    def heal(self) -> None:
        return None
