"""The operation generator and the pacer that spreads operations over time.

One seeded generator serves every worker under a lock, so the same seed gives the same sequence of
operations whatever the timing; which worker takes which operation depends on timing, as in Jepsen.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass
from typing import Any

from workloads.base import Workload


@dataclass(frozen=True)
class Op:
    workload: str
    f: str
    value: Any


class Generator:
    """Mixes the workloads' operations, choosing a workload at random for each."""

    def __init__(self, workloads: list[Workload], seed: int) -> None:
        self._workloads = workloads
        self._rng = random.Random(seed)
        self._lock = threading.Lock()

    def next(self) -> Op:
        with self._lock:
            workload = self._rng.choice(self._workloads)
            f, value = workload.next_op(self._rng)
            return Op(workload.name, f, value)


class Pacer:
    """Hands out start times `1/rate` apart across all workers; rate 0 means as fast as possible."""

    def __init__(self, rate: float) -> None:
        self._interval = 1.0 / rate if rate > 0 else 0.0
        self._next = time.monotonic()
        self._lock = threading.Lock()

    def wait(self, stop: threading.Event) -> bool:
        """Sleep until this worker's next slot; False when the run is stopping."""
        if self._interval == 0:
            return not stop.is_set()
        with self._lock:
            now = time.monotonic()
            slot = max(now, self._next)
            self._next = slot + self._interval
        return not stop.wait(max(0.0, slot - time.monotonic()))
