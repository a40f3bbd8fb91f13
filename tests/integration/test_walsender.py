"""A safekeeper as a WAL server (seed 001): a real Postgres 15 standby whose primary_conninfo
points at a safekeeper's `--pg-listen` port follows the primary's committed WAL.

One `safekeeper` cluster for the module (n1 Postgres + proxy, n2…n4 safekeepers, each serving
WAL on its `--pg-listen` port). A standby is built on n2 itself from a base backup of n1 taken
without WAL (`-X none`): everything it replays, from the backup's checkpoint on, comes
from the safekeeper, since the safekeeper is its only WAL source (no restore_command).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

import pytest

from clusters.backend import Node, shell_quote
from clusters.kinds import postgres as pg
from clusters.kinds.safekeeper import SK_PG_PORT, SK_PORT, SafekeeperCluster, daemon_status
from tests.integration.conftest import eventually

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]

STANDBY = "/var/lib/harness/standby"
STANDBY_PORT = 5440
STANDBY_LOG = f"{pg.LOG_DIR}/standby.log"
SK_LOG = f"{pg.LOG_DIR}/safekeeper.log"
TABLE = "walsender_rows"
FOLLOW_WITHIN = 30.0  # how soon committed rows must be visible on the standby


def sql(node: Node, query: str, port: int = pg.PORT, dbname: str = pg.DBNAME) -> str:
    cmd = f"{pg.PG_BIN}/psql -h 127.0.0.1 -p {port} -U {pg.USER} -d {dbname} -XtAc "
    return node.exec(cmd + shell_quote(query)).output.strip()


def replication_command(node: Node, command: str) -> str:
    """A replication command sent to the safekeeper's walsender on `node` by psql (libpq)."""
    conninfo = f"host=127.0.0.1 port={SK_PG_PORT} user={pg.USER} replication=true"
    cmd = f"{pg.PG_BIN}/psql {shell_quote(conninfo)} -XtAc {shell_quote(command)}"
    return node.exec(cmd, check=False).output.strip()


def tails(node: Node) -> Callable[[], str]:
    """What to read when the standby does not follow: the safekeeper's and the standby's logs."""

    def why() -> str:
        standby = f"grep -v 'is starting up' {STANDBY_LOG} | tail -n 25"
        out = node.exec(f"tail -n 25 {SK_LOG}; echo ---; {standby}", check=False)
        return "\n" + out.output

    return why


def start_standby(node: Node) -> None:
    """A base backup of n1 without WAL, configured to stream from the local safekeeper."""
    node.exec(
        f"mkdir -p {STANDBY} && chown postgres:postgres {STANDBY} && chmod 700 {STANDBY} && "
        f"touch {STANDBY_LOG} && chown postgres:postgres {STANDBY_LOG}"
    )
    node.exec(
        pg.as_postgres(
            f"{pg.PG_BIN}/pg_basebackup -h n1 -p {pg.PORT} -U {pg.USER} -D {STANDBY} "
            "-X none --checkpoint=fast --no-sync 2>&1"
        )
    )
    conf = f"""
port = {STANDBY_PORT}
listen_addresses = '127.0.0.1'
synchronous_standby_names = ''
hot_standby = on
primary_conninfo = 'host=127.0.0.1 port={SK_PG_PORT} user={pg.USER} application_name=follower'
wal_receiver_status_interval = 1s
shared_buffers = 32MB
"""
    node.put_file(f"{STANDBY}/conf.d/zz-standby.conf", conf.encode(), owner="postgres")
    node.exec(pg.as_postgres(f"touch {STANDBY}/standby.signal"))
    node.exec(
        pg.as_postgres(f"{pg.PG_BIN}/pg_ctl -D {STANDBY} -l {STANDBY_LOG} -W start >/dev/null")
    )


def test_standby_follows_committed_wal_from_a_safekeeper(
    safekeeper_cluster: SafekeeperCluster,
) -> None:
    cluster = safekeeper_cluster
    compute, node = cluster.computes()[0], cluster.safekeepers()[0]
    why = tails(node)
    system_id = sql(compute, "SELECT system_identifier FROM pg_control_system()")

    identified = eventually(
        lambda: replication_command(node, "IDENTIFY_SYSTEM").startswith(system_id + "|1|"),
        "the safekeeper answering IDENTIFY_SYSTEM with n1's system id on its --pg-listen port",
        15,
        lambda: "\n" + replication_command(node, "IDENTIFY_SYSTEM") + why(),
    )
    assert identified
    sql(compute, f"CREATE TABLE IF NOT EXISTS {TABLE} (x bigint PRIMARY KEY, tag text)")
    start_standby(node)
    sender = eventually(
        lambda: sql(
            node,
            "SELECT sender_host || ':' || sender_port FROM pg_stat_wal_receiver "
            "WHERE status = 'streaming'",
            STANDBY_PORT,
        ),
        "the standby streaming from the safekeeper (hot standby up, walreceiver streaming)",
        FOLLOW_WITHIN,
        why,
    )
    assert sender == f"127.0.0.1:{SK_PG_PORT}", "the standby streams from somewhere else"

    tag = secrets.token_hex(4)
    for batch in range(3):  # three commits, each through the quorum
        first = batch * 100 + 1
        sql(
            compute,
            f"INSERT INTO {TABLE} SELECT g, '{tag}' FROM generate_series({first}, {first + 99}) g",
        )
    count = f"SELECT count(*) FROM {TABLE} WHERE tag = '{tag}'"
    assert sql(compute, count) == "300"
    eventually(
        lambda: sql(node, count, STANDBY_PORT) == "300",
        "the standby showing the 300 rows committed on n1",
        FOLLOW_WITHIN,
        why,
    )

    # The standby only ever receives committed WAL: what it holds is at most what the
    # safekeeper knows as committed (read afterwards, and the commit LSN only grows).
    received = sql(node, "SELECT pg_last_wal_receive_lsn() - '0/0'", STANDBY_PORT)
    committed = daemon_status(node, SK_PORT)["commit_lsn"]
    assert 0 < int(received) <= committed
