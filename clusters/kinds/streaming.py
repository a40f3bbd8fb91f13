"""Cluster kind `streaming`: plain Postgres 15 streaming replication, as most users run it. n1
starts as the primary; `--replicas N` hot standbys n2…n(N+1) are base backups of it that stream
its WAL and serve reads. `--replication` sets `synchronous_standby_names`: async (Postgres's
default, none), sync (`FIRST 1 (…)`) or quorum (`ANY 1 (…)`). Every node lists the others, so
that a promoted standby waits for its own standbys as the first primary did.

Nothing here fails over by itself: a failover is what an operator's script does, and that is a
fault of the nemesis. The harness sees the cluster as an operator does, through each node's
Postgres: whether it is in recovery, its timeline, its WAL positions, whom it streams from.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg

from checkers.cluster_state import DeposedAcknowledged, QuietElections, Timelines
from checkers.moments import LeaderChanged, StandbyBehind
from clusters.backend import Node
from clusters.kinds import postgres as pg
from clusters.kinds.base import ClusterKind, KindOption, OperatorFailover, Process
from clusters.kinds.links import Link
from clusters.kinds.on_node import failover_endpoint, wait_until
from core.endpoint import Endpoint
from core.errors import InfraError
from core.polls import Record, StreamingPoll, lsn_text

DEFAULT_REPLICAS = 2
PROMOTE_WAIT_S = 30  # how long pg_promote may take before the operator gives up
REPLICATIONS = ("async", "sync", "quorum")
READ_FROM = ("primary", "replicas", "any")
SYNCHRONOUS_COMMIT = ("on", "remote_apply", "remote_write", "local", "off")
UPSTREAM_CONF = f"{pg.PGDATA}/conf.d/upstream.conf"  # a standby's primary_conninfo
REPLICATION_CONF = f"{pg.PGDATA}/conf.d/replication.conf"  # whom a commit waits for
# the link a connection fault may act on besides the clients': each standby's stream from its
# primary (the walreceiver's connection)
TO_UPSTREAM = Link("upstream", "each standby's stream from its primary")
STREAMING_CONF = """
max_wal_senders = 16
hot_standby = on
# A standby cut off for a while streams again from the primary's kept segments (no slot, so a
# standby that is gone for good holds no WAL back), and pg_rewind needs the hint bits logged.
wal_keep_size = 512MB
wal_log_hints = on
"""
# What a node says of itself; each branch runs only where it can (pg_current_wal_lsn fails in
# recovery). A standby's timeline is its WAL receiver's, or else its last restartpoint's.
POLL_QUERY = """
SELECT pg_is_in_recovery(),
       current_setting('transaction_read_only'),
       CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() - '0/0'
            ELSE pg_current_wal_lsn() - '0/0' END,
       CASE WHEN pg_is_in_recovery()
            THEN coalesce((SELECT received_tli FROM pg_stat_wal_receiver),
                          (SELECT timeline_id FROM pg_control_checkpoint()))
            ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int END,
       (SELECT flushed_lsn - '0/0' FROM pg_stat_wal_receiver),
       (SELECT sender_host FROM pg_stat_wal_receiver)
"""


def standby_names(replication: str, names: list[str]) -> str:
    """`synchronous_standby_names` for a replication mode over the cluster's nodes."""
    if replication == "async":
        return ""
    method = "FIRST" if replication == "sync" else "ANY"
    return f"{method} 1 ({', '.join(names)})"


def upstream_conf(host: str, port: int, me: str) -> str:
    """A standby's connection to its primary at host:port, named so that
    synchronous_standby_names finds it."""
    conninfo = f"host={host} port={port} user={pg.USER} application_name={me}"
    return f"primary_conninfo = '{conninfo}'\n"


READ_FROM_OPTION = KindOption(
    "read_from",
    str,
    "Where workers run their read-only operations: primary (default), replicas (each worker is "
    "bound to a standby) or any (to any node). Reads on standbys are held to what a standby "
    "promises: snapshot isolation without real-time order.",
    default=READ_FROM[0],
    choices=READ_FROM,
)


class StandbyReads:
    """What a kind of Postgres primaries and hot standbys that takes `--read-from` declares:
    reads on standbys refuse serializable and keep no real-time order. Mixed in before
    ClusterKind."""

    @classmethod
    def isolation_refused(cls, options: Mapping[str, Any], isolation: str) -> str | None:
        if isolation == "serializable" and options["read_from"] != "primary":
            return (
                f"--read-from {options['read_from']} sends reads to hot standbys, which cannot "
                "run serializable transactions: use --isolation repeatable-read"
            )
        return None

    @classmethod
    def realtime_order_of(cls, options: Mapping[str, Any]) -> bool:
        """One primary serves every write; reads keep real-time order only when it serves
        them too (a standby replays a commit some time after COMMIT returned)."""
        return options["read_from"] == "primary"


def reading_endpoints(nodes: list[Node], read_from: str) -> list[Endpoint]:
    """Writes go to whichever node takes them, as an application's connection string with
    every host and target_session_attrs=read-write would; with --read-from replicas (every node
    but the first, the one that begins as the primary) or any, each endpoint also names one
    node for reads, and workers are spread over them."""
    writes = failover_endpoint(nodes, pg.PORT, pg.DBNAME, pg.USER)
    if read_from == "primary":
        return [writes]
    readers = nodes[1:] if read_from == "replicas" else nodes
    return [dataclasses.replace(writes, reads=own_endpoint(n)) for n in readers]


def node_state(node: Node) -> StreamingPoll | None:
    """What the node's Postgres says of itself; None when it does not answer."""
    host, port = node.endpoint(pg.PORT)
    with contextlib.suppress(Exception):
        with psycopg.connect(
            host=host, port=port, user=pg.USER, dbname="postgres", connect_timeout=2,
            options="-c statement_timeout=2000",
        ) as conn:  # fmt: skip
            row = conn.execute(POLL_QUERY).fetchone()
        return None if row is None else StreamingPoll(**said_of_itself(row))
    return None


def said_of_itself(row: tuple[Any, ...]) -> dict[str, Any]:
    """A StreamingPoll's fields from POLL_QUERY's row (kinds that say more extend them)."""
    recovery, read_only, lsn, timeline, received, upstream = row
    return {
        "standby": bool(recovery),
        "writable": not recovery and read_only == "off",
        "timeline": int(timeline) if timeline is not None else None,
        "lsn": int(lsn) if lsn is not None else None,
        "received": int(received) if received is not None else None,
        "upstream": upstream,
    }


def replication_confs(names: list[str], options: Mapping[str, Any]) -> dict[str, str]:
    """Each node's replication.conf: whom a commit waits for, and on the last standby (the
    last node) the replay held back by `apply_delay` ms."""
    conf = (
        f"synchronous_standby_names = '{standby_names(options['replication'], names)}'\n"
        f"synchronous_commit = {options['synchronous_commit']}\n"
    )
    delay = options.get("apply_delay") or 0
    held = f"recovery_min_apply_delay = '{delay:g}ms'\n" if delay else ""
    return {name: conf + (held if name == names[-1] and len(names) > 1 else "") for name in names}


class StreamingCluster(StandbyReads, ClusterKind, OperatorFailover):
    name = "streaming"
    about = "plain Postgres streaming replication: a primary and hot standbys"
    cli_options = (
        KindOption(
            "replicas",
            int,
            f"Number of hot standbys (default {DEFAULT_REPLICAS}), base backups of the primary "
            "that stream its WAL and serve reads.",
            default=DEFAULT_REPLICAS,
            least=1,
        ),
        KindOption(
            "replication",
            str,
            "async (default, Postgres's own: a COMMIT returns once the primary has it), sync "
            "(synchronous_standby_names FIRST 1 (…): it waits for the first standby listed that "
            "is connected) or quorum (ANY 1 (…): for any one standby).",
            default=REPLICATIONS[0],
            choices=REPLICATIONS,
        ),
        KindOption(
            "synchronous_commit",
            str,
            "synchronous_commit on every node (default on, Postgres's: with sync or quorum a "
            "COMMIT waits until a standby flushed it; remote_apply until it replayed it).",
            default=SYNCHRONOUS_COMMIT[0],
            choices=SYNCHRONOUS_COMMIT,
        ),
        READ_FROM_OPTION,
        KindOption(
            "apply_delay",
            float,
            "Milliseconds the last standby holds back replaying what it received "
            "(recovery_min_apply_delay; default 0): its reads see an older state, a control "
            "for checkers that must not take a stale snapshot for an anomaly.",
            default=0.0,
            least=0,
        ),
    )
    collected = (pg.LOG_DIR, f"{pg.PGDATA}/conf.d")
    poll_records = (StreamingPoll,)
    state_rules = (DeposedAcknowledged, Timelines, QuietElections)
    moments = (LeaderChanged, StandbyBehind)
    links = (TO_UPSTREAM,)

    @classmethod
    def nodes_needed(cls, options: Mapping[str, Any]) -> int:
        return 1 + int(options["replicas"])

    # deploying

    def deploy(self, say: Callable[[str], None]) -> None:
        """The primary, then each standby from a base backup of it, then the replication mode
        on every node: set earlier, the primary's own setup (its database) would wait for
        standbys that do not exist yet."""
        replicas = self.options["replicas"]
        replication = self.options["replication"]
        self.bring_up(
            say,
            [pg.PORT],
            f"n1 primary, {', '.join(f'n{i}' for i in range(2, replicas + 2))} hot standbys "
            f"({replication})",
        )
        primary, *standbys = self.nodes
        say("initialising the primary on n1")
        pg.init(primary, STREAMING_CONF)
        pg.start(primary)
        wait_until("Postgres on n1 accepting connections", lambda: pg.is_ready(primary), 60)
        pg.ensure_database(primary)
        for node in standbys:
            say(f"base backup of n1 onto {node.name}")
            self.make_standby(node, primary.name)
            pg.start(node)
        wait_until(
            f"{replicas} standbys streaming from n1",
            lambda: self.streaming_from(primary) == replicas,
            120,
        )
        confs = replication_confs([n.name for n in self.nodes], self.options)
        for node in self.nodes:
            node.put_file(REPLICATION_CONF, confs[node.name].encode(), owner="postgres")
            pg.psql(node, "SELECT pg_reload_conf()")

    def upstream(self, node: Node, primary: str) -> bytes:
        """The standby's upstream.conf: streaming from `primary` (through a proxy of the
        upstream link, in a run that puts them in place)."""
        return upstream_conf(*self.dial(node, TO_UPSTREAM, primary, pg.PORT), node.name).encode()

    def make_standby(self, node: Node, primary: str) -> None:
        """A fresh base backup of `primary` on `node`, set to stream from it."""
        pg.make_dirs(node)
        node.exec(f"rm -rf {pg.PGDATA}")
        node.exec(
            pg.as_postgres(
                f"{pg.PG_BIN}/pg_basebackup -h {primary} -p {pg.PORT} -U {pg.USER} "
                f"-D {pg.PGDATA} -X stream -c fast"
            )
        )
        node.put_file(UPSTREAM_CONF, self.upstream(node, primary), owner="postgres")
        node.exec(pg.as_postgres(f"touch {pg.PGDATA}/standby.signal"))

    def streaming_from(self, node: Node) -> int:
        """How many standbys stream from `node`'s Postgres."""
        count = pg.psql(node, "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'")
        return int(count) if count.isdigit() else 0

    def start_postgres(self, node: Node) -> None:
        pg.start(node)

    runs = (Process("postgres", f"{pg.PG_BIN}/postgres", start_postgres),)

    # an operator's failover (the `promote` fault)

    def fence(self, node: Node) -> str:
        node.exec(
            pg.as_postgres(f"{pg.PG_BIN}/pg_ctl -D {pg.PGDATA} -m immediate stop"), check=False
        )
        return "pg_ctl stop -m immediate"

    def promote_most_advanced(self, deposed: str) -> dict[str, Any]:
        """As an operator's script: ask each standby how far it received the primary's WAL
        (`pg_last_wal_receive_lsn`, or its replay position if it never streamed), promote the
        one furthest ahead (the lowest name of equals), then point the others at it."""
        standbys = [n for n in self.nodes if n.name != deposed]
        with ThreadPoolExecutor(len(standbys)) as pool:
            positions = pool.map(received_lsn, standbys)
            received = dict(zip([n.name for n in standbys], positions, strict=True))
        answered = {n: lsn for n, lsn in received.items() if lsn is not None}
        done: dict[str, Any] = {"received": answered, "promoted": None}
        if not answered:
            return done | {"why": "no standby answered"}
        best = max(sorted(answered), key=lambda n: answered[n])
        chosen = next(n for n in standbys if n.name == best)
        ask(chosen, f"SELECT pg_promote(true, {PROMOTE_WAIT_S})", PROMOTE_WAIT_S + 10)
        chosen.exec(f"rm -f {UPSTREAM_CONF}")
        # its control file names the new timeline at once, for a pg_rewind from it
        ask(chosen, "CHECKPOINT", 60)
        followers = []
        for node in standbys:
            if node is not chosen and answered.get(node.name) is not None:
                self.follow(node, best)
                followers.append(node.name)
        return done | {"promoted": best, "following": followers}

    def follow(self, node: Node, primary: str) -> None:
        """Point a standby at another primary: a reload is enough (Postgres 13 and later), and
        recovery_target_timeline's default, latest, follows the new timeline."""
        node.put_file(UPSTREAM_CONF, self.upstream(node, primary), owner="postgres")
        ask(node, "SELECT pg_reload_conf()")

    def rejoin(self, node: Node) -> dict[str, Any]:
        """pg_rewind from the primary (its WAL from the fork on is discarded: whatever it
        acknowledged after the promotion is gone), or a new base backup when rewind refuses."""
        primary = next(
            (n for n in self.nodes if n is not node and (s := node_state(n)) and s.writable),
            None,
        )
        if primary is None:
            pg.start(node)
            return {"rejoined": None, "why": "no other node takes writes: restarted as it was"}
        self.fence(node)
        source = f"host={primary.name} port={pg.PORT} user={pg.USER} dbname=postgres"
        rewind = node.exec(
            pg.as_postgres(
                f"{pg.PG_BIN}/pg_rewind -D {pg.PGDATA} --source-server={pg.quote(source)}"
            ),
            check=False,
        )
        if rewind.code == 0:
            node.put_file(UPSTREAM_CONF, self.upstream(node, primary.name), owner="postgres")
            node.exec(pg.as_postgres(f"touch {pg.PGDATA}/standby.signal"))
            how = "pg_rewind"
        else:
            self.make_standby(node, primary.name)
            said = (rewind.output.strip().splitlines() or ["no output"])[-1][:200]
            how = f"base backup (pg_rewind: {said})"
        pg.start(node)
        return {"rejoined": node.name, "following": primary.name, "how": how}

    # what clients see

    def endpoints(self) -> list[Endpoint]:
        return reading_endpoints(self.nodes, self.options["read_from"])

    # reading the cluster's state

    def poll(self) -> dict[str, Record]:
        nodes = self.nodes
        with ThreadPoolExecutor(len(nodes)) as pool:
            states = list(pool.map(node_state, nodes))
        return {n.name: s for n, s in zip(nodes, states, strict=True) if s is not None}

    def leader(self) -> str | None:
        """The node that takes writes (the first, should there be two)."""
        return next((n for n, s in sorted(self.poll().items()) if s.leads()), None)

    def status(self) -> dict[str, Any]:
        polled = self.poll()
        nodes: dict[str, dict[str, Any]] = {}
        for node in self.nodes:
            s = polled.get(node.name)
            if not isinstance(s, StreamingPoll):
                nodes[node.name] = {"role": "unknown", "postgres": "not answering"}
                continue
            nodes[node.name] = {
                "role": "standby" if s.standby else "primary",
                "postgres": "read-write" if s.writable else "read-only",
                "timeline": s.timeline,
                "lsn": None if s.lsn is None else lsn_text(s.lsn),
                "received": None if s.received is None else lsn_text(s.received),
                "upstream": s.upstream,
            }
        leader = next((n for n, s in sorted(polled.items()) if s.leads()), None)
        return {
            "kind": self.name,
            "leader": leader,
            "replication": self.options["replication"],
            "read_from": self.options["read_from"],
            "nodes": nodes,
        }


def own_endpoint(node: Node) -> Endpoint:
    """The node's Postgres alone, for a client's reads."""
    host, port = node.endpoint(pg.PORT)
    return Endpoint(
        node.name, host, port, pg.DBNAME, pg.USER, nodes=((f"{host}:{port}", node.name),)
    )


def ask(node: Node, sql: str, timeout: float = 5.0) -> Any:
    """One statement on the node's Postgres from the control machine, bounded in time (a
    paused server must not hold the nemesis); its first value."""
    host, port = node.endpoint(pg.PORT)
    try:
        with psycopg.connect(
            host=host, port=port, user=pg.USER, dbname="postgres", autocommit=True,
            connect_timeout=max(1, int(timeout)),
            options=f"-c statement_timeout={int(timeout * 1000)}",
        ) as conn:  # fmt: skip
            cursor = conn.execute(sql)
            row = cursor.fetchone() if cursor.description else None
    except psycopg.Error as e:
        raise InfraError(f"{node.name}: {sql}: {e}") from e
    return row[0] if row else None


def received_lsn(node: Node) -> int | None:
    """How far a standby received the primary's WAL; None if it does not answer or is no
    standby."""
    with contextlib.suppress(InfraError):
        lsn = ask(
            node,
            "SELECT CASE WHEN pg_is_in_recovery() THEN coalesce(pg_last_wal_receive_lsn(), "
            "pg_last_wal_replay_lsn()) - '0/0' END",
        )
        return int(lsn) if lsn is not None else None
    return None
