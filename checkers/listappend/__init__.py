"""Elle's list-append analysis (Kingsbury & Alvaro, VLDB 2021), our own implementation.

Two halves. Per key (keys.py): the version order inferred from reads, the ww/wr/rw dependency
edges, and the anomalies that need no cycle; Spark runs that for every key in parallel
(checkers/spark/append_keys.py), and `check` below runs it in process. On the driver (`judge`): the
edges as integer arrays, process or realtime order, strongly connected components and cycle search
(graph.py, cycles.py), Elle's names for the cycles, and which of the chosen consistency models the
history violates and the weakest models it rules out.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from checkers.listappend import cycles, keys, models
from checkers.listappend.graph import (
    EDGE_NAMES,
    NO_ROW,
    PROCESS,
    RW,
    WR,
    WW,
    Edges,
    Txns,
    build,
    process_edges,
    realtime_edges,
)
from checkers.listappend.history import INIT, Txn
from checkers.listappend.keys import LOST, Access
from checkers.rollback import RESURRECTED
from core.contract import Contract
from core.history import FINAL_READS_PROCESS

DEFAULT_BUDGET = 10.0  # seconds of cycle search per strongly connected component
CASE_CAP = 20  # cases kept per anomaly type; the counts are complete
PER_TXN = ("internal", "future-read")  # reported once per transaction, at its first such read

Edge = tuple[int, int, int]
# Given the rows of some edges, each of their keys' edges with reasons: (key, *reason).
Reasons = Callable[[set[int]], dict[Edge, tuple[Any, ...]]]


def check(
    txns: Iterable[Txn],
    model: str = "serializable",
    budget: float = DEFAULT_BUDGET,
    contract: Contract = Contract.DURABLE,
) -> dict[str, Any]:
    """Judge a list-append history against `model`, in process. Only client transactions are
    given. The confirm/rollback `contract` adds: no resurrected rollback."""
    models.check_model(model)
    txns = sorted(txns, key=lambda t: t.index)
    edges = Edges()
    row_key: list[Any] = []
    cases: list[dict[str, Any]] = []
    with keys.paused_gc():
        per_key = keys.by_key(txns)
        for k, accesses in per_key.items():
            result = keys.analyze(k, accesses)
            add_edges(edges, result.edges)
            row_key.extend([k] * len(result.edges))
            cases += result.cases

    def reasons(rows: set[int]) -> dict[Edge, tuple[Any, ...]]:
        return explained({row_key[r]: per_key[row_key[r]] for r in rows})

    return judge(Txns.of(txns), edges, cases, model, budget, reasons, contract)


def add_edges(edges: Edges, found: Sequence[Edge]) -> None:
    """Typed edges (from, to, kind) appended to the arrays."""
    edges.src.extend([e[0] for e in found])
    edges.dst.extend([e[1] for e in found])
    edges.kind.extend([e[2] for e in found])


def explained(accesses: dict[Any, list[Access]]) -> dict[Edge, tuple[Any, ...]]:
    """The reasons of these keys' edges: each key analysed again, keeping them."""
    out: dict[Edge, tuple[Any, ...]] = {}
    for k, acc in accesses.items():
        result = keys.analyze(k, acc, explain=True)
        for edge, reason in zip(result.edges, result.reasons, strict=True):
            out.setdefault(edge, (k, *reason))
    return out


def judge(
    txns: Txns,
    edges: Edges,
    cases: list[dict[str, Any]],
    model: str,
    budget: float,
    reasons: Reasons,
    contract: Contract = Contract.DURABLE,
) -> dict[str, Any]:
    """The verdict from the per-key results: `txns` are every client transaction in invocation
    order, `edges` the data edges of all keys, `cases` the anomaly cases of all keys."""
    model = models.check_model(model)
    prohibited = models.prohibited([model]) | {LOST}  # durability: every model needs it
    if contract == Contract.CONFIRM_ROLLBACK:
        prohibited |= {RESURRECTED}
    reportable = prohibited | {"empty-transaction-graph", "cycle-search-timeout"}
    wanted = [n for n in cycles.ORDER if n in prohibited]
    graphed = txns.where(txns.is_("ok", "info"))
    if any(n.endswith("-realtime") for n in wanted):
        realtime_edges(graphed, edges)
    elif any(n.endswith("-process") for n in wanted):
        process_edges(graphed, edges)

    lost_reads = [c["ops"][-1] for c in cases if c["type"] == LOST]
    found = _by_type(lost_on_evidence(cases, txns.process_of(lost_reads)))
    if not len(edges):
        found["empty-transaction-graph"] = [
            {"type": "empty-transaction-graph", "ops": [], "explanation": EMPTY}
        ]
    g, pairs = build(edges)
    cycle_cases, timeouts = cycles.search(g, wanted, budget, models.implied)
    if cycle_cases:
        steps = [step for cyc in cycle_cases.values() for c in cyc for step in c]
        why = reasons({g.row[s] for s in steps} - {NO_ROW})
        process_of = txns.process_of(a for a, _, _ in steps)
        for name, cyc in cycle_cases.items():
            found[name] = [explain_cycle(name, c, why, process_of) for c in cyc]
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
        "edge_count": pairs,
        # what the cycle search had to decide: transactions in cycles, in how many
        # components, the largest of them
        "cyclic": {
            "txns": sum(g.components),
            "components": len(g.components),
            "largest": g.components[0] if g.components else 0,
        },
        "other_anomaly_types": sorted(set(found) - set(reported)),
    }


def lost_on_evidence(
    cases: list[dict[str, Any]], process_of: dict[int, int]
) -> list[dict[str, Any]]:
    """The lost-append cases that are evidence of loss: those whose read is a final read (taken
    after the faults healed and the cluster settled), each saying so. Any other read may, in
    Elle's models, be ordered before an append acknowledged before it began; under a model with
    real-time order such a read is a real-time cycle, named as Elle names it."""
    kept = []
    for case in cases:
        if case["type"] != LOST:
            kept.append(case)
            continue
        process = process_of.get(case["ops"][-1])
        if isinstance(process, int) and process >= FINAL_READS_PROCESS:
            rests = "it rests on a final read, taken after the faults healed"
            kept.append(case | {"explanation": f"{case['explanation']} ({rests})"})
    return kept


def _by_type(cases: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Cases grouped by type in operation order; the per-transaction kinds once per
    transaction (the per-key analysis finds them once per key)."""
    found: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for case in sorted(cases, key=lambda c: (c["type"], c["ops"], c.get("pos", 0))):
        kept = found[case["type"]]
        if case["type"] in PER_TXN and kept and kept[-1]["ops"] == case["ops"]:
            continue
        kept.append({k: v for k, v in case.items() if k != "pos"})
    return dict(found)


EMPTY = (
    "No transaction depends on another (no read observed any append), so the history says "
    "nothing about isolation."
)


def step_sentence(a: str, b: str, kind: int, why: tuple[Any, ...], process: Any) -> str:
    if kind == WW:
        k, prev, v = why
        return f"{b} appended {v!r} to key {k!r} right after {prev!r}, which {a} appended"
    if kind == WR:
        k, v = why
        return f"{b} read key {k!r} up to {v!r}, which {a} appended"
    if kind == RW:
        k, prev, v = why
        seen = "empty" if prev is INIT else f"up to {prev!r}"
        return f"{a} read key {k!r} {seen}, so it did not see {v!r}, which {b} appended next"
    if kind == PROCESS:
        return f"{b} ran after {a} on process {process}"
    return f"{a} completed before {b} began"


def explain_cycle(
    name: str,
    cycle: list[Edge],
    why: dict[Edge, tuple[Any, ...]],
    process_of: dict[int, Any],
) -> dict[str, Any]:
    steps = []
    for a, b, kind in cycle:
        text = step_sentence(f"T{a}", f"T{b}", kind, why.get((a, b, kind), ()), process_of[a])
        steps.append(
            {"from": f"T{a}", "to": f"T{b}", "edge": EDGE_NAMES[kind], "explanation": text}
        )
    names = [f"T{a}" for a, _, _ in cycle] + [f"T{cycle[0][0]}"]
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
