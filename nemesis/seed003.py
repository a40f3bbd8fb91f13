"""Seed 003's history as one fault: partitions that change as the cluster elects, so that a
term's log reaches only some of the voters that elected it.

A fault drawn in advance cannot place seed 003's history: its partitions must follow each other
with no heal between them, and the second must begin between a term's votes and its first
record. This fault watches the cluster's poll and moves the partition when the term is won. It
needs two computes: L, the one that serves when it starts, and S, another (any further compute
stays with L). Of the safekeepers (in an order the seed draws), A gets L's tail, the lagging
ones (B and E of five, B of three: one fewer than a quorum) vote for S's term without its
records, and the recording ones (C and D of five, C of three) get them:

1. `tail`: {L, A} | {S, B, C, D, E}. L writes a tail that only A gets, then loses its lease;
   S wins a term with B, C, D and E.
2. `split`, as soon as a safekeeper's term rises: {S, A, C, D} | {L, B, E}. The term's records
   reach C and D (their epoch moves on) but not B and E, which voted for it; A, which did not,
   is brought into the term from its restart LSN, the new records written over its tail.
3. `apart`: S and L each alone, until S's term has ended (its lease).
4. `corrupt`: {S, A, B, E} | {L} | {C, D}. S stands again; A, B and E elect it, and the donor is
   the voter with the highest (epoch, flush LSN).

In the epoch variant A, B and E still have the first epoch, so A's log wins and is committed:
the new records over the start of L's tail and the rest of L's tail after them, a log that no
proposer wrote. Once the fault heals, the next term's donor is C or D (a higher epoch) and its
log starts below what A, B and E reported committed (`term-below-commit`). In the term-history
variant A is truncated at the divergence point when it joins the term, and nothing is lost.

It is one of the scenarios of the aimed nemesis (nemesis.aimed), and a package of its own.
`start` runs the phases itself (a minute or two at most) and returns what each one saw; the
final partition stays until the fault's stop heals it. What is polled is what the harness
records anyway (the kind's `poll`).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from clusters.kinds.base import ClusterKind
from core.errors import BadInput
from core.polls import ComputePoll, Record, SafekeeperPoll
from nemesis import grudges, partition
from nemesis.fault import Fault, Replaying, on_nodes
from nemesis.grudges import Grudge

log = logging.getLogger(__name__)

MIN_KEEPERS = 3  # A, a lagging voter and a recording one
MIN_NODES = MIN_KEEPERS + 2
POLL_EVERY = 0.2  # seconds between polls while a phase waits: the split must beat the records
SETTLE = 3.0  # seconds a phase's partition stays once its condition holds
WAITS = {"leader": 30.0, "tail": 45.0, "split": 20.0, "apart": 15.0, "corrupt": 25.0}

Poll = dict[str, Record]


@dataclass(frozen=True)
class Cast:
    """Who plays which part of seed 003's history."""

    old: str  # L: the compute that serves when the fault starts
    new: str  # S: the compute that wins the split term
    others: tuple[str, ...]  # any further computes: kept with L, out of the way
    a: str  # gets L's tail, then the split term's records over it
    lagging: tuple[str, ...]  # vote for the split term, never get its records (B, E)
    recording: tuple[str, ...]  # get them (C, D)

    def keepers(self) -> list[str]:
        return [self.a, *self.lagging, *self.recording]

    def as_json(self) -> dict[str, Any]:
        return {
            "L": self.old,
            "S": self.new,
            "A": self.a,
            "lagging": list(self.lagging),
            "recording": list(self.recording),
        }


def cast(computes: list[str], keepers: list[str], leader: str, order: list[int]) -> Cast:
    """The parts, from the computes, the safekeepers (in node order), the compute that leads
    and the seed's order of the nodes (of which the first len(keepers) ranks order the
    safekeepers). Of five, in that order, A B C D E: B and E lag, C and D record."""
    if len(keepers) < MIN_KEEPERS or len(computes) < 2 or leader not in computes:
        raise ValueError(
            f"seed 003's history needs at least {MIN_KEEPERS} safekeepers and two computes, one "
            f"leading (safekeepers {keepers}, computes {computes}, leader {leader})"
        )
    ranked = [keepers[i] for i in order if i < len(keepers)]
    lag = len(keepers) // 2  # one fewer than a quorum: with A, they elect the corrupting term
    rec = len(keepers) - 1 - lag  # fewer than a quorum: the split term commits nothing new
    new = next(c for c in computes if c != leader)
    others = tuple(n for n in computes if n not in (leader, new))
    lagging = (ranked[1], *ranked[2 + rec :])
    return Cast(leader, new, others, ranked[0], lagging, tuple(ranked[2 : 2 + rec]))


def phase_grudge(phase: str, nodes: list[str], c: Cast) -> Grudge:
    """The partition of each phase (see the module's docstring)."""
    old, lag, rec = {c.old, *c.others}, set(c.lagging), set(c.recording)
    components = {
        "tail": [old | {c.a}, {c.new} | lag | rec],
        "split": [{c.new, c.a} | rec, old | lag],
        "apart": [{c.new}, old, set(c.keepers())],
        "corrupt": [{c.new, c.a} | lag, old, rec],
    }[phase]
    return grudges.from_components(nodes, components)


def keeper(polled: Poll, name: str) -> SafekeeperPoll | None:
    """What the safekeeper `name` said, if it answered."""
    state = polled.get(name)
    return state if isinstance(state, SafekeeperPoll) else None


def terms(polled: Poll, names: list[str] | tuple[str, ...]) -> list[int]:
    return [s.term or 0 for n in names if (s := keeper(polled, n)) is not None]


def flush(polled: Poll, name: str) -> int:
    state = keeper(polled, name)
    return (state.flush_lsn or 0) if state else 0


def elected(polled: Poll, c: Cast, before: int) -> bool:
    """S's side has voted in a term above `before`: the moment to split its voters."""
    return max(terms(polled, [*c.lagging, *c.recording]), default=0) > before


def recorded(polled: Poll, c: Cast, voters_flush: int, term: int) -> bool:
    """The split term's records reached the recording safekeepers, and A has joined it."""
    a = keeper(polled, c.a)
    return min(flush(polled, n) for n in c.recording) > voters_flush and (
        a is not None and (a.term or 0) >= term
    )


def term_start(polled: Poll, term: int, fallback: int) -> int:
    """Where `term`'s log starts, as the safekeepers that heard its announcement say: the VCL
    announced with it (epoch variant) or its entry in their term history; else `fallback`."""
    starts = [
        start
        for s in polled.values()
        if isinstance(s, SafekeeperPoll)
        for t, start in [*(s.history or []), [s.proposed_epoch, s.vcl]]
        if t == term and start
    ]
    return max(starts, default=fallback)


def serving(polled: Poll) -> bool:
    """A compute serves clients."""
    return any(isinstance(s, ComputePoll) and s.serving for s in polled.values())


def stood_down(polled: Poll, compute: str) -> bool:
    """The compute (S) no longer leads a term (its lease ran out), so none of its followers is
    left."""
    state = polled.get(compute)
    return isinstance(state, ComputePoll) and state.term is None


def committed(polled: Poll, c: Cast, term: int) -> bool:
    """A and the lagging safekeepers elected a term above `term`, and one of them reports A's
    whole log committed (the proposer's commit LSN reaches each with its next append)."""
    voters = [keeper(polled, n) for n in (c.a, *c.lagging)]
    if any(v is None for v in voters) or min(v.term or 0 for v in voters if v) <= term:
        return False
    return max(v.commit_lsn or 0 for v in voters if v) >= flush(polled, c.a)


@dataclass
class Placing:
    """A placed history under way: the cluster, who plays which part, and the fault's start
    value, with what each phase saw appended to its "phases"."""

    cluster: ClusterKind
    parts: Any
    value: dict[str, Any]
    waits: dict[str, float] = field(default_factory=lambda: WAITS)
    cancelled: threading.Event = field(default_factory=threading.Event)  # the run is ending
    began: float = field(default_factory=time.monotonic)

    def at(self) -> float:
        """Seconds since the fault began."""
        return round(time.monotonic() - self.began, 2)

    def names(self) -> list[str]:
        return [n.name for n in self.cluster.nodes]

    def wait(self, condition: Callable[[Poll], bool], phase: str) -> Poll | None:
        """The poll that shows `condition` hold, or None after the phase's wait or once the
        run is ending (the heal waits for the history's start to return)."""
        return wait(self.cluster, condition, phase, self.waits, self.cancelled)

    def enter(self, phase: str, grudge: Grudge) -> dict[str, Any]:
        """Put the phase's partition in place; its entry in "phases", for what it sees."""
        on_nodes(self.cluster.nodes, lambda node: partition.apply(node, grudge))
        entry = {"phase": phase, "at_s": self.at(), "grudge": grudges.as_json(grudge)}
        self.value["phases"].append(entry)
        return entry

    def step(
        self, moment: str, role: str, strike: str, targets: list[str], reached: bool = True
    ) -> None:
        """A step of the history as a chain's steps are recorded (nemesis.aimed): the moment
        that ended the phase before it (a condition of the history's own where the kind
        declares none), the part struck and how, so that coverage counts the history's
        steps and pairs as it counts a chain's. A step whose moment did not come strikes
        nothing."""
        at = self.at()
        self.value.setdefault("steps", []).append(
            {
                "moment": moment,
                "role": role,
                "strike": strike,
                "reached": reached,
                "seen_s": at if reached else None,
                "struck_s": at if reached else None,
                "targets": sorted(targets) if reached else [],
            }
        )


class PlacedHistory(Fault):
    """A seed's history placed as the cluster elects: its parts are cast from the first poll in
    which a compute serves, then its phases follow what the polls show (`run`); the last
    partition stays until the fault's stop heals it."""

    name = "partition"
    shape: ClassVar[str]
    waits: ClassVar[dict[str, float]]  # the most each phase waits for its condition, in s
    # who plays which part: (computes, safekeepers in node order, the compute that serves,
    # the seed's order of the nodes) → the parts
    casting: ClassVar[Callable[[list[str], list[str], str, list[int]], Any]]

    # its phases as a chain's steps, in order: (moment, role, strike) each
    STEPS: ClassVar[tuple[tuple[str, str, str], ...]]

    def __init__(self, order: list[int]) -> None:
        self.order = order
        self.cancelled = threading.Event()

    @classmethod
    def planned(cls, nodes: list[str], rng: random.Random) -> PlacedHistory:
        return cls(rng.sample(range(len(nodes)), len(nodes)))

    def plan(self) -> dict[str, Any]:
        return {"fault": self.name, "shape": self.shape, "order": self.order}

    def steps(self) -> tuple[tuple[str, str, str], ...]:
        """The steps its phases take, in order (`harness explore` aims at their pairs)."""
        return self.STEPS

    def spec(self) -> dict[str, Any]:
        """As a chain is given to `harness run --chains` (nemesis.aimed.of_spec)."""
        return {"history": self.shape, "order": self.order}

    @classmethod
    def of_spec(cls, spec: Mapping[str, Any]) -> PlacedHistory:
        try:
            return cls([int(i) for i in spec["order"]])
        except (KeyError, TypeError, ValueError) as e:
            raise BadInput(f"a chain's {cls.shape} history needs its order of nodes: {e!r}") from e

    @classmethod
    def replays(cls, plan: Mapping[str, Any]) -> bool:
        return super().replays(plan) and plan.get("shape") == getattr(cls, "shape", None)

    @classmethod
    def of_plan(cls, plan: Mapping[str, Any], replaying: Replaying) -> Fault:
        return cls([int(i) for i in plan["order"]])

    def cancel(self) -> None:
        self.cancelled.set()

    def start(self, cluster: ClusterKind) -> dict[str, Any]:
        value = self.plan() | {"mechanism": "iptables", "phases": []}
        placing = Placing(cluster, None, value, self.waits, self.cancelled)
        polled = placing.wait(serving, "leader")
        if polled is None:
            return placing.value | {"reached": False, "error": "no compute served"}
        names = placing.names()
        computes = [n for n in names if isinstance(polled.get(n), ComputePoll)]
        keepers = [n for n in names if keeper(polled, n) is not None]
        leader = next(n for n in computes if polled[n].leads())
        placing.parts = type(self).casting(computes, keepers, leader, self.order)
        placing.value["cast"] = placing.parts.as_json()
        return self.run(placing, polled)

    def run(self, placing: Placing, polled: Poll) -> dict[str, Any]:
        """The phases, from the first poll with a compute serving: the start's value, with
        "reached" and "took_s"."""
        raise NotImplementedError

    def stop(self, cluster: ClusterKind) -> dict[str, Any]:
        healed = on_nodes(cluster.nodes, partition.heal)
        return self.plan() | {"healed": [name for name, had in healed.items() if had]}


class Seed003(PlacedHistory):
    shape = "seed003"
    waits = WAITS
    casting = staticmethod(cast)
    STEPS = (
        ("serving", "leader", "partition-tail"),
        ("term-won", "voted-not-recorded", "partition-split"),
        ("recorded", "new-leader", "partition-apart"),
        ("stood-down", "new-leader", "partition-corrupt"),
    )

    def run(self, placing: Placing, polled: Poll) -> dict[str, Any]:
        cluster, c, at, value = placing.cluster, placing.parts, placing.at, placing.value
        phases = value["phases"]

        def enter(phase: str) -> None:
            placing.enter(phase, phase_grudge(phase, placing.names(), c))

        before = max(terms(polled, c.keepers()))
        enter("tail")
        placing.step(*self.STEPS[0], [c.old, c.a])
        polled = placing.wait(lambda p: elected(p, c, before), "tail")
        if polled is None:
            placing.step(*self.STEPS[1], [], reached=False)
            return value | {"reached": False, "error": "S won no term"}
        voters_flush = max(flush(polled, n) for n in c.lagging)
        term = max(terms(polled, [*c.lagging, *c.recording]))
        phases[-1] |= {"term_won_s": at(), "term": term, "voters_flush": voters_flush}
        enter("split")
        placing.step(*self.STEPS[1], list(c.lagging))
        # what the moments' coverage counts: the split strikes the term just won, cutting off
        # voters that hold no record of it yet
        value |= {"moment": "term-won", "role": "voted-not-recorded", "struck_s": at()}
        value["strike"] = {"fault": "partition", "targets": list(c.lagging)}
        got = placing.wait(lambda p: recorded(p, c, voters_flush, term), "split") is not None
        time.sleep(SETTLE)
        polled = cluster.poll()
        # caught up to the term's start (below it, the donor's log) is not having its records
        start = term_start(polled, term, voters_flush)
        lagged = max(flush(polled, n) for n in c.lagging) <= start
        phases[-1] |= {
            "term_start": start,
            "lagging_without_records": lagged,
            "tail_outlived": flush(polled, c.a) > max(flush(polled, n) for n in c.recording),
            "flush": {n: flush(polled, n) for n in c.keepers()},
        }
        enter("apart")
        placing.step(*self.STEPS[2], [c.new], reached=got)
        down = placing.wait(lambda p: stood_down(p, c.new), "apart") is not None
        enter("corrupt")
        placing.step(*self.STEPS[3], [c.new], reached=down)
        done = placing.wait(lambda p: committed(p, c, term), "corrupt")
        phases[-1] |= {"committed_s": at() if done else None}
        if done:
            time.sleep(SETTLE)
        # seed 003's shape: the lagging voters never got the split term's records, A's tail
        # outlived them, and A's log was then elected and reported committed
        reached = done is not None and lagged and phases[1]["tail_outlived"]
        return value | {"reached": reached, "took_s": at()}


def wait(
    cluster: ClusterKind,
    condition: Callable[[Poll], bool],
    phase: str,
    within: dict[str, float] = WAITS,
    cancelled: threading.Event | None = None,
) -> Poll | None:
    """Poll until `condition` holds (the poll that shows it), or None after the phase's wait
    (or at once when `cancelled` is set)."""
    deadline = time.monotonic() + within[phase]
    while time.monotonic() < deadline and not (cancelled and cancelled.is_set()):
        polled = cluster.poll()
        if condition(polled):
            return polled
        time.sleep(POLL_EVERY)
    log.info("the %s phase's condition did not hold within %.0f s", phase, within[phase])
    return None
