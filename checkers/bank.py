"""The bank checker: every committed read must see all the money, in the right accounts.

Transfers move money between a fixed set of accounts and never create or destroy it, so under
snapshot isolation or stronger each ok read sees balances for exactly those accounts, none
negative, summing to the total. Each read is judged on its own.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from core.errors import BadInput
from core.history import NEMESIS, Op
from core.verdict import Validity

ANOMALY_CAP = 50


def check(ops: Iterable[Op], accounts: list[int], total: int) -> dict[str, Any]:
    """Check every ok read of the bank workload against the accounts and the total."""
    if not accounts:
        raise BadInput("the bank checker needs the list of accounts, and it is empty")
    reads = sorted(
        (op for op in ops if op["process"] != NEMESIS and op["f"] == "read" and op["type"] == "ok"),
        key=lambda op: op["invoke_index"],
    )
    listed: dict[str, list[tuple[Op, str]]] = {}
    counts: dict[str, int] = {}
    bad: list[Op] = []
    for op in reads:
        flags = _flags(op, accounts, total)
        if flags:
            bad.append(op)
        for kind, why in flags.items():
            counts[kind] = counts.get(kind, 0) + 1
            if len(listed.setdefault(kind, [])) < ANOMALY_CAP:
                listed[kind].append((op, f"the read at index {op['invoke_index']} {why}"))
    anomalies = [
        {"type": kind, "explanation": why, "ops": [op]}
        for kind in sorted(listed)
        for op, why in listed[kind]
    ]
    valid: Validity = True if reads else "unknown"
    return {
        "valid": False if counts else valid,
        "anomaly_types": sorted(counts),
        "anomalies": anomalies,
        "anomaly_counts": dict(sorted(counts.items())),
        "read_count": len(reads),
        "bad_read_count": len(bad),
        "first_bad_read": bad[0] if bad else None,
        "last_bad_read": bad[-1] if bad else None,
        "accounts": accounts,
        "total": total,
    }


def _flags(op: Op, accounts: list[int], total: int) -> dict[str, str]:
    """What is wrong with one read, by anomaly type, each said after "the read at index N"."""
    names = [str(a) for a in accounts]
    balances = op["value"]
    if not isinstance(balances, dict) or not all(
        v is None or (isinstance(v, int) and not isinstance(v, bool)) for v in balances.values()
    ):
        raise BadInput(
            f"the bank read at history index {op['invoke_index']} returned a value that is not "
            'a map of account to integer balance ({"0": 10, "1": 7, ...})'
        )
    flags: dict[str, str] = {}
    absent = [n for n in names if n not in balances]
    nil = sorted(k for k, v in balances.items() if v is None)
    if absent or nil:
        parts = [f"no balance at all for accounts {_names(absent)}"] if absent else []
        parts += [f"a null balance for accounts {_names(nil)}"] if nil else []
        flags["nil-balance"] = f"has {' and '.join(parts)}"
    negative = {k: v for k, v in balances.items() if v is not None and v < 0}
    if negative:
        flags["negative-value"] = f"saw negative balances {json.dumps(negative)}"
    unexpected = sorted(set(balances) - set(names))
    if unexpected:
        flags["unexpected-key"] = (
            f"saw accounts {_names(unexpected)}, which are not among {accounts}"
        )
    seen = sum(v for v in balances.values() if v is not None)
    if not absent and not nil and seen != total:  # a sum over missing balances says nothing
        shown = json.dumps(balances, separators=(", ", ": "))
        flags["wrong-total"] = f"saw balances summing to {seen} instead of {total}: {shown}"
    return flags


def _names(keys: list[str]) -> str:
    """Account names in numeric order where they are numbers ("2" before "10")."""
    return ", ".join(sorted(keys, key=lambda k: (not k.lstrip("-").isdigit(), len(k), k)))
