"""The cluster's own state, as it reported it during the run (cluster.jsonl), held to the seeds'
promises, as Jepsen reads a database's own records. Each promise is a rule: a small object that
observes the polls round by round and reports at the end. A cluster kind declares the rules its
polls are held to (clusters/kinds/), and `check` runs those.

The rules:

- `OneServing`, `two-primaries`: two computes said at once that they serve clients (one
  writable primary).
- `TermStarts`, `term-below-commit`: a term started (its entry in a safekeeper's term history,
  or in the epoch variant the VCL announced with it) below an LSN that a safekeeper had reported
  committed before that term was won: the new term's log lacks committed WAL (seed 003; Raft's
  leader completeness); and `two-leaders-in-term`: two safekeepers' term histories give one term
  different starts (one proposer per term).
- `HistoriesAgree`, `histories-disagree`: two safekeepers' term histories, each cut at the
  lowest of both commit and flush positions, name different terms as the writers of the log
  there (a term with no record left out): below what both hold and were told is committed, the
  logs are one, and so is the account of who wrote them.
- `HistoryHeld`, `history-beyond-log`: a safekeeper's term history names a term that starts at
  or past the end of its WAL. A term is announced before its records arrive; a safekeeper
  reports only the history of the WAL it holds (seed 003), since a proposer ranks voters by the
  last term they report, and a log that claims a term it lacks would be elected as holding it.
- `OneProposerPerTerm`, `two-proposers-in-term`: two safekeepers that each hold a term's
  election (its entry in their term history, or the epoch announced) name different proposers
  as the one they voted for in it. Votes alone may split; the election message is taken only
  from the proposer voted for, so those that hold it name the term's one leader.
- `TermsForward`, `term-backwards`: a safekeeper's term went down between two polls (a term is
  durable before its vote is given).
- `CommitHeld`, `commit-beyond-quorum`: a safekeeper reported a commit LSN that, at the next
  poll, no quorum of the safekeepers' flush positions reached (one that did not answer counts as
  holding everything; a poll's answers are not one instant, so a commit is held to later
  flushes).
- `AcknowledgedOnQuorum`, `lost-acknowledged-write` and `acknowledged-write-beyond-quorum` (from
  the WAL position each acknowledged write recorded, `lsn`: its commit record ends past it): at a
  poll sent after the write was acknowledged, no safekeeper held WAL that far (the write is gone),
  or fewer than a quorum did (one more failure loses it). An acknowledgement promises the write
  is on a quorum's disks; a correct safekeeper's flush position never falls below what it
  acknowledged.
- `DonorHoldsAcknowledged`, `term-lacks-acknowledged-write`: a write acknowledged before a
  term was won (a poll proves it not yet won when too few safekeepers could have voted in it)
  lies past where that term's log starts: the term's donor lacked it, and the new log writes over
  its WAL positions (which `acknowledged-on-quorum`, by position, may then take as held).
- `LogDivergence`, `log-divergence` (from the checksums the kind collects at the end of a run):
  two safekeepers hold different bytes over an LSN range below the commit LSN that both hold.
- `InheritedConfirmed`, `inherited-rolled-back` (confirm/rollback, from the two-phase records of
  the committed log the kind decodes at the end of a run): a ROLLBACK PREPARED written by a
  Postgres instance (a leader's, begun with its term) of a transaction whose PREPARE an earlier
  instance wrote. A new leader confirms every transaction it inherits; rolling one back is left
  to a person (seed 002). No client need have been told either outcome, so only the log shows
  it.
- `VclocksForward`, `vclock-backwards` (Tarantool): a component of an instance's vclock (how far
  it has applied one instance's writes; component 0, its local changes, is left out) went down
  between two polls: transactions it had written to its WAL are gone.
- `GenerationRules`, Manatee's cluster state in ZooKeeper (seed 004): G only grows
  (`generation-backwards`); P, S and init_wal are immutable within a generation
  (`generation-rewritten`); the peer that declares G+1, its P, was P or S of G
  (`takeover-by-outsider`); init_wal never goes back from one generation to the next
  (`init-wal-backwards`); and P is never its own S (`primary-is-sync`).
- `DeposedAcknowledged`, `deposed-primary-acknowledged` (Manatee, whose peers say in which
  generation they were made primary): a write was acknowledged through a peer as primary of one
  generation though it began after a write of a later generation had been acknowledged through
  another.
- `Recovery`, `not-recovered`: RECOVERY_S after the last fault healed, no poll had found the
  cluster whole: each member answering and back to full strength as its record says (a
  safekeeper holding the WAL up to the commit position, a compute a standby whose Postgres
  answers queries or the serving primary), and one member serving. The runner waits for that at
  the end of a run.
- `QuietElections`, `elections-without-faults`: more than MOST_QUIET_TERMS terms (or
  generations) began within QUIET_SPAN_S seconds while no fault was in place nor had healed in
  the last SETTLE_S seconds: proposers that keep deposing each other. The count is the term's
  rise between polls, so elections quicker than the polls still count.

Whatever the rules, `check` also says who led when, for the report's leader lane: `leaders`, the
stretches of the run with the same nodes leading (each with its term where the kind has one),
and the takeovers: each time a node begins to lead alone, when the last to lead alone was
another or led another term. Polls come about once a second, so what lasts less may pass unseen;
what is seen is never a guess.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from checkers import moments as moments_
from checkers.operations import end_of, faults
from checkers.stats import fault_windows
from core.history import NEMESIS, Op
from core.polls import (
    COORDINATION,
    ClusterStatePoll,
    ComputePoll,
    LeaderKeyPoll,
    PatroniPoll,
    PeerPoll,
    Record,
    Round,
    SafekeeperPoll,
    StreamingPoll,
    TarantoolPoll,
    lsn_text,
    read_rounds,
)

NS_PER_S = 1e9
SETTLE_S = 10.0  # after a fault heals, twice the failover timeout for the cluster to settle
QUIET_SPAN_S = 20.0
MOST_QUIET_TERMS = 3  # the correct cluster began none in quiet time; a duel begins two a second
RECOVERY_S = 90.0  # after the last heal, how long a correct cluster may take to be whole again
MOST_NAMED = 10  # acknowledged writes listed in one anomaly (its count says how many in all)
Anomaly = dict[str, Any]


@dataclass
class Evidence:
    """What the rules read at the end, besides the rounds: when faults were in place (s), the
    acknowledged client writes (plain operations; only when a rule wants them), and the WAL
    checksums the kind collected at the end of the run."""

    windows: list[tuple[float, float]] = field(default_factory=list)
    writes: list[Op] = field(default_factory=list)
    digests: dict[str, Any] | None = None


class Rule:
    """One of a kind's promises about its own state."""

    name: ClassVar[str]

    def __init__(self) -> None:
        self.found: list[Anomaly] = []  # what `observe` found, reported at the end

    def observe(self, r: Round) -> None:
        """Take one round of polls, in time order."""

    def wants_writes(self) -> bool:
        """Whether `report` needs the acknowledged writes (their WAL positions, their nodes):
        a history's writes are many, so they are fetched only for a rule that saw what they
        are to be held to."""
        return False

    def report(self, evidence: Evidence) -> list[Anomaly]:
        """The anomalies, once every round was observed."""
        return self.found

    def figures(self) -> dict[str, Any]:
        """What the rule measured, for the report."""
        return {}


def _of(nodes: dict[str, Record], kind: type[Record]) -> dict[str, Any]:
    return {n: s for n, s in nodes.items() if isinstance(s, kind)}


class OneServing(Rule):
    name = "one-serving"

    def __init__(self) -> None:
        super().__init__()
        self.before: tuple[str, ...] = ()

    def observe(self, r: Round) -> None:
        computes = _of(r.nodes, ComputePoll)
        serving = tuple(sorted(n for n, s in computes.items() if s.serving))
        if len(serving) > 1 and serving != self.before:
            who = ", ".join(f"{n} (term {computes[n].term})" for n in serving)
            self.found.append(
                {
                    "type": "two-primaries",
                    "window_ns": [r.time, r.time],
                    "nodes": list(serving),
                    "explanation": (
                        f"at {r.time / NS_PER_S:.1f} s {who} each said it serves clients: only "
                        "the compute that leads the current term may"
                    ),
                }
            )
        self.before = serving


class TermStarts(Rule):
    name = "term-starts"

    def __init__(self) -> None:
        super().__init__()
        self.committed = (0, "", 0)  # the highest commit LSN reported so far: lsn, node, time
        self.starts: dict[int, tuple[int, str, int]] = {}  # term → its start, where, when seen

    def observe(self, r: Round) -> None:
        t = r.time
        keepers = _of(r.nodes, SafekeeperPoll)
        for n, s in keepers.items():
            source = "term history" if s.history else "announced VCL"
            for term, start in s.term_starts():
                if term in self.starts:
                    first, where, when = self.starts[term]
                    if start != first:
                        self.found.append(
                            {
                                "type": "two-leaders-in-term",
                                "window_ns": [when, t],
                                "term": term,
                                "explanation": (
                                    f"term {term} starts at {lsn_text(first)} in {where}'s term "
                                    f"history ({when / NS_PER_S:.1f} s) and at {lsn_text(start)} "
                                    f"in {n}'s ({t / NS_PER_S:.1f} s): two proposers wrote in it"
                                ),
                            }
                        )
                        self.starts[term] = (start, n, t)  # report each disagreement once
                    continue
                self.starts[term] = (start, n, t)
                lsn, holder, seen = self.committed
                if start < lsn:
                    self.found.append(
                        {
                            "type": "term-below-commit",
                            "window_ns": [seen, t],
                            "term": term,
                            "explanation": (
                                f"term {term} starts at {lsn_text(start)} ({n}'s {source} at "
                                f"{t / NS_PER_S:.1f} s), below {lsn_text(lsn)}, which {holder} "
                                f"reported committed at {seen / NS_PER_S:.1f} s, before the term "
                                "was won: its log lacks committed WAL"
                            ),
                        }
                    )
        for n, s in keepers.items():
            if (s.commit_lsn or 0) > self.committed[0]:
                self.committed = (s.commit_lsn, n, t)

    def figures(self) -> dict[str, Any]:
        return {"terms_seen": len(self.starts)}


class TermsForward(Rule):
    name = "terms-forward"

    def __init__(self) -> None:
        super().__init__()
        self.terms: dict[str, tuple[int, int]] = {}  # safekeeper → its last term, and when

    def observe(self, r: Round) -> None:
        t = r.time
        for n, s in _of(r.nodes, SafekeeperPoll).items():
            term = s.term or 0
            before, when = self.terms.get(n, (0, t))
            if term < before:
                self.found.append(
                    {
                        "type": "term-backwards",
                        "window_ns": [when, t],
                        "explanation": (
                            f"{n}'s term went from {before} ({when / NS_PER_S:.1f} s) down to "
                            f"{term} ({t / NS_PER_S:.1f} s): a promise it gave was not durable"
                        ),
                    }
                )
            self.terms[n] = (term, t)


class HistoriesAgree(Rule):
    name = "histories-agree"

    def __init__(self) -> None:
        super().__init__()
        self.told: set[tuple[str, str]] = set()  # each pair of safekeepers reported once

    def observe(self, r: Round) -> None:
        keepers = sorted((n, s) for n, s in _of(r.nodes, SafekeeperPoll).items() if s.history)
        for i, (a, sa) in enumerate(keepers):
            for b, sb in keepers[i + 1 :]:
                cut = min(sa.commit_lsn or 0, sb.commit_lsn or 0, sa.flush_lsn or 0,
                          sb.flush_lsn or 0)  # fmt: skip
                ours, theirs = _written(sa.history or [], cut), _written(sb.history or [], cut)
                if ours == theirs or (a, b) in self.told:
                    continue
                self.told.add((a, b))
                at = next(k for k in range(len(ours) + 1) if ours[k : k + 1] != theirs[k : k + 1])
                self.found.append(
                    {
                        "type": "histories-disagree",
                        "window_ns": [r.begun or r.time, r.time],
                        "nodes": [a, b],
                        "explanation": (
                            f"at {r.time / NS_PER_S:.1f} s {a}'s term history says "
                            f"{_entry(ours, at)} and {b}'s says {_entry(theirs, at)}, below "
                            f"{lsn_text(cut)}, which both held and both had been told was "
                            "committed: the committed log is not one"
                        ),
                    }
                )


class HistoryHeld(Rule):
    name = "history-held"

    def __init__(self) -> None:
        super().__init__()
        self.told: set[tuple[str, int]] = set()  # each safekeeper's term reported once

    def observe(self, r: Round) -> None:
        for n, s in sorted(_of(r.nodes, SafekeeperPoll).items()):
            flush = s.flush_lsn or 0
            # a term whose entry starts at or past the WAL's end has no record in this log: a
            # term announced, not yet written, which the log must not claim (seed 003)
            for term, start in s.history or []:
                if start < flush or (n, term) in self.told:
                    continue
                self.told.add((n, term))
                self.found.append(
                    {
                        "type": "history-beyond-log",
                        "window_ns": [r.begun or r.time, r.time],
                        "term": term,
                        "nodes": [n],
                        "explanation": (
                            f"at {r.time / NS_PER_S:.1f} s {n}'s term history names term "
                            f"{term} from {lsn_text(start)}, but its WAL ends at "
                            f"{lsn_text(flush)}: it claims a term it holds no record of, and "
                            "a proposer ranks its log by the last term it claims, so a log "
                            "without that term's WAL may be elected as the term's"
                        ),
                    }
                )


class OneProposerPerTerm(Rule):
    name = "one-proposer-per-term"

    def __init__(self) -> None:
        super().__init__()
        self.leaders: dict[int, tuple[str, str, int]] = {}  # term → its proposer, who said, when

    def observe(self, r: Round) -> None:
        t = r.time
        for n, s in sorted(_of(r.nodes, SafekeeperPoll).items()):
            term = s.term or 0
            # A vote alone may be split (whoever asks first in a term gets it); the term's
            # election message is taken only from the proposer voted for: a safekeeper that
            # holds its term in its history (or, in the epoch variant, was announced it) names
            # the term's one leader.
            if not (term and s.voted_for and term in (e for e, _ in s.term_starts())):
                continue
            first = self.leaders.setdefault(term, (s.voted_for, n, t))
            proposer, where, when = first
            if proposer != s.voted_for:
                self.found.append(
                    {
                        "type": "two-proposers-in-term",
                        "window_ns": [when, t],
                        "term": term,
                        "nodes": [where, n],
                        "explanation": (
                            f"{where} followed {proposer} in term {term} ({when / NS_PER_S:.1f} "
                            f"s) and {n} followed {s.voted_for} in it ({t / NS_PER_S:.1f} s), "
                            "each holding the term's election: two proposers won one term"
                        ),
                    }
                )
                self.leaders[term] = (s.voted_for, n, t)  # each disagreement once


def _written(history: list[list[int]], end: int) -> list[tuple[int, int]]:
    """The terms that wrote the log below `end`, each with its start: a term with no record
    (the next term starts where it does) wrote nothing, whichever history keeps it."""
    below = [(term, start) for term, start in history if start < end]
    ends = [start for _, start in below[1:]] + [end] if below else []
    return [e for e, until in zip(below, ends, strict=True) if until > e[1]]


def _entry(written: list[tuple[int, int]], at: int) -> str:
    if at >= len(written):
        return "no further term"
    term, start = written[at]
    return f"term {term} wrote from {lsn_text(start)}"


class _Keepers(Rule):
    """A rule over the safekeepers' flush positions: the quorum is a majority of every
    safekeeper the polls ever showed, so it judges once the rounds are all in."""

    def __init__(self) -> None:
        super().__init__()
        self.rounds: list[Round] = []

    def observe(self, r: Round) -> None:
        if _of(r.nodes, SafekeeperPoll):
            self.rounds.append(r)

    def keepers(self) -> list[str]:
        return sorted({n for r in self.rounds for n in _of(r.nodes, SafekeeperPoll)})


class CommitHeld(_Keepers):
    name = "commit-held"

    def report(self, evidence: Evidence) -> list[Anomaly]:
        keepers = self.keepers()
        quorum = len(keepers) // 2 + 1
        reported: dict[str, tuple[int, int]] = {}  # each safekeeper's commit LSN last round
        found = []
        for r in self.rounds:
            t, polled = r.time, _of(r.nodes, SafekeeperPoll)
            # a safekeeper that did not answer this round may hold everything
            flushes = [(polled[n].flush_lsn or 0) if n in polled else 1 << 62 for n in keepers]
            held = sorted(flushes, reverse=True)[quorum - 1]
            # a round's answers are not one instant: a commit is held to the flushes after it
            for n, (commit, when) in reported.items():
                if commit > held:
                    found.append(
                        {
                            "type": "commit-beyond-quorum",
                            "window_ns": [when, t],
                            "explanation": (
                                f"{n} reported {lsn_text(commit)} committed at "
                                f"{when / NS_PER_S:.1f} s, but at {t / NS_PER_S:.1f} s no quorum "
                                f"of the safekeepers held WAL past {lsn_text(held)}: committed "
                                "WAL was lost, and with it every commit acknowledged in it"
                            ),
                        }
                    )
            reported = {n: (s.commit_lsn or 0, t) for n, s in polled.items()}
        return found


class AcknowledgedOnQuorum(_Keepers):
    name = "acknowledged-on-quorum"

    def wants_writes(self) -> bool:
        return bool(self.rounds)

    def report(self, evidence: Evidence) -> list[Anomaly]:
        """The acknowledged writes (with their `lsn`) that a poll sent after their
        acknowledgement found beyond what a quorum of the safekeepers held: at most two
        anomalies a poll (none held it; fewer than a quorum did), with up to MOST_NAMED of its
        writes. A safekeeper that did not answer may hold everything, so a write first named
        beyond the quorum is named lost too if a later poll, answered by every safekeeper, finds
        none holding it; otherwise each write is named once. Polls without `begun` (written
        before it was recorded) are passed over."""
        keepers = self.keepers()
        quorum = len(keepers) // 2 + 1
        acked = sorted((op for op in evidence.writes if op.get("lsn") is not None),
                       key=lambda op: op["complete_time"])  # fmt: skip
        pending: list[tuple[int, int]] = []  # (lsn, position in acked) of writes not named lost
        short: set[int] = set()  # positions of those already named beyond the quorum
        i = 0
        found: list[Anomaly] = []
        for r in self.rounds:
            if r.begun is None:
                continue
            polled = _of(r.nodes, SafekeeperPoll)
            while i < len(acked) and acked[i]["complete_time"] < r.begun:
                bisect.insort(pending, (acked[i]["lsn"], i))
                i += 1
            flushes = {n: (polled[n].flush_lsn or 0) if n in polled else None for n in keepers}
            reach = sorted((1 << 62 if f is None else f for f in flushes.values()), reverse=True)
            beyond = bisect.bisect_right(pending, (reach[quorum - 1], len(acked)))
            if beyond == len(pending):
                continue
            gone = bisect.bisect_right(pending, (reach[0], len(acked)))
            fewer = [at for _, at in pending[beyond:gone] if at not in short]
            lost = [at for _, at in pending[gone:]]
            short.update(fewer)
            del pending[gone:]
            for kind, ats in (
                ("acknowledged-write-beyond-quorum", fewer),
                ("lost-acknowledged-write", lost),
            ):
                if ats:
                    ops = [acked[at] for at in ats]  # in WAL order
                    found.append(_beyond_quorum(kind, ops, r, flushes, quorum))
        return found


def _beyond_quorum(
    kind: str, ops: list[Op], r: Round, flushes: dict[str, int | None], quorum: int
) -> Anomaly:
    first = ops[0]
    held = ", ".join(f"{n} {'no answer' if f is None else lsn_text(f)}" for n, f in flushes.items())
    fate = (
        "no safekeeper holds its WAL: the acknowledged write is lost"
        if kind == "lost-acknowledged-write"
        else f"fewer than a quorum ({quorum}) hold it: one more failure loses it"
    )
    others = f" (and {len(ops) - 1} more acknowledged writes)" if len(ops) > 1 else ""
    return {
        "type": kind,
        "ops": ops[:MOST_NAMED],
        "count": len(ops),
        "window_ns": [first["complete_time"], r.time],
        "explanation": (
            f"the write at index {first['invoke_index']} ({first['f']} "
            f"{json.dumps(first.get('invoke_value'))}), acknowledged by {first.get('node')} at "
            f"{first['complete_time'] / NS_PER_S:.1f} s with its WAL past "
            f"{lsn_text(first['lsn'])}{others}, was not on a quorum's disks at "
            f"{r.time / NS_PER_S:.1f} s (flush positions: {held}): {fate}"
        ),
    }


class DonorHoldsAcknowledged(_Keepers):
    """A term's log starts where its donor's log ended (its history entry, or the announced
    VCL), and the donor is the voter with the most of the latest log: every write a quorum
    acknowledged before the term was won lies below that start (Raft's leader completeness, as
    a client sees it). The polls prove a term not yet won at a round's `begun` when fewer
    safekeepers than a quorum could have voted in it: those that answered with a lower term
    leave too few. Writes are held to term starts by WAL position, which the next term reuses,
    so a write this finds missing may look held to `acknowledged-on-quorum` a poll later."""

    name = "donor-holds-acknowledged"

    def wants_writes(self) -> bool:
        return any(
            s.term_starts() for r in self.rounds for s in _of(r.nodes, SafekeeperPoll).values()
        )

    def report(self, evidence: Evidence) -> list[Anomaly]:
        keepers = self.keepers()
        quorum = len(keepers) // 2 + 1
        starts: dict[int, tuple[int, str, int]] = {}  # term → its start, where, when first seen
        unwon: dict[int, tuple[int, Round]] = {}  # term → the last poll proving it not yet won
        for r in self.rounds:
            for n, s in _of(r.nodes, SafekeeperPoll).items():
                for term, start in s.term_starts():
                    starts.setdefault(term, (start, n, r.time))
        for r in self.rounds:
            polled = _of(r.nodes, SafekeeperPoll)
            # terms above the k-th highest answered one: too few left to have voted in them
            k = quorum - (len(keepers) - len(polled))
            if r.begun is None or k <= 0:
                continue
            below = sorted((s.term or 0 for s in polled.values()), reverse=True)[k - 1]
            for term in starts:
                if term > below:
                    unwon[term] = (r.begun, r)
        acked = sorted((op for op in evidence.writes if op.get("lsn") is not None),
                       key=lambda op: op["complete_time"])  # fmt: skip
        named: set[int] = set()
        found: list[Anomaly] = []
        for term in sorted(unwon):
            begun, r = unwon[term]
            start, where, seen = starts[term]
            missing = [
                op
                for op in acked
                if op["complete_time"] < begun
                and op["lsn"] > start
                and op["complete_index"] not in named
            ]
            if not missing:
                continue
            named.update(op["complete_index"] for op in missing)
            missing.sort(key=lambda op: op["lsn"])
            first = missing[0]
            others = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
            terms = ", ".join(
                f"{n} term {s.term}" for n, s in sorted(_of(r.nodes, SafekeeperPoll).items())
            )
            found.append(
                {
                    "type": "term-lacks-acknowledged-write",
                    "ops": missing[:MOST_NAMED],
                    "count": len(missing),
                    "term": term,
                    "window_ns": [first["complete_time"], seen],
                    "explanation": (
                        f"the write at index {first['invoke_index']} ({first['f']} "
                        f"{json.dumps(first.get('invoke_value'))}), acknowledged by "
                        f"{first.get('node')} at {first['complete_time'] / NS_PER_S:.1f} s with "
                        f"its WAL past {lsn_text(first['lsn'])}{others}, came before term {term} "
                        f"was won (the poll sent at {begun / NS_PER_S:.1f} s found {terms}: "
                        f"too few to have voted in it), yet term {term} starts at "
                        f"{lsn_text(start)} ({where} at {seen / NS_PER_S:.1f} s): its donor "
                        "lacked an acknowledged write, and the term's log writes over it"
                    ),
                }
            )
        return found


class LogDivergence(Rule):
    name = "log-divergence"

    def __init__(self) -> None:
        super().__init__()
        self.compared: dict[str, Any] = {}

    def report(self, evidence: Evidence) -> list[Anomaly]:
        if evidence.digests is None:
            return []
        collected = evidence.digests
        ranges = {(c[0], c[1]) for cs in (collected.get("digests") or {}).values() for c in cs}
        self.compared = {"ranges": len(ranges), "upto_lsn": collected.get("commit_lsn")}
        return divergence(collected)

    def figures(self) -> dict[str, Any]:
        return {"wal_compared": self.compared} if self.compared else {}


class InheritedConfirmed(Rule):
    name = "inherited-confirmed"

    def __init__(self) -> None:
        super().__init__()
        self.counted: dict[str, Any] = {}

    def report(self, evidence: Evidence) -> list[Anomaly]:
        read = (evidence.digests or {}).get("transactions")
        if not read or "records" not in read:
            return []
        found, self.counted = inherited_rolled_back(read)
        return found

    def figures(self) -> dict[str, Any]:
        return {"log_decisions": self.counted} if self.counted else {}


def inherited_rolled_back(read: dict[str, Any]) -> tuple[list[Anomaly], dict[str, Any]]:
    """The rollbacks of inherited transactions in a committed log, and what it holds.

    `read`: the log's records (clusters.kinds.postgres.two_phase_records), read from `node`'s
    WAL between `from_lsn` and `to_lsn`, and that safekeeper's term `history` ([term, start];
    the term whose log holds a record is the last to start at or before it), which only names
    terms in the explanation. A leader starts its Postgres when its term begins, and its limbo
    takes every transaction already prepared as inherited: so a transaction is inherited by the
    instance whose boundary follows its PREPARE. The log of a term may begin with records its
    leader's Postgres wrote in the term before (a tail the quorum had not taken), so a term's
    start is not where its own writing begins; a boundary is. A rollback whose PREPARE was not
    read (before `from_lsn`) proves nothing and is only counted."""
    starts = sorted((int(start), int(term)) for term, start in read.get("history") or [])
    keys = [start for start, _ in starts]

    def term_at(lsn: int) -> str:
        i = bisect.bisect_right(keys, lsn)
        return f" (in term {starts[i - 1][1]}'s log)" if i else ""

    prepared: dict[int, tuple[int, str, int]] = {}  # xid → PREPARE's lsn, gid, instance
    instance, began = 0, 0  # the instance writing, and where its boundary is
    counts = {"prepared": 0, "confirmed": 0, "rolled_back": 0, "unmatched": 0, "instances": 1}
    found: list[Anomaly] = []
    node = read.get("node", "a safekeeper")
    for lsn, what, xid, gid in read.get("records") or []:
        if what == "boundary":
            instance, began = instance + 1, lsn
            counts["instances"] += 1
            continue
        if what == "prepare":
            prepared[xid] = (lsn, gid, instance)
            counts["prepared"] += 1
            continue
        counts["confirmed" if what == "commit" else "rolled_back"] += 1
        if xid not in prepared:
            counts["unmatched"] += 1
            continue
        at, gid, by = prepared.pop(xid)
        if what != "abort" or by == instance:
            continue
        found.append(
            {
                "type": "inherited-rolled-back",
                "node": node,
                "xid": xid,
                "gid": gid,
                "lsn_range": [at, lsn],
                "explanation": (
                    f"{node}'s committed log holds the ROLLBACK PREPARED of transaction {xid} "
                    f"(gid {gid}) at {lsn_text(lsn)}{term_at(lsn)}, written by the Postgres "
                    f"that began at {lsn_text(began)}, though its PREPARE at {lsn_text(at)}"
                    f"{term_at(at)} came before that: a leader rolled back a transaction it "
                    "inherited; it must confirm it, and only a person may roll it back "
                    "(seed 002)"
                ),
            }
        )
    counts["inherited_rolled_back"] = len(found)
    counts["upto_lsn"] = read.get("to_lsn")
    return found[:MOST_NAMED], counts


class VclocksForward(Rule):
    name = "vclocks-forward"

    def __init__(self) -> None:
        super().__init__()
        self.last: dict[str, tuple[dict[str, int], int]] = {}  # each instance's last vclock

    def observe(self, r: Round) -> None:
        t = r.time
        for n, s in _of(r.nodes, TarantoolPoll).items():
            now = {str(k): int(v) for k, v in s.vclock.items()}
            before, when = self.last.get(n, ({}, t))
            fell = sorted(
                (k, v, now.get(k, 0)) for k, v in before.items() if k != "0" and now.get(k, 0) < v
            )
            if fell:
                which = "; ".join(f"component {k} from {a} to {b}" for k, a, b in fell)
                self.found.append(
                    {
                        "type": "vclock-backwards",
                        "window_ns": [when, t],
                        "explanation": (
                            f"{n}'s vclock went back between {when / NS_PER_S:.1f} s and "
                            f"{t / NS_PER_S:.1f} s ({which}): transactions it had written to "
                            "its WAL are gone"
                        ),
                    }
                )
            self.last[n] = (now, t)


class GenerationRules(Rule):
    name = "generation-rules"

    def __init__(self) -> None:
        super().__init__()
        self.declared: tuple[dict[str, Any], int] | None = None  # the last state seen, when

    def observe(self, r: Round) -> None:
        """Seed 004's rules, from this round's cluster state against the last one seen, each
        time it changes."""
        said = r.nodes.get(COORDINATION)
        state = said.cluster_state if isinstance(said, ClusterStatePoll) else None
        if not state or (self.declared and state == self.declared[0]):
            return
        t = r.time
        g, p, sync, wal = (state.get(k) for k in ("generation", "primary", "sync", "init_wal"))
        found: list[tuple[str, str]] = []
        if p is not None and p == sync:
            found.append(("primary-is-sync", f"{p} is both P and S of generation {g}"))
        if self.declared:
            before, when = self.declared
            g0, p0, s0, wal0 = (
                before.get(k) for k in ("generation", "primary", "sync", "init_wal")
            )
            was = f"generation {g0} (P {p0}, S {s0}, init_wal {wal0}) at {when / NS_PER_S:.1f} s"
            now = f"generation {g} (P {p}, S {sync}, init_wal {wal})"
            if g < g0:
                found.append(("generation-backwards", f"{was}, then {now}: G went back"))
            elif g == g0 and (p, sync, wal) != (p0, s0, wal0):
                found.append(("generation-rewritten", f"{was}, then {now}: P, S and init_wal "
                              "are fixed for a generation's life"))  # fmt: skip
            elif g == g0 + 1 and p not in (p0, s0):
                found.append(("takeover-by-outsider", f"{was}, then {now}: only P or S of a "
                              "generation may declare the next"))  # fmt: skip
            if g > g0 and wal is not None and wal0 is not None and wal < wal0:
                found.append(("init-wal-backwards", f"{was}, then {now}: init_wal, a position "
                              "in P's WAL when the generation began, went back"))  # fmt: skip
        since = self.declared[1] if self.declared else t
        self.declared = (state, t)
        self.found += [
            {
                "type": kind,
                "window_ns": [since, t],
                "explanation": f"ZooKeeper's cluster state at {t / NS_PER_S:.1f} s: {why}",
            }
            for kind, why in found
        ]


class DeposedAcknowledged(Rule):
    name = "deposed-acknowledged"

    def __init__(self) -> None:
        super().__init__()
        # per node: [(time, the generation or timeline it took writes in, or None)]
        self.seen: dict[str, list[tuple[int, int | None]]] = {}
        self.unit = "generation"

    def observe(self, r: Round) -> None:
        for n, s in r.nodes.items():
            if not isinstance(s, PeerPoll | StreamingPoll):
                continue  # a safekeeper compute leads in a term, not a generation or timeline
            self.unit = s.term_unit
            self.seen.setdefault(n, []).append((r.time, s.led_term() if s.leads() else None))

    def wants_writes(self) -> bool:
        return bool(self.seen)

    def report(self, evidence: Evidence) -> list[Anomaly]:
        """Of the acknowledged writes, each given the generation its peer last said it took
        writes in when the write completed, one of an earlier generation that began after one
        of a later generation had been acknowledged. Writes whose peer was not seen taking
        writes are left out: polls come once a second."""
        if not self.seen:
            return []
        dated = []
        for op in evidence.writes:
            if not op.get("write"):
                continue
            polled = self.seen.get(op.get("node") or "", [])
            before = [g for t, g in polled if t <= op["complete_time"]]
            if before and before[-1] is not None:
                dated.append((before[-1], op))
        found: list[Anomaly] = []
        unit = self.unit
        by_completion = sorted(dated, key=lambda d: d[1]["complete_time"])
        latest: tuple[int, Op] | None = None  # the highest generation acknowledged so far
        i = 0
        for generation, op in sorted(dated, key=lambda d: d[1]["invoke_time"]):
            while (
                i < len(by_completion) and by_completion[i][1]["complete_time"] < op["invoke_time"]
            ):
                if latest is None or by_completion[i][0] > latest[0]:
                    latest = by_completion[i]
                i += 1
            if latest is not None and latest[0] > generation and len(found) < 10:
                later_gen, later = latest
                found.append(
                    {
                        "type": "deposed-primary-acknowledged",
                        "ops": [later, op],
                        "window_ns": [later["complete_time"], op["complete_time"]],
                        "explanation": (
                            f"{op['node']}, primary of {unit} {generation}, acknowledged the "
                            f"write at index {op['invoke_index']} "
                            f"({op['complete_time'] / NS_PER_S:.1f} s), which began at "
                            f"{op['invoke_time'] / NS_PER_S:.1f} s, after {later['node']} had "
                            f"acknowledged the write at index {later['invoke_index']} in "
                            f"{unit} {later_gen} ({later['complete_time'] / NS_PER_S:.1f} s):"
                            f" two nodes acknowledged writes of different {unit}s, the older "
                            f"after its {unit} ended"
                        ),
                    }
                )
        return found


class LeaderKeyHeld(Rule):
    """Patroni: only the member that etcd's leader key names runs a writable primary. A primary
    that lost its key demotes itself within its loop (loop_wait + retry_timeout, a third of the
    TTL each); one still taking writes for longer than the key's TTL while the key names another
    member is a second primary the manager let be. While no key can be read (etcd out of reach,
    or the key expired), failsafe mode may keep a primary: that is not held against it."""

    name = "leader-key-held"

    def __init__(self) -> None:
        super().__init__()
        self.since: dict[str, tuple[int, str]] = {}  # member → (seen writable from, key holder)
        self.told: set[str] = set()  # members whose current stretch is reported

    def observe(self, r: Round) -> None:
        key = r.nodes.get(COORDINATION)
        if not isinstance(key, LeaderKeyPoll):
            return
        for n, s in _of(r.nodes, PatroniPoll).items():
            if not s.writable or key.holder in (None, n):
                self.since.pop(n, None)
                self.told.discard(n)
                continue
            start, holder = self.since.setdefault(n, (r.time, key.holder))
            if holder != key.holder:  # the key moved on: a new stretch against the new holder
                start, holder = self.since[n] = (r.time, key.holder)
                self.told.discard(n)
            ttl = key.ttl or 0
            if n in self.told or r.time - start <= ttl * NS_PER_S:
                continue
            self.told.add(n)
            self.found.append(
                {
                    "type": "writable-without-leader-key",
                    "window_ns": [start, r.time],
                    "nodes": [n, holder],
                    "explanation": (
                        f"{n} took writes from {start / NS_PER_S:.1f} s to at least "
                        f"{r.time / NS_PER_S:.1f} s while etcd's leader key named {holder}: "
                        f"longer than the key's TTL ({ttl} s), within which a primary that "
                        "lost its key demotes itself"
                    ),
                }
            )


class Timelines(Rule):
    """Postgres under a failover manager (Patroni) or an operator: a promotion begins a new
    timeline, so at most one member takes writes on a timeline at once (`two-writable-in-
    timeline`), and the cluster's timeline never goes back: once a member took writes on a
    timeline, none takes writes on an older one while none takes them on a newer one
    (`timeline-backwards`: clients writing to a deposed history that outlived its successor).
    Only writable members are read: a standby's timeline lags its upstream's by design."""

    name = "timelines"

    def __init__(self) -> None:
        super().__init__()
        self.newest: tuple[int, str, int] | None = None  # timeline, member, when first seen
        self.told: set[tuple[str, int]] = set()

    def observe(self, r: Round) -> None:
        writable: dict[int, list[str]] = {}
        for n, s in _of(r.nodes, StreamingPoll).items():
            if s.writable and s.timeline is not None:
                writable.setdefault(s.timeline, []).append(n)
        for timeline, members in sorted(writable.items()):
            if len(members) > 1 and ("two", timeline) not in self.told:
                self.told.add(("two", timeline))
                who = " and ".join(sorted(members))
                self.found.append(
                    {
                        "type": "two-writable-in-timeline",
                        "window_ns": [r.time, r.time],
                        "nodes": sorted(members),
                        "explanation": (
                            f"at {r.time / NS_PER_S:.1f} s {who} each took writes on timeline "
                            f"{timeline}: a promotion begins a new timeline, so one of them was "
                            "never promoted, or came up as a primary without a new timeline "
                            "(two histories under one timeline ID)"
                        ),
                    }
                )
        if not writable:
            return
        top = max(writable)
        if self.newest is not None and top < self.newest[0]:
            old, member, since = self.newest
            if ("back", top) not in self.told:
                self.told.add(("back", top))
                self.found.append(
                    {
                        "type": "timeline-backwards",
                        "window_ns": [since, r.time],
                        "nodes": [*sorted(writable[top]), member],
                        "explanation": (
                            f"at {r.time / NS_PER_S:.1f} s only {', '.join(sorted(writable[top]))} "
                            f"took writes, on timeline {top}, after {member} had taken writes on "
                            f"timeline {old} (from {since / NS_PER_S:.1f} s): the cluster's "
                            "history went back to one a promotion had ended"
                        ),
                    }
                )
        if self.newest is None or top > self.newest[0]:
            self.newest = (top, min(writable[top]), r.time)


class QuietElections(Rule):
    name = "quiet-elections"

    def __init__(self) -> None:
        super().__init__()
        self.terms: list[tuple[float, int]] = []  # each round's time (s) and highest term

    def observe(self, r: Round) -> None:
        term = max((s.term_seen() or 0 for s in r.nodes.values()), default=0)
        self.terms.append((r.time / NS_PER_S, term))

    def report(self, evidence: Evidence) -> list[Anomaly]:
        """A rise of the term between two polls counts only when the whole stretch between
        them was quiet: no fault, none healed within SETTLE_S."""
        windows = evidence.windows

        def quiet(a: float, b: float) -> bool:
            return all(b <= start or a >= end + SETTLE_S for start, end in windows)

        rises: list[tuple[float, float, int]] = []  # quiet poll intervals: from, to, terms begun
        before: tuple[float, int] | None = None
        for t, term in self.terms:
            if before is not None and term > before[1] and quiet(before[0], t):
                rises.append((before[0], t, term - before[1]))
            if before is None or term >= before[1]:
                before = (t, term)
        duels: list[list[float]] = []  # [from, to], overlapping spans merged
        first = 0
        for last in range(len(rises)):
            while rises[last][1] - rises[first][0] > QUIET_SPAN_S:
                first += 1
            a, b = rises[first][0], rises[last][1]
            if sum(n for _, _, n in rises[first : last + 1]) <= MOST_QUIET_TERMS:
                continue
            if duels and duels[-1][1] >= a:
                duels[-1][1] = b
            else:
                duels.append([a, b])
        found = []
        for a, b in duels:
            count = sum(n for x, y, n in rises if a <= x and y <= b)
            healed = max((end for _, end in windows if end <= a), default=None)
            since = f"the last fault healed at {healed:.1f} s" if healed is not None else "none yet"
            found.append(
                {
                    "type": "elections-without-faults",
                    "window_ns": [a * NS_PER_S, b * NS_PER_S],
                    "elections": count,
                    "explanation": (
                        f"from {a:.1f} s to {b:.1f} s, with no fault in place ({since}), {count} "
                        "terms began: a correct cluster elects when its leader fails, and here "
                        "nothing failed; its proposers kept deposing each other"
                    ),
                }
            )
        return found


def missing(nodes: dict[str, Record], members: Iterable[str]) -> list[str]:
    """What keeps a round from showing the cluster whole: each member that does not answer or
    says it is behind (`Record.behind`), and no member leading; [] when it is whole. The
    coordination service's entry is not a member."""
    nodes = {n: s for n, s in nodes.items() if n != COORDINATION}
    members = set(members) - {COORDINATION}
    why = [f"{m}: it does not answer" for m in sorted(set(members) - set(nodes))]
    why += [f"{n}: {b}" for n, s in sorted(nodes.items()) if (b := s.behind(nodes))]
    if not any(s.leads() for s in nodes.values()):
        why.append("no member serves clients")
    return why


class Recovery(Rule):
    """`not-recovered`: after the last fault healed, RECOVERY_S went by and no poll found the
    cluster whole (every member answering and back to full strength, one serving). A cluster
    whose every write is safe may still leave a member behind for good, one more failure from
    an outage: a liveness bug that no history of reads and writes shows. The runner waits at the
    end of a run until a poll finds the cluster whole, for RECOVERY_S at most; a run that ended
    sooner (interrupted) is not judged."""

    name = "recovery"

    def __init__(self) -> None:
        super().__init__()
        self.members: set[str] = set()
        self.seen: list[tuple[float, list[str]]] = []  # each round's poll time (s), what it lacks
        self.recovered_s: float | None = None  # from the last heal to the first whole round

    def observe(self, r: Round) -> None:
        self.members |= set(r.nodes)
        sent = (r.time if r.begun is None else r.begun) / NS_PER_S
        self.seen.append((sent, missing(r.nodes, self.members)))

    def report(self, evidence: Evidence) -> list[Anomaly]:
        healed = max((end for _, end in evidence.windows), default=0.0)
        after = [(t, why) for t, why in self.seen if t >= healed]
        whole = next((t for t, why in after if not why), None)
        if whole is not None:
            self.recovered_s = whole - healed
            return []
        if not after or after[-1][0] - healed < RECOVERY_S:
            return []
        last, why = after[-1]
        return [
            {
                "type": "not-recovered",
                "window_ns": [healed * NS_PER_S, last * NS_PER_S],
                "missing": why,
                "explanation": (
                    f"the last fault healed at {healed:.1f} s and no poll in the "
                    f"{last - healed:.0f} s after it found the cluster whole; at the last, "
                    f"{'; '.join(why)}: a correct cluster left alone comes back whole"
                ),
            }
        ]

    def figures(self) -> dict[str, Any]:
        return {} if self.recovered_s is None else {"recovered_s": round(self.recovered_s, 1)}


def divergence(collected: dict[str, Any]) -> list[Anomaly]:
    """Two safekeepers whose checksums of one LSN range, below the commit LSN and held whole by
    both, differ (`collected`: the kind's WAL digests at the end of a run)."""
    by_range: dict[tuple[int, int], dict[str, str]] = {}
    for node, chunks in (collected.get("digests") or {}).items():
        for lo, hi, digest in chunks:
            by_range.setdefault((lo, hi), {})[node] = digest
    found = []
    commit = collected.get("commit_lsn") or 0
    for (lo, hi), held in sorted(by_range.items()):
        if len(set(held.values())) > 1:
            groups: dict[str, list[str]] = {}
            for node, digest in sorted(held.items()):
                groups.setdefault(digest, []).append(node)
            sides = " | ".join(" ".join(nodes) for nodes in groups.values())
            found.append(
                {
                    "type": "log-divergence",
                    "lsn_range": [lo, hi],
                    "explanation": (
                        f"the safekeepers hold different WAL in {lsn_text(lo)}–{lsn_text(hi)}, "
                        f"below the commit LSN {lsn_text(commit)} ({sides}): the committed log "
                        "is not one"
                    ),
                }
            )
            if len(found) >= 10:
                break
    return found


def _declared(base: type[Rule]) -> list[type[Rule]]:
    """The rules below `base`, each class that has a name (a base of rules has none)."""
    found = []
    for rule in base.__subclasses__():
        found += [rule] if "name" in vars(rule) else []
        found += _declared(rule)
    return found


RULES: dict[str, type[Rule]] = {rule.name: rule for rule in _declared(Rule)}


def leaders(rounds: Iterable[Round]) -> list[dict[str, Any]]:
    """The run cut where the leading nodes or their terms change: [{"start": s, "end": s or
    None (to the end of the run), "nodes": [node], "term": the term or None, "unit": "term" or
    "generation", what the kind calls it}]; where the kind's records name each node's state
    (`Record.lane_state`), also "states": {node: state}, and the run is cut where those change
    too, so that the lane shows what the manager had each node do."""
    stretches: list[dict[str, Any]] = []
    for r in rounds:
        who = sorted(n for n, s in r.nodes.items() if s.leads())
        terms = sorted({r.nodes[n].led_term() for n in who} - {None})
        term = terms[-1] if terms else None
        unit = next((r.nodes[n].term_unit for n in who if r.nodes[n].term_unit != "term"), "term")
        states = {n: st for n, s in sorted(r.nodes.items()) if (st := s.lane_state()) is not None}
        t = r.time / NS_PER_S
        last = stretches[-1] if stretches else {}
        if (last.get("nodes"), last.get("term"), last.get("states", {})) == (who, term, states):
            continue
        if stretches:
            stretches[-1]["end"] = t
        stretch = {"start": t, "end": None, "nodes": who, "term": term, "unit": unit}
        stretches.append(stretch | ({"states": states} if states else {}))
    return stretches


def takeovers(rounds: Iterable[Round]) -> list[dict[str, Any]]:
    """Each time a node begins to lead alone, when the last to lead alone was another or led
    another term."""
    found = []
    last_alone: tuple[str, Any] | None = None
    for r in rounds:
        led = [n for n, s in r.nodes.items() if s.leads()]
        if len(led) == 1 and (led[0], r.nodes[led[0]].led_term()) != last_alone:
            last_alone = (led[0], r.nodes[led[0]].led_term())
            found.append({"time_s": r.time / NS_PER_S, "node": led[0], "term": last_alone[1]})
    return found


def analyse(
    rounds: Sequence[Round],
    rules: Sequence[type[Rule]] = tuple(RULES.values()),
    evidence: Evidence | None = None,
    writes: Iterable[Op] = (),
) -> dict[str, Any]:
    """The rules' verdict on the rounds (in time order). `writes` are only read when a rule
    wants them (see `Rule.wants_writes`)."""
    judges = [rule() for rule in rules]
    for r in rounds:
        for judge in judges:
            judge.observe(r)
    evidence = evidence or Evidence()
    if any(j.wants_writes() for j in judges):
        evidence.writes = list(writes)
    anomalies: list[Anomaly] = []
    figures: dict[str, Any] = {}
    for judge in judges:
        anomalies += judge.report(evidence)
        figures |= judge.figures()
    max_term = max((s.term_seen() or 0 for r in rounds for s in r.nodes.values()
                    if s.term_unit == "term"), default=0)  # fmt: skip
    return {
        "valid": not anomalies,
        "anomaly_types": sorted({a["type"] for a in anomalies}),
        "anomalies": anomalies,
        "rounds": len(rounds),
        "takeovers": takeovers(rounds),
        "leaders": leaders(rounds),
        "terms_seen": 0,
        "max_term": max_term,
    } | figures


def wants_writes(rounds: Sequence[Round], rules: Sequence[type[Rule]]) -> bool:
    """Whether some rule, having seen the rounds, wants the acknowledged writes."""
    judges = [rule() for rule in rules]
    for r in rounds:
        for judge in judges:
            judge.observe(r)
    return any(j.wants_writes() for j in judges)


def check(
    ops: Iterable[Op] | None,
    polls: str | None = None,
    digests: str | None = None,
    rules: Sequence[type[Rule]] = tuple(RULES.values()),
    records: Sequence[type[Record]] | None = None,
    moments: Sequence[type[moments_.Moment]] = (),
) -> dict[str, Any]:
    """The verdict of the kind's `rules` on a run's polls file (`polls`, whose records are
    read as the kind's `records`) and end-of-run WAL checksums (`digests`), and which of the
    kind's `moments` the run reached and struck (`moments`, a table that judges nothing). `ops`:
    the history's operations, or only the nemesis's and the acknowledged client writes (the
    faults' windows tell when the cluster was left alone)."""
    ops = list(ops or [])
    rounds = read_rounds(Path(polls), records) if polls and Path(polls).is_file() else []
    collected = None
    if digests is not None and Path(digests).is_file():
        collected = json.loads(Path(digests).read_text() or "{}")
    end = max([end_of(ops) or 0, *(r.time for r in rounds[-1:])])
    windows = [(w["start"], w["end"]) for w in fault_windows(faults(ops), end)]
    writes = [op for op in ops if op["type"] == "ok" and op["process"] != NEMESIS]
    evidence = Evidence(windows, digests=collected)
    covered = moments_.coverage(rounds, moments, faults(ops)) if moments else []
    chained = moments_.steps_reached(faults(ops))
    return analyse(rounds, rules, evidence, writes) | {"moments": covered, "chains": chained}
