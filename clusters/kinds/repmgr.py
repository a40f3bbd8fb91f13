"""Cluster kind `repmgr`: `--members N` Postgres 15 nodes n1…nN (3 by default) under repmgr 5.3
(Debian bookworm's `postgresql-15-repmgr`), each with its `repmgrd`, and a witness (`--witness
on`, the default): a small Postgres of its own on the node after them, registered with the
cluster, whose repmgrd casts the deciding vote in an election.

repmgrd on each standby watches the primary; when it has failed `reconnect_attempts` times,
`reconnect_interval` seconds apart, the standbys it can see (and the witness) hold an election,
the winner runs `promote_command` and the others `follow_command`. It fences nothing by itself:
its manual leaves the old primary to the operator. `--repmgr-fencing` sets what a user may add:
`none` (the package's defaults), `consensus` (`primary_visibility_consensus`: a failover is
called off while any node still sees the primary) or `disconnect-command` (consensus, and a
`child_nodes_disconnect_command` that stops a primary whose standbys have all gone).

A node the harness restarts after a kill comes back as repmgr's manual says a failed primary
must: once another node is primary, it rejoins as its standby (`repmgr node rejoin
--force-rewind`, or a fresh clone when that refuses); the naive restart is a fault of its own.

Everything repmgr-specific is declared here: the poll records (each member's Postgres with what
its copy of `repmgr.nodes` says, and the witness's copy).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg

from checkers.cluster_state import (
    MOST_NAMED,
    SETTLE_S,
    Anomaly,
    DeposedAcknowledged,
    Evidence,
    QuietElections,
    Rule,
    Timelines,
)
from checkers.moments import LeaderChanged, Moment, Roles, StandbyBehind, leading
from clusters.backend import Backend, Node
from clusters.image import REPMGR_IMAGE
from clusters.kinds import postgres as pg
from clusters.kinds.base import ClusterKind, KindOption, Process, RestartsDeposed
from clusters.kinds.on_node import (
    CLOCK_FILE,
    FAKETIME_LIB,
    ensure_clock_file,
    start_once,
    wait_until,
)
from clusters.kinds.streaming import (
    POLL_QUERY,
    READ_FROM_OPTION,
    REPLICATION_CONF,
    REPLICATIONS,
    STREAMING_CONF,
    StandbyReads,
    reading_endpoints,
    said_of_itself,
    standby_names,
)
from core.endpoint import Endpoint
from core.history import Op
from core.polls import Record, Round, StreamingPoll, lsn_text

DEFAULT_MEMBERS = 3
FENCING = ("none", "consensus", "disconnect-command")
SWITCH = ("on", "off")
# repmgr's own defaults: a standby gives the primary reconnect_attempts × reconnect_interval
# (60 s) before it calls an election
DEFAULT_ATTEMPTS = 6
DEFAULT_INTERVAL = 10
MONITOR_INTERVAL = 2  # monitor_interval_secs, repmgr's default
REPMGR_DB = "repmgr"
CONF = "/var/lib/harness/repmgr.conf"  # on the node's state volume, beside PGDATA
REPMGR = f"{pg.PG_BIN}/repmgr"
REPMGRD_PATTERN = "[r]epmgrd -f"
REPMGRD_OUT = f"{pg.LOG_DIR}/repmgrd.out"
DEPLOY_WAIT_S = 180
REJOIN_WAIT_S = 120
FOLLOW_WAIT_S = 30  # a rejoined node reaches its new primary's timeline within this
REJOIN_LOG = f"{pg.LOG_DIR}/rejoin.log"
PRELOAD = "shared_preload_libraries = 'repmgr'\n"
# What each node's copy of repmgr's metadata says: its own registration, and which node it
# has as the active primary.
NODES_QUERY = """
SELECT (SELECT type FROM repmgr.nodes WHERE node_name = %(me)s),
       (SELECT active FROM repmgr.nodes WHERE node_name = %(me)s),
       (SELECT u.node_name FROM repmgr.nodes n JOIN repmgr.nodes u ON u.node_id = n.upstream_node_id
         WHERE n.node_name = %(me)s),
       (SELECT string_agg(node_name, ',' ORDER BY node_id) FROM repmgr.nodes
         WHERE type = 'primary' AND active),
       (SELECT e.event || ' ' || n.node_name || CASE WHEN e.successful THEN '' ELSE ' (failed)' END
          FROM repmgr.events e JOIN repmgr.nodes n USING (node_id)
         ORDER BY e.event_timestamp DESC LIMIT 1)
"""
# What the node's repmgrd keeps in the extension's shared memory: whether it runs, the seconds
# since it last reached its upstream (-1: never, or not since Postgres started; a primary's
# repmgrd has none), and the node an election's winner told it to follow, until it does.
REPMGRD_QUERY = """
SELECT repmgr.repmgrd_is_running(), repmgr.get_upstream_last_seen(),
       (SELECT node_name FROM repmgr.nodes WHERE node_id = repmgr.get_new_primary())
"""
# repmgrd reaches its upstream every monitor interval: two missed (the count is whole seconds,
# 0 to 2 while it reaches it), it has lost it and is in its reconnection attempts
LOST_S = 2 * MONITOR_INTERVAL
# the witness's repmgrd copies the primary's repmgr.nodes every witness_sync_interval (repmgr's
# default), so its view of who is primary may lag by that much
WITNESS_SYNC_S = 15
ELECTION_S = 10  # repmgrd's election among the standbys, and the winner's promotion


def repmgr_conf(
    node_id: int,
    name: str,
    *,
    attempts: int,
    interval: int,
    fencing: str,
    priority: int = 100,
) -> str:
    """A node's repmgr.conf: repmgrd's automatic failover at these timeouts, Postgres started
    and restarted under the node's faked clock (as the harness starts it), and the fencing."""
    start = (
        f"env LD_PRELOAD={FAKETIME_LIB} FAKETIME_TIMESTAMP_FILE={CLOCK_FILE} FAKETIME_NO_CACHE=1 "
        f"{pg.PG_BIN}/pg_ctl -D {pg.PGDATA} -l {pg.PG_LOG} -w -t 60"
    )
    lines = [
        f"node_id={node_id}",
        f"node_name='{name}'",
        f"conninfo='host={name} port={pg.PORT} user={pg.USER} dbname={REPMGR_DB} "
        "connect_timeout=2'",
        f"data_directory='{pg.PGDATA}'",
        f"pg_bindir='{pg.PG_BIN}'",
        f"log_file='{pg.LOG_DIR}/repmgr.log'",
        "log_level='INFO'",
        "failover='automatic'",
        f"priority={priority}",
        f"promote_command='{REPMGR} standby promote -f {CONF} --log-to-file'",
        f"follow_command='{REPMGR} standby follow -f {CONF} --log-to-file --upstream-node-id=%n'",
        f"monitor_interval_secs={MONITOR_INTERVAL}",
        f"reconnect_attempts={attempts}",
        f"reconnect_interval={interval}",
        f"service_start_command='{start} start'",
        f"service_stop_command='{pg.PG_BIN}/pg_ctl -D {pg.PGDATA} -m fast -w stop'",
        f"service_restart_command='{start} restart'",
        "repmgrd_pid_file='/tmp/repmgrd.pid'",  # not on the volume: a kill leaves no stale one
    ]
    if fencing in ("consensus", "disconnect-command"):
        lines.append("primary_visibility_consensus=true")
    if fencing == "disconnect-command":
        stop = f"{pg.PG_BIN}/pg_ctl -D {pg.PGDATA} -m immediate stop"
        lines.append(f"child_nodes_disconnect_command='{stop}'")
    return "\n".join(lines) + "\n"


def failover_time(attempts: int, interval: int) -> float:
    """How long repmgrd takes to fail over: the reconnection attempts, a monitoring interval
    to notice, and the election and promotion (a few seconds)."""
    return attempts * interval + MONITOR_INTERVAL + ELECTION_S


# What the cluster says of itself


class RepmgrPoll(StreamingPoll, tag="repmgr"):
    """A repmgr member: its Postgres as a streaming node says it; what its own copy of
    `repmgr.nodes` says: its registered type (primary, standby) and whether it is active, its
    registered upstream, and the active primaries it names (one, unless repmgr itself is split);
    the newest entry of its copy of `repmgr.events`; and what its repmgrd keeps in shared
    memory. A field is empty where that side did not answer."""

    registered: str | None = None
    active: bool | None = None
    registered_upstream: str | None = None
    primary_seen: tuple[str, ...] = ()
    # the newest entry of its copy of repmgr.events: what repmgr last did, and on which node
    # (`standby_promote n3`, `child_nodes_disconnect_command n1`, …)
    last_event: str | None = None
    repmgrd: bool | None = None  # whether its repmgrd runs, as the extension knows its pid
    unseen_s: int | None = None  # seconds since its repmgrd last reached its upstream
    told_to_follow: str | None = None  # the new primary an election's winner told it to follow
    # reconnect_attempts × reconnect_interval: how long repmgrd tries a lost upstream again
    # before it calls an election
    attempts_s: int | None = None

    def lost(self) -> bool:
        """Whether its repmgrd, on a standby, has lost the upstream it monitors (a repmgrd that
        is not running has stopped counting)."""
        return self.standby and self.repmgrd is not False and (self.unseen_s or 0) >= LOST_S

    def lane_state(self) -> str | None:
        if self.registered is None:
            return None
        return self.registered if self.active else f"{self.registered} (inactive)"


class WitnessPoll(Record, tag="repmgr-witness"):
    """The witness: the active primaries its copy of `repmgr.nodes` names (its repmgrd copies
    the primary's table every few seconds)."""

    primary_seen: tuple[str, ...] = ()
    repmgrd: bool | None = None
    unseen_s: int | None = None  # seconds since its repmgrd last reached the primary

    def lost(self) -> bool:
        return self.repmgrd is not False and (self.unseen_s or 0) >= LOST_S

    def lane_state(self) -> str | None:
        return f"witness: primary {', '.join(self.primary_seen) or 'none'}"


def repmgrd_said(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """What the node's repmgrd keeps in shared memory; {} when the extension does not answer."""
    with contextlib.suppress(psycopg.Error):
        row = conn.execute(REPMGRD_QUERY).fetchone()
        if row is not None:
            running, unseen, follow = row
            return {
                "repmgrd": running,
                "unseen_s": None if unseen is None or unseen < 0 else unseen,
                "told_to_follow": follow,
            }
    return {}


def member_state(node: Node, attempts_s: int | None = None) -> RepmgrPoll | None:
    """What the node's Postgres says of itself, its copy of repmgr's table and its repmgrd's
    shared memory; None when it does not answer."""
    host, port = node.endpoint(pg.PORT)
    with contextlib.suppress(Exception), psycopg.connect(
        host=host, port=port, user=pg.USER, dbname=REPMGR_DB, connect_timeout=2,
        options="-c statement_timeout=2000", autocommit=True,
    ) as conn:  # fmt: skip
        row = conn.execute(POLL_QUERY).fetchone()
        if row is None:
            return None
        said: tuple[Any, ...] = (None, None, None, None, None)
        with contextlib.suppress(psycopg.Error):
            said = conn.execute(NODES_QUERY, {"me": node.name}).fetchone() or said
        kind, active, registered_upstream, primaries, event = said
        return RepmgrPoll(
            **said_of_itself(row),
            registered=kind,
            active=active,
            registered_upstream=registered_upstream,
            primary_seen=tuple(primaries.split(",")) if primaries else (),
            last_event=event,
            attempts_s=attempts_s,
            **repmgrd_said(conn),
        )
    return None


def witness_state(node: Node) -> WitnessPoll | None:
    host, port = node.endpoint(pg.PORT)
    with contextlib.suppress(Exception), psycopg.connect(
        host=host, port=port, user=pg.USER, dbname=REPMGR_DB, connect_timeout=2,
        options="-c statement_timeout=2000", autocommit=True,
    ) as conn:  # fmt: skip
        row = conn.execute(
            "SELECT string_agg(node_name, ',' ORDER BY node_id) FROM repmgr.nodes "
            "WHERE type = 'primary' AND active"
        ).fetchone()
        said = repmgrd_said(conn)
        said.pop("told_to_follow", None)  # the witness follows whoever its table names
        return WitnessPoll(primary_seen=tuple(row[0].split(",")) if row and row[0] else (), **said)
    return None


# repmgr's moments and its promise about its own state, read from the records above


def _repmgrds(r: Round) -> dict[str, RepmgrPoll | WitnessPoll]:
    return {n: s for n, s in r.nodes.items() if isinstance(s, RepmgrPoll | WitnessPoll)}


def _members(r: Round) -> dict[str, RepmgrPoll]:
    return {n: s for n, s in r.nodes.items() if isinstance(s, RepmgrPoll)}


class PrimaryLost(Moment):
    """A standby's repmgrd (or the witness's) has not reached the primary for two monitor
    intervals: it is in its reconnection attempts, and the primary, if it lives, still takes
    writes; the election comes when the attempts run out."""

    name = "primary-lost"
    about = "a standby's repmgrd has lost the primary and is trying to reach it again"
    roles = ("lost", "leader", "others")
    provoke = "leader-cut"  # the primary cut off and left running: its clients still write
    watch_s = 30.0

    def observe(self, r: Round) -> Roles | None:
        lost = sorted(n for n, s in _repmgrds(r).items() if s.lost())
        if not lost:
            return None
        led = leading(r)
        others = sorted(n for n in r.nodes if n not in lost and n not in led)
        return {"lost": lost, "leader": led, "others": others}


class ElectionDue(Moment):
    """A standby's repmgrd has lost the primary for longer than its reconnection attempts
    (`reconnect_attempts` × `reconnect_interval`), and no other member takes writes yet: the
    election is under way (or was called off, under `primary_visibility_consensus`, while a
    sibling still sees the primary)."""

    name = "election-due"
    about = "the standbys' reconnection attempts ran out and no new primary takes writes yet"
    roles = ("candidates", "deposed", "others")
    provoke = "leader-cut"
    watch_s = 120.0  # repmgr's default attempts alone take 60 s

    def __init__(self) -> None:
        self.primary: str | None = None

    def observe(self, r: Round) -> Roles | None:
        members = _members(r)
        led = leading(r)
        before = self.primary
        if len(led) == 1:
            self.primary = led[0]
        newest = max((s.timeline or 0 for s in members.values() if s.writable), default=0)
        due = sorted(
            n
            for n, s in members.items()
            if s.lost()
            and s.attempts_s is not None
            and (s.unseen_s or 0) >= s.attempts_s
            and s.told_to_follow is None  # a winner has told it whom to follow
            and (s.timeline or 0) >= newest  # no member promoted past it
        )
        if not due or any(n != before for n in led):
            return None
        deposed = [before] if before else []
        others = sorted(n for n in r.nodes if n not in due and n not in deposed)
        return {"candidates": due, "deposed": deposed, "others": others}


class Following(Moment):
    """After a promotion, a standby is still to follow the new primary: an election's winner
    told it to (its repmgrd runs `follow_command`: a restart against the new upstream), or it
    still replays an older timeline than the new primary's."""

    name = "following"
    about = "a standby is yet to follow the newly promoted primary"
    roles = ("following", "leader")
    provoke = "leader"
    watch_s = 120.0

    def observe(self, r: Round) -> Roles | None:
        members = _members(r)
        led = [n for n, s in members.items() if s.writable]
        if len(led) != 1:
            return None
        top = members[led[0]].timeline or 0
        following = sorted(
            n
            for n, s in members.items()
            if s.standby and (s.told_to_follow == led[0] or (s.timeline or top) < top)
        )
        return {"following": following, "leader": led} if following else None


class PrimaryAgreed(Rule):
    """repmgr's nodes agree on the primary once faults heal: every member that answers and the
    witness name, in their copies of `repmgr.nodes`, the same one active primary, and that
    member alone takes writes. A failover under way when the last fault healed finishes within
    the kind's failover time, and the witness copies the primary's table every
    WITNESS_SYNC_S; a disagreement that outlasts both, in quiet time, is one that repmgr left
    in place (a deposed primary taking writes beside the new one, a standby that never
    followed)."""

    name = "primary-agreed"
    HOLD_S = 2 * MONITOR_INTERVAL + 1  # one round's disagreement may be a poll across a change

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[float, str | None, list[str]]] = []  # time, what disagrees, who
        self.attempts_s: int | None = None  # None until a record says (older polls do not)

    def observe(self, r: Round) -> None:
        said = _repmgrds(r)
        members = _members(r)
        said_s = [s.attempts_s for s in members.values() if s.attempts_s is not None]
        self.attempts_s = max(
            [*said_s, *([self.attempts_s] if self.attempts_s else [])], default=None
        )
        views = {n: s.primary_seen for n, s in said.items() if not _unread(s)}
        writable = sorted(n for n, s in members.items() if s.writable)
        named = sorted({p for v in views.values() for p in v})
        why = None
        if len(writable) > 1:
            why = f"{' and '.join(writable)} each took writes"
        elif len({v for v in views.values()}) > 1 or any(len(v) != 1 for v in views.values()):
            why = "; ".join(
                f"{n} named {', '.join(v) or 'no one'}" for n, v in sorted(views.items())
            )
        elif writable and named and writable != named:
            why = f"{writable[0]} took writes while every copy of the table named {named[0]}"
        self.seen.append((r.time / 1e9, why, sorted({*writable, *named})))

    def report(self, evidence: Evidence) -> list[Anomaly]:
        attempts = (
            DEFAULT_ATTEMPTS * DEFAULT_INTERVAL if self.attempts_s is None else self.attempts_s
        )
        grace = attempts + MONITOR_INTERVAL + ELECTION_S + WITNESS_SYNC_S + SETTLE_S
        windows = sorted(evidence.windows)
        found: list[Anomaly] = []
        run: list[tuple[float, str | None, list[str]]] = []

        def close() -> None:
            if run and run[-1][0] - run[0][0] >= self.HOLD_S and len(found) < 10:
                found.append(self.anomaly(run, healed_by(run[0][0]), grace))
            run.clear()

        def healed_by(t: float) -> float:
            return max((end for _, end in windows if end <= t), default=0.0)

        def quiet(t: float) -> bool:
            in_fault = any(start <= t < end for start, end in windows)
            return not in_fault and t >= healed_by(t) + grace

        for t, why, who in self.seen:
            if why is None or not quiet(t) or (run and healed_by(t) != healed_by(run[0][0])):
                close()
            if why is not None and quiet(t):
                run.append((t, why, who))
        close()
        return found

    @staticmethod
    def anomaly(
        run: list[tuple[float, str | None, list[str]]], healed: float, grace: float
    ) -> Anomaly:
        (a, why, who), b = run[0], run[-1][0]
        since = f"the last fault healed at {healed:.1f} s" if healed else "no fault yet"
        return {
            "type": "primary-disagreed",
            "window_ns": [a * 1e9, b * 1e9],
            "nodes": who,
            "explanation": (
                f"from {a:.1f} s to at least {b:.1f} s, with no fault in place ({since}, more "
                f"than {grace:.0f} s before, the failover time and the witness's copy "
                f"included), the nodes did not agree on the primary: {why}"
            ),
        }


class DeposedWritable(Rule):
    """A member repmgr has failed over acknowledges no writes: once a standby was promoted (a
    newer timeline) and its own copy of `repmgr.nodes` names it the one active primary, the
    member it replaced is deposed, and a write that member acknowledges after that round is on
    a history the new primary will never have. repmgr fences nothing by itself; with
    `child_nodes_disconnect_command` a primary that lost its standbys stops itself. A deposed
    primary that is writable but acknowledges nothing (under synchronous replication its commits
    wait for a standby that now follows another) is not held against it here."""

    name = "deposed-writable"

    def __init__(self) -> None:
        super().__init__()
        # deposed member → [first seen, last seen (ns), its timeline, the new primary, its timeline]
        self.open: dict[str, list[Any]] = {}
        self.stretches: list[tuple[str, list[Any]]] = []

    def observe(self, r: Round) -> None:
        members = _members(r)
        now: dict[str, tuple[int, str, int]] = {}
        for n, s in members.items():
            if not s.writable or s.timeline is None:
                continue
            for m, newer in members.items():
                if (
                    newer.writable
                    and (newer.timeline or 0) > s.timeline
                    and newer.primary_seen == (m,)
                ):
                    now[n] = (s.timeline, m, newer.timeline or 0)
        for n in [n for n in self.open if n not in now or self.open[n][3] != now[n][1]]:
            self.stretches.append((n, self.open.pop(n)))
        for n, (timeline, m, newer) in now.items():
            self.open.setdefault(n, [r.time, r.time, timeline, m, newer])[1] = r.time

    def wants_writes(self) -> bool:
        return bool(self.stretches or self.open)

    def report(self, evidence: Evidence) -> list[Anomaly]:
        self.stretches += list(self.open.items())
        self.open.clear()
        found = []
        for n, (start, last, timeline, m, newer) in self.stretches:
            acked = sorted(
                (op for op in evidence.writes
                 if op.get("write") and op.get("node") == n
                 and start < op["complete_time"] <= last),
                key=lambda op: op["complete_time"],
            )  # fmt: skip
            if acked and len(found) < 10:
                found.append(self.anomaly(n, m, acked, (start, last), (timeline, newer)))
        return found

    @staticmethod
    def anomaly(
        n: str, m: str, acked: list[Op], stretch: tuple[int, int], timelines: tuple[int, int]
    ) -> Anomaly:
        (start, last), (timeline, newer) = stretch, timelines
        first = acked[0]
        return {
            "type": "deposed-primary-acknowledged-writes",
            "ops": acked[:MOST_NAMED],
            "count": len(acked),
            "window_ns": [start, last],
            "nodes": [n, m],
            "explanation": (
                f"{n}, on timeline {timeline}, acknowledged {len(acked)} writes from "
                f"{start / 1e9:.1f} s to {last / 1e9:.1f} s (the first at index "
                f"{first['invoke_index']}, {first['complete_time'] / 1e9:.1f} s) while {m}, "
                f"promoted to timeline {newer}, took writes too and its copy of repmgr.nodes "
                f"named {m} the one active primary: repmgr had failed {n} over and left it "
                f"writable, and those writes are on a history that {m} does not have"
            ),
        }


def _unread(s: RepmgrPoll | WitnessPoll) -> bool:
    """Whether the node's copy of repmgr's table did not answer (its view is not known)."""
    return isinstance(s, RepmgrPoll) and s.registered is None


class RepmgrCluster(StandbyReads, RestartsDeposed, ClusterKind):
    name = "repmgr"
    about = (
        "Postgres under repmgr 5.3 (repmgrd on every node, a witness); its nodes' image is "
        "built on first use"
    )
    coordinated = True  # the coordination faults reach the witness (cut off, killed, paused)
    cli_options = (
        KindOption(
            "members",
            int,
            f"Number of Postgres nodes under repmgrd (default {DEFAULT_MEMBERS}); the witness, "
            "if any, runs on a node after them.",
            default=DEFAULT_MEMBERS,
            least=2,
        ),
        KindOption(
            "witness",
            str,
            "on (default): a witness node, a Postgres of its own whose repmgrd votes in "
            "elections; off: none.",
            default=SWITCH[0],
            choices=SWITCH,
        ),
        KindOption(
            "repmgr_fencing",
            str,
            "none (default: the package's settings, which fence nothing), consensus "
            "(primary_visibility_consensus: no failover while any node still sees the primary) "
            "or disconnect-command (consensus, and a child_nodes_disconnect_command that stops "
            "a primary whose standbys have all gone).",
            default=FENCING[0],
            choices=FENCING,
        ),
        KindOption(
            "replication",
            str,
            "async (default), sync (synchronous_standby_names FIRST 1 (…) on every member: a "
            "COMMIT waits for the first standby listed that is connected) or quorum (ANY 1 (…)).",
            default=REPLICATIONS[0],
            choices=REPLICATIONS,
        ),
        KindOption(
            "reconnect_attempts",
            int,
            f"repmgrd's reconnect_attempts (default {DEFAULT_ATTEMPTS}, repmgr's): how often a "
            "standby tries the primary again before it calls an election.",
            default=DEFAULT_ATTEMPTS,
            least=1,
        ),
        KindOption(
            "reconnect_interval",
            int,
            f"repmgrd's reconnect_interval in seconds (default {DEFAULT_INTERVAL}, repmgr's), "
            "between those attempts.",
            default=DEFAULT_INTERVAL,
            least=1,
        ),
        READ_FROM_OPTION,
    )
    collected = (pg.LOG_DIR, f"{pg.PGDATA}/conf.d", CONF)
    poll_records = (RepmgrPoll, WitnessPoll)
    state_rules = (DeposedAcknowledged, DeposedWritable, Timelines, QuietElections, PrimaryAgreed)
    # a promotion is LeaderChanged: the round in which a standby began to take writes
    moments = (PrimaryLost, ElectionDue, LeaderChanged, Following, StandbyBehind)
    lone_kills = ("postgres", "repmgrd")

    def __init__(self, backend: Backend, cluster: str, options: Mapping[str, Any]) -> None:
        super().__init__(backend, cluster, options)
        self.coordinated = self.coordinated_with(self.options)

    @classmethod
    def coordinated_with(cls, options: Mapping[str, Any]) -> bool:
        return options["witness"] == "on"  # without a witness, nothing to strike

    @classmethod
    def nodes_needed(cls, options: Mapping[str, Any]) -> int:
        return int(options["members"]) + (options["witness"] == "on")

    @classmethod
    def failover_s(cls, options: Mapping[str, Any]) -> float:
        return failover_time(int(options["reconnect_attempts"]), int(options["reconnect_interval"]))

    def members(self) -> list[Node]:
        return self.nodes[: self.options["members"]]

    def witness(self) -> Node | None:
        return self.nodes[self.options["members"]] if self.options["witness"] == "on" else None

    # deploying

    def conf_of(self, node: Node) -> str:
        return repmgr_conf(
            [n.name for n in self.nodes].index(node.name) + 1,
            node.name,
            attempts=int(self.options["reconnect_attempts"]),
            interval=int(self.options["reconnect_interval"]),
            fencing=self.options["repmgr_fencing"],
        )

    def deploy(self, say: Callable[[str], None]) -> None:
        """n1 initialised and registered as the primary; the other members cloned from it and
        registered as standbys; the witness its own Postgres, registered against n1; the
        replication mode on every member; then repmgrd everywhere."""
        members = self.options["members"]
        witnessed = self.options["witness"] == "on"
        parts = f"n1…n{members} Postgres under repmgrd" + (
            f", n{members + 1} the witness" if witnessed else ", no witness"
        ) + f" (image {REPMGR_IMAGE.name}, built on first use)"  # fmt: skip
        self.bring_up(say, [pg.PORT], parts, REPMGR_IMAGE)
        witness = self.witness()
        for node in self.nodes:
            ensure_clock_file(node)
            pg.make_dirs(node)
            node.put_file(CONF, self.conf_of(node).encode(), owner="postgres")
        primary, *standbys = self.members()
        say("initialising n1 and registering it as repmgr's primary")
        self._own_postgres(primary, STREAMING_CONF + PRELOAD)
        pg.ensure_database(primary)
        self._repmgr(primary, "primary register")
        for node in standbys:
            say(f"cloning n1 onto {node.name} (repmgr standby clone) and registering it")
            self._clone(node, primary.name)
            pg.start(node)
            self._repmgr(node, "standby register --wait-sync=60")
        if witness is not None:
            say(f"initialising the witness on {witness.name} and registering it")
            self._own_postgres(witness, PRELOAD)
            self._repmgr(witness, f"witness register -h {primary.name} -U {pg.USER} -d {REPMGR_DB}")
        names = [n.name for n in self.members()]
        waits_for = standby_names(self.options["replication"], names)
        replication = f"synchronous_standby_names = '{waits_for}'\n"
        for node in self.members():
            node.put_file(REPLICATION_CONF, replication.encode(), owner="postgres")
            pg.psql(node, "SELECT pg_reload_conf()")
        say("starting repmgrd on every node")
        for node in self.nodes:
            self.start_repmgrd(node)
        wait_until("repmgrd running on every node", self._daemons_up, DEPLOY_WAIT_S, every=1.0)

    def _own_postgres(self, node: Node, conf: str) -> None:
        pg.init(node, conf)
        pg.start(node)
        wait_until(f"Postgres on {node.name} accepting connections", lambda: pg.is_ready(node), 60)
        exists = node.exec(
            f"{pg.PG_BIN}/psql -h 127.0.0.1 -U {pg.USER} -d postgres -tAc "
            f"\"SELECT 1 FROM pg_database WHERE datname = '{REPMGR_DB}'\""
        ).output.strip()
        if exists != "1":
            node.exec(f"{pg.PG_BIN}/createdb -h 127.0.0.1 -U {pg.USER} {REPMGR_DB}")

    def _repmgr(self, node: Node, command: str, check: bool = True) -> Any:
        return node.exec(pg.as_postgres(f"{REPMGR} -f {CONF} {command}"), check=check)

    def _clone(self, node: Node, primary: str) -> None:
        """A fresh standby of `primary` on `node`: its data directory replaced by a clone."""
        node.exec(f"rm -rf {pg.PGDATA}")
        self._repmgr(
            node,
            f"-h {primary} -U {pg.USER} -d {REPMGR_DB} standby clone --fast-checkpoint",
        )

    def _daemons_up(self) -> bool:
        return all(
            node.exec(f"pgrep -f '{REPMGRD_PATTERN}'", check=False).code == 0 for node in self.nodes
        )

    def start_repmgrd(self, node: Node) -> None:
        """The node's repmgrd, unless it runs (in the foreground of a detached shell, so that
        a kill of it is a kill of the daemon)."""
        cmd = f"runuser -u postgres -- {REPMGR}d -f {CONF} --daemonize=false"
        start_once(node, REPMGRD_PATTERN, cmd, REPMGRD_OUT)

    def start_postgres(self, node: Node) -> None:
        """Postgres back after a kill, as repmgr's manual says: a member that was primary while
        another has since been promoted rejoins as its standby (`node rejoin --force-rewind`);
        anything else starts as it was. What the rejoin said goes to the node's rejoin.log.
        A rejoin that fails, or leaves the node on a timeline its new primary has left (it then
        never streams again), is followed by a fresh clone, as an operator's next step, so that
        the run goes on with the standby it is meant to have."""
        witness = self.witness()
        if (witness and node.name == witness.name) or not self._deposed(node):
            pg.start(node)
            return
        primary = self._other_primary(node)
        if primary is None:
            pg.start(node)
            return
        self.rejoin(node, primary)
        wait_until(f"{node.name} back as a standby", lambda: pg.is_ready(node), REJOIN_WAIT_S)

    def rejoin(self, node: Node, primary: str, clone_if_stuck: bool = True) -> dict[str, Any]:
        """`repmgr node rejoin --force-rewind` of a deposed primary's stopped node onto
        `primary`, its output appended to the node's rejoin.log; whether the node then reached
        its new primary's timeline; and, unless told not to, a fresh clone when it did not."""
        target = f"host={primary} port={pg.PORT} user={pg.USER} dbname={REPMGR_DB}"
        run = (
            f"{REPMGR} -f {CONF} node rejoin -d '{target}' --force-rewind --no-wait --verbose "
            f"> /tmp/rejoin.out 2>&1; rc=$?; cat /tmp/rejoin.out >> {REJOIN_LOG}; "
            "cat /tmp/rejoin.out; exit $rc"
        )
        said = node.exec(pg.as_postgres(run), check=False)
        followed = said.code == 0 and self._follows(node, primary)
        done = {"primary": primary, "status": said.code, "followed": followed,
                "said": said.output.strip().splitlines()[-3:]}  # fmt: skip
        if not followed and clone_if_stuck:
            node.exec(f"echo 'the rejoin left no standby of {primary}: cloning' >> {REJOIN_LOG}")
            pg.stop(node)
            self._clone(node, primary)
            pg.start(node)
            self._repmgr(node, "standby register --force", check=False)
            done["cloned"] = True
        return done

    # the restart-deposed fault's needs (RestartsDeposed)

    def crash_postgres(self, node: Node) -> str:
        node.exec(
            pg.as_postgres(f"{pg.PG_BIN}/pg_ctl -D {pg.PGDATA} -m immediate stop"), check=False
        )
        return "pg_ctl stop -m immediate"

    def start_as_it_was(self, node: Node) -> str:
        pg.start(node)
        return "pg_ctl start on its data directory as the crash left it"

    def rejoin_deposed(self, node: Node) -> dict[str, Any]:
        primary = self._other_primary(node)
        if primary is None:
            pg.start(node)  # still the only primary (no failover came): nothing to rejoin
            return {"rejoined": None, "why": "no other member takes writes"}
        pg.stop(node)  # a clean stop: pg_rewind refuses a data directory that crashed
        done = self.rejoin(node, primary)
        wait_until(f"{node.name} back as a standby", lambda: pg.is_ready(node), REJOIN_WAIT_S)
        return {"rejoined": node.name} | done

    def _follows(self, node: Node, primary: str) -> bool:
        """Whether `node` reaches `primary`'s timeline within FOLLOW_WAIT_S."""
        deadline = time.monotonic() + FOLLOW_WAIT_S
        while time.monotonic() < deadline:
            mine, theirs = member_state(node), member_state(self._node(primary))
            if mine and theirs and mine.standby and mine.timeline == theirs.timeline:
                return True
            time.sleep(1.0)
        return False

    def _node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def _deposed(self, node: Node) -> bool:
        """Whether the node's data directory is a primary's (no standby.signal)."""
        return node.exec(f"test -f {pg.PGDATA}/standby.signal", check=False).code != 0

    def _other_primary(self, node: Node) -> str | None:
        """Another member that takes writes now."""
        for other in self.members():
            if other.name != node.name and (s := member_state(other)) is not None and s.writable:
                return other.name
        return None

    # Postgres first: a kill's restart follows this order, and repmgrd wants its node up.
    runs = (
        Process("postgres", f"{pg.PG_BIN}/postgres", start_postgres),
        Process("repmgrd", REPMGRD_PATTERN, start_repmgrd),
    )

    # what clients see

    def endpoints(self) -> list[Endpoint]:
        return reading_endpoints(self.members(), self.options["read_from"])

    # reading the cluster's state

    def coordinators(self) -> list[str]:
        witness = self.witness()
        return [witness.name] if witness else []

    def poll(self) -> dict[str, Record]:
        members, witness = self.members(), self.witness()
        with ThreadPoolExecutor(len(self.nodes)) as pool:
            seen = pool.submit(witness_state, witness) if witness else None
            attempts = self.options["reconnect_attempts"] * self.options["reconnect_interval"]
            states = list(pool.map(lambda n: member_state(n, attempts), members))
            witnessed = seen.result() if seen else None
        polled: dict[str, Record] = {
            n.name: s for n, s in zip(members, states, strict=True) if s is not None
        }
        if witness is not None and witnessed is not None:
            polled[witness.name] = witnessed
        return polled

    def leader(self) -> str | None:
        """The member that takes writes; of two, the one the others' repmgr tables name."""
        polled = self.poll()
        writable = sorted(n for n, s in polled.items() if s.leads())
        named = [p for s in polled.values() for p in getattr(s, "primary_seen", ())]
        return max(writable, key=named.count, default=None)

    def status(self) -> dict[str, Any]:
        polled = self.poll()
        nodes: dict[str, dict[str, Any]] = {}
        for node in self.members():
            s = polled.get(node.name)
            if not isinstance(s, RepmgrPoll):
                nodes[node.name] = {"role": "unknown", "postgres": "not answering"}
                continue
            nodes[node.name] = {
                "role": "standby" if s.standby else "primary",
                "registered": s.registered,
                "active": s.active,
                "postgres": "read-write" if s.writable else "read-only",
                "timeline": s.timeline,
                "lsn": None if s.lsn is None else lsn_text(s.lsn),
                "upstream": s.upstream,
                "primary_seen": list(s.primary_seen),
                "last_event": s.last_event,
                "repmgrd": s.repmgrd,
            }
        witness = self.witness()
        if witness is not None:
            w = polled.get(witness.name)
            nodes[witness.name] = {
                "role": "witness",
                "primary_seen": list(w.primary_seen) if isinstance(w, WitnessPoll) else None,
            }
        return {
            "kind": self.name,
            "leader": self.leader(),
            "fencing": self.options["repmgr_fencing"],
            "replication": self.options["replication"],
            "read_from": self.options["read_from"],
            "nodes": nodes,
        }
