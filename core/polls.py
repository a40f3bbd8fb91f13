"""What a cluster says of itself while a run goes: typed records, one per node a poll reached.

The harness polls the cluster kind about once a second and appends each changed round to
cluster.jsonl beside the history, on the history's clock: {"time": ns since the run started,
"begun": when the poll was sent, "nodes": {node: record}}. Every answer was given between `begun`
and `time`; a node that did not answer is absent from its round. Each record names its type in
the field `record`, so that a reader never guesses what a node is from the keys it happens to
have; a kind declares the records its poll gives, and the cluster-state rules it is held to read
them.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import msgspec

# The entry of a round that holds what the kind's coordination service said (Manatee's cluster
# state in ZooKeeper, Patroni's leader key in etcd), beside its nodes' own accounts; the name
# is what stored runs have.
COORDINATION = "zookeeper"


def lsn_text(lsn: int) -> str:
    """An LSN as Postgres writes it."""
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


class Record(msgspec.Struct, tag_field="record", forbid_unknown_fields=True, frozen=True):
    """A node's account of itself in one poll."""

    # What the kind calls its terms, in the report's leader lane.
    term_unit: ClassVar[str] = "term"

    def leads(self) -> bool:
        """Whether the node says it serves clients as the primary, or takes writes."""
        return False

    def led_term(self) -> int | None:
        """The term (or generation) in which the node leads, where the kind has terms."""
        return None

    def term_seen(self) -> int | None:
        """The newest term (or generation) the node says it knows of, where it says one."""
        return None

    def behind(self, nodes: dict[str, Record]) -> str | None:
        """Why the node is not yet back to full strength, judged beside the round's other
        records (`nodes`); None when it is, or when its kind says nothing of that."""
        return None

    def lane_state(self) -> str | None:
        """The node's state as its failover manager names it (pg_auto_failover's reported and
        goal states), which the report's leader lane shows beside who led; None where the
        record names none."""
        return None


class ComputePoll(Record, tag="compute"):
    """A compute node of the safekeeper cluster: its agent's role, whether it serves clients,
    and the term its proxy was elected in (None unless elected); while elected, the safekeeper
    its term's log came from (the donor); under confirm/rollback, how many prepared transactions
    its limbo holds and whether it takes writes of its own yet (not while it holds an earlier
    leader's); while it is the primary, the seconds left of its lease (negative once a quorum
    has been silent longer than the lease); while it is a standby, whether its Postgres answers
    queries (None in runs that did not say)."""

    role: str | None = None
    serving: bool = False
    term: int | None = None
    donor: str | None = None
    limbo: int | None = None
    taking_writes: bool | None = None
    lease_left: float | None = None
    consistent: bool | None = None

    def leads(self) -> bool:
        return self.serving

    def led_term(self) -> int | None:
        return self.term

    def term_seen(self) -> int | None:
        return self.term

    def behind(self, nodes: dict[str, Record]) -> str | None:
        """Whole is a standby whose Postgres answers queries (it can serve reads, be copied and
        take over), or the primary serving its own writes."""
        if self.role == "standby":
            # a standby holds no limbo: what it says of one is not its own (an agent that led
            # once may still describe the limbo of the term it lost)
            if self.consistent is False:
                return "it is a standby whose Postgres does not answer queries"
            return None
        if self.role == "primary" and self.serving:
            if self.taking_writes is False:
                return "it serves but still holds an earlier leader's transactions"
            return None
        if self.role == "primary":
            return "it is the primary but does not serve"
        return f"its agent is {self.role}" if self.role else "its agent has no role"


class SafekeeperPoll(Record, tag="safekeeper"):
    """A safekeeper: its term and the proposer it voted for in it, its term history ([term,
    start LSN] pairs), flush and commit LSNs; in the epoch variant (which keeps no history) its
    epoch, and the epoch and VCL last announced to it."""

    term: int | None = None
    history: list[list[int]] | None = None
    flush_lsn: int | None = None
    commit_lsn: int | None = None
    epoch: int | None = None
    proposed_epoch: int | None = None
    vcl: int | None = None
    voted_for: str | None = None

    def term_seen(self) -> int | None:
        return self.term

    def behind(self, nodes: dict[str, Record]) -> str | None:
        """Whole holds the WAL up to the highest commit position any safekeeper reports."""
        commit = max(
            (s.commit_lsn or 0 for s in nodes.values() if isinstance(s, SafekeeperPoll)),
            default=0,
        )
        flush = self.flush_lsn or 0
        if flush >= commit:
            return None
        return f"its WAL ends at {lsn_text(flush)}, below the commit position {lsn_text(commit)}"

    def term_starts(self) -> list[list[int]]:
        """Where each term's log starts: the term history, or in the epoch variant the term last
        announced and its VCL, so that a term won below committed WAL is seen in both."""
        starts = list(self.history or [])
        epoch, vcl = self.proposed_epoch or 0, self.vcl or 0
        if epoch and vcl and not starts:
            starts.append([epoch, vcl])
        return starts


class TarantoolPoll(Record, tag="tarantool"):
    """A Tarantool instance: whether it takes writes, and its vclock (instance id → how far it
    applied that instance's writes). Tarantool 2.6 has no term."""

    writable: bool = False
    vclock: dict[str, int] = msgspec.field(default_factory=dict)

    def leads(self) -> bool:
        return self.writable


class PeerPoll(Record, tag="peer"):
    """A Manatee peer: its role in the current generation, whether its Postgres takes writes,
    and (if it does) the generation in which it was made primary."""

    term_unit: ClassVar[str] = "generation"

    role: str | None = None
    writable: bool = False
    generation: int | None = None

    def leads(self) -> bool:
        return self.writable

    def led_term(self) -> int | None:
        return self.generation

    def term_seen(self) -> int | None:
        return self.generation


class StreamingPoll(Record, tag="streaming"):
    """A node of plain streaming replication: whether it is in recovery (a standby), whether it
    takes writes, its timeline (a promotion begins a new one: the kind's term), its WAL position
    (the primary's current one, a standby's replay position) and, on a standby, how far its WAL
    receiver has flushed and from whom."""

    term_unit: ClassVar[str] = "timeline"

    standby: bool = False
    writable: bool = False
    timeline: int | None = None
    lsn: int | None = None
    received: int | None = None
    upstream: str | None = None

    def leads(self) -> bool:
        return self.writable

    def led_term(self) -> int | None:
        return self.timeline if self.writable else None

    def term_seen(self) -> int | None:
        return self.timeline


class PatroniPoll(StreamingPoll, tag="patroni"):
    """A Patroni member: its Postgres as a streaming node says it, and Patroni's own role
    (`master` or `replica` in 3.x) and state (`running`, `starting`, `stopped`, …) from its REST
    API; a field is empty where that side did not answer."""

    role: str | None = None
    state: str | None = None


class LeaderKeyPoll(Record, tag="leader-key"):
    """Whom Patroni's leader key in etcd names (None: no key, or etcd did not answer), and the
    key's TTL (s), within which a primary that lost it must have demoted itself."""

    holder: str | None = None
    ttl: int | None = None


class ClusterStatePoll(Record, tag="cluster-state"):
    """Manatee's cluster state as ZooKeeper holds it: generation, primary, sync, init_wal."""

    cluster_state: dict[str, Any] = msgspec.field(default_factory=dict)


def known_records() -> tuple[type[Record], ...]:
    """Every record type defined so far, in the order defined: a kind's module declares its own
    beside it, so a reader that does not know a run's kind reads those of every kind imported."""
    found: list[type[Record]] = []
    todo = list(Record.__subclasses__())
    while todo:
        record = todo.pop(0)
        if record not in found:
            found.append(record)
            todo += record.__subclasses__()
    return tuple(found)


@functools.cache
def _tagged(records: tuple[type[Record], ...]) -> Any:
    """The union msgspec decodes by the `record` field into one of `records`."""
    return functools.reduce(operator.or_, records)


_ENCODER = msgspec.json.Encoder()


class Round(msgspec.Struct, frozen=True, kw_only=True):
    """One poll of the whole cluster."""

    time: int  # ns since the run started, when the last answer came
    begun: int | None = None  # when the poll was sent (rounds of older runs lack it)
    nodes: dict[str, Record]


def encode_round(round_: Round) -> bytes:
    return _ENCODER.encode(round_)


def read_rounds(path: Path, declared: Sequence[type[Record]] | None = None) -> list[Round]:
    """The rounds of a polls file. A record without its `record` field was written before
    records named their type: it is read as the first of the kind's `declared` records whose
    fields it has (a line cut off by a crash is skipped)."""
    rounds = []
    for line in _lines(path):
        try:
            raw = msgspec.json.decode(line)
        except msgspec.DecodeError:
            continue  # the last line, cut off by a crash
        nodes = {n: record_of(entry, declared) for n, entry in (raw.get("nodes") or {}).items()}
        rounds.append(Round(time=raw["time"], begun=raw.get("begun"), nodes=nodes))
    return rounds


def _lines(path: Path) -> Iterator[bytes]:
    with path.open("rb") as f:
        for line in f:
            if line.strip():
                yield line


def record_of(entry: dict[str, Any], declared: Sequence[type[Record]] | None = None) -> Record:
    """A node's entry of a polls file as its record (see `read_rounds`; `declared`: the kind's
    records, every known one when not given)."""
    if "record" in entry:
        return msgspec.convert(entry, _tagged(known_records()))  # type: ignore[no-any-return]
    for kind in declared or known_records():
        try:
            return msgspec.convert(entry, kind)
        except msgspec.ValidationError:
            continue
    raise ValueError(f"a polled state of no declared record: {entry}")
