"""Why every SERIALIZABLE read failed on a synchronous primary left without its standby
(FINDINGS.md, repmgr finding 3: the `consensus-sync` and `disconnect-command-sync` rows'
`no-final-read`, each read refused with `40001 … Canceled on conflict out to pivot …, during
read`).

A serializable transaction passes Postgres's pre-commit check for dangerous structures and is
flagged prepared (no longer abortable) before its commit record waits for the synchronous
standby; until the standby answers it is still in progress to every snapshot. One Postgres 15
(the `single` kind) with `synchronous_standby_names` naming a standby that never connects, and
two writers that overlap the way the workloads' transactions do: T2 updates row 2; W1 reads row
2 (missing T2's update: an rw edge W1 → T2) and updates row 1; both commit, and both wait. A
reader of row 1 then misses W1's update (R → W1), which makes W1 the pivot of R → W1 → T2 with T2
prepared first: W1 cannot be aborted any more, so the reader is, at every retry, until the
writers finish. Printed: each reader's isolation and outcome while they wait, then the same
once the standby requirement is lifted and the waits end (the control).

    .venv/bin/python bench/ssi_sync_wait.py [--retries 3]
"""

from __future__ import annotations

import argparse
import threading
import time

import psycopg

from clusters.docker_backend import DockerBackend
from clusters.kinds import postgres as pg
from clusters.kinds.single import SingleCluster

READERS = (
    ("SERIALIZABLE READ ONLY", "BEGIN ISOLATION LEVEL SERIALIZABLE READ ONLY"),
    ("SERIALIZABLE", "BEGIN ISOLATION LEVEL SERIALIZABLE"),
    ("REPEATABLE READ", "BEGIN ISOLATION LEVEL REPEATABLE READ"),
)


def say(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


def read(dsn: str, begin: str) -> str:
    """One reader's outcome: the rows it read, or its error's SQLSTATE and detail."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        try:
            conn.execute(begin)
            rows = conn.execute("SELECT id, bal FROM acct ORDER BY id").fetchall()
            conn.execute("COMMIT")
            return f"read {rows}"
        except psycopg.Error as e:
            detail = e.diag.message_detail or ""
            return f"refused: {e.sqlstate} {e.diag.message_primary}; {detail}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--retries", type=int, default=3, help="reads of each isolation")
    args = parser.parse_args()
    cluster = SingleCluster(DockerBackend(), f"ssi{int(time.time()) % 10000}", {})
    try:
        cluster.deploy(say)
        (node,) = cluster.nodes
        (end,) = cluster.endpoints()
        dsn = f"host={end.host} port={end.port} dbname={end.dbname} user={end.user}"
        pg.psql(node, "CREATE TABLE acct (id int PRIMARY KEY, bal int)")
        pg.psql(node, "INSERT INTO acct VALUES (1, 0), (2, 0)")
        pg.psql(node, "ALTER SYSTEM SET synchronous_standby_names = 'nobody'")
        pg.psql(node, "SELECT pg_reload_conf()")
        say("synchronous_standby_names = 'nobody': no standby will ever answer")
        t2 = psycopg.connect(dsn, autocommit=True)
        w1 = psycopg.connect(dsn, autocommit=True)
        t2.execute("BEGIN ISOLATION LEVEL SERIALIZABLE")
        t2.execute("UPDATE acct SET bal = bal + 1 WHERE id = 2")
        w1.execute("BEGIN ISOLATION LEVEL SERIALIZABLE")
        w1.execute("SELECT bal FROM acct WHERE id = 2")  # misses T2's update: W1 -rw-> T2
        w1.execute("UPDATE acct SET bal = bal + 1 WHERE id = 1")
        waits = []
        for name, conn in (("T2", t2), ("W1", w1)):
            waits.append(threading.Thread(target=conn.execute, args=("COMMIT",), daemon=True))
            waits[-1].start()
            time.sleep(1)
            say(f"{name} sent COMMIT")
        waiting = pg.psql(
            node, "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'"
        )
        say(f"backends waiting for the synchronous standby: {waiting}")
        for label, begin in READERS:
            for attempt in range(1, args.retries + 1):
                say(f"while they wait, {label} read {attempt}: {read(dsn, begin)}")
        pg.psql(node, "ALTER SYSTEM RESET synchronous_standby_names")
        pg.psql(node, "SELECT pg_reload_conf()")
        for wait in waits:
            wait.join(30)
        say(f"the requirement lifted: the commits returned: {not any(w.is_alive() for w in waits)}")
        for label, begin in READERS:
            say(f"after, {label}: {read(dsn, begin)}")
        t2.close()
        w1.close()
    finally:
        cluster.teardown()


if __name__ == "__main__":
    main()
