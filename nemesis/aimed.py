"""The aimed nemesis (`--nemesis aimed`, part of `all`): faults that strike at a moment of the
protocol rather than at a time drawn in advance.

A schedule drawn in advance almost never strikes between a vote and a term's first record, or
while a new leader still holds its predecessor's prepared transactions: those last a second or
less. An aimed fault brings a moment about and watches for it:

1. **Provoke.** A moment the cluster kind declares (checkers/moments.py) says what brings it
   about: the loss of the node that leads (it is partitioned off alone, killed or paused: clients
   stay connected to a partitioned one; only partitioned, for a moment a running leader must
   reach, such as its lease's end), for the rest of the fault or only until another node
   leads (a deposed primary then rebuilds); or a node that does not lead cut off for a few
   seconds and let back (it then has to catch up). On a kind that does not fail over by itself
   (OperatorFailover), the leader is lost as the `promote` fault loses it: cut off and left
   running (for a partition) or stopped, and a standby promoted.
2. **Watch.** The fault polls the cluster every POLL_EVERY seconds, as the harness's own polls
   do but five times as often, and feeds each round to the moment, until it holds (or the
   moment's `watch_s` has passed).
   A follower is watched while it is cut off too: seen behind then, it is struck as soon as it
   is let back, when it catches up (often within a poll).
3. **Strike.** After a delay drawn from the seed, one of the moment's roles, the first of an
   order drawn from the seed that has nodes, is killed (restarted at the fault's end), crashed
   and restarted at once, paused, partitioned off alone or (where the backend has the power
   layer) loses power.

A single step's strike and provocation stay until the fault's end in the schedule, which undoes
both.
Everything is drawn when the schedule is planned (moment, roles' order, provocation, strike,
delay, how long a follower is cut off); only who plays the roles is known when the moment comes.
On a kind whose moments include `term-won` and with the nodes they need, the schedule also draws
seed 003's history (`partition-seed003`) and seed 001's example (`partition-seed001`: a term's
voters include a longer log of an older term) with each of its two tails, as three scenarios
more.

A chain (drawn for two aimed faults in three) goes on from there: once a step has struck, the
next watches for the moment it names, or for whichever of the kind's moments comes first
("any"), and strikes one of that moment's roles; each strike but the last is undone after a
hold drawn from the seed, and in half the chains the provocation is undone as the first strike
lands (the deposed node comes back while the new leader is struck). A chain reaches the second
or third link of a failure (a failover, then the deposed primary back while the new one is
lost) that one fault at a moment never does. A step whose moment does not come ends the chain.

The start's info value says what happened: {"moment", "role", "provocation": {…}, "seen_s" (when
the moment was seen, from the fault's start), "roles" (who played which part), "strike": {…}
(what struck whom)} or "reached": false when the moment did not come; and "steps", one entry
per step tried, in order: {"moment", "role", "strike", "reached", "seen_s", "struck_s",
"targets"}, what coverage counts as the steps and pairs a run reached (checkers/moments.py).
"""

from __future__ import annotations

import functools
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from checkers.moments import LeaderChanged, Moment, Roles, leading
from clusters.kinds.base import ClusterKind, OperatorFailover
from core.errors import BadInput
from core.polls import Round
from nemesis import grudges, seed001, seed003
from nemesis.fault import Fault, Replaying
from nemesis.grudges import Grudge
from nemesis.kill import Kill, Restart
from nemesis.partition import Partition
from nemesis.pause import Pause
from nemesis.power import Power
from nemesis.promote import Promote

log = logging.getLogger(__name__)

POLL_EVERY = 0.2  # seconds between the fault's own polls while it watches
DELAY_S = (0.0, 1.5)  # the strike's delay after the moment is seen, drawn from the seed
CUT_S = (3.0, 8.0)  # how long a follower is cut off before it is let back
HOLD_S = (2.0, 8.0)  # how long a strike before a chain's last stays before it is undone
STEPS = (1, 2, 3)  # how many steps an aimed fault has, drawn alike: a chain for two in three
PROVOCATIONS = ("partition", "kill", "pause")
STRIKES = ("kill", "restart", "pause", "partition")
POWER = "power"
ANY = "any"  # a later step that strikes at whichever of the kind's moments comes first
MIN_NODES = 2  # a leader and another


@dataclass(frozen=True)
class History:
    """A seed's history placed as the cluster elects: a scenario of its own, beside the
    moments, where a kind's moments include a term won and it has the nodes."""

    min_nodes: int
    make: Callable[[list[str], random.Random], Fault]


# Seed 001's two tails are a scenario each: they need different faults (an orphan term, or a
# serving term's tail) and catch different bugs, and as one scenario each was drawn half as
# often as any other.
HISTORIES = (
    History(seed003.MIN_NODES, seed003.Seed003.planned),
    *(
        History(seed001.MIN_NODES, functools.partial(seed001.Seed001.planned, tail=tail))
        for tail in seed001.TAILS
    ),
)


# A seed's history given as a chain (`--chains`, `harness explore`): {"history": its shape, …},
# with the nodes it needs.
PLACED: dict[str, tuple[type[seed003.PlacedHistory], int]] = {
    seed003.Seed003.shape: (seed003.Seed003, seed003.MIN_NODES),
    seed001.Seed001.shape: (seed001.Seed001, seed001.MIN_NODES),
}


def of_spec(
    spec: Mapping[str, Any], moments: tuple[type[Moment], ...], node_count: int | None = None
) -> Fault:
    """A chain from its spec: an aimed fault's (`Aimed.spec`), or a seed's history placed as the
    cluster elects (`PlacedHistory.spec`: {"history": "seed001" or "seed003", "order", "tail"});
    one the kind (with `node_count` nodes, when known) cannot have is bad input."""
    if "history" not in spec:
        return Aimed.of_spec(spec, moments)
    placed, least = PLACED.get(str(spec["history"]), (None, 0))
    if placed is None:
        raise BadInput(
            f"a chain names the history {spec['history']!r}: the histories are {', '.join(PLACED)}"
        )
    if not any(m.name == "term-won" for m in moments):
        raise BadInput(
            f"a chain names {placed.shape}'s history, which this cluster kind cannot have: it "
            "places itself as terms are won, and the kind has no term-won moment"
        )
    if node_count is not None and node_count < least:
        raise BadInput(
            f"a chain names {placed.shape}'s history, which needs {least} nodes (two computes "
            f"and three safekeepers); this cluster has {node_count}"
        )
    return placed.of_spec(spec)


def histories(node_count: int, moments: tuple[type[Moment], ...]) -> list[History]:
    """The seeds' histories a kind with these moments and nodes can have."""
    won = any(m.name == "term-won" for m in moments)
    return [h for h in HISTORIES if won and node_count >= h.min_nodes]


def scenarios(node_count: int, moments: tuple[type[Moment], ...]) -> int:
    """How many scenarios the package draws among: each moment (a failover where the kind
    declares none) and each history the kind can have."""
    return len(moments or (LeaderChanged,)) + len(histories(node_count, moments))


@dataclass(frozen=True)
class Then:
    """A later step of a chain: once the step before it struck, watch for `moment` (None: any
    of the kind's moments, whichever holds first) and strike the first of its roles, in an order
    that starts at `order` of the way through them, that has nodes."""

    moment: type[Moment] | None
    strike: str
    delay: float
    order: float  # in [0, 1)
    hold: float | None = None  # seconds before its strike is undone; None: at the fault's end

    def roles_of(self, moment: type[Moment]) -> tuple[str, ...]:
        roles = moment.roles
        first = int(self.order * len(roles))
        return roles[first:] + roles[:first]

    def plan(self) -> dict[str, Any]:
        return {
            "moment": self.moment.name if self.moment else ANY,
            "strike_with": self.strike,
            "delay_s": self.delay,
        } | ({"hold_s": self.hold} if self.hold is not None else {})


@dataclass
class Seen:
    """A step's moment as the watch found it: which moment, who plays its roles, the role to
    strike (None while no node plays any role tried), when it was first seen."""

    moment: type[Moment]
    roles: Roles
    role: str | None
    seen_s: float


class Aimed(Fault):
    name = "aimed"

    def __init__(
        self,
        moment: type[Moment],
        roles: tuple[str, ...],
        provocation: str,
        strike: str,
        delay: float,
        cut: float,
        pick: float,
        hold: float | None = None,
        then: tuple[Then, ...] = (),
        release: bool = False,
        among: tuple[type[Moment], ...] = (),
    ) -> None:
        self.moment = moment
        self.roles = roles  # in the order they are tried
        self.provocation = provocation
        self.strike = strike
        self.delay = delay
        self.cut = cut
        self.pick = pick  # which follower is cut off, of those the moment names, in [0, 1)
        self.hold = hold  # seconds before the first strike is undone (in a chain)
        self.then = then  # the chain's later steps
        self.release = release  # the provocation undone as the first strike lands
        self.among = among or (moment,)  # the kind's moments, for a step aimed at any
        self.faults: list[Fault] = []  # in place now, in the order they started
        self.cuts: list[tuple[str, list[str]]] = []  # partitions in place: (why, who is cut off)
        self.partition: Partition | None = None  # the union of the cuts, as applied
        self.holds: list[threading.Timer] = []  # each undoes a strike when its hold runs out
        self.strikes = 0  # strikes made: names each partition strike's cut
        # the strikes' holds end on timers of their own: their undoing and the chain's own
        # actions change the faults in place one at a time
        self.lock = threading.RLock()
        self.provoked: Fault | None = None  # the leader's loss, when not a partition
        self.cancelled = threading.Event()

    @classmethod
    def planned(
        cls,
        nodes: list[str],
        rng: random.Random,
        moments: tuple[type[Moment], ...] = (),
        power: bool = False,
    ) -> Fault:
        """A fault aimed at one of the kind's `moments` (a failover where it declares none), or
        one of the seeds' histories the kind can have; an aimed fault is a chain of one to three
        steps."""
        kinds = moments or (LeaderChanged,)
        chosen = rng.choice([*kinds, *histories(len(nodes), moments)])
        if isinstance(chosen, History):
            return chosen.make(nodes, rng)
        roles = tuple(rng.sample(chosen.roles, len(chosen.roles)))
        strikes = (*STRIKES, POWER) if power else STRIKES
        provocation = rng.choice(PROVOCATIONS)
        first = (
            "partition" if chosen.provoke == "leader-cut" else provocation,
            rng.choice(strikes),
            round(rng.uniform(*DELAY_S), 2),
            round(rng.uniform(*CUT_S), 2),
            rng.random(),
        )
        steps = rng.choice(STEPS)
        if steps == 1:
            return cls(chosen, roles, *first, among=kinds)
        later = [
            Then(
                rng.choice([*kinds, None]),
                rng.choice(strikes),
                round(rng.uniform(*DELAY_S), 2),
                rng.random(),
                round(rng.uniform(*HOLD_S), 2) if i < steps - 2 else None,
            )
            for i in range(steps - 1)
        ]
        hold = round(rng.uniform(*HOLD_S), 2)
        release = rng.random() < 0.5
        return cls(chosen, roles, *first, hold, tuple(later), release, kinds)

    def spec(self) -> dict[str, Any]:
        """Everything drawn for it, as JSON: `of_spec` makes the same fault again (`harness
        explore` writes the chains it chose for a run so, and `harness run --chains` reads
        them)."""
        return {
            "moment": self.moment.name,
            "roles": list(self.roles),
            "provocation": self.provocation,
            "strike": self.strike,
            "delay": self.delay,
            "cut": self.cut,
            "pick": self.pick,
            "hold": self.hold,
            "release": self.release,
            "then": [
                {
                    "moment": step.moment.name if step.moment else ANY,
                    "strike": step.strike,
                    "delay": step.delay,
                    "order": step.order,
                    "hold": step.hold,
                }
                for step in self.then
            ],
        }

    @classmethod
    def of_spec(cls, spec: Mapping[str, Any], moments: tuple[type[Moment], ...]) -> Aimed:
        """The fault a `spec` describes, on a kind with these moments; a moment, role or
        strike the kind cannot have is bad input."""
        kinds = moments or (LeaderChanged,)
        by_name = {m.name: m for m in kinds}

        def moment(name: Any) -> type[Moment]:
            if name not in by_name:
                raise BadInput(
                    f"a chain names the moment {name!r}, which this cluster kind does not have: "
                    f"its moments are {', '.join(by_name)}"
                )
            return by_name[name]

        def strike(name: Any) -> str:
            if name not in (*STRIKES, POWER):
                raise BadInput(f"a chain strikes with {name!r}: choose from {', '.join(STRIKES)}")
            return str(name)

        try:
            first = moment(spec["moment"])
            roles = tuple(spec.get("roles") or first.roles)
            if set(roles) - set(first.roles):
                raise BadInput(
                    f"a chain names roles {', '.join(roles)} at {first.name}, whose roles are "
                    f"{', '.join(first.roles)}"
                )
            if spec.get("provocation", "partition") not in PROVOCATIONS:
                raise BadInput(
                    f"a chain provokes with {spec['provocation']!r}: choose from "
                    f"{', '.join(PROVOCATIONS)}"
                )
            then = tuple(
                Then(
                    None if step["moment"] == ANY else moment(step["moment"]),
                    strike(step["strike"]),
                    float(step.get("delay", 0.0)),
                    float(step.get("order", 0.0)) % 1.0,
                    None if step.get("hold") is None else float(step["hold"]),
                )
                for step in spec.get("then") or []
            )
            provocation = str(spec.get("provocation", "partition"))
            return cls(
                first,
                roles,
                "partition" if first.provoke == "leader-cut" else provocation,
                strike(spec["strike"]),
                float(spec.get("delay", 0.0)),
                float(spec.get("cut", CUT_S[0])),
                float(spec.get("pick", 0.0)) % 1.0,
                None if spec.get("hold") is None else float(spec["hold"]),
                then,
                bool(spec.get("release", False)),
                kinds,
            )
        except (KeyError, TypeError, ValueError) as e:
            raise BadInput(f"a chain is not of the form harness explore writes: {e!r}") from e

    def plan(self) -> dict[str, Any]:
        chain = {
            "hold_s": self.hold,
            "release": self.release,
            "then": [step.plan() for step in self.then],
        }
        return (
            {
                "fault": self.name,
                "moment": self.moment.name,
                "roles_tried": list(self.roles),
                "provoke": self.moment.provoke,
                "provocation": self.provocation,
                "strike_with": self.strike,
                "delay_s": self.delay,
            }
            | ({"cut_s": self.cut} if self.moment.provoke == "follower" else {})
            | (chain if self.then else {})
            | {"spec": self.spec()}  # what a replay makes it again from
        )

    @classmethod
    def of_plan(cls, plan: Mapping[str, Any], replaying: Replaying) -> Fault:
        if "spec" not in plan:
            raise BadInput("the schedule's aimed fault was recorded without its spec: replay a run "
                           "made since aimed faults record one")  # fmt: skip
        return cls.of_spec(plan["spec"], replaying.moments)

    def cancel(self) -> None:
        self.cancelled.set()

    def start(self, cluster: ClusterKind) -> dict[str, Any]:
        began = time.monotonic()
        names = [n.name for n in cluster.nodes]

        def round_now() -> Round:
            polled = cluster.poll()
            return Round(time=int((time.monotonic() - began) * 1e9), nodes=polled)

        def since() -> float:
            return round(time.monotonic() - began, 2)

        observer = self.moment()
        first = round_now()
        observer.observe(first)  # what the moment compares with: who leads, the terms held
        value = self.plan()
        found: Seen | None = None

        def watch() -> None:
            """One round more: the moment's roles, once it holds with a node in a role tried
            (a round may show the moment before the poll names who plays its parts)."""
            nonlocal found
            now = observer.observe(round_now())
            if now is not None:
                seen = found.seen_s if found else since()
                role = next((r for r in self.roles if now.get(r)), None)
                found = Seen(self.moment, now, role, seen)

        provoked = self._provoke(cluster, names, first, watch)
        value["provoked"] = provoked
        step = self._step_record(self.moment.name, self.roles, self.strike)
        if provoked.get("error"):
            return value | {"reached": False, "steps": [step]}
        # A follower seen behind while it was cut off catches up as soon as it is let back,
        # often faster than a poll: the strike comes then, with the roles seen during the cut.
        deadline = time.monotonic() + self.moment.watch_s
        while (found is None or found.role is None) and time.monotonic() < deadline:
            if self.cancelled.wait(POLL_EVERY):
                break
            watch()
        if found is None:
            return value | {"reached": False, "watched_s": self.moment.watch_s, "steps": [step]}
        value |= {"reached": True, "seen_s": found.seen_s, "roles": found.roles}
        value["role"] = found.role
        step |= {"reached": True, "seen_s": found.seen_s, "role": found.role}
        if found.role is None:
            why = "no node played any of the moment's roles"
            return value | {"strike": None, "why": why, "steps": [step | {"why": why}]}
        if self.release:
            self._release(cluster, names)
        struck = self._strike_after(cluster, names, self.delay, found, self.strike, self.hold)
        value |= {"strike": struck, "struck_s": since()}
        steps = [step | {"struck_s": since(), "targets": struck.get("targets")}]
        for later in self.then:
            if self.cancelled.is_set() or not self._last_struck(steps):
                break
            steps.append(self._later(cluster, names, later, round_now, since))
        return value | {"steps": steps}

    @staticmethod
    def _step_record(moment: str, roles: tuple[str, ...], strike: str) -> dict[str, Any]:
        """A step as coverage counts it, before its moment came: the role first tried."""
        return {"moment": moment, "role": roles[0] if roles else None, "strike": strike,
                "reached": False}  # fmt: skip

    @staticmethod
    def _last_struck(steps: list[dict[str, Any]]) -> bool:
        return bool(steps[-1].get("reached") and steps[-1].get("targets"))

    def _later(
        self,
        cluster: ClusterKind,
        names: list[str],
        step: Then,
        round_now: Callable[[], Round],
        since: Callable[[], float],
    ) -> dict[str, Any]:
        """A later step of the chain: watch for its moment (or any), strike its role."""
        kinds = (step.moment,) if step.moment else self.among
        observers = [m() for m in kinds]
        primer = round_now()
        for o in observers:
            o.observe(primer)  # who leads now, the terms held: what the moment compares with
        tried = step.roles_of(step.moment) if step.moment else ()
        record = self._step_record(step.moment.name if step.moment else ANY, tried, step.strike)
        deadline = time.monotonic() + max(m.watch_s for m in kinds)
        found: Seen | None = None
        while time.monotonic() < deadline and not self.cancelled.wait(POLL_EVERY):
            r = round_now()
            for o in observers:
                roles = o.observe(r)
                if roles is None or (found is not None and found.role is not None):
                    continue
                order = step.roles_of(type(o))
                role = next((x for x in order if roles.get(x)), None)
                seen = found.seen_s if found and found.moment is type(o) else since()
                found = Seen(type(o), roles, role, seen)
            if found is not None and found.role is not None:
                break
        if found is None:
            return record
        record |= {"moment": found.moment.name, "reached": True, "seen_s": found.seen_s}
        record |= {"role": found.role or record["role"], "roles": found.roles}
        if found.role is None:
            return record | {"why": "no node played any of the moment's roles"}
        struck = self._strike_after(cluster, names, step.delay, found, step.strike, step.hold)
        return record | {"struck_s": since(), "targets": struck.get("targets"), "by": struck}

    def _strike_after(
        self,
        cluster: ClusterKind,
        names: list[str],
        delay: float,
        found: Seen,
        strike: str,
        hold: float | None,
    ) -> dict[str, Any]:
        """Strike the role the watch found after `delay`; undone after `hold` s, if given."""
        self.cancelled.wait(delay)
        nodes = sorted(found.roles[found.role or ""])
        self.strikes += 1
        with self.lock:
            if strike == "partition":
                cut = (f"strike {self.strikes}", nodes)
                done = self._cut(cluster, names, cut) | {"targets": nodes}
                what: Fault | tuple[str, list[str]] = cut
            else:
                what = self._make(strike, nodes)
                done = self._begin(cluster, what)
        if hold is not None:
            timer = threading.Timer(hold, self._undo, (cluster, names, what))
            timer.daemon = True
            self.holds.append(timer)
            timer.start()
        return done

    def _release(self, cluster: ClusterKind, names: list[str]) -> None:
        """Undo the provocation, where it still holds: the lost leader comes back."""
        for why, nodes in list(self.cuts):
            if why == "provocation":
                self._uncut(cluster, names, (why, nodes))
        if self.provoked is not None and self.provoked in self.faults:
            self._end(cluster, self.provoked)

    def _undo(
        self, cluster: ClusterKind, names: list[str], what: Fault | tuple[str, list[str]]
    ) -> None:
        """Undo a strike whose hold has run out (unless the fault's stop undid it already)."""
        with self.lock:
            try:
                if isinstance(what, Fault):
                    if what in self.faults:
                        self._end(cluster, what)
                elif what in self.cuts:
                    self._uncut(cluster, names, what)
            except Exception as e:  # the fault's stop, and the final heal, undo it then
                log.warning("undoing a held strike failed: %s", e)

    def _provoke(
        self, cluster: ClusterKind, names: list[str], first: Round, watch: Callable[[], None]
    ) -> dict[str, Any]:
        """Bring the moment about: the leader lost, or a follower cut off (watched meanwhile
        with `watch`) and let back."""
        if self.moment.provoke == "follower":
            # only the cluster's nodes can be cut off: a partition of any other name is empty
            followers = [n for n in self.moment.followers(first) if n in names]
            if not followers:
                return {"error": "no node that does not lead answered the poll"}
            cut = ("follower", [followers[int(self.pick * len(followers))]])
            self._cut(cluster, names, cut)
            until = time.monotonic() + self.cut
            while (left := until - time.monotonic()) > 0:
                if self.cancelled.wait(min(POLL_EVERY, left)):
                    break
                watch()
            self._uncut(cluster, names, cut)
            return {"fault": "partition", "cut_off": cut[1][0], "for_s": self.cut}
        leader = cluster.leader()
        if leader is None:
            return {"error": "no node leads"}
        if isinstance(cluster, OperatorFailover):
            # nothing takes over by itself: the leader is lost as an operator's failover does it,
            # cut off (and left running) or stopped
            self.provoked = Promote("isolate" if self.provocation == "partition" else "stop")
        elif self.provocation != "partition":
            self.provoked = self._make(self.provocation, [leader])
        if self.provoked is None:
            done = self._cut(cluster, names, ("provocation", [leader]))
        else:
            done = self._begin(cluster, self.provoked)
        done |= {"target": leader}
        if self.moment.provoke != "leader-back":
            return done
        # lost until another leads, then back: what a deposed primary then does is the moment
        began = time.monotonic()
        while time.monotonic() - began < self.moment.watch_s:
            if [n for n in leading(Round(time=0, nodes=cluster.poll())) if n != leader]:
                break
            if self.cancelled.wait(POLL_EVERY):
                break
        self._release(cluster, names)
        return done | {"back_after_s": round(time.monotonic() - began, 2)}

    def _cut(
        self, cluster: ClusterKind, names: list[str], cut: tuple[str, list[str]]
    ) -> dict[str, Any]:
        """Cut these nodes off alone, on top of every cut already in place."""
        with self.lock:
            self.cuts.append(cut)
            return self._apply_cuts(cluster, names)

    def _uncut(
        self, cluster: ClusterKind, names: list[str], cut: tuple[str, list[str]]
    ) -> dict[str, Any]:
        """Let these nodes back; the other cuts stay."""
        with self.lock:
            if cut in self.cuts:
                self.cuts.remove(cut)
            return self._apply_cuts(cluster, names)

    def _apply_cuts(self, cluster: ClusterKind, names: list[str]) -> dict[str, Any]:
        """Put the union of the cuts in place (a partition replaces the one before it), or
        heal when none is left."""
        if not self.cuts:
            if self.partition is None:
                return {}
            done = self._end(cluster, self.partition)
            self.partition = None
            return done
        grudge = union(names, [grudges.isolate(names, nodes) for _, nodes in self.cuts])
        partition = Partition("aimed", grudge)
        if self.partition is not None:
            self.faults.remove(self.partition)
        self.partition = partition
        return self._begin(cluster, partition)

    def _make(self, what: str, nodes: list[str]) -> Fault:
        """A process fault on exactly these nodes."""
        cls = {"kill": Kill, "restart": Restart, "pause": Pause, POWER: Power}[what]
        return cls("role", nodes)

    def _begin(self, cluster: ClusterKind, fault: Fault) -> dict[str, Any]:
        with self.lock:
            self.faults.append(fault)  # before it starts: a partial start must be undone too
            return fault.start(cluster)

    def _end(self, cluster: ClusterKind, fault: Fault) -> dict[str, Any]:
        with self.lock:
            done = fault.stop(cluster)
            self.faults.remove(fault)  # after: a stop that fails leaves it for its own stop
            return done

    def stop(self, cluster: ClusterKind) -> dict[str, Any]:
        """Undo the strikes, then the provocation (a partition's heal removes every cut)."""
        self.cancelled.set()
        for timer in self.holds:
            timer.cancel()
        with self.lock:
            undone = [self._end(cluster, fault) for fault in reversed(list(self.faults))]
            self.cuts.clear()
            self.partition = None
        return self.plan() | {"undone": undone}


def union(names: list[str], grudges_: list[Grudge]) -> Grudge:
    """Each node deaf to whomever any of the grudges makes it deaf to."""
    return {n: frozenset().union(*(g.get(n, frozenset()) for g in grudges_)) for n in names}
