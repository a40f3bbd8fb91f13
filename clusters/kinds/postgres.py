"""Postgres 15 on a node: initdb, configuration, start and stop, through the node interface.

Shared by every cluster kind that runs Postgres, so each kind only says how its nodes relate.
"""

from __future__ import annotations

import re

from clusters.backend import LOG_DIR, Node
from clusters.kinds.on_node import CLOCK_FILE, FAKETIME_LIB, ensure_clock_file, under_faketime

PG_BIN = "/usr/lib/postgresql/15/bin"
PGDATA = "/var/lib/harness/pgdata"
PG_LOG = f"{LOG_DIR}/postgres.log"
PORT = 5432
DBNAME = "harness"
USER = "postgres"

# pg_waldump's line for a two-phase record (Transaction resource manager), or for the checkpoint
# that separates two Postgres instances in a log (XLOG), as Postgres 15 writes them
_RECORD_LINE = re.compile(
    r"tx:\s*(?P<tx>\d+), lsn: (?P<hi>[0-9A-F]+)/(?P<lo>[0-9A-F]+),.*? desc: "
    r"(?:PREPARE gid (?P<gid>.*?): |(?P<what>COMMIT_PREPARED|ABORT_PREPARED) (?P<xid>\d+): "
    r"|(?P<boundary>CHECKPOINT_SHUTDOWN|END_OF_RECOVERY) )"
)
_DECISION = {"COMMIT_PREPARED": "commit", "ABORT_PREPARED": "abort"}
# what pg_waldump is to print for two_phase_records
TWO_PHASE_RMGRS = ("Transaction", "XLOG")

BASE_CONF = """
listen_addresses = '*'
port = 5432
max_connections = 300
fsync = on
synchronous_commit = on
wal_level = replica
shared_buffers = 128MB
log_line_prefix = '%m [%p] %q%u@%d '
log_min_messages = warning
"""


def as_postgres(cmd: str) -> str:
    """A shell command run as the postgres user."""
    return f"runuser -u postgres -- sh -c {quote(cmd)}"


def quote(s: str) -> str:
    return "'" + s.replace("'", "'\"'\"'") + "'"


def init(node: Node, extra_conf: str = "") -> None:
    """Create the data directory (once) with trust auth for the harness's network."""
    make_dirs(node)
    if node.exec(f"test -f {PGDATA}/PG_VERSION", check=False).code == 0:
        return
    node.exec(as_postgres(f"{PG_BIN}/initdb -D {PGDATA} -U {USER} --auth=trust -E UTF8 >/dev/null"))
    node.put_file(
        f"{PGDATA}/conf.d/harness.conf", (BASE_CONF + extra_conf).encode(), owner="postgres"
    )
    node.exec(as_postgres(f"echo \"include_dir = 'conf.d'\" >> {PGDATA}/postgresql.conf"))
    node.exec(as_postgres(f"echo 'host all all 0.0.0.0/0 trust' >> {PGDATA}/pg_hba.conf"))
    node.exec(as_postgres(f"echo 'host replication all 0.0.0.0/0 trust' >> {PGDATA}/pg_hba.conf"))


def faked_clock_bin(node: Node, folder: str) -> None:
    """A folder of links to Debian's Postgres binaries in which `postgres` runs under the
    node's faked clock, for a manager that starts Postgres from a folder of its binaries
    (Patroni's bin_dir, pg_autoctl's --pgctl): a clock fault then moves Postgres's clock and
    not the manager's, whose own timeouts it is not meant to test through libfaketime."""
    node.exec(
        f"mkdir -p {folder} && for f in {PG_BIN}/*; do ln -sf $f {folder}/; done "
        f"&& rm -f {folder}/postgres"
    )
    wrapper = (
        "#!/bin/sh\n"
        f"exec env LD_PRELOAD={FAKETIME_LIB} FAKETIME_TIMESTAMP_FILE={CLOCK_FILE} "
        f'FAKETIME_NO_CACHE=1 {PG_BIN}/postgres "$@"\n'
    )
    node.put_file(f"{folder}/postgres", wrapper.encode(), mode=0o755)


def make_dirs(node: Node) -> None:
    """The folders Postgres's data and log go in, the postgres user's."""
    node.exec(
        f"mkdir -p {LOG_DIR} /var/lib/harness && chown postgres:postgres {LOG_DIR} /var/lib/harness"
    )


def start(node: Node) -> None:
    """Start Postgres under the node's faked clock and wait until it accepts connections.

    Idempotent, and fine after a kill: pg_ctl ignores a postmaster.pid whose process is gone."""
    ensure_clock_file(node)
    if node.exec(as_postgres(f"{PG_BIN}/pg_ctl -D {PGDATA} status"), check=False).code == 0:
        return
    node.exec(start_command())


def start_command() -> str:
    """The shell command, run as root, that starts Postgres and waits until it accepts
    connections (the node's clock file must exist)."""
    pg_ctl = f"{PG_BIN}/pg_ctl -D {PGDATA} -l {PG_LOG} -w -t 60 start"
    return f"runuser -u postgres -- {under_faketime(pg_ctl)} >/dev/null"


def stop(node: Node) -> None:
    node.exec(as_postgres(f"{PG_BIN}/pg_ctl -D {PGDATA} -m fast -w stop >/dev/null"), check=False)


def is_ready(node: Node) -> bool:
    return node.exec(f"{PG_BIN}/pg_isready -q -h 127.0.0.1 -p {PORT}", check=False).code == 0


def ensure_database(node: Node) -> None:
    exists = node.exec(
        f"{PG_BIN}/psql -h 127.0.0.1 -U {USER} -tAc "
        f"\"SELECT 1 FROM pg_database WHERE datname = '{DBNAME}'\"",
    ).output.strip()
    if exists != "1":
        node.exec(f"{PG_BIN}/createdb -h 127.0.0.1 -U {USER} {DBNAME}")


def psql(node: Node, sql: str) -> str:
    """Run one query on the node's own Postgres and return its unaligned output."""
    return node.exec(
        f"{PG_BIN}/psql -h 127.0.0.1 -U {USER} -d {DBNAME} -tAc {quote(sql)}", check=False
    ).output.strip()


def two_phase_records(waldump: str) -> list[list[object]]:
    """The two-phase records in pg_waldump's output (`-r` each of TWO_PHASE_RMGRS), in log
    order: [lsn, "prepare", xid, gid]; [lsn, "commit" or "abort", the prepared xid, None]; and
    [lsn, "boundary", None, None] where one Postgres instance's WAL ends and the next one's
    begins. A Postgres writes a shutdown checkpoint when it stops cleanly, and one at the end
    of its crash recovery when it starts after a crash (an end-of-recovery record after a
    promotion), so a boundary lies between the records of any two instances. Other lines
    (plain commits, other checkpoints, pg_waldump's error at the log's end) are passed over."""
    found: list[list[object]] = []
    for line in waldump.splitlines():
        m = _RECORD_LINE.search(line)
        if m is None:
            continue
        lsn = (int(m["hi"], 16) << 32) | int(m["lo"], 16)
        if m["gid"] is not None:
            found.append([lsn, "prepare", int(m["tx"]), m["gid"]])
        elif m["boundary"] is not None:
            found.append([lsn, "boundary", None, None])
        else:
            found.append([lsn, _DECISION[m["what"]], int(m["xid"]), None])
    return found
