"""Seed 001's first example as one fault: partitions that move as the cluster elects, so that
a term's electors include a safekeeper whose log is longer than any other voter's but was
written in an older term.

Seed 001's example: S3 holds R1..R4 of the first epoch, S1 and S2 commit R3(e) in the second,
and a later election by a quorum with S3 in it must keep R3(e): its VCL is the log of the
newest term, not the longest log (Raft's up-to-date rule). A proposer that ranked its voters by
length alone would take S3's R3(c), R4(d) and write over a committed record.

The fault needs two computes: L, the one that serves when it starts, and S, another (any
further compute stays with L). Of the safekeepers (in an order the seed draws), the first
n - quorum form T, which gets L's tail (S3 of the seed), and the others R, a quorum, which
elects S (S1 and S2):

1. `tail`: {L} ∪ T | {S} ∪ R. L writes a tail that only T gets, then loses its lease; S wins a
   term with R and commits WAL of its own on R. L's waiting commits alone make a tail of a
   kilobyte or two, and S's first writes after its promotion carry whole pages, so on a kind
   that can (SwitchesWal) L is made to switch WAL segments as the phase begins, as
   `archive_timeout` would: the old segment's unused rest, megabytes, reaches T as WAL. The
   phase ends as soon as R reports a commit past the term's start.
2. `apart`: S, L and the safekeepers each on their own, until S's term has ended (its lease).
   The bridge, the one of R with the least WAL, is chosen then.
3. `vote`: {S} ∪ T ∪ {bridge} | {L} | the rest of R. S stands again and T with the bridge
   elects it: a quorum in which the longest log is T's, of the older term.

The seed draws whose term T's tail is of. In seed 001's example (`serving`) it is L's serving
term, which R holds too. In the other (`fresh`) it is an orphan term:

0. `takeover`: L is killed and S, its standby, takes over. As soon as S's poll names its new
   term and its donor, the `tail` phase cuts S off with T, before the term's first record, and
   L comes back with R. The donor is put in T, since S reads the log's last segment from it
   before its Postgres starts. S's promotion and its switch of WAL segments reach T alone.

T then holds a term whose records no later proposer's history names, and L and S swap parts
for the rest: L wins the next term with R and stands in the vote. A voter's last term differs
from the proposer's last shared one, which is where a search for the divergence point that
skips entries goes wrong (seed 003: truncate at the divergence point), and T's log, the
longer, is still of the older term.

A correct proposer takes the bridge's log (its last term is the newer) and T is truncated to
where the two diverge. One that takes T's log elects a log without the newer term's committed
WAL, which S's own Postgres holds: S stands down as divergent, and with the committed log split
between the rest of R and the new term, the cluster does not serve again (`not-recovered`,
`no-final-read`).

It is one of the scenarios of the aimed nemesis (nemesis.aimed), and a package of its own,
`partition-seed001`, as seed 003's history is (nemesis.seed003, whose helpers it shares).
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from clusters.kinds.base import ClusterKind, SwitchesWal
from core.errors import BadInput
from core.polls import ComputePoll
from nemesis import grudges
from nemesis.fault import Fault, Replaying
from nemesis.grudges import Grudge
from nemesis.kill import Kill
from nemesis.seed003 import (
    PlacedHistory,
    Placing,
    Poll,
    flush,
    keeper,
    stood_down,
    term_start,
    terms,
)

MIN_KEEPERS = 3  # one with the old term's longer log, and a quorum without it
MIN_NODES = MIN_KEEPERS + 2
SETTLE = 3.0  # seconds the vote's partition stays once the new term has committed
WAITS = {
    "leader": 30.0,
    "takeover": 30.0,
    "switch": 15.0,
    "tail": 45.0,
    "recorded": 15.0,
    "apart": 15.0,
    "vote": 40.0,
}
TAILS = ("serving", "fresh")  # whose term T's tail is of: L's serving term, or S's new one
# The phases as a chain's steps (moment, role, strike): `serving`'s first, `fresh`'s two first
# (the leader killed, then the new one cut off with T), then both alike.
SERVING = (("serving", "leader", "partition-tail"),)
FRESH = (("serving", "leader", "kill"), ("term-won", "new-leader", "partition-tail"))
LATER = (("recorded", "new-leader", "partition-apart"), ("stood-down", "voters", "partition-vote"))


@dataclass(frozen=True)
class Cast:
    """Who plays which part of seed 001's example."""

    old: str  # L: the compute that serves when the fault starts
    new: str  # S: the compute that wins the next two terms
    others: tuple[str, ...]  # any further computes: kept with L, out of the way
    tail: tuple[str, ...]  # T: get L's tail, then vote with the bridge
    quorum: tuple[str, ...]  # R: elect S and hold its term's WAL

    def keepers(self) -> list[str]:
        return [*self.tail, *self.quorum]

    def as_json(self) -> dict[str, Any]:
        return {"L": self.old, "S": self.new, "T": list(self.tail), "R": list(self.quorum)}


def cast(computes: list[str], keepers: list[str], leader: str, order: list[int]) -> Cast:
    """The parts, from the computes, the safekeepers (in node order), the compute that leads
    and the seed's order of the nodes (of which the first len(keepers) ranks order the
    safekeepers): T the first n - quorum of that order, R the rest."""
    if len(keepers) < MIN_KEEPERS or len(computes) < 2 or leader not in computes:
        raise ValueError(
            f"seed 001's example needs at least {MIN_KEEPERS} safekeepers and two computes, one "
            f"leading (safekeepers {keepers}, computes {computes}, leader {leader})"
        )
    ranked = [keepers[i] for i in order if i < len(keepers)]
    outside = len(keepers) - (len(keepers) // 2 + 1)
    new = next(c for c in computes if c != leader)
    others = tuple(n for n in computes if n not in (leader, new))
    return Cast(leader, new, others, tuple(ranked[:outside]), tuple(ranked[outside:]))


def phase_grudge(phase: str, nodes: list[str], c: Cast, bridge: str = "") -> Grudge:
    """The partition of each phase (see the module's docstring); `vote` needs the bridge."""
    old, tail, quorum = {c.old, *c.others}, set(c.tail), set(c.quorum)
    components = {
        "tail": lambda: [old | tail, {c.new} | quorum],
        "apart": lambda: [{c.new}, old, tail | quorum],
        "vote": lambda: [{c.new, bridge} | tail, old, quorum - {bridge}],
    }[phase]()
    return grudges.from_components(nodes, components)


def elected(polled: Poll, c: Cast, before: int) -> bool:
    """R has voted in a term above `before`: S won it."""
    return max(terms(polled, c.quorum), default=0) > before


def recorded(polled: Poll, c: Cast, term: int, start: int) -> bool:
    """A safekeeper of R in `term` reports a commit past `start`: the term committed WAL of its
    own (the commit position reaches a safekeeper with the proposer's next append)."""
    return any(
        (s := keeper(polled, n)) is not None
        and (s.term or 0) >= term
        and (s.commit_lsn or 0) > start
        for n in c.quorum
    )


def bridge_of(polled: Poll, c: Cast) -> str:
    """The one of R with the least WAL: with T, the quorum whose longest log is T's."""
    return min(c.quorum, key=lambda n: (flush(polled, n), n))


def won_by(polled: Poll, compute: str, before: int) -> tuple[int, str] | None:
    """The term above `before` that `compute` was elected in, with its donor, once its poll
    says so; else None."""
    state = polled.get(compute)
    if isinstance(state, ComputePoll) and (state.term or 0) > before and state.donor:
        return state.term or 0, state.donor
    return None


def recast(c: Cast, donor: str) -> Cast:
    """The parts once S has won the fresh term from `donor`: S and L swap theirs, and T is the
    donor with the first others of the seed's order (S reads the log's last segment from its
    donor before its Postgres starts, so the donor must stay on S's side)."""
    ranked = [*c.tail, *c.quorum]
    tail = (donor, *[k for k in ranked if k != donor][: len(c.tail) - 1])
    return Cast(c.new, c.old, c.others, tail, tuple(k for k in ranked if k not in tail))


def holds(polled: Poll, name: str, term: int) -> bool:
    """The safekeeper's log holds records of `term`: its history names the term from a start
    below the end of its WAL (a term announced and not yet written is not held)."""
    state = keeper(polled, name)
    return state is not None and any(
        t == term and start < (state.flush_lsn or 0) for t, start in state.history or []
    )


def orphaned(polled: Poll, c: Cast, term: int) -> bool:
    """`term` is an orphan: a safekeeper of T holds records of it, and none of R does."""
    return any(holds(polled, n, term) for n in c.tail) and not any(
        holds(polled, n, term) for n in c.quorum
    )


def won(polled: Poll, voters: list[str], term: int) -> bool:
    """Every voter holds a term above `term`, and that term committed WAL past its start."""
    states = [keeper(polled, n) for n in voters]
    if any(s is None or (s.term or 0) <= term for s in states):
        return False
    top = max(s.term or 0 for s in states if s)
    start = term_start(polled, top, 0)
    return start > 0 and max(s.commit_lsn or 0 for s in states if s) > start


def switch(cluster: SwitchesWal, node: str) -> str:
    """Have the node's Postgres switch WAL segments, trying again until it answers as a primary
    (a standby that won a term is promoted a moment after): the LSN it answered, or the last
    answer."""
    deadline = time.monotonic() + WAITS["switch"]
    while True:
        answer = cluster.switch_wal(node)
        if "/" in answer or time.monotonic() > deadline:
            return answer
        time.sleep(0.2)


class Seed001(PlacedHistory):
    shape = "seed001"
    waits = WAITS
    casting = staticmethod(cast)

    def __init__(self, order: list[int], tail: str = "serving") -> None:
        super().__init__(order)
        self.tail = tail
        self.killed: Kill | None = None  # L, while S takes over (`fresh`)

    @classmethod
    def planned(cls, nodes: list[str], rng: random.Random, tail: str | None = None) -> Seed001:
        """The nodes' order from the seed, and the tail given or (None) drawn from it."""
        order = rng.sample(range(len(nodes)), len(nodes))
        return cls(order, tail if tail is not None else rng.choice(TAILS))

    def plan(self) -> dict[str, Any]:
        return super().plan() | {"tail": self.tail}

    def steps(self) -> tuple[tuple[str, str, str], ...]:
        return (FRESH if self.tail == "fresh" else SERVING) + LATER

    def spec(self) -> dict[str, Any]:
        return super().spec() | {"tail": self.tail}

    @classmethod
    def of_spec(cls, spec: Mapping[str, Any]) -> Seed001:
        tail = spec.get("tail", "serving")
        if tail not in TAILS:
            raise BadInput(f"a chain's seed001 history has no tail {tail!r}: choose from {TAILS}")
        return cls(super().of_spec(spec).order, tail)

    @classmethod
    def of_plan(cls, plan: Mapping[str, Any], replaying: Replaying) -> Fault:
        if plan.get("tail", "serving") not in TAILS:
            raise BadInput(f"the schedule's seed 001 history has no tail {plan['tail']!r}")
        return cls([int(i) for i in plan["order"]], plan.get("tail", "serving"))

    def run(self, placing: Placing, polled: Poll) -> dict[str, Any]:
        cluster, c, at, value = placing.cluster, placing.parts, placing.at, placing.value
        phases = value["phases"]

        def enter(phase: str, bridge: str = "") -> None:
            placing.enter(phase, phase_grudge(phase, placing.names(), c, bridge))

        before = max(terms(polled, c.keepers()))
        if self.tail == "fresh":
            entry = {"phase": "takeover", "at_s": at()}
            phases.append(entry)
            self.killed = Kill("role", [c.old])
            entry["killed"] = self.killed.start(cluster).get("killed")
            placing.step(*FRESH[0], [c.old])
            polled = placing.wait(lambda p: won_by(p, c.new, before) is not None, "takeover")
            if polled is None:
                placing.step(*FRESH[1], [], reached=False)
                return value | {"reached": False, "error": "S won no term"}
            before, donor = won_by(polled, c.new, before) or (before, "")
            entry |= {"term_won_s": at(), "term": before, "donor": donor}
            # S, which now leads, takes L's part for the rest, and L takes S's
            c = placing.parts = recast(c, donor)
            value["cast"] = c.as_json()
        enter("tail")
        # serving: the leader is cut off with T; fresh: the new leader, with its donor
        placing.step(*(FRESH[1] if self.killed is not None else SERVING[0]), [c.old, *c.tail])
        if self.killed is not None:  # L back, with R
            phases[-1]["restarted"] = self.killed.stop(cluster).get("restarted")
        if isinstance(cluster, SwitchesWal):
            # L's few waiting commits make a tail of a kilobyte or two, while S's first writes
            # after its promotion carry whole pages: a new segment ships the old one's unused
            # rest to T, a tail no term's first moments outgrow
            phases[-1]["switched_wal_at"] = switch(cluster, c.old)
        polled = placing.wait(lambda p: elected(p, c, before), "tail")
        if polled is None:
            placing.step(*LATER[0], [], reached=False)
            return value | {"reached": False, "error": "S won no term"}
        term = max(terms(polled, c.quorum))
        start = term_start(polled, term, max(flush(polled, n) for n in c.quorum))
        phases[-1] |= {"term_won_s": at(), "term": term, "term_start": start}
        polled = placing.wait(lambda p: recorded(p, c, term, start), "recorded")
        phases[-1] |= {"recorded_s": at() if polled else None}
        enter("apart")
        placing.step(*LATER[0], [c.new], polled is not None)
        down = placing.wait(lambda p: stood_down(p, c.new), "apart") is not None
        polled = cluster.poll()
        bridge = bridge_of(polled, c)
        flushes = {n: flush(polled, n) for n in c.keepers()}
        # seed 001's shape: a voter of the older term holds more WAL than the bridge
        longer = max(flushes[n] for n in c.tail) > flushes[bridge]
        phases[-1] |= {"flush": flushes, "bridge": bridge, "tail_longer": longer}
        if self.tail == "fresh":
            phases[-1]["orphan"] = orphaned(polled, c, before)
        enter("vote", bridge)
        voters = [*c.tail, bridge]
        placing.step(*LATER[1], [*voters], reached=down)
        # what the moments' coverage counts: a term won by voters one of which holds a longer
        # log of an older term, the rest of the last term's quorum cut off
        value |= {"moment": "term-won", "role": "voters", "struck_s": at()}
        value["strike"] = {"fault": "partition", "targets": sorted(set(c.quorum) - {bridge})}
        done = placing.wait(lambda p: won(p, voters, term), "vote")
        phases[-1] |= {"committed_s": at() if done else None}
        if done:
            time.sleep(SETTLE)
        # the shape is reached when the vote begins: the term before it committed WAL of its
        # own, and a voter holds a longer log of an older term (whether the vote then commits
        # is the cluster's part: a proposer that takes the wrong log may never get there)
        tail = next(p for p in phases if p["phase"] == "tail")
        reached = longer and tail["recorded_s"] is not None
        if self.tail == "fresh":  # and the fresh term is an orphan: T holds records of it, R none
            reached = reached and phases[-2]["orphan"]
        return value | {"reached": reached, "took_s": at()}

    def stop(self, cluster: ClusterKind) -> dict[str, Any]:
        restarted = self.killed.stop(cluster).get("restarted") if self.killed else {}
        return super().stop(cluster) | ({"restarted": restarted} if restarted else {})
