"""Elle's list-append analysis (Kingsbury & Alvaro, VLDB 2021), our own implementation.

`check(txns, models)` is a pure function of the transactions: it infers version orders from
reads, builds ww/wr/rw (and process or realtime) dependency edges, searches the graph for cycles
and names them as Elle does, finds the anomalies that need no cycle, and says which of the chosen
consistency models the history violates and the weakest models it rules out.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from checkers.listappend import analysis, cycles, models
from checkers.listappend.analysis import EDGE_NAMES, PROCESS, RW, WR, WW, Graph
from checkers.listappend.history import INIT, Txn

DEFAULT_BUDGET = 10.0  # seconds of cycle search per strongly connected component
CASE_CAP = 20  # cases kept per anomaly type; the counts are complete
LOST = "lost-append"  # ours, not Elle's: an acknowledged append missing from a later read


def check(
    txns: Iterable[Txn], model: str = "serializable", budget: float = DEFAULT_BUDGET
) -> dict[str, Any]:
    """Judge a list-append history against `model`. Only client transactions are given."""
    model = models.check_model(model)
    txns = sorted(txns, key=lambda t: t.index)
    prohibited = models.prohibited([model]) | {LOST}  # durability: every model needs it
    reportable = prohibited | {"empty-transaction-graph", "cycle-search-timeout"}
    graphed = [t for t in txns if t.type in ("ok", "info")]
    versions = analysis.Versions(graphed + [t for t in txns if t.type == "fail"])
    g = analysis.data_edges(graphed, versions)
    wanted = [n for n in cycles.ORDER if n in prohibited]
    if any(n.endswith("-realtime") for n in wanted):
        analysis.realtime_edges(g, graphed)
    elif any(n.endswith("-process") for n in wanted):
        analysis.process_edges(g, graphed)
    by_index = {t.index: t for t in txns}

    found: dict[str, list[dict[str, Any]]] = {}
    oks = [t for t in txns if t.type == "ok"]
    plain = {
        "duplicate-elements": analysis.duplicate_elements(graphed),
        "incompatible-order": analysis.incompatible_orders(graphed),
        "G1a": analysis.aborted_reads(oks, versions),
        "G1b": analysis.intermediate_reads(txns),
        "internal": analysis.internal(oks),
        "future-read": analysis.future_reads(oks),
        "lost-update": analysis.lost_updates(oks),
        "dirty-update": analysis.dirty_updates(versions),
        LOST: analysis.lost_appends(txns),
    }
    for name, cases in plain.items():
        if cases:
            found[name] = [explain_case(name, c) for c in cases]
    if not g.out:
        found["empty-transaction-graph"] = [
            {"type": "empty-transaction-graph", "ops": [], "explanation": EMPTY}
        ]
    cycle_cases, timeouts = cycles.search(g, wanted, budget, models.implied)
    for name, cyc in cycle_cases.items():
        found[name] = [explain_cycle(name, c, g, by_index) for c in cyc]
    if timeouts:
        found["cycle-search-timeout"] = [timeout_case(t) for t in timeouts]

    counts = {name: len(cases) for name, cases in sorted(found.items())}
    reported = {n: c for n, c in found.items() if n in reportable}
    invalid = [n for n in reported if n in prohibited]
    # as Elle: anything reported but allowed (no dependencies, a search out of time) leaves
    # the verdict undecided rather than valid
    valid: bool | str = False if invalid else ("unknown" if reported else True)
    not_, also_not = models.boundary(found)
    anomalies = [case for name in sorted(reported) for case in reported[name][:CASE_CAP]]
    return {
        "valid": valid,
        "model": model,
        "anomaly_types": sorted(reported),
        "anomaly_counts": {n: counts[n] for n in sorted(reported)},
        "anomalies": anomalies,
        "not": not_,
        "also_not": also_not,
        "txn_count": len(txns),
        "edge_count": sum(len(e) for e in g.out.values()),
        "other_anomaly_types": sorted(set(found) - set(reported)),
    }


EMPTY = (
    "No transaction depends on another (no read observed any append), so the history says "
    "nothing about isolation."
)


def _v(value: Any) -> str:
    return "the empty list" if value is INIT else repr(value)


def step_sentence(a: Txn, b: Txn, kind: int, why: tuple[Any, ...]) -> str:
    if kind == WW:
        k, prev, v = why
        return f"{b.name} appended {v!r} to key {k!r} right after {prev!r}, which {a.name} appended"
    if kind == WR:
        k, v = why
        return f"{b.name} read key {k!r} up to {v!r}, which {a.name} appended"
    if kind == RW:
        k, prev, v = why
        seen = "empty" if prev is INIT else f"up to {prev!r}"
        return (
            f"{a.name} read key {k!r} {seen}, so it did not see {v!r}, which {b.name} appended next"
        )
    if kind == PROCESS:
        return f"{b.name} ran after {a.name} on process {a.process}"
    return f"{a.name} completed before {b.name} began"


def explain_cycle(
    name: str, cycle: list[tuple[int, int, int]], g: Graph, txns: dict[int, Txn]
) -> dict[str, Any]:
    steps = []
    for a, b, kind in cycle:
        why = g.why.get((a, b, kind), ())
        steps.append(
            {
                "from": txns[a].name,
                "to": txns[b].name,
                "edge": EDGE_NAMES[kind],
                "explanation": step_sentence(txns[a], txns[b], kind, why),
            }
        )
    names = [txns[a].name for a, _, _ in cycle] + [txns[cycle[0][0]].name]
    sentence = (
        f"The transactions {' → '.join(names)} form a cycle in which each must come "
        "before the next, so no order of them explains what they saw. "
        + "; ".join(s["explanation"] for s in steps)
        + "."
    )
    return {
        "type": name,
        "ops": [a for a, _, _ in cycle],
        "cycle": names,
        "steps": steps,
        "explanation": sentence,
    }


def explain_case(name: str, case: dict[str, Any]) -> dict[str, Any]:
    """One non-cycle anomaly as plain data with a sentence."""
    t: Txn | None = case.get("op")
    k = case.get("key")
    if name == "G1a":
        text = (
            f"{t.name} read {case['element']!r} in key {k!r}, but {case['writer'].name}, which "
            "appended it, failed: an aborted write was read"
        )
        ops = [t.index, case["writer"].index]
    elif name == "G1b":
        text = (
            f"{t.name} read key {k!r} ending at {case['element']!r}, which "
            f"{case['writer'].name} overwrote with a later append in the same transaction: an "
            "intermediate state was read"
        )
        ops = [t.index, case["writer"].index]
    elif name == "internal":
        text = (
            f"{t.name} read {case['read']!r} from key {k!r}, but its own earlier reads and "
            f"appends say it should have seen {case['expected']!r}"
        )
        ops = [t.index]
    elif name == "future-read":
        text = f"{t.name} read {case['element']!r} in key {k!r} before appending it itself"
        ops = [t.index]
    elif name == "duplicate-elements":
        text = f"{t.name} read key {k!r} as {case['read']!r}, with {case['duplicates']!r} twice"
        ops = [t.index]
    elif name == "incompatible-order":
        a, b = case["values"]
        x, y = case["ops"]
        text = (
            f"{x.name} read key {k!r} as {a!r} and {y.name} as {b!r}: neither is a prefix of the "
            "other, so the key has no single order of versions"
        )
        ops = [x.index, y.index]
    elif name == "lost-update":
        names = ", ".join(o.name for o in case["ops"])
        text = (
            f"{names} all read key {k!r} as {_v(case['read'] if case['read'] else INIT)} and "
            "then appended to it: each update was made without seeing the others"
        )
        ops = [o.index for o in case["ops"]]
    elif name == LOST:
        r = case["read"]
        shows = (
            f"which shows {case['newer']!r}, appended after it was acknowledged"
            if case["newer"]
            else "the last read of that key"
        )
        text = (
            f"{t.name} appended {case['element']!r} to key {k!r} and was acknowledged, but "
            f"{r.name}, which began afterwards, read the key without it, {shows}: an "
            "acknowledged write was lost"
        )
        ops = [t.index, r.index]
    else:  # dirty-update
        text = (
            f"{t.name} appended {case['element']!r} to key {k!r} on top of a version written by "
            f"{case['failed'].name}, which failed"
        )
        ops = [case["failed"].index, t.index]
    return {"type": name, "ops": ops, "explanation": text}


def timeout_case(t: dict[str, Any]) -> dict[str, Any]:
    searched = ", ".join(t["searched"]) or "nothing"
    return {
        "type": "cycle-search-timeout",
        "ops": [],
        "explanation": (
            f"the search for {t['type']} cycles among {t['scc_size']} interdependent "
            f"transactions ran out of time (found before that: {searched}); that part of the "
            "history is undecided"
        ),
    }
