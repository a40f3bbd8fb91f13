"""Bank: transfers between accounts in one transaction, and reads of every balance.

Under a serializable (or snapshot) isolation level every read must see the same total and no
negative balance; the bank checker holds the history to that.
"""

from __future__ import annotations

import random
from typing import Any

import psycopg

from checkers import catalog
from workloads.base import Definite, Workload


class Bank(Workload):
    name = "bank"
    checkers = (catalog.BANK,)

    @property
    def accounts(self) -> list[int]:
        return list(range(self.options.accounts))

    def initial_balances(self) -> dict[int, int]:
        """Spread the total over the accounts; the first takes the remainder."""
        n, total = self.options.accounts, self.options.total
        balances = {a: total // n for a in self.accounts}
        balances[0] += total - sum(balances.values())
        return balances

    def setup(self, conn: psycopg.Connection) -> None:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS bank_accounts (id int PRIMARY KEY, balance bigint NOT NULL)"
        )
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO bank_accounts (id, balance) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                list(self.initial_balances().items()),
            )

    def next_op(self, rng: random.Random) -> tuple[str, Any]:
        if rng.random() < 0.5:
            return "read", None
        src, dst = rng.sample(self.accounts, 2)
        return "transfer", {
            "from": src,
            "to": dst,
            "amount": rng.randint(1, self.options.max_transfer),
        }

    @staticmethod
    def writes(f: str, value: Any) -> bool:
        return f == "transfer"

    def invoke(self, conn: psycopg.Connection, f: str, value: Any) -> Any:
        if f == "read":
            rows = conn.execute("SELECT id, balance FROM bank_accounts ORDER BY id").fetchall()
            return {str(i): b for i, b in rows}
        src, dst, amount = value["from"], value["to"], value["amount"]
        row = conn.execute("SELECT balance FROM bank_accounts WHERE id = %s", (src,)).fetchone()
        if row is None or row[0] < amount:
            raise Definite(f"insufficient funds in account {src}")
        self.pause()
        conn.execute("UPDATE bank_accounts SET balance = balance - %s WHERE id = %s", (amount, src))
        self.pause()
        conn.execute("UPDATE bank_accounts SET balance = balance + %s WHERE id = %s", (amount, dst))
        return value

    def final_ops(self) -> list[tuple[str, Any]]:
        return [("read", None)]

    def checker_params(self) -> dict[str, Any]:
        return {"accounts": self.accounts, "total": self.options.total}
