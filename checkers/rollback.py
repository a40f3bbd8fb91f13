"""The confirm/rollback mode's contract (DESIGN.md, "What the checkers hold each mode to"): a write
that got a definite rollback error never becomes visible; one that does is a resurrected rollback
when a read begun after the client was told so shows it, and a dirty read when only reads that
overlapped the wait for the decision did.

The append and set checkers hold a history to it under the `confirm-rollback` contract; under
the `durable` contract there is no such error to break.
"""

from __future__ import annotations

import re

RESURRECTED = "resurrected-rollback"
# A read that saw a write while it waited for its quorum, the write then rolled back: a read of
# unconfirmed data (Tarantool 2.6, which has no MVCC, shows them).
DIRTY = "dirty-read"
# A definite rollback: a Postgres SQLSTATE of class 40 except 40003 (completion unknown), as the
# workloads write errors ("40001: ..."), or a message that says the transaction was rolled back
# (Tarantool's synchronous replication says "rollback"). Python's and Java's regular expressions
# read it alike, so Spark's `rlike` applies it too.
ROLLBACK = r"(?i)^40(?!003)[0-9A-Z]{3}\b|roll(ed )?back"
_ROLLBACK = re.compile(ROLLBACK)


def rolled_back(error: str | None) -> bool:
    """Whether a failed operation's error says its transaction was definitely rolled back."""
    return bool(error and _ROLLBACK.search(error))
