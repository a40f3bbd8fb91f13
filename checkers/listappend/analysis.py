"""What list-append reads reveal without a graph search: each key's version order, the
anomalies visible in single reads or transactions, and the dependency edges between transactions.

Following Elle: a key's version order is its longest read (every other read should be a prefix of
it); an append never observed is taken to follow the last observed element. Edges point from the
transaction that must come first: ww (appended the previous version), wr (wrote what was read
last), rw (read the version just before one that was appended).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from checkers.listappend.history import INIT, Txn

WW, WR, RW, PROCESS, REALTIME = 1, 2, 4, 8, 16
EDGE_NAMES = {WW: "ww", WR: "wr", RW: "rw", PROCESS: "process", REALTIME: "realtime"}


@dataclass
class Graph:
    """Edges as adjacency masks, with one reason per (edge, type) for the explanations."""

    out: dict[int, dict[int, int]] = field(default_factory=lambda: defaultdict(dict))
    why: dict[tuple[int, int, int], tuple[Any, ...]] = field(default_factory=dict)

    def add(self, a: int, b: int, kind: int, reason: tuple[Any, ...] = ()) -> None:
        if a == b:
            return
        edges = self.out[a]
        if not edges.get(b, 0) & kind:
            edges[b] = edges.get(b, 0) | kind
            self.why[(a, b, kind)] = reason


class Versions:
    """Per key: the version order, who appended each element, who read each state."""

    def __init__(self, txns: list[Txn]) -> None:
        self.longest: dict[Any, tuple[Any, ...]] = {}
        self.position: dict[Any, dict[Any, int]] = {}
        self.writer: dict[Any, dict[Any, Txn]] = defaultdict(dict)
        self.failed_writer: dict[Any, dict[Any, Txn]] = defaultdict(dict)
        self.readers: dict[Any, dict[Any, list[Txn]]] = defaultdict(lambda: defaultdict(list))
        for t in txns:
            for f, k, v in t.mops:
                if f == "append":
                    (self.failed_writer if t.type == "fail" else self.writer)[k][v] = t
                elif t.type != "fail" and v is not None:
                    if len(v) > len(self.longest.get(k, ())):
                        self.longest[k] = v
                    self.readers[k][v[-1] if v else INIT].append(t)
        for k, order in self.longest.items():
            self.position[k] = {}
            for i, v in enumerate(dict.fromkeys(order)):
                self.position[k].setdefault(v, i)
        self.order = {k: list(dict.fromkeys(v)) for k, v in self.longest.items()}

    def previous(self, k: Any, v: Any) -> Any:
        """The version an append of `v` followed: its predecessor in the order, or for an
        element never read, the last one read (INIT if the key was never read non-empty)."""
        order = self.order.get(k, [])
        i = self.position.get(k, {}).get(v)
        if i is None:
            return order[-1] if order else INIT
        return order[i - 1] if i else INIT


def data_edges(txns: list[Txn], versions: Versions) -> Graph:
    """ww, wr and rw edges between ok and info transactions."""
    g = Graph()
    for t in txns:
        for f, k, v in t.mops:
            if f == "append":
                prev = versions.previous(k, v)
                if prev is not INIT:
                    w = versions.writer[k].get(prev)
                    if w is not None:
                        g.add(w.index, t.index, WW, (k, prev, v))
                for r in versions.readers[k].get(prev, ()):
                    g.add(r.index, t.index, RW, (k, prev, v))
            elif v:
                w = versions.writer[k].get(v[-1])
                if w is not None:
                    g.add(w.index, t.index, WR, (k, v[-1]))
    return g


def process_edges(g: Graph, txns: list[Txn]) -> None:
    """Each process's ok transactions in completion order."""
    last: dict[int, Txn] = {}
    for t in sorted(txns, key=lambda t: t.complete):
        if t.type != "ok":
            continue
        if t.process in last:
            g.add(last[t.process].index, t.index, PROCESS, (t.process,))
        last[t.process] = t


def realtime_edges(g: Graph, txns: list[Txn]) -> None:
    """T1 → T2 when T1 completed ok before T2 was invoked, kept sparse as Elle does: a completed
    transaction leaves the frontier once a later one that follows it completes."""
    events = [(t.index, 0, t) for t in txns]
    events += [(t.complete, 1, t) for t in txns if t.type == "ok"]
    frontier: dict[int, Txn] = {}
    before: dict[int, list[int]] = {}
    for _, kind, t in sorted(events, key=lambda e: (e[0], e[1])):
        if kind == 0:
            before[t.index] = list(frontier)
            for a in frontier:
                g.add(a, t.index, REALTIME, ())
        else:
            for a in before.pop(t.index, ()):
                frontier.pop(a, None)
            frontier[t.index] = t


# --- anomalies without cycles -------------------------------------------------------------------


def duplicate_elements(txns: Iterable[Txn]) -> list[dict[str, Any]]:
    cases = []
    for t in txns:
        for f, k, v in t.mops:
            if f == "r" and v and len(set(v)) != len(v):
                dups = sorted({x for x in v if v.count(x) > 1}, key=repr)
                cases.append({"op": t, "key": k, "read": list(v), "duplicates": dups})
    return cases


def incompatible_orders(txns: Iterable[Txn]) -> list[dict[str, Any]]:
    """Two reads of a key where the shorter is not a prefix of the longer."""
    reads: dict[Any, dict[tuple[Any, ...], Txn]] = defaultdict(dict)
    for t in txns:
        for f, k, v in t.mops:
            if f == "r" and v:
                reads[k].setdefault(v, t)
    cases = []
    for k, seen in reads.items():
        values = sorted(seen, key=len)
        for a, b in itertools.pairwise(values):
            if b[: len(a)] != a:
                cases.append({"key": k, "values": [list(a), list(b)], "ops": [seen[a], seen[b]]})
                break
    return cases


def aborted_reads(txns: Iterable[Txn], versions: Versions) -> list[dict[str, Any]]:
    """G1a: an ok transaction read an element whose append failed."""
    cases = []
    for t in txns:
        if t.type != "ok":
            continue
        for f, k, v in t.mops:
            failed = versions.failed_writer.get(k) if f == "r" and v else None
            if not failed:
                continue
            hits = failed.keys() & set(v)  # set operations in C: most reads hit nothing
            for x in sorted(hits, key=v.index):
                cases.append({"op": t, "key": k, "element": x, "writer": failed[x]})
    return cases


def intermediate_reads(txns: list[Txn]) -> list[dict[str, Any]]:
    """G1b: an ok read ended at an element its writer later overwrote with another append to the
    same key in the same transaction."""
    intermediate: dict[tuple[Any, Any], Txn] = {}
    for t in txns:
        last: dict[Any, Any] = {}
        for f, k, v in t.mops:
            if f == "append":
                if k in last:
                    intermediate[(k, last[k])] = t
                last[k] = v
    cases = []
    for t in txns:
        if t.type != "ok":
            continue
        for f, k, v in t.mops:
            if f == "r" and v:
                w = intermediate.get((k, v[-1]))
                if w is not None and w.index != t.index:
                    cases.append({"op": t, "key": k, "element": v[-1], "writer": w})
    return cases


def internal(txns: Iterable[Txn]) -> list[dict[str, Any]]:
    """A transaction's read disagrees with its own earlier reads and appends of that key."""
    cases = []
    for t in txns:
        if t.type != "ok":
            continue
        state: dict[Any, tuple[bool, tuple[Any, ...]]] = {}  # key → (known prefix?, values)
        for f, k, v in t.mops:
            if f == "append":
                known, vals = state.get(k, (False, ()))
                state[k] = (known, (*vals, v))
            elif v is not None:
                if k in state:
                    known, vals = state[k]
                    ok = v == vals if known else v[len(v) - len(vals) :] == vals
                    if not ok or len(v) < len(vals):
                        expected = list(vals) if known else ["...", *vals]
                        cases.append({"op": t, "key": k, "read": list(v), "expected": expected})
                        break
                state[k] = (True, v)
    return cases


def future_reads(txns: Iterable[Txn]) -> list[dict[str, Any]]:
    """A transaction read an element that it appended only later."""
    cases = []
    for t in txns:
        if t.type != "ok":
            continue
        seen: dict[Any, set[Any]] = defaultdict(set)
        for f, k, v in t.mops:
            if f == "r" and v:
                seen[k].update(v)
            elif f == "append" and v in seen[k]:
                cases.append({"op": t, "key": k, "element": v})
                break
    return cases


def lost_updates(txns: Iterable[Txn]) -> list[dict[str, Any]]:
    """Two ok transactions read the same state of a key and both appended to it."""
    by_state: dict[tuple[Any, Any], list[Txn]] = defaultdict(list)
    for t in txns:
        if t.type != "ok":
            continue
        first_read: dict[Any, Any] = {}
        registered: set[Any] = set()
        for f, k, v in t.mops:
            if f == "r":
                first_read.setdefault(k, v)
            elif k in first_read and k not in registered:
                registered.add(k)
                by_state[(k, first_read[k])].append(t)
    return [
        {"key": k, "read": None if v is None else list(v), "ops": ts}
        for (k, v), ts in by_state.items()
        if len(ts) > 1
    ]


def dirty_updates(versions: Versions) -> list[dict[str, Any]]:
    """A committed append built directly on a failed one in a key's version order."""
    cases = []
    for k, order in versions.order.items():
        base: Txn | None = None  # the failed writer the following versions sit on
        for v in order:
            ok_writer = versions.writer[k].get(v)
            failed = versions.failed_writer[k].get(v)
            if failed is not None and ok_writer is None:
                base = base or failed
            elif ok_writer is not None and ok_writer.type == "ok" and base is not None:
                cases.append({"key": k, "element": v, "failed": base, "op": ok_writer})
                base = None
    return cases


def lost_appends(txns: list[Txn]) -> list[dict[str, Any]]:
    """Acknowledged appends that a later read of their key does not contain, when that read shows
    a version written after the acknowledgement, or is the key's last read (the final reads).

    A durability check rather than an isolation one: an append whose COMMIT returned ok before a
    read began, then missing from it while newer appends are there, was lost."""
    reads: dict[Any, list[tuple[Txn, tuple[Any, ...]]]] = defaultdict(list)
    appended_at: dict[tuple[Any, Any], int] = {}  # (key, element) → its append's invocation time
    for t in txns:
        for f, k, v in t.mops:
            if f == "append":
                appended_at[(k, v)] = t.start
            elif t.type == "ok" and v is not None:
                reads[k].append((t, v))
    last_read = {k: max(rs, key=lambda pair: pair[0].start)[0] for k, rs in reads.items()}
    cases = []
    for t in txns:
        if t.type != "ok" or t.end is None:
            continue
        for f, k, v in t.mops:
            if f != "append" or k not in reads:
                continue
            for r, seen in reads[k]:
                if r.start <= t.end or v in seen:
                    continue
                newer = [x for x in seen if appended_at.get((k, x), -1) > t.end]
                if newer or r is last_read[k]:
                    cases.append({"op": t, "key": k, "element": v, "read": r, "newer": newer})
                    break
    return cases
