"""Process and realtime edges from the transactions' columns: the same edges, in the same order,
as a walk of the history event by event (Elle's sparse realtime frontier) gives, on concurrent
histories of every shape hypothesis draws: overlapping, failed and indeterminate transactions,
and processes that run one after another."""

from __future__ import annotations

from array import array

from hypothesis import given, settings
from hypothesis import strategies as st

from checkers.listappend.graph import (
    PROCESS,
    REALTIME,
    Edges,
    Txns,
    process_edges,
    realtime_edges,
)
from checkers.listappend.history import Txn


def walked_realtime(txns: list[Txn]) -> list[tuple[int, int]]:
    """The frontier walked event by event: an invocation follows every member, a completion
    takes out the members its transaction followed and joins."""
    events = sorted(
        [(t.index, 0, t.index) for t in txns]
        + [(t.complete, 1, t.index) for t in txns if t.type == "ok"]
    )
    frontier: dict[int, None] = {}
    before: dict[int, list[int]] = {}
    edges = []
    for _, kind, t in events:
        if kind == 0:
            before[t] = list(frontier)
            edges += [(a, t) for a in frontier]
        else:
            for a in before.pop(t, ()):
                frontier.pop(a, None)
            frontier[t] = None
    return edges


def walked_process(txns: list[Txn]) -> list[tuple[int, int]]:
    last: dict[int, int] = {}
    edges = []
    for t in sorted((t for t in txns if t.type == "ok"), key=lambda t: t.complete):
        if t.process in last:
            edges.append((last[t.process], t.index))
        last[t.process] = t.index
    return edges


@st.composite
def histories(draw: st.DrawFn) -> list[Txn]:
    """Transactions of a few processes, each invoked after its process's previous one ended,
    with history indices given in time order as the runner gives them."""
    processes = draw(st.integers(1, 5))
    clock: list[tuple[int, int, str]] = []  # (time, process, "invoke" | outcome)
    for p in range(processes):
        now = draw(st.integers(0, 5))
        for _ in range(draw(st.integers(0, 6))):
            begin = now + draw(st.integers(0, 5))
            end = begin + draw(st.integers(1, 20))
            outcome = draw(st.sampled_from(("ok", "ok", "ok", "fail", "info")))
            clock += [(begin * 2, p, "invoke"), (end * 2 + 1, p, outcome)]
            now = end + 1
    clock.sort()
    open_: dict[int, tuple[int, int]] = {}
    txns = []
    for index, (_, p, what) in enumerate(clock):
        if what == "invoke":
            open_[p] = (index, index)
        else:
            invoked, _ = open_.pop(p)
            txns.append(Txn(invoked, index, p, what, invoked, index, ()))
    return sorted(txns, key=lambda t: t.index)


def pairs(edges: Edges, kind: int) -> list[tuple[int, int]]:
    assert set(edges.kind) <= {kind}
    return list(zip(edges.src, edges.dst, strict=True))


@settings(max_examples=300, deadline=None)
@given(histories())
def test_realtime_edges_are_the_walks(txns: list[Txn]) -> None:
    graphed = [t for t in txns if t.type in ("ok", "info")]
    edges = Edges()
    realtime_edges(Txns.of(graphed), edges)
    assert pairs(edges, REALTIME) == walked_realtime(graphed)


@settings(max_examples=300, deadline=None)
@given(histories())
def test_process_edges_are_the_walks(txns: list[Txn]) -> None:
    edges = Edges()
    process_edges(Txns.of(txns), edges)
    assert pairs(edges, PROCESS) == walked_process(txns)


def test_an_empty_history_has_no_order_edges() -> None:
    edges = Edges()
    realtime_edges(Txns.of([]), edges)
    process_edges(Txns.of([]), edges)
    assert edges.src == array("q") and not len(edges)


def test_processes_of_transactions_found_by_index() -> None:
    txns = Txns.of([Txn(4, 5, 7, "ok", 0, 1, ()), Txn(1, 2, 3, "fail", 0, 1, ())])
    assert txns.process_of([1, 4, 9]) == {1: 3, 4: 7}
    assert Txns.of([]).process_of([1]) == {}
