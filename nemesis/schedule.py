"""The schedule of faults, drawn from the seed, and the nemesis that runs it and heals.

Faults follow each other: a quiet gap, a fault, a quiet gap, a fault… Each gap and each fault
lasts a time drawn uniformly from [interval/2, 3·interval/2], so on average one nemesis action (a
start or a stop) follows another every `interval` seconds, as Jepsen's --nemesis-interval. Each
fault comes from one of the chosen packages, picked at random. A package may make a fault with
another inside it (`Nested`: a kill while a partition is in place): the inner one starts
between a tenth and two fifths into the outer one and ends before it, each with events of its
own. Everything (package, shape, targets, amounts, times) is drawn when the schedule is planned
from `Random("nemesis:<seed>")`, so the same seed and nodes give the same schedule; only
`primaries` is resolved when the fault starts, since who leads is known only then.

History events, all with process "nemesis", Jepsen style: each action is an `invoke` followed by
an `info` with the same f.

- `start-<fault>` (f is e.g. start-partition, start-kill, start-pause, start-clock,
  start-packet). Invoke value: the plan, e.g. {"fault": "partition", "shape": "majority",
  "grudge": {"n1": ["n4", "n5"], …}} or {"fault": "kill", "target": "minority", "targets":
  ["n2", "n5"]} (targets null for primaries, not yet known). Info value: the plan completed with
  what was done (resolved targets, pids, and "mechanism": how it was done), or the plan and an
  `error` when it failed (it may be partly in place; its stop runs all the same).
- `stop-<fault>`. Invoke value: the plan and "cause": "schedule" (its time ended) or "heal" (the
  run ends, was interrupted or failed). Info value: the plan, what was undone, and the cause; or
  an `error`, and the fault stays in place for the next heal.

A fault's window runs from its start's invoke to its stop's info.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from clusters.kinds.base import ClusterKind
from core.errors import InfraError
from core.history import NEMESIS, HistoryWriter
from nemesis.base import Nemesis
from nemesis.fault import Fault

log = logging.getLogger(__name__)


DEFAULT_INTERVAL = 10.0  # seconds: --nemesis-interval on a kind that fails over within it
OUTLAST = 1.25  # a fault on a kind's timescale lasts this many times its failover time


def timescale(failover_s: float, interval: float | None) -> tuple[float, float]:
    """The interval and the least length of a fault for a kind that fails over within
    `failover_s` seconds: the interval given, or the default, or the kind's failover time where
    that is longer (each fault then outlasting it), so that a lost leader is noticed before
    the fault ends; a given interval is taken as it is."""
    if interval is not None:
        return interval, 0.0
    if failover_s <= DEFAULT_INTERVAL:
        return DEFAULT_INTERVAL, 0.0
    return failover_s, round(failover_s * OUTLAST, 1)


@dataclass(frozen=True)
class Nested:
    """Two faults at once, one inside the other: a crash or a pause while a partition holds is
    what turns a partition's stale leader and a restart's recovery into one history."""

    outer: Fault
    inner: Fault


@dataclass(frozen=True)
class Package:
    """A named source of faults (`--nemesis NAME`): makes the next fault from nodes and RNG."""

    name: str
    min_nodes: int
    make: Callable[[list[str], random.Random], Fault | Nested]
    on_coordinators: bool = False  # aimed at a coordination service: only kinds that have one
    # what a kind must be for it (a class of clusters.kinds.base, e.g. OperatorFailover: only
    # kinds that do not fail over by themselves have an operator to play); None: any kind
    needs: type | None = None
    # whether `all` has it as an entry of its own where the kind is what it needs (the seeds'
    # histories are in `all` through `aimed`, a scenario each)
    in_all: bool = True
    # what of the cluster kind its faults depend on, as the keywords `make` also takes: the
    # kind's `moments`, whether the backend can cut `power`, the kind's internal `links`
    reads_kind: tuple[str, ...] = ()
    # its faults act on connection-fault proxies the run puts in place before the first
    # operation (nemesis.toxic.interpose, and the kinds' internal links)
    interposes: bool = False


@dataclass(frozen=True)
class Inner:
    after: float  # seconds into the outer fault it starts
    fault: Fault
    duration: float  # seconds it lasts; it ends before the outer one


@dataclass(frozen=True)
class Step:
    gap: float  # seconds of quiet before the fault
    fault: Fault
    duration: float  # seconds the fault lasts
    inner: Inner | None = None


def plan(
    packages: list[Package], nodes: list[str], seed: int, interval: float, least: float = 0.0
) -> Iterator[Step]:
    """The endless schedule for these packages on these nodes, each fault lasting `least`
    seconds at least."""
    rng = random.Random(f"nemesis:{seed}")
    while True:
        gap = rng.uniform(interval / 2, interval * 3 / 2)
        made = rng.choice(packages).make(nodes, rng)
        duration = max(least, rng.uniform(interval / 2, interval * 3 / 2))
        if not isinstance(made, Nested):
            yield Step(gap, made, duration)
            continue
        after = rng.uniform(0.1, 0.4) * duration
        inner = Inner(after, made.inner, rng.uniform(0.2, 0.5) * duration)
        yield Step(gap, made.outer, duration, inner)


class FaultsInPlace(Nemesis):
    """Starts and stops faults, recording each action in the history, and keeps those in
    place, which `heal` stops; what decides when is the subclass's `run`."""

    def __init__(
        self, cluster: ClusterKind, history: HistoryWriter, seed: int, interval: float
    ) -> None:
        super().__init__(cluster, history, seed, interval)
        # Serialises the schedule's actions with a heal from another thread (the runner's).
        self._lock = threading.Lock()
        self._active: list[Fault] = []

    def _start_at(self, fault: Fault, stop: threading.Event) -> bool:
        """Start `fault` unless the run is ending; whether it started."""
        with self._lock:
            if stop.is_set():
                return False
            self._start(fault)
            return True

    def _stop_at(self, fault: Fault) -> None:
        """Stop `fault` as the schedule says, unless a heal already did."""
        with self._lock:
            if fault in self._active:
                self._stop(fault, "schedule")

    def heal(self) -> None:
        for fault in list(self._active):
            fault.cancel()  # a start still watching the cluster holds the lock: let it go
        with self._lock:
            errors = [e for f in reversed(self._active) if (e := self._stop(f, "heal"))]
        if errors:
            raise InfraError("; ".join(errors))

    def _start(self, fault: Fault) -> None:
        f = f"start-{fault.name}"
        self._active.append(fault)  # before it starts: a partial start must be undone too
        self._record("invoke", f, fault.plan())
        try:
            value = fault.start(self.cluster)
        except Exception as e:
            log.warning("%s failed: %s", f, e)
            self._record("info", f, fault.plan(), error=str(e))
            return
        self._record("info", f, value)

    def _stop(self, fault: Fault, cause: str) -> str | None:
        """Stop one fault; the error, if it could not, and the fault stays active."""
        f = f"stop-{fault.name}"
        self._record("invoke", f, fault.plan() | {"cause": cause})
        try:
            value = fault.stop(self.cluster)
        except Exception as e:
            self._record("info", f, fault.plan() | {"cause": cause}, error=str(e))
            return f"{f}: {e}"
        self._active.remove(fault)
        self._record("info", f, value | {"cause": cause})
        return None

    def _record(self, type_: str, f: str, value: dict[str, Any], error: str | None = None) -> None:
        extra = {"error": error} if error else {}
        try:
            self.history.append(process=NEMESIS, type=type_, f=f, value=value, **extra)
        except ValueError:
            # The history is closed: the runner heals after a failed run, and the fault must
            # be undone all the same.
            log.warning("history closed; not recorded: %s %s %s", type_, f, value)


class ScheduledNemesis(FaultsInPlace):
    """Runs the schedule of the chosen packages; `heal` stops whatever fault is in place."""

    name = "scheduled"

    def __init__(
        self,
        cluster: ClusterKind,
        history: HistoryWriter,
        seed: int,
        interval: float,
        packages: list[Package],
        least: float = 0.0,
    ) -> None:
        super().__init__(cluster, history, seed, interval)
        self.packages = packages
        self.least = least  # seconds a fault lasts at least

    def run(self, stop: threading.Event) -> None:
        nodes = [n.name for n in self.cluster.nodes]
        for step in plan(self.packages, nodes, self.seed, self.interval, self.least):
            if stop.wait(step.gap):
                return
            if not self._start_at(step.fault, stop):
                return
            rest = step.duration
            if step.inner is not None:
                inner = step.inner
                if stop.wait(inner.after) or not self._start_at(inner.fault, stop):
                    return
                if stop.wait(inner.duration):
                    return
                self._stop_at(inner.fault)
                rest -= inner.after + inner.duration
            if stop.wait(rest):
                return  # the runner's heal stops it
            self._stop_at(step.fault)
