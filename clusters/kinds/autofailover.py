"""Cluster kind `autofailover`: `--members N` Postgres 15 nodes n1…nN (3 by default) under
pg_auto_failover's keeper (`pg_autoctl`), and its monitor on a node of its own after them
(Debian bookworm's 2.0, as its users run it). The monitor is a Postgres with the `pgautofailover`
extension that runs a state machine per formation: each keeper reports its node's state and
carries out the goal state the monitor assigns (single, wait_primary, primary, secondary,
catchingup, prepare_promotion, stop_replication, draining, demote_timeout, demoted, …).

Its promises: one failure at a time is tolerated; with quorum standbys a commit waits for one
(`synchronous_standby_names` `ANY n (…)`), so a failover loses nothing acknowledged; a primary
that has lost both the monitor and every standby stops itself after `network_partition_timeout`;
the monitor promotes only a standby that reported its LSN and may be a candidate
(`candidate-priority` > 0, `replication-quorum`). `wait_primary` is the exception a user must
know: a primary whose quorum standbys are all unhealthy turns synchronous replication off and
acknowledges alone.

Everything here is declared beside the kind: its poll records (each member's Postgres with the
monitor's reported and goal states, and the monitor's whole table), the state rule that holds a
writable node to what the monitor assigned it, and the moments the monitor's states show.

The timeouts scale together with `--partition-timeout` (pg_auto_failover's defaults at 20 s):
the keepers' network_partition_timeout, and on the monitor node_considered_unhealthy_timeout,
primary_demote_timeout (1.5 times it), its health checks, and every node's wal_sender_timeout
(1.5 times it, as pg_autoctl sets it), so that a shorter timescale keeps the margins upstream
chose between a primary stopping itself and the monitor promoting another.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import msgspec
import psycopg

from checkers.cluster_state import Anomaly, DeposedAcknowledged, QuietElections, Rule, Timelines
from checkers.moments import Moment, Roles, StandbyBehind
from clusters.backend import Node
from clusters.image import AUTOFAILOVER_IMAGE
from clusters.kinds import postgres as pg
from clusters.kinds.base import (
    ClusterKind,
    KeepsUnpromotable,
    KindOption,
    PlannedSwitchover,
    Process,
)
from clusters.kinds.on_node import (
    ensure_clock_file,
    start_once,
    wait_until,
)
from clusters.kinds.streaming import READ_FROM_OPTION, StandbyReads, node_state, reading_endpoints
from core.endpoint import Endpoint
from core.polls import COORDINATION, Record, Round, StreamingPoll, lsn_text

DEFAULT_MEMBERS = 3
STATE_DIR = "/var/lib/harness"  # on the power layer, with PGDATA
MONITOR_DATA = f"{STATE_DIR}/monitor"
# pg_autoctl keeps its configuration and its state file under XDG folders: beside the data, so
# that a power fault takes both back to the same moment, as on a real disk.
AUTOCTL_HOME = f"{STATE_DIR}/autoctl"
AUTOCTL = "/usr/bin/pg_autoctl"
# pg_autoctl starts Postgres from its pg_ctl's folder: a folder of links to Debian's binaries in
# which `postgres` runs under the node's faked clock, so that a clock fault moves Postgres's
# clock and not the keeper's.
BIN_DIR = f"{STATE_DIR}/bin"
MONITOR_DB = "pg_auto_failover"
MONITOR_USER = "autoctl_node"
FORMATION = "default"
DEFAULT_TIMEOUT = 20  # pg_auto_failover's network_partition_timeout and unhealthy timeout (s)
DEPLOY_WAIT_S = 180  # initdb, then a base backup per standby, each through the monitor's states
SWITCHOVER_WAIT_S = 60  # pg_autoctl perform switchover waits this long for a new primary
ASK_TIMEOUT = 2.0  # seconds for one answer of the monitor or a member
# The goal states in which the monitor lets a node take writes.
PRIMARY_STATES = ("single", "wait_primary", "primary", "join_primary", "apply_settings")
HBA = "host all all 0.0.0.0/0 trust\\nhost replication all 0.0.0.0/0 trust"
MONITOR_QUERY = """
SELECT nodename, reportedstate::text, goalstate::text, health,
       (reportedlsn - '0/0')::bigint,
       candidatepriority, replicationquorum
  FROM pgautofailover.node WHERE formationid = %s ORDER BY nodeid
"""


def timeouts(seconds: int) -> dict[str, str]:
    """The monitor's settings for a partition timeout of `seconds`: pg_auto_failover's own
    defaults at 20, each scaled alike below it."""
    scale = seconds / DEFAULT_TIMEOUT
    ms = {
        "pgautofailover.health_check_period": 5000,
        "pgautofailover.health_check_timeout": 5000,
        "pgautofailover.health_check_retry_delay": 2000,
        "pgautofailover.node_considered_unhealthy_timeout": 20000,
        "pgautofailover.primary_demote_timeout": 30000,
        "pgautofailover.startup_grace_period": 10000,
    }
    return {name: f"{max(100, round(value * scale))}ms" for name, value in ms.items()}


def wal_sender_timeout(seconds: int) -> str:
    """pg_autoctl's 30 s at the default partition timeout, scaled alike."""
    return f"{max(1000, round(30000 * seconds / DEFAULT_TIMEOUT))}ms"


def overrides(text: str) -> dict[str, str]:
    """Per-member settings written NODE=VALUE[,NODE=VALUE…] (e.g. "n3=0")."""
    pairs = [p.strip() for p in text.split(",") if p.strip()]
    found = {}
    for pair in pairs:
        node, sep, value = pair.partition("=")
        if not sep or not node.strip() or not value.strip():
            raise ValueError(pair)
        found[node.strip()] = value.strip()
    return found


def priority_problem(text: str) -> str | None:
    try:
        values = overrides(text)
    except ValueError as e:
        return f"takes NODE=PRIORITY pairs (e.g. n3=0), not {e}"
    bad = [v for v in values.values() if not (v.isdigit() and 0 <= int(v) <= 100)]
    return f"priorities are 0 to 100, not {', '.join(bad)}" if bad else None


def quorum_problem(text: str) -> str | None:
    try:
        values = overrides(text)
    except ValueError as e:
        return f"takes NODE=true|false pairs (e.g. n3=false), not {e}"
    bad = [v for v in values.values() if v not in ("true", "false")]
    return f"values are true or false, not {', '.join(bad)}" if bad else None


# What the cluster says of itself


class KeeperPoll(StreamingPoll, tag="autofailover"):
    """A pg_auto_failover member: its Postgres as a streaming node says it, and the state its
    keeper last reported to the monitor and the goal the monitor assigned it (empty where the
    monitor did not answer)."""

    reported: str | None = None
    goal: str | None = None

    def lane_state(self) -> str | None:
        if self.reported is None:
            return None
        if self.goal in (None, self.reported):
            return self.reported
        return f"{self.reported} → {self.goal}"


class MonitorPoll(Record, tag="monitor"):
    """The monitor's table of the formation's nodes: for each, [reported state, goal state,
    health (1 good, 0 bad, -1 unknown), reported LSN]; `primary` the node whose goal lets it
    take writes, where exactly one's does."""

    nodes: dict[str, list[Any]] = msgspec.field(default_factory=dict)
    primary: str | None = None
    timeout: int | None = None  # the partition timeout (s), which bounds a failover


def _monitor(r: Round) -> MonitorPoll | None:
    said = r.nodes.get(COORDINATION)
    return said if isinstance(said, MonitorPoll) else None


class MonitorAssigned(Rule):
    """pg_auto_failover: a node takes writes only while the monitor's goal for it lets it (one of
    PRIMARY_STATES). A primary cut off from the monitor cannot hear that it was demoted: it must
    stop itself within network_partition_timeout once its standbys are gone too, and the monitor
    waits out primary_demote_timeout before it promotes another. A node still taking writes
    longer than the kind's whole failover time (`bound_s`, recorded in the poll) after the monitor
    gave the primary's part to another is a second primary the manager let be."""

    name = "monitor-assigned"

    def __init__(self) -> None:
        super().__init__()
        self.since: dict[str, tuple[int, str]] = {}  # node → (writable against it since, primary)
        self.told: set[str] = set()

    def observe(self, r: Round) -> None:
        monitor = _monitor(r)
        if monitor is None or monitor.primary is None:
            return
        bound = failover_time(monitor.timeout or DEFAULT_TIMEOUT)
        for n, s in r.nodes.items():
            if not isinstance(s, KeeperPoll) or not s.writable or n == monitor.primary:
                self.since.pop(n, None)
                self.told.discard(n)
                continue
            start, primary = self.since.setdefault(n, (r.time, monitor.primary))
            if primary != monitor.primary:
                start, primary = self.since[n] = (r.time, monitor.primary)
                self.told.discard(n)
            if n in self.told or (r.time - start) / 1e9 <= bound:
                continue
            self.told.add(n)
            self.found.append(self.anomaly(n, primary, start, r.time, bound))

    @staticmethod
    def anomaly(node: str, primary: str, start: int, end: int, bound: float) -> Anomaly:
        return {
            "type": "writable-against-monitor",
            "window_ns": [start, end],
            "nodes": [node, primary],
            "explanation": (
                f"{node} took writes from {start / 1e9:.1f} s to at least {end / 1e9:.1f} s "
                f"while the monitor had given the primary's part to {primary}: longer than the "
                f"cluster's failover time ({bound:g} s), within which a primary cut off from the "
                "monitor and its standbys stops itself"
            ),
        }


def failover_time(seconds: int) -> float:
    """How long pg_auto_failover takes to fail over at this partition timeout: the monitor
    waits the unhealthy timeout, then primary_demote_timeout (1.5 times it), then the standby
    is promoted within a few keeper loops."""
    return seconds * 2.5 + 5


class WaitPrimary(Moment):
    """A primary in `wait_primary`: its quorum standbys are unhealthy, so it turned synchronous
    replication off and acknowledges commits alone. Only a node in `primary` stops itself when
    cut off; this one keeps acknowledging."""

    name = "wait-primary"
    about = "the primary runs in wait_primary: synchronous replication off, acknowledging alone"
    roles = ("leader", "standbys")
    provoke = "follower"  # a standby lost makes the primary wait
    watch_s = 90.0

    def observe(self, r: Round) -> Roles | None:
        monitor = _monitor(r)
        if monitor is None:
            return None
        waiting = sorted(n for n, s in monitor.nodes.items() if s[0] == "wait_primary")
        if not waiting:
            return None
        return {"leader": waiting, "standbys": sorted(n for n in monitor.nodes if n not in waiting)}


class PromotionAssigned(Moment):
    """The monitor assigned a standby `prepare_promotion` or `stop_replication`: a failover or
    switchover is under way, and the old primary must be draining or gone."""

    name = "promotion-assigned"
    about = "the monitor is promoting a standby (prepare_promotion or stop_replication)"
    roles = ("new-leader", "deposed", "others")
    watch_s = 120.0  # the unhealthy timeout, then primary_demote_timeout

    def __init__(self) -> None:
        self.primary: str | None = None

    def observe(self, r: Round) -> Roles | None:
        monitor = _monitor(r)
        if monitor is None:
            return None
        promoted = sorted(
            n for n, s in monitor.nodes.items() if s[1] in ("prepare_promotion", "stop_replication")
        )
        if not promoted:
            self.primary = monitor.primary or self.primary
            return None
        deposed = [self.primary] if self.primary and self.primary not in promoted else []
        others = sorted(n for n in monitor.nodes if n not in promoted and n not in deposed)
        return {"new-leader": promoted, "deposed": deposed, "others": others}


class CatchingUp(Moment):
    """A standby in `catchingup`: streaming again after a base backup or a rewind, not yet a
    candidate; the primary counts it as connected."""

    name = "catching-up"
    about = "a standby is catching up (catchingup), not yet promotable"
    roles = ("catching-up", "leader")
    provoke = "follower"
    watch_s = 60.0

    def observe(self, r: Round) -> Roles | None:
        monitor = _monitor(r)
        if monitor is None:
            return None
        catching = sorted(n for n, s in monitor.nodes.items() if s[0] == "catchingup")
        if not catching:
            return None
        return {"catching-up": catching, "leader": [monitor.primary] if monitor.primary else []}


class AutofailoverCluster(StandbyReads, ClusterKind, PlannedSwitchover, KeepsUnpromotable):
    name = "autofailover"
    about = (
        "Postgres under pg_auto_failover 2.0 (a monitor and a keeper per node); its nodes' "
        "image is built on first use"
    )
    coordinated = True  # the coordination faults reach the monitor
    cli_options = (
        KindOption(
            "members",
            int,
            f"Number of Postgres nodes under pg_autoctl (default {DEFAULT_MEMBERS}); the monitor "
            "runs on a node after them.",
            default=DEFAULT_MEMBERS,
            least=2,
        ),
        KindOption(
            "number_sync_standbys",
            int,
            "The formation's number_sync_standbys (default: as the monitor sets it, 1 once two "
            "quorum standbys joined, else 0; at 0 a primary whose standbys are lost acknowledges "
            "alone).",
            least=0,
        ),
        KindOption(
            "candidate_priority",
            str,
            "Per-member candidate priority, NODE=PRIORITY[,…] (default 50 each, pg_autoctl's; "
            "0: never promoted), e.g. n3=0.",
            default="",
            check=priority_problem,
        ),
        KindOption(
            "replication_quorum",
            str,
            "Per-member replication quorum, NODE=true|false[,…] (default true each: a commit may "
            "wait for it; false: an asynchronous standby), e.g. n3=false.",
            default="",
            check=quorum_problem,
        ),
        KindOption(
            "partition_timeout",
            int,
            f"Seconds of the keepers' network_partition_timeout and the monitor's unhealthy "
            f"timeout (default {DEFAULT_TIMEOUT}, pg_auto_failover's); the monitor's other "
            "timeouts and wal_sender_timeout scale with it.",
            default=DEFAULT_TIMEOUT,
            least=2,
        ),
        READ_FROM_OPTION,
    )
    # pg_autoctl's own log; Postgres's (pg_autoctl turns its logging collector on, into the data
    # directory's log/); and the keepers' configuration and state files
    collected = (
        pg.LOG_DIR,
        f"{pg.PGDATA}/log",
        f"{MONITOR_DATA}/log",
        f"{AUTOCTL_HOME}/config",
        f"{AUTOCTL_HOME}/data",
    )
    poll_records = (KeeperPoll, MonitorPoll)
    state_rules = (DeposedAcknowledged, Timelines, QuietElections, MonitorAssigned)
    moments = (PromotionAssigned, WaitPrimary, CatchingUp, StandbyBehind)
    lone_kills = ("postgres", "keeper")

    @classmethod
    def nodes_needed(cls, options: Mapping[str, Any]) -> int:
        return int(options["members"]) + 1

    @classmethod
    def failover_s(cls, options: Mapping[str, Any]) -> float:
        return failover_time(int(options["partition_timeout"]))

    def members(self) -> list[Node]:
        return self.nodes[: self.options["members"]]

    def monitor(self) -> Node:
        return self.nodes[self.options["members"]]

    def coordinators(self) -> list[str]:
        return [self.monitor().name]

    @property
    def timeout(self) -> int:
        return int(self.options["partition_timeout"])

    # deploying

    def deploy(self, say: Callable[[str], None]) -> None:
        """The monitor first; then n1, which the monitor makes `single` (initdb); then the
        others at once, which the monitor makes standbys by base backup; the settings last."""
        members = self.options["members"]
        parts = (
            f"n1…n{members} Postgres under pg_autoctl, n{members + 1} the monitor "
            f"(image {AUTOFAILOVER_IMAGE.name}, built on first use)"
        )
        self.bring_up(say, [pg.PORT], parts, AUTOFAILOVER_IMAGE)
        monitor = self.monitor()
        say(f"starting the monitor on {monitor.name}")
        self.start_monitor(monitor)
        wait_until("the monitor answering", self._monitor_ready, DEPLOY_WAIT_S)
        self._open(monitor, MONITOR_DATA)
        self._monitor_sql(
            *(f"ALTER SYSTEM SET {k} = '{v}'" for k, v in timeouts(self.timeout).items()),
            "SELECT pg_reload_conf()",
        )
        first, *others = self.members()
        say(f"starting pg_autoctl on n1 (partition timeout {self.timeout} s)")
        self.start_keeper(first)
        wait_until(
            "n1 registered as single",
            lambda: self.states().get(first.name, ("", ""))[0] == "single",
            DEPLOY_WAIT_S,
        )
        self._open(first, pg.PGDATA)
        say(f"starting pg_autoctl on {', '.join(n.name for n in others)}: standbys by base backup")
        with ThreadPoolExecutor(len(others)) as pool:
            list(pool.map(self.start_keeper, others))
        wait_until(
            f"{len(others)} standbys in secondary and a primary",
            lambda: self._hurry(first) or self._settled(members),
            DEPLOY_WAIT_S,
            every=2.0,
        )
        if self.options.get("number_sync_standbys") is not None:
            n = int(self.options["number_sync_standbys"])
            self._monitor_sql(
                f"SELECT pgautofailover.set_formation_number_sync_standbys('{FORMATION}', {n})"
            )
        wait_until("the formation settled", lambda: self._settled(members), DEPLOY_WAIT_S)
        if self.timeout != DEFAULT_TIMEOUT:
            for node in self.members():
                self._keeper_timeout(node)
        pg.ensure_database(first)

    @staticmethod
    def _hurry(primary: Node) -> bool:
        """A checkpoint on the primary now: pg_autoctl's base backups wait for a spread one
        (minutes at Postgres's defaults), which a requested checkpoint finishes at once."""
        host, port = primary.endpoint(pg.PORT)
        with contextlib.suppress(psycopg.Error, OSError), psycopg.connect(
            host=host, port=port, user=pg.USER, dbname="postgres", connect_timeout=2,
            autocommit=True,
        ) as conn:  # fmt: skip
            conn.execute("CHECKPOINT")
        return False

    def _settled(self, members: int) -> bool:
        """Every member's reported state is its goal, one of them a primary, the rest standbys."""
        states = self.states()
        if len(states) != members or any(r != g for r, g in states.values()):
            return False
        primaries = [n for n, (r, _) in states.items() if r in PRIMARY_STATES]
        return len(primaries) == 1 and all(
            r == "secondary" for n, (r, _) in states.items() if n not in primaries
        )

    def _env(self) -> str:
        return (
            f"env HOME=/var/lib/postgresql XDG_CONFIG_HOME={AUTOCTL_HOME}/config "
            f"XDG_DATA_HOME={AUTOCTL_HOME}/data XDG_RUNTIME_DIR={AUTOCTL_HOME}/run"
        )

    def _prepare(self, node: Node) -> None:
        """The folders pg_autoctl and Postgres write in, and the bin folder whose `postgres`
        runs under the node's faked clock."""
        ensure_clock_file(node)
        pg.make_dirs(node)
        node.exec(
            f"mkdir -p {AUTOCTL_HOME}/config {AUTOCTL_HOME}/data {AUTOCTL_HOME}/run "
            f"/var/run/postgresql && chown -R postgres:postgres {AUTOCTL_HOME} /var/run/postgresql"
        )
        pg.faked_clock_bin(node, BIN_DIR)

    def start_monitor(self, node: Node) -> None:
        """The monitor's pg_autoctl, unless it runs: created on first start, run after."""
        self._prepare(node)
        cmd = (
            f"runuser -u postgres -- {self._env()} {AUTOCTL} create monitor "
            f"--pgctl {BIN_DIR}/pg_ctl --pgdata {MONITOR_DATA} --pgport {pg.PORT} "
            f"--hostname {node.name} --auth trust --no-ssl --run"
        )
        start_once(node, "[p]g_autoctl create monitor", cmd, f"{pg.LOG_DIR}/pg_autoctl.log")

    def start_keeper(self, node: Node) -> None:
        """The node's pg_autoctl, unless it runs: created and registered with the monitor on
        first start (`--run` then only runs it), with the member's priority and quorum; it
        starts Postgres in the role the monitor assigns. On the monitor's node, the monitor."""
        if node.name == self.monitor().name:
            self.start_monitor(node)
            return
        self._prepare(node)
        priority = overrides(self.options.get("candidate_priority") or "").get(node.name, "50")
        quorum = overrides(self.options.get("replication_quorum") or "").get(node.name, "true")
        monitor_uri = (
            f"postgres://{MONITOR_USER}@{self.monitor().name}:{pg.PORT}/{MONITOR_DB}?sslmode=prefer"
        )
        cmd = (
            f"runuser -u postgres -- {self._env()} {AUTOCTL} create postgres "
            f"--pgctl {BIN_DIR}/pg_ctl --pgdata {pg.PGDATA} --pgport {pg.PORT} "
            f"--hostname {node.name} --name {node.name} --formation {FORMATION} "
            f"--dbname {pg.DBNAME} --monitor {monitor_uri} --auth trust --no-ssl --pg-hba-lan "
            f"--candidate-priority {priority} --replication-quorum {quorum} --run"
        )
        start_once(node, "[p]g_autoctl create postgres", cmd, f"{pg.LOG_DIR}/pg_autoctl.log")

    def _keeper_timeout(self, node: Node) -> None:
        """The keeper's network_partition_timeout, written to its configuration file (which
        a restart reads again) and reread by the running keeper. Set once the keeper runs: a
        `config set` while `create` makes its folders makes it fail on one that exists."""
        node.exec(
            f"runuser -u postgres -- {self._env()} {AUTOCTL} config set --pgdata {pg.PGDATA} "
            f"timeout.network_partition_timeout {self.timeout}"
        )

    def _open(self, node: Node, data: str) -> None:
        """Every host trusted, the harness's polls and clients among them (pg_autoctl's own
        rules name its peers' addresses and one database); standbys copy it with their base
        backup. wal_sender_timeout scaled with the partition timeout."""
        node.exec(
            pg.as_postgres(
                f"grep -q '^host all all 0.0.0.0/0 trust' {data}/pg_hba.conf || "
                f"sed -i '1i {HBA}' {data}/pg_hba.conf"
            )
        )
        alter = f"ALTER SYSTEM SET wal_sender_timeout = '{wal_sender_timeout(self.timeout)}'"
        node.exec(
            pg.as_postgres(
                f"{pg.PG_BIN}/psql -h /var/run/postgresql -p {pg.PORT} -d postgres "
                f"-c {pg.quote(alter)} -c 'SELECT pg_reload_conf()'"
            )
        )

    runs = (
        Process("keeper", "[p]g_autoctl", start_keeper),
        Process("postgres", f"{pg.PG_BIN}/postgres", start_keeper),
    )

    # the monitor

    def _monitor_connect(self) -> psycopg.Connection[Any]:
        host, port = self.monitor().endpoint(pg.PORT)
        return psycopg.connect(
            host=host, port=port, user=MONITOR_USER, dbname=MONITOR_DB,
            connect_timeout=int(ASK_TIMEOUT), options="-c statement_timeout=2000",
            autocommit=True,
        )  # fmt: skip

    def _monitor_ready(self) -> bool:
        with self._monitor_connect() as conn:
            row = conn.execute("SELECT count(*) FROM pgautofailover.formation").fetchone()
        return row is not None

    def _monitor_sql(self, *statements: str) -> None:
        """Statements run on the monitor as its superuser, through its own socket, each in a
        transaction of its own (ALTER SYSTEM takes none)."""
        each = " ".join(f"-c {pg.quote(sql)}" for sql in statements)
        self.monitor().exec(
            pg.as_postgres(
                f"{pg.PG_BIN}/psql -h /var/run/postgresql -p {pg.PORT} -d {MONITOR_DB} "
                f"-v ON_ERROR_STOP=1 {each}"
            )
        )

    def table(self) -> dict[str, list[Any]] | None:
        """The monitor's table of the formation: node → [reported, goal, health, LSN,
        candidate priority, replication quorum]; None when the monitor does not answer."""
        with contextlib.suppress(psycopg.Error, OSError):
            with self._monitor_connect() as conn:
                rows = conn.execute(MONITOR_QUERY, (FORMATION,)).fetchall()
            return {r[0]: [r[1], r[2], r[3], r[4], r[5], r[6]] for r in rows}
        return None

    def states(self) -> dict[str, tuple[str, str]]:
        """node → (reported, goal), as the monitor says ({} when it does not answer)."""
        return {n: (row[0], row[1]) for n, row in (self.table() or {}).items()}

    # a planned switchover (the `switchover` fault)

    def switchover(self) -> dict[str, Any]:
        """As an operator's `pg_autoctl perform switchover`, run on the monitor's node: the
        monitor drains the primary and promotes a standby; it answers once a node reports
        primary again, or gives up."""
        old = self.leader()
        cmd = (
            f"runuser -u postgres -- {self._env()} {AUTOCTL} perform switchover "
            f"--pgdata {MONITOR_DATA} --formation {FORMATION} --wait {SWITCHOVER_WAIT_S}"
        )
        done = self.monitor().exec(cmd, check=False)
        return {"leader": old, "status": done.code, "answer": done.output.strip()[-200:],
                "new_leader": self.leader()}  # fmt: skip

    def unpromotable(self) -> list[str]:
        """The members given candidate priority 0 or no replication quorum."""
        never = overrides(self.options.get("candidate_priority") or "")
        uncounted = overrides(self.options.get("replication_quorum") or "")
        return sorted(
            n.name
            for n in self.members()
            if never.get(n.name) == "0" or uncounted.get(n.name) == "false"
        )

    # what clients see

    def endpoints(self) -> list[Endpoint]:
        """Every member with target_session_attrs=read-write, as `pg_autoctl show uri` gives
        the formation's URI to applications."""
        return reading_endpoints(self.members(), self.options["read_from"])

    # reading the cluster's state

    def poll(self) -> dict[str, Record]:
        """Each member's Postgres with what the monitor says of it, and the monitor's table."""
        members = self.members()
        with ThreadPoolExecutor(len(members) + 1) as pool:
            asked = pool.submit(self.table)
            own = list(pool.map(node_state, members))
            table = asked.result()
        polled: dict[str, Record] = {}
        for node, state in zip(members, own, strict=True):
            row = (table or {}).get(node.name)
            if state is None and row is None:
                continue
            fields = {f: getattr(state, f) for f in state.__struct_fields__} if state else {}
            polled[node.name] = KeeperPoll(
                **fields, reported=row[0] if row else None, goal=row[1] if row else None
            )
        if table is not None:
            polled[COORDINATION] = monitor_record(table, self.timeout)
        return polled

    def leader(self) -> str | None:
        """The node the monitor lets take writes; where it does not answer, the member whose
        Postgres takes writes."""
        table = self.table()
        if table is not None:
            record = monitor_record(table, self.timeout)
            if record.primary is not None:
                return record.primary
        for node in self.members():
            state = node_state(node)
            if state and state.writable:
                return node.name
        return None

    def status(self) -> dict[str, Any]:
        polled = self.poll()
        nodes: dict[str, dict[str, Any]] = {}
        for node in self.members():
            s = polled.get(node.name)
            if not isinstance(s, KeeperPoll):
                nodes[node.name] = {"role": "unknown", "postgres": "not answering"}
                continue
            nodes[node.name] = {
                "reported": s.reported,
                "goal": s.goal,
                "postgres": "read-write" if s.writable else "read-only",
                "timeline": s.timeline,
                "lsn": None if s.lsn is None else lsn_text(s.lsn),
            }
        nodes[self.monitor().name] = {"role": "monitor"}
        monitor = polled.get(COORDINATION)
        return {
            "kind": self.name,
            "leader": monitor.primary if isinstance(monitor, MonitorPoll) else None,
            "partition_timeout": self.timeout,
            "read_from": self.options["read_from"],
            "nodes": nodes,
        }


def monitor_record(table: dict[str, list[Any]], timeout: int) -> MonitorPoll:
    """The monitor's table as a poll record, with the one node whose goal lets it take writes."""
    primaries = [n for n, row in table.items() if row[1] in PRIMARY_STATES]
    nodes = {n: [row[0], row[1], row[2], row[3]] for n, row in table.items()}
    return MonitorPoll(
        nodes=nodes, primary=primaries[0] if len(primaries) == 1 else None, timeout=timeout
    )
