"""Split-brain in list-append histories: two nodes acknowledging writes from divergent histories.

Two signs, each needing acknowledged writes on both sides, so that a stale read alone is never
called split-brain:
- diverged: reads of one key served by two nodes where neither is a prefix of the other, and
  each side's extra elements include an acknowledged append made through that side's node;
- unseen: an append acknowledged through node A, then a read through node B, begun after that
  acknowledgement, that misses it while showing an append acknowledged through B and begun after
  it: B went on accepting writes without A's.
Each case names the two nodes, the time window the operations span, and the faults (nemesis
operations) in place around that window.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from checkers.listappend.history import Txn
from checkers.listappend.keys import Access, by_key

MARGIN_NS = 5_000_000_000  # faults this close to a case's window are shown with it
CASE_CAP = 20


def check(txns: Iterable[Txn], faults: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """In process: `faults` are the nemesis operations, dicts with start, end (ns), f and value."""
    return verdict([c for k, acc in by_key(txns).items() for c in analyze(k, acc)], faults)


def analyze(key: Any, accesses: list[Access]) -> list[dict[str, Any]]:
    """One key's cases, explained but for the faults around them (the driver adds those)."""
    acked: dict[Any, Access] = {}  # element → the ok access that appended it
    reads: list[tuple[Access, tuple[Any, ...]]] = []
    for t in accesses:
        if t.type != "ok":
            continue
        for _, f, v in t.ops:
            if f == "append":
                acked[v] = t
            elif v:
                reads.append((t, v))
    return _diverged(key, reads, acked) + _unseen(key, reads, acked)


def verdict(cases: list[dict[str, Any]], faults: list[dict[str, Any]] | None) -> dict[str, Any]:
    """All keys' cases, each with the faults around its window."""
    cases = sorted(cases, key=lambda c: (c["window_ns"], c["ops"]))
    for case in cases[:CASE_CAP]:
        case["faults"] = _around(faults or [], case["window_ns"])
        if case["faults"]:
            case["explanation"] += "; faults around it: " + ", ".join(
                f"{f['f']} at {_s(f['start'])}" for f in case["faults"]
            )
        lo, hi = case["window_ns"]
        case["explanation"] += f" (between {_s(lo)} and {_s(hi)})"
    return {
        "valid": not cases,
        "anomaly_types": ["split-brain"] if cases else [],
        "anomaly_counts": {"split-brain": len(cases)} if cases else {},
        "anomalies": cases[:CASE_CAP],
    }


def _diverged(
    k: Any, reads: list[tuple[Access, tuple[Any, ...]]], acked: dict[Any, Access]
) -> list[dict[str, Any]]:
    longest: dict[str, tuple[Access, tuple[Any, ...]]] = {}
    for t, v in reads:
        if t.node is not None and len(v) > len(longest.get(t.node, (t, ()))[1]):
            longest[t.node] = (t, v)
    nodes = sorted(longest)
    for i, a in enumerate(nodes):
        for b in nodes[i + 1 :]:
            (ta, va), (tb, vb) = longest[a], longest[b]
            common = 0
            while common < min(len(va), len(vb)) and va[common] == vb[common]:
                common += 1
            if common in (len(va), len(vb)):
                continue  # one is a prefix of the other
            only_a = [x for x in va[common:] if _acked_via(acked, x, a)]
            only_b = [x for x in vb[common:] if _acked_via(acked, x, b)]
            if only_a and only_b:
                text = (
                    f"key {k!r} diverged between {a} and {b}: {a} served {list(va)!r} and {b} "
                    f"served {list(vb)!r}, neither a prefix of the other, and each side holds "
                    f"appends acknowledged through it ({only_a!r} via {a}, {only_b!r} via {b})"
                )
                return [_case([a, b], [ta, tb, acked[only_a[0]], acked[only_b[0]]], text)]
    return []


def _unseen(
    k: Any, reads: list[tuple[Access, tuple[Any, ...]]], acked: dict[Any, Access]
) -> list[dict[str, Any]]:
    # Only a read through another node can miss the append: each writer's node gets the reads
    # through the others, in order (a key served by one node, the usual case, has none).
    elsewhere: dict[str, list[tuple[Access, tuple[Any, ...]]]] = {}
    for w in acked.values():
        if w.node is not None and w.node not in elsewhere:
            elsewhere[w.node] = [(r, v) for r, v in reads if r.node not in (None, w.node)]
    cases = []
    for v, w in acked.items():
        if w.end is None or w.node is None:
            continue
        for r, seen in elsewhere[w.node]:
            if r.start <= w.end or v in seen:
                continue
            theirs = [x for x in seen if _acked_via(acked, x, r.node) and acked[x].start > w.end]
            if theirs:
                a, b = w.node, r.node
                text = (
                    f"{w.name} appended {v!r} to key {k!r}, acknowledged through {a}; "
                    f"{r.name}, begun later through {b}, read the key without it but with "
                    f"{theirs!r}, appended through {b} after that acknowledgement: {b} accepted "
                    f"writes without {a}'s"
                )
                cases.append(_case([a, b], [w, r, acked[theirs[0]]], text))
                break
    return cases


def _case(nodes: list[str], ops: list[Access], text: str) -> dict[str, Any]:
    window = [min(t.start for t in ops), max(t.end if t.end is not None else t.start for t in ops)]
    return {
        "type": "split-brain",
        "nodes": nodes,
        "window_ns": window,
        "ops": [t.txn for t in ops],
        "explanation": text,
    }


def _acked_via(acked: dict[Any, Access], x: Any, node: str) -> bool:
    t = acked.get(x)
    return t is not None and t.node == node


def _around(faults: list[dict[str, Any]], window: list[int]) -> list[dict[str, Any]]:
    lo, hi = window[0] - MARGIN_NS, window[1] + MARGIN_NS
    return [f for f in faults if f["start"] <= hi and (f["end"] or f["start"]) >= lo]


def _s(ns: int) -> str:
    return f"{ns / 1e9:.3f} s"
