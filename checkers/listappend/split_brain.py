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

from collections import defaultdict
from typing import Any

from checkers.listappend.history import Txn

MARGIN_NS = 5_000_000_000  # faults this close to a case's window are shown with it
CASE_CAP = 20


def check(txns: list[Txn], faults: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """`faults` are the nemesis operations: dicts with start, end (ns), f and value."""
    acked: dict[tuple[Any, Any], Txn] = {}  # (key, element) → the ok txn that appended it
    reads: dict[Any, list[tuple[Txn, tuple[Any, ...]]]] = defaultdict(list)
    for t in txns:
        for f, k, v in t.mops:
            if f == "append" and t.type == "ok":
                acked[(k, v)] = t
            elif f == "r" and t.type == "ok" and v:
                reads[k].append((t, v))
    cases = _diverged(reads, acked) + _unseen(txns, reads, acked)
    for case in cases:
        case["faults"] = _around(faults or [], case["window"])
    return {
        "valid": not cases,
        "anomaly_types": ["split-brain"] if cases else [],
        "anomaly_counts": {"split-brain": len(cases)} if cases else {},
        "anomalies": [_explain(c) for c in cases[:CASE_CAP]],
    }


def _diverged(
    reads: dict[Any, list[tuple[Txn, tuple[Any, ...]]]], acked: dict[tuple[Any, Any], Txn]
) -> list[dict[str, Any]]:
    cases = []
    for k, rs in reads.items():
        longest: dict[str, tuple[Txn, tuple[Any, ...]]] = {}
        for t, v in rs:
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
                only_a = [x for x in va[common:] if _acked_via(acked, k, x, a)]
                only_b = [x for x in vb[common:] if _acked_via(acked, k, x, b)]
                if only_a and only_b:
                    ops = [ta, tb, acked[(k, only_a[0])], acked[(k, only_b[0])]]
                    cases.append(
                        {"sign": "diverged", "key": k, "nodes": [a, b], "reads": [va, vb],
                         "acked": [only_a, only_b], "ops": ops, "window": _window(ops)}
                    )  # fmt: skip
                    break
    return cases


def _unseen(
    txns: list[Txn],
    reads: dict[Any, list[tuple[Txn, tuple[Any, ...]]]],
    acked: dict[tuple[Any, Any], Txn],
) -> list[dict[str, Any]]:
    cases = []
    for (k, v), w in acked.items():
        if w.end is None or w.node is None:
            continue
        for r, seen in reads.get(k, ()):
            if r.node in (None, w.node) or r.start <= w.end or v in seen:
                continue
            theirs = [
                x for x in seen
                if _acked_via(acked, k, x, r.node) and acked[(k, x)].start > w.end
            ]  # fmt: skip
            if theirs:
                ops = [w, r, acked[(k, theirs[0])]]
                cases.append(
                    {"sign": "unseen", "key": k, "nodes": [w.node, r.node], "element": v,
                     "theirs": theirs, "ops": ops, "window": _window(ops)}
                )  # fmt: skip
                break
    return cases


def _acked_via(acked: dict[tuple[Any, Any], Txn], k: Any, x: Any, node: str) -> bool:
    t = acked.get((k, x))
    return t is not None and t.node == node


def _window(ops: list[Txn]) -> tuple[int, int]:
    return min(t.start for t in ops), max(t.end if t.end is not None else t.start for t in ops)


def _around(faults: list[dict[str, Any]], window: tuple[int, int]) -> list[dict[str, Any]]:
    lo, hi = window[0] - MARGIN_NS, window[1] + MARGIN_NS
    return [f for f in faults if f["start"] <= hi and (f["end"] or f["start"]) >= lo]


def _s(ns: int) -> str:
    return f"{ns / 1e9:.3f} s"


def _explain(case: dict[str, Any]) -> dict[str, Any]:
    a, b = case["nodes"]
    k = case["key"]
    lo, hi = case["window"]
    if case["sign"] == "diverged":
        va, vb = case["reads"]
        xa, xb = case["acked"]
        text = (
            f"key {k!r} diverged between {a} and {b}: {a} served {list(va)!r} and {b} served "
            f"{list(vb)!r}, neither a prefix of the other, and each side holds appends "
            f"acknowledged through it ({xa!r} via {a}, {xb!r} via {b})"
        )
    else:
        w, r, _ = case["ops"]
        text = (
            f"{w.name} appended {case['element']!r} to key {k!r}, acknowledged through {a}; "
            f"{r.name}, begun later through {b}, read the key without it but with "
            f"{case['theirs']!r}, appended through {b} after that acknowledgement: {b} accepted "
            f"writes without {a}'s"
        )
    faults = case["faults"]
    if faults:
        text += "; faults around it: " + ", ".join(f"{f['f']} at {_s(f['start'])}" for f in faults)
    text += f" (between {_s(lo)} and {_s(hi)})"
    return {
        "type": "split-brain",
        "nodes": case["nodes"],
        "window_ns": [lo, hi],
        "ops": [t.index for t in case["ops"]],
        "faults": faults,
        "explanation": text,
    }
