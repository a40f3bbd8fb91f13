"""What a workload is: a generator of operations, a client that runs them, its final reads,
which of its operations write, and the checkers that judge its histories.

Workloads know nothing of the runner or the nemesis; the runner hands each operation to the
workload with a connection and records what comes back, and the checkers read the declarations.
"""

from __future__ import annotations

import random
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import psycopg

from checkers.catalog import Checker


@dataclass(frozen=True)
class WorkloadOptions:
    """Knobs the CLI exposes that workloads share."""

    isolation: str = "serializable"
    model: str | None = None  # the consistency model append histories are checked against
    accounts: int = 5
    total: int = 100
    max_transfer: int = 5
    key_count: int = 5
    max_writes_per_key: int = 32
    max_txn_length: int = 4
    op_pause: float = 0.0  # seconds: the most a transaction pauses between its statements
    extra: dict[str, Any] = field(default_factory=dict)


class Definite(Exception):
    """The operation certainly did not happen (e.g. insufficient funds): recorded as `fail`."""


class Workload(ABC):
    """One workload: its schema, its operation generator, its client operations, its final reads."""

    name: ClassVar[str]
    checkers: ClassVar[tuple[Checker, ...]]  # what judges its histories

    def __init__(self, options: WorkloadOptions) -> None:
        self.options = options

    @abstractmethod
    def setup(self, conn: psycopg.Connection) -> None:
        """Create the tables and initial rows; idempotent (a cluster may be reused)."""

    @abstractmethod
    def next_op(self, rng: random.Random) -> tuple[str, Any]:
        """The next operation (f, value) to invoke; called under the generator's lock."""

    @staticmethod
    @abstractmethod
    def writes(f: str, value: Any) -> bool:
        """Whether the operation may change the database: recorded on its invocation, so that
        no checker guesses; a failure of one that does not is always definite."""

    @abstractmethod
    def invoke(self, conn: psycopg.Connection, f: str, value: Any) -> Any:
        """Run one operation inside an open transaction and return its completion value.

        The runner commits; raising `Definite` makes the operation `fail`."""

    @abstractmethod
    def final_ops(self) -> list[tuple[str, Any]]:
        """Operations to run after the faults are healed (the final reads)."""

    def pause(self) -> None:
        """A random pause between two statements of a transaction (--op-pause), to widen the
        windows in which concurrent transactions overlap; not drawn from the run's seed, as it
        changes only when statements run, never which."""
        if self.options.op_pause > 0:
            time.sleep(random.uniform(0, self.options.op_pause))

    def checker_params(self) -> dict[str, Any]:
        """What this workload's checkers need to know about the run (accounts, total, …)."""
        return {}
