"""One key's share of Elle's list-append analysis.

Everything list-append infers from reads lives inside one key: a key's version order is its
longest read (every other read should be a prefix of it; an append never observed is taken to
follow the last observed element); the ww, wr and rw edges join transactions that appended and
read one key; and each anomaly that needs no cycle is about one key. So the analysis is a function
of one key's accesses. Spark runs it for all keys at once (checkers/spark/append_keys.py); tests and
hand use run it key by key (checkers/listappend.check). Edges point from the transaction that
must come first: ww (appended the previous version), wr (wrote what was read last), rw (read the
version just before one that was appended).
"""

from __future__ import annotations

import bisect
import gc
import itertools
from collections import defaultdict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from checkers.listappend.graph import RW, WR, WW
from checkers.listappend.history import INIT, Txn
from checkers.rollback import RESURRECTED, rolled_back

LOST = "lost-append"  # ours, not Elle's: an acknowledged append missing from a later read

Op = tuple[int, str, Any]  # (position in its transaction, "append" | "r", element | read)


class Access(NamedTuple):
    """One transaction's micro-operations on one key, in the transaction's order (a tuple:
    millions are made for a large history, and a tuple is the quickest to make)."""

    txn: int  # the transaction's invocation index
    type: str  # ok, info or fail
    start: int  # invocation time, ns
    end: int | None  # completion time, ns
    node: str | None
    error: str | None
    ops: tuple[Op, ...]

    @property
    def name(self) -> str:
        return f"T{self.txn}"


@dataclass
class KeyResult:
    """A key's edges (with their reasons when asked for) and its anomaly cases."""

    edges: list[tuple[int, int, int]] = field(default_factory=list)
    reasons: list[tuple[Any, ...]] = field(default_factory=list)
    cases: list[dict[str, Any]] = field(default_factory=list)


@contextmanager
def paused_gc() -> Iterator[None]:
    """Python's cycle collector paused: the analysis makes millions of tuples, none in a cycle,
    and the collector would walk the growing heap again and again while they are made (half
    the time of a large pass)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def by_key(txns: Iterable[Txn]) -> dict[Any, list[Access]]:
    """Each key's accesses, in transaction order: how a list of transactions splits up."""
    keys: dict[Any, dict[int, list[Op]]] = defaultdict(dict)
    meta: dict[int, Txn] = {}
    for t in sorted(txns, key=lambda t: t.index):
        meta[t.index] = t
        for pos, (f, k, v) in enumerate(t.mops):
            keys[k].setdefault(t.index, []).append((pos, f, v))
    return {k: [access(meta[i], ops) for i, ops in per_txn.items()] for k, per_txn in keys.items()}


def access(t: Txn, ops: list[Op]) -> Access:
    return Access(t.index, t.type, t.start, t.end, t.node, t.error, tuple(ops))


class Versions:
    """A key's version order, who appended each element, and who read each state."""

    def __init__(self, accesses: list[Access]) -> None:
        longest: tuple[Any, ...] = ()
        self.writer: dict[Any, Access] = {}  # element → ok or info appender
        self.failed: dict[Any, Access] = {}  # element → failed appender
        self.readers: dict[Any, list[Access]] = defaultdict(list)  # last element → readers
        self.reads: list[tuple[Access, tuple[Any, ...]]] = []  # non-empty, by ok and info
        for a in accesses:
            for _, f, v in a.ops:
                if f == "append":
                    (self.failed if a.type == "fail" else self.writer)[v] = a
                elif a.type != "fail" and v is not None:
                    if len(v) > len(longest):
                        longest = v
                    self.readers[v[-1] if v else INIT].append(a)
                    if v:
                        self.reads.append((a, v))
        self.longest = longest
        self.order = list(dict.fromkeys(longest))
        self.position = {v: i for i, v in enumerate(self.order)}
        # The usual key: every read a prefix of the longest, which repeats nothing. Then no read
        # holds a duplicate, two reads never disagree, and only the order's elements were read,
        # so most cases need no look at the reads one by one.
        self.prefixes = all(v == longest[: len(v)] for _, v in self.reads)
        self.clean = self.prefixes and len(self.order) == len(longest)

    def previous(self, v: Any) -> Any:
        """The version an append of `v` followed: its predecessor in the order, or for an
        element never read, the last one read (INIT if the key was never read non-empty)."""
        i = self.position.get(v)
        if i is None:
            return self.order[-1] if self.order else INIT
        return self.order[i - 1] if i else INIT


def analyze(key: Any, accesses: list[Access], explain: bool = False) -> KeyResult:
    """The key's ww/wr/rw edges between ok and info transactions, and its anomaly cases (the
    confirm/rollback mode's among them: the driver decides which ones count).

    `explain` keeps each edge's reason (for the few edges a report shows: the caller runs the
    key again with it)."""
    versions = Versions(accesses)
    graphed = [a for a in accesses if a.type != "fail"]
    oks = [a for a in graphed if a.type == "ok"]
    result = KeyResult()
    _edges(graphed, versions, result, explain)
    k = key
    cases = result.cases
    ok_reads = [(t, v) for t, v in versions.reads if t.type == "ok"]
    cases += _duplicates(k, versions.reads, versions)
    cases += _incompatible(k, versions.reads, versions)
    cases += _aborted(k, ok_reads, versions)
    # a transaction's own order matters only where it touched the key more than once
    several = [a for a in accesses if len(a.ops) > 1]
    several_oks = [a for a in several if a.type == "ok"]
    cases += _intermediate(k, several, ok_reads)
    cases += _internal(k, several_oks)
    cases += _future(k, several_oks)
    cases += _lost_updates(k, several_oks)
    cases += _dirty(k, versions)
    cases += _lost_appends(k, accesses, oks, versions)
    return result


def _edges(graphed: list[Access], versions: Versions, out: KeyResult, explain: bool) -> None:
    seen: set[tuple[int, int, int]] = set()
    edges, reasons = out.edges, out.reasons
    writer, readers, previous = versions.writer.get, versions.readers.get, versions.previous
    # inlined: a large history has millions of edges, nearly all rw
    for t in graphed:
        b = t.txn
        for _, f, v in t.ops:
            if f == "append":
                prev = previous(v)
                if prev is not INIT:
                    w = writer(prev)
                    if w is not None and w.txn != b and (w.txn, b, WW) not in seen:
                        seen.add((w.txn, b, WW))
                        edges.append((w.txn, b, WW))
                        if explain:
                            reasons.append((prev, v))
                for r in readers(prev, ()):
                    edge = (r.txn, b, RW)
                    if r.txn != b and edge not in seen:
                        seen.add(edge)
                        edges.append(edge)
                        if explain:
                            reasons.append((prev, v))
            elif v:
                w = writer(v[-1])
                if w is not None and w.txn != b and (w.txn, b, WR) not in seen:
                    seen.add((w.txn, b, WR))
                    edges.append((w.txn, b, WR))
                    if explain:
                        reasons.append((v[-1],))


def _case(name: str, ops: list[Access], text: str, **extra: Any) -> dict[str, Any]:
    return {"type": name, "ops": [a.txn for a in ops], "explanation": text, **extra}


Reads = list[tuple[Access, tuple[Any, ...]]]  # non-empty reads: (access, values)


def _duplicates(k: Any, reads: Reads, versions: Versions) -> list[dict[str, Any]]:
    if versions.clean:
        return []
    cases = []
    for t, v in reads:
        if len(set(v)) != len(v):
            dups = sorted({x for x in v if v.count(x) > 1}, key=repr)
            text = f"{t.name} read key {k!r} as {list(v)!r}, with {dups!r} twice"
            cases.append(_case("duplicate-elements", [t], text))
    return cases


def _incompatible(k: Any, reads: Reads, versions: Versions) -> list[dict[str, Any]]:
    """Two reads of the key where the shorter is not a prefix of the longer (the first pair)."""
    if versions.prefixes:
        return []
    seen: dict[tuple[Any, ...], Access] = {}
    for t, v in reads:
        seen.setdefault(v, t)
    for a, b in itertools.pairwise(sorted(seen, key=len)):
        if b[: len(a)] != a:
            x, y = seen[a], seen[b]
            text = (
                f"{x.name} read key {k!r} as {list(a)!r} and {y.name} as {list(b)!r}: neither is "
                "a prefix of the other, so the key has no single order of versions"
            )
            return [_case("incompatible-order", [x, y], text)]
    return []


def _aborted(k: Any, ok_reads: Reads, versions: Versions) -> list[dict[str, Any]]:
    """G1a: an ok read holds an element whose append failed. An element whose append got a
    definite rollback error is also a resurrected rollback (once per element, at the first read
    that shows it and began after the error was returned), which the confirm/rollback mode's
    contract forbids; a read that overlapped the wait for the decision is the G1a alone (a read
    of unconfirmed data)."""
    if not versions.failed:
        return []
    if versions.prefixes and not versions.failed.keys() & versions.position.keys():
        return []  # no read holds an element outside the order
    cases = []
    resurrected: set[Any] = set()
    for t, v in ok_reads:
        hits = versions.failed.keys() & set(v)  # set operations in C: most reads hit nothing
        for x in sorted(hits, key=v.index):
            w = versions.failed[x]
            text = (
                f"{t.name} read {x!r} in key {k!r}, but {w.name}, which appended it, failed: an "
                "aborted write was read"
            )
            cases.append(_case("G1a", [t, w], text))
            after = w.end is not None and t.start > w.end
            if x not in resurrected and after and rolled_back(w.error):
                resurrected.add(x)
                text = (
                    f"{w.name} appended {x!r} to key {k!r} and was told it was rolled back "
                    f"({w.error}), yet {t.name}, begun after that, read the key with {x!r} in "
                    "it: a rolled-back write became visible"
                )
                cases.append(_case(RESURRECTED, [w, t], text))
    return cases


def _intermediate(k: Any, several: list[Access], ok_reads: Reads) -> list[dict[str, Any]]:
    """G1b: an ok read ends at an element its writer overwrote with a later append to the key in
    the same transaction (`several`: the accesses with more than one micro-operation)."""
    intermediate: dict[Any, Access] = {}
    for t in several:
        appended = [v for _, f, v in t.ops if f == "append"]
        for v in appended[:-1]:
            intermediate[v] = t
    if not intermediate:
        return []
    cases = []
    for t, v in ok_reads:
        w = intermediate.get(v[-1])
        if w is not None and w.txn != t.txn:
            text = (
                f"{t.name} read key {k!r} ending at {v[-1]!r}, which {w.name} overwrote with a "
                "later append in the same transaction: an intermediate state was read"
            )
            cases.append(_case("G1b", [t, w], text))
    return cases


def _internal(k: Any, several_oks: list[Access]) -> list[dict[str, Any]]:
    """A transaction's read disagrees with its own earlier reads and appends of the key."""
    cases = []
    for t in several_oks:
        known, vals, started = False, (), False  # known: vals is the whole list, not a suffix
        for pos, f, v in t.ops:
            if f == "append":
                vals, started = (*vals, v), True
            elif v is not None:
                if started:
                    ok = v == vals if known else v[len(v) - len(vals) :] == vals
                    if not ok or len(v) < len(vals):
                        expected = list(vals) if known else ["...", *vals]
                        text = (
                            f"{t.name} read {list(v)!r} from key {k!r}, but its own earlier "
                            f"reads and appends say it should have seen {expected!r}"
                        )
                        cases.append(_case("internal", [t], text, pos=pos))
                        break
                known, vals, started = True, v, True
    return cases


def _future(k: Any, several_oks: list[Access]) -> list[dict[str, Any]]:
    """A transaction read an element that it appended only later."""
    cases = []
    for t in several_oks:
        seen: set[Any] = set()
        for pos, f, v in t.ops:
            if f == "r" and v:
                seen.update(v)
            elif f == "append" and v in seen:
                text = f"{t.name} read {v!r} in key {k!r} before appending it itself"
                cases.append(_case("future-read", [t], text, pos=pos))
                break
    return cases


def _lost_updates(k: Any, several_oks: list[Access]) -> list[dict[str, Any]]:
    """Two ok transactions read the same state of the key and both appended to it."""
    by_state: dict[Any, list[Access]] = defaultdict(list)
    for t in several_oks:
        fs = [f for _, f, _ in t.ops]
        if "r" in fs and "append" in fs[fs.index("r") :]:
            first = next(v for _, f, v in t.ops if f == "r")
            by_state[first].append(t)
    cases = []
    for v, ts in by_state.items():
        if len(ts) > 1:
            names = ", ".join(t.name for t in ts)
            state = "the empty list" if not v else repr(list(v))
            text = (
                f"{names} all read key {k!r} as {state} and then appended to it: each update was "
                "made without seeing the others"
            )
            cases.append(_case("lost-update", ts, text))
    return cases


def _dirty(k: Any, versions: Versions) -> list[dict[str, Any]]:
    """A committed append built directly on a failed one in the key's version order."""
    if not versions.failed:
        return []
    cases = []
    base: Access | None = None  # the failed writer the following versions sit on
    for v in versions.order:
        ok_writer = versions.writer.get(v)
        failed = versions.failed.get(v)
        if failed is not None and ok_writer is None:
            base = base or failed
        elif ok_writer is not None and ok_writer.type == "ok" and base is not None:
            text = (
                f"{ok_writer.name} appended {v!r} to key {k!r} on top of a version written by "
                f"{base.name}, which failed"
            )
            cases.append(_case("dirty-update", [base, ok_writer], text))
            base = None
    return cases


def _lost_appends(
    k: Any, accesses: list[Access], oks: list[Access], versions: Versions
) -> list[dict[str, Any]]:
    """Acknowledged appends that a later read of the key does not contain, when that read shows
    a version written after the acknowledgement, or is the key's last read (the final reads).

    A durability check rather than an isolation one: an append whose COMMIT returned ok before a
    read began, then missing from it while newer appends are there, was lost."""
    reads = [(t, v) for t in oks for _, f, v in t.ops if f == "r" and v is not None]
    if not reads or not _may_lose(oks, reads, versions):
        return []
    appended_at = {v: t.start for t in accesses for _, f, v in t.ops if f == "append"}
    last_read = max(reads, key=lambda pair: pair[0].start)[0]
    cases = []
    for t in oks:
        if t.end is None:
            continue
        for _, f, v in t.ops:
            if f != "append":
                continue
            for r, seen in reads:
                if r.start <= t.end or v in seen:
                    continue
                newer = [x for x in seen if appended_at.get(x, -1) > t.end]
                if newer or r is last_read:
                    shows = (
                        f"which shows {newer!r}, appended after it was acknowledged"
                        if newer
                        else "the last read of that key"
                    )
                    text = (
                        f"{t.name} appended {v!r} to key {k!r} and was acknowledged, but "
                        f"{r.name}, which began afterwards, read the key without it, {shows}: an "
                        "acknowledged write was lost"
                    )
                    cases.append(_case(LOST, [t, r], text))
                    break
    return cases


def _may_lose(
    oks: list[Access], reads: list[tuple[Access, tuple[Any, ...]]], versions: Versions
) -> bool:
    """Whether some read may miss an append acknowledged before it began: the quick test that
    spares clean keys the search for cases. The appends acknowledged before a read began are a
    prefix of them in acknowledgement order; a read that is a prefix of the version order holds
    them all when the furthest of them in that order lies within it."""
    if len(versions.order) != len(versions.longest):
        return True  # duplicates: leave it to the search
    acked = sorted(
        ((t.end, v) for t in oks if t.end is not None for _, f, v in t.ops if f == "append"),
        key=lambda pair: pair[0],
    )
    ends = [end for end, _ in acked]
    furthest = [-1]  # furthest[i]: the furthest position among the first i acknowledged
    for _, v in acked:
        furthest.append(max(furthest[-1], versions.position.get(v, len(versions.order))))
    prefixes = versions.prefixes  # then every read is one; else each is compared
    for r, seen in reads:
        if (not prefixes and seen != versions.longest[: len(seen)]) or furthest[
            bisect.bisect_left(ends, r.start)
        ] >= len(seen):
            return True
    return False
