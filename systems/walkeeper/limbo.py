"""The confirm/rollback mode (seed 002) on Postgres: the leader's limbo of prepared transactions.

Clients end a writing transaction with PREPARE TRANSACTION instead of COMMIT: the transaction is
then in WAL, durable and invisible, waiting for the leader's decision, as a Tarantool synchronous
transaction waits in the limbo. The leader's compute agent decides, in WAL order:

- CONFIRM (COMMIT PREPARED) once the quorum holds the PREPARE record: the quorum position that
  the proxy reports to Postgres (pg_stat_replication) has reached Postgres's flush position when
  the leader first saw the transaction (Postgres flushes the record before it lists it).
- ROLLBACK (ROLLBACK PREPARED) of every transaction still waiting once the oldest has waited
  `timeout` seconds without a quorum.

A new leader inherits the old one's waiting transactions with the WAL (Postgres restores prepared
transactions at the end of recovery). It confirms each once the quorum holds it, never rolls one
back, and keeps Postgres read-only (`default_transaction_read_only` in GATE_FILE, which clients
connecting with target_session_attrs=read-write skip) until none is left: only then does it take
writes of its own. A decision is written with synchronous_commit = local: the agent never blocks
on the quorum; a client learns an outcome only once the quorum holds the decision (see
workloads/confirm_rollback.py), so an outcome it was told is in every later leader's WAL.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pwd
import threading
import time
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("limbo")

MODES = ("safekeeper", "confirm-rollback")
GATE_FILE = "conf.d/gate.conf"  # Postgres reads every conf.d/*.conf (clusters/kinds/postgres.py)
POLL = 0.02


@dataclass
class Waiting:
    database: str
    bound: int  # the WAL flush position when first seen: at or after the PREPARE record's end
    since: float
    inherited: bool


class Limbo:
    """The leader's queue of prepared transactions, decided by `step()` until `stop` is set."""

    def __init__(self, conninfo: str, pgdata: str, slot: str, timeout: float) -> None:
        self.conninfo, self.pgdata, self.slot, self.timeout = conninfo, pgdata, slot, timeout
        self.waiting: dict[str, Waiting] = {}
        self.conns: dict[str, Any] = {}  # a decision is taken in the transaction's database
        self.first = True
        self.open = False
        self.stop = threading.Event()
        self.confirmed = self.rolled_back = 0

    def close_gate(self) -> None:
        """Read-only until the inherited transactions are confirmed: before Postgres starts."""
        self._write_gate(True)

    def _write_gate(self, read_only: bool) -> None:
        path = os.path.join(self.pgdata, GATE_FILE)
        with open(path, "w") as f:
            f.write(f"default_transaction_read_only = {'on' if read_only else 'off'}\n")
        user = pwd.getpwnam("postgres")
        os.chown(path, user.pw_uid, user.pw_gid)

    def conn(self, database: str) -> Any:
        import psycopg  # only computes need it

        conn = self.conns.get(database)
        if conn is None or conn.closed:
            conn = psycopg.connect(self.conninfo, dbname=database, autocommit=True)
            conn.execute("SET synchronous_commit = local")  # never block on the quorum
            conn.execute("SET default_transaction_read_only = off")  # through the gate
            self.conns[database] = conn
        return conn

    def run(self) -> None:
        try:
            while not self.stop.wait(POLL):
                try:
                    if self.first:  # a Postgres that was already running reads the gate
                        self.conn("postgres").execute("SELECT pg_reload_conf()")
                    self.step()
                except Exception as e:  # Postgres restarting: again while the session lasts
                    log.info("limbo: %s: %s", type(e).__name__, e)
                    self._close()
                    self.stop.wait(0.5)
        finally:
            self._close()

    def _close(self) -> None:
        for conn in self.conns.values():
            with contextlib.suppress(Exception):
                conn.close()
        self.conns.clear()

    def step(self) -> None:
        conn = self.conn("postgres")
        rows = conn.execute(
            "SELECT p.gid, p.database, pg_current_wal_flush_lsn() - '0/0'::pg_lsn, "
            "(SELECT flush_lsn - '0/0'::pg_lsn FROM pg_stat_replication "
            " WHERE application_name = %s ORDER BY flush_lsn DESC LIMIT 1) "
            "FROM (SELECT NULL AS gid, NULL AS database UNION ALL "
            "      SELECT gid, database FROM pg_prepared_xacts) p",
            (self.slot,),
        ).fetchall()
        flushed, quorum = int(rows[0][2]), rows[0][3]
        present = {gid: database for gid, database, _, _ in rows if gid is not None}
        now = time.monotonic()
        for gid in present.keys() - self.waiting.keys():
            self.waiting[gid] = Waiting(present[gid], flushed, now, self.first)
        for gid in self.waiting.keys() - present.keys():
            del self.waiting[gid]
        self.first = False
        confirm, roll_back = decide(
            self.waiting, None if quorum is None else int(quorum), now, self.timeout
        )
        inherited = sum(self.waiting[gid].inherited for gid in confirm)
        for gid in confirm:
            self.confirmed += self._finish(gid, "COMMIT")
        if inherited:
            log.info("confirmed %d transaction(s) of an earlier leader", inherited)
        if roll_back:
            log.warning(
                "no quorum for %d transaction(s) within %g s: rolling back",
                len(roll_back),
                self.timeout,
            )
        for gid in roll_back:
            self.rolled_back += self._finish(gid, "ROLLBACK")
        if not self.open and not any(w.inherited for w in self.waiting.values()):
            self._write_gate(False)
            conn.execute("SELECT pg_reload_conf()")
            self.open = True
            log.info("no transaction of an earlier leader waits: taking writes")

    def _finish(self, gid: str, decision: str) -> bool:
        """Write the decision; False if Postgres refused it (e.g. the transaction is still being
        prepared), which a later step retries."""
        import psycopg
        from psycopg import sql

        try:
            self.conn(self.waiting[gid].database).execute(
                sql.SQL(decision + " PREPARED {}").format(sql.Literal(gid))
            )
        except psycopg.errors.DatabaseError as e:
            log.info("%s PREPARED %s: %s", decision, gid, e)
            return False
        del self.waiting[gid]
        return True

    def report(self) -> dict[str, Any]:
        return {
            "limbo": len(self.waiting),
            "confirmed": self.confirmed,
            "rolled_back": self.rolled_back,
            "taking_writes": self.open,
        }


def decide(
    waiting: dict[str, Waiting], quorum: int | None, now: float, timeout: float
) -> tuple[list[str], list[str]]:
    """What to confirm and what to roll back, in WAL order: every transaction the quorum holds;
    then, once the oldest of this leader's own left has waited `timeout`, all of those. An
    inherited transaction is only ever confirmed (seed 002: the new leader confirms them)."""
    order = sorted(waiting, key=lambda g: waiting[g].bound)
    held = [g for g in order if quorum is not None and waiting[g].bound <= quorum]
    own = [g for g in order if g not in held and not waiting[g].inherited]
    late = bool(own) and now - waiting[own[0]].since > timeout
    return held, own if late else []
