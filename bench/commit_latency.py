"""Commit latency and throughput through the safekeeper proxy against a native synchronous standby.

Both are measured with the same small write transaction (an autocommit INSERT of one row, so each
statement is one commit that waits for the synchronous standby's flush) from the same client on
this machine, through the same kind of loopback port published by Docker:

- proxy: cluster kind `safekeeper`: n1 runs Postgres 15 with the proxy as its synchronous standby,
  and the proxy acknowledges a flush once a quorum of the safekeepers n2… has fsynced the WAL;
- native: two nodes, n1 a Postgres 15 primary with `synchronous_standby_names` naming n2 and
  `synchronous_commit = on`, n2 a streaming standby made by pg_basebackup from n1.

Latency (p50, p99) comes from a run with `--latency-clients` clients (1: no queueing), throughput
from one with `--throughput-clients`, each `--time` seconds after `--warmup` seconds that are not
counted. Both clusters are up at once and the runs alternate between them, so that load from
elsewhere on the machine falls on both alike. Whatever the benchmark created is taken down at the
end, on an error and on Ctrl-C.

    .venv/bin/python bench/commit_latency.py [--time 20] [--latency-clients 1]
        [--throughput-clients 8] [--warmup 2] [--rounds 1] [--safekeepers 3]
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg

from clusters.backend import Backend, Node
from clusters.kinds import postgres as pg
from clusters.kinds.on_node import wait_until
from clusters.registry import cluster_kind, make_backend

GOAL = 1.5  # the proxy's p50 commit latency may be at most this many times the native one's
STANDBY = "standby"  # the native standby's application_name, and its replication slot
TABLE = "commit_latency"
PAD = "x" * 100

PRIMARY_CONF = """
max_wal_senders = 10
max_replication_slots = 10
wal_sender_timeout = 60s
"""
# Set once n2 streams: before that, every commit (even CREATE DATABASE) would wait for it.
# synchronous_commit = on and fsync = on come from postgres_node.BASE_CONF, on both kinds' n1.
SYNC_CONF = f"synchronous_standby_names = '{STANDBY}'\n"


def standby_conf(primary: str) -> str:
    conninfo = f"host={primary} port={pg.PORT} user={pg.USER} application_name={STANDBY}"
    return f"primary_conninfo = '{conninfo}'\nprimary_slot_name = '{STANDBY}'\nhot_standby = on\n"


def deploy_native(backend: Backend, cluster: str, say: Callable[[str], None]) -> None:
    """n1 a primary whose commits wait for n2's flush; n2 its streaming synchronous standby."""
    say(f"starting 2 nodes on {backend.name}: n1 primary, n2 synchronous standby")
    primary, standby = backend.up(cluster, 2, [pg.PORT])
    say("initialising Postgres 15 on n1")
    pg.init(primary, PRIMARY_CONF)
    pg.start(primary)
    wait_until("Postgres on n1 accepting connections", lambda: pg.is_ready(primary), 60)
    pg.ensure_database(primary)
    pg.psql(primary, f"SELECT pg_create_physical_replication_slot('{STANDBY}', true)")
    say("making n2 with pg_basebackup from n1")
    standby.exec(
        f"mkdir -p {pg.LOG_DIR} /var/lib/harness"
        f" && chown postgres:postgres {pg.LOG_DIR} /var/lib/harness"
    )
    standby.exec(
        pg.as_postgres(
            f"{pg.PG_BIN}/pg_basebackup -h {primary.name} -p {pg.PORT} -U {pg.USER} "
            f"-D {pg.PGDATA} -X stream -c fast"
        )
    )
    standby.put_file(
        f"{pg.PGDATA}/conf.d/standby.conf", standby_conf(primary.name).encode(), owner="postgres"
    )
    standby.exec(pg.as_postgres(f"touch {pg.PGDATA}/standby.signal"))
    pg.start(standby)
    wait_until("n2 streaming from n1", lambda: sync_state(primary) != "", 60)
    say("making n2 n1's synchronous standby")
    primary.put_file(f"{pg.PGDATA}/conf.d/sync.conf", SYNC_CONF.encode(), owner="postgres")
    pg.psql(primary, "SELECT pg_reload_conf()")
    wait_until(
        "n2 streaming as n1's synchronous standby", lambda: sync_state(primary) == "sync", 60
    )


def sync_state(primary: Node) -> str:
    """The native standby's sync_state on n1 ('' while it is not streaming)."""
    sql = f"SELECT sync_state FROM pg_stat_replication WHERE application_name = '{STANDBY}'"
    return pg.psql(primary, sql)


@dataclass
class Run:
    """What timed runs saw: the latency (s) of each commit that completed in them, and errors."""

    seconds: float
    latencies: list[float] = field(default_factory=list)
    errors: int = 0

    def add(self, other: Run) -> None:
        self.seconds += other.seconds
        self.latencies += other.latencies
        self.errors += other.errors

    def quantile(self, q: float) -> float:
        """Nearest-rank quantile, in milliseconds."""
        ordered = sorted(self.latencies)
        if not ordered:
            return math.nan
        return ordered[max(0, math.ceil(q * len(ordered)) - 1)] * 1000

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.seconds if self.seconds else math.nan


def connect(conninfo: dict[str, Any]) -> psycopg.Connection:
    return psycopg.connect(**conninfo, autocommit=True, connect_timeout=10)


def drive(conninfo: dict[str, Any], clients: int, seconds: float, warmup: float) -> Run:
    """`clients` threads insert one row per commit for warmup + seconds; the commits that complete
    in the last `seconds` count."""
    conns = [connect(conninfo) for _ in range(clients)]
    start = time.monotonic() + 0.2  # every client connected and its thread started
    counted, end = start + warmup, start + warmup + seconds
    stop = threading.Event()
    results = [Run(seconds) for _ in range(clients)]

    def client(i: int) -> None:
        conn, run = conns[i], results[i]
        sql = f"INSERT INTO {TABLE} (client, pad) VALUES (%s, %s)"
        time.sleep(max(0.0, start - time.monotonic()))
        while not stop.is_set():
            t0 = time.monotonic()
            if t0 >= end:
                break
            try:
                conn.execute(sql, (i, PAD))
            except psycopg.Error:
                run.errors += 1  # counted whenever it happens, warmup included
                if conn.closed:
                    time.sleep(0.1)
                    try:
                        conn = connect(conninfo)
                    except psycopg.Error:
                        continue
                continue
            t1 = time.monotonic()
            if counted <= t1 < end:
                run.latencies.append(t1 - t0)
        conn.close()

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(0.5)
    finally:
        stop.set()
    total = Run(seconds)
    for r in results:
        total.latencies += r.latencies
        total.errors += r.errors
    return total


@dataclass
class Target:
    label: str
    cluster: str
    conninfo: dict[str, Any] = field(default_factory=dict)
    latency: Run | None = None
    throughput: Run | None = None


def prepare(target: Target, primary: Node) -> None:
    """Find the target's endpoint, check its commits wait for a synchronous standby, make the
    table."""
    sql = "SELECT application_name || ':' || sync_state FROM pg_stat_replication"
    senders = pg.psql(primary, sql).split()
    if not any(s.endswith(":sync") for s in senders):
        raise SystemExit(f"{target.label}: n1 has no synchronous standby: {senders}")
    host, port = primary.endpoint(pg.PORT)
    target.conninfo = {"host": host, "port": port, "dbname": pg.DBNAME, "user": pg.USER}
    with connect(target.conninfo) as conn:
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {TABLE} "
            "(id bigserial PRIMARY KEY, client int, at timestamptz DEFAULT now(), pad text)"
        )


def interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time", type=float, default=20, help="seconds counted per run")
    parser.add_argument("--warmup", type=float, default=2, help="seconds not counted, first")
    parser.add_argument("--latency-clients", type=int, default=1)
    parser.add_argument("--throughput-clients", type=int, default=8)
    parser.add_argument(
        "--rounds", type=int, default=1, help="alternate the runs this many times, pooling them"
    )
    parser.add_argument("--safekeepers", type=int, default=None, help="default: the kind's (3)")
    args = parser.parse_args()
    if min(args.latency_clients, args.throughput_clients, args.rounds) < 1 or args.time <= 0:
        parser.error("--time must be positive; clients and --rounds at least 1")
    if args.warmup < 0:
        parser.error("--warmup cannot be negative")

    # Ctrl-C, and a plain `kill`, take the clusters down, even when started in the background
    # (where a shell leaves SIGINT ignored).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, interrupted)
    backend = make_backend("docker")
    stamp = f"{time.strftime('%Y%m%dt%H%M%S')}-{os.getpid()}"
    proxy = Target("safekeeper proxy", f"bench-commit-sk-{stamp}")
    native = Target("native sync standby", f"bench-commit-native-{stamp}")
    created: list[str] = []

    def say(cluster: str) -> Callable[[str], None]:
        return lambda m: print(f"[{cluster}] {m}", file=sys.stderr, flush=True)

    def claim(cluster: str) -> None:
        # Only a name no cluster has yet is ours to take down.
        if backend.nodes(cluster):
            raise SystemExit(f"a cluster named {cluster} already exists: not touching it")
        created.append(cluster)

    try:
        claim(proxy.cluster)
        options: dict[str, Any] = {"computes": 1}  # a standby compute costs a primary nothing
        if args.safekeepers is not None:
            options["safekeepers"] = args.safekeepers
        kind = cluster_kind("safekeeper")(backend, proxy.cluster, options)
        kind.deploy(say(proxy.cluster))
        prepare(proxy, kind.computes()[0])
        claim(native.cluster)
        deploy_native(backend, native.cluster, say(native.cluster))
        prepare(native, backend.nodes(native.cluster)[0])

        for r in range(args.rounds):
            order = (native, proxy) if r % 2 == 0 else (proxy, native)
            for phase, clients in (
                ("latency", args.latency_clients),
                ("throughput", args.throughput_clients),
            ):
                for target in order:
                    print(
                        f"round {r + 1}/{args.rounds}: {target.label}, {clients} client(s), "
                        f"{args.warmup:g}+{args.time:g} s",
                        file=sys.stderr,
                        flush=True,
                    )
                    run = drive(target.conninfo, clients, args.time, args.warmup)
                    if getattr(target, phase) is None:
                        setattr(target, phase, run)
                    else:
                        getattr(target, phase).add(run)
    finally:
        for cluster in reversed(created):
            print(f"[{cluster}] taking it down", file=sys.stderr, flush=True)
            try:
                backend.down(cluster)
            except Exception as e:  # still try the other one
                print(f"[{cluster}] could not take it down: {e}", file=sys.stderr, flush=True)

    report(args, proxy, native)


def report(args: argparse.Namespace, proxy: Target, native: Target) -> None:
    lc, tc = args.latency_clients, args.throughput_clients
    print(
        f"commit latency: autocommit INSERT of one row, {args.rounds} x {args.time:g} s per run, "
        f"Docker on one machine ({os.cpu_count()} cores)"
    )
    print(
        f"  {'':22}{'p50 ms':>9}{'p99 ms':>9}{f'tx/s @{tc}':>11}"
        f"{f'p50 ms @{tc}':>12}{f'p99 ms @{tc}':>12}{'errors':>8}"
    )
    rows = []
    for t in (proxy, native):
        lat, thr = t.latency, t.throughput
        assert lat is not None and thr is not None
        row = (
            lat.quantile(0.5),
            lat.quantile(0.99),
            thr.rate,
            thr.quantile(0.5),
            thr.quantile(0.99),
        )
        rows.append(row)
        print(
            f"  {t.label:22}{row[0]:9.2f}{row[1]:9.2f}{row[2]:11.1f}{row[3]:12.2f}{row[4]:12.2f}"
            f"{lat.errors + thr.errors:8d}"
        )
    ratios = [p / n if n else math.nan for p, n in zip(rows[0], rows[1], strict=True)]
    print(
        f"  {'ratio proxy/native':22}{ratios[0]:9.2f}{ratios[1]:9.2f}{ratios[2]:11.2f}"
        f"{ratios[3]:12.2f}{ratios[4]:12.2f}"
    )
    print(f"  (p50 and p99 with {lc} client(s); tx/s and the @{tc} latencies with {tc} clients)")
    holds = ratios[0] <= GOAL
    print(
        f"goal: p50 commit latency no worse than {GOAL:g}x the native synchronous standby's: "
        f"{'holds' if holds else 'does NOT hold'} ({ratios[0]:.2f}x)"
    )


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
