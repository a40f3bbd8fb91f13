"""The set checker: acknowledged adds must stay visible to every read that begins later.

Each element is judged on its own, as in Jepsen's set-full. It becomes *known* when its add
completes ok or when the first read (in invocation order) that contains it completes, whichever is
earlier. A known element is exactly one of:

- lost: a read invoked after the last read containing it completed (after its add's completion if
  no read contains it) does not contain it. Invalid.
- stale: not lost, but some read invoked after it was known missed it. Allowed (reads may lag).
- never-read: its add was acknowledged, but no read began after it was known, so nothing says
  whether it survived. Allowed.
- stable: otherwise: no read invoked after it was known misses it.

Besides: an element in a read that was never added, or whose add failed, is unexpected (invalid);
an element a read lists twice is duplicated (invalid); an add with an unknown outcome (info) that
a read shows is recovered (allowed: it took effect). In the confirm/rollback mode, an unexpected
element whose add was told it was rolled back is instead a resurrected rollback when a read invoked
after that answer contains it, and a dirty read (a read of unconfirmed data) when only reads
invoked before it did (both invalid).

Reads are put in invocation order (their rank) and each is compared with the previous one, so
each element's presence is a few runs of ranks, and "how many reads began by time t" is a rank
too: an element's facts (`facts`) are a few numbers, whatever the size of the reads. `judge`
classifies elements from their facts. `check` finds the runs in plain Python; the Spark feed
(checkers/spark/sets.py) finds them with Spark jobs, for histories whose reads are too large for
one process, and both hand them to `facts`.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from checkers.rollback import DIRTY, RESURRECTED, rolled_back
from core.contract import Contract
from core.errors import BadInput
from core.history import NEMESIS, Op
from core.verdict import Validity

ANOMALY_CAP = 50
INVALID_TYPES = (DIRTY, "duplicated", "lost", RESURRECTED, "unexpected")
ANOMALY_TYPES = (
    DIRTY,
    "duplicated",
    "lost",
    "never-read",
    "recovered",
    RESURRECTED,
    "stale",
    "unexpected",
)
OK, INFO, FAIL = 0, 1, 2  # an add's outcome, in the order an explanation prefers its add
FACTS = (
    "element",
    "outcome",  # the outcome of the add an explanation names (None: never added)
    "add_op",  # that add (for a failed element, the add told it was rolled back, if any)
    "add_ok_time",  # the first acknowledgement of an add of it
    "rollback_error",  # a failed element's rollback, in the confirm/rollback mode
    "rollback_time",
    "first_read",  # the first read (in rank order) that has it, and its completion
    "first_seen_time",
    "last_read",  # the last read that has it, its invocation and completion, and its rank
    "last_read_invoked",
    "last_seen_time",
    "last_rank",
    "top_start",  # the first rank of the run of reads that has it and ends at last_rank
    "by_known",  # how many reads began by the time it was known, and by its last sighting
    "by_last",
    "present_after",  # how many reads begun after it was known have it
)
Facts = dict[str, Any]


def check(ops: Iterable[Op], contract: Contract = Contract.DURABLE) -> dict[str, Any]:
    """Check the set workload's adds and ok reads (and, under the confirm/rollback contract, its
    contract)."""
    ops = list(ops)
    client = [op for op in ops if op["process"] != NEMESIS]
    adds = [op for op in client if op["f"] == "add"]
    reads = [op for op in client if op["f"] == "read" and op["type"] == "ok"]
    for op in sorted(adds, key=lambda op: op["invoke_index"]):
        if not _integer(op["invoke_value"]):
            raise BadInput(
                f"the set add at history index {op['invoke_index']} has a value that is not an "
                "integer"
            )
    for op in sorted(reads, key=lambda op: op["invoke_index"]):
        value = op["value"]
        if not isinstance(value, list) or not all(_integer(e) for e in value):
            raise BadInput(
                f"the set read at history index {op['invoke_index']} returned a value that is "
                "not a list of integers"
            )
    ranked = sorted(reads, key=lambda op: (op["invoke_time"], op["invoke_index"]))
    by_index = {op["invoke_index"]: op for op in ops}
    read = Ranked(
        [op["invoke_index"] for op in ranked],
        [op["invoke_time"] for op in ranked],
        [op["complete_time"] for op in ranked],
    )
    return judge(
        facts(adds, runs_of(ranked), read, contract),
        read.index,
        read.invoked,
        duplicates(ranked),
        lambda indices: {i: by_index[i] for i in indices},
    )


@dataclass(frozen=True)
class Ranked:
    """The ok reads in rank order (invocation time, then index): each one's index, invocation
    and completion time."""

    index: list[int]
    invoked: list[int]
    completed: list[int]


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def facts(
    adds: Iterable[Op],
    runs: Mapping[int, list[tuple[int, int]]],
    ranked: Ranked,
    contract: Contract,
) -> list[Facts]:
    """Every element added or read, with its `FACTS`, from the adds, each element's runs of
    consecutive read ranks (from 1) that have it, and the ok reads in rank order."""
    out: dict[int, Facts] = {}

    def of(element: int) -> Facts:
        return out.setdefault(element, dict.fromkeys(FACTS) | {"element": element})

    for op in sorted(adds, key=lambda op: op["invoke_index"]):
        e = of(op["invoke_value"])
        outcome = {"ok": OK, "fail": FAIL}.get(op["type"], INFO)
        if op["type"] == "ok" and (
            e["add_ok_time"] is None or op["complete_time"] < e["add_ok_time"]
        ):
            e["add_ok_time"] = op["complete_time"]
        if e["outcome"] is None or outcome < e["outcome"]:
            e["outcome"], e["add_op"] = outcome, op["invoke_index"]
        told = (
            op["type"] == "fail"
            and contract == Contract.CONFIRM_ROLLBACK
            and rolled_back(op["error"])
        )
        if told and "rollback_op" not in e:  # the first add told so
            e["rollback_op"], e["rollback_error"] = op["invoke_index"], op["error"]
            e["rollback_time"] = op["complete_time"]
    for e in out.values():
        rollback_op = e.pop("rollback_op", None)
        if e["outcome"] == FAIL:
            e["add_op"] = rollback_op if rollback_op is not None else e["add_op"]
        else:
            e["rollback_error"] = e["rollback_time"] = None
    invoked = ranked.invoked
    for element, spans in runs.items():
        e = of(element)
        first, (top_start, last) = min(spans)[0], max(spans, key=lambda s: s[1])
        e |= {
            "first_read": ranked.index[first - 1],
            "first_seen_time": ranked.completed[first - 1],
            "last_read": ranked.index[last - 1],
            "last_read_invoked": ranked.invoked[last - 1],
            "last_seen_time": ranked.completed[last - 1],
            "last_rank": last,
            "top_start": top_start,
            "spans": spans,
        }
    for e in out.values():
        spans = e.pop("spans", [])
        if known_time(e) is None:
            continue
        e["by_known"] = bisect.bisect_right(invoked, known_time(e))
        e["by_last"] = bisect.bisect_right(invoked, last_time(e))
        if spans:
            after = [max(0, stop - max(start - 1, e["by_known"])) for start, stop in spans]
            e["present_after"] = sum(after)
    return list(out.values())


def runs_of(ranked: list[Op]) -> dict[int, list[tuple[int, int]]]:
    """Each element's runs of consecutive ranks (from 1) whose reads have it: (start, stop)."""
    runs: dict[int, list[tuple[int, int]]] = {}
    open_: dict[int, int] = {}
    before: set[int] = set()
    for rank, op in enumerate(ranked, 1):
        now = set(op["value"])
        for element in now - before:
            open_[element] = rank
        for element in before - now:
            runs.setdefault(element, []).append((open_.pop(element), rank - 1))
        before = now
    for element, start in open_.items():
        runs.setdefault(element, []).append((start, len(ranked)))
    return runs


def duplicates(ranked: list[Op]) -> list[dict[str, int]]:
    """(read, element, copies) for elements a read lists more than once."""
    return [
        {"read": op["invoke_index"], "element": element, "copies": copies}
        for op in ranked
        if len(op["value"]) != len(set(op["value"]))
        for element, copies in Counter(op["value"]).items()
        if copies > 1
    ]


def unexpected(e: Mapping[str, Any]) -> bool:
    """Read, yet never added or only by adds that failed."""
    return e["first_read"] is not None and e["outcome"] in (None, FAIL)


def known_time(e: Mapping[str, Any]) -> int | None:
    """From when an element must stay visible: its add's acknowledgement or the first read that
    had it, whichever is earlier (never, for an unexpected element)."""
    if unexpected(e):
        return None
    times = [t for t in (e["add_ok_time"], e["first_seen_time"]) if t is not None]
    return min(times, default=None)


def last_time(e: Mapping[str, Any]) -> int | None:
    """The last sign of it: the last read that had it completed, else its add was acknowledged."""
    return e["last_seen_time"] if e["last_seen_time"] is not None else e["add_ok_time"]


def judge(
    elements: list[Facts],
    read_at: list[int],
    invoked_at: list[int],
    repeated: list[dict[str, int]],
    ops_of: Callable[[list[int]], Mapping[int, Op]],
) -> dict[str, Any]:
    """The verdict from every element's facts, the reads in rank order (their indices and
    invocation times) and the repeated elements of reads; `ops_of` gives the operations an
    anomaly names."""
    read_count = len(read_at)
    rows = [_classified(e, read_count, read_at, invoked_at) for e in elements]
    listed = _listed(rows, repeated)
    anomaly_counts = {t: n for t, (_, n) in listed.items()}
    shown = [row for _, (rows_, _) in sorted(listed.items()) for row in rows_]
    ops_by_index = ops_of(sorted({i for row in shown for i in _op_indices(row)}))
    anomalies = [
        {
            "type": row["type"],
            "explanation": _explain(row),
            "ops": [ops_by_index[i] for i in _op_indices(row)],
        }
        for row in shown
    ]
    worst = next(iter(listed.get("stale", ([],))[0]), None)
    valid: Validity = True if read_count else "unknown"
    if any(t in anomaly_counts for t in INVALID_TYPES):
        valid = False
    ok = [row for row in rows if row["outcome"] == OK]
    return {
        "valid": valid,
        "anomaly_types": sorted(anomaly_counts),
        "anomalies": anomalies,
        "anomaly_counts": dict(sorted(anomaly_counts.items())),
        "attempt_count": sum(row["outcome"] is not None for row in rows),
        "ok_add_count": len(ok),
        "known_count": sum(row["status"] is not None for row in rows),
        "stable_count": sum(row["status"] == "stable" for row in rows),
        "lost_acknowledged_count": sum(row["status"] == "lost" for row in ok),
        **{f"{t.replace('-', '_')}_count": anomaly_counts.get(t, 0) for t in ANOMALY_TYPES},
        "read_count": read_count,
        "worst_stale": None
        if worst is None
        else {
            "element": worst["element"],
            "staleness_ms": worst["staleness"] / 1e6,
            "read_index": worst["proof_read"],
        },
    }


def _classified(
    e: Facts, read_count: int, read_at: list[int], invoked_at: list[int]
) -> dict[str, Any]:
    """An element's facts with its status (lost, stale, never-read, stable; None when not known)
    and the read that proves a lost or stale one."""
    row = dict(e, known_time=known_time(e), unexpected=unexpected(e))
    judged = ("status", "reads_after_last", "missed", "proof_read", "proof_time", "staleness")
    row |= dict.fromkeys(judged)
    if row["known_time"] is None:
        return row
    after_known = read_count - e["by_known"]
    missed = after_known - (e["present_after"] or 0)
    row["reads_after_last"], row["missed"] = read_count - e["by_last"], missed
    proof = None
    if e["by_last"] < read_count:
        row["status"], proof = "lost", e["by_last"] + 1
    elif missed > 0:
        row["status"] = "stale"
        # the last read, unless it has the element: then the one before the run that ends there
        proof = read_count if e["last_rank"] < read_count else e["top_start"] - 1
    elif after_known == 0 and e["outcome"] == OK:
        row["status"] = "never-read"
    else:
        row["status"] = "stable"
    if proof is not None:
        row["proof_read"], row["proof_time"] = read_at[proof - 1], invoked_at[proof - 1]
        if row["status"] == "stale":
            row["staleness"] = row["proof_time"] - row["known_time"]
    return row


def _listed(
    rows: list[dict[str, Any]], repeated: list[dict[str, int]]
) -> dict[str, tuple[list[dict[str, Any]], int]]:
    """Per anomaly type: up to ANOMALY_CAP rows (worst staleness first), and how many there are."""
    found: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        rollback = row["rollback_error"] is not None
        # seen by a read begun after the client was told of the rollback, or only by earlier ones
        seen = row["last_read_invoked"]
        resurrected = rollback and seen is not None and seen > row["rollback_time"]
        kinds = {
            "lost": row["status"] == "lost",
            "stale": row["status"] == "stale",
            "never-read": row["status"] == "never-read",
            "recovered": row["outcome"] == INFO and row["first_read"] is not None,
            RESURRECTED: row["unexpected"] and resurrected,
            DIRTY: row["unexpected"] and rollback and not resurrected,
            "unexpected": row["unexpected"] and not rollback,
        }
        for kind, holds in kinds.items():
            if not holds:
                continue
            proof = row["first_read"]  # what shows it: the first read that has it, or
            if kind in ("lost", "stale"):  # the read that misses it
                proof = row["proof_read"]
            elif kind == "never-read":
                proof = None
            elif kind == RESURRECTED:  # the last read that has it, begun after the rollback
                proof = row["last_read"]
            found.setdefault(kind, []).append(
                row | {"type": kind, "proof_read": proof, "copies": None}
            )
    for d in repeated:
        blank = dict.fromkeys(FACTS) | dict.fromkeys(
            ("known_time", "reads_after_last", "missed", "staleness", "proof_time")
        )
        shown = {"type": "duplicated", "element": d["element"], "proof_read": d["read"]}
        found.setdefault("duplicated", []).append(blank | shown | {"copies": d["copies"]})

    def order(row: dict[str, Any]) -> tuple[Any, ...]:
        staleness = row["staleness"]
        proof = row["proof_read"]
        return (staleness is None, -(staleness or 0), row["element"], proof is not None, proof or 0)

    return {k: (sorted(v, key=order)[:ANOMALY_CAP], len(v)) for k, v in found.items()}


def _op_indices(row: Any) -> list[int]:
    """The operations an anomaly names: the add, and the reads that show it."""
    wanted = [row["add_op"], row["proof_read"]]
    if row["type"] == "lost":
        wanted.insert(1, row["last_read"])
    return [i for i in wanted if i is not None]


def _explain(row: Any) -> str:
    """One sentence a person can check against the history, for one anomalous element."""
    e, kind = row["element"], row["type"]
    add = f"add at index {row['add_op']}"
    if kind == "duplicated":
        return f"the read at index {row['proof_read']} lists element {e} {row['copies']} times"
    if kind == RESURRECTED:
        return (
            f"element {e}: its {add} was told it was rolled back ({row['rollback_error']}), yet "
            f"the read at index {row['proof_read']}, invoked after that, contains it: a "
            "rolled-back write became visible"
        )
    if kind == DIRTY:
        return (
            f"element {e}: the read at index {row['proof_read']} contains it while its {add} "
            f"waited for the quorum; the add was then told it was rolled back "
            f"({row['rollback_error']}, at {_s(row['rollback_time'])}) and no read begun after "
            "that contains it: the read saw a write that was never confirmed"
        )
    if kind == "unexpected":
        why = "which no operation ever added" if row["add_op"] is None else f"whose {add} failed"
        return f"the read at index {row['proof_read']} contains element {e}, {why}"
    if kind == "recovered":
        return (
            f"element {e}: its {add} had an unknown outcome (info), and the read at index "
            f"{row['proof_read']} contains it, so the add took effect"
        )
    if kind == "never-read":
        return (
            f"element {e} was known from {_s(row['known_time'])} ({_how_known(row)}), "
            "but no read began after that, so nothing shows whether it survived"
        )
    if kind == "stale":
        return (
            f"element {e} was known from {_s(row['known_time'])} ({_how_known(row)}), yet the "
            f"read at index {row['proof_read']}, invoked at {_s(row['proof_time'])} "
            f"({row['staleness'] / 1e6:.1f} ms later), does not contain it "
            f"({row['missed']} reads begun after it was known missed it; later reads have it)"
        )
    if row["last_read"] is None:
        seen = "no read ever contained it"
    else:
        seen = (
            f"the read at index {row['last_read']} (completed at {_s(row['last_seen_time'])}) "
            "was the last to contain it"
        )
    later = row["reads_after_last"] - 1
    missing = {0: "does", 1: "and 1 later read do"}.get(later, f"and {later} later reads do")
    return (
        f"element {e} was lost: {_how_known(row)}, {seen}, yet the read at index "
        f"{row['proof_read']} (invoked at {_s(row['proof_time'])}) {missing} not contain it"
    )


def _how_known(row: Any) -> str:
    """Why the element counts as known: its acknowledged add, or an earlier read that had it."""
    if row["add_ok_time"] is not None and row["add_ok_time"] == row["known_time"]:
        return f"its add at index {row['add_op']} was acknowledged at {_s(row['add_ok_time'])}"
    return (
        f"the read at index {row['first_read']} had it at {_s(row['first_seen_time'])}, "
        f"its add at index {row['add_op']} being {'ok' if row['outcome'] == OK else 'unknown'}"
    )


def _s(ns: int) -> str:
    """A history time (ns since the run started) in seconds, as reports show it."""
    return f"{ns / 1e9:.3f} s"
