"""The protocol's moments: the stretches of a run, as the cluster's own polls show them, in which
a bug of the protocol would do its harm if a fault struck then (Jepsen's "sometimes" assertions:
a run in which no moment was reached is no evidence about the code those moments exercise).

A cluster kind declares the moments its polls can see (clusters/kinds/), each with the roles in
it (the new leader, the deposed one, a voter that has not yet received the term's first record,
…). A moment is a small observer of rounds, in time order, like a cluster-state rule: `observe`
says, for each round, whether the moment holds and who plays which role. Two users read them:
the `aimed` nemesis, which polls the cluster itself and strikes a role when a moment comes, and
`coverage`, which says of a finished run which moments were reached, and which were struck by a
fault that began while they held.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

from core.history import Op
from core.polls import (
    COORDINATION,
    ComputePoll,
    LeaderKeyPoll,
    PatroniPoll,
    Round,
    SafekeeperPoll,
    StreamingPoll,
)

NS_PER_S = 1e9
# Polls come about once a second: a fault that began within this many seconds after the last
# round that showed a moment may have struck it while it still held.
STRIKE_SLACK_S = 1.0
Roles = dict[str, list[str]]


class Moment:
    """A stretch of a run in which some faults matter more than others."""

    name: ClassVar[str]
    about: ClassVar[str]  # one sentence: what the moment is
    roles: ClassVar[tuple[str, ...]]  # who plays a part in it, as `observe` names them
    # What brings the moment about, for a nemesis that wants to reach it: "leader", the node
    # that leads is lost (partitioned, killed or paused); "leader-back", it is lost until
    # another leads, then comes back; "follower", a node that does not lead is cut off a while
    # and comes back; "leader-cut", the node that leads is partitioned off alone and left
    # running (its clients still connected).
    provoke: ClassVar[str] = "leader"
    # How long a nemesis that provoked it waits for it (s): a kind that fails over only once a
    # lease or key of tens of seconds expires needs longer than one that fails over in seconds.
    watch_s: ClassVar[float] = 30.0

    def observe(self, r: Round) -> Roles | None:
        """Whether the moment holds in this round (after those observed before it): its roles,
        each with the nodes that play it (some may have none), or None."""
        raise NotImplementedError

    @staticmethod
    def followers(r: Round) -> list[str]:
        """The nodes a nemesis may cut off to bring the moment about (`provoke` "follower"):
        those that answered and do not lead; the coordination service's entry (a leader key,
        a cluster state) is what a round says of the cluster, not a node."""
        return sorted(n for n, s in r.nodes.items() if n != COORDINATION and not s.leads())


def leading(r: Round) -> list[str]:
    return sorted(n for n, s in r.nodes.items() if s.leads())


class LeaderChanged(Moment):
    """A node began to lead alone where another led alone before (any kind whose polls say who
    leads)."""

    name = "leader-changed"
    about = "a node began to lead where another led before (a failover)"
    roles = ("new-leader", "deposed")

    def __init__(self) -> None:
        self.last: str | None = None

    def observe(self, r: Round) -> Roles | None:
        led = leading(r)
        if len(led) != 1:
            return None
        before, self.last = self.last, led[0]
        if before is None or before == led[0]:
            return None
        return {"new-leader": led, "deposed": [before]}


def _computes(r: Round) -> dict[str, ComputePoll]:
    return {n: s for n, s in r.nodes.items() if isinstance(s, ComputePoll)}


def _keepers(r: Round) -> dict[str, SafekeeperPoll]:
    return {n: s for n, s in r.nodes.items() if isinstance(s, SafekeeperPoll)}


class _Leaders(Moment):
    """Keeps who led last (the deposed one, once another takes over)."""

    def __init__(self) -> None:
        self.leader: str | None = None

    def observe(self, r: Round) -> Roles | None:
        roles = self.seen(r)
        led = leading(r)
        if len(led) == 1:
            self.leader = led[0]
        return roles

    def seen(self, r: Round) -> Roles | None:
        raise NotImplementedError

    def deposed(self, new: Iterable[str]) -> list[str]:
        return [self.leader] if self.leader and self.leader not in new else []


def _standing(r: Round, term: int, deposed: str | None) -> list[str]:
    """The computes elected in `term`, or else those that may be standing in it: candidates
    other than the one that led before (a deposed primary is a candidate too, once its lease
    ends)."""
    computes = _computes(r)
    elected = sorted(n for n, s in computes.items() if s.term == term)
    return elected or sorted(
        n
        for n, s in computes.items()
        if s.term is None and s.role in ("candidate", "taking over") and n != deposed
    )


class TermWon(_Leaders):
    """The highest term a safekeeper holds rose: a proposer won a term (seed 003's moment: its
    voters hold the term before any of them holds its first record). It holds from the round
    that shows the rise for as long as some voter lacks the term's first record, so that a
    round in which the new leader's own poll went unanswered is not the only chance to name
    it."""

    name = "term-won"
    about = "a proposer won a new term: its voters hold the term, some not yet its first record"
    roles = ("new-leader", "voted-not-recorded", "voters", "deposed")

    def __init__(self) -> None:
        super().__init__()
        self.highest: int | None = None
        self.won: int | None = None  # the term whose moment holds
        self.before: str | None = None  # who led when it was won

    def seen(self, r: Round) -> Roles | None:
        keepers = _keepers(r)
        top = max((s.term or 0 for s in keepers.values()), default=0)
        before = self.highest
        self.highest = max(top, before or 0)
        if before is not None and top > before:
            self.won, self.before = top, self.leader
        if self.won is None or top != self.won:
            return None  # not won yet, or this round did not hear from the term's voters
        voters = sorted(n for n, s in keepers.items() if s.term == top)
        unrecorded = [n for n in voters if top not in (t for t, _ in keepers[n].term_starts())]
        if not unrecorded and top <= (before or 0):
            self.won = None  # every voter holds the term's first record: the moment is over
            return None
        new = _standing(r, top, self.before)
        return {
            "new-leader": new,
            "voted-not-recorded": unrecorded,
            "voters": voters,
            "deposed": [self.before] if self.before and self.before not in new else [],
        }


class Takeover(_Leaders):
    """A compute was elected and brings its Postgres to the term's log before it serves."""

    name = "takeover"
    about = "a compute won a term and is bringing its Postgres to the log, not yet serving"
    roles = ("new-leader", "donor", "deposed")

    def seen(self, r: Round) -> Roles | None:
        taking = sorted(n for n, s in _computes(r).items() if s.role == "taking over")
        if not taking:
            return None
        donors = sorted({d for n in taking if (d := _computes(r)[n].donor)})
        return {"new-leader": taking, "donor": donors, "deposed": self.deposed(taking)}


class CatchUp(_Leaders):
    """A safekeeper of the current term holds less WAL than the safekeepers had already reported
    committed by the round before: the leader is bringing it up to the log."""

    name = "catch-up"
    about = "a safekeeper of the leader's term is behind the committed WAL and catching up"
    roles = ("catching-up", "leader", "up-to-date")
    provoke = "follower"
    BEHIND = 8192  # bytes below the commit position: more than a record in flight

    def __init__(self) -> None:
        super().__init__()
        self.committed: int | None = None  # the highest commit position the rounds before showed

    @staticmethod
    def followers(r: Round) -> list[str]:
        return sorted(_keepers(r))

    def seen(self, r: Round) -> Roles | None:
        """Behind is below what the round before already showed committed: a round's answers
        are not one instant, and under load a keeper of the quorum that answered a moment
        before another may look a few records short of the commit the other reports."""
        keepers = _keepers(r)
        top = max((s.term or 0 for s in keepers.values()), default=0)
        commit = self.committed
        now = max((s.commit_lsn or 0 for s in keepers.values()), default=0)
        self.committed = max(commit or 0, now)
        if commit is None:
            return None
        current = {n: s for n, s in keepers.items() if s.term == top and top}
        behind = sorted(n for n, s in current.items() if (s.flush_lsn or 0) + self.BEHIND < commit)
        if not behind or not leading(r):
            return None
        ahead = sorted(n for n in current if n not in behind)
        return {"catching-up": behind, "leader": leading(r), "up-to-date": ahead}


class Rebuild(_Leaders):
    """A compute rebuilds its Postgres from the one that serves (a deposed primary, after a
    takeover)."""

    name = "rebuild"
    about = "a compute is rebuilding its Postgres from the primary"
    roles = ("rebuilding", "leader")
    provoke = "leader-back"  # a deposed primary rebuilds once it is back

    def seen(self, r: Round) -> Roles | None:
        rebuilding = sorted(n for n, s in _computes(r).items() if s.role == "rebuilding")
        if not rebuilding:
            return None
        return {"rebuilding": rebuilding, "leader": leading(r)}


class InheritedLimbo(_Leaders):
    """Confirm/rollback: a new leader holds prepared transactions of an earlier leader, and takes
    no write of its own until it has confirmed them (seed 002)."""

    name = "inherited-limbo"
    about = "a new leader holds an earlier leader's prepared transactions, not yet confirmed"
    # the safekeepers: struck together, they keep the quorum from the new leader past the
    # rollback timeout, when only its own transactions may be rolled back
    roles = ("new-leader", "deposed", "safekeepers")

    def seen(self, r: Round) -> Roles | None:
        holding = sorted(
            n
            for n, s in _computes(r).items()
            if s.term is not None and (s.limbo or 0) > 0 and s.taking_writes is False
        )
        if not holding:
            return None
        return {
            "new-leader": holding,
            "deposed": self.deposed(holding),
            "safekeepers": sorted(_keepers(r)),
        }


class LeaseEnding(Moment):
    """A primary that holds a lease has not heard from a quorum of safekeepers for most of it:
    within LAST_S it must stop serving, before a standby may take over. A lease measured from
    the wrong answer, or not checked again after a pause, does its harm here."""

    name = "lease-ending"
    about = "the primary's quorum has been silent for most of its lease, which ends within 1.5 s"
    roles = ("leaseholder", "standbys", "safekeepers")
    provoke = "leader-cut"  # a killed or paused primary holds no lease the polls can see
    LAST_S = 1.5  # a third of the safekeeper cluster's 3 s lease, so a poll a second sees it

    def observe(self, r: Round) -> Roles | None:
        computes = _computes(r)
        holding = sorted(
            n
            for n, s in computes.items()
            if s.role == "primary" and s.lease_left is not None and s.lease_left <= self.LAST_S
        )
        if not holding:
            return None
        return {
            "leaseholder": holding,
            "standbys": sorted(n for n in computes if n not in holding),
            "safekeepers": sorted(_keepers(r)),
        }


def _key_holder(r: Round) -> str | None:
    key = r.nodes.get(COORDINATION)
    return key.holder if isinstance(key, LeaderKeyPoll) else None


class KeyTaken(Moment):
    """Patroni: the leader key in etcd names another member than before (a failover or a
    switchover): the new leader promotes, and the deposed one must stop taking writes."""

    name = "leader-key-taken"
    about = "the leader key in etcd passed to another member"
    roles = ("new-leader", "deposed")
    watch_s = 90.0  # Patroni's default key lives 30 s, and a loop of 10 s follows

    def __init__(self) -> None:
        self.last: str | None = None

    def observe(self, r: Round) -> Roles | None:
        holder = _key_holder(r)
        if holder is None:
            return None
        before, self.last = self.last, holder
        if before is None or before == holder:
            return None
        return {"new-leader": [holder], "deposed": [before]}


class Rejoining(Moment):
    """Patroni: a member runs as a replica on an older timeline than the primary's (a deposed
    primary that Patroni rewinds, or a replica not yet following the new timeline)."""

    name = "rejoining"
    about = "a replica is still on an older timeline than the primary's"
    roles = ("rejoining", "leader")
    provoke = "leader-back"  # a deposed primary rejoins once it is back
    watch_s = 90.0

    def observe(self, r: Round) -> Roles | None:
        members = {n: s for n, s in r.nodes.items() if isinstance(s, PatroniPoll)}
        led = [n for n, s in members.items() if s.writable]
        if len(led) != 1 or members[led[0]].timeline is None:
            return None
        top = members[led[0]].timeline or 0
        behind = sorted(n for n, s in members.items() if s.standby and (s.timeline or top) < top)
        return {"rejoining": behind, "leader": led} if behind else None


class StandbyBehind(_Leaders):
    """Plain streaming replication: a standby has replayed less WAL than the primary holds by
    more than a few pages (an asynchronous standby after a burst, or one cut off a while): the
    standby an operator's script would not promote, and reads there see an older state."""

    name = "standby-behind"
    about = "a standby has replayed well behind the primary's WAL"
    roles = ("behind", "leader", "up-to-date")
    provoke = "follower"
    BEHIND = 64 << 10  # bytes: more than the records of the commits in flight

    def seen(self, r: Round) -> Roles | None:
        nodes = {n: s for n, s in r.nodes.items() if isinstance(s, StreamingPoll)}
        led = leading(r)
        if len(led) != 1 or nodes.get(led[0]) is None:
            return None
        top = nodes[led[0]].lsn or 0
        standbys = {n: s for n, s in nodes.items() if s.standby}
        behind = sorted(n for n, s in standbys.items() if (s.lsn or 0) + self.BEHIND < top)
        if not behind:
            return None
        ahead = sorted(n for n in standbys if n not in behind)
        return {"behind": behind, "leader": led, "up-to-date": ahead}


def occurrences(rounds: Iterable[Round], moment: type[Moment]) -> list[dict[str, Any]]:
    """Each stretch of consecutive rounds in which the moment held: {"start", "end" (s, the
    first and last rounds that showed it), "roles" (as its first round showed them)}."""
    observer = moment()
    found: list[dict[str, Any]] = []
    held = False
    for r in rounds:
        roles = observer.observe(r)
        t = r.time / NS_PER_S
        if roles is None:
            held = False
        elif held:
            found[-1]["end"] = t
        else:
            held = True
            found.append({"start": t, "end": t, "roles": roles})
    return found


def coverage(
    rounds: Sequence[Round], moments: Sequence[type[Moment]], nemesis: Iterable[Op]
) -> list[dict[str, Any]]:
    """Which of the kind's moments the run reached, how often, and which were struck: by a
    fault that began while the moment held (the polls' view), or by the aimed nemesis, which
    says which moment and role it struck (its own, quicker, view). One entry per moment."""
    started = [
        (_struck_at(op), op["f"].removeprefix("start-"), op.get("value") or {})
        for op in nemesis
        if op["type"] == "info" and str(op["f"]).startswith("start-") and not op.get("error")
    ]
    table = []
    for moment in moments:
        found = occurrences(rounds, moment)
        struck: dict[str, int] = {}
        for occ in found:
            hit = {
                _struck_with(fault, value)
                for t, fault, value in started
                if occ["start"] <= t <= occ["end"] + STRIKE_SLACK_S
            }
            for fault in hit:
                struck[fault] = struck.get(fault, 0) + 1
        aimed: dict[str, int] = {}
        for _, _, value in started:
            strike = value.get("strike") or {}
            if value.get("moment") == moment.name and strike.get("fault"):
                key = f"{strike['fault']} on {value.get('role')}" + _provoked(value)
                aimed[key] = aimed.get(key, 0) + 1
        table.append(
            {
                "moment": moment.name,
                "about": moment.about,
                "reached": len(found),
                "first_s": round(found[0]["start"], 1) if found else None,
                "struck": dict(sorted(struck.items())),
                "aimed": dict(sorted(aimed.items())),
            }
        )
    return table


NO_FAULTS = "none"  # the nemesis of a run without faults


def reached_no_moment(nemesis: Sequence[str], reached: Sequence[int]) -> bool:
    """Whether a run's faults reached none of its kind's moments (`reached`: how often each
    was): a kind that declares some and a nemesis that is not `none`, yet no moment came, so
    the run tested no failover however valid it was (a gate counts it undecided)."""
    faulted = any(n != NO_FAULTS for n in nemesis)
    return faulted and bool(reached) and not any(reached)


STEP = ":"  # moment:role:strike, a step as the steps table names it
PAIR = " > "  # a step, then the next one of its chain


def chain_steps(nemesis: Iterable[Op]) -> list[dict[str, Any]]:
    """Each aimed fault's steps in order, as its start's info says (one step for a value
    written before chains: its moment, role and strike), and those of a seed's history placed
    as the cluster elects (its phases, each begun at a moment of its own): {"at_s", "steps"}."""
    chains = []
    for op in nemesis:
        value = op.get("value")
        started = str(op["f"]).startswith("start-")
        if not isinstance(value, dict) or op["type"] != "info" or op.get("error") or not started:
            continue
        if value.get("fault") != "aimed" and not isinstance(value.get("steps"), list):
            continue
        steps = value.get("steps")
        if steps is None and value.get("moment"):
            tried = value.get("roles_tried") or [None]
            steps = [
                {
                    "moment": value["moment"],
                    "role": value.get("role") or tried[0],
                    "strike": value.get("strike_with"),
                    "reached": bool(value.get("reached")),
                    "targets": (value.get("strike") or {}).get("targets"),
                }
            ]
        chains.append({"at_s": round(op["invoke_time"] / NS_PER_S, 1), "steps": steps or []})
    return chains


def step_key(step: dict[str, Any]) -> str:
    return STEP.join(str(step.get(k)) for k in ("moment", "role", "strike"))


def struck_steps(steps: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The steps of a chain that struck, up to the first that did not (its moment did not
    come, or no node played its role): where the chain ended."""
    done = []
    for step in steps:
        if not (step.get("reached") and step.get("targets")):
            break
        done.append(step)
    return done


def steps_reached(nemesis: Iterable[Op]) -> dict[str, Any]:
    """The steps and the pairs of consecutive steps the run's aimed faults reached (a step is
    reached when its moment came and its strike landed), each with how often: what a search
    for untested parts of the protocol counts (`harness explore`), beside the moments table.
    {"chains": how many aimed faults, "steps": {key: count}, "pairs": {"a > b": count},
    "tried": [each chain's step keys, those not reached marked "(not reached)"]}."""
    chains = chain_steps(nemesis)
    steps: dict[str, int] = {}
    pairs: dict[str, int] = {}
    tried = []
    for chain in chains:
        done = struck_steps(chain["steps"])
        keys = [step_key(s) for s in done]
        for key in keys:
            steps[key] = steps.get(key, 0) + 1
        for a, b in itertools.pairwise(keys):
            pairs[a + PAIR + b] = pairs.get(a + PAIR + b, 0) + 1
        rest = [step_key(s) + " (not reached)" for s in chain["steps"][len(done) : len(done) + 1]]
        tried.append({"at_s": chain["at_s"], "steps": keys + rest})
    return {
        "chains": len(chains),
        "steps": dict(sorted(steps.items())),
        "pairs": dict(sorted(pairs.items())),
        "tried": tried,
    }


def moment_of(key: str) -> str:
    """The moment a step key names."""
    return key.split(STEP, 1)[0]


def pairs_between(pairs: dict[str, int], first: str, then: str) -> int:
    """How often a chain struck at moment `first` and its next step at moment `then`."""
    total = 0
    for key, count in pairs.items():
        a, _, b = key.partition(PAIR)
        if moment_of(a) == first and moment_of(b) == then:
            total += count
    return total


PROVOKED = {"partition": "cut off", "kill": "killed", "pause": "paused"}


def _provoked(value: dict[str, Any]) -> str:
    """How the aimed fault brought the moment about, as its key in the table says it: the
    leader cut off (its clients still connected), killed or paused, or a follower cut off."""
    if value.get("provoke") == "follower":
        return ", a follower cut off"
    done = PROVOKED.get(str(value.get("provocation")))
    if done is None:
        return ""
    back = " and back" if value.get("provoke") == "leader-back" else ""
    return f", the leader {done}{back}"


def _struck_at(op: Op) -> float:
    """When a fault struck (s): when its start began, or for one that watches the cluster
    before it strikes (aimed), the time it says it struck, counted from there."""
    value = op.get("value") or {}
    return op["invoke_time"] / NS_PER_S + float(value.get("struck_s") or 0)


def _struck_with(fault: str, value: dict[str, Any]) -> str:
    """The fault an event names: an aimed one by what it struck with."""
    strike = value.get("strike") or {}
    return str(strike.get("fault") or fault)


def times_reached(row: dict[str, Any]) -> int:
    """How often a coverage table's row says its moment was reached: seen in the polls, or
    struck by the aimed nemesis (which polls more often than the run's record)."""
    return max(row.get("reached") or 0, sum((row.get("aimed") or {}).values()))


def reached(table: Sequence[dict[str, Any]], name: str) -> int:
    """How often a coverage table says the moment `name` was reached (0 if it names none)."""
    return next((times_reached(row) for row in table if row["moment"] == name), 0)
