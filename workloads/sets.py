"""Set: unique inserts and occasional reads of the whole set, then a final read.

The plainest durability canary: every acknowledged add must be in the final read.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

import psycopg

from checkers import catalog
from workloads.base import Workload

READ_PROBABILITY = 0.05


class SetWorkload(Workload):
    name = "set"
    checkers = (catalog.SET,)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._elements = itertools.count()

    def setup(self, conn: psycopg.Connection) -> None:
        conn.execute("CREATE TABLE IF NOT EXISTS set_elements (element bigint PRIMARY KEY)")

    def next_op(self, rng: random.Random) -> tuple[str, Any]:
        if rng.random() < READ_PROBABILITY:
            return "read", None
        return "add", next(self._elements)

    @staticmethod
    def writes(f: str, value: Any) -> bool:
        return f == "add"

    def invoke(self, conn: psycopg.Connection, f: str, value: Any) -> Any:
        if f == "read":
            rows = conn.execute("SELECT element FROM set_elements ORDER BY element").fetchall()
            return [r[0] for r in rows]
        conn.execute("INSERT INTO set_elements (element) VALUES (%s)", (value,))
        return value

    def final_ops(self) -> list[tuple[str, Any]]:
        return [("read", None)]
