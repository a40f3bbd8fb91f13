"""A run's faults replayed exactly (`harness run --schedule FILE`), and the schedule a run's history
gives (`harness export RUN --format schedule`).

A schedule is what a run's nemesis did, read back from its history: each fault's plan, as its
start's invoke recorded it, with the second of the run at which it started and the second at
which the schedule stopped it (none where the run's heal did). A plan holds what was drawn (the
nodes of a `one` or `majority` target, a grudge, a clock's skew) and names by role what a fault
chose by role when it started (`primaries`, the coordinators, a partition of the primary, an
aimed fault's moment and roles), so a replay strikes the same part of the protocol even where
another node leads by then.

The file is JSON, versioned:

    {"format": "harness-schedule", "version": 1, "cluster": "safekeeper",
     "nodes": ["n1", …], "source": "<the run folder it came from>",
     "faults": [{"start_s": 12.4, "stop_s": 20.9, "plan": {"fault": "kill", …}}, …]}

Times are seconds of the run's history clock, which starts as the clients and the nemesis do.
Faults may overlap (a composite fault is a partition with a kill inside it): each starts and
stops at its own times. A replay is the same nemesis as a drawn schedule's for everything else:
each action is recorded in the history as it happens, and a heal undoes whatever is in place.
"""

from __future__ import annotations

import inspect
import json
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusters.kinds.base import ClusterKind
from core.errors import BadInput
from core.history import NEMESIS, HistoryWriter
from nemesis.fault import Fault, Replaying
from nemesis.schedule import FaultsInPlace

FORMAT = "harness-schedule"
VERSION = 1
NS_PER_S = 1e9


@dataclass(frozen=True)
class Entry:
    """One fault of a schedule: started at `start_s`, stopped at `stop_s` (None: by the heal)."""

    start_s: float
    stop_s: float | None
    plan: dict[str, Any]

    def as_json(self) -> dict[str, Any]:
        return {"start_s": self.start_s, "stop_s": self.stop_s, "plan": self.plan}

    def __hash__(self) -> int:  # a plan is a dict: hashed by its JSON
        return hash((self.start_s, self.stop_s, json.dumps(self.plan, sort_keys=True)))


def schedule_of(
    events: Iterable[Mapping[str, Any]], cluster: str, nodes: Sequence[str], source: str = ""
) -> dict[str, Any]:
    """The schedule a history's nemesis events give: each fault from its start's invoke to its
    stop's invoke, where the schedule (not the heal) stopped it."""
    entries: list[dict[str, Any]] = []
    open_: dict[str, list[int]] = {}  # fault name → its entries not yet stopped, oldest first
    for e in events:
        if e.get("process") != NEMESIS or e.get("type") != "invoke":
            continue
        f, value, at = str(e["f"]), e.get("value") or {}, round(e["time"] / NS_PER_S, 3)
        kind, _, name = f.partition("-")
        if kind == "start" and isinstance(value, dict):
            open_.setdefault(name, []).append(len(entries))
            entries.append({"start_s": at, "stop_s": None, "plan": dict(value)})
        elif kind == "stop" and open_.get(name):
            index = open_[name].pop(0)
            if value.get("cause") != "heal":
                entries[index]["stop_s"] = at
    return {
        "format": FORMAT,
        "version": VERSION,
        "cluster": cluster,
        "nodes": list(nodes),
        "source": source,
        "faults": entries,
    }


def read_schedule(path: Path) -> dict[str, Any]:
    """A schedule file's contents, its form checked (its faults are checked against a cluster
    by `entries`)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as e:
        raise BadInput(f"cannot read the schedule {path}: {e}") from e
    except json.JSONDecodeError as e:
        raise BadInput(f"the schedule {path} is not JSON ({e}): write it with "
                       "`harness export RUN --format schedule`") from e  # fmt: skip
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise BadInput(f"{path} is not a schedule: write one with "
                       "`harness export RUN --format schedule`")  # fmt: skip
    if data.get("version") != VERSION:
        raise BadInput(f"the schedule {path} is of version {data.get('version')!r}; this "
                       f"harness reads version {VERSION}")  # fmt: skip
    if not isinstance(data.get("faults"), list):
        raise BadInput(f"the schedule {path} has no list of faults")
    return data


def entries(schedule: Mapping[str, Any], nodes: Sequence[str], replaying: Replaying) -> list[Entry]:
    """The schedule's faults, each checked to be one this harness can make again on a cluster
    of these nodes; a fault it cannot make, or one naming a node the cluster lacks, is bad
    input (before anything starts)."""
    found = []
    known = set(nodes)
    for number, raw in enumerate(schedule["faults"], 1):
        try:
            entry = Entry(
                float(raw["start_s"]),
                None if raw.get("stop_s") is None else float(raw["stop_s"]),
                dict(raw["plan"]),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise BadInput(f"the schedule's fault {number} is not of the form "
                           f"{{start_s, stop_s, plan}}: {e!r}") from e  # fmt: skip
        if entry.stop_s is not None and entry.stop_s < entry.start_s:
            raise BadInput(f"the schedule's fault {number} stops before it starts")
        if missing := sorted(named_nodes(entry.plan) - known):
            raise BadInput(
                f"the schedule's fault {number} ({entry.plan.get('fault')}) names "
                f"{', '.join(missing)}, which this cluster does not have: its nodes are "
                f"{', '.join(nodes)}"
            )
        fault_of(entry.plan, replaying)  # bad input now, not in the middle of the run
        found.append(entry)
    return found


def named_nodes(plan: Mapping[str, Any]) -> set[str]:
    """The nodes a plan names: drawn targets and a grudge's nodes."""
    named = {str(n) for n in plan.get("targets") or []}
    for node, heard in (plan.get("grudge") or {}).items():
        named |= {str(node), *(str(n) for n in heard)}
    return named


def fault_of(plan: Mapping[str, Any], replaying: Replaying) -> Fault:
    """The fault a recorded plan describes, made by the fault class that replays it."""
    makers = [cls for cls in _fault_classes() if cls.replays(plan)]
    if not makers:
        raise BadInput(f"the schedule names a fault {plan.get('fault')!r} this harness does not "
                       "have")  # fmt: skip
    try:
        return makers[0].of_plan(plan, replaying)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise BadInput(f"the schedule's {plan.get('fault')} fault is not as a run records it: "
                       f"{e!r}") from e  # fmt: skip


def _fault_classes() -> list[type[Fault]]:
    """Every concrete fault class, most derived first (a lone kill before a kill)."""
    found: list[type[Fault]] = []
    todo: list[type[Fault]] = [Fault]
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if getattr(cls, "name", None) and not inspect.isabstract(cls):
            found.append(cls)
    return sorted(found, key=lambda c: -len(c.__mro__))


class ReplayNemesis(FaultsInPlace):
    """Starts and stops each of a schedule's faults at its times, on the history's clock."""

    name = "replay"

    def __init__(
        self, cluster: ClusterKind, history: HistoryWriter, schedule: Sequence[Entry]
    ) -> None:
        super().__init__(cluster, history, 0, 0.0)
        self.schedule = list(schedule)

    def run(self, stop: threading.Event) -> None:
        replaying = replaying_on(self.cluster)
        faults = [fault_of(e.plan, replaying) for e in self.schedule]
        actions = sorted(
            [(e.start_s, 1, i) for i, e in enumerate(self.schedule)]
            + [(e.stop_s, 0, i) for i, e in enumerate(self.schedule) if e.stop_s is not None]
        )  # at one instant, a stop before a start: a fault ends before the next begins
        for at, starts, i in actions:
            if stop.wait(max(0.0, at - self.history.now() / NS_PER_S)):
                return
            if starts:
                if not self._start_at(faults[i], stop):
                    return
            else:
                self._stop_at(faults[i])
        stop.wait()


def packages(schedule: Sequence[Entry]) -> list[str]:
    """The fault packages whose needs a replay of these faults must meet: `power` where one
    cuts power (the backend then lays its power layer), `toxic` where one acts on a proxy (the
    clients then connect through proxies)."""
    found = []
    for entry in schedule:
        plan = entry.plan
        strikes = [plan.get("strike_with"), *(s.get("strike_with") for s in plan.get("then") or [])]
        if plan.get("fault") == "power" or "power" in strikes:
            found.append("power")
        if plan.get("fault") == "toxic":
            found.append("toxic")
    return sorted(set(found)) or ["schedule"]


def replaying_on(cluster: ClusterKind | type[ClusterKind], options: Mapping[str, Any] | None = None
                 ) -> Replaying:  # fmt: skip
    """What rebuilding faults on this cluster needs of it."""
    kind = cluster if isinstance(cluster, type) else type(cluster)
    given = options if options is not None else getattr(cluster, "options", {})
    return Replaying(
        moments=tuple(kind.moments_of(given)),
        processes=tuple(p.name for p in kind.runs),
    )
