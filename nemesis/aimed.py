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

The strike and the provocation stay until the fault's end in the schedule, which undoes both.
Everything is drawn when the schedule is planned (moment, roles' order, provocation, strike,
delay, how long a follower is cut off); only who plays the roles is known when the moment comes.
On a kind whose moments include `term-won` and with the nodes they need, the schedule also draws
seed 003's history (`partition-seed003`) and seed 001's example (`partition-seed001`: a term's
voters include a longer log of an older term) with each of its two tails, as three scenarios
more.

The start's info value says what happened: {"moment", "role", "provocation": {…}, "seen_s" (when
the moment was seen, from the fault's start), "roles" (who played which part), "strike": {…}
(what struck whom)} or "reached": false when the moment did not come.
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from checkers.moments import LeaderChanged, Moment, Roles, leading
from clusters.kinds.base import ClusterKind, OperatorFailover
from core.polls import Round
from nemesis import grudges, seed001, seed003
from nemesis.fault import Fault
from nemesis.kill import Kill, Restart
from nemesis.partition import Partition
from nemesis.pause import Pause
from nemesis.power import Power
from nemesis.promote import Promote

POLL_EVERY = 0.2  # seconds between the fault's own polls while it watches
DELAY_S = (0.0, 1.5)  # the strike's delay after the moment is seen, drawn from the seed
CUT_S = (3.0, 8.0)  # how long a follower is cut off before it is let back
PROVOCATIONS = ("partition", "kill", "pause")
STRIKES = ("kill", "restart", "pause", "partition")
POWER = "power"
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


def histories(node_count: int, moments: tuple[type[Moment], ...]) -> list[History]:
    """The seeds' histories a kind with these moments and nodes can have."""
    won = any(m.name == "term-won" for m in moments)
    return [h for h in HISTORIES if won and node_count >= h.min_nodes]


def scenarios(node_count: int, moments: tuple[type[Moment], ...]) -> int:
    """How many scenarios the package draws among: each moment (a failover where the kind
    declares none) and each history the kind can have."""
    return len(moments or (LeaderChanged,)) + len(histories(node_count, moments))


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
    ) -> None:
        self.moment = moment
        self.roles = roles  # in the order they are tried
        self.provocation = provocation
        self.strike = strike
        self.delay = delay
        self.cut = cut
        self.pick = pick  # which follower is cut off, of those the moment names, in [0, 1)
        self.faults: list[Fault] = []  # in place now, in the order they started

    @classmethod
    def planned(
        cls,
        nodes: list[str],
        rng: random.Random,
        moments: tuple[type[Moment], ...] = (),
        power: bool = False,
    ) -> Fault:
        """A fault aimed at one of the kind's `moments` (a failover where it declares none), or
        one of the seeds' histories the kind can have."""
        chosen = rng.choice([*(moments or (LeaderChanged,)), *histories(len(nodes), moments)])
        if isinstance(chosen, History):
            return chosen.make(nodes, rng)
        roles = tuple(rng.sample(chosen.roles, len(chosen.roles)))
        strikes = (*STRIKES, POWER) if power else STRIKES
        provocation = rng.choice(PROVOCATIONS)
        return cls(
            chosen,
            roles,
            "partition" if chosen.provoke == "leader-cut" else provocation,
            rng.choice(strikes),
            round(rng.uniform(*DELAY_S), 2),
            round(rng.uniform(*CUT_S), 2),
            rng.random(),
        )

    def plan(self) -> dict[str, Any]:
        return {
            "fault": self.name,
            "moment": self.moment.name,
            "roles_tried": list(self.roles),
            "provoke": self.moment.provoke,
            "provocation": self.provocation,
            "strike_with": self.strike,
            "delay_s": self.delay,
        } | ({"cut_s": self.cut} if self.moment.provoke == "follower" else {})

    def start(self, cluster: ClusterKind) -> dict[str, Any]:
        began = time.monotonic()
        names = [n.name for n in cluster.nodes]
        observer = self.moment()

        def round_now() -> Round:
            polled = cluster.poll()
            return Round(time=int((time.monotonic() - began) * 1e9), nodes=polled)

        first = round_now()
        observer.observe(first)  # what the moment compares with: who leads, the terms held
        value = self.plan()
        roles: Roles | None = None
        seen: float | None = None
        role: str | None = None

        def watch() -> None:
            """One round more: the moment's roles, once it holds with a node in a role tried
            (a round may show the moment before the poll names who plays its parts)."""
            nonlocal roles, seen, role
            now = observer.observe(round_now())
            if now is not None:
                roles = now
                seen = seen if seen is not None else round(time.monotonic() - began, 2)
                role = next((r for r in self.roles if now.get(r)), None)

        provoked = self._provoke(cluster, names, first, watch)
        value["provoked"] = provoked
        if provoked.get("error"):
            return value | {"reached": False}
        # A follower seen behind while it was cut off catches up as soon as it is let back,
        # often faster than a poll: the strike comes then, with the roles seen during the cut.
        deadline = time.monotonic() + self.moment.watch_s
        while role is None and time.monotonic() < deadline:
            time.sleep(POLL_EVERY)
            watch()
        if roles is None:
            return value | {"reached": False, "watched_s": self.moment.watch_s}
        value |= {"reached": True, "seen_s": seen, "roles": roles, "role": role}
        if role is None:
            return value | {"strike": None, "why": "no node played any of the moment's roles"}
        time.sleep(self.delay)
        struck = self._strike(cluster, names, sorted(roles[role]))
        return value | {"strike": struck, "struck_s": round(time.monotonic() - began, 2)}

    def _provoke(
        self, cluster: ClusterKind, names: list[str], first: Round, watch: Callable[[], None]
    ) -> dict[str, Any]:
        """Bring the moment about: the leader lost, or a follower cut off (watched meanwhile
        with `watch`) and let back."""
        if self.moment.provoke == "follower":
            followers = self.moment.followers(first)
            if not followers:
                return {"error": "no node that does not lead answered the poll"}
            cut = followers[int(self.pick * len(followers))]
            fault = self._make("partition", names, [cut])
            self._begin(cluster, fault)
            until = time.monotonic() + self.cut
            while (left := until - time.monotonic()) > 0:
                time.sleep(min(POLL_EVERY, left))
                watch()
            self._end(cluster, fault)
            return {"fault": "partition", "cut_off": cut, "for_s": self.cut}
        leader = cluster.leader()
        if leader is None:
            return {"error": "no node leads"}
        if isinstance(cluster, OperatorFailover):
            # nothing takes over by itself: the leader is lost as an operator's failover does it,
            # cut off (and left running) or stopped
            fault: Fault = Promote("isolate" if self.provocation == "partition" else "stop")
        else:
            fault = self._make(self.provocation, names, [leader])
        done = self._begin(cluster, fault) | {"target": leader}
        if self.moment.provoke != "leader-back":
            return done
        # lost until another leads, then back: what a deposed primary then does is the moment
        began = time.monotonic()
        while time.monotonic() - began < self.moment.watch_s:
            if [n for n in leading(Round(time=0, nodes=cluster.poll())) if n != leader]:
                break
            time.sleep(POLL_EVERY)
        self._end(cluster, fault)
        return done | {"back_after_s": round(time.monotonic() - began, 2)}

    def _strike(self, cluster: ClusterKind, names: list[str], nodes: list[str]) -> dict[str, Any]:
        return self._begin(cluster, self._make(self.strike, names, nodes))

    def _make(self, what: str, names: list[str], nodes: list[str]) -> Fault:
        """A fault on exactly these nodes; a partition cuts them off alone, on top of any
        partition already in place (the provocation's)."""
        if what == "partition":
            grudge = grudges.isolate(names, nodes)
            for f in self.faults:
                if isinstance(f, Partition) and f.grudge is not None:
                    grudge = {n: grudge[n] | f.grudge.get(n, frozenset()) for n in names}
            return Partition("aimed", grudge)
        cls = {"kill": Kill, "restart": Restart, "pause": Pause, POWER: Power}[what]
        return cls("role", nodes)

    def _begin(self, cluster: ClusterKind, fault: Fault) -> dict[str, Any]:
        self.faults.append(fault)  # before it starts: a partial start must be undone too
        return fault.start(cluster)

    def _end(self, cluster: ClusterKind, fault: Fault) -> dict[str, Any]:
        done = fault.stop(cluster)
        self.faults.remove(fault)  # after: a stop that fails leaves it for the fault's own stop
        return done

    def stop(self, cluster: ClusterKind) -> dict[str, Any]:
        """Undo the strike, then the provocation (a partition's heal removes both)."""
        undone = [self._end(cluster, fault) for fault in reversed(list(self.faults))]
        return self.plan() | {"undone": undone}
