"""How a client of the confirm/rollback mode ends a writing transaction and learns its outcome.

The client sends PREPARE TRANSACTION instead of COMMIT. The transaction is then in the leader's
limbo: durable in WAL, invisible, and decided by the leader alone (systems/walkeeper/limbo.py):
COMMIT PREPARED once a quorum holds it (CONFIRM), ROLLBACK PREPARED when the quorum is not
collected in time (ROLLBACK). The client watches the transaction's status (pg_xact_status), and
once it is decided waits until the quorum holds the decision: the synchronous standby's flush
position (the proxy reports the quorum's) passes the WAL insert position read after the decision.
Only then does it answer, so what it was told is in every later leader's WAL:

- ok: confirmed, and the quorum holds the confirmation;
- fail, "rolled back by the leader …": rolled back, and the quorum holds the rollback: the
  transaction never becomes visible (a "resurrected rollback" if it does);
- fail: any error before PREPARE was sent, or PREPARE refused with a rollback SQLSTATE;
- info: anything else after PREPARE was sent (connection lost, the operation's timeout): the new
  leader may confirm it.
"""

from __future__ import annotations

import time
import uuid

import psycopg
from psycopg import sql

from workloads.base import Definite

POLL = 0.01
ROLLED_BACK = "rolled back by the leader: the quorum was not collected in time"
# positions as numbers of bytes: psycopg reads pg_lsn as text, which does not compare as LSNs
_POSITIONS = (
    "SELECT pg_xact_status(%s::xid8), pg_current_wal_insert_lsn() - '0/0', "
    "(SELECT max(flush_lsn) - '0/0' FROM pg_stat_replication WHERE sync_state = 'sync')"
)


def prepare_and_wait(conn: psycopg.Connection) -> None:
    """PREPARE the open transaction, then return once the leader confirmed it and a quorum holds
    the confirmation; raise Definite once it rolled it back and a quorum holds the rollback."""
    xid = conn.execute("SELECT pg_current_xact_id()::text").fetchone()[0]  # type: ignore[index]
    # Not Postgres's own wait for the synchronous standby: the prepared transaction would stay
    # locked to this session while it waits, and the leader could not roll it back.
    conn.execute("SET LOCAL synchronous_commit = local")
    conn.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(f"h-{uuid.uuid4().hex}")))
    decided: str | None = None
    target = None
    while True:
        status, inserted, quorum = conn.execute(_POSITIONS, (xid,)).fetchone()  # type: ignore[misc]
        conn.rollback()
        if decided is None and status != "in progress":
            decided = status
        elif decided is not None and target is None:
            target = inserted  # read after the decision was seen: at or past its record
        if target is not None and quorum is not None and quorum >= target:
            break
        time.sleep(POLL)
    if decided != "committed":
        raise Definite(ROLLED_BACK)
