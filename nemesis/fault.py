"""What one fault is: a planned change to some nodes that can be started and stopped.

Faults are planned ahead from node names and a seeded RNG (so a seed fixes the schedule) and act
through the node interface only, so every backend gets the same faults. `start` and `stop` return
what they did, as plain JSON data for the history.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Self, TypeVar

from clusters.backend import Node
from clusters.kinds.base import ClusterKind
from core.errors import BadInput
from nemesis import targets

if TYPE_CHECKING:
    from checkers.moments import Moment

T = TypeVar("T")


@dataclass(frozen=True)
class Replaying:
    """What rebuilding a fault from its recorded plan needs of the run that replays it: the
    kind's moments (an aimed fault's) and its processes (a lone kill's)."""

    moments: tuple[type[Moment], ...] = ()
    processes: tuple[str, ...] = ()


class Fault(ABC):
    name: ClassVar[str]

    @classmethod
    def replays(cls, plan: Mapping[str, Any]) -> bool:
        """Whether `of_plan` rebuilds this plan (as `plan` records it in the history)."""
        return plan.get("fault") == getattr(cls, "name", None)

    @classmethod
    def of_plan(cls, plan: Mapping[str, Any], replaying: Replaying) -> Fault:
        """The fault again from its `plan`, as its start's invoke recorded it: what was drawn
        is given again, and what was known only at its start (the leader, the coordinators)
        is resolved again when the replay starts it, so it strikes the same part."""
        raise BadInput(f"a {plan.get('fault')} fault cannot be replayed from its plan yet")

    @abstractmethod
    def plan(self) -> dict[str, Any]:
        """The fault as planned (kind, shape, targets, amounts): the value of its start's invoke."""

    @abstractmethod
    def start(self, cluster: ClusterKind) -> dict[str, Any]:
        """Apply the fault; returns the plan completed with what was done and how."""

    @abstractmethod
    def stop(self, cluster: ClusterKind) -> dict[str, Any]:
        """Undo the fault; safe after a failed or partial start, and more than once."""

    def cancel(self) -> None:
        """The run is ending: a fault whose start watches the cluster before it acts (aimed)
        stops watching and returns soon, so that the heal need not wait for it."""
        return None


class UnplannedFault(Fault):
    """A fault that draws nothing ahead: what it strikes it finds at its start (the leader), so
    its plan is its name alone."""

    @classmethod
    def planned(cls, nodes: list[str], rng: random.Random) -> Self:
        return cls()

    def plan(self) -> dict[str, Any]:
        return {"fault": self.name}

    @classmethod
    def of_plan(cls, plan: Mapping[str, Any], replaying: Replaying) -> Fault:
        return cls()


class ProcessFault(Fault):
    """A fault on the cluster kind's processes of Jepsen-style targets (one, minority, …).

    `planned` is None for `primaries`, resolved when the fault starts."""

    def __init__(self, target: str, planned: list[str] | None) -> None:
        self.target = target
        self.planned = planned

    @classmethod
    def planned_for(cls, target: str, nodes: list[str], rng: random.Random) -> Self:
        return cls(target, targets.pick(target, nodes, rng))

    def plan(self) -> dict[str, Any]:
        return {"fault": self.name, "target": self.target, "targets": self.planned}

    @classmethod
    def of_plan(cls, plan: Mapping[str, Any], replaying: Replaying) -> Fault:
        return cls(plan["target"], planned_nodes(plan))


def planned_nodes(plan: Mapping[str, Any]) -> list[str] | None:
    """A plan's drawn targets (None where they are resolved at the start)."""
    planned = plan.get("targets")
    return None if planned is None else [str(n) for n in planned]


def by_name(cluster: ClusterKind, names: list[str]) -> list[Node]:
    """The cluster's nodes with these names, in the cluster's order."""
    return [n for n in cluster.nodes if n.name in names]


def on_nodes(nodes: list[Node], action: Callable[[Node], T]) -> dict[str, T]:
    """Run `action` on every node at once (a fault should hit its nodes together); node name →
    result. Every node is attempted; the first failure is raised afterwards."""
    if not nodes:
        return {}
    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        futures = {node.name: pool.submit(action, node) for node in nodes}
    errors = [f.exception() for f in futures.values() if f.exception() is not None]
    if errors:
        raise errors[0]  # type: ignore[misc]
    return {name: f.result() for name, f in futures.items()}
