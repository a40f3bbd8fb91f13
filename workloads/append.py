"""List-append (Elle): transactions of appends and reads over a small, rotating key space.

Each key holds a list; an append adds a value unique to that key, a read returns the whole list in
append order. Keys retire after a number of appends so lists stay short and version orders stay
easy to infer.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

import psycopg

from checkers import catalog
from workloads.base import Workload

MODEL_FOR_ISOLATION = {  # what a run's isolation level promises, in Elle's terms
    "serializable": "serializable",
    "repeatable-read": "snapshot-isolation",  # Postgres's repeatable read is snapshot isolation
    "read-committed": "read-committed",
}
# ... and on a cluster with one primary (ClusterKind.realtime_order), with real-time order too
REALTIME_MODEL_FOR_ISOLATION = {
    "serializable": "strict-serializable",
    "repeatable-read": "strong-snapshot-isolation",
    "read-committed": "read-committed",
}


class Append(Workload):
    name = "append"
    checkers = (catalog.APPEND, catalog.SPLIT_BRAIN)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._next_key = itertools.count()
        self._active: list[int] = [next(self._next_key) for _ in range(self.options.key_count)]
        self._writes: dict[int, int] = {}

    def setup(self, conn: psycopg.Connection) -> None:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS append_lists (k bigint PRIMARY KEY, vals bigint[] NOT NULL)"
        )

    def _append_to(self, rng: random.Random) -> tuple[int, int]:
        """Pick an active key and its next value; retire keys that reached their write budget."""
        slot = rng.randrange(len(self._active))
        key = self._active[slot]
        value = self._writes.get(key, 0) + 1
        self._writes[key] = value
        if value >= self.options.max_writes_per_key:
            self._active[slot] = next(self._next_key)
        return key, value

    def next_op(self, rng: random.Random) -> tuple[str, Any]:
        mops: list[list[Any]] = []
        for _ in range(rng.randint(1, self.options.max_txn_length)):
            if rng.random() < 0.5:
                key, value = self._append_to(rng)
                mops.append(["append", key, value])
            else:
                mops.append(["r", rng.choice(self._active), None])
        return "txn", mops

    @staticmethod
    def writes(f: str, value: Any) -> bool:
        """A transaction that appends."""
        return (
            f == "txn"
            and isinstance(value, list)
            and any(isinstance(mop, list) and mop[:1] == ["append"] for mop in value)
        )

    def invoke(self, conn: psycopg.Connection, f: str, value: Any) -> Any:
        if len(value) > self.options.max_txn_length and all(m[0] == "r" for m in value):
            return self._read_all(conn, [key for _, key, _ in value])
        if self.options.op_pause > 0:  # a pause between statements: each sent on its own
            cursors = []
            for i, mop in enumerate(value):
                if i:
                    self.pause()
                cursors.append(self._send(conn, mop))
        else:
            # No pause asked: the statements go in one round trip (the transaction is the same,
            # its statements run in order), which at full load is most of the clients' cost.
            with conn.pipeline():
                cursors = [self._send(conn, mop) for mop in value]
        return [
            ["r", key, self._listed(cursor.fetchone())] if kind == "r" else [kind, key, arg]
            for (kind, key, arg), cursor in zip(value, cursors, strict=True)
        ]

    @staticmethod
    def _send(conn: psycopg.Connection, mop: list[Any]) -> psycopg.Cursor[Any]:
        kind, key, arg = mop
        if kind == "r":
            return conn.execute("SELECT vals FROM append_lists WHERE k = %s", (key,))
        return conn.execute(
            "INSERT INTO append_lists (k, vals) VALUES (%s, ARRAY[%s]::bigint[]) "
            "ON CONFLICT (k) DO UPDATE SET vals = append_lists.vals || EXCLUDED.vals",
            (key, arg),
        )

    @staticmethod
    def _listed(row: Any) -> list[Any]:
        return list(row[0]) if row else []

    @staticmethod
    def _read_all(conn: psycopg.Connection, keys: list[int]) -> list[list[Any]]:
        """The final read of every key the run wrote, in one statement and without pauses: a
        statement a key would take seconds over a long run's thousands of keys, and outlive the
        operation's timeout. Only the final reads are longer than the generator's transactions."""
        rows = conn.execute(
            "SELECT k, vals FROM append_lists WHERE k = ANY(%s)", (keys,)
        ).fetchall()
        lists = {k: list(vals) for k, vals in rows}
        return [["r", key, lists.get(key, [])] for key in keys]

    def checker_params(self) -> dict[str, Any]:
        """The model to hold the history to: --model, or what the isolation level promises."""
        return {"model": self.options.model or MODEL_FOR_ISOLATION[self.options.isolation]}

    def final_ops(self) -> list[tuple[str, Any]]:
        keys = sorted(set(self._writes) | set(self._active))
        return [("txn", [["r", k, None] for k in keys])]
